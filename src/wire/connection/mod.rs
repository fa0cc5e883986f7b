//! One blocking TCP connection to one broker: framing, correlation ids, timeouts, the
//! ApiVersions handshake and, when configured, SASL authentication (this
//! module's child `sasl.rs`). Its child `ordered.rs` keeps a request whose answer timed out
//! owed on the connection instead of breaking it, so that the next request reaches the broker
//! behind it (Kafka keeps the order of one connection's requests only): what the group's commits
//! need.
//!
//! A `Connection` is owned by exactly one thread and is never shared: Kafka matches responses to
//! requests by order and correlation id, so two threads writing to one socket would corrupt both
//! conversations. Threads that need to talk to the same broker (the user thread and the heartbeat
//! thread) each open their own connection.
//!
//! Network input is untrusted: a frame's length is checked against
//! [`ConnectionConfig::max_response_size`] before anything is allocated, and the frame is read in
//! bounded chunks so that a peer claiming many bytes and sending few costs only what it sent.

mod ordered;
pub(super) mod sasl;

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{self as msg, ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use log::{debug, trace};

use super::bounded;
use super::error::{api_name, KafkaCode, Result, WireError};
use super::secret::wipe;
use super::stream::Stream;
use super::tls::{self, TlsConfig};
use super::versions::{client_range, VersionRange, VersionTable};
use sasl::SaslConfig;

/// Settings shared by every connection a client opens.
#[derive(Clone, Debug)]
pub struct ConnectionConfig {
    /// Sent in every request header so broker logs and quotas can attribute traffic to us.
    pub client_id: String,
    /// Upper bound for establishing the TCP connection.
    pub connect_timeout: Duration,
    /// Upper bound for one request/response round trip (Fetch adds its `max_wait` on top).
    pub request_timeout: Duration,
    /// Largest response frame accepted; larger claims fail before any allocation.
    pub max_response_size: usize,
    /// SASL authentication of every connection (`None`: the listener is PLAINTEXT). Carried here
    /// so that every connection a client opens, the heartbeat thread's included, authenticates.
    pub sasl: Option<SaslConfig>,
    /// TLS of every connection (`None`: plain TCP). Needs the cargo feature `tls`; without it a
    /// connection configured for TLS is refused rather than opened in clear text.
    pub tls: Option<TlsConfig>,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        ConnectionConfig {
            client_id: "rebalance-guard".to_string(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_response_size: 64 * 1024 * 1024,
            sasl: None,
            tls: None,
        }
    }
}

/// A Kafka request this crate can send: ties the message type to its API key and response type.
///
/// `kafka-protocol` only provides such a trait when its broker side is compiled in too; we build
/// the client side only, so the mapping lives here.
pub trait WireRequest: Encodable {
    /// The API key written in the request header.
    const KEY: ApiKey;
    /// The message the broker answers with.
    type Response: Decodable;
}

macro_rules! wire_requests {
    ($($req:ident => $resp:ident : $key:ident),* $(,)?) => {
        $(impl WireRequest for msg::$req {
            const KEY: ApiKey = ApiKey::$key;
            type Response = msg::$resp;
        })*
    };
}

wire_requests! {
    ApiVersionsRequest => ApiVersionsResponse: ApiVersions,
    MetadataRequest => MetadataResponse: Metadata,
    FindCoordinatorRequest => FindCoordinatorResponse: FindCoordinator,
    ListOffsetsRequest => ListOffsetsResponse: ListOffsets,
    FetchRequest => FetchResponse: Fetch,
    OffsetFetchRequest => OffsetFetchResponse: OffsetFetch,
    OffsetCommitRequest => OffsetCommitResponse: OffsetCommit,
    ProduceRequest => ProduceResponse: Produce,
    InitProducerIdRequest => InitProducerIdResponse: InitProducerId,
    AddPartitionsToTxnRequest => AddPartitionsToTxnResponse: AddPartitionsToTxn,
    AddOffsetsToTxnRequest => AddOffsetsToTxnResponse: AddOffsetsToTxn,
    TxnOffsetCommitRequest => TxnOffsetCommitResponse: TxnOffsetCommit,
    EndTxnRequest => EndTxnResponse: EndTxn,
    JoinGroupRequest => JoinGroupResponse: JoinGroup,
    SyncGroupRequest => SyncGroupResponse: SyncGroup,
    HeartbeatRequest => HeartbeatResponse: Heartbeat,
    LeaveGroupRequest => LeaveGroupResponse: LeaveGroup,
    DescribeGroupsRequest => DescribeGroupsResponse: DescribeGroups,
    ConsumerGroupHeartbeatRequest => ConsumerGroupHeartbeatResponse: ConsumerGroupHeartbeat,
    CreateTopicsRequest => CreateTopicsResponse: CreateTopics,
    DescribeConfigsRequest => DescribeConfigsResponse: DescribeConfigs,
    IncrementalAlterConfigsRequest => IncrementalAlterConfigsResponse: IncrementalAlterConfigs,
    ShareGroupHeartbeatRequest => ShareGroupHeartbeatResponse: ShareGroupHeartbeat,
    SaslHandshakeRequest => SaslHandshakeResponse: SaslHandshake,
    SaslAuthenticateRequest => SaslAuthenticateResponse: SaslAuthenticate,
    // v1 only; `wire::share::codec` sends v1 and v2 through its own request types.
    ShareFetchRequest => ShareFetchResponse: ShareFetch,
    ShareAcknowledgeRequest => ShareAcknowledgeResponse: ShareAcknowledge,
}

/// A request written to the socket whose response has not been read yet.
///
/// Returned by [`Connection::send_request`] so that a caller can write requests to several
/// brokers first and then collect the answers, waiting once instead of once per broker.
#[must_use = "the response must be received, or the connection is out of step"]
#[derive(Debug)]
pub(crate) struct Pending<R: WireRequest> {
    correlation_id: i32,
    version: i16,
    _req: PhantomData<fn() -> R>,
}

/// A blocking connection to one broker with its own negotiated version table.
#[derive(Debug)]
pub struct Connection {
    stream: Stream,
    addr: String,
    config: ConnectionConfig,
    next_correlation_id: i32,
    versions: VersionTable,
    write_buf: BytesMut,
    in_flight: usize,
    broken: bool,
    /// Answers to requests whose caller stopped waiting without breaking the connection
    /// (`ordered.rs`), oldest first: read and dropped before the next answer.
    owed: VecDeque<ordered::Owed>,
    /// Some bytes of a frame were read and not all of them: a timeout now breaks the stream.
    mid_frame: bool,
    /// When SASL must run again on this connection (KIP-368), if the broker limits sessions.
    reauthenticate_at: Option<Instant>,
    /// How many SASL authentications succeeded on this connection (the first included).
    authentications: u32,
}

impl Connection {
    /// Connects to `addr` ("host:port"), performs the ApiVersions handshake, authenticates when
    /// [`ConnectionConfig::sasl`] says so, and returns a connection ready for any API both sides
    /// support.
    pub fn connect(addr: &str, config: &ConnectionConfig) -> Result<Connection> {
        let mut conn = Connection::connect_unnegotiated(addr, config)?;
        conn.handshake()?;
        if config.sasl.is_some() {
            conn.authenticate()?;
        }
        Ok(conn)
    }

    /// Runs the SASL exchange (first time or KIP-368 re-authentication) and schedules the next.
    fn authenticate(&mut self) -> Result<()> {
        let Some(sasl) = self.config.sasl.clone() else {
            return Ok(());
        };
        self.reauthenticate_at = None;
        match sasl::authenticate(self, &sasl) {
            Ok(after) => {
                self.reauthenticate_at = after.map(|after| Instant::now() + after);
                self.authentications = self.authentications.saturating_add(1);
                Ok(())
            }
            Err(e) => {
                // The broker closes a connection whose authentication failed.
                self.broken = true;
                Err(e)
            }
        }
    }

    /// How many times SASL authentication succeeded on this connection: 0 without SASL, 1 after
    /// connecting, one more per KIP-368 re-authentication. Lets tests and diagnostics see that
    /// long-lived connections renew their session.
    pub fn authentications(&self) -> u32 {
        self.authentications
    }

    /// Opens the TCP connection without the ApiVersions handshake.
    ///
    /// Only useful to talk to something that is not a Kafka broker (tests of the framing), since
    /// every request needs a negotiated version.
    pub fn connect_unnegotiated(addr: &str, config: &ConnectionConfig) -> Result<Connection> {
        // One deadline for the whole attempt: resolution, every resolved address, the TLS
        // handshake.
        let deadline = Instant::now() + config.connect_timeout;
        let socket = Stream::open(addr, deadline)?;
        let stream = match &config.tls {
            None => Stream::Plain(socket),
            #[cfg(feature = "tls")]
            Some(tls) => tls::handshake(socket, addr, tls, deadline)?,
            #[cfg(not(feature = "tls"))]
            Some(_) => return Err(tls::unavailable()),
        };
        debug!(
            "connected to {addr}{}",
            if stream.is_tls() { " (TLS)" } else { "" }
        );
        Ok(Connection {
            stream,
            addr: addr.to_string(),
            config: config.clone(),
            next_correlation_id: 1,
            versions: VersionTable::default(),
            write_buf: BytesMut::with_capacity(4096),
            in_flight: 0,
            broken: false,
            owed: VecDeque::new(),
            mid_frame: false,
            reauthenticate_at: None,
            authentications: 0,
        })
    }

    /// Whether this connection runs over TLS.
    pub fn is_tls(&self) -> bool {
        self.stream.is_tls()
    }

    /// The address this connection was opened with.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// The request timeout, also the longest a connecting thread waits for something another
    /// thread is doing for it (an OAUTHBEARER token callback).
    pub(crate) fn request_timeout(&self) -> Duration {
        self.config.request_timeout
    }

    /// The versions this broker advertised.
    pub fn versions(&self) -> &VersionTable {
        &self.versions
    }

    /// Highest version of `api` both sides support (see [`client_range`]).
    pub fn version_for(&self, api: ApiKey) -> Result<i16> {
        self.versions.negotiate(api)
    }

    /// Highest version of `api` within `ours` that the broker supports.
    pub(crate) fn version_within(&self, api: ApiKey, ours: VersionRange) -> Result<i16> {
        self.versions.negotiate_within(api, ours)
    }

    /// True once an I/O or framing error has made the byte stream unusable; the owner must drop
    /// the connection and open a new one.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Whether the broker closed (or reset) this connection while it was idle, found without
    /// blocking (see `Stream::peer_closed`); marks the connection broken when so. For an owner
    /// that must act the moment the broker may have dropped what the connection held (a share
    /// session's acquired records), not at its next request.
    pub(crate) fn peer_closed(&mut self) -> bool {
        if !self.broken && self.stream.peer_closed() {
            self.broken = true;
        }
        self.broken
    }

    /// Sends `req` at `version` and waits up to the request timeout for its response.
    pub fn send<R: WireRequest>(&mut self, req: &R, version: i16) -> Result<R::Response> {
        let timeout = self.config.request_timeout;
        self.send_with_timeout(req, version, timeout)
    }

    /// Like [`Connection::send`] with an explicit response timeout (Fetch waits for data on the
    /// broker side, so its timeout must exceed `max_wait`).
    pub(crate) fn send_with_timeout<R: WireRequest>(
        &mut self,
        req: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<R::Response> {
        let pending = self.send_request(req, version)?;
        self.receive(pending, timeout)
    }

    /// Like [`Connection::send`] for a request that carries a secret (a SASL token): the write
    /// buffer is wiped as soon as the request is on the socket, so the connection does not keep
    /// the bytes (its `Debug` would otherwise show them).
    pub(super) fn send_secret<R: WireRequest>(
        &mut self,
        req: &R,
        version: i16,
    ) -> Result<R::Response> {
        let pending = self.send_request(req, version);
        wipe(&mut self.write_buf[..]);
        self.write_buf.clear();
        let timeout = self.config.request_timeout;
        self.receive(pending?, timeout)
    }

    /// Sends `req` and returns the response body undecoded (after the response header).
    ///
    /// For the rare caller that must still read the error code of a response some brokers
    /// encode loosely (librdkafka's mock writes a null `protocol_name` in JoinGroup v5 error
    /// responses, which the schema forbids): it decodes the body itself and can fall back to the
    /// fixed-position error code.
    pub(crate) fn send_for_body<R: WireRequest>(
        &mut self,
        req: &R,
        version: i16,
        timeout: Duration,
    ) -> Result<Bytes> {
        let pending = self.send_request(req, version)?;
        let deadline = Instant::now() + timeout;
        let result = self
            .drain_owed(deadline)
            .and_then(|()| self.read_frame(ordered::left(deadline)))
            .and_then(|mut frame| self.check_header::<R>(&mut frame, &pending));
        if let Err(e) = &result {
            if self.owe_too(&pending, e) {
                return result;
            }
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Err(e) = &result {
            if e.breaks_connection() {
                self.broken = true;
            }
        }
        result
    }

    /// Writes `req` without waiting for the answer; pair it with [`Connection::receive`].
    ///
    /// Refuses a version the broker did not advertise, so a bug upstream cannot put an
    /// unsupported request on the wire.
    pub(crate) fn send_request<R: WireRequest>(
        &mut self,
        req: &R,
        version: i16,
    ) -> Result<Pending<R>> {
        if self.broken {
            return Err(WireError::io(io::Error::new(
                io::ErrorKind::NotConnected,
                format!("connection to {} is broken", self.addr),
            )));
        }
        // KIP-368: renew the SASL session before it runs out, between requests (never with a
        // response outstanding, which would be read as the SASL answer).
        if self.in_flight == 0
            && !matches!(R::KEY, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
            && self
                .reauthenticate_at
                .is_some_and(|at| Instant::now() >= at)
        {
            debug!("{}: SASL session nearly over; re-authenticating", self.addr);
            self.authenticate()?;
        }
        // ApiVersions is the one request sent before the table exists.
        if R::KEY != ApiKey::ApiVersions && !self.versions.broker_supports(R::KEY, version) {
            return Err(WireError::UnsupportedVersion {
                api: R::KEY as i16,
                ours: (version, version),
                broker: self.versions.broker_range(R::KEY).map(|r| (r.min, r.max)),
            });
        }
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_string(self.config.client_id.clone())));
        let header_version = R::KEY.request_header_version(version);

        self.write_buf.clear();
        self.write_buf.put_i32(0); // length, patched below
        header
            .encode(&mut self.write_buf, header_version)
            .and_then(|()| req.encode(&mut self.write_buf, version))
            .map_err(|e| {
                WireError::Protocol(format!(
                    "cannot encode {} v{version}: {e:#}",
                    api_name(R::KEY as i16)
                ))
            })?;
        let body_len = self.write_buf.len() - 4;
        let len = i32::try_from(body_len).map_err(|_| {
            WireError::Protocol(format!("request of {body_len} bytes is too large"))
        })?;
        self.write_buf[..4].copy_from_slice(&len.to_be_bytes());
        trace!(
            "-> {} {} v{version} corr={correlation_id} ({} bytes)",
            self.addr,
            api_name(R::KEY as i16),
            self.write_buf.len()
        );
        self.stream
            .set_write_deadline(Instant::now() + self.config.request_timeout);
        if let Err(e) = self.stream.write_all(&self.write_buf) {
            self.broken = true;
            return Err(self.io_error(e, "request"));
        }
        self.in_flight += 1;
        Ok(Pending {
            correlation_id,
            version,
            _req: PhantomData,
        })
    }

    /// Forgets `pending`, a request the broker never answers (Produce with acks=0), so that the
    /// connection does not count it as owed.
    pub(crate) fn forget<R: WireRequest>(&mut self, pending: Pending<R>) {
        let _ = pending;
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Reads the response to `pending`, which must be the oldest request still in flight.
    pub(crate) fn receive<R: WireRequest>(
        &mut self,
        pending: Pending<R>,
        timeout: Duration,
    ) -> Result<R::Response> {
        let deadline = Instant::now() + timeout;
        let result = self
            .drain_owed(deadline)
            .and_then(|()| self.receive_inner(&pending, ordered::left(deadline)));
        if let Err(e) = &result {
            if self.owe_too(&pending, e) {
                return result;
            }
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Err(e) = &result {
            if e.breaks_connection() {
                self.broken = true;
            }
        }
        result
    }

    fn receive_inner<R: WireRequest>(
        &mut self,
        pending: &Pending<R>,
        timeout: Duration,
    ) -> Result<R::Response> {
        let mut frame = self.read_frame(timeout)?;
        let body = self.check_header::<R>(&mut frame, pending)?;
        let mut body = body;
        bounded::decode(R::KEY, pending.version, &mut body)
            .map_err(|e| bounded::with_broker(e, &self.addr))
    }

    fn check_header<R: WireRequest>(
        &self,
        frame: &mut Bytes,
        pending: &Pending<R>,
    ) -> Result<Bytes> {
        let header_version = R::KEY.response_header_version(pending.version);
        let header = ResponseHeader::decode(frame, header_version)
            .map_err(|e| WireError::Protocol(format!("cannot decode response header: {e:#}")))?;
        if header.correlation_id != pending.correlation_id {
            return Err(WireError::CorrelationMismatch {
                expected: pending.correlation_id,
                got: header.correlation_id,
            });
        }
        Ok(std::mem::take(frame))
    }

    /// Reads one size-prefixed frame, enforcing the maximum size before allocating and the
    /// timeout as one deadline over the whole frame: the stream checks it before every socket
    /// read (see [`super::stream`]), so a peer trickling bytes cannot stretch it.
    fn read_frame(&mut self, timeout: Duration) -> Result<Bytes> {
        self.stream.set_read_deadline(Instant::now() + timeout);
        let frame = self.read_frame_inner();
        // Only a frame read whole (or failed before its first byte) leaves a stream in step.
        self.mid_frame = frame.is_err() && self.mid_frame;
        frame
    }

    fn read_frame_inner(&mut self) -> Result<Bytes> {
        self.mid_frame = false;
        let mut len_buf = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            self.mid_frame = got > 0;
            match self.stream.read(&mut len_buf[got..]) {
                Ok(0) if got == 0 => {
                    return Err(WireError::io(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("{} closed the connection", self.addr),
                    )))
                }
                Ok(0) => return Err(WireError::Truncated { expected: 4, got }),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error(e, "response length")),
            }
        }
        self.mid_frame = true;
        let claimed = i32::from_be_bytes(len_buf);
        if claimed < 4 {
            return Err(WireError::Protocol(format!(
                "response frame length {claimed} is too small for a header"
            )));
        }
        let len = claimed as usize;
        if len > self.config.max_response_size {
            return Err(WireError::FrameTooLarge {
                len: i64::from(claimed),
                max: self.config.max_response_size,
            });
        }
        // Grow with what actually arrives, never by what the peer claims: at most doubling
        // what is already here, and never past the claimed length, so the frame ends up in an
        // allocation of exactly its size (doubling to the next power of two would leave a
        // 6 MiB response in 8 MiB, held as long as any record points into it).
        const CHUNK: usize = 64 * 1024;
        let mut buf: Vec<u8> = Vec::with_capacity(len.min(CHUNK));
        let mut chunk = vec![0u8; len.min(CHUNK)];
        while buf.len() < len {
            if buf.len() == buf.capacity() {
                buf.reserve_exact((len - buf.len()).min(buf.capacity().max(CHUNK)));
            }
            let want = (len - buf.len())
                .min(chunk.len())
                .min(buf.capacity() - buf.len());
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => {
                    return Err(WireError::Truncated {
                        expected: len,
                        got: buf.len(),
                    })
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_error(e, "response body")),
            }
        }
        Ok(Bytes::from(buf))
    }

    fn io_error(&self, e: io::Error, what: &str) -> WireError {
        #[cfg(feature = "tls")]
        if self.stream.is_tls() {
            return tls::io_error(e, &self.addr, what);
        }
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => WireError::Timeout {
                what: format!("{what} from {}", self.addr),
            },
            _ => WireError::io(io::Error::new(
                e.kind(),
                format!("{what} ({}): {e}", self.addr),
            )),
        }
    }

    /// ApiVersions: try our newest version; a broker that does not know it answers with
    /// UNSUPPORTED_VERSION in a v0 body listing the ApiVersions versions it does know, and we
    /// retry with the best of those (v0 at worst).
    fn handshake(&mut self) -> Result<()> {
        let ours = client_range(ApiKey::ApiVersions);
        let mut version = ours.max;
        for _attempt in 0..3 {
            let req = msg::ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str("rebalance-guard"))
                .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
            let pending = self.send_request(&req, version)?;
            let timeout = self.config.request_timeout;
            let mut frame = match self.read_frame(timeout) {
                Ok(f) => f,
                Err(e) => {
                    self.broken = true;
                    return Err(e);
                }
            };
            self.in_flight = self.in_flight.saturating_sub(1);
            let body = match self.check_header(&mut frame, &pending) {
                Ok(b) => b,
                Err(e) => {
                    self.broken = true;
                    return Err(e);
                }
            };
            // The error code is the first field of every ApiVersions response version.
            let code = body.clone().try_get_i16().unwrap_or(0);
            if code == KafkaCode::UNSUPPORTED_VERSION.0 && version > 0 {
                let mut v0 = body.clone();
                let fallback =
                    bounded::decode::<msg::ApiVersionsResponse>(ApiKey::ApiVersions, 0, &mut v0)
                        .ok()
                        .and_then(|r| {
                            r.api_keys
                                .iter()
                                .find(|k| k.api_key == ApiKey::ApiVersions as i16)
                                .map(|k| VersionRange::new(k.min_version, k.max_version))
                        })
                        .and_then(|b| b.highest_common(VersionRange::new(0, version - 1)))
                        .unwrap_or(0);
                // Expected with any broker older than our newest ApiVersions: not a warning.
                debug!(
                    "{} rejected ApiVersions v{version}; retrying with v{fallback}",
                    self.addr
                );
                version = fallback;
                continue;
            }
            let mut body = body;
            let resp = bounded::decode::<msg::ApiVersionsResponse>(
                ApiKey::ApiVersions,
                version,
                &mut body,
            )
            .map_err(|e| {
                self.broken = true;
                bounded::with_broker(e, &self.addr)
            })?;
            if let Some(code) = KafkaCode::from_code(resp.error_code) {
                return Err(WireError::kafka(
                    ApiKey::ApiVersions,
                    code,
                    self.addr.clone(),
                ));
            }
            self.versions = VersionTable::from_broker(
                resp.api_keys
                    .iter()
                    .map(|k| (k.api_key, k.min_version, k.max_version)),
            )
            .with_finalized_features(
                resp.finalized_features_epoch,
                resp.finalized_features
                    .iter()
                    .map(|f| (f.name.to_string(), f.max_version_level)),
            );
            debug!(
                "{}: ApiVersions v{version} handshake done, {} APIs advertised",
                self.addr,
                resp.api_keys.len()
            );
            return Ok(());
        }
        Err(WireError::Protocol(format!(
            "{} kept rejecting ApiVersions",
            self.addr
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::thread;

    /// A one-shot fake server: accepts one connection, reads one request frame, writes `reply`
    /// verbatim and then closes (or lingers, if `linger`).
    fn fake_server(reply: Vec<u8>, linger: Duration) -> (String, thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").ok();
        let addr = listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.to_string())
            .unwrap_or_default();
        let handle = thread::spawn(move || {
            let Some(listener) = listener else { return };
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let mut len = [0u8; 4];
            if s.read_exact(&mut len).is_err() {
                return;
            }
            let mut req = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
            let _ = s.read_exact(&mut req);
            let _ = s.write_all(&reply);
            thread::sleep(linger);
        });
        (addr, handle)
    }

    fn config() -> ConnectionConfig {
        ConnectionConfig {
            request_timeout: Duration::from_secs(5),
            ..ConnectionConfig::default()
        }
    }

    /// Sends an ApiVersions v0 request through the public send path against the fake server.
    fn roundtrip(reply: Vec<u8>, linger: Duration) -> Result<msg::ApiVersionsResponse> {
        let (addr, handle) = fake_server(reply, linger);
        let mut conn = Connection::connect_unnegotiated(&addr, &config())?;
        let r = conn.send(&msg::ApiVersionsRequest::default(), 0);
        if r.is_err() {
            assert!(conn.is_broken() || !matches!(r, Err(WireError::Kafka { .. })));
        }
        let _ = handle.join();
        r
    }

    /// Hand-encoded ApiVersions v0 response (the broker-side encoder is not compiled in).
    fn v0_response(correlation_id: i32) -> Vec<u8> {
        let mut body = BytesMut::new();
        body.put_i32(correlation_id);
        body.put_i16(0); // error_code
        body.put_i32(1); // one api
        body.put_i16(ApiKey::Fetch as i16);
        body.put_i16(4);
        body.put_i16(12);
        let mut frame = Vec::new();
        frame.extend_from_slice(&(body.len() as i32).to_be_bytes());
        frame.extend_from_slice(&body);
        frame
    }

    /// A fake broker for the handshake: answers each request with the next reply (the
    /// correlation id is patched in) and reports the (api key, version) of each request.
    fn scripted_server(replies: Vec<Vec<u8>>) -> (String, thread::JoinHandle<Vec<(i16, i16)>>) {
        let listener = TcpListener::bind("127.0.0.1:0").ok();
        let addr = listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.to_string())
            .unwrap_or_default();
        let handle = thread::spawn(move || {
            let mut seen = Vec::new();
            let Some(listener) = listener else {
                return seen;
            };
            let Ok((mut s, _)) = listener.accept() else {
                return seen;
            };
            for body in replies {
                let mut len = [0u8; 4];
                if s.read_exact(&mut len).is_err() {
                    break;
                }
                let mut req = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
                if s.read_exact(&mut req).is_err() || req.len() < 8 {
                    break;
                }
                seen.push((
                    i16::from_be_bytes([req[0], req[1]]),
                    i16::from_be_bytes([req[2], req[3]]),
                ));
                let mut frame = Vec::new();
                frame.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
                frame.extend_from_slice(&req[4..8]); // correlation id
                frame.extend_from_slice(&body);
                if s.write_all(&frame).is_err() {
                    break;
                }
            }
            seen
        });
        (addr, handle)
    }

    /// ApiVersions v0 body: error code and (key, min, max) entries.
    fn api_versions_v0_body(error: i16, apis: &[(i16, i16, i16)]) -> Vec<u8> {
        let mut b = BytesMut::new();
        b.put_i16(error);
        b.put_i32(apis.len() as i32);
        for (k, lo, hi) in apis {
            b.put_i16(*k);
            b.put_i16(*lo);
            b.put_i16(*hi);
        }
        b.to_vec()
    }

    #[test]
    fn handshake_falls_back_to_the_apiversions_version_the_broker_knows() {
        let av = ApiKey::ApiVersions as i16;
        // First answer: UNSUPPORTED_VERSION, listing ApiVersions 0..=1 (as Kafka does).
        let reject = api_versions_v0_body(35, &[(av, 0, 1)]);
        // Second answer, to v1: ApiVersions v1 adds throttle_time_ms after the array.
        let mut ok = api_versions_v0_body(0, &[(av, 0, 1), (ApiKey::Fetch as i16, 4, 11)]);
        ok.extend_from_slice(&0i32.to_be_bytes());
        let (addr, handle) = scripted_server(vec![reject, ok]);
        let conn = Connection::connect(&addr, &config());
        let seen = handle.join().unwrap_or_default();
        let conn = conn.map_err(|e| e.to_string());
        assert_eq!(
            seen,
            vec![(av, client_range(ApiKey::ApiVersions).max), (av, 1)]
        );
        assert_eq!(
            conn.map(|c| c.version_for(ApiKey::Fetch).ok()),
            Ok(Some(11))
        );
    }

    #[test]
    fn handshake_falls_back_to_v0_when_the_rejection_lists_nothing() {
        let av = ApiKey::ApiVersions as i16;
        let reject = api_versions_v0_body(35, &[]);
        let ok = api_versions_v0_body(0, &[(av, 0, 0), (ApiKey::Metadata as i16, 0, 5)]);
        let (addr, handle) = scripted_server(vec![reject, ok]);
        let conn = Connection::connect(&addr, &config());
        let seen = handle.join().unwrap_or_default();
        assert_eq!(seen.last(), Some(&(av, 0)));
        let conn = conn.map_err(|e| e.to_string());
        assert_eq!(
            conn.map(|c| c.version_for(ApiKey::Metadata).ok()),
            Ok(Some(5))
        );
    }

    #[test]
    fn a_valid_response_decodes() {
        let r = roundtrip(v0_response(1), Duration::ZERO);
        let r = r.map_err(|e| e.to_string());
        assert_eq!(r.map(|r| r.api_keys.len()), Ok(1));
    }

    #[test]
    fn oversized_frame_is_rejected_before_allocating() {
        // Claims 2 GiB - 1; must fail immediately with FrameTooLarge, not try to allocate.
        let reply = i32::MAX.to_be_bytes().to_vec();
        match roundtrip(reply, Duration::from_millis(200)) {
            Err(WireError::FrameTooLarge { len, max }) => {
                assert_eq!(len, i64::from(i32::MAX));
                assert_eq!(max, 64 * 1024 * 1024);
            }
            other => panic!("expected FrameTooLarge, got {other:?}"),
        }
    }

    #[test]
    fn negative_frame_length_is_a_protocol_error() {
        let reply = (-5i32).to_be_bytes().to_vec();
        assert!(matches!(
            roundtrip(reply, Duration::ZERO),
            Err(WireError::Protocol(_))
        ));
    }

    #[test]
    fn truncated_frame_is_an_error_without_allocating_the_claim() {
        // Claims 60 MiB (under the limit) but sends 10 bytes and closes.
        let mut reply = (60 * 1024 * 1024i32).to_be_bytes().to_vec();
        reply.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        match roundtrip(reply, Duration::ZERO) {
            Err(WireError::Truncated { expected, got }) => {
                assert_eq!(expected, 60 * 1024 * 1024);
                assert_eq!(got, 10);
            }
            other => panic!("expected Truncated, got {other:?}"),
        }
    }

    #[test]
    fn a_frame_of_many_read_chunks_arrives_whole_and_in_order() {
        // An odd length over several growth steps of the read buffer: the last step must stop
        // exactly at the claimed length, and every byte must land where it was sent.
        let len = 1_000_003usize;
        let body: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut reply = (len as i32).to_be_bytes().to_vec();
        reply.extend_from_slice(&body);
        let (addr, handle) = fake_server(reply, Duration::from_millis(200));
        let frame = Connection::connect_unnegotiated(&addr, &config()).and_then(|mut conn| {
            let _pending = conn.send_request(&msg::ApiVersionsRequest::default(), 0)?;
            conn.read_frame(Duration::from_secs(5))
        });
        let _ = handle.join();
        let frame = frame.map_err(|e| e.to_string());
        assert_eq!(frame.as_ref().map(|f| f.len()), Ok(len));
        assert!(frame.is_ok_and(|f| f[..] == body[..]), "frame bytes differ");
    }

    #[test]
    fn truncated_length_prefix_is_an_error() {
        assert!(matches!(
            roundtrip(vec![0, 0], Duration::ZERO),
            Err(WireError::Truncated {
                expected: 4,
                got: 2
            })
        ));
    }

    #[test]
    fn correlation_mismatch_is_detected() {
        match roundtrip(v0_response(42), Duration::ZERO) {
            Err(WireError::CorrelationMismatch { expected, got }) => {
                assert_eq!(expected, 1);
                assert_eq!(got, 42);
            }
            other => panic!("expected CorrelationMismatch, got {other:?}"),
        }
    }

    #[test]
    fn garbage_body_is_a_protocol_error_not_a_panic() {
        let mut reply = 8i32.to_be_bytes().to_vec();
        reply.extend_from_slice(&1i32.to_be_bytes());
        reply.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        // Refused by the bounded pre-check: the ApiKeys count needs 4 bytes, 2 remain.
        assert!(matches!(
            roundtrip(reply, Duration::ZERO),
            Err(WireError::Malformed { ref field, .. }) if field == "ApiKeys"
        ));
    }

    #[test]
    fn silent_server_times_out() {
        let (addr, handle) = fake_server(Vec::new(), Duration::from_millis(800));
        let cfg = ConnectionConfig {
            request_timeout: Duration::from_millis(200),
            ..ConnectionConfig::default()
        };
        let r = Connection::connect_unnegotiated(&addr, &cfg)
            .and_then(|mut c| c.send(&msg::ApiVersionsRequest::default(), 0));
        assert!(matches!(r, Err(WireError::Timeout { .. })), "{r:?}");
        let _ = handle.join();
    }

    /// The ordering rule of `ordered.rs`: an answer that comes after its request timed out
    /// leaves the connection usable, and the next request's answer is read after it (the
    /// correlation ids would not match otherwise).
    #[test]
    fn a_timed_out_answer_in_order_keeps_the_connection_and_is_read_before_the_next() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut correlations = Vec::new();
            for _ in 0..2 {
                let mut len = [0u8; 4];
                s.read_exact(&mut len).unwrap();
                let mut req = vec![0u8; i32::from_be_bytes(len) as usize];
                s.read_exact(&mut req).unwrap();
                correlations.push(i32::from_be_bytes([req[4], req[5], req[6], req[7]]));
            }
            // Both requests read: the first one's answer comes only now, late.
            for correlation in correlations {
                s.write_all(&v0_response(correlation)).unwrap();
            }
        });
        let cfg = ConnectionConfig {
            request_timeout: Duration::from_millis(300),
            ..ConnectionConfig::default()
        };
        let mut conn = Connection::connect_unnegotiated(&addr, &cfg).unwrap();
        let late = conn.send_in_order(&msg::ApiVersionsRequest::default(), 0);
        assert!(matches!(late, Err(WireError::Timeout { .. })), "{late:?}");
        assert!(!conn.is_broken(), "kept, with the answer owed");
        let next = conn.send_in_order(&msg::ApiVersionsRequest::default(), 0);
        assert!(next.is_ok(), "{next:?}");
        assert!(conn.owed.is_empty() && conn.in_flight == 0);
        server.join().unwrap();
    }

    #[test]
    fn refuses_versions_the_broker_did_not_advertise() {
        let (addr, handle) = fake_server(Vec::new(), Duration::ZERO);
        let r = Connection::connect_unnegotiated(&addr, &config())
            .and_then(|mut c| c.send(&msg::MetadataRequest::default(), 12));
        assert!(matches!(r, Err(WireError::UnsupportedVersion { .. })));
        drop(r);
        // Unblock the fake server's accept/read.
        let _ = TcpStream::connect(&addr);
        let _ = handle.join();
    }
}
