//! Kafka's "consumer" embedded protocol: the bytes a member puts in JoinGroup (its *subscription*)
//! and the bytes the leader hands back through SyncGroup (each member's *assignment*).
//!
//! The broker never looks inside these bytes; only the members do. So the format is a contract
//! between clients, and ours must be read by Java, librdkafka and kafka-python members and must read
//! theirs. Both messages are a big-endian `int16` version followed by the body of that version:
//!
//! ```text
//! Subscription v0: topics [string], user_data bytes
//!              v1: + owned_partitions [topic string, partitions [int32]]
//!              v2: + generation_id int32
//!              v3: + rack_id nullable string
//! Assignment v0..v3: assigned_partitions [topic string, partitions [int32]], user_data bytes
//! ```
//!
//! **Encoding** goes through the `kafka-protocol` crate's generated `ConsumerProtocolSubscription`
//! and `ConsumerProtocolAssignment` (generated from Apache Kafka's own schema files), so the field
//! layout is Kafka's, not our reading of it.
//!
//! **Decoding** is our own bounded reader, for two reasons measured against that crate (0.18):
//! its array decoder calls `Vec::with_capacity(n)` with the length prefix straight from the wire,
//! so four hostile bytes (`0x7fff_ffff`) ask for gigabytes before the first element is read; and it
//! refuses any version above 3, whereas Kafka's rule for this protocol (stated in the schema files
//! and followed by Java) is forward compatibility: a newer version only appends fields, so a reader
//! parses the fields it knows and ignores the rest. Our reader never allocates more than the input
//! could hold, and a malformed input is a [`DecodeError`], never a panic. The tests check the reader
//! against the crate's decoder on well-formed input.
//!
//! Which versions other members read (checked against their sources):
//! - Java reads every version >= 0 with the newest format it knows (forward compatible, as its
//!   schema files state); recent releases write v3, releases from 2.4 on at least v1.
//! - librdkafka 2.x writes subscription v3 and assignment v0; it reads `owned_partitions`,
//!   `generation_id` and `rack_id` when the version says they are present, so it reads any version.
//!   It writes empty (not null) user data, and a leader that cannot parse a member's subscription
//!   silently drops that member from the assignment, and so does one whose topic list is empty.
//! - kafka-python 2.3 writes v0 and reads any version: its decoder reads the v0 fields in order and
//!   ignores whatever follows, without checking the version.
//!
//! So we write subscriptions at v3 ([`SUBSCRIPTION_VERSION`]): every peer above reads it, and the
//! cooperative-sticky assignors of Java and librdkafka need `owned_partitions` (v1) and
//! `generation_id` (v2). The assignment layout is identical in every version; the leader writes it at
//! the lowest version any member's subscription used ([`assignment_version`]), so a member is never
//! handed a version newer than the one it announced.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition as KpAssignedPartitions,
};
use kafka_protocol::messages::consumer_protocol_subscription::{
    ConsumerProtocolSubscription, TopicPartition as KpOwnedPartitions,
};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::TopicPartition;

/// The JoinGroup `protocol_type` of consumer groups. The broker only lets members with the same
/// protocol type into one group, so this must be exactly what Java and librdkafka send.
pub(crate) const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// The newest version of the consumer protocol whose fields we know. Newer versions are read as
/// this one (forward compatibility).
pub(crate) const MAX_KNOWN_VERSION: i16 = 3;

/// The version we write our subscription at: v3, the newest, which librdkafka 2.x and Java 3.5+
/// write too. Every peer we interoperate with reads it (see the module documentation).
pub(crate) const SUBSCRIPTION_VERSION: i16 = 3;

/// The generation a member reports when it has none (it has not completed a join yet), as Java's
/// `DEFAULT_GENERATION` and librdkafka do.
pub(crate) const NO_GENERATION: i32 = -1;

