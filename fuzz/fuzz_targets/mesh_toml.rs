//! libFuzzer over [`wirebench_fuzz_targets::mesh_toml`] (its documentation says what it checks).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wirebench_fuzz_targets::mesh_toml(data));
