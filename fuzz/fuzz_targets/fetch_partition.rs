//! Fuzz target: see `rebalance_guard::fuzzing::fetch_partition` for the input layout and the properties.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rebalance_guard::fuzzing::fetch_partition::check(data);
});
