//! The consumer's fetch lanes: one per broker a [`Client`](crate::wire::Client) fetches from,
//! on the request-lane machine of `wire/lane.rs`, which owns each broker's fetch connection on
//! that broker's own thread (so that a hung broker delays no other broker's partitions; see
//! there). This file supplies what is Fetch's own: the request a job writes (with the
//! prefetched continuation, see [`FetchConfig::prefetch`]) and the bookkeeping of the fetching
//! thread (which positions each job asked for, which brokers are overdue).
//!
//! A fetch lane has at most one job: the fetching thread sends a broker a new job only once its
//! last one was answered ([`Fetchers::is_busy`]).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{self as msg, ApiKey};
use log::{debug, info, warn};

use super::{
    build_request, continuation, is_subset, position_key, settings_key, FetchConfig, FetchPosition,
    InFlightFetch,
};
use crate::wire::client::ClientConfig;
use crate::wire::error::{Result, WireError};
#[cfg(test)]
use crate::wire::lane::FETCH_ANSWER_MARGIN;
use crate::wire::lane::{Lane, Lanes, Link, Wait};
use crate::TopicPartition;

/// What the fetching thread asks a broker's fetch lane to do.
#[derive(Debug)]
pub(in crate::wire) struct Job {
    pub(super) positions: Vec<FetchPosition>,
    /// KIP-320: each partition's leader epoch as last seen in Metadata (-1: unknown).
    pub(super) epochs: HashMap<TopicPartition, i32>,
    pub(super) cfg: FetchConfig,
    pub(super) max_bytes: i32,
}

/// One broker's answer to a job, as [`Fetchers::collect`] returns it.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) broker: i32,
    /// The positions the job asked for (not necessarily those the caller wants now).
    pub(super) positions: Vec<FetchPosition>,
    pub(super) result: Result<msg::FetchResponse>,
}

/// The fetch lanes of one client, and what the fetching thread keeps of their jobs.
#[derive(Debug)]
pub(in crate::wire) struct Fetchers {
    lanes: Lanes<FetchLane>,
    /// The positions each job in flight asked for.
    asked: HashMap<u64, Vec<FetchPosition>>,
    /// Jobs whose lateness was logged already.
    warned: HashSet<u64>,
    /// Brokers whose last fetch failed or is late: other requests (Metadata) try them last.
    troubled: HashSet<i32>,
}

impl Fetchers {
    /// The fetch lanes of a client with `config`.
    pub(in crate::wire) fn new(config: &ClientConfig) -> Self {
        Fetchers {
            lanes: Lanes::new(
                config.connection.clone(),
                config.retry_backoff,
                config.retry_backoff_max,
            ),
            asked: HashMap::new(),
            warned: HashSet::new(),
            troubled: HashSet::new(),
        }
    }

    /// Whether `broker` still works on an earlier job (its partitions wait for that answer).
    pub(super) fn is_busy(&self, broker: i32) -> bool {
        self.lanes.is_busy(broker)
    }

    /// Whether `broker`'s last fetch failed or is overdue.
    pub(in crate::wire) fn is_troubled(&self, broker: i32) -> bool {
        self.troubled.contains(&broker)
    }

    /// Hands `job` to `broker`'s fetch lane. The broker must not be busy.
    pub(super) fn submit(&mut self, broker: i32, addr: &str, job: Job) -> Result<()> {
        let positions = job.positions.clone();
        let wait = job.cfg.max_wait;
        let id = self.lanes.submit(broker, addr, job, wait)?;
        self.asked.insert(id, positions);
        Ok(())
    }

    /// What ends a [`collect`](Self::collect) early from another thread (the consumer's
    /// waker).
    pub(in crate::wire) fn nudge(&self) -> crate::wire::Nudge {
        self.lanes.nudge()
    }

