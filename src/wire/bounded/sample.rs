//! Populated response bodies written from the shape tables: the tests check them against
//! `kafka-protocol`'s codec, and the response fuzz target starts from them.
//!
//! Every array gets two elements, every string and bytes field three bytes, every tagged field
//! of the version is present, and numbers differ from their defaults (so a codec that skips a
//! default-valued tagged field still writes it back). Optionally the n-th array instead claims
//! a huge count and the body ends there (padded), which is what a bomb looks like.

use bytes::{BufMut, Bytes, BytesMut};

use super::{Field, Kind, Schema};

/// Writes bodies from a shape table.
pub(crate) struct Gen {
    out: BytesMut,
    version: i16,
    flexible: bool,
    /// Emit a huge count at this array (0-based, in write order), then stop writing.
    huge_at: Option<usize>,
    pub(crate) arrays: usize,
    stopped: bool,
    /// The name of the array that got the huge count.
    pub(crate) huge_name: Option<&'static str>,
    counter: u8,
}

/// The count a bombed array claims.
const HUGE: u32 = 0x7fff_fff0;

impl Gen {
    fn new(schema: &Schema, version: i16, huge_at: Option<usize>) -> Gen {
        Gen {
            out: BytesMut::new(),
            version,
            flexible: version >= schema.flexible_from,
            huge_at,
            arrays: 0,
            stopped: false,
            huge_name: None,
            counter: 0,
        }
    }

    pub(crate) fn body(schema: &Schema, version: i16, huge_at: Option<usize>) -> (Bytes, Gen) {
        let mut g = Gen::new(schema, version, huge_at);
        g.fields(schema.fields);
        if g.stopped {
            g.out.put_bytes(0, 256);
        }
        let out = std::mem::take(&mut g.out).freeze();
        (out, g)
    }

    fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.out.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.out.put_u8(v as u8);
    }

    fn length(&mut self, n: u32, classic_width: usize) {
        if self.flexible {
            self.uvarint(n + 1);
        } else if classic_width == 2 {
            self.out.put_i16(n as i16);
        } else {
            self.out.put_i32(n as i32);
        }
    }

    fn next(&mut self) -> u8 {
        self.counter = self.counter.wrapping_add(1) % 100 + 1;
        self.counter
    }

    fn fields(&mut self, fields: &'static [Field]) {
        for field in fields {
            if field.tag.is_none() && field.present(self.version) {
                if field.marker(self.version) && !self.stopped {
                    self.out.put_i8(1);
                }
                self.value(field.name, &field.kind);
            }
        }
        if !self.flexible || self.stopped {
            return;
        }
        let mut tagged: Vec<&Field> = fields
            .iter()
            .filter(|f| f.tag.is_some() && f.present(self.version))
            .collect();
        tagged.sort_by_key(|f| f.tag);
        self.uvarint(tagged.len() as u32);
        for field in tagged {
            if self.stopped {
                return;
            }
            let outer = std::mem::take(&mut self.out);
            self.value(field.name, &field.kind);
            let inner = std::mem::replace(&mut self.out, outer);
            self.uvarint(field.tag.unwrap_or_default());
            self.uvarint(inner.len() as u32);
            self.out.extend_from_slice(&inner);
        }
    }

    fn value(&mut self, name: &'static str, kind: &'static Kind) {
        if self.stopped {
            return;
        }
        let n = self.next();
        match kind {
            Kind::I8 => self.out.put_i8(n as i8),
            Kind::Bool => self.out.put_u8(1),
            Kind::I16 => self.out.put_i16(i16::from(n) + 1000),
            Kind::I32 => self.out.put_i32(i32::from(n) + 100_000),
            Kind::I64 => self.out.put_i64(i64::from(n) + 10_000_000_000),
            Kind::Uuid => self.out.put_slice(&[n; 16]),
            Kind::Str => {
                self.length(3, 2);
                self.out.put_slice(b"abc");
            }
            Kind::Bytes | Kind::Records => {
                self.length(3, 4);
                self.out.put_slice(&[n, 2, 3]);
            }
            Kind::Array(element) => {
                let index = self.arrays;
                self.arrays += 1;
                if self.huge_at == Some(index) {
                    self.length(HUGE, 4);
                    self.huge_name = Some(name);
                    self.stopped = true;
                    return;
                }
                // Bombing: one element per enclosing array, so the bomb is the first claim
                // that cannot fit (padding follows it).
                let count = if self.huge_at.is_some() { 1 } else { 2 };
                self.length(count, 4);
                for _ in 0..count {
                    self.value(name, element);
                }
            }
            Kind::Struct(fields) => self.fields(fields),
        }
    }
}
