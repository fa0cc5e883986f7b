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
//! the failure logged), so an identity provider's short outage does not break connections. A
//! failure with no valid token left is retriable ([`super::WireError::TokenUnavailable`]): the
//! connection attempt fails and the next one asks the callback again.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
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
///
/// Why the callback runs outside the lock: every connecting thread needs the cache, and a
/// callback talks to an identity provider that may hang. So at most one thread calls the
/// callback at a time (the others would only ask the provider the same question), and while it
/// runs the others do not wait on it: one that finds the current token still valid (past its
/// refresh point, before its expiry) uses it at once; one that has no valid token waits for
/// that call, but no longer than its own bound (the connection's request timeout), and then
/// gets an unavailable-token error (retriable); when the call ends it is woken and
/// shares its outcome (a callback that fails is called again by the next connection attempt,
/// not by every waiter in turn). A callback that never returns therefore holds only its own
/// thread.
#[derive(Clone)]
pub struct OAuthBearerCallback {
    callback: Arc<Callback>,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when a callback call ends.
    ended: Condvar,
}

#[derive(Default)]
struct State {
    cached: Option<Cached>,
    /// Whether a thread is in the callback now.
    fetching: bool,
    /// Counts the callback calls that ended, so a waiter knows the one it waited for is over.
    calls_ended: u64,
    /// Why the last call ended without a token (cleared by a success).
    last_failure: Option<String>,
}

struct Cached {
    token: OAuthBearerToken,
    /// When to ask for a new token; `None` when that lies beyond any representable instant
    /// (a lifetime of `Duration::MAX`), and so never.
    refresh_at: Option<Instant>,
    /// When the token stops being valid; `None` for never, as for `refresh_at`.
    expires_at: Option<Instant>,
}

/// Whether `now` is before `deadline` (`None`: a deadline that never comes).
fn before(now: Instant, deadline: Option<Instant>) -> bool {
    deadline.is_none_or(|d| now < d)
}

/// Why no token could be had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TokenError {
    /// The callback failed (or is still running in another thread) and no valid token is
    /// cached: retriable, since an identity provider's outage passes.
    Unavailable(String),
    /// The callback returned a token the protocol cannot carry: a bug of the callback, not
    /// retried.
    Invalid(String),
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenError::Unavailable(m) | TokenError::Invalid(m) => f.write_str(m),
        }
    }
}

/// A leaf: it wraps no other error.
impl std::error::Error for TokenError {}

/// Resets the fetching flag and wakes the waiters when the callback call ends, by a return or
/// by a panic (the panic then counts as a failure), so no waiter is left waiting for a call
/// that is over.
struct CallEnds<'a>(&'a Shared);

impl Drop for CallEnds<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        if std::thread::panicking() {
            state.last_failure = Some("the token callback panicked".to_string());
        }
        state.fetching = false;
        state.calls_ended += 1;
        self.0.ended.notify_all();
    }
}

impl OAuthBearerCallback {
    /// Wraps `callback`, which is called on the first connection and again whenever the cached
    /// token has passed `REFRESH_AT` of its lifetime (by one thread at a time, see the type's
    /// documentation).
    pub fn new(callback: impl Fn() -> TokenResult + Send + Sync + 'static) -> OAuthBearerCallback {
        OAuthBearerCallback {
            callback: Arc::new(callback),
            shared: Arc::default(),
        }
    }

    /// A token valid now: the cached one, or a fresh one from the callback; waits at most
    /// `wait` for a callback call running in another thread.
    pub(super) fn token(&self, wait: Duration) -> Result<OAuthBearerToken, TokenError> {
        self.token_at(Instant::now(), wait)
    }

