//! API version negotiation, kept free of I/O so every rule is unit-tested.
//!
//! Kafka 4.0 removed old request versions (KIP-896) and Kafka 2.1 lacks the newest ones, so the
//! only safe rule is: for each API use the highest version that both we and the broker support,
//! and fail loudly (naming the API and both ranges) when there is none. The client-side ranges
//! below are what this crate encodes *and has tested*; they are deliberately narrower than
//! `kafka-protocol`'s generated range, because a newer version can change semantics (e.g. Fetch
//! v13 identifies topics by id only) that the code using it must handle.

use std::collections::HashMap;

use kafka_protocol::messages::ApiKey;

use super::error::{Result, WireError};

/// An inclusive range of API versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionRange {
    /// Lowest version (inclusive).
    pub min: i16,
    /// Highest version (inclusive).
    pub max: i16,
}

impl VersionRange {
    /// Convenience constructor.
    pub const fn new(min: i16, max: i16) -> Self {
        VersionRange { min, max }
    }

    /// The highest version in both ranges, if they overlap.
    pub fn highest_common(self, other: VersionRange) -> Option<i16> {
        let lo = self.min.max(other.min);
        let hi = self.max.min(other.max);
        (lo <= hi).then_some(hi)
    }

    /// Whether `v` lies in the range.
    pub(crate) fn contains(self, v: i16) -> bool {
        self.min <= v && v <= self.max
    }
}

/// The versions this client speaks for the APIs the wire layer itself uses.
///
/// Minimums are the KIP-896 floors (what Kafka 4.0 still accepts and Kafka 2.1 already had), so
/// that a broker anywhere from the 2.1 baseline to 4.x overlaps. Maximums are the newest versions
/// whose semantics the wire code handles (topic names rather than ids; per-group OffsetFetch from
/// v8). For other APIs (group membership, used by `group`), `kafka-protocol`'s own generated range
/// is used unless the caller passes one to `VersionTable::negotiate_within`.
pub fn client_range(api: ApiKey) -> VersionRange {
    match api {
        ApiKey::ApiVersions => VersionRange::new(0, 3),
        ApiKey::Metadata => VersionRange::new(1, 12),
        ApiKey::Fetch => VersionRange::new(4, 12),
        ApiKey::ListOffsets => VersionRange::new(1, 7),
        ApiKey::OffsetCommit => VersionRange::new(2, 9),
        ApiKey::OffsetFetch => VersionRange::new(1, 9),
        ApiKey::FindCoordinator => VersionRange::new(0, 4),
        // v10-v11 add tagged leader hints (KIP-951) that the lane ignores; v12 is KIP-890's
        // transaction version 2 (a transactional batch adds its partition to the transaction
        // implicitly), which a transaction of version 1 must not use (the callers cap it at 11).
        // v13 names topics by id only, which the produce paths do not handle.
        ApiKey::Produce => VersionRange::new(3, 12),
        // v6 is KIP-939's two-phase commit, which this client does not take part in.
        ApiKey::InitProducerId => VersionRange::new(0, 5),
        // v4+ is the broker-to-broker batch form (KIP-890's verification); clients stop at 3.
        ApiKey::AddPartitionsToTxn => VersionRange::new(0, 3),
        ApiKey::AddOffsetsToTxn => VersionRange::new(0, 4),
        // v3+ carries the group membership that fences a zombie's offsets (KIP-447); without it
        // there is no fencing, so lower versions are not spoken at all. v5 is transaction
        // version 2 (the coordinator adds the offsets partition itself).
        ApiKey::TxnOffsetCommit => VersionRange::new(3, 5),
        // v5 is transaction version 2: the answer carries the bumped producer id and epoch.
        ApiKey::EndTxn => VersionRange::new(0, 5),
        // v0 is gone from Kafka 4.0 (KIP-896); v1 is in 2.1.
        ApiKey::DescribeConfigs => VersionRange::new(1, 4),
        // v2 (RENEW, the acquire mode) is encoded by `wire::share`, past kafka-protocol's v1.
        ApiKey::ShareFetch | ApiKey::ShareAcknowledge => VersionRange::new(1, 2),
        other => {
            let r = other.valid_versions();
            VersionRange::new(r.min, r.max)
        }
    }
}

