//! Bounded decoding: every response is checked against its shape before `kafka-protocol` sees
//! it, so that no count or length from the network can size an allocation beyond the bytes that
//! back it.
//!
//! Why: `kafka-protocol` 0.18 pre-allocates each array with the element count it reads
//! (`Vec::with_capacity(n)`), so five bytes claiming four billion elements of a 100-byte struct
//! ask for hundreds of GiB, and a failed allocation aborts the process (it is not a panic that
//! could be caught). The frame size cap does not help: the claim costs five bytes.
//!
//! How: a walker reads the body once, field by field, using the shape tables in `shapes` (the
//! field kinds and version ranges of each response, flexible versions and tagged fields
//! included). For every array it checks the claimed count against the bytes left, at the
//! element's minimum encoded size, and then walks each element; for every string and bytes
//! field it checks the length against the bytes left; for every tagged field it checks the size
//! and walks a known tag's value inside exactly that size. The walk itself allocates nothing
//! (the field path for an error message is built only on failure) and touches each byte a
//! bounded number of times, because every element consumes at least one byte. Once the walk
//! succeeds, every array `kafka-protocol` allocates has at most as many elements as bytes
//! remained, so the decoded response costs at most a constant times the frame.
//!
//! The walker checks lengths, not meaning: a null is accepted anywhere (it allocates nothing;
//! whether it is allowed is the codec's concern), UTF-8 is left to the codec, and trailing
//! bytes are left alone.
//!
//! Files: this one holds the walker; `bounded/shapes.rs` the shape tables (the transaction
//! responses' in `bounded/txn_shapes.rs`); `bounded/sample.rs`
//! populated bodies written from the tables (for the tests and the response fuzz target); and
//! `bounded/tests.rs` the tables checked against `kafka-protocol`'s codec.

mod sample;
mod shapes;
mod txn_shapes;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::Decodable;

use super::error::{api_name, Result, WireError};
use super::{MAX_METADATA_BROKERS, MAX_METADATA_TOPICS};

/// "Up to the newest version" in a field's version range.
const MAX: i16 = i16::MAX;

