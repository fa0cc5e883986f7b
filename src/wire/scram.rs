//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), client side, without I/O.
//!
//! Why sans-IO: every rule that protects us from a hostile or broken server (the nonce must
//! extend ours, a bounded iteration count, the server signature checked in constant time, `e=`
//! errors reported) is a pure function of the messages, unit-tested here with the RFC's own test
//! vector; the SASL exchange (`connection/sasl.rs`) only moves the messages through
//! SaslAuthenticate.
//!
//! What is deliberately not done: SASLprep of the user name and password (Kafka does not apply
//! it either, so applying it would make non-ASCII passwords fail against Kafka), channel binding
//! (the gs2 header is always `n,,`), and mandatory extensions (`m=`, refused).
//!
//! The iteration count is bounded on both sides, see [`MIN_ITERATIONS`] and [`MAX_ITERATIONS`].

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};

use super::error::broker_text;
use super::secret::{wipe, Secret};

/// The fewest PBKDF2 iterations accepted. Why: RFC 7677 asks for at least 4096 and Kafka refuses
/// to store SCRAM credentials with fewer, so a lower count comes from an impostor who wants our
/// proof cheap to attack offline.
pub const MIN_ITERATIONS: u32 = 4096;

/// The most PBKDF2 iterations accepted. Why this number: Kafka refuses to store SCRAM credentials
/// with more than 16384 iterations, and this is four times that, for Kafka-compatible brokers
/// with stronger settings. At this cap one SCRAM-SHA-512 authentication costs about 30 ms of CPU
/// in a release build (about 2 s in a debug build); without a cap a hostile server could send
/// `i=4294967295` and keep the connecting thread (the heartbeat thread included) busy for hours.
pub const MAX_ITERATIONS: u32 = 65_536;

/// Which hash the SCRAM mechanism uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScramHash {
    /// SCRAM-SHA-256 (RFC 7677).
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

impl ScramHash {
    pub(crate) fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => hmac_with::<Sha256>(key, parts),
            ScramHash::Sha512 => hmac_with::<Sha512>(key, parts),
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi()` of RFC 5802, which is PBKDF2 with HMAC and one output block.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut out = vec![0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out
            }
            ScramHash::Sha512 => {
                let mut out = vec![0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out
            }
        }
    }

    /// Checks `tag` against HMAC(key, message) in constant time.
    fn verify(self, key: &[u8], message: &[u8], tag: &[u8]) -> bool {
        match self {
            ScramHash::Sha256 => verify_with::<Sha256>(key, message, tag),
            ScramHash::Sha512 => verify_with::<Sha512>(key, message, tag),
        }
    }
}

fn hmac_with<D>(key: &[u8], parts: &[&[u8]]) -> Vec<u8>
where
    D: hmac::EagerHash,
    Hmac<D>: KeyInit + Mac,
{
    // HMAC accepts keys of any length, so this never fails; an empty MAC would only make the
    // proof wrong, which the broker then refuses.
    let Ok(mut mac) = <Hmac<D> as KeyInit>::new_from_slice(key) else {
        return Vec::new();
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn verify_with<D>(key: &[u8], message: &[u8], tag: &[u8]) -> bool
where
    D: hmac::EagerHash,
    Hmac<D>: KeyInit + Mac,
{
    let Ok(mut mac) = <Hmac<D> as KeyInit>::new_from_slice(key) else {
        return false;
    };
    mac.update(message);
    // `verify_slice` compares in constant time.
    mac.verify_slice(tag).is_ok()
}

/// Why a SCRAM exchange was abandoned. None of these carries the password or a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ScramError {
    /// A server message did not follow RFC 5802's syntax.
    Malformed(String),
    /// The server's nonce does not start with ours (or adds nothing): a replay or an impostor.
    NonceNotExtended,
    /// The iteration count is outside [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`].
    Iterations {
        /// The count the server sent.
        count: u32,
    },
    /// The server ended the exchange with `e=`; Kafka's reasons are words such as
    /// `invalid-proof` or `unknown-user` (escaped and cut to a bound: it is the server's text).
    Server(String),
    /// The server's signature does not match: it does not know the password either, so it is
    /// not the broker we think.
    BadServerSignature,
}

