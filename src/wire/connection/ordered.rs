//! Requests whose order at the broker matters more than the connection: an answer that did not
//! come in time leaves the connection open, owed, instead of breaking it.
//!
//! A Kafka broker reads one request of a connection at a time and reads the next only after
//! it answered the previous one, in the order the bytes arrived; across connections it keeps no
//! order at all. And a request it received is executed even when the client stopped waiting, or
//! closed the connection. So a client that gives up on an OffsetCommit after
//! `request.timeout.ms` and sends the next one on a new connection may see the old one executed
//! after the new one: the committed offset moves back. Sent on the same connection behind it,
//! the new one can only be executed after it.
//!
//! [`Connection::send_in_order`] sends a request that way: when its answer does not come in
//! time and no byte of it was read, the connection stays open and the answer is owed (the
//! caller gets the timeout); every later request on the connection reads the owed answers first
//! and drops them, with its own deadline over all of them. A connection that already owes
//! answers keeps this rule for every request (breaking it would give the order up), up to
//! [`MAX_OWED`]: past that the broker is taken for gone and the connection is broken as any
//! other timeout breaks one. A timeout in the middle of a frame breaks it too (the stream
//! cannot be resumed there), as does every other error.

use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::Decodable;
use log::{debug, warn};

use super::{Connection, Pending, WireRequest};
use crate::wire::error::{Result, WireError};

/// Answers a connection may owe before a further timeout breaks it: with the default
/// `request.timeout.ms` of 30 s, two minutes of a broker that reads and never answers.
pub(crate) const MAX_OWED: usize = 4;

/// One answer owed: which request it answers, enough to read its header.
#[derive(Debug, Clone, Copy)]
pub(super) struct Owed {
    correlation_id: i32,
    key: ApiKey,
    version: i16,
}

/// The time left until `deadline` (zero once it passed).
pub(super) fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

impl Connection {
    /// Sends `req` and waits up to the request timeout for its answer, keeping the connection
    /// (the answer owed) when it does not come in time: see the module docs. The caller gets
    /// [`WireError::Timeout`] then, with [`Connection::is_broken`] false.
    pub(crate) fn send_in_order<R: WireRequest>(
        &mut self,
        req: &R,
        version: i16,
    ) -> Result<R::Response> {
        let pending = self.send_request(req, version)?;
        let deadline = Instant::now() + self.config.request_timeout;
        let result = self
            .drain_owed(deadline)
            .and_then(|()| self.receive_inner(&pending, left(deadline)));
        match result {
            Err(WireError::Timeout { what }) if self.may_owe() => {
                warn!(
                    "{}: no answer to {:?} in time; the connection is kept and the answer owed, \
                     so that the next request is executed after it",
                    self.addr,
                    R::KEY
                );
                self.owed.push_back(Owed {
                    correlation_id: pending.correlation_id,
                    key: R::KEY,
                    version: pending.version,
                });
                Err(WireError::Timeout { what })
            }
            other => {
                self.in_flight = self.in_flight.saturating_sub(1);
                if let Err(e) = &other {
                    if e.breaks_connection() {
                        self.broken = true;
                    }
                }
                other
            }
        }
    }

    /// Whether a timeout may leave the connection open with one more answer owed.
    fn may_owe(&self) -> bool {
        !self.broken && !self.mid_frame && self.owed.len() < MAX_OWED
    }

    /// Reads and drops the owed answers, oldest first, by `deadline`. A timeout before the first
    /// byte of one leaves the rest owed, and the caller's own request behind them: a caller of
    /// [`send_in_order`](Self::send_in_order), or any caller on a connection that owes, keeps
    /// the connection; any other error breaks it.
    pub(super) fn drain_owed(&mut self, deadline: Instant) -> Result<()> {
        while let Some(owed) = self.owed.front().copied() {
            let mut frame = self.read_frame(left(deadline))?;
            let header =
                ResponseHeader::decode(&mut frame, owed.key.response_header_version(owed.version))
                    .map_err(|e| {
                        WireError::Protocol(format!("cannot decode response header: {e:#}"))
                    })?;
            if header.correlation_id != owed.correlation_id {
                return Err(WireError::CorrelationMismatch {
                    expected: owed.correlation_id,
                    got: header.correlation_id,
                });
            }
            debug!(
                "{}: the owed answer to {:?} came late; dropped",
                self.addr, owed.key
            );
            self.owed.pop_front();
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        Ok(())
    }

    /// A timeout of `pending`'s answer on a connection that owes answers already: kept owed
    /// too (see the module docs), true when it was.
    pub(super) fn owe_too<R: WireRequest>(&mut self, pending: &Pending<R>, e: &WireError) -> bool {
        if self.owed.is_empty() || !matches!(e, WireError::Timeout { .. }) || !self.may_owe() {
            return false;
        }
        self.owed.push_back(Owed {
            correlation_id: pending.correlation_id,
            key: R::KEY,
            version: pending.version,
        });
        true
    }
}