/// A member's subscription: what it wants to consume and, for sticky assignors, what it owns now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Subscription {
    /// The topics the member wants to consume. Must not be empty: a librdkafka leader drops a
    /// member whose subscription lists no topic.
    pub topics: Vec<String>,
    /// Assignor-specific bytes. Written as empty (never null) bytes when there are none, as
    /// librdkafka does, because some readers mishandle null; a null from a peer reads as empty.
    pub user_data: Bytes,
    /// The partitions the member owns now (v1+). The cooperative protocol depends on it: the leader
    /// must not hand a partition to anyone else while its owner still claims it.
    pub owned_partitions: Vec<TopicPartition>,
    /// The generation in which `owned_partitions` was assigned (v2+), [`NO_GENERATION`] if none.
    /// Lets the leader settle a partition claimed by several members: the claim of the newest
    /// generation wins (a member that missed a rebalance may claim what another now owns).
    pub generation_id: i32,
    /// The member's `client.rack` (v3+), for rack-aware assignors.
    pub rack_id: Option<String>,
}

impl Subscription {
    /// A subscription to `topics` by a member that owns nothing yet.
    pub(crate) fn new<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            topics: topics.into_iter().map(Into::into).collect(),
            user_data: Bytes::new(),
            owned_partitions: Vec::new(),
            generation_id: NO_GENERATION,
            rack_id: None,
        }
    }
}

/// A subscription as decoded from a JoinGroup response, with the version the member wrote: the
/// leader answers each member in a version that member can read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DecodedSubscription {
    /// The version in the member's header (possibly newer than [`MAX_KNOWN_VERSION`]).
    pub version: i16,
    /// The fields we know.
    pub subscription: Subscription,
}

/// The partitions the leader assigned to one member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Assignment {
    /// The assigned partitions.
    pub partitions: Vec<TopicPartition>,
    /// Assignor-specific bytes; empty when none (a null from a peer reads as empty).
    pub user_data: Bytes,
}

/// Why subscription or assignment bytes could not be decoded. Each variant names the field, so a
/// log line says which peer wrote what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside a field.
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needed.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// The version header is negative; Java rejects this too.
    NegativeVersion(i16),
    /// A length prefix is negative and is not the null marker `-1`.
    InvalidLength {
        /// The field whose length it is.
        field: &'static str,
        /// The length read.
        length: i32,
    },
    /// An array claims more elements than the remaining input could hold even at the smallest
    /// element size. Rejected before allocating anything.
    ArrayTooLong {
        /// The array field.
        field: &'static str,
        /// The element count read.
        count: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A field that the schema declares non-nullable was null.
    UnexpectedNull {
        /// The field.
        field: &'static str,
    },
    /// A string field is not valid UTF-8.
    InvalidUtf8 {
        /// The field.
        field: &'static str,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated {
                field,
                needed,
                remaining,
            } => write!(
                f,
                "consumer protocol: truncated {field}: needs {needed} bytes, {remaining} left"
            ),
            DecodeError::NegativeVersion(v) => {
                write!(f, "consumer protocol: negative version {v}")
            }
            DecodeError::InvalidLength { field, length } => {
                write!(f, "consumer protocol: invalid length {length} for {field}")
            }
            DecodeError::ArrayTooLong {
                field,
                count,
                remaining,
            } => write!(
                f,
                "consumer protocol: {field} claims {count} elements but only {remaining} bytes remain"
            ),
            DecodeError::UnexpectedNull { field } => {
                write!(f, "consumer protocol: {field} is null but may not be")
            }
            DecodeError::InvalidUtf8 { field } => {
                write!(f, "consumer protocol: {field} is not valid UTF-8")
            }
        }
    }
}

impl Error for DecodeError {}

/// Why a subscription or assignment could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// We only write versions whose layout we know.
    UnsupportedVersion(i16),
    /// A string is longer than the `int16` length prefix allows.
    StringTooLong {
        /// The field.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// Bytes or an array longer than the `int32` length prefix allows.
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
    },
    /// The `kafka-protocol` encoder refused the message (its message).
    Codec(String),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::UnsupportedVersion(v) => write!(
                f,
                "consumer protocol: cannot write version {v} (known: 0..={MAX_KNOWN_VERSION})"
            ),
            EncodeError::StringTooLong { field, len } => {
                write!(
                    f,
                    "consumer protocol: {field} is {len} bytes, over the i16 limit"
                )
            }
            EncodeError::TooLong { field, len } => {
                write!(
                    f,
                    "consumer protocol: {field} has length {len}, over the i32 limit"
                )
            }
            EncodeError::Codec(msg) => write!(f, "consumer protocol: encoder failed: {msg}"),
        }
    }
}

impl Error for EncodeError {}

