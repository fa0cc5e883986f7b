//! The shape tables against `kafka-protocol`'s codec, and the walker's refusals.
//!
//! A generator writes a populated body from a shape table (every array with two elements, every
//! string and bytes field non-empty, every tagged field present); `kafka-protocol` must decode
//! it and encode the identical bytes back, at every version both know. A table with a wrong
//! kind, a wrong version range or a missing field shifts every later byte, so the round trip
//! fails. The same generator can instead stop at the n-th array with a huge count: the walker
//! must refuse each one and name the array.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages as msg;
use kafka_protocol::protocol::{Decodable, Encodable, Message};

use super::sample::Gen;
use super::*;
use crate::fuzzing::responses::{negotiable, APIS};

/// Round-trips generated bodies of every version through `kafka-protocol` and checks every
/// huge count and truncation is refused by the walker.
fn exercise<T: Decodable + Encodable + Message>(api: ApiKey) -> usize {
    let schema = schema(api).expect("every decoded API has a shape");
    let lo = schema.versions.0.max(T::VERSIONS.min);
    let hi = schema.versions.1.min(T::VERSIONS.max);
    assert!(lo <= hi, "{api:?}: no common version");
    let mut cases = 0;
    for version in lo..=hi {
        let (body, g) = Gen::body(schema, version, None);
        check(api, version, &body).unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
        let decoded = T::decode(&mut body.clone(), version)
            .unwrap_or_else(|e| panic!("{api:?} v{version}: kafka-protocol refuses: {e:#}"));
        let mut again = BytesMut::new();
        decoded
            .encode(&mut again, version)
            .unwrap_or_else(|e| panic!("{api:?} v{version}: re-encode: {e:#}"));
        assert_eq!(
            &again[..],
            &body[..],
            "{api:?} v{version}: the shape table disagrees with kafka-protocol"
        );
        // The encoder's own output passes too (the same bytes, but say it).
        check(api, version, &again).unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
        for cut in 0..body.len() {
            assert!(
                check(api, version, &body[..cut]).is_err(),
                "{api:?} v{version}: a body cut at {cut} of {} bytes passed",
                body.len()
            );
        }
        let mut bombs = 0;
        for index in 0.. {
            let (bomb, g) = Gen::body(schema, version, Some(index));
            let Some(name) = g.huge_name else { break };
            bombs += 1;
            match check(api, version, &bomb) {
                Err(WireError::Malformed { field, reason, .. }) => {
                    assert!(
                        field.ends_with(name) || field.contains(&format!("{name}[")),
                        "{api:?} v{version}: error names {field}, not {name}"
                    );
                    assert!(reason.contains("claims"), "{reason}");
                }
                other => panic!("{api:?} v{version} array {name}: {other:?}"),
            }
            cases += 1;
        }
        let has_arrays = g.arrays > 0;
        assert_eq!(bombs > 0, has_arrays, "{api:?} v{version}: no bomb placed");
        cases += 1;
    }
    cases
}

