//! The four classic-protocol group requests, each built at the highest version both sides speak.
//!
//! Shared by the poll thread (join, sync, leave) and the heartbeat thread (heartbeat, leave), so
//! that the version rules live in one place: static membership (`group.instance.id`) needs
//! JoinGroup v5, SyncGroup v3, Heartbeat v3 and LeaveGroup v3, and a broker that cannot carry it
//! must fail loudly rather than silently turn a static member into a dynamic one.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    self as msg, join_group_request, leave_group_request, sync_group_request, ApiKey, GroupId,
};
use kafka_protocol::protocol::StrBytes;

use super::assignor::JoinProtocol;
use super::quirks;
use super::subscription::CONSUMER_PROTOCOL_TYPE;
use crate::wire::{bounded, Connection, KafkaCode, Result as WireResult, VersionRange, WireError};

/// Who we are in the group, as the coordinator knows us.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberIdentity {
    /// The generation of the last completed join, or -1 outside a generation.
    pub generation_id: i32,
    /// The member id the coordinator gave us, or "" before the first join.
    pub member_id: String,
}

impl MemberIdentity {
    /// Not a member of any generation.
    pub(crate) fn unjoined() -> Self {
        MemberIdentity {
            generation_id: -1,
            member_id: String::new(),
        }
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// The versions of the group APIs we speak: from what KIP-896 keeps in Kafka 4.0 up to the
/// last non-flexible version (capped for librdkafka's mock, see [`quirks::MAX_JOIN_GROUP`]).
fn ours(api: ApiKey) -> VersionRange {
    match api {
        ApiKey::JoinGroup => VersionRange::new(2, quirks::MAX_JOIN_GROUP),
        ApiKey::SyncGroup => VersionRange::new(0, quirks::MAX_SYNC_GROUP),
        ApiKey::Heartbeat => VersionRange::new(0, quirks::MAX_HEARTBEAT),
        ApiKey::LeaveGroup => VersionRange::new(0, quirks::MAX_LEAVE_GROUP),
        other => {
            let r = other.valid_versions();
            VersionRange::new(r.min, r.max)
        }
    }
}

/// The versions of a group API (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) this crate speaks,
/// read-only: for tests and diagnostics that compare them with what a broker advertises. Other
/// APIs get `kafka-protocol`'s generated range, as in [`crate::wire::client_range`].
pub fn supported_versions(api: ApiKey) -> VersionRange {
    ours(api)
}

/// Picks the version for `api`, refusing a broker too old to carry a static member id.
fn version(
    conn: &Connection,
    api: ApiKey,
    instance_id: Option<&str>,
    static_min: i16,
) -> WireResult<i16> {
    let v = conn.version_within(api, ours(api))?;
    if instance_id.is_some() && v < static_min {
        return Err(WireError::UnsupportedVersion {
            api: api as i16,
            ours: (static_min, ours(api).max),
            broker: conn.versions().broker_range(api).map(|r| (r.min, r.max)),
        });
    }
    Ok(v)
}

/// What JoinGroup needs besides our identity.
pub(crate) struct JoinParams<'a> {
    /// The group.
    pub group_id: &'a str,
    /// Static membership id.
    pub instance_id: Option<&'a str>,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// How long the coordinator waits for every member to rejoin (`max.poll.interval.ms`).
    pub rebalance_timeout: Duration,
    /// Our assignors with our subscription, in preference order.
    pub protocols: &'a [JoinProtocol],
    /// Why we (re)join, for the broker's log (JoinGroup v8+).
    pub reason: &'a str,
}

/// A JoinGroup answer with the error code left for the caller to classify.
pub(crate) struct JoinOutcome {
    /// Kafka error code ([`KafkaCode::NONE`] on success).
    pub error_code: KafkaCode,
    /// The generation the join completed.
    pub generation_id: i32,
    /// The member id the coordinator gave us (also set with MEMBER_ID_REQUIRED).
    pub member_id: String,
    /// The leader's member id.
    pub leader: String,
    /// The assignor the coordinator picked.
    pub protocol_name: Option<String>,
    /// Every member with its subscription bytes; only the leader receives them.
    pub members: Vec<(String, Option<String>, Bytes)>,
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// Sends JoinGroup and waits for the rebalance to gather every member (up to the rebalance
/// timeout, plus slack for the network).
pub(crate) fn join_group(
    conn: &mut Connection,
    me: &MemberIdentity,
    params: &JoinParams<'_>,
) -> WireResult<JoinOutcome> {
    let v = version(conn, ApiKey::JoinGroup, params.instance_id, 5)?;
    let mut req = msg::JoinGroupRequest::default()
        .with_group_id(GroupId(str_bytes(params.group_id)))
        .with_session_timeout_ms(millis(params.session_timeout))
        .with_member_id(str_bytes(&me.member_id))
        .with_protocol_type(str_bytes(CONSUMER_PROTOCOL_TYPE))
        .with_protocols(
            params
                .protocols
                .iter()
                .map(|p| {
                    join_group_request::JoinGroupRequestProtocol::default()
                        .with_name(str_bytes(p.name))
                        .with_metadata(p.metadata.clone())
                })
                .collect(),
        );
    if v >= 1 {
        req = req.with_rebalance_timeout_ms(millis(params.rebalance_timeout));
    }
    if v >= 5 {
        req = req.with_group_instance_id(params.instance_id.map(str_bytes));
    }
    if v >= 8 {
        req = req.with_reason(Some(str_bytes(params.reason)));
    }
    let wait = params.rebalance_timeout + Duration::from_secs(5);
    let body = conn.send_for_body(&req, v, wait)?;
    let resp = match bounded::decode::<msg::JoinGroupResponse>(
        ApiKey::JoinGroup,
        v,
        &mut body.clone(),
    ) {
        Ok(resp) => resp,
        Err(e) => {
            // An error answer whose other fields are malformed still tells us the error.
            return match quirks::error_code_of_undecodable_response(&body, v >= 2) {
                Some(code) => {
                    log::debug!("JoinGroup v{v} error response did not decode ({e:#}); using its error code {code}");
                    Ok(JoinOutcome {
                        error_code: code,
                        generation_id: -1,
                        member_id: String::new(),
                        leader: String::new(),
                        protocol_name: None,
                        members: Vec::new(),
                    })
                }
                _ => Err(e),
            };
        }
    };
    Ok(JoinOutcome {
        error_code: KafkaCode(resp.error_code),
        generation_id: resp.generation_id,
        member_id: resp.member_id.to_string(),
        leader: resp.leader.to_string(),
        protocol_name: resp.protocol_name.map(|p| p.to_string()),
        members: resp
            .members
            .into_iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.map(|i| i.to_string()),
                    m.metadata,
                )
            })
            .collect(),
    })
}

