//! The per-broker request lanes: one OS thread per broker, owning that broker's connection,
//! fed jobs through a channel by the thread that asks, reporting back on one channel
//! ("sent", "done"), and the one rule for how long the asking thread waits for the answers.
//! Both fetchers run on it: the consumer's Fetch (`client/fetch/fetcher.rs`) and the share
//! consumer's ShareFetch and ShareAcknowledge (`share/fetcher/`); each supplies only what
//! differs, as a [`Lane`]: the request it writes and how it reads the answer.
//!
//! Why threads: a synchronous client that waits for each broker's answer in turn lets one hung
//! broker (a stopped process: sockets open, nothing answered) or one unreachable address (a
//! connect that waits for `socket.connection.setup.timeout.ms`) stop every partition of every
//! other broker for up to the request timeout. Here connecting, writing the request and reading
//! the answer happen on the broker's own thread; the asking thread hands out jobs and collects
//! whatever answers arrive within the wait (see [`Lanes::collect`]). A broker that has not
//! answered keeps its request in flight and its answer is used when it comes.
//!
//! A lane serves its jobs in order on one connection: a request queued behind another reaches
//! the broker after it. Dropping the [`Lanes`] closes the job channels; each thread ends after
//! its current request (at the latest when that request times out), never joined, so closing
//! never waits for a hung broker.
//!
//! Before a lane drops its connection (a failure, a peer that closed it, its own end), it calls
//! [`Lane::disconnecting`]: what the broker tied to the connection (a share session and the
//! records it acquired) ends then, on this side first. A lane with an idle watch
//! ([`Lane::IDLE_WATCH`]) looks between jobs whether the broker closed the connection.

use std::collections::HashMap;
use std::fmt;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use log::{debug, info};

use crate::wire::connection::{Connection, ConnectionConfig};
use crate::wire::error::{Result, WireError};

/// How much longer than a fetch's wait (`fetch.max.wait.ms`) the asking thread waits for a
/// broker's answer before it leaves that broker's request in flight and returns what the others
/// answered. Why this much: a healthy broker answers a long poll at `max_wait` at the latest,
/// plus one round trip and the transfer; a broker later than that is treated as slow for this
/// call (its answer is still used when it arrives), so the margin only bounds how long one slow
/// broker delays the others' data.
pub const FETCH_ANSWER_MARGIN: Duration = Duration::from_millis(200);

/// How much longer a fetch waits for a broker its lane is still connecting to, when no broker
/// has answered yet in that call. Why: a first fetch (connect, ApiVersions, TLS, SASL) should
/// return data rather than nothing; the grace never applies once another broker has answered,
/// so an unreachable broker does not delay the others by more than [`FETCH_ANSWER_MARGIN`].
pub const FETCH_CONNECT_GRACE: Duration = Duration::from_secs(1);

/// What one kind of lane does with a job, on the broker's thread: the only part that differs
/// between the consumer's fetcher and the share fetcher. The connection, its backoff, the
/// events and the waiting are the machine's.
pub(in crate::wire) trait Lane: Default + Send + 'static {
    /// What the asking thread hands over.
    type Job: Send + 'static;
    /// What the broker's answer becomes on the lane's thread.
    type Answer: Send + 'static;
    /// The lane's name in thread names and logs ("fetch", "share").
    const NAME: &'static str;
    /// How often an idle lane looks whether the broker closed its connection (`None`: it
    /// does not look; a closed connection is found by the next request).
    const IDLE_WATCH: Option<Duration>;

    /// The clock the lane stamps its events with (the share lane: the lease clock, so that a
    /// lock counted from a send stamp never outlives the broker's).
    fn now() -> Instant {
        Instant::now()
    }

    /// Serves `job` over `link`; calls `sent(at, wait)` once the request is on the wire (or an
    /// earlier request serves it), `wait` being how long the broker may hold it.
    fn serve(
        &mut self,
        link: &mut Link,
        job: &Self::Job,
        sent: &mut dyn FnMut(Instant, Duration),
    ) -> Result<Self::Answer>;

    /// The connection is about to be dropped: end what the broker ties to it.
    fn disconnecting(&mut self) {}

    /// Whether `answer` brings the asking thread something to hand out (a Fetch answer with
    /// records): a round ends at the first such answer instead of waiting for the other jobs
    /// (see [`Lanes::collect`]). Why: what one broker returned must not wait for another
    /// broker's answer, least of all for a broker that is down, hung or reconnecting (Java's
    /// `poll` likewise returns as soon as any fetch completed with records). The default, no
    /// answer ends a round early, is for lanes whose rounds collect acknowledgements.
    fn brings_data(answer: &Self::Answer) -> bool {
        let _ = answer;
        false
    }

    /// Writes `job`'s request without reading its answer, for a lane whose [`Lanes`] let
    /// several requests be on the wire at once ([`Lanes::with_depth`]); [`Lane::read`] reads the
    /// answers back in the order they were written. `Some` answers the job at once (a request the
    /// broker does not answer, such as Produce with acks=0). The default serves the job whole.
    fn write(
        &mut self,
        link: &mut Link,
        job: &Self::Job,
        sent: &mut dyn FnMut(Instant, Duration),
    ) -> Result<Option<Self::Answer>> {
        self.serve(link, job, sent).map(Some)
    }

    /// Reads the answer to the oldest request [`Lane::write`] left unanswered.
    fn read(&mut self, link: &mut Link) -> Result<Self::Answer> {
        let _ = link;
        Err(WireError::Protocol(format!(
            "{}: a lane that answers every job in write() read an answer",
            Self::NAME
        )))
    }
}

