//! Fuzz target: see `rebalance_guard::fuzzing::jaas` for the input layout and the properties.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rebalance_guard::fuzzing::jaas::check(data);
});
