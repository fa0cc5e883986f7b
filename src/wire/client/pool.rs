//! The client's connection pool: one request connection and one fetch connection per broker,
//! opened on demand, dropped when they break, and reopened only after an exponential backoff.
//!
//! Why two per broker: a long-polling Fetch would otherwise delay a commit, a metadata request or
//! a group request to the same broker by up to `fetch.max.wait.ms`. The fetch connections belong
//! to the brokers' fetch threads (`fetch/fetcher.rs`), which reconnect with their own backoff.

use std::time::Instant;

use log::debug;

use super::cluster::BrokerInfo;
use super::Client;
use crate::wire::connection::Connection;
use crate::wire::error::{Result, WireError};

#[derive(Debug, Default)]
pub(in crate::wire) struct BrokerState {
    failures: u32,
    retry_at: Option<Instant>,
}

impl Client {
    /// The connection to broker `node_id`, opened (or re-opened after a failure, respecting
    /// the backoff) on demand. Lets the group layer send its own requests to the coordinator.
    ///
    /// Fetches use a second connection per broker, owned by that broker's fetch thread (see
    /// `fetch/fetcher.rs`), so that a long-polling Fetch never delays a commit, a metadata
    /// request or a group request to the same broker.
    pub fn connection(&mut self, node_id: i32) -> Result<&mut Connection> {
        if self.conns.get(&node_id).is_some_and(Connection::is_broken) {
            self.conns.remove(&node_id);
        }
        if !self.conns.contains_key(&node_id) {
            let addr = self
                .brokers
                .get(&node_id)
                .map(BrokerInfo::addr)
                .ok_or(WireError::UnknownBroker { node_id })?;
            let state = self.broker_state.entry(node_id).or_default();
            if let Some(at) = state.retry_at {
                let now = Instant::now();
                if at > now {
                    return Err(WireError::io(std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        format!(
                            "broker {node_id} ({addr}) failed {} time(s); next attempt in {:?}",
                            state.failures,
                            at - now
                        ),
                    )));
                }
            }
            match Connection::connect(&addr, &self.config.connection) {
                Ok(conn) => {
                    self.broker_state.remove(&node_id);
                    self.conns.insert(node_id, conn);
                }
                Err(e) => {
                    self.broker_failed(node_id);
                    return Err(e);
                }
            }
        }
        self.conns
            .get_mut(&node_id)
            .ok_or(WireError::UnknownBroker { node_id })
    }

    /// Marks `node_id` as not answering another thread of this client's owner (a producer
    /// lane's request timed out or lost its connection), or as answering again. Why: the
    /// requests any broker can answer (Metadata, InitProducerId) go first to a broker this
    /// client is connected to, and the producer's sender asks them on its own thread; sent to a
    /// hung broker, one would hold every partition's batches for a whole request timeout. A
    /// marked broker is tried last, as a broker whose fetches fail is.
    pub(crate) fn set_troubled_elsewhere(&mut self, node_id: i32, troubled: bool) {
        if troubled {
            self.troubled_elsewhere.insert(node_id);
        } else {
            self.troubled_elsewhere.remove(&node_id);
        }
    }

    /// Records a failure of `node_id`: drops its connection, schedules the next attempt with
    /// exponential backoff and marks metadata stale (the broker may be gone for good).
    ///
    /// A failure reported while the broker is still in backoff is the backoff's own refusal (no
    /// attempt was made): it neither counts nor extends the wait. Counting it would let a caller
    /// that retries faster than the backoff (the fetch loop does) push the next attempt away
    /// forever.
    pub(super) fn broker_failed(&mut self, node_id: i32) {
        self.conns.remove(&node_id);
        let now = Instant::now();
        if self
            .broker_state
            .get(&node_id)
            .and_then(|s| s.retry_at)
            .is_some_and(|at| at > now)
        {
            return;
        }
        let base = self.config.retry_backoff;
        let max = self.config.retry_backoff_max;
        let state = self.broker_state.entry(node_id).or_default();
        state.failures = state.failures.saturating_add(1);
        let factor = 1u32 << state.failures.saturating_sub(1).min(16);
        let delay = base.saturating_mul(factor).min(max);
        state.retry_at = Some(now + delay);
        self.metadata_stale = true;
        debug!(
            "broker {node_id} failed ({} in a row); backing off {delay:?}",
            state.failures
        );
    }

    /// Sends `op` to any reachable broker: a live connection first, then known brokers, then the
    /// bootstrap list. Used for requests that any broker can answer (Metadata, FindCoordinator).
    pub(super) fn any_broker<T>(
        &mut self,
        mut op: impl FnMut(&mut Connection) -> Result<T>,
    ) -> Result<T> {
        let mut tried = Vec::new();
        let mut candidates: Vec<i32> = self.conns.keys().copied().collect();
        candidates.sort_unstable();
        // Known brokers without a connection next (a map lookup each, not a scan of the list).
        candidates.extend(
            self.brokers
                .keys()
                .filter(|id| !self.conns.contains_key(id))
                .copied(),
        );
        // Brokers whose fetches fail or are late, or that another thread found not answering,
        // last: a hung broker would hold this request for the whole request timeout.
        candidates.sort_by_key(|id| {
            self.fetchers.is_troubled(*id) || self.troubled_elsewhere.contains(id)
        });
        for id in candidates {
            let conn = match self.connection(id) {
                Ok(c) => c,
                // Refused credentials: every other broker refuses them too.
                Err(e) if e.is_authentication() => return Err(e),
                Err(e) => {
                    tried.push(format!("broker {id}: {e}"));
                    continue;
                }
            };
            match op(conn) {
                Ok(v) => return Ok(v),
                Err(e) if e.is_authentication() => {
                    self.broker_failed(id);
                    return Err(e);
                }
                Err(e) if e.breaks_connection() => {
                    tried.push(format!("broker {id}: {e}"));
                    self.broker_failed(id);
                }
                Err(e) => return Err(e),
            }
        }
        if self
            .bootstrap_conn
            .as_ref()
            .is_some_and(Connection::is_broken)
        {
            self.bootstrap_conn = None;
        }
        if let Some(conn) = self.bootstrap_conn.as_mut() {
            match op(conn) {
                Ok(v) => return Ok(v),
                Err(e) if e.is_authentication() => {
                    self.bootstrap_conn = None;
                    return Err(e);
                }
                Err(e) if e.breaks_connection() => {
                    tried.push(format!("{}: {e}", conn.addr()));
                    self.bootstrap_conn = None;
                }
                Err(e) => return Err(e),
            }
        }
        for addr in self.config.bootstrap.clone() {
            match Connection::connect(&addr, &self.config.connection) {
                Ok(mut conn) => match op(&mut conn) {
                    Ok(v) => {
                        self.bootstrap_conn = Some(conn);
                        return Ok(v);
                    }
                    Err(e) if e.breaks_connection() && !e.is_authentication() => {
                        tried.push(format!("{addr}: {e}"))
                    }
                    Err(e) => return Err(e),
                },
                Err(e) if e.is_authentication() => return Err(e),
                Err(e) => tried.push(format!("{addr}: {e}")),
            }
        }
        Err(WireError::NoBrokerAvailable { tried })
    }
}
