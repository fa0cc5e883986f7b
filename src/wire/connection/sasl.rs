//! SASL authentication of a connection: SaslHandshake v1, then SaslAuthenticate (v0-2) carrying
//! PLAIN or SCRAM tokens, right after ApiVersions and before any other request; and again before
//! the broker's session lifetime runs out (KIP-368).
//!
//! Why here, under [`Connection`]: every connection must authenticate before anything else, the
//! heartbeat thread's included, and the simplest way to make that impossible to forget is for
//! [`Connection::connect`] to do it. The exchange only sends requests through the connection's
//! ordinary framing, so it works the same over any byte stream the connection runs on (a TLS
//! stream slots in below without changing this file).
//!
//! Failures: a refused credential is [`WireError::Authentication`], which is not retriable (the
//! same password fails the same way; retrying it would only lock the account or flood the
//! broker's log) and names the mechanism. An OAUTHBEARER token callback that fails with no valid
//! token cached is [`WireError::TokenUnavailable`] instead, which is retried: the identity
//! provider may be back at the next attempt.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
};
use kafka_protocol::protocol::StrBytes;
use log::{debug, warn};

use super::Connection;
use crate::wire::error::{broker_text, KafkaCode, Result, WireError};
use crate::wire::oauth::{self, OAuthBearerCallback, TokenError};
use crate::wire::scram::{base64_encode, ScramClient, ScramHash};
use crate::wire::secret::{Secret, WipedBytes};
use crate::wire::versions::VersionRange;

/// A SASL mechanism this client implements.
///
/// Why these: PLAIN, SCRAM and OAUTHBEARER are what managed Kafka services and most self-run
/// clusters enable; GSSAPI needs a Kerberos library (C).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SaslMechanism {
    /// `PLAIN` (RFC 4616): the password itself goes to the broker, so only over TLS in
    /// production.
    Plain,
    /// `SCRAM-SHA-256` (RFC 7677): a challenge-response; the password never crosses the wire.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
    /// `OAUTHBEARER` (KIP-255): a bearer token from the application's token callback
    /// (`sasl.oauthbearer.token.callback`).
    OAuthBearer,
}

impl SaslMechanism {
    /// Every mechanism, for parsers and messages.
    pub const ALL: [SaslMechanism; 4] = [
        SaslMechanism::Plain,
        SaslMechanism::ScramSha256,
        SaslMechanism::ScramSha512,
        SaslMechanism::OAuthBearer,
    ];

    /// The name Kafka uses (`sasl.mechanism`, SaslHandshake).
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    /// Reads a mechanism name, ignoring ASCII case like the other named settings.
    pub fn from_name(name: &str) -> Option<SaslMechanism> {
        SaslMechanism::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name.trim()))
    }

    fn scram(self) -> Option<ScramHash> {
        match self {
            SaslMechanism::Plain | SaslMechanism::OAuthBearer => None,
            SaslMechanism::ScramSha256 => Some(ScramHash::Sha256),
            SaslMechanism::ScramSha512 => Some(ScramHash::Sha512),
        }
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How every connection authenticates: the mechanism and the credentials. `Debug` shows the
/// user name but never the password or a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaslConfig {
    /// The mechanism asked for in SaslHandshake.
    pub mechanism: SaslMechanism,
    /// The user (`authcid`) of PLAIN and SCRAM; not a secret, it is in the broker's logs too.
    pub username: String,
    /// The password of PLAIN and SCRAM.
    pub password: Secret,
    /// Where OAUTHBEARER tokens come from (required with it, unused otherwise).
    pub token_callback: Option<OAuthBearerCallback>,
}

impl SaslConfig {
    /// PLAIN or SCRAM with a user and password.
    pub fn password(
        mechanism: SaslMechanism,
        username: impl Into<String>,
        password: impl Into<Secret>,
    ) -> SaslConfig {
        SaslConfig {
            mechanism,
            username: username.into(),
            password: password.into(),
            token_callback: None,
        }
    }

    /// OAUTHBEARER with tokens from `callback`.
    pub fn oauthbearer(callback: OAuthBearerCallback) -> SaslConfig {
        SaslConfig {
            mechanism: SaslMechanism::OAuthBearer,
            username: String::new(),
            password: Secret::default(),
            token_callback: Some(callback),
        }
    }
}

/// What SaslHandshake may be spoken in: v1 only, the version that wraps the tokens in
/// SaslAuthenticate (v0 sent them as raw frames, and Kafka 4.0 removed it).
const HANDSHAKE_VERSIONS: VersionRange = VersionRange::new(1, 1);
/// SaslAuthenticate: v1 adds the session lifetime (KIP-368), v2 flexible encoding.
const AUTHENTICATE_VERSIONS: VersionRange = VersionRange::new(0, 2);

