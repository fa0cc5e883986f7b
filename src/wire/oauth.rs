//! SASL OAUTHBEARER (KIP-255, RFC 7628), client side: the token comes from a user callback,
//! cached and fetched again before it expires.
//!
//! Why a callback and no OAuth client: how a token is obtained differs per deployment (client
//! credentials against an identity provider, a sidecar's file, a cloud SDK), and an HTTP client
//! with its TLS stack would grow the dependency tree for every user. The callback is synchronous,
//! like the rest of the library, and is called from whichever thread connects (the user's or
//! the heartbeat thread's), so it must be `Send + Sync`.
//!
//! Refresh: a token is reused until [`REFRESH_AT`] (half) of its lifetime has passed, then the callback
//! is asked again; if that fails while the old token is still valid, the old one is used (and
//! the failure logged), so an identity provider's short outage does not break connections.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use log::warn;

use super::secret::Secret;

/// Fetch a new token once this fraction of the current one's lifetime has passed. Why half:
/// when the token bounds the broker's session (KIP-368 sessions end with the token), the
/// connection re-authenticates at 80% of the session, and must then get a token with most of its
/// life ahead, not the same one with a fifth left (which would give a session too short to use).
pub(crate) const REFRESH_AT: f64 = 0.5;

/// A bearer token and how long it stays valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OAuthBearerToken {
    /// The token itself (a JWT for most brokers). A secret: never printed.
    pub value: Secret,
    /// How long from now the token is valid (the JWT's `exp` minus now).
    pub lifetime: Duration,
    /// SASL extensions sent with the token (KIP-342), e.g. Confluent Cloud's
    /// `logicalCluster`; names are letters only, values printable ASCII.
    pub extensions: Vec<(String, String)>,
}

/// What the callback returns: a token, or why there is none (the text reaches the
/// authentication error, so it must not contain a secret).
pub type TokenResult = std::result::Result<OAuthBearerToken, String>;

type Callback = dyn Fn() -> TokenResult + Send + Sync;

/// The OAUTHBEARER token source: a user callback plus the cached token, shared by every clone
/// (so every connection of a consumer, the heartbeat thread's too, shares one token).
#[derive(Clone)]
pub struct OAuthBearerCallback {
    callback: Arc<Callback>,
    cache: Arc<Mutex<Option<Cached>>>,
}

struct Cached {
    token: OAuthBearerToken,
    refresh_at: Instant,
    expires_at: Instant,
}

impl OAuthBearerCallback {
    /// Wraps `callback`, which is called on the first connection and again whenever the cached
    /// token has passed `REFRESH_AT` of its lifetime.
    pub fn new(callback: impl Fn() -> TokenResult + Send + Sync + 'static) -> OAuthBearerCallback {
        OAuthBearerCallback {
            callback: Arc::new(callback),
            cache: Arc::default(),
        }
    }

    /// A token valid now: the cached one, or a fresh one from the callback.
    pub(super) fn token(&self) -> std::result::Result<OAuthBearerToken, String> {
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.as_ref().filter(|c| now < c.refresh_at) {
            return Ok(c.token.clone());
        }
        match (self.callback)() {
            Ok(token) => {
                check_token(&token)?;
                *cache = Some(Cached {
                    refresh_at: now + token.lifetime.mul_f64(REFRESH_AT),
                    expires_at: now + token.lifetime,
                    token: token.clone(),
                });
                Ok(token)
            }
            Err(e) => match cache.as_ref().filter(|c| now < c.expires_at) {
                Some(c) => {
                    warn!("OAUTHBEARER token callback failed ({e}); using the current token until it expires");
                    Ok(c.token.clone())
                }
                None => Err(format!("the token callback failed: {e}")),
            },
        }
    }
}

fn check_token(token: &OAuthBearerToken) -> std::result::Result<(), String> {
    let value = token.value.expose();
    // RFC 6750 b64token characters; anything else would corrupt the message.
    if value.is_empty()
        || !value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b))
    {
        return Err(
            "the token callback returned an empty token or one with characters a \
                    bearer token cannot hold"
                .into(),
        );
    }
    if token.lifetime.is_zero() {
        return Err("the token callback returned a token with no lifetime left".into());
    }
    for (key, value) in &token.extensions {
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) || key == "auth" {
            return Err(format!(
                "SASL extension name {key:?} is not letters only (or is `auth`)"
            ));
        }
        if !value
            .bytes()
            .all(|b| (0x20..=0x7e).contains(&b) || b"\t\r\n".contains(&b))
        {
            return Err(format!(
                "SASL extension {key}'s value holds a forbidden character"
            ));
        }
    }
    Ok(())
}

/// The client's first (and only) message (RFC 7628 section 3.1, as Kafka's client writes it):
/// `n,,` then `\x01auth=Bearer TOKEN`, each extension as `\x01key=value`, then `\x01\x01`.
pub(super) fn client_first(token: &OAuthBearerToken) -> Vec<u8> {
    let value = token.value.expose();
    let mut out = Vec::with_capacity(32 + value.len());
    out.extend_from_slice(b"n,,\x01auth=Bearer ");
    out.extend_from_slice(value.as_bytes());
    for (key, value) in &token.extensions {
        out.push(1);
        out.extend_from_slice(key.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.as_bytes());
    }
    out.extend_from_slice(b"\x01\x01");
    out
}

impl fmt::Debug for OAuthBearerCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OAuthBearerCallback(..)")
    }
}

/// Two callbacks are equal when they are the same callback (clones of one another).
impl PartialEq for OAuthBearerCallback {
    fn eq(&self, other: &OAuthBearerCallback) -> bool {
        Arc::ptr_eq(&self.callback, &other.callback)
    }
}

impl Eq for OAuthBearerCallback {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn token(value: &str, lifetime: Duration) -> OAuthBearerToken {
        OAuthBearerToken {
            value: Secret::new(value),
            lifetime,
            extensions: Vec::new(),
        }
    }

    #[test]
    fn the_client_message_follows_kip_255() {
        let mut t = token(
            "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.",
            Duration::from_secs(60),
        );
        assert_eq!(
            client_first(&t),
            b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.\x01\x01".to_vec()
        );
        t.extensions = vec![("logicalCluster".into(), "lkc-1".into())];
        assert_eq!(
            client_first(&t),
            b"n,,\x01auth=Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.\x01logicalCluster=lkc-1\x01\x01"
                .to_vec()
        );
    }

    #[test]
    fn a_token_is_reused_until_most_of_its_lifetime_has_passed() {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let cb = OAuthBearerCallback::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(token("abc", Duration::from_secs(3600)))
        });
        let clone = cb.clone();
        assert!(cb.token().is_ok());
        assert!(clone.token().is_ok());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(cb, clone);
    }

    #[test]
    fn an_expiring_token_is_fetched_again() {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let cb = OAuthBearerCallback::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(token("abc", Duration::from_millis(1)))
        });
        assert!(cb.token().is_ok());
        std::thread::sleep(Duration::from_millis(5));
        assert!(cb.token().is_ok());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn bad_tokens_are_refused_without_quoting_them() {
        let cb = OAuthBearerCallback::new(|| Ok(token("has space s3cret", Duration::from_secs(9))));
        let e = cb.token().unwrap_err();
        assert!(!e.contains("s3cret"), "{e}");
        let cb = OAuthBearerCallback::new(|| Err("idp down".into()));
        assert!(cb.token().unwrap_err().contains("idp down"));
        assert_eq!(format!("{cb:?}"), "OAuthBearerCallback(..)");
    }
}