#[test]
fn shape_tables_match_kafka_protocol_and_refuse_every_huge_count() {
    let mut cases = 0;
    cases += exercise::<msg::ApiVersionsResponse>(ApiKey::ApiVersions);
    cases += exercise::<msg::MetadataResponse>(ApiKey::Metadata);
    cases += exercise::<msg::FetchResponse>(ApiKey::Fetch);
    cases += exercise::<msg::ListOffsetsResponse>(ApiKey::ListOffsets);
    cases += exercise::<msg::OffsetFetchResponse>(ApiKey::OffsetFetch);
    cases += exercise::<msg::OffsetCommitResponse>(ApiKey::OffsetCommit);
    cases += exercise::<msg::FindCoordinatorResponse>(ApiKey::FindCoordinator);
    cases += exercise::<msg::JoinGroupResponse>(ApiKey::JoinGroup);
    cases += exercise::<msg::SyncGroupResponse>(ApiKey::SyncGroup);
    cases += exercise::<msg::HeartbeatResponse>(ApiKey::Heartbeat);
    cases += exercise::<msg::LeaveGroupResponse>(ApiKey::LeaveGroup);
    cases += exercise::<msg::SaslHandshakeResponse>(ApiKey::SaslHandshake);
    cases += exercise::<msg::SaslAuthenticateResponse>(ApiKey::SaslAuthenticate);
    cases += exercise::<msg::CreateTopicsResponse>(ApiKey::CreateTopics);
    cases += exercise::<msg::ProduceResponse>(ApiKey::Produce);
    cases += exercise::<msg::InitProducerIdResponse>(ApiKey::InitProducerId);
    cases += exercise::<msg::AddPartitionsToTxnResponse>(ApiKey::AddPartitionsToTxn);
    cases += exercise::<msg::AddOffsetsToTxnResponse>(ApiKey::AddOffsetsToTxn);
    cases += exercise::<msg::TxnOffsetCommitResponse>(ApiKey::TxnOffsetCommit);
    cases += exercise::<msg::EndTxnResponse>(ApiKey::EndTxn);
    cases += exercise::<msg::DescribeGroupsResponse>(ApiKey::DescribeGroups);
    cases += exercise::<msg::ConsumerGroupHeartbeatResponse>(ApiKey::ConsumerGroupHeartbeat);
    cases += exercise::<msg::DescribeConfigsResponse>(ApiKey::DescribeConfigs);
    cases += exercise::<msg::IncrementalAlterConfigsResponse>(ApiKey::IncrementalAlterConfigs);
    cases += exercise::<msg::ShareGroupHeartbeatResponse>(ApiKey::ShareGroupHeartbeat);
    cases += exercise::<msg::ShareFetchResponse>(ApiKey::ShareFetch);
    cases += exercise::<msg::ShareAcknowledgeResponse>(ApiKey::ShareAcknowledge);
    assert!(cases > 300, "only {cases} cases ran");
}

/// The share responses at v2, past `kafka-protocol`'s v1: decoded by `wire::share::codec`
/// (whose tests compare them with the v1 codec), here every cut and every huge count refused.
#[test]
fn share_v2_shapes_refuse_every_cut_and_every_huge_count() {
    for api in [ApiKey::ShareFetch, ApiKey::ShareAcknowledge] {
        let schema = schema(api).expect("shape");
        let (body, g) = Gen::body(schema, 2, None);
        check(api, 2, &body).unwrap_or_else(|e| panic!("{api:?} v2: {e}"));
        for cut in 0..body.len() {
            assert!(
                check(api, 2, &body[..cut]).is_err(),
                "{api:?} v2 cut at {cut}"
            );
        }
        let mut bombs = 0;
        for index in 0.. {
            let (bomb, g) = Gen::body(schema, 2, Some(index));
            let Some(name) = g.huge_name else { break };
            bombs += 1;
            assert!(
                matches!(check(api, 2, &bomb), Err(WireError::Malformed { ref field, .. }) if field.contains(name)),
                "{api:?} v2 array {name}"
            );
        }
        assert!(bombs >= 3 && g.arrays > 0, "{api:?}: {bombs} bombs");
    }
}

#[test]
fn every_negotiable_version_has_a_shape() {
    for api in APIS {
        let (lo, hi) = checked_versions(api).unwrap_or((1, 0));
        let (first, last) = negotiable(api);
        for v in first..=last {
            assert!(
                lo <= v && v <= hi,
                "{api:?} v{v} can be negotiated but has no shape"
            );
        }
    }
}