/// The assignment version the leader must write: the lowest subscription version among the members
/// (so every member reads a version it announced), capped at [`MAX_KNOWN_VERSION`] and floored at 0.
/// With no members it is [`MAX_KNOWN_VERSION`].
pub(crate) fn assignment_version<I: IntoIterator<Item = i16>>(member_versions: I) -> i16 {
    member_versions
        .into_iter()
        .min()
        .unwrap_or(MAX_KNOWN_VERSION)
        .clamp(0, MAX_KNOWN_VERSION)
}

/// Encodes `subscription` at `version` (0..=3), header included. Fields that `version` lacks are
/// left out, as the protocol requires (a v0 subscription cannot carry owned partitions).
pub(crate) fn encode_subscription(
    subscription: &Subscription,
    version: i16,
) -> Result<Bytes, EncodeError> {
    check_version(version)?;
    for topic in &subscription.topics {
        check_string("topics", topic)?;
    }
    check_len("topics", subscription.topics.len())?;
    check_len("user_data", subscription.user_data.len())?;
    if let Some(rack) = &subscription.rack_id {
        check_string("rack_id", rack)?;
    }
    let owned = group_by_topic("owned_partitions", &subscription.owned_partitions)?;
    let message = ConsumerProtocolSubscription::default()
        .with_topics(
            subscription
                .topics
                .iter()
                .map(|t| StrBytes::from_string(t.clone()))
                .collect(),
        )
        .with_user_data(Some(subscription.user_data.clone()))
        .with_owned_partitions(
            owned
                .into_iter()
                .map(|(topic, partitions)| {
                    KpOwnedPartitions::default()
                        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(partitions)
                })
                .collect(),
        )
        .with_generation_id(subscription.generation_id)
        .with_rack_id(
            subscription
                .rack_id
                .as_ref()
                .map(|r| StrBytes::from_string(r.clone())),
        );
    encode_with_header(&message, version)
}

/// Encodes `assignment` at `version` (0..=3), header included.
pub(crate) fn encode_assignment(
    assignment: &Assignment,
    version: i16,
) -> Result<Bytes, EncodeError> {
    check_version(version)?;
    check_len("user_data", assignment.user_data.len())?;
    let grouped = group_by_topic("assigned_partitions", &assignment.partitions)?;
    let message = ConsumerProtocolAssignment::default()
        .with_assigned_partitions(
            grouped
                .into_iter()
                .map(|(topic, partitions)| {
                    KpAssignedPartitions::default()
                        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(partitions)
                })
                .collect(),
        )
        .with_user_data(Some(assignment.user_data.clone()));
    encode_with_header(&message, version)
}

/// Decodes a member's subscription (JoinGroup member metadata). Versions newer than
/// [`MAX_KNOWN_VERSION`] are read as that version and their extra fields ignored; bytes after the
/// known fields are ignored for the same reason.
pub(crate) fn decode_subscription(input: &[u8]) -> Result<DecodedSubscription, DecodeError> {
    let mut r = Reader::new(input);
    let version = r.i16("version")?;
    if version < 0 {
        return Err(DecodeError::NegativeVersion(version));
    }
    let count = r.array_len("topics", MIN_STRING_SIZE)?;
    let mut topics = Vec::with_capacity(count);
    for _ in 0..count {
        topics.push(r.string("topics")?.to_owned());
    }
    let user_data = r.bytes("user_data")?;
    let owned_partitions = if version >= 1 {
        r.topic_partitions("owned_partitions")?
    } else {
        Vec::new()
    };
    let generation_id = if version >= 2 {
        r.i32("generation_id")?
    } else {
        NO_GENERATION
    };
    let rack_id = if version >= 3 {
        r.nullable_string("rack_id")?.map(str::to_owned)
    } else {
        None
    };
    if r.remaining() > 0 {
        log::debug!(
            "consumer protocol: ignoring {} trailing bytes of a v{version} subscription",
            r.remaining()
        );
    }
    Ok(DecodedSubscription {
        version,
        subscription: Subscription {
            topics,
            user_data,
            owned_partitions,
            generation_id,
            rack_id,
        },
    })
}

