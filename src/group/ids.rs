//! The two 16-byte identifiers of the heartbeat protocols (the consumer group protocol's and
//! share groups'): topic ids (the broker names assigned partitions by topic id, not by name) and
//! the member id a client generates itself (KIP-848 from v1, share groups always).
//!
//! Topic ids are named through Metadata ([`resolve_topic_ids`]), on the membership thread's
//! coordinator connection, for either protocol.
//!
//! Both are printed the way Kafka prints its `Uuid`: URL-safe base64 without padding, 22
//! characters, so a member id in our logs is the one in the broker's log and in
//! `kafka-consumer-groups.sh --describe`.
//!
//! Why no `uuid`-generating dependency: the member id only has to be unique in the group for the
//! consumer's life, and the operating system's randomness gives that. It is read from
//! `/dev/urandom`; where that is not readable, std's per-process random hash keys
//! ([`RandomState`]) mixed with the time, the process id and a counter are used instead.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use kafka_protocol::messages::{self as msg, metadata_request, ApiKey};

use crate::wire::{Connection, KafkaCode, Result as WireResult, VersionRange};

const BASE64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Kafka's textual form of 16 bytes: URL-safe base64, no padding.
fn base64_url(bytes: &[u8; 16]) -> String {
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            let index = (n >> (18 - 6 * i)) & 0x3f;
            out.push(char::from(BASE64_URL[index as usize]));
        }
    }
    out
}

/// A topic's id, as the broker names topics in a consumer group assignment.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicId(pub [u8; 16]);

impl TopicId {
    /// The all-zero id, which Kafka uses for "no id" (a topic created before KIP-516).
    pub(crate) const ZERO: TopicId = TopicId([0; 16]);

    /// Converts from the `kafka-protocol` crate's type.
    pub(crate) fn from_uuid(id: uuid::Uuid) -> Self {
        TopicId(*id.as_bytes())
    }

    /// Converts to the `kafka-protocol` crate's type.
    pub(crate) fn to_uuid(self) -> uuid::Uuid {
        uuid::Uuid::from_bytes(self.0)
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&base64_url(&self.0))
    }
}

impl fmt::Debug for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicId({self})")
    }
}

/// 16 random bytes from the operating system, or, where `/dev/urandom` cannot be read, from
/// std's randomly keyed hashers mixed with the time, the process id and a counter.
pub(crate) fn random_bytes() -> [u8; 16] {
    let mut bytes = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok()
    {
        return bytes;
    }
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    for (i, half) in bytes.chunks_mut(8).enumerate() {
        // Every RandomState has fresh random keys, so each half is keyed independently.
        let mut h = RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_u64(count);
        h.write_usize(i);
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    bytes
}

/// A member id generated the way Kafka's `Uuid.randomUuid()` does: a random version-4 UUID whose
/// text does not start with `-` (Kafka avoids those, since they read as command-line options).
///
/// Why the client generates it: from ConsumerGroupHeartbeat v1 (KIP-1082) the member id is the
/// client's, kept for the consumer's whole life, so that a join whose response was lost is
/// recognised as the same member when it is repeated rather than leaving a ghost member behind.
pub fn generate_member_id() -> String {
    loop {
        let mut bytes = random_bytes();
        bytes[6] = (bytes[6] & 0x0f) | 0x40; // version 4
        bytes[8] = (bytes[8] & 0x3f) | 0x80; // IETF variant
        let text = base64_url(&bytes);
        if !text.starts_with('-') {
            return text;
        }
    }
}

/// Names topic ids through Metadata on `conn`: by id where the broker supports it (v12+),
/// otherwise from the metadata of every topic. An id the broker does not know is left out (the
/// machine keeps it unresolved and asks again).
pub fn resolve_topic_ids(
    conn: &mut Connection,
    ids: &[TopicId],
) -> WireResult<Vec<(TopicId, String)>> {
    let v = conn.version_within(ApiKey::Metadata, VersionRange::new(10, 12))?;
    let topics = (v >= 12).then(|| {
        ids.iter()
            .map(|id| {
                metadata_request::MetadataRequestTopic::default()
                    .with_topic_id(id.to_uuid())
                    .with_name(None)
            })
            .collect()
    });
    let req = msg::MetadataRequest::default()
        .with_topics(topics)
        .with_allow_auto_topic_creation(false);
    let resp = conn.send(&req, v)?;
    let mut out = Vec::new();
    for t in resp.topics {
        let id = TopicId::from_uuid(t.topic_id);
        if !ids.contains(&id) {
            continue;
        }
        match (KafkaCode::from_code(t.error_code), t.name) {
            (None, Some(name)) => out.push((id, name.to_string())),
            (code, _) => log::debug!(
                "metadata: topic id {id} not resolvable ({})",
                code.map_or_else(|| "no name".to_string(), KafkaCode::name)
            ),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_as_kafka_prints_its_uuids() {
        // Kafka's Uuid.toString() of new Uuid(0x0123456789abcdefL, 0xfedcba9876543210L).
        let id = TopicId([
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54,
            0x32, 0x10,
        ]);
        assert_eq!(id.to_string(), "ASNFZ4mrze_-3LqYdlQyEA");
        assert_eq!(TopicId::ZERO.to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
    }

    #[test]
    fn generated_member_ids_are_22_url_safe_characters_and_distinct() {
        let ids: std::collections::BTreeSet<String> =
            (0..1000).map(|_| generate_member_id()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.len(), 22, "{id}");
            assert!(!id.starts_with('-'), "{id}");
            assert!(
                id.bytes().all(|b| BASE64_URL.contains(&b)),
                "{id} is not URL-safe base64"
            );
        }
    }

    #[test]
    fn the_fallback_randomness_differs_between_calls() {
        // The RandomState path on its own (as used without /dev/urandom).
        let a = {
            let mut h = RandomState::new().build_hasher();
            h.write_u64(1);
            h.finish()
        };
        let b = {
            let mut h = RandomState::new().build_hasher();
            h.write_u64(1);
            h.finish()
        };
        assert_ne!(a, b, "RandomState keys are per instance");
    }
}
