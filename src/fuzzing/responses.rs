//! Fuzz target (c): response decoding, for every request type the client sends, at every
//! version it can negotiate.
//!
//! Input layout: byte 0 picks the API (mod the number of decoded APIs, in [`APIS`] order),
//! byte 1 the version (mod the size of the range the client can negotiate for it: our range
//! intersected with `kafka-protocol`'s); the rest is the response body after its header.
//!
//! Properties: no panic and no allocation beyond the fuzzer's `-malloc_limit_mb` (the point:
//! `kafka-protocol` sizes arrays by their claimed count, so a body that reaches it unbounded is
//! an allocation bomb); and the bounded pre-check decides alone: whenever it refuses a body,
//! so does the decode the client uses, and a refusal is `Malformed`, never another error.

use bytes::Bytes;
use kafka_protocol::messages::{self as msg, ApiKey};

use crate::wire::bounded;
use crate::wire::share::codec::{ShareAcknowledgeAnswer, ShareFetchAnswer};
use crate::wire::versions::client_range;
use crate::wire::WireError;

/// The APIs whose responses the client decodes, in selector order.
pub const APIS: [ApiKey; 27] = [
    ApiKey::ApiVersions,
    ApiKey::Metadata,
    ApiKey::Fetch,
    ApiKey::ListOffsets,
    ApiKey::OffsetFetch,
    ApiKey::OffsetCommit,
    ApiKey::FindCoordinator,
    ApiKey::JoinGroup,
    ApiKey::SyncGroup,
    ApiKey::Heartbeat,
    ApiKey::LeaveGroup,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
    ApiKey::CreateTopics,
    ApiKey::Produce,
    ApiKey::DescribeGroups,
    ApiKey::ConsumerGroupHeartbeat,
    ApiKey::DescribeConfigs,
    ApiKey::IncrementalAlterConfigs,
    ApiKey::ShareGroupHeartbeat,
    ApiKey::ShareFetch,
    ApiKey::ShareAcknowledge,
    // Appended, so that an existing seed still selects the API it was written for.
    ApiKey::InitProducerId,
    ApiKey::AddPartitionsToTxn,
    ApiKey::AddOffsetsToTxn,
    ApiKey::TxnOffsetCommit,
    ApiKey::EndTxn,
];

/// The versions of `api` the client can negotiate.
pub(crate) fn negotiable(api: ApiKey) -> (i16, i16) {
    let ours = client_range(api);
    if matches!(api, ApiKey::ShareFetch | ApiKey::ShareAcknowledge) {
        // Decoded past kafka-protocol's v1 by `wire::share::codec`.
        return (ours.min, ours.max);
    }
    let codec = api.valid_versions();
    (ours.min.max(codec.min), ours.max.min(codec.max))
}

fn decode(api: ApiKey, version: i16, body: Bytes) -> Result<(), WireError> {
    let mut b = body;
    macro_rules! run {
        ($($key:ident => $ty:ident),* $(,)?) => {
            match api {
                $(ApiKey::$key => bounded::decode::<msg::$ty>(api, version, &mut b).map(drop),)*
                _ => Ok(()),
            }
        };
    }
    run!(
        ApiVersions => ApiVersionsResponse,
        Metadata => MetadataResponse,
        Fetch => FetchResponse,
        ListOffsets => ListOffsetsResponse,
        OffsetFetch => OffsetFetchResponse,
        OffsetCommit => OffsetCommitResponse,
        FindCoordinator => FindCoordinatorResponse,
        JoinGroup => JoinGroupResponse,
        SyncGroup => SyncGroupResponse,
        Heartbeat => HeartbeatResponse,
        LeaveGroup => LeaveGroupResponse,
        SaslHandshake => SaslHandshakeResponse,
        SaslAuthenticate => SaslAuthenticateResponse,
        CreateTopics => CreateTopicsResponse,
        Produce => ProduceResponse,
        DescribeGroups => DescribeGroupsResponse,
        ConsumerGroupHeartbeat => ConsumerGroupHeartbeatResponse,
        DescribeConfigs => DescribeConfigsResponse,
        IncrementalAlterConfigs => IncrementalAlterConfigsResponse,
        ShareGroupHeartbeat => ShareGroupHeartbeatResponse,
        InitProducerId => InitProducerIdResponse,
        AddPartitionsToTxn => AddPartitionsToTxnResponse,
        AddOffsetsToTxn => AddOffsetsToTxnResponse,
        TxnOffsetCommit => TxnOffsetCommitResponse,
        EndTxn => EndTxnResponse,
    )?;
    match api {
        ApiKey::ShareFetch => bounded::decode::<ShareFetchAnswer>(api, version, &mut b).map(drop),
        ApiKey::ShareAcknowledge => {
            bounded::decode::<ShareAcknowledgeAnswer>(api, version, &mut b).map(drop)
        }
        _ => Ok(()),
    }
}

/// Runs target (c) on one input.
pub fn check(input: &[u8]) {
    let [api, version, body @ ..] = input else {
        return;
    };
    let api = APIS[usize::from(*api) % APIS.len()];
    let (lo, hi) = negotiable(api);
    let span = (hi - lo + 1) as u8;
    let version = lo + i16::from(*version % span);
    let pre = bounded::check(api, version, body);
    let decoded = decode(api, version, Bytes::copy_from_slice(body));
    if let Err(e) = &pre {
        assert!(
            matches!(e, WireError::Malformed { .. }),
            "{api:?} v{version}: the pre-check failed with {e:?}"
        );
        assert!(
            decoded.is_err(),
            "{api:?} v{version}: refused by the pre-check but decoded"
        );
    }
}

/// A populated body of every API at every negotiable version.
pub(crate) fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, api) in APIS.iter().enumerate() {
        let (lo, hi) = negotiable(*api);
        for v in lo..=hi {
            if let Some(body) = bounded::sample_body(*api, v) {
                let mut seed = vec![i as u8, (v - lo) as u8];
                seed.extend_from_slice(&body);
                out.push(seed);
            }
        }
    }
    out
}
