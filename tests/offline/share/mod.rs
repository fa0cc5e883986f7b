//! The share consumer without a broker: the whole `ShareConsumer` against the in-memory share
//! coordinator, on a manual clock.
//!
//! Modules:
//! * [`in_memory`]: The whole share consumer driven in memory.

mod in_memory;