/// The kind of one field, as far as bounding needs it.
#[derive(Debug)]
enum Kind {
    I8,
    I16,
    I32,
    I64,
    Bool,
    Uuid,
    /// A string: i16 length (compact: unsigned varint length + 1).
    Str,
    /// Bytes: i32 length (compact: unsigned varint length + 1).
    Bytes,
    /// A record set, encoded like bytes.
    Records,
    /// An array: i32 count (compact: unsigned varint count + 1) of the element kind.
    Array(&'static Kind),
    /// A struct: its fields in order, then (flexible versions) its tagged fields.
    Struct(&'static [Field]),
}

/// One field of a struct.
#[derive(Debug)]
struct Field {
    name: &'static str,
    kind: Kind,
    /// First and last version the field exists in.
    lo: i16,
    hi: i16,
    /// `Some(tag)` for a tagged field, which sits in the tagged section instead of in order.
    tag: Option<u32>,
    /// For a struct field: the versions in which it is nullable, where a marker byte (-1 for
    /// null) precedes it.
    nullable: Option<(i16, i16)>,
}

/// A field present in versions `lo..=hi`.
const fn f(name: &'static str, kind: Kind, lo: i16, hi: i16) -> Field {
    Field {
        name,
        kind,
        lo,
        hi,
        tag: None,
        nullable: None,
    }
}

impl Field {
    /// The same field, carried as tagged field `tag`.
    const fn tagged(self, tag: u32) -> Field {
        Field {
            tag: Some(tag),
            ..self
        }
    }

    /// The same struct field, nullable in versions `lo..=hi`.
    const fn nullable_struct(self, lo: i16, hi: i16) -> Field {
        Field {
            nullable: Some((lo, hi)),
            ..self
        }
    }

    fn marker(&self, version: i16) -> bool {
        self.nullable
            .is_some_and(|(lo, hi)| lo <= version && version <= hi)
    }

    fn present(&self, version: i16) -> bool {
        self.lo <= version && version <= self.hi
    }
}

/// The shape of one response message.
#[derive(Debug)]
struct Schema {
    api: ApiKey,
    /// The versions the table describes.
    versions: (i16, i16),
    /// The first flexible version (compact lengths, tagged fields).
    flexible_from: i16,
    fields: &'static [Field],
}

/// Caps on top-level arrays, beyond what the bytes allow: lists whose length alone says the
/// response is broken or hostile (see the constants' docs).
const CAPS: &[(ApiKey, &str, usize)] = &[
    (ApiKey::Metadata, "Brokers", MAX_METADATA_BROKERS),
    (ApiKey::Metadata, "Topics", MAX_METADATA_TOPICS),
];

fn schema(api: ApiKey) -> Option<&'static Schema> {
    shapes::ALL.iter().copied().find(|s| s.api == api)
}

/// The versions of `api`'s response this module can check, or `None` for an API it has no
/// shape for (every response the client decodes has one; tests enforce that).
pub fn checked_versions(api: ApiKey) -> Option<(i16, i16)> {
    schema(api).map(|s| s.versions)
}

/// Checks that every length in the `api` v`version` response `body` (after the response
/// header) fits the bytes that follow it; the error names the field.
///
/// Public so that fuzzing and the hostile-broker tests can drive it directly; the client calls
/// it through [`decode`] on every response.
pub(crate) fn check(api: ApiKey, version: i16, body: &[u8]) -> Result<()> {
    let Some(schema) = schema(api) else {
        return Err(malformed(
            api,
            version,
            String::new(),
            "no response shape for this API",
        ));
    };
    if version < schema.versions.0 || version > schema.versions.1 {
        return Err(malformed(
            api,
            version,
            String::new(),
            format!(
                "no response shape for this version (known: {}..={})",
                schema.versions.0, schema.versions.1
            ),
        ));
    }
    let mut walker = Walker {
        buf: body,
        version,
        flexible: version >= schema.flexible_from,
        api,
        depth: 0,
        cap: None,
    };
    walker.fields(schema.fields).map_err(|fail| {
        let field = fail
            .path
            .iter()
            .rev()
            .map(Step::to_string)
            .collect::<String>();
        malformed(api, version, field, fail.reason)
    })
}

/// Decodes an `api` v`version` response body with `kafka-protocol` after `check` has bounded
/// it: the one way responses are decoded in this crate.
pub fn decode<T: Decodable>(api: ApiKey, version: i16, body: &mut Bytes) -> Result<T> {
    check(api, version, body)?;
    T::decode(body, version).map_err(|e| {
        WireError::Protocol(format!(
            "cannot decode {} v{version} response: {e:#}",
            api_name(api as i16)
        ))
    })
}

/// Adds the broker's address to a decode failure (the walker does not know where the bytes came
/// from; the connection does).
pub(crate) fn with_broker(e: WireError, addr: &str) -> WireError {
    match e {
        WireError::Protocol(m) => WireError::Protocol(format!("{m} (from {addr})")),
        WireError::Malformed {
            api,
            version,
            field,
            reason,
        } => WireError::Malformed {
            api,
            version,
            field,
            reason: format!("{reason} (from {addr})"),
        },
        other => other,
    }
}

fn malformed(api: ApiKey, version: i16, field: String, reason: impl Into<String>) -> WireError {
    WireError::Malformed {
        api: api as i16,
        version,
        field: if field.is_empty() {
            "(top level)".to_string()
        } else {
            field.trim_start_matches('.').to_string()
        },
        reason: reason.into(),
    }
}

/// One step of a field path, collected innermost first while a failure unwinds.
#[derive(Debug)]
enum Step {
    Field(&'static str),
    Index(usize),
    Tag(u32),
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Field(name) => write!(f, ".{name}"),
            Step::Index(i) => write!(f, "[{i}]"),
            Step::Tag(t) => write!(f, ".<tag {t}>"),
        }
    }
}

/// Why and where a walk failed; the path is filled in on the way out, so a successful walk
/// allocates nothing.
#[derive(Debug)]
struct Fail {
    reason: String,
    path: Vec<Step>,
}

impl Fail {
    fn new(reason: String) -> Fail {
        Fail {
            reason,
            path: Vec::new(),
        }
    }

    fn at(mut self, step: Step) -> Fail {
        self.path.push(step);
        self
    }
}

type Walk<T = ()> = std::result::Result<T, Fail>;

struct Walker<'a> {
    buf: &'a [u8],
    version: i16,
    flexible: bool,
    api: ApiKey,
    /// Struct nesting depth (0: the message's own fields), for [`CAPS`].
    depth: usize,
    /// The cap for the array about to be read, if [`CAPS`] has one.
    cap: Option<usize>,
}

impl<'a> Walker<'a> {
    fn take(&mut self, n: usize, what: &str) -> Walk<&'a [u8]> {
        if n > self.buf.len() {
            return Err(Fail::new(format!(
                "{what} needs {n} bytes but {} remain",
                self.buf.len()
            )));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn fixed<const N: usize>(&mut self) -> Walk<[u8; N]> {
        let bytes = self.take(N, "a fixed-width field")?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn uvarint(&mut self) -> Walk<u32> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let [b] = self.fixed::<1>()?;
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Fail::new("unsigned varint longer than 5 bytes".into()))
    }