#[test]
fn five_bytes_claiming_four_billion_brokers_are_refused_with_the_field_named() {
    // Metadata v1: ThrottleTimeMs is v3+, so the body starts with the Brokers count.
    let body = [0x7f, 0xff, 0xff, 0xff, 0x00];
    match check(ApiKey::Metadata, 1, &body) {
        Err(WireError::Malformed {
            api,
            version,
            field,
            reason,
        }) => {
            assert_eq!((api, version), (ApiKey::Metadata as i16, 1));
            assert_eq!(field, "Brokers");
            assert!(reason.contains("2147483647 elements"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_tagged_field_that_overruns_its_size_is_refused() {
    // ApiVersions v3: error code, empty compact ApiKeys, throttle, one tagged field (tag 0 =
    // SupportedFeatures) of size 1 whose content claims 100 features.
    let body = [0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 101];
    let err = check(ApiKey::ApiVersions, 3, &body)
        .err()
        .map(|e| e.to_string());
    let msg = err.unwrap_or_default();
    assert!(msg.contains("SupportedFeatures"), "{msg}");
    assert!(msg.contains("claims 100 elements"), "{msg}");
}

#[test]
fn an_unknown_tag_is_skipped_but_its_size_is_checked() {
    // ApiVersions v3 with an unknown tag 9 of 2 bytes: accepted; claiming 200 bytes: refused.
    let ok = [0, 0, 1, 0, 0, 0, 0, 1, 9, 2, 0xaa, 0xbb];
    assert!(check(ApiKey::ApiVersions, 3, &ok).is_ok());
    let bad = [0, 0, 1, 0, 0, 0, 0, 1, 9, 200, 1];
    assert!(check(ApiKey::ApiVersions, 3, &bad).is_err());
}

#[test]
fn a_version_without_a_shape_is_refused_not_guessed() {
    let msg = check(ApiKey::Fetch, 99, &[]).err().map(|e| e.to_string());
    assert!(msg
        .unwrap_or_default()
        .contains("no response shape for this version"));
}

#[test]
fn nulls_are_accepted_anywhere() {
    // Metadata v1 with a null broker array and a null topic array.
    let body = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff];
    assert!(check(ApiKey::Metadata, 1, &body).is_ok());
}

#[test]
fn a_metadata_list_over_the_cap_is_refused_even_when_its_bytes_are_there() {
    // Metadata v1 claiming MAX_METADATA_BROKERS + 1 brokers, with enough bytes for each.
    let n = MAX_METADATA_BROKERS + 1;
    let mut body = BytesMut::new();
    body.put_i32(n as i32);
    for i in 0..n {
        body.put_i32(i as i32);
        body.put_i16(1);
        body.put_u8(b'h');
        body.put_i32(9092);
        body.put_i16(-1);
    }
    body.put_i32(0);
    body.put_i32(0);
    let at_cap = {
        let mut b = BytesMut::new();
        b.put_i32((n - 1) as i32);
        b.extend_from_slice(&body[4 + 13..]);
        b
    };
    assert!(check(ApiKey::Metadata, 1, &at_cap).is_ok());
    let msg = check(ApiKey::Metadata, 1, &body)
        .err()
        .map(|e| e.to_string());
    let msg = msg.unwrap_or_default();
    assert!(
        msg.contains("Brokers") && msg.contains("more than the client accepts"),
        "{msg}"
    );
}

#[test]
fn a_describe_configs_answer_claiming_millions_of_configs_is_refused() {
    // DescribeConfigs v4 (flexible): throttle, one result (error 0, null message, type 4, name
    // "1"), then a Configs count of 2^28 in five varint bytes with nothing behind it.
    let mut body = vec![0, 0, 0, 0, 2, 0, 0, 0, 4, 2, b'1'];
    body.extend_from_slice(&[0x81, 0x80, 0x80, 0x80, 0x01]);
    let msg = check(ApiKey::DescribeConfigs, 4, &body)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains("Results[0].Configs") && msg.contains("claims 268435456 elements"),
        "{msg}"
    );
    // v1 (classic lengths): a Results count of i32::MAX in four bytes.
    let body = [0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff];
    let msg = check(ApiKey::DescribeConfigs, 1, &body)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        msg.contains("Results") && msg.contains("claims 2147483647"),
        "{msg}"
    );
}