/// Sends SyncGroup (the leader with every member's assignment, followers with none) and returns
/// the error code and our assignment bytes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sync_group(
    conn: &mut Connection,
    group_id: &str,
    instance_id: Option<&str>,
    me: &MemberIdentity,
    protocol_name: Option<&str>,
    assignments: Vec<(String, Bytes)>,
    rebalance_timeout: Duration,
) -> WireResult<(KafkaCode, Bytes)> {
    let v = version(conn, ApiKey::SyncGroup, instance_id, 3)?;
    let mut req = msg::SyncGroupRequest::default()
        .with_group_id(GroupId(str_bytes(group_id)))
        .with_generation_id(me.generation_id)
        .with_member_id(str_bytes(&me.member_id))
        .with_assignments(
            assignments
                .into_iter()
                .map(|(member, bytes)| {
                    sync_group_request::SyncGroupRequestAssignment::default()
                        .with_member_id(StrBytes::from_string(member))
                        .with_assignment(bytes)
                })
                .collect(),
        );
    if v >= 3 {
        req = req.with_group_instance_id(instance_id.map(str_bytes));
    }
    if v >= 5 {
        req = req
            .with_protocol_type(Some(str_bytes(CONSUMER_PROTOCOL_TYPE)))
            .with_protocol_name(protocol_name.map(str_bytes));
    }
    let wait = rebalance_timeout + Duration::from_secs(5);
    let body = conn.send_for_body(&req, v, wait)?;
    match bounded::decode::<msg::SyncGroupResponse>(ApiKey::SyncGroup, v, &mut body.clone()) {
        Ok(resp) => Ok((KafkaCode(resp.error_code), resp.assignment)),
        // An error answer whose other fields are malformed still tells us the error.
        Err(e) => match quirks::error_code_of_undecodable_response(&body, v >= 1) {
            Some(code) => {
                log::debug!("SyncGroup v{v} error response did not decode ({e:#}); using its error code {code}");
                Ok((code, Bytes::new()))
            }
            _ => Err(e),
        },
    }
}

/// Sends one Heartbeat and returns its error code.
pub(crate) fn heartbeat(
    conn: &mut Connection,
    group_id: &str,
    instance_id: Option<&str>,
    me: &MemberIdentity,
) -> WireResult<KafkaCode> {
    let v = version(conn, ApiKey::Heartbeat, instance_id, 3)?;
    let mut req = msg::HeartbeatRequest::default()
        .with_group_id(GroupId(str_bytes(group_id)))
        .with_generation_id(me.generation_id)
        .with_member_id(str_bytes(&me.member_id));
    if v >= 3 {
        req = req.with_group_instance_id(instance_id.map(str_bytes));
    }
    Ok(KafkaCode(conn.send(&req, v)?.error_code))
}

/// Leaves the group so the coordinator rebalances at once instead of waiting for the session
/// timeout. Returns the error code (for the member itself on v3+).
pub fn leave_group(
    conn: &mut Connection,
    group_id: &str,
    instance_id: Option<&str>,
    member_id: &str,
    reason: &str,
) -> WireResult<KafkaCode> {
    let v = match quirks::dynamic_leave_group_version(conn, instance_id) {
        Some(v) => v,
        None => version(conn, ApiKey::LeaveGroup, instance_id, 3)?,
    };
    let mut req = msg::LeaveGroupRequest::default().with_group_id(GroupId(str_bytes(group_id)));
    if v >= 3 {
        let mut member = leave_group_request::MemberIdentity::default()
            .with_member_id(str_bytes(member_id))
            .with_group_instance_id(instance_id.map(str_bytes));
        if v >= 5 {
            member = member.with_reason(Some(str_bytes(reason)));
        }
        req = req.with_members(vec![member]);
    } else {
        req = req.with_member_id(str_bytes(member_id));
    }
    let resp = conn.send(&req, v)?;
    if resp.error_code != 0 {
        return Ok(KafkaCode(resp.error_code));
    }
    Ok(KafkaCode(resp.members.first().map_or(0, |m| m.error_code)))
}