/// One broker's connection as a lane holds it: opened when a job needs it, after the backoff of
/// earlier failures (slept on the lane's thread, where it delays no other broker).
pub(in crate::wire) struct Link {
    addr: String,
    config: ConnectionConfig,
    conn: Option<Connection>,
    backoff: (Duration, Duration),
    failures: u32,
    retry_at: Option<Instant>,
    /// The version the current job's request was negotiated at, reported with its answer.
    version: Option<i16>,
}

impl Link {
    /// The open connection, if any (a request sent earlier may be in flight on it).
    pub(in crate::wire) fn current(&mut self) -> Option<&mut Connection> {
        self.conn.as_mut()
    }

    /// The connection, opened if need be after the backoff of earlier failures.
    pub(in crate::wire) fn connection(&mut self) -> Result<&mut Connection> {
        if self.conn.is_none() {
            if let Some(at) = self.retry_at.take() {
                let left = at.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    thread::sleep(left);
                }
            }
            self.conn = Some(Connection::connect(&self.addr, &self.config)?);
        }
        self.conn.as_mut().ok_or_else(|| not_connected(&self.addr))
    }

    /// Drops the connection, discarding whatever is in flight on it. The lane calls it only
    /// for what is its own to discard (a prefetch nobody wants), after its own
    /// [`Lane::disconnecting`] work.
    pub(in crate::wire) fn discard(&mut self) {
        self.conn = None;
    }

    /// How long an answer may take on top of the broker's wait.
    pub(in crate::wire) fn request_timeout(&self) -> Duration {
        self.config.request_timeout
    }

    /// The version the job's request goes at: reported with its answer.
    pub(in crate::wire) fn negotiated(&mut self, version: i16) {
        self.version = Some(version);
    }
}

fn not_connected(addr: &str) -> WireError {
    WireError::io(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("no lane connection to {addr}"),
    ))
}

struct Job<J> {
    id: u64,
    body: J,
}

/// What a lane reports.
enum Event<A> {
    /// Job `id` is on the wire since `at`; the broker may hold it `wait`.
    Sent {
        id: u64,
        at: Instant,
        wait: Duration,
    },
    /// Job `id` is over at `at` (stamped on the lane's thread as the answer arrived).
    Done {
        broker: i32,
        id: u64,
        at: Instant,
        version: Option<i16>,
        result: Result<A>,
    },
    /// The caller's waker.
    Wake,
}

/// A job's answer (or failure), as [`Lanes::collect`] returns it.
#[derive(Debug)]
pub(in crate::wire) struct Done<A> {
    /// The broker that served it.
    pub(in crate::wire) broker: i32,
    /// The job's id, as [`Lanes::submit`] returned it.
    pub(in crate::wire) id: u64,
    /// When its request went on the wire (on the lane's clock), if it did.
    pub(in crate::wire) sent_at: Option<Instant>,
    /// When the answer arrived (on the lane's clock).
    pub(in crate::wire) at: Instant,
    /// The version the request was negotiated at, if the lane reports it.
    pub(in crate::wire) version: Option<i16>,
    /// The answer.
    pub(in crate::wire) result: Result<A>,
}