/// What one broker advertised in its ApiVersions response, and the negotiation against it.
///
/// Each connection owns one table: brokers in a cluster can run different versions during a
/// rolling upgrade, so a version negotiated with one broker must never be used with another.
#[derive(Clone, Debug, Default)]
pub struct VersionTable {
    broker: HashMap<i16, VersionRange>,
    /// The cluster-wide finalized features (KIP-584) the broker reported in ApiVersions v3+:
    /// (name, max version level). Empty before v3 or when the broker reported none.
    finalized_features: Vec<(String, i16)>,
    /// The epoch of [`Self::finalized_features`] (-1: unknown), so that a caller comparing
    /// several brokers' reports takes the newest, as Java's `ApiVersions` does.
    finalized_features_epoch: i64,
}

impl VersionTable {
    /// Builds the table from `(api_key, min, max)` triples as found in an ApiVersions response.
    pub(crate) fn from_broker(apis: impl IntoIterator<Item = (i16, i16, i16)>) -> Self {
        let broker = apis
            .into_iter()
            .map(|(k, lo, hi)| (k, VersionRange::new(lo, hi)))
            .collect();
        VersionTable {
            broker,
            finalized_features: Vec::new(),
            finalized_features_epoch: -1,
        }
    }

    /// The same table with the finalized features (name, max version level) and their epoch
    /// from the ApiVersions v3+ answer. Kept because the transaction protocol a producer may use
    /// (KIP-890's `transaction.version`) is a finalized feature, not an API version.
    pub(crate) fn with_finalized_features(
        mut self,
        epoch: i64,
        features: impl IntoIterator<Item = (String, i16)>,
    ) -> Self {
        self.finalized_features = features.into_iter().collect();
        self.finalized_features_epoch = epoch;
        self
    }