/// Decodes a member's assignment (SyncGroup response). Zero bytes are an empty assignment: the
/// broker sends that to a member the leader left out. Versions newer than [`MAX_KNOWN_VERSION`]
/// and trailing bytes are accepted, as in [`decode_subscription`].
pub(crate) fn decode_assignment(input: &[u8]) -> Result<Assignment, DecodeError> {
    if input.is_empty() {
        log::debug!("consumer protocol: empty assignment bytes read as no partitions");
        return Ok(Assignment::default());
    }
    let mut r = Reader::new(input);
    let version = r.i16("version")?;
    if version < 0 {
        return Err(DecodeError::NegativeVersion(version));
    }
    let partitions = r.topic_partitions("assigned_partitions")?;
    let user_data = r.bytes("user_data")?;
    if r.remaining() > 0 {
        log::debug!(
            "consumer protocol: ignoring {} trailing bytes of a v{version} assignment",
            r.remaining()
        );
    }
    Ok(Assignment {
        partitions,
        user_data,
    })
}

// ----------------------------------------------------------------------------------------------
// Encoding helpers

fn check_version(version: i16) -> Result<(), EncodeError> {
    if (0..=MAX_KNOWN_VERSION).contains(&version) {
        Ok(())
    } else {
        Err(EncodeError::UnsupportedVersion(version))
    }
}

fn check_string(field: &'static str, s: &str) -> Result<(), EncodeError> {
    if s.len() > i16::MAX as usize {
        Err(EncodeError::StringTooLong {
            field,
            len: s.len(),
        })
    } else {
        Ok(())
    }
}

fn check_len(field: &'static str, len: usize) -> Result<(), EncodeError> {
    if len > i32::MAX as usize {
        Err(EncodeError::TooLong { field, len })
    } else {
        Ok(())
    }
}

/// One topic's partitions, as the wire groups them.
type TopicPartitions = (Arc<str>, Vec<i32>);

/// Groups partitions by topic, topics and partitions in ascending order and without duplicates,
/// which is how Java writes them and makes our bytes deterministic.
fn group_by_topic(
    field: &'static str,
    partitions: &[TopicPartition],
) -> Result<Vec<TopicPartitions>, EncodeError> {
    let mut sorted: Vec<&TopicPartition> = partitions.iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut grouped: Vec<TopicPartitions> = Vec::new();
    for tp in sorted {
        match grouped.last_mut() {
            Some((topic, parts)) if **topic == *tp.topic => parts.push(tp.partition),
            _ => {
                check_string(field, &tp.topic)?;
                grouped.push((tp.topic.clone(), vec![tp.partition]));
            }
        }
    }
    Ok(grouped)
}

fn encode_with_header<M: Encodable>(message: &M, version: i16) -> Result<Bytes, EncodeError> {
    let size = message
        .compute_size(version)
        .map_err(|e| EncodeError::Codec(e.to_string()))?;
    let mut out = Vec::with_capacity(2 + size);
    out.extend_from_slice(&version.to_be_bytes());
    message
        .encode(&mut out, version)
        .map_err(|e| EncodeError::Codec(e.to_string()))?;
    Ok(Bytes::from(out))
}

// ----------------------------------------------------------------------------------------------
// Bounded decoding

/// Smallest encoding of a string: its `int16` length.
const MIN_STRING_SIZE: usize = 2;
/// Smallest encoding of an `int32`.
const INT32_SIZE: usize = 4;
/// Smallest encoding of a (topic, [partition]) entry: an empty topic and an empty array.
const MIN_TOPIC_PARTITIONS_SIZE: usize = MIN_STRING_SIZE + INT32_SIZE;