/// A job submitted and not answered yet, as the asking thread tracks it.
#[derive(Clone, Debug)]
pub(in crate::wire) struct Flight {
    /// The broker whose lane has it.
    pub(in crate::wire) broker: i32,
    /// When its request went on the wire (on the lane's clock); `None` while it has not.
    pub(in crate::wire) sent_at: Option<Instant>,
    /// When its answer is due: the send plus the broker's wait plus [`FETCH_ANSWER_MARGIN`];
    /// before the send, the submission plus those and [`FETCH_CONNECT_GRACE`]. Read against
    /// `Instant::now()`: meaningful for a lane on that clock (the consumer's fetch).
    pub(in crate::wire) deadline: Instant,
}

/// How long one [`Lanes::collect`] waits.
#[derive(Clone, Debug)]
pub(in crate::wire) struct Wait {
    /// The jobs this call is for: it returns once each has answered.
    pub(in crate::wire) jobs: Vec<u64>,
    /// Never past this: the caller's wait plus [`FETCH_ANSWER_MARGIN`], or its own deadline.
    pub(in crate::wire) until: Instant,
    /// A fetch round: the waker ends it, so does the first answer that
    /// [brings data](Lane::brings_data), and while nothing has answered in this call and a job
    /// waited for is not even sent (connecting), it waits [`FETCH_CONNECT_GRACE`] longer.
    pub(in crate::wire) round: bool,
    /// A job past its own [`Flight::deadline`] is not waited for (it stays in flight, its
    /// answer comes with a later call).
    pub(in crate::wire) by_deadline: bool,
    /// With no job to wait for and nothing answered, wait for any report until `until` anyway
    /// (a caller looping on fetch must not spin).
    pub(in crate::wire) linger: bool,
    /// Return as soon as any job answered (the caller looks at the answer and calls again for
    /// the rest: the share fetcher, whose records from one leader must not wait for another
    /// leader's long poll).
    pub(in crate::wire) any: bool,
}

impl Wait {
    /// A fetch round for `jobs`: the broker's wait `max_wait` plus [`FETCH_ANSWER_MARGIN`] from
    /// now (plus [`FETCH_CONNECT_GRACE`] while nothing answered and a job is unsent), ended by
    /// the waker. The one rule both fetchers wait by.
    pub(in crate::wire) fn round(jobs: Vec<u64>, max_wait: Duration) -> Wait {
        Wait {
            jobs,
            until: Instant::now() + max_wait + FETCH_ANSWER_MARGIN,
            round: true,
            by_deadline: false,
            linger: false,
            any: false,
        }
    }

    /// The round both fetchers wait by ([`round`](Self::round)) for `jobs`, every fetch in
    /// flight, sent now or carried from an earlier call (a prefetch, an answer a nudge did not
    /// wait for): a carried job past its own [`Flight::deadline`] is not waited for (a hung
    /// broker holds only its own partitions), and with nothing left to wait for and nothing
    /// answered the round still waits for reports until its bound, unless `max_wait` is zero (a
    /// caller looping on fetch must not spin; one with no time to wait has other work).
    pub(in crate::wire) fn fetch_round(jobs: Vec<u64>, max_wait: Duration) -> Wait {
        Wait {
            by_deadline: true,
            linger: !max_wait.is_zero(),
            ..Wait::round(jobs, max_wait)
        }
    }

    /// `jobs` waited for until `until` at the latest, not a round (the waker does not end it,
    /// no grace).
    pub(in crate::wire) fn until(jobs: Vec<u64>, until: Instant) -> Wait {
        Wait {
            jobs,
            until,
            round: false,
            by_deadline: false,
            linger: false,
            any: false,
        }
    }
}

/// What one [`Lanes::collect`] brought.
pub(in crate::wire) struct Collected<A> {
    /// The answers, in arrival order.
    pub(in crate::wire) done: Vec<Done<A>>,
    /// The waker ended the wait.
    pub(in crate::wire) woken: bool,
}

struct Handle<J> {
    addr: String,
    jobs: mpsc::Sender<Job<J>>,
}

