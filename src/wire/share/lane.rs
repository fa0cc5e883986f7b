//! The share lane: what a broker's thread of the request-lane machine (`wire/lane.rs`, the one
//! the consumer's Fetch runs on) does for a share fetcher: write a ShareFetch or a
//! ShareAcknowledge, read its answer, and carry the share sessions that went over the
//! connection.
//!
//! A broker ends a share session when its connection closes, and releases every record the
//! session acquired at once. So the lane ends the [`SessionScope`] of every session it carried
//! *before* the machine drops the connection (an error, a timeout, a peer that closed it, seen
//! by the idle watch within [`IDLE_WATCH`], the lane's own end): a worker thread asking its
//! lease sees "not current" no later than the broker can see the connection gone.

use std::time::{Duration, Instant};

use kafka_protocol::messages::{self as msg, ApiKey};
use log::debug;

use super::codec::{ShareAcknowledgeAnswer, ShareAcknowledgeV2, ShareFetchV2};
use super::SessionScope;
use crate::guard::lease_now;
use crate::wire::error::{Result, WireError};
use crate::wire::lane::{Lane, Link};
use crate::wire::versions::VersionRange;

/// How often an idle share lane looks whether the broker closed its connection: the longest a
/// lease of a session the broker ended with the connection can still read current while no
/// request is out (a request in flight finds out by itself, at once).
pub(super) const IDLE_WATCH: Duration = Duration::from_millis(20);

/// The versions of ShareFetch and ShareAcknowledge this layer speaks.
pub(super) const SHARE_VERSIONS: VersionRange = VersionRange::new(1, 2);

/// A request for a broker's lane, with the scope of the session incarnation it belongs to
/// (taken when the request was built).
#[derive(Debug)]
pub(in crate::wire) struct Outgoing {
    pub(super) request: Request,
    /// How long the broker may hold it (a fetch's `max_wait`), on top of the request timeout.
    pub(super) wait: Duration,
    pub(super) scope: SessionScope,
}

/// The request itself.
#[derive(Debug)]
pub(super) enum Request {
    Fetch(ShareFetchV2),
    Acknowledge(ShareAcknowledgeV2),
}

/// A broker's answer.
#[derive(Debug)]
pub(in crate::wire) enum Incoming {
    Fetch(msg::ShareFetchResponse),
    Acknowledge(ShareAcknowledgeAnswer),
}

/// One broker's share lane: the scopes of the sessions whose requests went over its
/// connection, which end with it.
#[derive(Debug, Default)]
pub(in crate::wire) struct ShareLane {
    carried: Vec<SessionScope>,
}

impl Lane for ShareLane {
    type Job = Outgoing;
    type Answer = Incoming;
    const NAME: &'static str = "share";
    const IDLE_WATCH: Option<Duration> = Some(IDLE_WATCH);

    /// The lease clock: the send stamp the records' lock leases are counted from, and the
    /// arrival a lock's certain end is counted from (a poll thread that absorbs it later does
    /// not move that end later).
    fn now() -> Instant {
        lease_now()
    }

    fn serve(
        &mut self,
        link: &mut Link,
        job: &Outgoing,
        sent: &mut dyn FnMut(Instant, Duration),
    ) -> Result<Incoming> {
        link.connection()?;
        let wait = job.wait;
        let timeout = link.request_timeout() + wait;
        if !self.carried.contains(&job.scope) {
            self.carried.retain(|s| !s.has_ended());
            self.carried.push(job.scope.clone());
        }
        let key = match &job.request {
            Request::Fetch(_) => ApiKey::ShareFetch,
            Request::Acknowledge(_) => ApiKey::ShareAcknowledge,
        };
        let v = link.connection()?.version_within(key, SHARE_VERSIONS)?;
        link.negotiated(v);
        let conn = link.connection()?;
        let renew = match &job.request {
            Request::Fetch(r) => r.is_renew_ack,
            Request::Acknowledge(r) => r.is_renew_ack,
        };
        if renew && v < 2 {
            return Err(WireError::UnsupportedVersion {
                api: key as i16,
                ours: (2, 2),
                broker: conn.versions().broker_range(key).map(|r| (r.min, r.max)),
            });
        }
        // The send stamp that the records' lock leases are counted from: on the lease clock.
        let at = lease_now();
        match &job.request {
            Request::Fetch(r) => {
                let pending = conn.send_request(r, v)?;
                sent(at, wait);
                conn.receive(pending, timeout).map(|a| Incoming::Fetch(a.0))
            }
            Request::Acknowledge(r) => {
                let pending = conn.send_request(r, v)?;
                sent(at, wait);
                conn.receive(pending, timeout).map(Incoming::Acknowledge)
            }
        }
    }

    /// Ends the scopes of the sessions the connection carried: the broker releases their
    /// records when it sees the connection close.
    fn disconnecting(&mut self) {
        let ended = self.carried.drain(..).filter(SessionScope::end).count();
        if ended > 0 {
            debug!("share: a connection dropped: {ended} session(s) ended");
        }
    }
}