    /// [`token`](Self::token) at the instant `now` (the tests' clock).
    pub(super) fn token_at(
        &self,
        now: Instant,
        wait: Duration,
    ) -> Result<OAuthBearerToken, TokenError> {
        let shared = &*self.shared;
        let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let waited_since = Instant::now();
        loop {
            if let Some(c) = state.cached.as_ref().filter(|c| before(now, c.refresh_at)) {
                return Ok(c.token.clone());
            }
            if !state.fetching {
                break;
            }
            // Another thread is in the callback: use the current token while it is valid.
            if let Some(c) = state.cached.as_ref().filter(|c| before(now, c.expires_at)) {
                return Ok(c.token.clone());
            }
            let ended_before = state.calls_ended;
            let left = wait.saturating_sub(waited_since.elapsed());
            let (guard, _) = shared
                .ended
                .wait_timeout_while(state, left, |s| s.fetching && s.calls_ended == ended_before)
                .unwrap_or_else(|p| p.into_inner());
            state = guard;
            if state.calls_ended == ended_before {
                return Err(TokenError::Unavailable(format!(
                    "another thread's token callback has not returned within {wait:?}"
                )));
            }
            let fresh = state.cached.as_ref().filter(|c| before(now, c.expires_at));
            match (fresh, &state.last_failure) {
                (Some(c), _) => return Ok(c.token.clone()),
                (None, Some(failure)) => return Err(TokenError::Unavailable(failure.clone())),
                (None, None) => continue,
            }
        }
        state.fetching = true;
        drop(state);
        let ends = CallEnds(shared);
        let fetched = (self.callback)();
        let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let outcome = match fetched {
            Ok(token) => match check_token(&token) {
                Ok(()) => {
                    state.cached = Some(Cached {
                        refresh_at: now.checked_add(token.lifetime.mul_f64(REFRESH_AT)),
                        expires_at: now.checked_add(token.lifetime),
                        token: token.clone(),
                    });
                    state.last_failure = None;
                    Ok(token)
                }
                Err(e) => {
                    state.last_failure = Some(e.clone());
                    Err(TokenError::Invalid(e))
                }
            },
            Err(e) => {
                let failure = format!("the token callback failed: {e}");
                state.last_failure = Some(failure.clone());
                match state.cached.as_ref().filter(|c| before(now, c.expires_at)) {
                    Some(c) => {
                        warn!("{failure}; using the current token until it expires");
                        Ok(c.token.clone())
                    }
                    None => Err(TokenError::Unavailable(failure)),
                }
            }
        };
        drop(state);
        drop(ends);
        outcome
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
    const HEAD: &[u8] = b"n,,\x01auth=Bearer ";
    let value = token.value.expose();
    // Reserved exactly, so the buffer never grows: a reallocation would free a copy of the
    // token unwiped (the caller wipes this buffer once it is sent).
    let extensions: usize = token
        .extensions
        .iter()
        .map(|(k, v)| 2 + k.len() + v.len())
        .sum();
    let mut out = Vec::with_capacity(HEAD.len() + value.len() + extensions + 2);
    out.extend_from_slice(HEAD);
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
    use std::sync::mpsc;

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
    fn the_client_message_is_reserved_exactly_so_the_token_is_never_copied() {
        let mut t = token(
            "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.",
            Duration::from_secs(60),
        );
        t.extensions = vec![
            ("logicalCluster".into(), "lkc-1".into()),
            ("identityPoolId".into(), "pool-".repeat(20)),
        ];
        for extensions in [0, 1, 2] {
            let mut t = t.clone();
            t.extensions.truncate(extensions);
            let message = client_first(&t);
            // Exactly the reservation: the buffer never grew, so no freed copy of the token.
            assert_eq!(message.capacity(), message.len(), "{extensions} extensions");
        }
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
        assert!(cb.token(Duration::from_secs(1)).is_ok());
        assert!(clone.token(Duration::from_secs(1)).is_ok());
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
        assert!(cb.token(Duration::from_secs(1)).is_ok());
        std::thread::sleep(Duration::from_millis(5));
        assert!(cb.token(Duration::from_secs(1)).is_ok());
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_token_lifetime_of_duration_max_is_cached_without_overflow() {
        let cb = OAuthBearerCallback::new(|| Ok(token("abc", Duration::MAX)));
        let now = Instant::now();
        assert!(cb.token_at(now, Duration::from_secs(1)).is_ok());
        // Still cached much later: the refresh point is beyond any instant.
        let later = now + Duration::from_secs(100 * 365 * 24 * 3600);
        assert!(cb.token_at(later, Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn a_failing_callback_after_expiry_is_a_retriable_error() {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let cb = OAuthBearerCallback::new(move || match counted.fetch_add(1, Ordering::SeqCst) {
            0 => Ok(token("abc", Duration::from_secs(10))),
            1 => Err("idp down".to_string()),
            _ => Ok(token("def", Duration::from_secs(10))),
        });
        let t0 = Instant::now();
        let wait = Duration::from_secs(1);
        assert!(cb.token_at(t0, wait).is_ok());
        let expired = t0 + Duration::from_secs(11);
        let e = cb.token_at(expired, wait).unwrap_err();
        assert!(
            matches!(&e, TokenError::Unavailable(m) if m.contains("idp down")),
            "{e:?}"
        );
        // The next attempt asks again, and the provider is back.
        let t = cb.token_at(expired, wait).unwrap();
        assert_eq!(t.value.expose(), "def");
    }

    /// A callback that hangs on its second call until released, counting calls and how many run
    /// at once.
    struct Hanging {
        callback: OAuthBearerCallback,
        entered: mpsc::Receiver<()>,
        release: mpsc::Sender<()>,
        calls: Arc<AtomicU32>,
        most_at_once: Arc<AtomicU32>,
    }

    fn hanging(lifetime: Duration) -> Hanging {
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let calls = Arc::new(AtomicU32::new(0));
        let running = Arc::new(AtomicU32::new(0));
        let most_at_once = Arc::new(AtomicU32::new(0));
        let (c, r, m) = (calls.clone(), running.clone(), most_at_once.clone());
        let entered_tx = Mutex::new(entered_tx);
        let callback = OAuthBearerCallback::new(move || {
            let now_running = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now_running, Ordering::SeqCst);
            if c.fetch_add(1, Ordering::SeqCst) > 0 {
                let _ = entered_tx.lock().unwrap().send(());
                // Bounded: a test that forgets to release fails instead of hanging.
                let _ = release_rx
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(20));
            }
            r.fetch_sub(1, Ordering::SeqCst);
            Ok(token("abc", lifetime))
        });
        Hanging {
            callback,
            entered,
            release,
            calls,
            most_at_once,
        }
    }

    #[test]
    fn a_hung_callback_blocks_no_other_thread_beyond_its_wait() {
        let lifetime = Duration::from_secs(100);
        let h = hanging(lifetime);
        let t0 = Instant::now();
        assert!(h.callback.token_at(t0, Duration::from_secs(1)).is_ok());
        // Past the refresh point, before expiry: one thread refreshes and hangs in the callback.
        let refresh = t0 + lifetime.mul_f64(0.6);
        let fetcher = {
            let cb = h.callback.clone();
            std::thread::spawn(move || cb.token_at(refresh, Duration::from_secs(1)).is_ok())
        };
        h.entered
            .recv_timeout(Duration::from_secs(10))
            .expect("the refresh reaches the callback");
        // Another thread meanwhile: the current token is still valid, so it gets it at once.
        let (tx, rx) = mpsc::channel();
        {
            let cb = h.callback.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = tx.send((
                    "valid",
                    cb.token_at(refresh, Duration::from_secs(1)).is_ok(),
                ));
            });
        }
        // And a thread that needs a token after expiry waits its bound, then gets an error.
        let expired = t0 + lifetime * 2;
        {
            let cb = h.callback.clone();
            std::thread::spawn(move || {
                let _ = tx.send((
                    "expired",
                    cb.token_at(expired, Duration::from_millis(200)).is_ok(),
                ));
            });
        }
        let mut outcomes: Vec<(&str, bool)> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|_| {
                let _ = h.release.send(());
                panic!("a thread stayed blocked behind the hung callback")
            });
        outcomes.sort();
        assert_eq!(outcomes, vec![("expired", false), ("valid", true)]);
        h.release.send(()).unwrap();
        assert!(fetcher.join().unwrap());
        assert_eq!(h.calls.load(Ordering::SeqCst), 2);
        assert_eq!(h.most_at_once.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn bad_tokens_are_refused_without_quoting_them() {
        let cb = OAuthBearerCallback::new(|| Ok(token("has space s3cret", Duration::from_secs(9))));
        let e = cb.token(Duration::from_secs(1)).unwrap_err().to_string();
        assert!(!e.contains("s3cret"), "{e}");
        let cb = OAuthBearerCallback::new(|| Err("idp down".into()));
        let e = cb.token(Duration::from_secs(1)).unwrap_err();
        assert!(
            matches!(&e, TokenError::Unavailable(m) if m.contains("idp down")),
            "{e:?}"
        );
        assert_eq!(format!("{cb:?}"), "OAuthBearerCallback(..)");
    }
}
