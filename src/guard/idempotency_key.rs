//! The idempotency key as the consumer's guard remembers it: bytes that name one event (an order
//! id, an event id), held without a heap allocation when they are short.
//!
//! The guard remembers tens of thousands of keys and admits one per record. Held as a `Vec<u8>`,
//! every key cost an allocation when it was derived and a free when it was replaced, which
//! measured more than the guard's own work on a key; order and event ids are nearly always
//! short (a UUID is 16 bytes, or 36 as text), so up to [`IdempotencyKey::INLINE`] bytes are kept
//! in the key itself and only longer ones go to the heap.

use std::fmt;
use std::hash::{Hash, Hasher};

/// An idempotency key: equal keys are the same event, whichever partition or offset carries
/// them. Build one from the bytes or text that identify the event (`IdempotencyKey::from(id)`);
/// short keys (up to [`INLINE`](Self::INLINE) bytes) never allocate.
#[derive(Clone)]
pub struct IdempotencyKey(Repr);

#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        bytes: [u8; IdempotencyKey::INLINE],
    },
    Heap(Box<[u8]>),
}

impl IdempotencyKey {
    /// The longest key held without a heap allocation: 30 bytes make the key 32 bytes in all.
    pub const INLINE: usize = 30;

    /// The key made of these bytes.
    pub fn new(bytes: &[u8]) -> Self {
        match u8::try_from(bytes.len()) {
            Ok(len) if bytes.len() <= Self::INLINE => {
                let mut inline = [0u8; Self::INLINE];
                inline[..bytes.len()].copy_from_slice(bytes);
                IdempotencyKey(Repr::Inline { len, bytes: inline })
            }
            _ => IdempotencyKey(Repr::Heap(bytes.into())),
        }
    }

    /// The key's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Heap(bytes) => bytes,
        }
    }
}

impl PartialEq for IdempotencyKey {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for IdempotencyKey {}

impl Hash for IdempotencyKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Where the bytes live is not part of the key.
        state.write(self.as_bytes());
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey(\"{}\")", self.as_bytes().escape_ascii())
    }
}

impl From<&[u8]> for IdempotencyKey {
    fn from(bytes: &[u8]) -> Self {
        IdempotencyKey::new(bytes)
    }
}

impl<const N: usize> From<[u8; N]> for IdempotencyKey {
    fn from(bytes: [u8; N]) -> Self {
        IdempotencyKey::new(&bytes)
    }
}

impl From<&str> for IdempotencyKey {
    fn from(text: &str) -> Self {
        IdempotencyKey::new(text.as_bytes())
    }
}

impl From<Vec<u8>> for IdempotencyKey {
    /// Takes over the allocation of a long key; a short one is copied inline.
    fn from(bytes: Vec<u8>) -> Self {
        if bytes.len() <= Self::INLINE {
            IdempotencyKey::new(&bytes)
        } else {
            IdempotencyKey(Repr::Heap(bytes.into_boxed_slice()))
        }
    }
}

impl From<String> for IdempotencyKey {
    fn from(text: String) -> Self {
        IdempotencyKey::from(text.into_bytes())
    }
}

impl From<u64> for IdempotencyKey {
    /// A numeric id, as its 8 big-endian bytes.
    fn from(id: u64) -> Self {
        IdempotencyKey::new(&id.to_be_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::IdempotencyKey;
    use std::collections::HashSet;

    #[test]
    fn equal_bytes_are_equal_keys_wherever_they_are_held() {
        let short = "order-42";
        let long = "order-".repeat(10);
        for text in [short, long.as_str(), ""] {
            let from_str = IdempotencyKey::from(text);
            let from_vec = IdempotencyKey::from(text.as_bytes().to_vec());
            let from_string = IdempotencyKey::from(text.to_string());
            assert_eq!(from_str, from_vec);
            assert_eq!(from_vec, from_string);
            assert_eq!(from_str.as_bytes(), text.as_bytes());
            let set: HashSet<_> = [from_str, from_vec, from_string].into_iter().collect();
            assert_eq!(set.len(), 1, "one key, hashed alike");
        }
        assert_ne!(IdempotencyKey::from("a"), IdempotencyKey::from("a\0"));
        assert_eq!(IdempotencyKey::from(7u64).as_bytes(), &7u64.to_be_bytes());
    }

    #[test]
    fn keys_up_to_the_inline_length_stay_in_the_key_and_longer_ones_survive_whole() {
        let edge = vec![b'x'; IdempotencyKey::INLINE];
        let over = vec![b'y'; IdempotencyKey::INLINE + 1];
        assert!(matches!(
            IdempotencyKey::new(&edge).0,
            super::Repr::Inline { .. }
        ));
        assert!(matches!(IdempotencyKey::new(&over).0, super::Repr::Heap(_)));
        assert_eq!(IdempotencyKey::new(&over).as_bytes(), &over[..]);
        assert_eq!(std::mem::size_of::<IdempotencyKey>(), 32);
        assert_eq!(
            format!("{:?}", IdempotencyKey::from("id\n1")),
            "IdempotencyKey(\"id\\n1\")"
        );
    }
}
