//! Fuzz target (g): Java `.properties` text, as `ConsumerConfig::from_properties_file` reads it.
//!
//! Input layout: the whole input is the file's text (inputs that are not UTF-8 are skipped: the
//! file is read as UTF-8 and refused before parsing otherwise).
//!
//! Properties: no panic; a refusal names a line of the text and states one of the parser's
//! rules, quoting at most the key of the value at fault (never the value: it may be a
//! password); what is accepted reads back as the same pairs when written out again with every
//! special character escaped (so the parser and its escapes agree with the syntax it documents).

use crate::config::parse_properties;
use crate::config::properties::{BAD_HEX, LONE_HIGH, LONE_LOW};

/// `text` escaped so that the parser reads it back unchanged, as a key or as a value.
fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        match c {
            '\\' | '=' | ':' | ' ' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{c}' => out.push_str("\\f"),
            c => out.push(c),
        }
    }
    out
}

/// Runs target (g) on one input.
pub fn check(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    match parse_properties(text) {
        Ok(pairs) => {
            let written: String = pairs
                .iter()
                .map(|(k, v)| format!("{}={}\n", escaped(k), escaped(v)))
                .collect();
            let again = parse_properties(&written);
            assert_eq!(
                again.as_ref(),
                Ok(&pairs),
                "the parsed pairs do not read back from {written:?}"
            );
        }
        Err(e) => {
            let lines = text.lines().count();
            assert!(
                (1..=lines).contains(&e.line),
                "line {} of a {lines}-line text",
                e.line
            );
            let rule = [BAD_HEX, LONE_HIGH, LONE_LOW]
                .into_iter()
                .find(|r| e.message.ends_with(r))
                .unwrap_or_else(|| panic!("not one of the rules: {:?}", e.message));
            let lead = &e.message[..e.message.len() - rule.len()];
            assert!(
                lead == "in the key: "
                    || (lead.starts_with("in the value of `") && lead.ends_with("` (not shown): ")),
                "the error says more than the key and the rule: {:?}",
                e.message
            );
        }
    }
}

/// Texts at each part of the syntax: separators, comments, continuations, escapes (the
/// malformed `\u` that once quoted a password, surrogate pairs, lone surrogates), non-ASCII.
pub(crate) fn seeds() -> Vec<Vec<u8>> {
    [
        "# a comment\n! another\n\n   bootstrap.servers = a:1,\\\n       b:2\ngroup.id:orders  \n\
         client.id   spaced\\u0041\nkey\\=with\\:escapes = v\nempty\ntrailing.backslash = x\\\\\n",
        "sasl.password=\\u12zsecret\n",
        "sasl.password=pre\\u00\n",
        "k=\\uD83D\\uDE00\n",
        "k=\\uD83D\n",
        "k=\\uDE00x\n",
        "k=\\uD83Dabcd\n",
        "k=\\uD83D\\u0041\n",
        "a=1\r\nb=2\r\n",
        "continued=\\\n",
        "k\u{e9}y=v\u{e8}l\u{fc}e \u{1f600}\n",
        "\\ lead=\\ \\ value\\t\n",
        "=no key\n:also\n",
        "k=v\\",
    ]
    .iter()
    .map(|t| t.as_bytes().to_vec())
    .collect()
}