/// The lanes of one asker (a client's fetcher, a share fetcher), the jobs in flight on them and
/// the channel their reports come back on.
pub(in crate::wire) struct Lanes<L: Lane> {
    threads: HashMap<i32, Handle<L::Job>>,
    flights: HashMap<u64, Flight>,
    events_tx: mpsc::Sender<Event<L::Answer>>,
    events_rx: mpsc::Receiver<Event<L::Answer>>,
    config: ConnectionConfig,
    backoff: (Duration, Duration),
    next_id: u64,
    depth: usize,
}

impl<L: Lane> fmt::Debug for Lanes<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lanes")
            .field("lane", &L::NAME)
            .field("brokers", &self.threads.keys().collect::<Vec<_>>())
            .field("in_flight", &self.flights.len())
            .finish()
    }
}

impl<L: Lane> Lanes<L> {
    /// Lanes that connect with `config` and back off from `backoff` doubling up to
    /// `backoff_max` after failures.
    pub(in crate::wire) fn new(
        config: ConnectionConfig,
        backoff: Duration,
        backoff_max: Duration,
    ) -> Self {
        let (events_tx, events_rx) = mpsc::channel();
        Lanes {
            threads: HashMap::new(),
            flights: HashMap::new(),
            events_tx,
            events_rx,
            config,
            backoff: (backoff, backoff_max),
            next_id: 0,
            depth: 1,
        }
    }

    /// Lets each broker's thread have up to `depth` requests on the wire before it reads an
    /// answer (the producer's `max.in.flight.requests.per.connection`): a broker's round trip
    /// then no longer bounds its throughput. Answers are still read, and reported, in the order
    /// the requests went out; a failed connection fails every request still unanswered on it.
    pub(in crate::wire) fn with_depth(mut self, depth: usize) -> Self {
        self.depth = depth.max(1);
        self
    }

    /// Queues `body` on `broker`'s lane (started, or restarted when the broker's address
    /// changed or its thread is gone); the broker may hold it `wait`. Returns the job's id.
    pub(in crate::wire) fn submit(
        &mut self,
        broker: i32,
        addr: &str,
        body: L::Job,
        wait: Duration,
    ) -> Result<u64> {
        self.next_id = self.next_id.wrapping_add(1);
        let id = self.next_id;
        let deadline = Instant::now() + wait + FETCH_ANSWER_MARGIN + FETCH_CONNECT_GRACE;
        if self.threads.get(&broker).is_some_and(|t| t.addr != addr) {
            info!(
                "{}: broker {broker} moved to {addr}; restarting its thread",
                L::NAME
            );
            self.threads.remove(&broker);
        }
        let mut job = Some(Job { id, body });
        for _attempt in 0..2 {
            let Some(j) = job.take() else { break };
            if !self.threads.contains_key(&broker) {
                let handle = self.spawn(broker, addr)?;
                self.threads.insert(broker, handle);
            }
            let Some(handle) = self.threads.get(&broker) else {
                break;
            };
            match handle.jobs.send(j) {
                Ok(()) => {
                    self.flights.insert(
                        id,
                        Flight {
                            broker,
                            sent_at: None,
                            deadline,
                        },
                    );
                    return Ok(id);
                }
                Err(mpsc::SendError(j)) => {
                    // The thread ended (it only does when its channel closes): start anew.
                    self.threads.remove(&broker);
                    job = Some(j);
                }
            }
        }
        Err(WireError::io(std::io::Error::other(format!(
            "{} thread of broker {broker} unavailable",
            L::NAME
        ))))
    }

    fn spawn(&self, broker: i32, addr: &str) -> Result<Handle<L::Job>> {
        let (jobs_tx, jobs_rx) = mpsc::channel();
        let worker = Worker::<L> {
            broker,
            lane: L::default(),
            link: Link {
                addr: addr.to_string(),
                config: self.config.clone(),
                conn: None,
                backoff: self.backoff,
                failures: 0,
                retry_at: None,
                version: None,
            },
            events: self.events_tx.clone(),
            depth: self.depth,
        };
        thread::Builder::new()
            .name(format!("rg-{}-{broker}", L::NAME))
            .spawn(move || worker.run(&jobs_rx))
            .map_err(WireError::io)?;
        debug!(
            "{}: started the thread of broker {broker} ({addr})",
            L::NAME
        );
        Ok(Handle {
            addr: addr.to_string(),
            jobs: jobs_tx,
        })
    }

    /// Whether `broker`'s lane has a job not answered yet.
    pub(in crate::wire) fn is_busy(&self, broker: i32) -> bool {
        self.flights.values().any(|f| f.broker == broker)
    }

