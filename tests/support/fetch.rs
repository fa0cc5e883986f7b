//! One fetch whose every partition the leader answered.
//!
//! Why: [`Client::fetch`] bounds its wait (`max_wait` plus a margin once a broker answered),
//! and a partition whose leader has not answered by then comes back with no records, no error
//! and an unknown high watermark (-1), its request still in flight for a later call. On two
//! busy cores a broker may well be late, and a test that reads a single call as "the broker's
//! answer" then fails by timing alone (seen on the version matrix's runs). Tests that check
//! what one answer holds fetch through [`fetch_answered`] instead.

use std::time::{Duration, Instant};

use rebalance_guard::wire::{Client, FetchConfig, FetchPosition, FetchedPartition};

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