    /// Collects answers: waits until every job sent in this call (to the brokers `fresh`) and,
    /// when `max_wait` is not zero, every earlier job still within its deadline has answered,
    /// or until the first answer with records (see [`Lane::brings_data`]), but never past
    /// `start + max_wait + FETCH_ANSWER_MARGIN` once any broker has answered (nor past
    /// `FETCH_CONNECT_GRACE` more while none has). The jobs of a troubled broker (its last
    /// fetch failed or was late) are not waited for: a broker that is down, hung or backing
    /// off before its next connect must not hold the records of the others, round after round,
    /// until the cluster fences it. Jobs not answered stay in flight; their answers come with a
    /// later call. With nothing to wait for and nothing answered, it waits for reports until
    /// that bound anyway (a caller looping on fetch must not spin), unless `max_wait` is zero
    /// (the caller has other work).
    pub(super) fn collect(&mut self, fresh: &[i32], max_wait: Duration) -> Vec<Answer> {
        let wait_carried = !max_wait.is_zero();
        let jobs = self
            .lanes
            .flights()
            .filter(|(_, f)| wait_carried || fresh.contains(&f.broker))
            .filter(|(_, f)| !self.troubled.contains(&f.broker))
            .map(|(id, _)| id)
            .collect();
        let collected = self.lanes.collect(&Wait::fetch_round(jobs, max_wait));
        let mut answers = Vec::with_capacity(collected.done.len());
        for done in collected.done {
            let broker = done.broker;
            if self.warned.remove(&done.id) {
                info!("fetch: broker {broker} answered its late fetch");
            }
            if done.result.is_ok() {
                self.troubled.remove(&broker);
            } else {
                self.troubled.insert(broker);
            }
            answers.push(Answer {
                broker,
                positions: self.asked.remove(&done.id).unwrap_or_default(),
                result: done.result,
            });
        }
        let now = Instant::now();
        for (id, flight) in self.lanes.flights() {
            if flight.deadline <= now && self.warned.insert(id) {
                self.troubled.insert(flight.broker);
                warn!(
                    "fetch: broker {} has not answered a fetch of {} partition(s) in time; \
                     its request stays in flight, the other brokers' partitions go on",
                    flight.broker,
                    self.asked.get(&id).map_or(0, Vec::len)
                );
            }
        }
        answers
    }
}

/// The fetch lane of one broker: the prefetched request (see [`FetchConfig::prefetch`]).
#[derive(Default)]
pub(in crate::wire) struct FetchLane {
    prefetched: Option<InFlightFetch>,
}

impl Lane for FetchLane {
    type Job = Job;
    type Answer = msg::FetchResponse;
    const NAME: &'static str = "fetch";
    const IDLE_WATCH: Option<Duration> = None;

    fn serve(
        &mut self,
        link: &mut Link,
        job: &Job,
        sent: &mut dyn FnMut(Instant, Duration),
    ) -> Result<msg::FetchResponse> {
        let mut reused = None;
        if let Some(pf) = self.prefetched.take() {
            // Usable if it asked for every wanted position (it may hold more partitions, whose
            // data is then ignored: only requested positions are ever returned).
            if link.current().is_some()
                && pf.settings == settings_key(&job.cfg)
                && is_subset(&position_key(&job.positions), &pf.key)
            {
                sent(pf.sent_at, pf.max_wait);
                reused = Some((pf.pending, pf.max_wait));
            } else {
                // The caller moved on (seek, new assignment, other settings): the answer in
                // flight is for other positions. Dropping the connection discards it at once,
                // where reading it could take up to max_wait.
                debug!("fetch: discarding a prefetch");
                link.discard();
            }
        }
        let (pending, wait) = match reused {
            Some(p) => p,
            None => {
                let conn = link.connection()?;
                let version = conn.version_for(ApiKey::Fetch)?;
                let req = build_request(&job.positions, &job.epochs, &job.cfg, job.max_bytes);
                let pending = conn.send_request(&req, version)?;
                sent(Instant::now(), job.cfg.max_wait);
                (pending, job.cfg.max_wait)
            }
        };
        let timeout = link.request_timeout() + wait;
        let conn = link.current().ok_or_else(not_connected)?;
        let resp = conn.receive(pending, timeout)?;
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
                    Err(e) => debug!("fetch: prefetch not sent: {e}"),
                }
            }
        }
        Ok(resp)
    }

    /// A prefetch in flight goes with the connection.
    fn disconnecting(&mut self) {
        self.prefetched = None;
    }

    /// An answer holding record data for some partition (possibly only control batches, which
    /// decode to nothing; the next round then waits again).
    fn brings_data(resp: &msg::FetchResponse) -> bool {
        resp.responses
            .iter()
            .flat_map(|t| &t.partitions)
            .any(|p| p.records.as_ref().is_some_and(|r| !r.is_empty()))
    }
}

