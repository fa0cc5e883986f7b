//! ShareFetch and ShareAcknowledge at the versions Kafka 4.4 speaks (1-2), on top of
//! `kafka-protocol` 0.18, which knows v1 only.
//!
//! Why a codec of our own: RENEW (acknowledge type 4, KIP-1222) needs v2. v2 differs from v1 by
//! a few fixed-width fields, so the requests are encoded by `kafka-protocol` at v1 and the new
//! fields spliced in at their place (after `BatchSize` in ShareFetch, after `ShareSessionEpoch`
//! in ShareAcknowledge), and the v2 ShareAcknowledge response has its one new field
//! (`AcquisitionLockTimeoutMs`, after `ErrorMessage`) read and removed before the v1 decoder
//! runs; ShareFetch v2 responses are laid out as v1. Every response has passed its
//! `wire::bounded` shape at its real version before it reaches these decoders.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{self as msg, ApiKey};
use kafka_protocol::protocol::buf::{ByteBuf, ByteBufMut};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::wire::connection::WireRequest;

/// A ShareFetch request at v1 or v2: the v1 message and the fields v2 adds (dropped at v1).
#[derive(Clone, Debug, Default)]
pub(crate) struct ShareFetchV2 {
    pub(crate) v1: msg::ShareFetchRequest,
    /// 0: batch-optimized, 1: record-limit (v2+).
    pub(crate) acquire_mode: i8,
    /// Whether the acknowledgements hold RENEW (v2+).
    pub(crate) is_renew_ack: bool,
}

/// A ShareAcknowledge request at v1 or v2.
#[derive(Clone, Debug, Default)]
pub(crate) struct ShareAcknowledgeV2 {
    pub(crate) v1: msg::ShareAcknowledgeRequest,
    /// Whether the acknowledgements hold RENEW (v2+; refused at v1 by the caller).
    pub(crate) is_renew_ack: bool,
}

/// A ShareFetch response of v1 or v2 (the same layout).
#[derive(Clone, Debug, Default)]
pub(crate) struct ShareFetchAnswer(pub(crate) msg::ShareFetchResponse);

/// A ShareAcknowledge response of v1 or v2.
#[derive(Clone, Debug, Default)]
pub(crate) struct ShareAcknowledgeAnswer {
    /// `AcquisitionLockTimeoutMs` (v2+): how long the renewed records are locked now.
    pub(crate) lock_timeout_ms: Option<i32>,
    pub(crate) v1: msg::ShareAcknowledgeResponse,
}

impl WireRequest for ShareFetchV2 {
    const KEY: ApiKey = ApiKey::ShareFetch;
    type Response = ShareFetchAnswer;
}

impl WireRequest for ShareAcknowledgeV2 {
    const KEY: ApiKey = ApiKey::ShareAcknowledge;
    type Response = ShareAcknowledgeAnswer;
}

/// Where the fields after `strings` compact strings and `fixed` bytes start in `body`.
fn prefix_len(body: &[u8], strings: usize, fixed: usize) -> anyhow::Result<usize> {
    let mut pos = 0;
    for _ in 0..strings {
        let (len, width) = uvarint(&body[pos.min(body.len())..])
            .ok_or_else(|| anyhow::anyhow!("bad compact string length"))?;
        pos += width + (len as usize).saturating_sub(1);
    }
    pos += fixed;
    if pos > body.len() {
        anyhow::bail!("message shorter than its fixed fields");
    }
    Ok(pos)
}

