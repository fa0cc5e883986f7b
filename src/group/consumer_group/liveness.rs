//! How long this member may trust its ownership without a fresh heartbeat answer.
//!
//! The classic protocol sends the session timeout with every JoinGroup, so the session bound
//! (`guard/session_bound.rs`) is renewed from each answered request's send time plus
//! `session.timeout.ms`. The consumer group protocol keeps the session timeout on the broker
//! (`group.consumer.session.timeout.ms`, 45 s by default) and tells the member only the heartbeat
//! interval. So the bound is derived from what the member is told: [`SESSION_BOUND_INTERVALS`]
//! heartbeat intervals, which assumes the broker's session timeout is at least that many
//! intervals (Kafka's defaults are 45 s and 5 s, nine intervals; the classic client requires
//! three). The user can set it instead, and either way it is never longer than the broker's
//! default session timeout ([`BROKER_DEFAULT_SESSION_TIMEOUT`]), so that a default broker has
//! never expired a member whose leases still read current.

use std::time::Duration;

use super::types::{BROKER_DEFAULT_SESSION_TIMEOUT, SESSION_BOUND_INTERVALS};

/// The session bound for a heartbeat interval the broker returned: the user's value if set,
/// else [`SESSION_BOUND_INTERVALS`] intervals; capped at [`BROKER_DEFAULT_SESSION_TIMEOUT`].
pub(crate) fn session_bound(user: Option<Duration>, heartbeat_interval: Duration) -> Duration {
    user.unwrap_or_else(|| heartbeat_interval.saturating_mul(SESSION_BOUND_INTERVALS))
        .min(BROKER_DEFAULT_SESSION_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_is_three_broker_intervals_unless_the_user_set_one() {
        let ms = Duration::from_millis;
        assert_eq!(session_bound(None, ms(500)), ms(1500));
        assert_eq!(session_bound(None, ms(5000)), ms(15000));
        assert_eq!(session_bound(Some(ms(4000)), ms(500)), ms(4000));
    }

    #[test]
    fn the_bound_never_exceeds_the_brokers_default_session_timeout() {
        let ms = Duration::from_millis;
        assert_eq!(session_bound(None, ms(20_000)), ms(45_000));
        assert_eq!(session_bound(Some(ms(60_000)), ms(500)), ms(45_000));
    }
}
