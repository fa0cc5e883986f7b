//! The checks behind the fuzz targets in `fuzz/`, shared with the corpus replay tests.
//!
//! A fuzz target is only as good as what it asserts, and a bug it found stays fixed only if CI
//! replays the input without a nightly toolchain. So each target's logic lives here, as a plain
//! function from bytes to "no panic, every property held": `fuzz/fuzz_targets/<name>.rs` calls
//! it under libFuzzer, and the test `offline::fuzz_corpus` calls that same function on each file of
//! `fuzz/corpus/<name>/` and `fuzz/artifacts/<name>/` with the stable toolchain.
//!
//! A check panics (with a message naming the property) when a property fails: that is how
//! libFuzzer and the test harness see a finding. Nothing here is part of the consumer's API.
//!
//! The targets, one file each: `fetch_partition.rs` (a, one partition of a Fetch response),
//! `decompress.rs` (b, the decompressors), `responses.rs` (c, every response the client decodes),
//! `group_protocol.rs` (d, group member metadata, assignments and the assignors), `scram.rs` (e,
//! the server's SCRAM messages), `jaas.rs` (f, the `sasl.jaas.config` line) and `properties.rs`
//! (g, `.properties` text); `batch_writer.rs` writes record batches byte by byte, hostile ones
//! included, for the seeds and the tests.

pub mod batch_writer;
pub mod decompress;
pub mod fetch_partition;
pub mod group_protocol;
pub mod jaas;
pub mod properties;
pub mod responses;
pub mod scram;

/// Every fuzz target: its name (the folder under `fuzz/corpus/` and the file under
/// `fuzz/fuzz_targets/`), its check, and the seed inputs it starts from.
pub const TARGETS: &[Target] = &[
    Target {
        name: "fetch_partition",
        check: fetch_partition::check,
        seeds: fetch_partition::seeds,
    },
    Target {
        name: "decompress",
        check: decompress::check,
        seeds: decompress::seeds,
    },
    Target {
        name: "group_protocol",
        check: group_protocol::check,
        seeds: group_protocol::seeds,
    },
    Target {
        name: "responses",
        check: responses::check,
        seeds: responses::seeds,
    },
    Target {
        name: "scram",
        check: scram::check,
        seeds: scram::seeds,
    },
    Target {
        name: "jaas",
        check: jaas::check,
        seeds: jaas::seeds,
    },
    Target {
        name: "properties",
        check: properties::check,
        seeds: properties::seeds,
    },
];

/// One fuzz target as the replay tests and the seed writer see it.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The target's name.
    pub name: &'static str,
    /// Runs the target on one input; panics on a broken property.
    pub check: fn(&[u8]),
    /// Hand-made inputs that reach deep into the decoder (valid batches of every codec,
    /// transactions, real member metadata), from which the fuzzer mutates.
    pub seeds: fn() -> Vec<Vec<u8>>,
}
