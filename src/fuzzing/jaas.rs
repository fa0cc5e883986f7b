//! Fuzz target (f): the Java `sasl.jaas.config` line, which holds the password.
//!
//! Input layout: the whole input is the line (inputs that are not UTF-8 are skipped: the setting
//! arrives as a Rust string).
//!
//! Properties: no panic; a refusal names `sasl.jaas.config`, and does not depend on the
//! password's characters (the parser's problems are fixed texts, so it quotes nothing of the
//! line by construction; checked here by masking the password); what is accepted has a user and
//! a password and reads back the same when written out again as a quoted line.

use crate::config::JaasConfig;
use crate::consumer::ConfigError;

/// `value` quoted the way the JAAS syntax reads it back: `"` and `\` escaped.
fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Runs target (f) on one input.
pub fn check(input: &[u8]) {
    let Ok(line) = std::str::from_utf8(input) else {
        return;
    };
    match JaasConfig::parse(line) {
        Ok(jaas) => {
            assert!(!jaas.username().trim().is_empty(), "accepted an empty user");
            assert!(!jaas.password().is_empty(), "accepted an empty password");
            let again = format!(
                "{} required username={} password={};",
                jaas.module().class(),
                quoted(jaas.username()),
                quoted(jaas.password().expose())
            );
            assert_eq!(
                JaasConfig::parse(&again).as_ref(),
                Ok(&jaas),
                "the parsed line does not read back"
            );
        }
        Err(e) => {
            assert_eq!(e.setting(), Some("sasl.jaas.config"));
            let ConfigError::InvalidSecret { problem, .. } = &e else {
                panic!("a JAAS refusal is not InvalidSecret: {e:?}");
            };
            // The problem does not depend on the password's characters: with the letters and
            // digits after the first `password=` (past the module's name) replaced, the line
            // is refused the same way. (Letters and digits for others change no token.)
            // Trimmed first, as the parser does, so the module's name is the first word.
            let line = line.trim();
            let module_end = line.find(char::is_whitespace).unwrap_or(line.len());
            if let Some(at) = line[module_end..].find("password=") {
                let start = module_end + at + "password=".len();
                let start = start + usize::from(line[start..].starts_with('"'));
                let run = line[start..]
                    .find(|c: char| !c.is_ascii_alphanumeric())
                    .unwrap_or(line.len() - start);
                let masked = format!(
                    "{}{}{}",
                    &line[..start],
                    "Q".repeat(run),
                    &line[start + run..]
                );
                assert_eq!(
                    JaasConfig::parse(&masked).err().as_ref(),
                    Some(&e),
                    "the refusal depends on the password's characters"
                );
            }
            assert!(!problem.is_empty());
        }
    }
}

/// Lines that parse (both modules, quoted and bare values, escapes, non-ASCII) and lines at each
/// refusal.
pub(crate) fn seeds() -> Vec<Vec<u8>> {
    [
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="p\"w;d";"#,
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=bob password=x1 ;",
        "org.apache.kafka.common.security.plain.PlainLoginModule optional password=\"s\u{e9}cr\u{e8}t\" username=\"\u{e9}\";",
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="Zq9secretvalue""#,
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="Zq9secretvalue;"#,
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="Zq9\"#,
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required password="Zq9secretvalue" tokenauth=true;"#,
        r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="a" Zq9secretvalue="x";"#,
        r#"org.apache.kafka.common.security.scram.ScramLoginModule Zq9secretvalue;"#,
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "com.sun.security.auth.module.Krb5LoginModule required;",
        "com.example.Other required password=\"Zq9secretvalue\";",
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"\" password=\"\";",
        ";",
        "",
    ]
    .iter()
    .map(|l| l.as_bytes().to_vec())
    .collect()
}