    /// Job `id`, while it is in flight.
    #[cfg(test)]
    pub(in crate::wire) fn flight(&self, id: u64) -> Option<&Flight> {
        self.flights.get(&id)
    }

    /// Every job in flight.
    pub(in crate::wire) fn flights(&self) -> impl Iterator<Item = (u64, &Flight)> {
        self.flights.iter().map(|(id, f)| (*id, f))
    }

    /// What ends a round's [`collect`](Self::collect) early from another thread (the
    /// consumer's waker): a report of its own on the same channel, so no wake-up is lost
    /// between two waits.
    pub(in crate::wire) fn nudge(&self) -> crate::wire::Nudge {
        let events = self.events_tx.clone();
        std::sync::Arc::new(move || {
            // The asking side gone: nothing waits any more.
            let _ = events.send(Event::Wake);
        })
    }

    /// Collects answers as `wait` says: until every job of `wait.jobs` has answered (or, with
    /// `by_deadline`, is overdue), never past `wait.until` (plus [`FETCH_CONNECT_GRACE`] in a
    /// round while nothing has answered and a job waited for is not sent). A round also ends
    /// once an answer [brings data](Lane::brings_data). Every report already in is taken,
    /// answers of other jobs included: whichever call collects an answer returns it.
    pub(in crate::wire) fn collect(&mut self, wait: &Wait) -> Collected<L::Answer> {
        let mut out = Collected {
            done: Vec::new(),
            woken: false,
        };
        loop {
            // Every report already in, without waiting (after a wake too: an answer that came
            // with it is this call's).
            while let Ok(event) = self.events_rx.try_recv() {
                out.woken |= self.absorb(event, wait.round, &mut out.done);
            }
            if out.woken || (wait.any && !out.done.is_empty()) {
                break;
            }
            if wait.round
                && out
                    .done
                    .iter()
                    .any(|d| d.result.as_ref().is_ok_and(L::brings_data))
            {
                // Data in hand: the jobs not answered yet stay in flight for a later call.
                break;
            }
            let now = Instant::now();
            let mut latest: Option<Instant> = None;
            let mut unsent = false;
            for id in &wait.jobs {
                let Some(f) = self.flights.get(id) else {
                    continue;
                };
                if wait.by_deadline && f.deadline <= now {
                    continue;
                }
                latest = Some(latest.map_or(f.deadline, |l| l.max(f.deadline)));
                unsent |= f.sent_at.is_none();
            }
            let answered = !out.done.is_empty();
            let bound = if wait.round && !answered && unsent {
                wait.until + FETCH_CONNECT_GRACE
            } else {
                wait.until
            };
            let until = match latest {
                Some(latest) if wait.by_deadline => latest.min(bound),
                Some(_) => bound,
                None if !answered && wait.linger => wait.until,
                None => break,
            };
            if until <= now {
                break;
            }
            match self.events_rx.recv_timeout(until - now) {
                Ok(event) => out.woken |= self.absorb(event, wait.round, &mut out.done),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if latest.is_none() {
                        break;
                    }
                }
                // Cannot happen: this struct holds a sender.
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        out
    }

    /// Applies one report; true when it was the waker's and `round` (the caller stops
    /// waiting).
    fn absorb(
        &mut self,
        event: Event<L::Answer>,
        round: bool,
        done: &mut Vec<Done<L::Answer>>,
    ) -> bool {
        match event {
            Event::Sent { id, at, wait } => {
                if let Some(f) = self.flights.get_mut(&id) {
                    f.sent_at = Some(at);
                    f.deadline = at + wait + FETCH_ANSWER_MARGIN;
                }
            }
            Event::Wake => return round,
            Event::Done {
                broker,
                id,
                at,
                version,
                result,
            } => {
                let Some(flight) = self.flights.remove(&id) else {
                    return false;
                };
                done.push(Done {
                    broker,
                    id,
                    sent_at: flight.sent_at,
                    at,
                    version,
                    result,
                });
            }
        }
        false
    }
}

/// One broker's thread: its lane and its connection.
struct Worker<L: Lane> {
    broker: i32,
    lane: L,
    link: Link,
    events: mpsc::Sender<Event<L::Answer>>,
    depth: usize,
}

impl<L: Lane> Worker<L> {
    fn run(mut self, jobs: &mpsc::Receiver<Job<L::Job>>) {
        if self.depth > 1 {
            self.run_pipelined(jobs);
            return;
        }
        loop {
            let job = match L::IDLE_WATCH {
                Some(every) => match jobs.recv_timeout(every) {
                    Ok(job) => job,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        self.watch_idle();
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                },
                None => match jobs.recv() {
                    Ok(job) => job,
                    Err(mpsc::RecvError) => break,
                },
            };
            let result = self.serve(&job);
            let at = L::now();
            if let Err(e) = &result {
                self.failed(e);
            }
            let done = Event::Done {
                broker: self.broker,
                id: job.id,
                at,
                version: self.link.version.take(),
                result,
            };
            if self.events.send(done).is_err() {
                break;
            }
        }
        self.disconnect();
        debug!("{}: the thread of broker {} ends", L::NAME, self.broker);
    }