/// A cursor over untrusted bytes. Every read checks the remaining length first, and every array
/// length is checked against what the remaining bytes could hold before anything is allocated.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    fn remaining(&self) -> usize {
        self.buf.len()
    }

    fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::Truncated {
                field,
                needed: n,
                remaining: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        let b = self.take(field, 2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        let b = self.take(field, 4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn nullable_string(&mut self, field: &'static str) -> Result<Option<&'a str>, DecodeError> {
        let len = self.i16(field)?;
        if len == -1 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| DecodeError::InvalidLength {
            field,
            length: i32::from(len),
        })?;
        let raw = self.take(field, len)?;
        std::str::from_utf8(raw)
            .map(Some)
            .map_err(|_| DecodeError::InvalidUtf8 { field })
    }

    fn string(&mut self, field: &'static str) -> Result<&'a str, DecodeError> {
        self.nullable_string(field)?
            .ok_or(DecodeError::UnexpectedNull { field })
    }

    /// Nullable bytes; null reads as empty (see [`Subscription::user_data`]).
    fn bytes(&mut self, field: &'static str) -> Result<Bytes, DecodeError> {
        let len = self.i32(field)?;
        if len == -1 {
            return Ok(Bytes::new());
        }
        let len =
            usize::try_from(len).map_err(|_| DecodeError::InvalidLength { field, length: len })?;
        Ok(Bytes::copy_from_slice(self.take(field, len)?))
    }

    /// A non-nullable array's element count, checked against the remaining input.
    fn array_len(
        &mut self,
        field: &'static str,
        min_elem_size: usize,
    ) -> Result<usize, DecodeError> {
        let n = self.i32(field)?;
        if n == -1 {
            return Err(DecodeError::UnexpectedNull { field });
        }
        let count =
            usize::try_from(n).map_err(|_| DecodeError::InvalidLength { field, length: n })?;
        if count.saturating_mul(min_elem_size) > self.remaining() {
            return Err(DecodeError::ArrayTooLong {
                field,
                count,
                remaining: self.remaining(),
            });
        }
        Ok(count)
    }

    /// `[topic string, partitions [int32]]`, flattened. The topic name is shared by its partitions.
    fn topic_partitions(
        &mut self,
        field: &'static str,
    ) -> Result<Vec<TopicPartition>, DecodeError> {
        let topics = self.array_len(field, MIN_TOPIC_PARTITIONS_SIZE)?;
        let mut out = Vec::new();
        for _ in 0..topics {
            let topic: Arc<str> = Arc::from(self.string("topic")?);
            let count = self.array_len("partitions", INT32_SIZE)?;
            out.reserve(count);
            for _ in 0..count {
                out.push(TopicPartition {
                    topic: topic.clone(),
                    partition: self.i32("partition")?,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::Decodable;
    use proptest::prelude::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    fn full_subscription() -> Subscription {
        Subscription {
            topics: vec!["orders".into(), "fills".into()],
            user_data: Bytes::from_static(b"\x00\x01\x02"),
            owned_partitions: vec![tp("fills", 2), tp("orders", 0), tp("orders", 3)],
            generation_id: 7,
            rack_id: Some("eu-west-1a".into()),
        }
    }

    /// Hand-written big-endian writer for building peer bytes the way another client would.
    struct W(Vec<u8>);
    impl W {
        fn new() -> Self {
            W(Vec::new())
        }
        fn i16(mut self, v: i16) -> Self {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        fn i32(mut self, v: i32) -> Self {
            self.0.extend_from_slice(&v.to_be_bytes());
            self
        }
        fn str(self, s: &str) -> Self {
            let mut w = self.i16(s.len() as i16);
            w.0.extend_from_slice(s.as_bytes());
            w
        }
        fn bytes(self, b: &[u8]) -> Self {
            let mut w = self.i32(b.len() as i32);
            w.0.extend_from_slice(b);
            w
        }
    }

    #[test]
    fn subscription_round_trips_at_every_version() {
        let sub = full_subscription();
        for version in 0..=MAX_KNOWN_VERSION {
            let bytes = encode_subscription(&sub, version).unwrap();
            assert_eq!(&bytes[..2], &version.to_be_bytes());
            let decoded = decode_subscription(&bytes).unwrap();
            assert_eq!(decoded.version, version);
            let got = decoded.subscription;
            assert_eq!(got.topics, sub.topics);
            assert_eq!(got.user_data, sub.user_data);
            if version >= 1 {
                assert_eq!(got.owned_partitions, sub.owned_partitions);
            } else {
                assert!(
                    got.owned_partitions.is_empty(),
                    "v0 has no owned partitions"
                );
            }
            let gen = if version >= 2 { 7 } else { NO_GENERATION };
            assert_eq!(got.generation_id, gen);
            let rack = if version >= 3 {
                sub.rack_id.clone()
            } else {
                None
            };
            assert_eq!(got.rack_id, rack);
        }
    }

    #[test]
    fn assignment_round_trips_at_every_version() {
        let a = Assignment {
            partitions: vec![tp("a", 0), tp("a", 1), tp("b", 5)],
            user_data: Bytes::from_static(b"xyz"),
        };
        for version in 0..=MAX_KNOWN_VERSION {
            let bytes = encode_assignment(&a, version).unwrap();
            assert_eq!(decode_assignment(&bytes).unwrap(), a);
        }
    }

    #[test]
    fn v0_subscription_bytes_are_exactly_the_documented_layout() {
        let sub = Subscription::new(["t"]);
        let bytes = encode_subscription(&sub, 0).unwrap();
        // version 0, 1 topic "t", empty (not null) user data, as librdkafka writes it.
        let expected = W::new().i16(0).i32(1).str("t").bytes(b"").0;
        assert_eq!(&bytes[..], &expected[..]);
    }

    #[test]
    fn v3_subscription_bytes_match_librdkafka_layout() {
        let mut sub = Subscription::new(["t"]);
        sub.owned_partitions = vec![tp("t", 1), tp("t", 0)];
        sub.generation_id = 4;
        let bytes = encode_subscription(&sub, 3).unwrap();
        let expected = W::new()
            .i16(3)
            .i32(1)
            .str("t")
            .bytes(b"")
            .i32(1) // one owned topic
            .str("t")
            .i32(2)
            .i32(0)
            .i32(1)
            .i32(4) // generation
            .i16(-1) // null rack
            .0;
        assert_eq!(&bytes[..], &expected[..]);
    }

    #[test]
    fn owned_partitions_are_grouped_sorted_and_deduplicated_on_the_wire() {
        let mut sub = Subscription::new(["b", "a"]);
        sub.owned_partitions = vec![tp("b", 1), tp("a", 2), tp("b", 0), tp("a", 2)];
        let bytes = encode_subscription(&sub, 1).unwrap();
        let got = decode_subscription(&bytes).unwrap().subscription;
        assert_eq!(
            got.owned_partitions,
            vec![tp("a", 2), tp("b", 0), tp("b", 1)]
        );
    }

    #[test]
    fn kafka_python_v0_subscription_and_assignment_are_read() {
        // kafka-python 2.3 writes version 0 and b'' user data.
        let sub = W::new().i16(0).i32(2).str("x").str("y").bytes(b"").0;
        let d = decode_subscription(&sub).unwrap();
        assert_eq!(d.version, 0);
        assert_eq!(d.subscription, Subscription::new(["x", "y"]));

        let asg = W::new()
            .i16(0)
            .i32(1)
            .str("x")
            .i32(2)
            .i32(0)
            .i32(2)
            .bytes(b"")
            .0;
        let a = decode_assignment(&asg).unwrap();
        assert_eq!(a.partitions, vec![tp("x", 0), tp("x", 2)]);
    }

    #[test]
    fn null_user_data_reads_as_empty() {
        // librdkafka writes the assignor's user data, which may be null (-1).
        let asg = W::new().i16(0).i32(0).i32(-1).0;
        assert_eq!(decode_assignment(&asg).unwrap(), Assignment::default());
    }

    #[test]
    fn empty_assignment_bytes_are_an_empty_assignment() {
        assert_eq!(decode_assignment(&[]).unwrap(), Assignment::default());
    }

    #[test]
    fn newer_subscription_version_with_unknown_trailing_field_is_read_as_v3() {
        // A hypothetical v4 appends a field after rack_id; Java's rule: read what you know.
        let bytes = W::new()
            .i16(4)
            .i32(1)
            .str("t")
            .bytes(b"u")
            .i32(1)
            .str("t")
            .i32(1)
            .i32(3)
            .i32(9)
            .str("rack-a")
            .str("some future field")
            .i32(12345)
            .0;
        let d = decode_subscription(&bytes).unwrap();
        assert_eq!(d.version, 4);
        assert_eq!(d.subscription.topics, vec!["t".to_string()]);
        assert_eq!(d.subscription.owned_partitions, vec![tp("t", 3)]);
        assert_eq!(d.subscription.generation_id, 9);
        assert_eq!(d.subscription.rack_id.as_deref(), Some("rack-a"));
    }

    #[test]
    fn v3_subscription_with_trailing_bytes_is_accepted() {
        let mut bytes = encode_subscription(&full_subscription(), 3)
            .unwrap()
            .to_vec();
        bytes.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        let d = decode_subscription(&bytes).unwrap();
        assert_eq!(d.subscription, full_subscription());
    }

    #[test]
    fn newer_assignment_version_is_read() {
        let bytes = W::new()
            .i16(9)
            .i32(1)
            .str("t")
            .i32(1)
            .i32(0)
            .bytes(b"")
            .i32(77) // unknown future field
            .0;
        assert_eq!(
            decode_assignment(&bytes).unwrap().partitions,
            vec![tp("t", 0)]
        );
    }

    #[test]
    fn every_truncation_of_a_valid_subscription_is_an_error() {
        let bytes = encode_subscription(&full_subscription(), 3).unwrap();
        for cut in 0..bytes.len() {
            let err = decode_subscription(&bytes[..cut]);
            assert!(err.is_err(), "prefix of {cut} bytes decoded: {err:?}");
        }
    }

    #[test]
    fn every_truncation_of_a_valid_assignment_is_an_error() {
        let a = Assignment {
            partitions: vec![tp("a", 0), tp("b", 1)],
            user_data: Bytes::from_static(b"ud"),
        };
        let bytes = encode_assignment(&a, 0).unwrap();
        // Zero bytes is the legitimate "no assignment"; every other prefix is malformed.
        for cut in 1..bytes.len() {
            assert!(decode_assignment(&bytes[..cut]).is_err(), "prefix {cut}");
        }
    }

    #[test]
    fn huge_array_length_is_rejected_before_allocating() {
        let bytes = W::new().i16(0).i32(i32::MAX).0;
        assert_eq!(
            decode_subscription(&bytes),
            Err(DecodeError::ArrayTooLong {
                field: "topics",
                count: i32::MAX as usize,
                remaining: 0
            })
        );
        let bytes = W::new().i16(0).i32(0x7fff_fff0).0;
        assert!(matches!(
            decode_assignment(&bytes),
            Err(DecodeError::ArrayTooLong {
                field: "assigned_partitions",
                ..
            })
        ));
        // Partition array inside an owned-partitions entry.
        let bytes = W::new()
            .i16(1)
            .i32(1)
            .str("t")
            .bytes(b"")
            .i32(1)
            .str("t")
            .i32(i32::MAX)
            .0;
        assert!(matches!(
            decode_subscription(&bytes),
            Err(DecodeError::ArrayTooLong {
                field: "partitions",
                ..
            })
        ));
    }

    #[test]
    fn huge_string_or_bytes_length_is_truncation_not_allocation() {
        let bytes = W::new().i16(0).i32(1).i16(i16::MAX).0;
        assert!(matches!(
            decode_subscription(&bytes),
            Err(DecodeError::Truncated { field: "topics", needed, .. }) if needed == i16::MAX as usize
        ));
        let bytes = W::new().i16(0).i32(1).str("t").i32(i32::MAX).0;
        assert!(matches!(
            decode_subscription(&bytes),
            Err(DecodeError::Truncated {
                field: "user_data",
                ..
            })
        ));
    }

    #[test]
    fn malformed_fields_give_precise_errors() {
        assert_eq!(
            decode_subscription(&W::new().i16(-2).0),
            Err(DecodeError::NegativeVersion(-2))
        );
        assert_eq!(
            decode_subscription(&W::new().i16(0).i32(-1).0),
            Err(DecodeError::UnexpectedNull { field: "topics" })
        );
        assert_eq!(
            decode_subscription(&W::new().i16(0).i32(-5).0),
            Err(DecodeError::InvalidLength {
                field: "topics",
                length: -5
            })
        );
        assert_eq!(
            decode_subscription(&W::new().i16(0).i32(1).i16(-1).0),
            Err(DecodeError::UnexpectedNull { field: "topics" })
        );
        assert_eq!(
            decode_subscription(&W::new().i16(0).i32(1).i16(-3).0),
            Err(DecodeError::InvalidLength {
                field: "topics",
                length: -3
            })
        );
        let mut bad = W::new().i16(0).i32(1).i16(2).0;
        bad.extend_from_slice(&[0xff, 0xfe]);
        bad.extend_from_slice(&0i32.to_be_bytes());
        assert_eq!(
            decode_subscription(&bad),
            Err(DecodeError::InvalidUtf8 { field: "topics" })
        );
        assert_eq!(
            decode_assignment(&W::new().i16(0).i32(0).i32(-7).0),
            Err(DecodeError::InvalidLength {
                field: "user_data",
                length: -7
            })
        );
    }

    #[test]
    fn encode_rejects_unknown_versions_and_oversized_strings() {
        let sub = Subscription::new(["t"]);
        assert_eq!(
            encode_subscription(&sub, 4),
            Err(EncodeError::UnsupportedVersion(4))
        );
        assert_eq!(
            encode_assignment(&Assignment::default(), -1),
            Err(EncodeError::UnsupportedVersion(-1))
        );
        let long = "x".repeat(i16::MAX as usize + 1);
        assert!(matches!(
            encode_subscription(&Subscription::new([long.clone()]), 0),
            Err(EncodeError::StringTooLong {
                field: "topics",
                ..
            })
        ));
        let a = Assignment {
            partitions: vec![TopicPartition::new(long.as_str(), 0)],
            user_data: Bytes::new(),
        };
        assert!(matches!(
            encode_assignment(&a, 0),
            Err(EncodeError::StringTooLong { .. })
        ));
    }

    #[test]
    fn assignment_version_is_the_minimum_member_version_within_bounds() {
        assert_eq!(assignment_version([3, 0, 2]), 0);
        assert_eq!(assignment_version([3, 3]), 3);
        assert_eq!(assignment_version([5, 4]), MAX_KNOWN_VERSION);
        assert_eq!(assignment_version([1, 7]), 1);
        assert_eq!(assignment_version(std::iter::empty()), MAX_KNOWN_VERSION);
    }

    /// Our reader and kafka-protocol's generated decoder agree on well-formed input.
    #[test]
    fn reader_agrees_with_kafka_protocol_decoder() {
        let sub = full_subscription();
        for version in 0..=MAX_KNOWN_VERSION {
            let bytes = encode_subscription(&sub, version).unwrap();
            let mut body = bytes.slice(2..);
            let theirs = ConsumerProtocolSubscription::decode(&mut body, version).unwrap();
            let ours = decode_subscription(&bytes).unwrap().subscription;
            let their_topics: Vec<String> = theirs.topics.iter().map(|t| t.to_string()).collect();
            assert_eq!(their_topics, ours.topics);
            assert_eq!(theirs.user_data.unwrap_or_default(), ours.user_data);
            let their_owned: Vec<TopicPartition> = theirs
                .owned_partitions
                .iter()
                .flat_map(|e| {
                    e.partitions
                        .iter()
                        .map(move |p| TopicPartition::new(e.topic.0.to_string(), *p))
                })
                .collect();
            assert_eq!(their_owned, ours.owned_partitions);
            assert_eq!(theirs.generation_id, ours.generation_id);
            assert_eq!(theirs.rack_id.map(|r| r.to_string()), ours.rack_id);
        }
        let a = Assignment {
            partitions: vec![tp("a", 1), tp("b", 0)],
            user_data: Bytes::from_static(b"q"),
        };
        let bytes = encode_assignment(&a, 0).unwrap();
        let mut body = bytes.slice(2..);
        let theirs = ConsumerProtocolAssignment::decode(&mut body, 0).unwrap();
        assert_eq!(theirs.assigned_partitions.len(), 2);
        assert_eq!(theirs.user_data.unwrap_or_default(), a.user_data);
    }

    fn arb_tp() -> impl Strategy<Value = TopicPartition> {
        ("[a-c]{1,3}", 0..50i32).prop_map(|(t, p)| TopicPartition::new(t, p))
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_subscription(&bytes);
            let _ = decode_assignment(&bytes);
        }

        #[test]
        fn decoding_mutated_valid_bytes_never_panics(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)
        ) {
            let mut bytes = encode_subscription(&full_subscription(), 3).unwrap().to_vec();
            for (i, b) in flips {
                let at = i.index(bytes.len());
                bytes[at] = b;
            }
            let _ = decode_subscription(&bytes);
            let _ = decode_assignment(&bytes);
        }

        #[test]
        fn arbitrary_subscriptions_round_trip(
            topics in proptest::collection::vec("[a-z]{1,8}", 1..5),
            owned in proptest::collection::btree_set(arb_tp(), 0..20),
            generation in -1..1000i32,
            rack in proptest::option::of("[a-z0-9-]{0,12}"),
            user_data in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let sub = Subscription {
                topics,
                user_data: Bytes::from(user_data),
                owned_partitions: owned.into_iter().collect(),
                generation_id: generation,
                rack_id: rack,
            };
            let bytes = encode_subscription(&sub, SUBSCRIPTION_VERSION).unwrap();
            prop_assert_eq!(decode_subscription(&bytes).unwrap().subscription, sub);
        }
    }
}
