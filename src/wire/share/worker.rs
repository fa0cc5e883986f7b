//! The share fetch threads: one per broker, each owning that broker's connection, fed through
//! a channel by the poll thread, which collects their answers within a bound.
//!
//! Why threads (as `client/fetch/fetcher.rs` for Fetch): a broker that hangs holds only its own
//! partitions; the poll thread waits at most `max_wait` plus [`FETCH_ANSWER_MARGIN`] and leaves
//! a late request in flight, its answer used when it comes. A thread serves its jobs in order
//! on one connection, so a ShareAcknowledge queued behind a ShareFetch reaches the broker
//! after it, as the session epochs require. Dropping [`Workers`] closes the job channels; each
//! thread ends after its current request, never joined.
//!
//! A broker ends a share session when its connection closes, and releases every record the
//! session acquired at once. So the thread that owns the connection ends the [`SessionScope`]
//! of every session it carried *before* it drops the connection (an error, a timeout, its
//! own end): a worker thread asking its lease sees "not current" no later than the broker
//! can see the connection gone.

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::guard::lease_now;

use kafka_protocol::messages::{self as msg, ApiKey};
use log::debug;

use super::codec::{ShareAcknowledgeAnswer, ShareAcknowledgeV2, ShareFetchV2};
use super::SessionScope;
use crate::wire::connection::{Connection, ConnectionConfig};
use crate::wire::error::{Result, WireError};
use crate::wire::versions::VersionRange;

/// How often an idle fetch thread looks whether the broker closed its connection: the longest
/// a lease of a session the broker ended with the connection can still read current while no
/// request is out (a request in flight finds out by itself, at once).
const IDLE_WATCH: Duration = Duration::from_millis(20);

/// The versions of ShareFetch and ShareAcknowledge this layer speaks.
pub(super) const SHARE_VERSIONS: VersionRange = VersionRange::new(1, 2);

/// A request for a broker's thread.
#[derive(Debug)]
pub(super) enum Outgoing {
    Fetch(ShareFetchV2),
    Acknowledge(ShareAcknowledgeV2),
}

/// A broker's answer.
#[derive(Debug)]
pub(super) enum Incoming {
    Fetch(msg::ShareFetchResponse),
    Acknowledge(ShareAcknowledgeAnswer),
}

#[derive(Debug)]
struct Job {
    id: u64,
    out: Outgoing,
    /// How long the broker may hold it (a fetch's `max_wait`), on top of the request timeout.
    wait: Duration,
    /// The scope of the session incarnation the request belongs to.
    scope: SessionScope,
}

/// What a thread reports.
#[derive(Debug)]
pub(super) enum Event {
    /// Job `id` is on the wire since `at`.
    Sent { id: u64, at: Instant },
    /// Job `id` is over at `at` (on the lease clock, stamped on this thread as the answer
    /// arrived: a poll thread that absorbs it later does not move a lock's certain end later);
    /// `version` is what was negotiated (None: not connected).
    Done {
        broker: i32,
        id: u64,
        at: Instant,
        version: Option<i16>,
        result: Result<Incoming>,
    },
    /// The caller's waker.
    Wake,
}

#[derive(Debug)]
struct Thread {
    addr: String,
    jobs: mpsc::Sender<Job>,
}

/// The threads of one fetcher and the channel their reports come back on.
#[derive(Debug)]
pub(super) struct Workers {
    threads: HashMap<i32, Thread>,
    events_tx: mpsc::Sender<Event>,
    events_rx: mpsc::Receiver<Event>,
    config: ConnectionConfig,
    backoff: (Duration, Duration),
    next_id: u64,
}

impl Workers {
    pub(super) fn new(config: ConnectionConfig, backoff: Duration, backoff_max: Duration) -> Self {
        let (events_tx, events_rx) = mpsc::channel();
        Workers {
            threads: HashMap::new(),
            events_tx,
            events_rx,
            config,
            backoff: (backoff, backoff_max),
            next_id: 0,
        }
    }

    /// Queues `out`, a request of the session incarnation `scope`, on `broker`'s thread
    /// (started, or restarted when its address changed); returns the job's id.
    pub(super) fn submit(
        &mut self,
        broker: i32,
        addr: &str,
        out: Outgoing,
        wait: Duration,
        scope: &SessionScope,
    ) -> Result<u64> {
        self.next_id = self.next_id.wrapping_add(1);
        let id = self.next_id;
        if self.threads.get(&broker).is_some_and(|t| t.addr != addr) {
            self.threads.remove(&broker);
        }
        let mut job = Some(Job {
            id,
            out,
            wait,
            scope: scope.clone(),
        });
        for _attempt in 0..2 {
            let Some(j) = job.take() else { break };
            if !self.threads.contains_key(&broker) {
                let thread = self.spawn(broker, addr)?;
                self.threads.insert(broker, thread);
            }
            let Some(thread) = self.threads.get(&broker) else {
                break;
            };
            match thread.jobs.send(j) {
                Ok(()) => return Ok(id),
                Err(mpsc::SendError(j)) => {
                    self.threads.remove(&broker);
                    job = Some(j);
                }
            }
        }
        Err(WireError::io(std::io::Error::other(format!(
            "share fetch thread of broker {broker} unavailable"
        ))))
    }

