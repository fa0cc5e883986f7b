//! Revocations and the end of a lease on real brokers, gathered: commits fenced at the end of a
//! membership, leases that expire with the session, the poll loop around a lapsed session, work
//! that went stale, a worker that crashed between its effect and its completion.
//!
//! Modules:
//! * [`commit_fencing`]: Commits and the end of a membership.
//! * [`lease_expiry`]: A lease that expires by time.
//! * [`session_lapse`]: What the poll loop does around the session bound (issue 20, item 6), on
//!   real Kafka 4.x.
//! * [`stale_work`]: Work skipped because its lease was no longer current is done later, never
//!   forgotten.
//! * [`worker_crashes`]: The held-open rebalance test, extended to a crash in the decoupled mode.

mod commit_fencing;
mod lease_expiry;
mod session_lapse;
mod stale_work;
mod worker_crashes;
