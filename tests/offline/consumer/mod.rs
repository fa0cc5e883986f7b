//! The consumer without a broker: the in-memory consumer against the in-memory coordinator.
//!
//! Modules:
//! * [`in_memory`]: The whole consumer driven in memory.
//! * [`fencing_token`]: the fencing token's monotonicity across random joins, leaves, losses
//!   and static restarts, under both protocols.

mod fencing_token;
mod in_memory;