    fn spawn(&self, broker: i32, addr: &str) -> Result<Thread> {
        let (jobs_tx, jobs_rx) = mpsc::channel();
        let worker = Worker {
            broker,
            addr: addr.to_string(),
            config: self.config.clone(),
            backoff: self.backoff,
            conn: None,
            carried: Vec::new(),
            failures: 0,
            retry_at: None,
            events: self.events_tx.clone(),
        };
        thread::Builder::new()
            .name(format!("rg-share-{broker}"))
            .spawn(move || worker.run(&jobs_rx))
            .map_err(WireError::io)?;
        Ok(Thread {
            addr: addr.to_string(),
            jobs: jobs_tx,
        })
    }

    /// The next report, waiting until `until` at the latest.
    pub(super) fn next_event(&self, until: Instant) -> Option<Event> {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return self.events_rx.try_recv().ok();
        }
        self.events_rx.recv_timeout(left).ok()
    }

    /// What ends a wait early from another thread.
    pub(super) fn nudge(&self) -> crate::wire::Nudge {
        let events = self.events_tx.clone();
        std::sync::Arc::new(move || {
            let _ = events.send(Event::Wake);
        })
    }
}

/// One broker's thread: its connection and its backoff after failures.
struct Worker {
    broker: i32,
    addr: String,
    config: ConnectionConfig,
    backoff: (Duration, Duration),
    conn: Option<Connection>,
    /// The scopes of the sessions whose requests went over `conn`: they end with it.
    carried: Vec<SessionScope>,
    failures: u32,
    retry_at: Option<Instant>,
    events: mpsc::Sender<Event>,
}

impl Worker {
    fn run(mut self, jobs: &mpsc::Receiver<Job>) {
        loop {
            let job = match jobs.recv_timeout(IDLE_WATCH) {
                Ok(job) => job,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.watch_idle();
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            let mut version = None;
            let result = self.serve(&job, &mut version);
            let at = lease_now();
            if let Err(e) = &result {
                self.failed(e);
            }
            let done = Event::Done {
                broker: self.broker,
                id: job.id,
                at,
                version,
                result,
            };
            if self.events.send(done).is_err() {
                break;
            }
        }
        self.drop_connection();
        debug!("share: the fetch thread of broker {} ends", self.broker);
    }

    /// Between jobs: a connection the broker closed (a restart, a kill, its idle timeout) ended
    /// its sessions there and released their records; their leases must end now, not when the
    /// next request finds the connection gone (a member that holds deliveries and does not
    /// poll sends none).
    fn watch_idle(&mut self) {
        if self.conn.as_mut().is_some_and(Connection::peer_closed) {
            log::info!(
                "share: broker {} closed an idle connection: its sessions ended",
                self.broker
            );
            self.drop_connection();
        }
    }

    /// Ends the scopes of the sessions the connection carried, then drops it: the broker
    /// releases their records when it sees the connection close.
    fn drop_connection(&mut self) {
        let ended = self.carried.drain(..).filter(SessionScope::end).count();
        if ended > 0 {
            debug!(
                "share: connection to broker {} dropped: {ended} session(s) ended",
                self.broker
            );
        }
        self.conn = None;
    }

    fn serve(&mut self, job: &Job, version: &mut Option<i16>) -> Result<Incoming> {
        if self.conn.as_ref().is_some_and(Connection::is_broken) {
            self.drop_connection();
        }
        if self.conn.is_none() {
            if let Some(at) = self.retry_at.take() {
                let left = at.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    thread::sleep(left);
                }
            }
            self.conn = Some(Connection::connect(&self.addr, &self.config)?);
        }
        let timeout = self.config.request_timeout + job.wait;
        if !self.carried.contains(&job.scope) {
            self.carried.retain(|s| !s.has_ended());
            self.carried.push(job.scope.clone());
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(WireError::io(std::io::Error::other("not connected")));
        };
        let key = match &job.out {
            Outgoing::Fetch(_) => ApiKey::ShareFetch,
            Outgoing::Acknowledge(_) => ApiKey::ShareAcknowledge,
        };
        let v = conn.version_within(key, SHARE_VERSIONS)?;
        *version = Some(v);
        let renew = match &job.out {
            Outgoing::Fetch(r) => r.is_renew_ack,
            Outgoing::Acknowledge(r) => r.is_renew_ack,
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
        let events = &self.events;
        let sent = |id| {
            let _ = events.send(Event::Sent { id, at });
        };
        let answer = match &job.out {
            Outgoing::Fetch(r) => {
                let pending = conn.send_request(r, v)?;
                sent(job.id);
                conn.receive(pending, timeout).map(|a| Incoming::Fetch(a.0))
            }
            Outgoing::Acknowledge(r) => {
                let pending = conn.send_request(r, v)?;
                sent(job.id);
                conn.receive(pending, timeout).map(Incoming::Acknowledge)
            }
        }?;
        self.failures = 0;
        Ok(answer)
    }

    /// After a failed job: a broken connection is dropped and the next connect waits an
    /// exponential backoff.
    fn failed(&mut self, e: &WireError) {
        let broken = e.breaks_connection() || self.conn.as_ref().is_some_and(Connection::is_broken);
        if !broken && self.conn.is_some() {
            return;
        }
        self.drop_connection();
        self.failures = self.failures.saturating_add(1);
        let factor = 1u32 << self.failures.saturating_sub(1).min(16);
        let delay = self.backoff.0.saturating_mul(factor).min(self.backoff.1);
        self.retry_at = Some(Instant::now() + delay);
        debug!(
            "share: broker {} failed ({} in a row): {e}; next connect in {delay:?}",
            self.broker, self.failures
        );
    }
}