    /// The loop of a lane with several requests on the wire: it writes a job whenever one is
    /// waiting and fewer than `depth` are unanswered, and otherwise reads the oldest answer. It
    /// waits for a job only when nothing is unanswered, so a broker that stops answering holds
    /// only its own requests, each bounded by the request timeout.
    fn run_pipelined(mut self, jobs: &mpsc::Receiver<Job<L::Job>>) {
        let mut written: std::collections::VecDeque<u64> = std::collections::VecDeque::new();
        let mut open = true;
        while open || !written.is_empty() {
            let job = if !open || written.len() >= self.depth {
                None
            } else if written.is_empty() {
                match jobs.recv() {
                    Ok(job) => Some(job),
                    Err(mpsc::RecvError) => {
                        open = false;
                        None
                    }
                }
            } else {
                match jobs.try_recv() {
                    Ok(job) => Some(job),
                    Err(mpsc::TryRecvError::Empty) => None,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        open = false;
                        None
                    }
                }
            };
            let (id, result) = match job {
                Some(job) => {
                    if self.link.conn.as_ref().is_some_and(Connection::is_broken) {
                        self.disconnect();
                    }
                    let (id, events) = (job.id, &self.events);
                    let mut sent = |at, wait| {
                        let _ = events.send(Event::Sent { id, at, wait });
                    };
                    match self.lane.write(&mut self.link, &job.body, &mut sent) {
                        Ok(None) => {
                            written.push_back(id);
                            continue;
                        }
                        Ok(Some(answer)) => (id, Ok(answer)),
                        Err(e) => (id, Err(e)),
                    }
                }
                None => match written.pop_front() {
                    Some(id) => (id, self.lane.read(&mut self.link)),
                    None => continue,
                },
            };
            let connected = self.link.conn.is_some();
            match &result {
                Ok(_) => self.link.failures = 0,
                Err(e) => self.failed(e),
            }
            if !self.report(id, result) {
                return;
            }
            if connected && self.link.conn.is_none() {
                // The connection went with the failure: what was written on it is unanswered
                // for good (the broker may still have executed it).
                for id in written.drain(..) {
                    let lost = WireError::io(std::io::Error::new(
                        std::io::ErrorKind::ConnectionAborted,
                        format!(
                            "{}: connection to broker {} lost before the answer",
                            L::NAME,
                            self.broker
                        ),
                    ));
                    if !self.report(id, Err(lost)) {
                        return;
                    }
                }
            }
        }
        self.disconnect();
        debug!("{}: the thread of broker {} ends", L::NAME, self.broker);
    }

    /// Reports job `id`'s answer; false when nobody listens any more.
    fn report(&mut self, id: u64, result: Result<L::Answer>) -> bool {
        let done = Event::Done {
            broker: self.broker,
            id,
            at: L::now(),
            version: self.link.version.take(),
            result,
        };
        self.events.send(done).is_ok()
    }

    fn serve(&mut self, job: &Job<L::Job>) -> Result<L::Answer> {
        if self.link.conn.as_ref().is_some_and(Connection::is_broken) {
            self.disconnect();
        }
        let (id, events) = (job.id, &self.events);
        let mut sent = |at, wait| {
            let _ = events.send(Event::Sent { id, at, wait });
        };
        let answer = self.lane.serve(&mut self.link, &job.body, &mut sent)?;
        self.link.failures = 0;
        Ok(answer)
    }

