//! A password that is never printed and does not outlive its holder in memory.
//!
//! Why a type of its own: a password travels through the configuration (builder, validated
//! config, wire settings, one copy per connection) and every one of those types derives `Debug`
//! for logs and error reports. Holding it in a [`Secret`] makes every such `Debug` print
//! `[redacted]` without a hand-written impl per type, and makes the bytes be overwritten when the
//! last holder drops it, so a later heap dump or a reused allocation does not show it.
//!
//! Std only: the wiping is a volatile write followed by a compiler fence, which is what the
//! `zeroize` crate does for byte slices; one function does not justify a dependency.

use std::fmt;
use std::sync::atomic::{compiler_fence, Ordering};

/// Overwrites `bytes` with zeros in a way the optimiser may not remove as a dead store.
///
/// Why volatile: a plain `fill(0)` right before a deallocation is a store nobody reads, which the
/// compiler is allowed to delete.
pub(crate) fn wipe(bytes: &mut [u8]) {
    for b in bytes.iter_mut() {
        // SAFETY: `b` is a valid, aligned, exclusive reference to one byte.
        unsafe { std::ptr::write_volatile(b, 0) };
    }
    compiler_fence(Ordering::SeqCst);
}

/// Wipes a buffer's bytes and its spare capacity too: bytes a `truncate` or `clear` gave up
/// are still in the allocation and would be freed unwiped.
pub(crate) fn wipe_vec(bytes: &mut Vec<u8>) {
    wipe(bytes);
    for b in bytes.spare_capacity_mut() {
        // SAFETY: `b` is a valid, aligned, exclusive reference into the allocation; writing a
        // `MaybeUninit` needs no initialised value.
        unsafe { std::ptr::write_volatile(b, std::mem::MaybeUninit::new(0)) };
    }
    compiler_fence(Ordering::SeqCst);
}

/// Wipes a string and leaves it empty (zeros are valid UTF-8, but no reader should see them).
pub(crate) fn wipe_string(text: &mut String) {
    let mut bytes = std::mem::take(text).into_bytes();
    wipe_vec(&mut bytes);
}

/// A `String` that is wiped when dropped: the parsers' working copies of text that may hold a
/// secret (a `.properties` file, a JAAS line's values), so an early return or a refused line
/// does not free them unwiped. Take the text out with `std::mem::take(&mut w.0)` to keep it.
#[derive(Default)]
pub(crate) struct WipedString(pub(crate) String);

impl Drop for WipedString {
    fn drop(&mut self) {
        wipe_string(&mut self.0);
    }
}

/// A secret string (a SASL password): `Debug` prints `[redacted]`, there is no `Display`, and
/// the bytes are wiped when it is dropped.
///
/// Why `Clone` anyway: configurations are cloned (one per thread that connects); each clone is
/// wiped on its own drop. Equality is compared without an early exit, so comparing
/// configurations does not leak the secret's prefix through timing.
#[derive(Clone, Default)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Takes the secret's text. A `String` is moved in without a copy; a `&str` is copied once,
    /// into an allocation of its exact length, and the `&str` itself stays the caller's to
    /// wipe (the library cannot reach it).
    pub fn new(text: impl Into<String>) -> Secret {
        Secret(text.into().into_bytes())
    }

    /// The secret's text, for the one place that must send it. Deliberately a method with a
    /// telling name rather than `Deref` or `Display`, so that exposing it is always visible in
    /// the code.
    pub fn expose(&self) -> &str {
        // Built only from a `String` in `new`, so always UTF-8; the fallback is unreachable.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// Whether the secret is empty (an empty password is refused by the configuration).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for Secret {
    fn from(text: &str) -> Secret {
        Secret::new(text)
    }
}

impl From<String> for Secret {
    fn from(text: String) -> Secret {
        Secret::new(text)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        constant_time_eq(&self.0, &other.0)
    }
}

impl Eq for Secret {}

impl Drop for Secret {
    fn drop(&mut self) {
        wipe_vec(&mut self.0);
    }
}

/// Compares without an early exit on the first difference (the length is not hidden).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Bytes that are wiped when dropped: the owner of a `Bytes` handed to `kafka-protocol` for a
/// SASL token, so the token does not stay in freed memory once the request is written.
pub(crate) struct WipedBytes(pub(crate) Vec<u8>);

impl AsRef<[u8]> for WipedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for WipedBytes {
    fn drop(&mut self) {
        wipe_vec(&mut self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_redacted() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some([redacted])");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn equality_compares_whole_values() {
        assert_eq!(Secret::new("abc"), Secret::new("abc"));
        assert_ne!(Secret::new("abc"), Secret::new("abd"));
        assert_ne!(Secret::new("abc"), Secret::new("abcd"));
    }

    #[test]
    fn wipe_vec_zeroes_the_spare_capacity_too() {
        let mut v = b"secret-and-more".to_vec();
        v.truncate(6);
        wipe_vec(&mut v);
        assert_eq!(v, vec![0; 6]);
        // SAFETY: the first 15 bytes were initialised by the literal and wiped since.
        unsafe { v.set_len(15) };
        assert_eq!(v, vec![0; 15]);
        let mut s = String::from("hunter2");
        wipe_string(&mut s);
        assert!(s.is_empty());
    }

    #[test]
    fn wipe_zeroes_every_byte() {
        let mut v = b"secret".to_vec();
        wipe(&mut v);
        assert_eq!(v, vec![0; 6]);
    }
}
