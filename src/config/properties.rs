//! Java's `.properties` syntax, so a file written for a Java or librdkafka consumer can be read.

use std::error::Error;
use std::fmt;

use crate::wire::secret::WipedString;

/// A malformed line in `.properties` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropertiesSyntaxError {
    /// The 1-based line where the logical line starts.
    pub line: usize,
    /// What is wrong: the rule broken and, for a value, its key; never the characters of the
    /// value (it may be a password), nor of a malformed key.
    pub message: String,
}

impl fmt::Display for PropertiesSyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "properties line {}: {}", self.line, self.message)
    }
}

impl Error for PropertiesSyntaxError {}

/// Parses Java `.properties` text into `(key, value)` pairs in file order.
///
/// Java's syntax, so an existing file can be reused: `key=value`, `key: value` or `key value`;
/// lines starting with `#` or `!` are comments; blank lines are skipped; a line ending in an odd
/// number of backslashes continues on the next line (whose leading whitespace is dropped);
/// escapes `\t`, `\n`, `\r`, `\f`, `\uXXXX` (UTF-16, so a surrogate pair such as
/// `\uD83D\uDE00` is one character and a lone surrogate is refused), and `\` before any other
/// character (so `\=` and `\:` in keys). An error names the line, the rule and, for a value, its
/// key, never the value's characters. One deliberate difference: values are also trimmed at the
/// end, since no setting has meaningful trailing whitespace and an invisible trailing space
/// should not make a number unparsable.
///
/// The parser's own working copies are wiped before they are freed; the pairs it returns are
/// the caller's (wipe them with care if they hold a password, as
/// [`ConsumerConfig::from_properties_file`](super::ConsumerConfig::from_properties_file) does).
pub fn parse_properties(text: &str) -> Result<Vec<(String, String)>, PropertiesSyntaxError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let start = i + 1;
        let first = lines[i].trim_start_matches(is_properties_space);
        i += 1;
        if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
            continue;
        }
        // The continuation lines first, so that joining them copies once, into an exact
        // allocation (a growing buffer would free partial copies of a secret unwiped).
        let mut segments = Vec::new();
        let mut current = first;
        loop {
            let trailing = current.chars().rev().take_while(|c| *c == '\\').count();
            if trailing % 2 == 0 {
                segments.push(current);
                break;
            }
            segments.push(&current[..current.len() - 1]);
            match lines.get(i) {
                Some(next) => {
                    current = next.trim_start_matches(is_properties_space);
                    i += 1;
                }
                None => break,
            }
        }
        let joined;
        let logical: &str = match segments[..] {
            [one] => one,
            _ => {
                let mut text = WipedString(String::with_capacity(
                    segments.iter().map(|s| s.len()).sum(),
                ));
                segments.iter().for_each(|s| text.0.push_str(s));
                joined = text;
                &joined.0
            }
        };
        let (key, value) = split_key_value(logical);
        // The key is not quoted when it is the malformed part: it may be a value that lost its
        // separator.
        let key = unescape(key).map_err(|rule| PropertiesSyntaxError {
            line: start,
            message: format!("in the key: {rule}"),
        })?;
        let mut value = unescape(value).map_err(|rule| PropertiesSyntaxError {
            line: start,
            message: format!("in the value of `{key}` (not shown): {rule}"),
        })?;
        // Trimmed in place, not copied.
        value.truncate(value.trim_end().len());
        out.push((key, value));
    }
    Ok(out)
}

fn is_properties_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\u{c}')
}

/// Splits a logical line at the first unescaped `=`, `:` or whitespace; whitespace around the
/// separator is dropped.
fn split_key_value(line: &str) -> (&str, &str) {
    let mut escaped = false;
    for (idx, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if c == '\\' {
            escaped = true;
        } else if c == '=' || c == ':' || is_properties_space(c) {
            let key = &line[..idx];
            let mut rest = line[idx..].trim_start_matches(is_properties_space);
            if c == '=' || c == ':' {
                rest = &rest[1..];
            } else if let Some(r) = rest.strip_prefix(['=', ':']) {
                rest = r;
            }
            return (key, rest.trim_start_matches(is_properties_space));
        }
    }
    (line, "")
}

/// Why an escape is malformed. Fixed texts: an error must never quote the characters of the
/// escape or around it, since the value may be a password.
pub(crate) const BAD_HEX: &str = "a \\u escape needs four hex digits (\\uXXXX)";
pub(crate) const LONE_HIGH: &str =
    "a \\u escape of a high surrogate (D800-DBFF) must be followed by a \\u \
                         escape of a low surrogate (DC00-DFFF), as in \\uD83D\\uDE00";
pub(crate) const LONE_LOW: &str =
    "a \\u escape of a low surrogate (DC00-DFFF) must follow one of a high surrogate (D800-DBFF)";