    /// Between jobs: a connection the broker closed (a restart, a kill, its idle timeout) is
    /// dropped now, not when the next request finds it gone.
    fn watch_idle(&mut self) {
        if self.link.conn.as_mut().is_some_and(Connection::peer_closed) {
            info!(
                "{}: broker {} closed an idle connection",
                L::NAME,
                self.broker
            );
            self.disconnect();
        }
    }

    /// The lane ends what the broker ties to the connection, then the connection is dropped.
    fn disconnect(&mut self) {
        self.lane.disconnecting();
        self.link.conn = None;
    }

    /// After a failed job: a broken connection is dropped and the next connect waits an
    /// exponential backoff.
    fn failed(&mut self, e: &WireError) {
        let link = &self.link;
        let broken = e.breaks_connection() || link.conn.as_ref().is_some_and(Connection::is_broken);
        if !broken && link.conn.is_some() {
            return;
        }
        self.disconnect();
        let link = &mut self.link;
        link.failures = link.failures.saturating_add(1);
        let factor = 1u32 << link.failures.saturating_sub(1).min(16);
        let delay = link.backoff.0.saturating_mul(factor).min(link.backoff.1);
        link.retry_at = Some(Instant::now() + delay);
        debug!(
            "{}: broker {} failed ({} in a row): {e}; next connect in {delay:?}",
            L::NAME,
            self.broker,
            link.failures
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lane that answers each job (a delay) after that delay, without a connection.
    #[derive(Default)]
    struct Sleepy;

    impl Lane for Sleepy {
        type Job = Duration;
        type Answer = Duration;
        const NAME: &'static str = "test";
        const IDLE_WATCH: Option<Duration> = None;

        fn serve(
            &mut self,
            _link: &mut Link,
            job: &Duration,
            sent: &mut dyn FnMut(Instant, Duration),
        ) -> Result<Duration> {
            sent(Instant::now(), *job);
            thread::sleep(*job);
            Ok(*job)
        }
    }

    fn lanes() -> Lanes<Sleepy> {
        Lanes::new(
            ConnectionConfig::default(),
            Duration::from_millis(10),
            Duration::from_millis(100),
        )
    }

    /// A round waits for its jobs no longer than the wait plus the margin; the late answer
    /// stays in flight and comes with a later call, whichever jobs that call is for.
    #[test]
    fn a_round_leaves_a_late_answer_in_flight_for_a_later_call() {
        let mut lanes = lanes();
        let fast = lanes
            .submit(1, "fast:1", Duration::from_millis(10), Duration::ZERO)
            .expect("submit");
        let slow = lanes
            .submit(2, "slow:1", Duration::from_millis(900), Duration::ZERO)
            .expect("submit");
        let started = Instant::now();
        let first = lanes.collect(&Wait::round(vec![fast, slow], Duration::from_millis(50)));
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(50) + FETCH_ANSWER_MARGIN + Duration::from_millis(150)
        );
        assert_eq!(
            first.done.iter().map(|d| d.id).collect::<Vec<_>>(),
            vec![fast]
        );
        assert!(lanes.is_busy(2) && !lanes.is_busy(1));
        assert!(lanes.flight(slow).and_then(|f| f.sent_at).is_some());
        let later = lanes.collect(&Wait::until(
            Vec::new(),
            Instant::now() + Duration::from_secs(3),
        ));
        assert!(later.done.is_empty(), "nothing waited for, nothing waited");
        let later = lanes.collect(&Wait::until(
            vec![slow],
            Instant::now() + Duration::from_secs(3),
        ));
        assert_eq!(
            later.done.iter().map(|d| d.id).collect::<Vec<_>>(),
            vec![slow]
        );
        assert!(!lanes.is_busy(2));
    }

    /// The waker ends a round at once, and only a round.
    #[test]
    fn the_waker_ends_a_round_and_nothing_else() {
        let mut lanes = lanes();
        let job = lanes
            .submit(1, "b:1", Duration::from_millis(400), Duration::ZERO)
            .expect("submit");
        (lanes.nudge())();
        let started = Instant::now();
        let woken = lanes.collect(&Wait::round(vec![job], Duration::from_secs(2)));
        assert!(woken.woken && woken.done.is_empty());
        assert!(started.elapsed() < Duration::from_millis(100));
        (lanes.nudge())();
        let done = lanes.collect(&Wait::until(
            vec![job],
            Instant::now() + Duration::from_secs(3),
        ));
        assert!(!done.woken);
        assert_eq!(done.done.len(), 1);
    }
}
