//! Fetch threads: one per broker a [`Client`](crate::wire::Client) fetches from, each owning that
//! broker's fetch connection, fed by the fetching thread through a bounded channel.
//!
//! Why threads: a synchronous client that waits for each broker's answer in turn lets one hung
//! broker (a stopped process: sockets open, nothing answered) or one unreachable address (a
//! connect that waits for `socket.connection.setup.timeout.ms`) stop every partition of every
//! other broker for up to the request timeout. Here connecting, writing the request and reading
//! the answer happen on the broker's own thread; the fetching thread hands out jobs and collects
//! whatever answers arrive within the fetch's wait (see [`Fetchers::collect`]). A broker that has
//! not answered keeps its request in flight and its answer is used when it comes; its partitions
//! simply have nothing new meanwhile, while the other brokers' partitions go on.
//!
//! A fetch thread has at most one job: the fetching thread sends a broker a new job only once its
//! last one was answered, so the job channel (capacity one) never fills and sending never blocks.
//! Dropping the [`Fetchers`] closes the channels; each thread ends after its current request (at
//! the latest when that request times out), never joined, so closing a client never waits for a
//! hung broker.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{self as msg, ApiKey};
use log::{debug, info, warn};

use super::{
    build_request, continuation, is_subset, position_key, settings_key, FetchConfig, FetchPosition,
    InFlightFetch,
};
use crate::wire::client::ClientConfig;
use crate::wire::connection::{Connection, ConnectionConfig};
use crate::wire::error::{Result, WireError};
use crate::TopicPartition;

/// How much longer than `fetch.max.wait.ms` the fetching thread waits for a broker's answer
/// before it leaves that broker's request in flight and returns what the others answered. Why
/// this much: a healthy broker answers a long poll at `max_wait` at the latest, plus one round
/// trip and the transfer; a broker later than that is treated as slow for this call (its answer
/// is still used when it arrives), so the margin only bounds how long one slow broker delays the
/// others' data.
pub const FETCH_ANSWER_MARGIN: Duration = Duration::from_millis(200);

/// How much longer a fetch waits for a broker its thread is still connecting to, when no broker
/// has answered yet in that call. Why: a first fetch (connect, ApiVersions, TLS, SASL) should
/// return data rather than nothing; the grace never applies once another broker has answered,
/// so an unreachable broker does not delay the others by more than [`FETCH_ANSWER_MARGIN`].
pub const FETCH_CONNECT_GRACE: Duration = Duration::from_secs(1);

/// What the fetching thread asks a broker's fetch thread to do.
#[derive(Debug)]
pub(super) struct Job {
    pub(super) id: u64,
    pub(super) positions: Vec<FetchPosition>,
    /// KIP-320: each partition's leader epoch as last seen in Metadata (-1: unknown).
    pub(super) epochs: HashMap<TopicPartition, i32>,
    pub(super) cfg: FetchConfig,
    pub(super) max_bytes: i32,
}

/// What a fetch thread reports.
#[derive(Debug)]
enum Event {
    /// Job `id`'s request is on the wire (or a prefetch sent earlier serves it): its answer is
    /// due within `wait` of `at`.
    Sent {
        broker: i32,
        id: u64,
        at: Instant,
        wait: Duration,
    },
    /// Job `id` is over.
    Done {
        broker: i32,
        id: u64,
        result: Result<msg::FetchResponse>,
    },
    /// The consumer's waker: the collecting thread stops waiting and returns what it has.
    Wake,
}

/// One broker's answer to a job, as [`Fetchers::collect`] returns it.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) broker: i32,
    /// The positions the job asked for (not necessarily those the caller wants now).
    pub(super) positions: Vec<FetchPosition>,
    pub(super) result: Result<msg::FetchResponse>,
}

/// The job a fetch thread is working on, as the fetching thread tracks it.
#[derive(Debug)]
struct Busy {
    id: u64,
    positions: Vec<FetchPosition>,
    /// When the answer is due; before the request is sent, a connect allowance is included.
    deadline: Instant,
    sent: bool,
    /// Whether being late was already logged.
    warned: bool,
}

