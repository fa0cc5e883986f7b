//! The bottom layer: the vocabulary every other layer names, and nothing that depends on any of
//! them.
//!
//! Why a layer of its own: a partition and the kind of a failure are named by the guard, the
//! wire client, the group, both consumers and the metrics alike. Kept in one of those layers,
//! every layer below it would have to reach up (or through the crate root) to name them.
//!
//! - `partition.rs`: [`TopicPartition`](partition::TopicPartition) and the fast hasher, map
//!   and set types keyed by it.
//! - `error_kind.rs`: [`ErrorKind`](error_kind::ErrorKind), the situation every error type's
//!   `kind()` reports.
//! - `panic.rs`: the text of a caught panic, for every thread that reports one.

pub(crate) mod error_kind;
pub(crate) mod panic;
pub(crate) mod partition;