    /// A length or count prefix: `None` for null, else the length.
    fn length(&mut self, classic_width: usize) -> Walk<Option<usize>> {
        if self.flexible {
            let n = self.uvarint()?;
            return Ok(n.checked_sub(1).map(|n| n as usize));
        }
        let n = if classic_width == 2 {
            i64::from(i16::from_be_bytes(self.fixed::<2>()?))
        } else {
            i64::from(i32::from_be_bytes(self.fixed::<4>()?))
        };
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(Fail::new(format!("negative length {n}"))),
            n => Ok(Some(n as usize)),
        }
    }

    fn fields(&mut self, fields: &'static [Field]) -> Walk {
        for field in fields {
            if field.tag.is_some() || !field.present(self.version) {
                continue;
            }
            if self.depth == 0 && matches!(field.kind, Kind::Array(_)) {
                self.cap = CAPS
                    .iter()
                    .find(|(api, name, _)| *api == self.api && *name == field.name)
                    .map(|c| c.2);
            }
            self.depth += 1;
            let walked = self.field(field);
            self.depth -= 1;
            walked.map_err(|e| e.at(Step::Field(field.name)))?;
        }
        if self.flexible {
            self.tagged(fields)?;
        }
        Ok(())
    }

    /// The tagged section: a count, then (tag, size, value) per field. A tag this struct
    /// defines (in any version: stricter than the codec never hurts) is walked inside exactly
    /// its size; an unknown one is skipped after its size is checked.
    fn tagged(&mut self, fields: &'static [Field]) -> Walk {
        let count = self.uvarint()?;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            let inner = self
                .take(size, "a tagged field")
                .map_err(|e| e.at(Step::Tag(tag)))?;
            let Some(field) = fields.iter().find(|f| f.tag == Some(tag)) else {
                continue;
            };
            let mut sub = Walker {
                buf: inner,
                version: self.version,
                flexible: self.flexible,
                api: self.api,
                depth: self.depth + 1,
                cap: None,
            };
            sub.field(field)
                .map_err(|e| e.at(Step::Field(field.name)))?;
            if !sub.buf.is_empty() {
                return Err(Fail::new(format!(
                    "tagged field is {size} bytes but its value ends {} bytes early",
                    sub.buf.len()
                ))
                .at(Step::Field(field.name)));
            }
        }
        Ok(())
    }

    /// One field: a nullable struct's marker byte (1: present; the codec reads anything else as
    /// null), then its value.
    fn field(&mut self, field: &'static Field) -> Walk {
        if field.marker(self.version) {
            let [marker] = self.fixed::<1>()?;
            if marker != 1 {
                return Ok(());
            }
        }
        self.value(&field.kind)
    }

    fn value(&mut self, kind: &'static Kind) -> Walk {
        match kind {
            Kind::I8 | Kind::Bool => self.take(1, "a 1-byte field").map(drop),
            Kind::I16 => self.take(2, "a 2-byte field").map(drop),
            Kind::I32 => self.take(4, "a 4-byte field").map(drop),
            Kind::I64 => self.take(8, "an 8-byte field").map(drop),
            Kind::Uuid => self.take(16, "a UUID").map(drop),
            Kind::Str => match self.length(2)? {
                Some(n) => self.take(n, "a string").map(drop),
                None => Ok(()),
            },
            Kind::Bytes | Kind::Records => match self.length(4)? {
                Some(n) => self.take(n, "a bytes field").map(drop),
                None => Ok(()),
            },
            Kind::Array(element) => {
                let Some(count) = self.length(4)? else {
                    return Ok(());
                };
                if let Some(cap) = self.cap.take().filter(|&cap| count > cap) {
                    return Err(Fail::new(format!(
                        "array claims {count} elements, more than the client accepts ({cap})"
                    )));
                }
                let each = self.min_size(element).max(1);
                if count > self.buf.len() / each {
                    return Err(Fail::new(format!(
                        "array claims {count} elements of at least {each} bytes but {} bytes remain",
                        self.buf.len()
                    )));
                }
                for i in 0..count {
                    self.value(element).map_err(|e| e.at(Step::Index(i)))?;
                }
                Ok(())
            }
            Kind::Struct(fields) => self.fields(fields),
        }
    }

    /// The fewest bytes one value of `kind` takes at this version (nulls counted as their
    /// prefix, empty arrays as their count).
    fn min_size(&self, kind: &Kind) -> usize {
        let prefix = |classic: usize| if self.flexible { 1 } else { classic };
        match kind {
            Kind::I8 | Kind::Bool => 1,
            Kind::I16 => 2,
            Kind::I32 => 4,
            Kind::I64 => 8,
            Kind::Uuid => 16,
            Kind::Str => prefix(2),
            Kind::Bytes | Kind::Records | Kind::Array(_) => prefix(4),
            Kind::Struct(fields) => {
                let own: usize = fields
                    .iter()
                    .filter(|f| f.tag.is_none() && f.present(self.version))
                    .map(|f| {
                        if f.marker(self.version) {
                            1
                        } else {
                            self.min_size(&f.kind)
                        }
                    })
                    .sum();
                own + usize::from(self.flexible)
            }
        }
    }
}

/// A populated body of `api` at `version` (see `sample`), for fuzzing seeds; `None` for a
/// version without a shape.
#[doc(hidden)]
pub(crate) fn sample_body(api: ApiKey, version: i16) -> Option<Vec<u8>> {
    let schema = schema(api)?;
    (schema.versions.0 <= version && version <= schema.versions.1)
        .then(|| sample::Gen::body(schema, version, None).0.to_vec())
}

#[cfg(test)]
mod tests;
