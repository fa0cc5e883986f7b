//! The consumer on single brokers: its API, the poll loop, batches, workers, rebalances and
//! revocations, commits, positions, patterns, KIP-848.
//!
//! Modules:
//! * [`api`]: The calls a Java or rust-rdkafka user looks for, on real Kafka (the run's shared 4.x
//!   broker).
//! * [`broker_faults`]: A broker that is down or slow holds only its own partitions (the mock
//!   cluster, two brokers).
//! * [`commit_interval`]: A member frozen mid-batch costs its next owner about one
//!   `commit.interval.ms` of repeated work, not the whole batch.
//! * [`commit_thread`]: The commit thread.
//! * [`failure_detection`]: The warning at subscribe when the lease bound does not outlast the
//!   cluster's failure detection (issue 21, item 6), on real Kafka 4.x.
//! * [`group_protocol`]: The consumer group protocol (KIP-848) on real Apache Kafka 4.x, with the
//!   sans-I/O machine (`group::consumer_group`) driven directly by the wire functions.
//! * [`kip848`]: The consumer group protocol (KIP-848, `group.protocol=consumer`) through the whole
//!   consumer (`Consumer::subscribe` → poll loop → guard → commits), on real Kafka 4.x.
//! * [`lag`]: Lag on real Kafka.
//! * [`loop_`]: The consumer end to end against real brokers.
//! * [`order_book_pg`]: Exactly once into a database: the PostgreSQL order book's members
//!   (examples/order_book_pg) through a zombie write and a kill, on real Kafka and PostgreSQL.
//! * [`patterns`]: Pattern subscriptions (`Consumer::subscribe_pattern`) on real Apache Kafka.
//! * [`positions`]: Where fetching starts, and what happens when that is not known.
//! * [`rebalance`]: What a rebalance stops, seen from the records.
//! * [`redelivery`]: What comes again after a handler fails.
//! * [`reset_map`]: An offset reset discards the committed completed-offsets map of the log that is
//!   gone.
//! * [`retries`]: The failure policy on real Kafka 4.x (the run's shared broker, unique topics and
//!   groups).
//! * [`revocation`]: Revocations and the end of a lease on real brokers, gathered.
//! * [`worker_failures`]: The decoupled mode when handlers fail, panic or hang.
//! * [`workers`]: The decoupled mode against real brokers.

mod api;
mod broker_faults;
mod commit_interval;
mod commit_thread;
mod failure_detection;
mod fencing_token;
mod group_protocol;
mod kip848;
mod lag;
mod loop_;
mod order_book_pg;
mod patterns;
mod positions;
mod rebalance;
mod redelivery;
mod reset_map;
mod retries;
mod revocation;
mod worker_failures;
mod workers;