impl fmt::Display for ScramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScramError::Malformed(m) => write!(f, "malformed server message: {m}"),
            ScramError::NonceNotExtended => {
                f.write_str("the server nonce does not extend the client nonce")
            }
            ScramError::Iterations { count } => write!(
                f,
                "the server asks for {count} iterations, outside the accepted \
                 {MIN_ITERATIONS}..={MAX_ITERATIONS}"
            ),
            ScramError::Server(e) => write!(f, "the server refused: {e}"),
            ScramError::BadServerSignature => {
                f.write_str("the server signature is wrong (the server does not know the password)")
            }
        }
    }
}

/// A leaf: it wraps no other error.
impl std::error::Error for ScramError {}

/// The first step: holds what the client sent until the server's first message arrives.
#[derive(Debug)]
pub(crate) struct ScramClient {
    hash: ScramHash,
    password: Secret,
    nonce: String,
    client_first_bare: String,
}

/// The last step: what is needed to check the server's final message.
pub(crate) struct ServerCheck {
    hash: ScramHash,
    server_key: Vec<u8>,
    auth_message: String,
}

impl fmt::Debug for ServerCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerCheck")
            .field("hash", &self.hash)
            .field("server_key", &"[redacted]")
            .finish()
    }
}

impl Drop for ServerCheck {
    fn drop(&mut self) {
        wipe(&mut self.server_key);
    }
}

/// `saslname` of RFC 5802: `=` and `,` escaped.
fn escape_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

impl ScramClient {
    /// Starts an exchange for `username` with the client nonce `nonce` (printable, no comma;
    /// the SASL exchange makes a fresh random one per exchange).
    pub(crate) fn new(
        hash: ScramHash,
        username: &str,
        password: &Secret,
        nonce: &str,
    ) -> ScramClient {
        ScramClient {
            hash,
            password: password.clone(),
            nonce: nonce.to_string(),
            client_first_bare: format!("n={},r={nonce}", escape_name(username)),
        }
    }

    /// client-first-message: the gs2 header `n,,` (no channel binding, no authzid) and the bare
    /// part. Holds no secret.
    pub(crate) fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Checks server-first-message and answers with client-final-message (which holds the proof:
    /// the caller must wipe it after sending), and what checks the server's final message.
    pub(crate) fn client_final(
        self,
        server_first: &[u8],
    ) -> Result<(Vec<u8>, ServerCheck), ScramError> {
        let ServerFirst {
            text: server_first,
            nonce,
            salt,
            iterations: count,
        } = parse_server_first(&self.nonce, server_first)?;

        let hash = self.hash;
        let mut salted = hash.salted_password(self.password.expose().as_bytes(), &salt, count);
        let mut client_key = hash.hmac(&salted, &[b"Client Key"]);
        let server_key = hash.hmac(&salted, &[b"Server Key"]);
        wipe(&mut salted);
        let mut stored_key = hash.hash(&client_key);
        // c=biws is base64("n,,"), the gs2 header we sent.
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let mut signature = hash.hmac(&stored_key, &[auth_message.as_bytes()]);
        wipe(&mut stored_key);
        let mut proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        wipe(&mut client_key);
        wipe(&mut signature);
        // Reserved exactly and the proof encoded straight into it: no intermediate string and
        // no reallocation leaves a copy of the proof unwiped (the caller wipes the message).
        let mut message = Vec::with_capacity(without_proof.len() + 3 + base64_len(proof.len()));
        message.extend_from_slice(without_proof.as_bytes());
        message.extend_from_slice(b",p=");
        base64_encode_into(&proof, &mut message);
        wipe(&mut proof);
        Ok((message, ServerCheck::new(hash, server_key, auth_message)))
    }
}

/// What server-first-message carries, checked: a nonce that extends ours and is printable, the
/// decoded salt, and an iteration count within the bounds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ServerFirst<'a> {
    /// The whole message as text (it is part of the auth message the proofs sign).
    pub(crate) text: &'a str,
    /// The combined nonce (ours followed by the server's part).
    pub(crate) nonce: &'a str,
    /// The decoded salt.
    pub(crate) salt: Vec<u8>,
    /// The PBKDF2 iteration count, within [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`].
    pub(crate) iterations: u32,
}

