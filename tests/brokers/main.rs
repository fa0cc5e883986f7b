//! The tier of tests on single brokers: the run's shared Apache Kafka 4.x and 3.9 (started once by
//! `scripts/test`), librdkafka's mock cluster and tansu (started by the tests that use them), and
//! the Java and Python peer clients beside our members.
//!
//! One binary, modules by what they test. A test that runs on several brokers is written once over
//! the broker and instantiated per broker by `support::on_brokers!`, so the broker is a module of
//! its name: `consumer::rebalance::kafka::kept_partitions_flow_while_the_group_rebalances`,
//! `...::mock::...`, `...::tansu::...`, and `kafka3` for the 3.9 broker where it is meant. Filters
//! follow: `-E 'test(/::mock::/)'` runs what runs on the mock. Its global allocator is
//! `counting_alloc`'s (the hostile-broker tests bound the heap an attack costs).
//!
//! Modules:
//! * [`consumer`]: The consumer on single brokers.
//! * [`group`]: The group layer on single brokers.
//! * [`producer`]: The producer on single brokers.
//! * [`share`]: Share groups on the shared Kafka 4.x broker.
//! * [`smoke`]: Proves the test-broker infrastructure works with no code of ours on the wire.
//! * [`wire`]: The wire client on single brokers.

#[path = "../support/counting_alloc.rs"]
mod counting_alloc;
#[path = "../support/on_brokers.rs"]
mod on_brokers;
#[path = "../support/mod.rs"]
mod support;

/// The binary's one allocator: counting, for the hostile-broker tests (`wire::hostile`).
#[global_allocator]
static ALLOCATOR: counting_alloc::Counting = counting_alloc::Counting::plain();

mod consumer;
mod group;
mod producer;
mod share;
mod smoke;
mod wire;
