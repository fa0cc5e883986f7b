//! rebalance-guard: placeholder, filled in below.
pub mod guard;
