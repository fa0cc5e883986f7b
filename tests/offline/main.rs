//! The tier of tests that need no broker, no JVM and no peer client: the guard, the in-memory
//! consumer, codecs and framing, hostile bytes handed to the decoder, configuration, and the checks
//! of the source layout and the design document. `scripts/test --quick` runs this tier (with the
//! library's unit tests), for the edit loop; it starts nothing but the test processes.
//!
//! One binary, modules by what they test (a test is `offline::MODULE::...::name` in nextest's
//! list and filters, e.g. `cargo nextest run --features tls --test offline -E 'test(/^guard::/)'`).
//! Its global allocator is `counting_alloc`'s, with the freed-block watcher of
//! `config::secrets_wiped`: the allocation bounds and the secrets check share it.
//!
//! Modules:
//! * [`config`]: Configuration tests that need no broker.
//! * [`consumer`]: The consumer without a broker.
//! * [`fuzz_corpus`]: The fuzz corpus as ordinary tests.
//! * [`guard`]: The guard's rules, in memory.
//! * [`layout`]: Checks of the repository itself.
//! * [`share`]: The share consumer without a broker.
//! * [`wire`]: The wire layer against fake peers on 127.0.0.1 and hostile bytes.

#[path = "../support/counting_alloc.rs"]
mod counting_alloc;
#[path = "../support/mod.rs"]
mod support;

/// The binary's one allocator: counting for the allocation bounds (`wire`), watching freed
/// blocks for `config::secrets_wiped`.
#[global_allocator]
static ALLOCATOR: counting_alloc::Counting =
    counting_alloc::Counting::watching(config::secrets_wiped::scan);

pub mod config;
mod consumer;
mod fuzz_corpus;
mod guard;
mod layout;
mod share;
mod wire;
