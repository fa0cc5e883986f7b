//! One fetch whose every partition the leader answered.
//!
//! Why: [`Client::fetch`] bounds its wait (`max_wait` plus a margin once a broker answered),
//! and a partition whose leader has not answered by then comes back with no records, no error
//! and an unknown high watermark (-1), its request still in flight for a later call. On two
//! busy cores a broker may well be late, and a test that reads a single call as "the broker's
//! answer" then fails by timing alone (seen on the version matrix's runs). Tests that check
//! what one answer holds fetch through [`fetch_answered`] instead.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rebalance_guard::wire::{
    Client, ClientConfig, FetchConfig, FetchPosition, FetchedPartition, IsolationLevel, OffsetSpec,
    Record,
};
use rebalance_guard::TopicPartition;

/// How long [`fetch_answered`] asks again before it fails the test.
const ANSWER_BOUND: Duration = Duration::from_secs(30);

/// [`Client::fetch`] again until every partition was answered (an error, records, or a known
/// high watermark), within [`ANSWER_BOUND`]; panics naming the positions past it.
pub fn fetch_answered(
    client: &mut Client,
    positions: &[FetchPosition],
    cfg: &FetchConfig,
) -> Vec<FetchedPartition> {
    let deadline = Instant::now() + ANSWER_BOUND;
    loop {
        let fetched = client.fetch(positions, cfg).expect("fetch");
        let answered = |p: &FetchedPartition| {
            p.error.is_some() || !p.records.is_empty() || p.high_watermark >= 0
        };
        if fetched.len() == positions.len() && fetched.iter().all(answered) {
            return fetched;
        }
        assert!(
            Instant::now() < deadline,
            "no answer within {ANSWER_BOUND:?} to a fetch of {positions:?}: {fetched:?}"
        );
    }
}

/// Every partition of `topic` from offset 0 to its end (as ListOffsets says when the call
/// starts), with our own fetch, within `bound`: what a producer test reads back to check that
/// each record is there once and in order.
pub fn read_topic(bootstrap: &str, topic: &str, bound: Duration) -> BTreeMap<i32, Vec<Record>> {
    read_topic_as(bootstrap, topic, bound, IsolationLevel::ReadUncommitted)
}

/// [`read_topic`] as a reader with `isolation`: with `read_committed`, up to the last stable
/// offset, without the records of aborted transactions (and never the control batches).
pub fn read_topic_as(
    bootstrap: &str,
    topic: &str,
    bound: Duration,
    isolation: IsolationLevel,
) -> BTreeMap<i32, Vec<Record>> {
    let mut cfg = ClientConfig::from_bootstrap_str(bootstrap);
    cfg.connection.request_timeout = Duration::from_secs(10);
    let mut c = Client::connect(cfg).expect("connect");
    let partitions = c.partitions(topic).expect("partitions");
    let tps: Vec<TopicPartition> = partitions
        .iter()
        .map(|&p| TopicPartition::new(topic, p))
        .collect();
    let end = c
        .list_offsets(&tps, OffsetSpec::Latest, isolation)
        .expect("latest offsets");
    let mut positions: Vec<FetchPosition> = tps
        .iter()
        .map(|tp| FetchPosition {
            tp: tp.clone(),
            offset: 0,
        })
        .collect();
    let fetch = FetchConfig {
        max_wait: Duration::from_millis(100),
        isolation,
        ..FetchConfig::default()
    };
    let mut out: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
    let deadline = Instant::now() + bound;
    loop {
        positions.retain(|p| p.offset < end[&p.tp]);
        if positions.is_empty() {
            return out;
        }
        assert!(Instant::now() < deadline, "read timed out at {positions:?}");
        for f in c.fetch(&positions, &fetch).expect("fetch") {
            assert!(f.error.is_none(), "fetch {}: {:?}", f.tp, f.error);
            if let Some(p) = positions.iter_mut().find(|p| p.tp == f.tp) {
                p.offset = f.next_offset;
            }
            out.entry(f.tp.partition).or_default().extend(f.records);
        }
    }
}
