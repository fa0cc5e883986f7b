//! The guard's rules, in memory: each rule alone, its completed-offsets map, seeks, released
//! work, and random sequences against a naive model.
//!
//! Modules:
//! * [`completed_map`]: Rule 6 of the guard, in memory.
//! * [`properties`]: Random sequences of assign / process / complete / release / read again /
//!   revoke / lost / commit, checked against a deliberately naive model.
//! * [`released_work`]: Work that was handed out and did not happen must come again, and its
//!   idempotency key must not outlive it.
//! * [`seek`]: A seek is a guard event.
//! * [`verification`]: The guard's rules, each checked in memory.

mod completed_map;
mod properties;
mod released_work;
mod seek;
mod verification;