/// An unsigned varint at the start of `b`: value and width (at most 5 bytes).
fn uvarint(b: &[u8]) -> Option<(u32, usize)> {
    let mut value = 0u32;
    for (i, byte) in b.iter().take(5).enumerate() {
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Encodes `v1` at v1 and, for v2, splices `extra` in after its first `strings` compact strings
/// and `fixed` bytes.
fn splice<T: Encodable, B: ByteBufMut>(
    v1: &T,
    buf: &mut B,
    version: i16,
    strings: usize,
    fixed: usize,
    extra: &[u8],
) -> anyhow::Result<()> {
    if !(1..=2).contains(&version) {
        anyhow::bail!("version {version} is not 1 or 2");
    }
    let mut body = BytesMut::new();
    v1.encode(&mut body, 1)?;
    if version == 1 {
        buf.put_slice(&body);
        return Ok(());
    }
    let at = prefix_len(&body, strings, fixed)?;
    buf.put_slice(&body[..at]);
    buf.put_slice(extra);
    buf.put_slice(&body[at..]);
    Ok(())
}

impl Encodable for ShareFetchV2 {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
        // GroupId, MemberId; ShareSessionEpoch, MaxWaitMs, MinBytes, MaxBytes, MaxRecords,
        // BatchSize.
        let extra = [self.acquire_mode as u8, u8::from(self.is_renew_ack)];
        splice(&self.v1, buf, version, 2, 24, &extra)
    }

    fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
        Ok(self.v1.compute_size(1)? + if version >= 2 { 2 } else { 0 })
    }
}

impl Encodable for ShareAcknowledgeV2 {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
        // GroupId, MemberId; ShareSessionEpoch.
        splice(&self.v1, buf, version, 2, 4, &[u8::from(self.is_renew_ack)])
    }

    fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
        Ok(self.v1.compute_size(1)? + usize::from(version >= 2))
    }
}

impl Decodable for ShareFetchAnswer {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> anyhow::Result<Self> {
        if !(1..=2).contains(&version) {
            anyhow::bail!("ShareFetch response version {version} is not 1 or 2");
        }
        msg::ShareFetchResponse::decode(buf, 1).map(ShareFetchAnswer)
    }
}

