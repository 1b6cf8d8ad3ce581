//! libFuzzer over [`wirebench_fuzz_targets::iperf3_params`] (its documentation says what it
//! checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wirebench_fuzz_targets::iperf3_params(data));
