//! Names no row of the settings table has: Kafka settings deliberately not implemented (with the
//! reason), and the typo suggestion for the rest.
//!
//! Why refuse instead of ignore: a misspelt `session.timout.ms` would otherwise silently leave the
//! default in force.

use super::{ConfigError, SETTINGS};

/// Kafka consumer settings this library knows but does not implement, with the reason, so that a
/// `.properties` file copied from a Java consumer gets an explanation instead of "unknown".
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "auto.commit.interval.ms",
        "auto-commit is refused (see enable.auto.commit), so its interval has no meaning",
    ),
    (
        "key.deserializer",
        "records are handed to the handler as bytes; deserialize in the handler",
    ),
    (
        "value.deserializer",
        "records are handed to the handler as bytes; deserialize in the handler",
    ),
    ("interceptor.classes", "Java interceptors do not apply"),
];

/// Prefixes of Kafka settings that belong to features not implemented here.
const UNSUPPORTED_PREFIXES: &[(&str, &str)] = &[
    (
        "ssl.",
        "of the TLS settings only ssl.ca.location, ssl.certificate.location and \
         ssl.key.location (PEM files; Java keystores are not read) and \
         ssl.endpoint.identification.algorithm are implemented (with the cargo feature `tls`)",
    ),
    (
        "sasl.",
        "of the SASL settings only sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, \
         OAUTHBEARER), sasl.username, sasl.password and sasl.jaas.config are implemented (an \
         OAUTHBEARER token callback is given with \
         ConsumerConfigBuilder::sasl_oauthbearer_token_callback)",
    ),
];

/// The refusal for a name no row of the table has: an explanation for a Kafka setting this
/// library does not implement, else "unknown" with the closest known setting as a suggestion.
pub(super) fn unknown_setting(name: &str) -> ConfigError {
    if let Some((_, reason)) = UNSUPPORTED.iter().find(|(n, _)| *n == name) {
        return ConfigError::UnsupportedSetting {
            name: name.to_string(),
            reason,
        };
    }
    if let Some((_, reason)) = UNSUPPORTED_PREFIXES
        .iter()
        .find(|(p, _)| name.starts_with(p))
    {
        return ConfigError::UnsupportedSetting {
            name: name.to_string(),
            reason,
        };
    }
    ConfigError::UnknownSetting {
        name: name.to_string(),
        suggestion: suggest(name),
    }
}

/// The known setting closest to `name`, if it is close enough to be a typo: within a third of the
/// name's length in edits (at least 2), after treating `_` and `-` as `.` and ignoring case, so
/// `group_id` and `Session.Timeout.MS` find their setting.
fn suggest(name: &str) -> Option<&'static str> {
    let normal = |s: &str| {
        s.chars()
            .map(|c| match c {
                '_' | '-' => '.',
                c => c.to_ascii_lowercase(),
            })
            .collect::<String>()
    };
    let wanted = normal(name);
    let limit = (wanted.chars().count() / 3).max(2);
    SETTINGS
        .iter()
        .map(|s| (edit_distance(&wanted, s.name), s.name))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// Levenshtein distance over chars, with one row of memory.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}