impl Decodable for ShareAcknowledgeAnswer {
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> anyhow::Result<Self> {
        match version {
            1 => Ok(ShareAcknowledgeAnswer {
                lock_timeout_ms: None,
                v1: msg::ShareAcknowledgeResponse::decode(buf, 1)?,
            }),
            2 => {
                let body: Bytes = buf.copy_to_bytes(buf.remaining());
                // ThrottleTimeMs, ErrorCode, then the compact ErrorMessage.
                let (len, width) = uvarint(body.get(6..).unwrap_or_default())
                    .ok_or_else(|| anyhow::anyhow!("bad ErrorMessage length"))?;
                let at = 6 + width + (len as usize).saturating_sub(1);
                let Some(lock) = body.get(at..at + 4) else {
                    anyhow::bail!("no AcquisitionLockTimeoutMs");
                };
                let lock_timeout_ms = (&lock[..]).get_i32();
                let mut v1 = BytesMut::with_capacity(body.len() - 4);
                v1.put_slice(&body[..at]);
                v1.put_slice(&body[at + 4..]);
                let mut v1 = v1.freeze();
                Ok(ShareAcknowledgeAnswer {
                    lock_timeout_ms: Some(lock_timeout_ms),
                    v1: msg::ShareAcknowledgeResponse::decode(&mut v1, 1)?,
                })
            }
            v => anyhow::bail!("ShareAcknowledge response version {v} is not 1 or 2"),
        }
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::share_acknowledge_request as ack;
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::wire::bounded;

    fn fetch_request() -> ShareFetchV2 {
        let v1 = msg::ShareFetchRequest::default()
            .with_group_id(Some(StrBytes::from_static_str("g").into()))
            .with_member_id(Some(StrBytes::from_static_str("member-one")))
            .with_share_session_epoch(7)
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_max_records(100)
            .with_batch_size(50);
        ShareFetchV2 {
            v1,
            acquire_mode: 1,
            is_renew_ack: true,
        }
    }

    #[test]
    fn share_fetch_v2_puts_its_two_fields_after_batch_size() {
        let req = fetch_request();
        let mut v1 = BytesMut::new();
        req.encode(&mut v1, 1).expect("v1");
        let mut v2 = BytesMut::new();
        req.encode(&mut v2, 2).expect("v2");
        // group: 1 + 1 bytes, member: 1 + 10, six int32s.
        let at = 2 + 11 + 24;
        assert_eq!(v2.len(), v1.len() + 2);
        assert_eq!(&v2[..at], &v1[..at]);
        assert_eq!(&v2[at..at + 2], &[1, 1]);
        assert_eq!(&v2[at + 2..], &v1[at..]);
        assert_eq!(req.compute_size(2).expect("size"), v2.len());
        // The batch size really is the last field before them.
        assert_eq!(&v2[at - 4..at], &50i32.to_be_bytes());
    }

    #[test]
    fn share_acknowledge_v2_puts_is_renew_ack_after_the_epoch() {
        let req = ShareAcknowledgeV2 {
            v1: msg::ShareAcknowledgeRequest::default()
                .with_group_id(None)
                .with_member_id(Some(StrBytes::from_static_str("m")))
                .with_share_session_epoch(3)
                .with_topics(vec![ack::AcknowledgeTopic::default()]),
            is_renew_ack: true,
        };
        let mut v2 = BytesMut::new();
        req.encode(&mut v2, 2).expect("v2");
        // null group (1 byte), member (2 bytes), epoch.
        assert_eq!(&v2[3..7], &3i32.to_be_bytes());
        assert_eq!(v2[7], 1);
        let mut v1 = BytesMut::new();
        req.encode(&mut v1, 1).expect("v1");
        assert_eq!(&v2[8..], &v1[7..]);
        assert!(req.encode(&mut BytesMut::new(), 3).is_err());
    }

    #[test]
    fn share_acknowledge_v2_answer_reads_the_lock_timeout_and_the_rest_as_v1() {
        for version in [1, 2] {
            let body = bounded::sample_body(ApiKey::ShareAcknowledge, version).expect("shape");
            let mut bytes = Bytes::from(body.clone());
            let answer: ShareAcknowledgeAnswer =
                bounded::decode(ApiKey::ShareAcknowledge, version, &mut bytes).expect("decode");
            if version == 1 {
                assert_eq!(answer.lock_timeout_ms, None);
                continue;
            }
            let lock = answer.lock_timeout_ms.expect("v2 has the lock timeout");
            // Re-encode at v1 and compare with the sample minus those four bytes.
            let mut again = BytesMut::new();
            answer.v1.encode(&mut again, 1).expect("encode");
            let at = body.len() - again.len();
            assert_eq!(at, 4);
            let (len, width) = uvarint(&body[6..]).expect("message length");
            let pos = 6 + width + len as usize - 1;
            assert_eq!(&body[pos..pos + 4], &lock.to_be_bytes());
            let mut without = body.clone();
            without.drain(pos..pos + 4);
            assert_eq!(&again[..], &without[..]);
        }
    }

    #[test]
    fn share_fetch_v2_answer_is_decoded_as_v1() {
        let body = bounded::sample_body(ApiKey::ShareFetch, 2).expect("shape");
        let mut bytes = Bytes::from(body.clone());
        let answer: ShareFetchAnswer =
            bounded::decode(ApiKey::ShareFetch, 2, &mut bytes).expect("decode");
        let mut again = BytesMut::new();
        answer.0.encode(&mut again, 1).expect("encode");
        assert_eq!(&again[..], &body[..]);
    }

    #[test]
    fn truncated_v2_answers_are_errors() {
        let body = bounded::sample_body(ApiKey::ShareAcknowledge, 2).expect("shape");
        for cut in 0..body.len() {
            let mut b = Bytes::copy_from_slice(&body[..cut]);
            assert!(
                ShareAcknowledgeAnswer::decode(&mut b, 2).is_err(),
                "cut {cut}"
            );
        }
    }
}