#[derive(Debug)]
struct FetchThread {
    addr: String,
    jobs: mpsc::SyncSender<Job>,
    busy: Option<Busy>,
}

/// The fetch threads of one client, and the channel their reports come back on.
#[derive(Debug)]
pub(in crate::wire) struct Fetchers {
    threads: HashMap<i32, FetchThread>,
    events_tx: mpsc::Sender<Event>,
    events_rx: mpsc::Receiver<Event>,
    next_id: u64,
    /// Brokers whose last fetch failed or is late: other requests (Metadata) try them last.
    troubled: HashSet<i32>,
}

impl Default for Fetchers {
    fn default() -> Self {
        let (events_tx, events_rx) = mpsc::channel();
        Fetchers {
            threads: HashMap::new(),
            events_tx,
            events_rx,
            next_id: 0,
            troubled: HashSet::new(),
        }
    }
}

impl Fetchers {
    /// Whether `broker` still works on an earlier job (its partitions wait for that answer).
    pub(super) fn is_busy(&self, broker: i32) -> bool {
        self.threads.get(&broker).is_some_and(|t| t.busy.is_some())
    }

    /// Whether `broker`'s last fetch failed or is overdue.
    pub(in crate::wire) fn is_troubled(&self, broker: i32) -> bool {
        self.troubled.contains(&broker)
    }

    /// Hands `job` to `broker`'s fetch thread (started, or restarted when the broker's address
    /// changed or the thread is gone). The broker must not be busy.
    pub(super) fn submit(
        &mut self,
        broker: i32,
        addr: &str,
        mut job: Job,
        config: &ClientConfig,
    ) -> Result<()> {
        self.next_id = self.next_id.wrapping_add(1);
        job.id = self.next_id;
        let id = job.id;
        let positions = job.positions.clone();
        let deadline =
            Instant::now() + job.cfg.max_wait + FETCH_ANSWER_MARGIN + FETCH_CONNECT_GRACE;
        if self.threads.get(&broker).is_some_and(|t| t.addr != addr) {
            info!("fetch: broker {broker} moved to {addr}; restarting its fetch thread");
            self.threads.remove(&broker);
        }
        let mut job = Some(job);
        for _attempt in 0..2 {
            let Some(j) = job.take() else { break };
            if !self.threads.contains_key(&broker) {
                let thread = self.spawn(broker, addr, config)?;
                self.threads.insert(broker, thread);
            }
            let Some(thread) = self.threads.get_mut(&broker) else {
                break;
            };
            match thread.jobs.try_send(j) {
                Ok(()) => {
                    thread.busy = Some(Busy {
                        id,
                        positions,
                        deadline,
                        sent: false,
                        warned: false,
                    });
                    return Ok(());
                }
                Err(mpsc::TrySendError::Full(j)) => {
                    // Cannot happen (one job at a time); refuse rather than block.
                    warn!("fetch: broker {broker}'s fetch thread has a job queued already");
                    drop(j);
                    break;
                }
                Err(mpsc::TrySendError::Disconnected(j)) => {
                    // The thread ended (it only does when its channel closes): start anew.
                    self.threads.remove(&broker);
                    job = Some(j);
                }
            }
        }
        Err(WireError::io(std::io::Error::other(format!(
            "fetch thread of broker {broker} unavailable"
        ))))
    }

    fn spawn(&self, broker: i32, addr: &str, config: &ClientConfig) -> Result<FetchThread> {
        let (jobs_tx, jobs_rx) = mpsc::sync_channel(1);
        let worker = Worker {
            broker,
            addr: addr.to_string(),
            config: config.connection.clone(),
            backoff: config.retry_backoff,
            backoff_max: config.retry_backoff_max,
            conn: None,
            prefetched: None,
            failures: 0,
            retry_at: None,
            events: self.events_tx.clone(),
        };
        thread::Builder::new()
            .name(format!("rg-fetch-{broker}"))
            .spawn(move || worker.run(&jobs_rx))
            .map_err(WireError::io)?;
        debug!("fetch: started the fetch thread of broker {broker} ({addr})");
        Ok(FetchThread {
            addr: addr.to_string(),
            jobs: jobs_tx,
            busy: None,
        })
    }