/// Re-authenticate once this fraction of the session lifetime has passed: early enough that a
/// connection used every few seconds always re-authenticates before the broker closes it,
/// whatever the lifetime (Java's client picks 85-95%).
const REAUTH_AT: f64 = 0.8;

static PLAIN_WARNED: AtomicBool = AtomicBool::new(false);

/// Authenticates `conn` (whose ApiVersions handshake is done) with `sasl`. Returns when the
/// connection must re-authenticate, if the broker limits the session.
pub(super) fn authenticate(conn: &mut Connection, sasl: &SaslConfig) -> Result<Option<Duration>> {
    let mechanism = sasl.mechanism;
    handshake(conn, mechanism)?;
    let mut token_lifetime = None;
    let lifetime = match mechanism.scram() {
        None if mechanism == SaslMechanism::OAuthBearer => {
            let callback = sasl.token_callback.as_ref().ok_or_else(|| {
                refused(
                    conn,
                    mechanism,
                    "no token callback is configured".to_string(),
                )
            })?;
            let token = callback
                .token(conn.request_timeout())
                .map_err(|e| match e {
                    TokenError::Unavailable(reason) => WireError::TokenUnavailable { reason },
                    TokenError::Invalid(reason) => refused(conn, mechanism, reason),
                })?;
            token_lifetime = Some(token.lifetime);
            let (challenge, lifetime) = exchange(conn, mechanism, oauth::client_first(&token))?;
            if !challenge.is_empty() {
                // RFC 7628 3.2.2: the server's error comes as a challenge (a JSON status);
                // the client answers with a lone %x01 and the server then fails the exchange.
                let status = broker_text(&String::from_utf8_lossy(&challenge));
                let ended = exchange(conn, mechanism, vec![1]);
                let detail = match ended {
                    Err(WireError::Authentication { reason, .. }) => format!(": {reason}"),
                    _ => String::new(),
                };
                return Err(refused(
                    conn,
                    mechanism,
                    format!("the broker rejected the token ({status}){detail}"),
                ));
            }
            lifetime
        }
        None => {
            if !conn.is_tls() && !PLAIN_WARNED.swap(true, Ordering::Relaxed) {
                warn!(
                    "SASL PLAIN to {} over a connection without TLS: the password crosses the \
                     network in clear text; use SCRAM, or PLAIN only over TLS",
                    conn.addr()
                );
            }
            let mut token =
                Vec::with_capacity(2 + sasl.username.len() + sasl.password.expose().len());
            token.push(0); // no authorization id: act as the authenticated user
            token.extend_from_slice(sasl.username.as_bytes());
            token.push(0);
            token.extend_from_slice(sasl.password.expose().as_bytes());
            let (_, lifetime) = exchange(conn, mechanism, token)?;
            lifetime
        }
        Some(hash) => {
            let nonce = fresh_nonce().map_err(|e| {
                refused(
                    conn,
                    mechanism,
                    format!("the operating system's random source gave no nonce: {e}"),
                )
            })?;
            let client = ScramClient::new(hash, &sasl.username, &sasl.password, &nonce);
            let (server_first, _) = exchange(conn, mechanism, client.client_first())?;
            let (client_final, check) = client
                .client_final(&server_first)
                .map_err(|e| refused(conn, mechanism, e.to_string()))?;
            let (server_final, lifetime) = exchange(conn, mechanism, client_final)?;
            check
                .verify(&server_final)
                .map_err(|e| refused(conn, mechanism, e.to_string()))?;
            lifetime
        }
    };
    debug!(
        "{}: SASL {mechanism} authenticated{}{}",
        conn.addr(),
        if sasl.username.is_empty() {
            String::new()
        } else {
            format!(" as {:?}", sasl.username)
        },
        lifetime.map_or(String::new(), |l| format!(
            ", session lifetime {l:?} (re-authenticating after {:?})",
            l.mul_f64(REAUTH_AT)
        ))
    );
    if lifetime.is_none() {
        if let Some(t) = token_lifetime {
            debug!(
                "{}: the broker does not limit the session; the connection outlives its token \
                 ({t:?}) as Kafka allows (connections.max.reauth.ms=0)",
                conn.addr()
            );
        }
    }
    Ok(lifetime.map(|l| l.mul_f64(REAUTH_AT)))
}

