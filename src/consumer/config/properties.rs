//! Java's `.properties` syntax, so a file written for a Java or librdkafka consumer can be read.

use std::error::Error;
use std::fmt;

/// A malformed line in `.properties` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropertiesSyntaxError {
    /// The 1-based line where the logical line starts.
    pub line: usize,
    /// What is wrong.
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
/// escapes `\t`, `\n`, `\r`, `\f`, `\uXXXX`, and `\` before any other character (so `\=` and
/// `\:` in keys). One deliberate difference: values are also trimmed at the end, since no
/// setting has meaningful trailing whitespace and an invisible trailing space should not make a
/// number unparsable.
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
        // Join continuation lines.
        let mut logical = String::new();
        let mut current = first;
        loop {
            let trailing = current.chars().rev().take_while(|c| *c == '\\').count();
            if trailing % 2 == 1 {
                logical.push_str(&current[..current.len() - 1]);
                match lines.get(i) {
                    Some(next) => {
                        current = next.trim_start_matches(is_properties_space);
                        i += 1;
                    }
                    None => break,
                }
            } else {
                logical.push_str(current);
                break;
            }
        }
        let (key, value) = split_key_value(&logical);
        let key = unescape(key).map_err(|message| PropertiesSyntaxError {
            line: start,
            message,
        })?;
        let value = unescape(value).map_err(|message| PropertiesSyntaxError {
            line: start,
            message,
        })?;
        out.push((key, value.trim_end().to_string()));
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

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let ch = (hex.len() == 4)
                    .then(|| u32::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .and_then(char::from_u32)
                    .ok_or_else(|| format!("malformed \\u escape \\u{hex}"))?;
                out.push(ch);
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    Ok(out)
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
}