    /// The max version level of finalized feature `name`, if the broker reported it (a
    /// feature the cluster never finalized is level 0 for Kafka).
    pub fn finalized_feature(&self, name: &str) -> Option<i16> {
        self.finalized_features
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, level)| *level)
    }

    /// The epoch of the finalized features reported (-1: none reported).
    pub fn finalized_features_epoch(&self) -> i64 {
        self.finalized_features_epoch
    }

    /// The range the broker advertised for `api`, if any.
    pub fn broker_range(&self, api: ApiKey) -> Option<VersionRange> {
        self.broker.get(&(api as i16)).copied()
    }

    /// Highest version of `api` that both this client ([`client_range`]) and the broker support.
    pub(crate) fn negotiate(&self, api: ApiKey) -> Result<i16> {
        self.negotiate_within(api, client_range(api))
    }

    /// Highest version of `api` within `ours` that the broker supports; an
    /// [`WireError::UnsupportedVersion`] naming the API and both ranges otherwise.
    pub(crate) fn negotiate_within(&self, api: ApiKey, ours: VersionRange) -> Result<i16> {
        let broker = self.broker_range(api);
        broker
            .and_then(|b| b.highest_common(ours))
            .ok_or(WireError::UnsupportedVersion {
                api: api as i16,
                ours: (ours.min, ours.max),
                broker: broker.map(|b| (b.min, b.max)),
            })
    }

    /// Whether the broker advertised `version` of `api` (the "never send what was not
    /// advertised" check applied before every request).
    pub(crate) fn broker_supports(&self, api: ApiKey, version: i16) -> bool {
        self.broker_range(api).is_some_and(|r| r.contains(version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Kafka 2.1 baseline as advertised by a 2.1 broker for the APIs we use.
    fn kafka_2_1() -> VersionTable {
        VersionTable::from_broker([
            (ApiKey::Produce as i16, 0, 7),
            (ApiKey::Fetch as i16, 0, 10),
            (ApiKey::ListOffsets as i16, 0, 4),
            (ApiKey::Metadata as i16, 0, 7),
            (ApiKey::OffsetCommit as i16, 0, 6),
            (ApiKey::OffsetFetch as i16, 0, 5),
            (ApiKey::FindCoordinator as i16, 0, 2),
            (ApiKey::ApiVersions as i16, 0, 2),
        ])
    }

    #[test]
    fn picks_highest_common_version() {
        let t = kafka_2_1();
        assert_eq!(t.negotiate(ApiKey::Fetch).ok(), Some(10));
        assert_eq!(t.negotiate(ApiKey::ListOffsets).ok(), Some(4));
        assert_eq!(t.negotiate(ApiKey::OffsetCommit).ok(), Some(6));
        assert_eq!(t.negotiate(ApiKey::OffsetFetch).ok(), Some(5));
        assert_eq!(t.negotiate(ApiKey::Produce).ok(), Some(7));
        assert_eq!(t.negotiate(ApiKey::Metadata).ok(), Some(7));
        assert_eq!(t.negotiate(ApiKey::ApiVersions).ok(), Some(2));
    }

    #[test]
    fn caps_at_our_maximum_for_new_brokers() {
        let t = VersionTable::from_broker([(ApiKey::Fetch as i16, 4, 17)]);
        assert_eq!(
            t.negotiate(ApiKey::Fetch).ok(),
            Some(client_range(ApiKey::Fetch).max)
        );
    }

    #[test]
    fn kip_896_floors_are_our_minimums() {
        assert_eq!(client_range(ApiKey::Fetch).min, 4);
        assert_eq!(client_range(ApiKey::ListOffsets).min, 1);
        assert_eq!(client_range(ApiKey::OffsetCommit).min, 2);
        assert_eq!(client_range(ApiKey::OffsetFetch).min, 1);
        assert_eq!(client_range(ApiKey::Produce).min, 3);
    }

    #[test]
    fn our_maximum_never_exceeds_what_kafka_protocol_encodes() {
        for api in [
            ApiKey::ApiVersions,
            ApiKey::Metadata,
            ApiKey::Fetch,
            ApiKey::ListOffsets,
            ApiKey::OffsetCommit,
            ApiKey::OffsetFetch,
            ApiKey::FindCoordinator,
            ApiKey::Produce,
            ApiKey::InitProducerId,
            ApiKey::AddPartitionsToTxn,
            ApiKey::AddOffsetsToTxn,
            ApiKey::TxnOffsetCommit,
            ApiKey::EndTxn,
        ] {
            let ours = client_range(api);
            let gen = api.valid_versions();
            assert!(ours.min >= gen.min && ours.max <= gen.max, "{api:?}");
        }
    }

    #[test]
    fn no_overlap_names_api_and_both_ranges() {
        // A broker that only speaks pre-KIP-74 fetch versions.
        let t = VersionTable::from_broker([(ApiKey::Fetch as i16, 0, 3)]);
        let err = t.negotiate(ApiKey::Fetch).err();
        match err {
            Some(WireError::UnsupportedVersion { api, ours, broker }) => {
                assert_eq!(api, ApiKey::Fetch as i16);
                assert_eq!(ours, (4, 12));
                assert_eq!(broker, Some((0, 3)));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn missing_api_is_unsupported_with_no_broker_range() {
        let t = VersionTable::from_broker([]);
        let msg = t
            .negotiate(ApiKey::OffsetCommit)
            .err()
            .map(|e| e.to_string());
        let msg = msg.unwrap_or_default();
        assert!(msg.contains("OffsetCommit"), "{msg}");
        assert!(msg.contains("does not advertise"), "{msg}");
    }

    #[test]
    fn negotiate_within_respects_caller_range() {
        let t = VersionTable::from_broker([(ApiKey::JoinGroup as i16, 0, 9)]);
        assert_eq!(
            t.negotiate_within(ApiKey::JoinGroup, VersionRange::new(2, 5))
                .ok(),
            Some(5)
        );
        assert!(t.broker_supports(ApiKey::JoinGroup, 9));
        assert!(!t.broker_supports(ApiKey::JoinGroup, 10));
    }
}
