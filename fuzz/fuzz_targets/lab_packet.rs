//! libFuzzer over [`wirebench_fuzz_targets::lab_packet`] (its documentation says what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wirebench_fuzz_targets::lab_packet(data));