    /// What ends a [`collect`](Self::collect) early from another thread (the consumer's
    /// waker): a report of its own on the same channel, so no wake-up is lost between two
    /// waits.
    pub(in crate::wire) fn nudge(&self) -> crate::wire::Nudge {
        let events = self.events_tx.clone();
        std::sync::Arc::new(move || {
            // The fetching side gone (the client dropped): nothing waits any more.
            let _ = events.send(Event::Wake);
        })
    }

    /// Collects answers: waits until every job sent in this call (`fresh`) and, when `max_wait`
    /// is not zero, every earlier job still within its deadline has answered, but never past
    /// `start + max_wait + FETCH_ANSWER_MARGIN` once any broker has answered (nor past
    /// [`FETCH_CONNECT_GRACE`] more while none has). Jobs not answered stay in flight; their
    /// answers come with a later call. With nothing to wait for and nothing answered, it waits
    /// for reports until that bound anyway (a caller looping on fetch must not spin), unless
    /// `max_wait` is zero (the caller has other work).
    pub(super) fn collect(&mut self, fresh: &[i32], max_wait: Duration) -> Vec<Answer> {
        let start = Instant::now();
        let bound = start + max_wait + FETCH_ANSWER_MARGIN;
        let wait_carried = !max_wait.is_zero();
        let mut answers = Vec::new();
        loop {
            // Everything already reported first, without waiting.
            let mut woken = false;
            while let Ok(event) = self.events_rx.try_recv() {
                woken |= self.absorb(event, &mut answers);
            }
            if woken {
                break;
            }
            let now = Instant::now();
            let mut latest: Option<Instant> = None;
            let mut unsent = false;
            for (broker, thread) in &self.threads {
                let Some(busy) = &thread.busy else { continue };
                if (fresh.contains(broker) || wait_carried) && busy.deadline > now {
                    latest = Some(latest.map_or(busy.deadline, |l| l.max(busy.deadline)));
                    unsent |= !busy.sent;
                }
            }
            let until = match latest {
                Some(latest) if answers.is_empty() && unsent => {
                    latest.min(bound + FETCH_CONNECT_GRACE)
                }
                Some(latest) => latest.min(bound),
                None if answers.is_empty() && wait_carried => bound,
                None => break,
            };
            if until <= now {
                break;
            }
            match self.events_rx.recv_timeout(until - now) {
                Ok(event) => {
                    if self.absorb(event, &mut answers) {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if latest.is_none() {
                        break;
                    }
                }
                // Cannot happen: this struct holds a sender.
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let now = Instant::now();
        for (broker, thread) in &mut self.threads {
            let Some(busy) = &mut thread.busy else {
                continue;
            };
            if busy.deadline <= now && !busy.warned {
                busy.warned = true;
                self.troubled.insert(*broker);
                warn!(
                    "fetch: broker {broker} has not answered a fetch of {} partition(s) in time; \
                     its request stays in flight, the other brokers' partitions go on",
                    busy.positions.len()
                );
            }
        }
        answers
    }

    /// Applies one report; true when it was the waker's (the caller stops waiting).
    fn absorb(&mut self, event: Event, answers: &mut Vec<Answer>) -> bool {
        match event {
            Event::Sent {
                broker,
                id,
                at,
                wait,
            } => {
                if let Some(busy) = self
                    .threads
                    .get_mut(&broker)
                    .and_then(|t| t.busy.as_mut())
                    .filter(|b| b.id == id)
                {
                    busy.sent = true;
                    busy.deadline = at + wait + FETCH_ANSWER_MARGIN;
                }
            }
            Event::Wake => return true,
            Event::Done { broker, id, result } => {
                let Some(thread) = self.threads.get_mut(&broker) else {
                    return false;
                };
                if thread.busy.as_ref().map_or(true, |b| b.id != id) {
                    return false;
                }
                let Some(busy) = thread.busy.take() else {
                    return false;
                };
                if busy.warned {
                    info!("fetch: broker {broker} answered its late fetch");
                }
                if result.is_ok() {
                    self.troubled.remove(&broker);
                } else {
                    self.troubled.insert(broker);
                }
                answers.push(Answer {
                    broker,
                    positions: busy.positions,
                    result,
                });
            }
        }
        false
    }
}

/// The fetch thread of one broker: its connection, its backoff after failures, and the
/// prefetched request (see [`FetchConfig::prefetch`]).
struct Worker {
    broker: i32,
    addr: String,
    config: ConnectionConfig,
    backoff: Duration,
    backoff_max: Duration,
    conn: Option<Connection>,
    prefetched: Option<InFlightFetch>,
    failures: u32,
    retry_at: Option<Instant>,
    events: mpsc::Sender<Event>,
}

impl Worker {
    fn run(mut self, jobs: &mpsc::Receiver<Job>) {
        while let Ok(job) = jobs.recv() {
            let result = self.serve(&job);
            if let Err(e) = &result {
                self.failed(e);
            }
            let done = Event::Done {
                broker: self.broker,
                id: job.id,
                result,
            };
            if self.events.send(done).is_err() {
                break;
            }
        }
        debug!("fetch: the fetch thread of broker {} ends", self.broker);
    }

    fn sent(&self, id: u64, at: Instant, wait: Duration) {
        let _ = self.events.send(Event::Sent {
            broker: self.broker,
            id,
            at,
            wait,
        });
    }

    fn serve(&mut self, job: &Job) -> Result<msg::FetchResponse> {
        if self.conn.as_ref().is_some_and(Connection::is_broken) {
            self.conn = None;
            self.prefetched = None;
        }
        let mut reused = None;
        if let Some(pf) = self.prefetched.take() {
            // Usable if it asked for every wanted position (it may hold more partitions, whose
            // data is then ignored: only requested positions are ever returned).
            if self.conn.is_some()
                && pf.settings == settings_key(&job.cfg)
                && is_subset(&position_key(&job.positions), &pf.key)
            {
                self.sent(job.id, pf.sent_at, pf.max_wait);
                reused = Some((pf.pending, pf.max_wait));
            } else {
                // The caller moved on (seek, new assignment, other settings): the answer in
                // flight is for other positions. Dropping the connection discards it at once,
                // where reading it could take up to max_wait.
                debug!("fetch: discarding the prefetch from broker {}", self.broker);
                self.conn = None;
            }
        }
        let (pending, wait) = match reused {
            Some(p) => p,
            None => {
                let conn = self.connect()?;
                let version = conn.version_for(ApiKey::Fetch)?;
                let req = build_request(&job.positions, &job.epochs, &job.cfg, job.max_bytes);
                let pending = conn.send_request(&req, version)?;
                self.sent(job.id, Instant::now(), job.cfg.max_wait);
                (pending, job.cfg.max_wait)
            }
        };
        let timeout = self.config.request_timeout + wait;
        let conn = self
            .conn
            .as_mut()
            .ok_or_else(|| not_connected(&self.addr))?;
        let resp = conn.receive(pending, timeout)?;
        self.failures = 0;
        if job.cfg.prefetch {
            // Ask for the continuation before the answer is even handed over, so the broker
            // prepares it while the caller decodes.
            if let Some(next) = continuation(&job.positions, &resp) {
                let req = build_request(&next, &job.epochs, &job.cfg, job.max_bytes);
                let sent = conn
                    .version_for(ApiKey::Fetch)
                    .and_then(|v| conn.send_request(&req, v));
                match sent {
                    Ok(pending) => {
                        self.prefetched = Some(InFlightFetch {
                            key: position_key(&next),
                            settings: settings_key(&job.cfg),
                            pending,
                            sent_at: Instant::now(),
                            max_wait: job.cfg.max_wait,
                        })
                    }
                    Err(e) => debug!("prefetch to broker {} not sent: {e}", self.broker),
                }
            }
        }
        Ok(resp)
    }

    /// The connection, opened if need be, after the backoff of earlier failures (slept here,
    /// on this broker's thread, where it delays no other broker).
    fn connect(&mut self) -> Result<&mut Connection> {
        if self.conn.is_none() {
            if let Some(at) = self.retry_at.take() {
                let left = at.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    thread::sleep(left);
                }
            }
            let conn = Connection::connect(&self.addr, &self.config)?;
            self.failures = 0;
            self.conn = Some(conn);
        }
        self.conn.as_mut().ok_or_else(|| not_connected(&self.addr))
    }

    /// After a failed job: a broken connection is dropped (with its prefetch) and the next
    /// connect waits an exponential backoff.
    fn failed(&mut self, e: &WireError) {
        let broken = e.breaks_connection() || self.conn.as_ref().is_some_and(Connection::is_broken);
        if !broken && self.conn.is_some() {
            return;
        }
        self.conn = None;
        self.prefetched = None;
        self.failures = self.failures.saturating_add(1);
        let factor = 1u32 << self.failures.saturating_sub(1).min(16);
        let delay = self.backoff.saturating_mul(factor).min(self.backoff_max);
        self.retry_at = Some(Instant::now() + delay);
        debug!(
            "fetch: broker {} failed ({} in a row): {e}; next connect in {delay:?}",
            self.broker, self.failures
        );
    }
}

fn not_connected(addr: &str) -> WireError {
    WireError::io(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("no fetch connection to {addr}"),
    ))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;

    use bytes::{BufMut, BytesMut};

    use super::*;
    use crate::wire::client::cluster::BrokerInfo;
    use crate::wire::records::tests::batches;
    use crate::wire::Client;

    /// How a fake broker behaves.
    #[derive(Clone, Copy, PartialEq)]
    enum Fake {
        /// Answers ApiVersions and every Fetch with records 0..=2 of its partition.
        Serving,
        /// Answers ApiVersions, never a Fetch (a stopped broker whose connection was open).
        SilentOnFetch,
        /// Accepts connections and answers nothing (a stopped broker, from the first byte).
        Silent,
    }

    /// A fake broker on loopback leading partition `partition` of topic "t"; its threads end
    /// with the test process.
    fn fake_broker(behaviour: Fake, partition: i32) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                thread::spawn(move || serve(conn, behaviour, partition));
            }
        });
        addr
    }

    fn serve(mut s: TcpStream, behaviour: Fake, partition: i32) {
        let mut held = Vec::new();
        while let Some((key, version, req)) = super::super::tests::read_request(&mut s) {
            let body = match (behaviour, key) {
                (Fake::Silent, _) => {
                    held.push(req);
                    continue;
                }
                (_, 18) if version > 0 => api_versions(35),
                (_, 18) => api_versions(0),
                (Fake::SilentOnFetch, _) => {
                    held.push(req);
                    continue;
                }
                _ => fetch_v4(partition),
            };
            let mut frame = Vec::new();
            frame.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
            frame.extend_from_slice(&req[4..8]);
            frame.extend_from_slice(&body);
            if s.write_all(&frame).is_err() {
                return;
            }
        }
    }

    /// ApiVersions v0 body: ApiVersions 0..=0 and Fetch 4..=4.
    fn api_versions(error: i16) -> Vec<u8> {
        let mut b = BytesMut::new();
        b.put_i16(error);
        b.put_i32(2);
        for (k, lo, hi) in [(18i16, 0i16, 0i16), (1, 4, 4)] {
            b.put_i16(k);
            b.put_i16(lo);
            b.put_i16(hi);
        }
        b.to_vec()
    }

    /// Fetch v4 response body: topic "t", `partition`, records 0..=2, high watermark 3.
    fn fetch_v4(partition: i32) -> Vec<u8> {
        let records = batches(&[(0, 2)]);
        let mut b = BytesMut::new();
        b.put_i32(0); // throttle
        b.put_i32(1);
        b.put_i16(1);
        b.put_slice(b"t");
        b.put_i32(1);
        b.put_i32(partition);
        b.put_i16(0); // error
        b.put_i64(3); // high watermark
        b.put_i64(3); // last stable offset
        b.put_i32(-1); // aborted transactions: null
        b.put_i32(records.len() as i32);
        b.put_slice(&records);
        b.to_vec()
    }

    /// A client that knows two brokers, 1 leading t-0 and 2 leading t-1, with a long request
    /// timeout (what a hung broker would cost the caller before).
    fn client(first: &str, second: &str) -> Client {
        let mut config = ClientConfig::new(["127.0.0.1:9"]);
        config.connection.request_timeout = Duration::from_secs(20);
        config.connection.connect_timeout = Duration::from_secs(20);
        let mut client = Client::unconnected(config);
        for (id, addr) in [(1, first), (2, second)] {
            let (host, port) = addr.rsplit_once(':').expect("host:port");
            client.brokers.insert(
                id,
                BrokerInfo {
                    node_id: id,
                    host: host.to_string(),
                    port: port.parse().expect("port"),
                    rack: None,
                },
            );
        }
        let topic: Arc<str> = Arc::from("t");
        for (p, leader) in [(0, 1), (1, 2)] {
            client
                .leaders
                .insert(TopicPartition::new(Arc::clone(&topic), p), leader);
        }
        client.metadata_stale = false;
        client
    }

    fn positions() -> Vec<FetchPosition> {
        (0..2)
            .map(|p| FetchPosition {
                tp: TopicPartition::new("t", p),
                offset: 0,
            })
            .collect()
    }

    /// One broker of two never answers: each fetch returns the other's records within
    /// `max_wait` plus the margin, the silent broker's partition with nothing and no error.
    fn the_other_broker_is_served_in_time(silent: Fake) {
        let hung = fake_broker(silent, 0);
        let serving = fake_broker(Fake::Serving, 1);
        let mut client = client(&hung, &serving);
        let cfg = FetchConfig {
            max_wait: Duration::from_millis(100),
            ..FetchConfig::default()
        };
        let bound = cfg.max_wait + FETCH_ANSWER_MARGIN + Duration::from_millis(300);
        // Enough rounds to pass the connect grace too (the handshake-silent broker).
        for round in 0..6 {
            let started = Instant::now();
            let fetched = client.fetch(&positions(), &cfg).expect("fetch");
            let took = started.elapsed();
            assert!(took < bound, "round {round}: took {took:?}");
            assert_eq!(fetched.len(), 2);
            for part in fetched {
                assert!(part.error.is_none(), "{:?}", part.error);
                let want = if part.tp.partition == 1 { 3 } else { 0 };
                assert_eq!(part.records.len(), want, "round {round}, {}", part.tp);
            }
        }
        assert!(
            client.fetchers.is_busy(1),
            "the silent broker's request stays in flight"
        );
        assert!(client.fetchers.is_troubled(1));
        assert!(!client.fetchers.is_troubled(2));
    }

    #[test]
    fn a_broker_silent_on_fetch_delays_no_other_broker() {
        the_other_broker_is_served_in_time(Fake::SilentOnFetch);
    }

    #[test]
    fn a_broker_silent_from_the_handshake_delays_no_other_broker() {
        the_other_broker_is_served_in_time(Fake::Silent);
    }

    /// The first fetch from a broker includes connecting to it: with nobody else answering, the
    /// call waits for it (within the connect grace) rather than return nothing.
    #[test]
    fn a_first_fetch_waits_for_the_connection() {
        let serving = fake_broker(Fake::Serving, 1);
        let mut client = client(&serving, &serving);
        let cfg = FetchConfig {
            max_wait: Duration::ZERO,
            ..FetchConfig::default()
        };
        let only = [FetchPosition {
            tp: TopicPartition::new("t", 1),
            offset: 0,
        }];
        let fetched = client.fetch(&only, &cfg).expect("fetch");
        assert_eq!(fetched.len(), 1);
        assert_eq!(fetched[0].records.len(), 3, "{:?}", fetched[0].error);
    }
}
