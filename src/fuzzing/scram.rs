//! Fuzz target (e): the two SCRAM messages a server sends, as the client parses them.
//!
//! Input layout: byte 0 picks the message (bit 0: server-first when clear, server-final when
//! set) and, for server-final, the hash (bit 1: SHA-256 when clear, SHA-512 when set); the rest
//! is the message as the server sent it.
//!
//! Properties: no panic (the bytes come from whichever broker a thread connects to, the
//! heartbeat thread's included); a server-first message is accepted only when its nonce extends
//! ours with printable characters, its iteration count lies within the bounds and its salt is
//! canonical base64 (it encodes back to the same text); a server-final message is accepted only
//! when its `v=` attribute is exactly the base64 of the signature the server key gives, and
//! refused with the server's reason when it starts with `e=`, that reason escaped and bounded.

use crate::wire::error::MAX_BROKER_TEXT;
use crate::wire::scram::{
    base64_encode, parse_server_first, ScramError, ScramHash, ServerCheck, MAX_ITERATIONS,
    MIN_ITERATIONS,
};

/// The client nonce the server-first messages are checked against.
const NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
/// The server key and auth message the server-final messages are checked against.
const SERVER_KEY: &[u8] = b"fuzz server key";
const AUTH_MESSAGE: &str = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqOx,s=AA==,i=4096,\
                            c=biws,r=rOprNGfwEbeRWgbNEkqOx";

fn check_server_first(message: &[u8]) {
    let Ok(parsed) = parse_server_first(NONCE, message) else {
        return;
    };
    assert_eq!(parsed.text.as_bytes(), message, "the text is the message");
    assert!(
        parsed.nonce.len() > NONCE.len() && parsed.nonce.starts_with(NONCE),
        "accepted a nonce that does not extend ours: {:?}",
        parsed.nonce
    );
    assert!(
        parsed
            .nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b','),
        "accepted an unprintable nonce: {:?}",
        parsed.nonce
    );
    assert!(
        (MIN_ITERATIONS..=MAX_ITERATIONS).contains(&parsed.iterations),
        "accepted {} iterations",
        parsed.iterations
    );
    let salt_text = parsed.text.split(',').nth(1).unwrap_or_default();
    assert_eq!(
        format!("s={}", base64_encode(&parsed.salt)),
        salt_text,
        "the salt is not canonical base64"
    );
}

fn check_server_final(hash: ScramHash, message: &[u8]) {
    let check = ServerCheck::new(hash, SERVER_KEY.to_vec(), AUTH_MESSAGE.to_string());
    let expected = format!(
        "v={}",
        base64_encode(&hash.hmac(SERVER_KEY, &[AUTH_MESSAGE.as_bytes()]))
    );
    let first = message.split(|&b| b == b',').next().unwrap_or_default();
    match check.verify(message) {
        Ok(()) => assert_eq!(
            first,
            expected.as_bytes(),
            "accepted a signature that is not the server key's"
        ),
        Err(ScramError::Server(reason)) => {
            assert!(first.starts_with(b"e="), "a server error without e=");
            assert!(
                reason.len() <= MAX_BROKER_TEXT + 32 && !reason.chars().any(char::is_control),
                "the server's reason is not bounded and escaped: {reason:?}"
            );
        }
        Err(e) => {
            if std::str::from_utf8(message).is_ok() {
                assert_ne!(
                    first,
                    expected.as_bytes(),
                    "refused the right signature: {e}"
                );
            }
            assert!(!e.to_string().is_empty());
        }
    }
}

/// Runs target (e) on one input.
pub fn check(input: &[u8]) {
    let [selector, message @ ..] = input else {
        return;
    };
    if selector & 1 == 0 {
        check_server_first(message);
    } else {
        let hash = if selector & 2 == 0 {
            ScramHash::Sha256
        } else {
            ScramHash::Sha512
        };
        check_server_final(hash, message);
    }
}

/// Server messages that pass, and ones that broke a parser once or sit at a rule's edge.
pub(crate) fn seeds() -> Vec<Vec<u8>> {
    let first = |m: &[u8]| [&[0u8][..], m].concat();
    let mut out: Vec<Vec<u8>> = [
        &b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
            [..],
        b"r=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=65536,ext=1",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=,i=65537",
        // The panic of issue 20 item 9: `r` then a two-byte character.
        b"r\xc3\xa9=rOprNGfwEbeRWgbNEkqOx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        b"m=ext,r=rOprNGfwEbeRWgbNEkqOx,s=AA==,i=4096",
        b"r=rOprNGfwEbeRWgbNEkqO\xff,s=AA==,i=4096",
        b"r=rOprNGfwEbeRWgbNEkqO\xc3\xa9,s=AA==,i=+4096",
        b"r=rOprNGfwEbeRWgbNEkqOx,s=AB==,i=4096",
        b"",
    ]
    .iter()
    .map(|m| first(m))
    .collect();
    for hash in [ScramHash::Sha256, ScramHash::Sha512] {
        let selector = if hash == ScramHash::Sha256 { 1u8 } else { 3 };
        let signature = base64_encode(&hash.hmac(SERVER_KEY, &[AUTH_MESSAGE.as_bytes()]));
        for message in [
            format!("v={signature}"),
            format!("v={signature},ext=1"),
            format!("v={}", &signature[..signature.len() - 4]),
            "e=invalid-proof".to_string(),
            format!("e={}\n[ERROR] forged line\u{1b}[2J", "x".repeat(600)),
            "v=not base64".to_string(),
            "x=whatever".to_string(),
        ] {
            out.push([&[selector][..], message.as_bytes()].concat());
        }
    }
    out
}