/// Parses server-first-message (`r=...,s=...,i=...[,ext]`) for a client whose nonce is `ours`.
///
/// Why a function of its own: this is where the server's bytes are read, so it is what the fuzz
/// target drives (without the PBKDF2 cost that follows). Every check works on bytes or uses
/// `strip_prefix`, never an index into the text, so no input can slice inside a UTF-8 character.
pub(crate) fn parse_server_first<'a>(
    ours: &str,
    server_first: &'a [u8],
) -> Result<ServerFirst<'a>, ScramError> {
    let text = std::str::from_utf8(server_first)
        .map_err(|_| ScramError::Malformed("server-first-message is not UTF-8".into()))?;
    let mut attrs = text.split(',');
    let mut next = |key: &str| -> Result<&'a str, ScramError> {
        let attr = attrs.next().unwrap_or_default();
        if attr.starts_with("m=") {
            return Err(ScramError::Malformed(
                "a mandatory extension (m=) is not supported".into(),
            ));
        }
        attr.strip_prefix(key)
            .and_then(|rest| rest.strip_prefix('='))
            .ok_or_else(|| {
                ScramError::Malformed(format!(
                    "server-first-message lacks `{key}=` where RFC 5802 puts it"
                ))
            })
    };
    let nonce = next("r")?;
    let salt = next("s")?;
    let iterations = next("i")?;
    if nonce.len() <= ours.len() || !nonce.starts_with(ours) {
        return Err(ScramError::NonceNotExtended);
    }
    if nonce
        .bytes()
        .any(|b| !(0x21..=0x7e).contains(&b) || b == b',')
    {
        return Err(ScramError::Malformed("the nonce is not printable".into()));
    }
    let salt = base64_decode(salt)
        .ok_or_else(|| ScramError::Malformed("the salt is not base64".into()))?;
    let count: u32 = Some(iterations)
        .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|i| i.parse().ok())
        .ok_or_else(|| ScramError::Malformed("the iteration count is not a number".into()))?;
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&count) {
        return Err(ScramError::Iterations { count });
    }
    Ok(ServerFirst {
        text,
        nonce,
        salt,
        iterations: count,
    })
}

impl ServerCheck {
    /// What checks server-final-message: the server key and the auth message the signature
    /// covers. Built by [`ScramClient::client_final`]; also by the fuzz target, which checks
    /// the server-final parse without running PBKDF2 first.
    pub(crate) fn new(hash: ScramHash, server_key: Vec<u8>, auth_message: String) -> ServerCheck {
        ServerCheck {
            hash,
            server_key,
            auth_message,
        }
    }

