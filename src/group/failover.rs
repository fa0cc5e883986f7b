//! Coordinator failover for the membership threads (the classic heartbeat thread, its
//! cooperative rounds, and the KIP-848 membership thread).
//!
//! When the coordinator dies, is shut down or hands the group over (NOT_COORDINATOR,
//! COORDINATOR_NOT_AVAILABLE), or is still loading it (COORDINATOR_LOAD_IN_PROGRESS), the
//! member must find the new one and heartbeat there before its session runs out. Kafka moves a
//! group within milliseconds of a controlled shutdown and within `broker.session.timeout.ms` of a
//! crash; what the member adds on top is its own retry pacing. Two things keep that small:
//!
//! - **Short, capped retries** ([`Failover`]): the look-up (FindCoordinator to any live broker)
//!   and the heartbeat that follows are retried every [`ClientConfig::retry_backoff`], doubling
//!   up to [`COORDINATOR_RETRY_MAX`], not at the heartbeat interval nor at
//!   `reconnect.backoff.max.ms`; a heartbeat accepted by the new coordinator ends the outage.
//! - **Bounded connects** ([`bound_membership_client`]): a connect to a coordinator that does not
//!   answer (a black-holed host, a hung JVM whose kernel still accepts) gives up after
//!   [`CONNECT_BOUND`], so one dead address never holds the thread for the default 10 s.
//!
//! The first accepted heartbeat after an outage is logged at info with the time the outage
//! lasted, so an operator (and the fault tests) can read how long a failover took.

use std::time::{Duration, Instant};

use crate::wire::ClientConfig;

/// The longest pause between two coordinator look-ups (or heartbeat retries) while the
/// coordinator is lost. Why 250 ms: a FindCoordinator costs the answering broker next to nothing,
/// four a second per member is far below what a broker serves, and it keeps the time from the
/// new coordinator's election to our first accepted heartbeat well under a second.
pub(crate) const COORDINATOR_RETRY_MAX: Duration = Duration::from_millis(250);

/// The longest a membership thread waits for a connection (TCP and TLS) to a broker. Why 2 s: a
/// loopback or LAN connect takes milliseconds and a cross-region TLS handshake a few hundred;
/// past 2 s the broker is gone or hung, and the heartbeat must look elsewhere while the session
/// still runs.
pub(crate) const CONNECT_BOUND: Duration = Duration::from_secs(2);

/// Bounds a membership thread's client: connects give up after [`CONNECT_BOUND`], and a broker
/// that failed is tried again after at most [`COORDINATOR_RETRY_MAX`] (the pool's backoff), so a
/// coordinator that comes back, or a node that restarted and now coordinates the group, is not
/// kept waiting out `reconnect.backoff.max.ms`.
pub(crate) fn bound_membership_client(config: &mut ClientConfig) {
    config.connection.connect_timeout = config.connection.connect_timeout.min(CONNECT_BOUND);
    config.retry_backoff_max = config
        .retry_backoff_max
        .min(COORDINATOR_RETRY_MAX)
        .max(config.retry_backoff.min(COORDINATOR_RETRY_MAX));
}

/// One membership thread's view of a coordinator outage: since when it lasts, which node was
/// lost, and the pacing of the retries.
#[derive(Debug)]
pub(crate) struct Failover {
    group_id: String,
    base: Duration,
    backoff: Duration,
    outage: Option<Outage>,
}

#[derive(Debug, Clone, Copy)]
struct Outage {
    since: Instant,
    node: Option<i32>,
}

impl Failover {
    /// A member of `group_id` whose retries start at `base` (`retry.backoff.ms`).
    pub(crate) fn new(group_id: &str, base: Duration) -> Self {
        let base = base.min(COORDINATOR_RETRY_MAX);
        Failover {
            group_id: group_id.to_string(),
            base,
            backoff: base,
            outage: None,
        }
    }

    /// The coordinator (`node`, when known) failed at `now` or named itself unavailable: the
    /// outage starts (if it had not) and the returned delay is when to look it up again.
    pub(crate) fn lost(&mut self, now: Instant, node: Option<i32>) -> Duration {
        if self.outage.is_none() {
            self.outage = Some(Outage { since: now, node });
            self.backoff = self.base;
        }
        let delay = self.backoff;
        self.backoff = (self.backoff * 2).min(COORDINATOR_RETRY_MAX);
        delay
    }

    /// Whether an outage is under way.
    pub(crate) fn in_outage(&self) -> bool {
        self.outage.is_some()
    }

    /// `node` accepted a heartbeat at `now`: an outage under way ends, and is logged with how
    /// long it lasted. Returns that duration.
    pub(crate) fn accepted(&mut self, now: Instant, node: Option<i32>) -> Option<Duration> {
        let outage = self.outage.take()?;
        self.backoff = self.base;
        let lasted = now.saturating_duration_since(outage.since);
        log::info!(
            "group {}: coordinator node {} accepted a heartbeat {} ms after the coordinator (node \
             {}) was lost",
            self.group_id,
            node.map_or_else(|| "?".to_string(), |n| n.to_string()),
            lasted.as_millis(),
            outage
                .node
                .map_or_else(|| "?".to_string(), |n| n.to_string()),
        );
        Some(lasted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_from_the_base_up_to_the_cap_and_restart_after_an_accepted_heartbeat() {
        let t0 = Instant::now();
        let mut f = Failover::new("g", Duration::from_millis(100));
        assert!(!f.in_outage());
        assert_eq!(f.lost(t0, Some(2)), Duration::from_millis(100));
        assert_eq!(f.lost(t0, Some(2)), Duration::from_millis(200));
        assert_eq!(f.lost(t0, None), COORDINATOR_RETRY_MAX);
        assert_eq!(f.lost(t0, None), COORDINATOR_RETRY_MAX);
        assert!(f.in_outage());
        let lasted = f.accepted(t0 + Duration::from_millis(700), Some(3));
        assert_eq!(lasted, Some(Duration::from_millis(700)));
        assert!(!f.in_outage());
        assert_eq!(f.accepted(t0, Some(3)), None, "no outage, nothing to log");
        assert_eq!(f.lost(t0, Some(3)), Duration::from_millis(100));
    }

    #[test]
    fn a_long_configured_backoff_is_capped() {
        let mut f = Failover::new("g", Duration::from_secs(5));
        assert_eq!(f.lost(Instant::now(), None), COORDINATOR_RETRY_MAX);
    }

    #[test]
    fn the_membership_client_connects_briefly_and_backs_off_briefly() {
        let mut config = ClientConfig::new(["127.0.0.1:9092"]);
        config.retry_backoff = Duration::from_millis(100);
        config.retry_backoff_max = Duration::from_secs(10);
        config.connection.connect_timeout = Duration::from_secs(10);
        bound_membership_client(&mut config);
        assert_eq!(config.connection.connect_timeout, CONNECT_BOUND);
        assert_eq!(config.retry_backoff_max, COORDINATOR_RETRY_MAX);
        config.connection.connect_timeout = Duration::from_millis(300);
        bound_membership_client(&mut config);
        assert_eq!(
            config.connection.connect_timeout,
            Duration::from_millis(300)
        );
    }
}