fn not_connected() -> WireError {
    WireError::io(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        "no fetch connection",
    ))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::thread;

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
        client_with(first, second, Duration::from_millis(100))
    }

    /// [`client`] whose lanes wait `backoff` before they connect again after a failure.
    fn client_with(first: &str, second: &str, backoff: Duration) -> Client {
        let mut config = ClientConfig::new(["127.0.0.1:9"]);
        config.connection.request_timeout = Duration::from_secs(20);
        config.connection.connect_timeout = Duration::from_secs(20);
        config.retry_backoff = backoff;
        config.retry_backoff_max = backoff;
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
        // Enough rounds to pass the connect grace too (the handshake-silent broker), and until
        // the silent broker is overdue (each round ends at the other broker's records).
        let overdue = Instant::now() + Duration::from_secs(5);
        let mut round = 0;
        while round < 6 || (!client.fetchers.is_troubled(1) && Instant::now() < overdue) {
            round += 1;
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

    /// A round ends at the first answer with records: the other broker's long poll (here a
    /// broker that never answers a fetch, with a 3 s wait) does not hold them.
    #[test]
    fn a_round_ends_at_the_first_answer_with_records() {
        let hung = fake_broker(Fake::SilentOnFetch, 0);
        let serving = fake_broker(Fake::Serving, 1);
        let mut client = client(&hung, &serving);
        let cfg = FetchConfig {
            max_wait: Duration::from_secs(3),
            ..FetchConfig::default()
        };
        for round in 0..3 {
            let started = Instant::now();
            let fetched = client.fetch(&positions(), &cfg).expect("fetch");
            let took = started.elapsed();
            assert!(
                took < Duration::from_secs(1),
                "round {round}: the records of broker 2 waited {took:?} for broker 1"
            );
            for part in fetched {
                let want = if part.tp.partition == 1 { 3 } else { 0 };
                assert_eq!(part.records.len(), want, "round {round}, {}", part.tp);
            }
        }
        assert!(client.fetchers.is_busy(1), "its request stays in flight");
    }

    /// A broker whose last fetch failed (it refuses connections) is not waited for while its
    /// lane backs off before connecting again: a round that asks it again returns at once
    /// instead of waiting out the connect grace, and its partition has nothing and no error.
    #[test]
    fn a_failed_broker_backing_off_is_not_waited_for() {
        let refused = {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr").to_string()
        };
        let serving = fake_broker(Fake::Serving, 1);
        let mut client = client_with(&refused, &serving, Duration::from_secs(3));
        let cfg = FetchConfig {
            max_wait: Duration::ZERO,
            ..FetchConfig::default()
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !client.fetchers.is_troubled(1) {
            assert!(Instant::now() < deadline, "broker 1's refusal never came");
            client.fetch(&positions(), &cfg).expect("fetch");
        }
        let only = [FetchPosition {
            tp: TopicPartition::new("t", 0),
            offset: 0,
        }];
        for round in 0..2 {
            let started = Instant::now();
            let fetched = client.fetch(&only, &cfg).expect("fetch");
            let took = started.elapsed();
            assert!(
                took < Duration::from_millis(500),
                "round {round}: waited {took:?} for a broker backing off"
            );
            assert_eq!(fetched.len(), 1);
            assert!(fetched[0].records.is_empty() && fetched[0].error.is_none());
        }
    }
}