    /// Checks server-final-message: `v=` must carry the signature only the holder of the
    /// password's server key can compute (compared in constant time); `e=` is the server's
    /// refusal.
    pub(crate) fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let text = std::str::from_utf8(server_final)
            .map_err(|_| ScramError::Malformed("server-final-message is not UTF-8".into()))?;
        let first = text.split(',').next().unwrap_or_default();
        if let Some(error) = first.strip_prefix("e=") {
            return Err(ScramError::Server(broker_text(error)));
        }
        let Some(signature) = first.strip_prefix("v=") else {
            return Err(ScramError::Malformed(
                "server-final-message has neither v= nor e=".into(),
            ));
        };
        let signature = base64_decode(signature)
            .ok_or_else(|| ScramError::Malformed("the server signature is not base64".into()))?;
        if self
            .hash
            .verify(&self.server_key, self.auth_message.as_bytes(), &signature)
        {
            Ok(())
        } else {
            Err(ScramError::BadServerSignature)
        }
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The length of `len` bytes in base64 with padding.
fn base64_len(len: usize) -> usize {
    len.div_ceil(3) * 4
}

/// Standard base64 with padding (RFC 4648), as SCRAM uses it.
pub(crate) fn base64_encode(data: &[u8]) -> String {
    let mut out = Vec::with_capacity(base64_len(data.len()));
    base64_encode_into(data, &mut out);
    // The alphabet is ASCII.
    String::from_utf8(out).unwrap_or_default()
}

/// Appends the base64 of `data` to `out`, so a secret can be encoded into a buffer that is
/// wiped later without passing through a string of its own.
fn base64_encode_into(data: &[u8], out: &mut Vec<u8>) {
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[((n >> (18 - 6 * i)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
}

/// Decodes canonical standard base64 with padding; `None` for anything else.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let value = |c: u8| BASE64.iter().position(|&x| x == c).map(|p| p as u32);
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads = bytes.chunks(4);
    let count = quads.len();
    for (index, quad) in quads.enumerate() {
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && index + 1 != count) {
            return None;
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        // Canonical only: the bits a padded quad does not decode must be zero, so each byte
        // string has one text (RFC 4648 section 3.5).
        if n & ((1 << (8 * pad)) - 1) != 0 {
            return None;
        }
        let decoded = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&decoded[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 7677 section 3: user "user", password "pencil".
    const NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn rfc_client() -> ScramClient {
        ScramClient::new(ScramHash::Sha256, "user", &Secret::new("pencil"), NONCE)
    }

    #[test]
    fn scram_sha256_matches_the_rfc_7677_test_vector() {
        let client = rfc_client();
        assert_eq!(client.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let (final_message, check) = client.client_final(SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(final_message).unwrap(), CLIENT_FINAL);
        assert_eq!(check.verify(SERVER_FINAL.as_bytes()), Ok(()));
    }

    #[test]
    fn the_client_final_message_is_reserved_exactly_so_the_proof_is_never_copied() {
        let (message, _) = rfc_client().client_final(SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(message.capacity(), message.len());
        assert_eq!(String::from_utf8(message).unwrap(), CLIENT_FINAL);
    }

    #[test]
    fn a_nonce_that_does_not_extend_ours_is_refused() {
        for server_first in [
            "r=someoneElsesNonce123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            // Exactly ours, nothing added by the server.
            "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            // Ours with a different prefix.
            "r=XrOprNGfwEbeRWgbNEkqOabc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        ] {
            assert_eq!(
                rfc_client().client_final(server_first.as_bytes()).err(),
                Some(ScramError::NonceNotExtended),
                "{server_first}"
            );
        }
    }

    #[test]
    fn iteration_counts_outside_the_cap_are_refused_without_computing() {
        for count in [0u64, 1, 4095, u64::from(MAX_ITERATIONS) + 1, 4_294_967_295] {
            let server_first = format!("r={NONCE}abc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i={count}");
            let err = rfc_client().client_final(server_first.as_bytes()).err();
            assert_eq!(
                err,
                Some(ScramError::Iterations {
                    count: count as u32
                })
            );
        }
        // A count that does not even fit 32 bits is malformed, and refused just as fast.
        let server_first = format!("r={NONCE}abc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999999");
        assert!(matches!(
            rfc_client().client_final(server_first.as_bytes()),
            Err(ScramError::Malformed(_))
        ));
    }

    #[test]
    fn the_iteration_cap_itself_is_accepted_and_one_more_is_not() {
        // The boundary, not a stopwatch: what the cap costs in CPU is a property of the machine
        // (about 30 ms per SCRAM-SHA-512 login in a release build), what it admits is ours.
        let at_cap = format!("r={NONCE}abc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i={MAX_ITERATIONS}");
        let client = ScramClient::new(ScramHash::Sha512, "user", &Secret::new("pencil"), NONCE);
        assert!(client.client_final(at_cap.as_bytes()).is_ok());
        let above = MAX_ITERATIONS + 1;
        let over_cap = format!("r={NONCE}abc,s=W22ZaJ0SNY7soEsUEjb6gQ==,i={above}");
        let client = ScramClient::new(ScramHash::Sha512, "user", &Secret::new("pencil"), NONCE);
        assert_eq!(
            client.client_final(over_cap.as_bytes()).err(),
            Some(ScramError::Iterations { count: above })
        );
    }

    #[test]
    fn a_bad_server_signature_is_refused() {
        let (_, check) = rfc_client().client_final(SERVER_FIRST.as_bytes()).unwrap();
        let mut wrong = base64_decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").unwrap();
        wrong[0] ^= 1;
        let forged = format!("v={}", base64_encode(&wrong));
        assert_eq!(
            check.verify(forged.as_bytes()),
            Err(ScramError::BadServerSignature)
        );
        // A truncated signature too.
        assert_eq!(
            check.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5n"),
            Err(ScramError::BadServerSignature)
        );
        assert!(matches!(
            check.verify(b"x=whatever"),
            Err(ScramError::Malformed(_))
        ));
    }

    #[test]
    fn a_server_error_is_reported() {
        let (_, check) = rfc_client().client_final(SERVER_FIRST.as_bytes()).unwrap();
        assert_eq!(
            check.verify(b"e=invalid-proof"),
            Err(ScramError::Server("invalid-proof".into()))
        );
        let msg = ScramError::Server("invalid-proof".into()).to_string();
        assert!(msg.contains("invalid-proof"), "{msg}");
    }

    #[test]
    fn a_server_error_text_is_truncated_and_escaped() {
        let (_, check) = rfc_client().client_final(SERVER_FIRST.as_bytes()).unwrap();
        let hostile = format!(
            "e=invalid-proof\n2026-12-01 ERROR payment applied twice\u{1b}[2J{}",
            "x".repeat(100_000)
        );
        let err = check.verify(hostile.as_bytes()).unwrap_err();
        let text = err.to_string();
        assert!(text.len() < 400, "{} bytes", text.len());
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(text.contains("invalid-proof\\n2026"), "{text}");
    }

    #[test]
    fn malformed_server_first_messages_are_refused() {
        for server_first in [
            "",
            "m=ext,r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            "r=rOprNGfwEbeRWgbNEkqOx,i=4096",
            "r=rOprNGfwEbeRWgbNEkqOx,s=not-base64!,i=4096",
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=many",
        ] {
            assert!(
                matches!(
                    rfc_client().client_final(server_first.as_bytes()),
                    Err(ScramError::Malformed(_))
                ),
                "{server_first}"
            );
        }
    }

    #[test]
    fn a_non_ascii_server_first_message_is_an_error_not_a_panic() {
        // `r` then `é` (two bytes): a key check that slices at byte 1..2 lands inside the char.
        for server_first in [
            "r\u{e9}=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            "\u{e9}",
            "r=rOprNGfwEbeRWgbNEkqOx,s\u{e9},i=4096",
            "r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i\u{e9}4096",
            "m\u{e9}=x,r=rOprNGfwEbeRWgbNEkqOx",
            "r=rOprNGfwEbeRWgbNEkqO\u{e9},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        ] {
            let outcome = std::panic::catch_unwind(|| {
                rfc_client().client_final(server_first.as_bytes()).err()
            });
            assert!(
                matches!(
                    outcome,
                    Ok(Some(
                        ScramError::Malformed(_) | ScramError::NonceNotExtended
                    ))
                ),
                "{server_first:?}: {outcome:?}"
            );
        }
    }

    #[test]
    fn user_names_are_escaped() {
        let c = ScramClient::new(ScramHash::Sha512, "a=b,c", &Secret::new("p"), "n0nce");
        assert_eq!(c.client_first(), b"n,,n=a=3Db=2Cc,r=n0nce");
    }

    #[test]
    fn base64_round_trips() {
        for data in [&b""[..], b"f", b"fo", b"foo", b"foob", b"fooba", b"foobar"] {
            let text = base64_encode(data);
            assert_eq!(base64_decode(&text).as_deref(), Some(data), "{text}");
        }
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_decode("Zm8"), None);
        assert_eq!(base64_decode("Z==="), None);
        assert_eq!(base64_decode("Zm8=Zm8="), None);
        // Non-canonical: the unused bits of the last quad are not zero.
        assert_eq!(base64_decode("Zm9="), None);
        assert_eq!(base64_decode("Zh=="), None);
    }
}