/// The four hex digits of a `\uXXXX` escape (after the `u`), strictly: no sign, no fewer.
fn hex4(chars: &mut std::str::Chars<'_>) -> Result<u32, &'static str> {
    let mut n = 0;
    for _ in 0..4 {
        let digit = chars.next().and_then(|c| c.to_digit(16)).ok_or(BAD_HEX)?;
        n = n * 16 + digit;
    }
    Ok(n)
}

/// Resolves the escapes of a key or value. `\uXXXX` escapes are UTF-16 code units, as in Java:
/// a high surrogate followed by a `\u` low surrogate is one character; a lone surrogate cannot
/// be a Rust character and is refused.
fn unescape(s: &str) -> Result<String, &'static str> {
    // Escapes only shrink the text, so this never reallocates (no stray copy of a secret);
    // wiped if an escape is refused.
    let mut out = WipedString(String::with_capacity(s.len()));
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.0.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.0.push('\t'),
            Some('n') => out.0.push('\n'),
            Some('r') => out.0.push('\r'),
            Some('f') => out.0.push('\u{c}'),
            Some('u') => {
                let unit = hex4(&mut chars)?;
                let code = match unit {
                    0xD800..=0xDBFF => {
                        let mut after = chars.clone();
                        let low = match (after.next(), after.next()) {
                            (Some('\\'), Some('u')) => hex4(&mut after)?,
                            _ => return Err(LONE_HIGH),
                        };
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err(LONE_HIGH);
                        }
                        chars = after;
                        0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                    }
                    0xDC00..=0xDFFF => return Err(LONE_LOW),
                    unit => unit,
                };
                // Every value outside the surrogates is a character.
                out.0.push(char::from_u32(code).ok_or(BAD_HEX)?);
            }
            Some(other) => out.0.push(other),
            None => {}
        }
    }
    Ok(std::mem::take(&mut out.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_syntax_follows_java() {
        let text = "# a comment\n\
                    ! another\n\
                    \n\
                    \x20  bootstrap.servers = a:1,\\\n\
                    \x20      b:2\n\
                    group.id:orders  \n\
                    client.id   spaced\\u0041\n\
                    key\\=with\\:escapes = v\n\
                    empty\n\
                    trailing.backslash = x\\\\\n";
        let parsed = parse_properties(text).unwrap();
        assert_eq!(
            parsed,
            vec![
                ("bootstrap.servers".to_string(), "a:1,b:2".to_string()),
                ("group.id".to_string(), "orders".to_string()),
                ("client.id".to_string(), "spacedA".to_string()),
                ("key=with:escapes".to_string(), "v".to_string()),
                ("empty".to_string(), String::new()),
                ("trailing.backslash".to_string(), "x\\".to_string()),
            ]
        );
        let err = parse_properties("a=1\nb=\\u12x4\n").unwrap_err();
        assert_eq!(err.line, 2);
    }

    #[test]
    fn a_malformed_unicode_escape_error_names_the_key_and_rule_not_the_value() {
        for text in [
            "sasl.password=ab\\uZq9xSecret\n",
            "sasl.password=ab\\uZq9\n",
            "sasl.password=Zq9x\\u+Zq9\n",
        ] {
            let err = parse_properties(text).unwrap_err();
            let shown = format!("{err} {err:?}");
            assert!(!shown.contains("Zq9"), "{shown}");
            assert!(!shown.contains("Secret"), "{shown}");
            assert!(shown.contains("sasl.password"), "{shown}");
            assert!(shown.contains("four hex digits"), "{shown}");
            assert_eq!(err.line, 1);
        }
        // A broken key is not quoted either (it may be a value that lost its separator).
        let err = parse_properties("x\\uZq9=1\n").unwrap_err();
        assert!(!err.to_string().contains("Zq9"), "{err}");
    }

    #[test]
    fn surrogate_pairs_decode_as_java_does() {
        let parsed = parse_properties("k=a\\uD83D\\uDE00b\nl=\\ud83d\\ude00\n").unwrap();
        assert_eq!(
            parsed,
            vec![
                ("k".to_string(), "a\u{1f600}b".to_string()),
                ("l".to_string(), "\u{1f600}".to_string()),
            ]
        );
    }

    #[test]
    fn a_lone_surrogate_escape_is_refused_naming_the_rule() {
        for text in [
            "k=\\uD83D\n",
            "k=\\uD83Dx\n",
            "k=\\uD83D\\u0041\n",
            "k=\\uD83D\\uD83D\n",
            "k=\\uDE00\n",
            "k=x\\uDFFF\\uD83D\n",
        ] {
            let err = parse_properties(text).unwrap_err();
            let shown = err.to_string();
            assert!(shown.contains("surrogate"), "{text:?}: {shown}");
            assert!(shown.contains("`k`"), "{text:?}: {shown}");
        }
    }
}
