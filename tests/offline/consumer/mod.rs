//! The consumer without a broker: the in-memory consumer against the in-memory coordinator.
//!
//! Modules:
//! * [`in_memory`]: The whole consumer driven in memory.

mod in_memory;