fn refused(conn: &Connection, mechanism: SaslMechanism, reason: String) -> WireError {
    WireError::Authentication {
        mechanism: mechanism.name(),
        broker: conn.addr().to_string(),
        reason,
    }
}

fn handshake(conn: &mut Connection, mechanism: SaslMechanism) -> Result<()> {
    let version = conn.version_within(ApiKey::SaslHandshake, HANDSHAKE_VERSIONS)?;
    let req =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism.name()));
    let resp = conn.send(&req, version)?;
    match KafkaCode::from_code(resp.error_code) {
        None => Ok(()),
        Some(KafkaCode::UNSUPPORTED_SASL_MECHANISM) => {
            let enabled: Vec<&str> = resp.mechanisms.iter().map(|m| m.as_str()).collect();
            Err(refused(
                conn,
                mechanism,
                format!(
                    "the broker does not enable this mechanism on this listener (it enables: {})",
                    broker_text(&enabled.join(", "))
                ),
            ))
        }
        Some(code) => Err(refused(
            conn,
            mechanism,
            format!("SaslHandshake failed with {code}"),
        )),
    }
}

/// One SaslAuthenticate round trip: sends `token` (wiped from memory and from the connection's
/// write buffer once written) and returns the server's token and session lifetime.
fn exchange(
    conn: &mut Connection,
    mechanism: SaslMechanism,
    token: Vec<u8>,
) -> Result<(Vec<u8>, Option<Duration>)> {
    let version = conn.version_within(ApiKey::SaslAuthenticate, AUTHENTICATE_VERSIONS)?;
    let req =
        SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_owner(WipedBytes(token)));
    let sent = conn.send_secret(&req, version);
    // The last reference to the token's bytes: dropping the request wipes them.
    drop(req);
    let resp: SaslAuthenticateResponse = sent?;
    if let Some(code) = KafkaCode::from_code(resp.error_code) {
        let message = resp
            .error_message
            .as_ref()
            .map(|m| broker_text(m.as_str()))
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| format!("SaslAuthenticate failed with {code}"));
        return Err(refused(conn, mechanism, message));
    }
    let lifetime = u64::try_from(resp.session_lifetime_ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis);
    Ok((resp.auth_bytes.to_vec(), lifetime))
}

/// A client nonce: 24 bytes from the operating system's random source (`getrandom`), base64
/// (no comma, as RFC 5802 requires). If that source fails there is no nonce and so no SCRAM
/// exchange: a nonce an impostor could predict would let it replay a recorded exchange, so
/// nothing weaker is put in its place.
fn fresh_nonce() -> std::result::Result<String, getrandom::Error> {
    nonce_from(getrandom::fill)
}

/// The nonce from `fill`, the random source (a parameter so a failing source can be tested).
fn nonce_from<E>(
    fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
) -> std::result::Result<String, E> {
    let mut bytes = [0u8; 24];
    fill(&mut bytes)?;
    Ok(base64_encode(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanism_names_round_trip() {
        for m in SaslMechanism::ALL {
            assert_eq!(SaslMechanism::from_name(m.name()), Some(m));
            assert_eq!(SaslMechanism::from_name(&m.name().to_lowercase()), Some(m));
        }
        assert_eq!(
            SaslMechanism::from_name("oauthbearer"),
            Some(SaslMechanism::OAuthBearer)
        );
        assert_eq!(SaslMechanism::from_name("GSSAPI"), None);
    }

    #[test]
    fn a_failing_random_source_gives_no_nonce_rather_than_a_weak_one() {
        let failed = nonce_from(|_| Err("no entropy"));
        assert_eq!(failed, Err("no entropy"));
        let fixed = nonce_from(|b: &mut [u8]| {
            b.fill(7);
            Ok::<(), ()>(())
        });
        assert_eq!(fixed, Ok(base64_encode(&[7; 24])));
    }

    #[test]
    fn nonces_are_fresh_and_printable() {
        let a = fresh_nonce().unwrap();
        let b = fresh_nonce().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| (0x21..=0x7e).contains(&c) && c != b','));
    }

    #[test]
    fn sasl_config_debug_hides_the_password() {
        let c = SaslConfig::password(SaslMechanism::ScramSha512, "alice", "s3cr3t-Pa55");
        let text = format!("{c:?}");
        assert!(!text.contains("s3cr3t-Pa55"), "{text}");
        assert!(
            text.contains("alice") && text.contains("[redacted]"),
            "{text}"
        );
        assert_eq!(c.password, Secret::new("s3cr3t-Pa55"));
    }
}
