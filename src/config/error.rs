//! Why a configuration was refused: one enum, every variant naming the setting and the rule.

use std::error::Error;
use std::fmt;
use std::path::PathBuf;

use crate::basics::error_kind::ErrorKind;
use crate::group::StrategyError;

/// Why a configuration was refused. Every variant names the setting (see [`ConfigError::setting`])
/// and its message states the rule, so an operator can fix the file without reading code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// No such setting. Refused rather than ignored: a misspelt `session.timout.ms` would
    /// otherwise silently leave the default in force.
    UnknownSetting {
        /// The name as given.
        name: String,
        /// The closest known setting, when one is close enough to be a likely typo.
        suggestion: Option<&'static str>,
    },
    /// A Kafka setting this library knows but does not implement.
    UnsupportedSetting {
        /// The name as given.
        name: String,
        /// Why it is not supported.
        reason: &'static str,
    },
    /// A required setting was not given.
    Missing {
        /// The setting.
        name: &'static str,
    },
    /// The value could not be parsed.
    InvalidValue {
        /// The setting.
        name: &'static str,
        /// The value as given.
        value: String,
        /// What was expected, naming the allowed values for enumerations.
        expected: &'static str,
    },
    /// The value parsed but is outside the allowed range (zero, negative, too large).
    OutOfRange {
        /// The setting.
        name: &'static str,
        /// The value as given (durations in milliseconds).
        value: String,
        /// The rule it broke.
        rule: &'static str,
    },
    /// Two settings contradict each other.
    Conflict {
        /// The setting reported as wrong.
        name: &'static str,
        /// The setting it conflicts with.
        other: &'static str,
        /// The rule, with both values.
        rule: String,
    },
    /// `enable.auto.commit=true`.
    AutoCommitRefused,
    /// `partition.assignment.strategy` breaks a list rule: empty, an assignor twice, or eager
    /// mixed with cooperative. The group layer's one check of those rules says which.
    Strategies(StrategyError),
    /// A value Kafka knows that this build does not implement (`security.protocol=SSL` without
    /// the cargo feature `tls`, `sasl.mechanism=GSSAPI`): refused rather than downgraded.
    Unavailable {
        /// The setting.
        name: &'static str,
        /// The value as given (never a secret: only named values are refused this way).
        value: String,
        /// Why, and what to use instead.
        reason: &'static str,
    },
    /// A secret setting (`sasl.password`, `sasl.jaas.config`) is malformed. The value is not
    /// kept, so printing the error cannot leak it.
    InvalidSecret {
        /// The setting.
        name: &'static str,
        /// What is wrong, without quoting the value.
        problem: String,
    },
    /// A TLS file (`ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`) cannot be
    /// read or holds no usable PEM; checked at build time so that the first connection does not
    /// find out.
    TlsFile {
        /// The setting naming the file.
        name: &'static str,
        /// The file (none when the operating system's trust store is at fault).
        path: Option<std::path::PathBuf>,
        /// What is wrong.
        problem: String,
    },
    /// A classic-protocol setting was set explicitly with `group.protocol=consumer`, where the
    /// broker decides it.
    ClassicOnly {
        /// The setting.
        name: &'static str,
    },
    /// A consumer-group setting given to a share consumer, where the broker's share group (or
    /// the group's own configuration) decides it: refused rather than ignored, as Java's
    /// `KafkaShareConsumer` does.
    NotForShareGroups {
        /// The setting.
        name: &'static str,
        /// What decides it in a share group instead.
        instead: &'static str,
    },
    /// A share consumer's own setting (`share.*`) given to the consumer, which has no share
    /// group to apply it to: refused rather than ignored.
    ShareOnly {
        /// The setting.
        name: &'static str,
    },
    /// A producer's own setting (`acks`, `linger.ms`, ...) given to a consumer or share
    /// consumer, which produces nothing with it: refused rather than ignored.
    ProducerOnly {
        /// The setting.
        name: &'static str,
    },
    /// A consumer setting given to a producer (a group, fetching, processing): refused rather
    /// than ignored, so that a producer configured from a consumer's file says what it drops.
    NotForProducers {
        /// The setting.
        name: &'static str,
    },
    /// A `.properties` file could not be read.
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error's kind.
        kind: std::io::ErrorKind,
        /// The I/O error's message.
        message: String,
    },
    /// A `.properties` file is malformed (only a broken `\u` escape can make it so).
    Syntax {
        /// The file, when the text came from one.
        path: Option<PathBuf>,
        /// The 1-based line where the logical line starts.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

impl ConfigError {
    /// The setting at fault, when the error concerns one.
    pub fn setting(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownSetting { name, .. }
            | ConfigError::UnsupportedSetting { name, .. } => Some(name),
            ConfigError::Missing { name }
            | ConfigError::InvalidValue { name, .. }
            | ConfigError::OutOfRange { name, .. }
            | ConfigError::Conflict { name, .. }
            | ConfigError::Unavailable { name, .. }
            | ConfigError::InvalidSecret { name, .. }
            | ConfigError::TlsFile { name, .. }
            | ConfigError::ClassicOnly { name }
            | ConfigError::ShareOnly { name }
            | ConfigError::ProducerOnly { name }
            | ConfigError::NotForProducers { name }
            | ConfigError::NotForShareGroups { name, .. } => Some(name),
            ConfigError::AutoCommitRefused => Some("enable.auto.commit"),
            ConfigError::Strategies(_) => Some("partition.assignment.strategy"),
            ConfigError::File { .. } | ConfigError::Syntax { .. } => None,
        }
    }
}

impl ConfigError {
    /// [`ErrorKind::Config`], for every variant: the same kind as every other error of the
    /// crate reports for a refused configuration, so that a caller that sorts failures by kind
    /// needs no case for this type.
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::Config
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::UnknownSetting { name, suggestion } => {
                write!(f, "unknown setting `{name}`")?;
                match suggestion {
                    Some(s) => write!(f, ": did you mean `{s}`?"),
                    None => write!(f, " (see rebalance_guard::config::SETTINGS)"),
                }
            }
            ConfigError::UnsupportedSetting { name, reason } => {
                write!(f, "setting `{name}` is not supported: {reason}")
            }
            ConfigError::NotForShareGroups { name, instead } => {
                write!(
                    f,
                    "setting `{name}` does not apply to a share consumer: {instead}"
                )
            }
            ConfigError::Missing { name } => write!(f, "setting `{name}` is required"),
            ConfigError::InvalidValue {
                name,
                value,
                expected,
            } => write!(f, "setting `{name}`: {value:?} is not {expected}"),
            ConfigError::OutOfRange { name, value, rule } => {
                write!(f, "setting `{name}`: {value} {rule}")
            }
            ConfigError::Conflict { name, other, rule } => {
                write!(f, "setting `{name}` conflicts with `{other}`: {rule}")
            }
            ConfigError::AutoCommitRefused => f.write_str(
                "setting `enable.auto.commit`: must be false. Auto-commit commits the fetched \
                 position on a timer without knowing whether the handler finished those records; \
                 a crash or rebalance after such a commit loses records that were never \
                 processed, the exact failure this consumer prevents. Offsets are committed after \
                 the guard confirms the work (last processed + 1).",
            ),
            ConfigError::Strategies(e) => {
                write!(f, "setting `partition.assignment.strategy`: {e}")
            }
            ConfigError::Unavailable {
                name,
                value,
                reason,
            } => write!(f, "setting `{name}`: {value} is not available: {reason}"),
            ConfigError::InvalidSecret { name, problem } => {
                write!(f, "setting `{name}` (value not shown): {problem}")
            }
            ConfigError::TlsFile {
                name,
                path,
                problem,
            } => match path {
                Some(path) => write!(f, "setting `{name}` ({}): {problem}", path.display()),
                None => write!(f, "setting `{name}`: {problem}"),
            },
            ConfigError::ClassicOnly { name } => write!(
                f,
                "setting `{name}` applies to group.protocol=classic only; with \
                 group.protocol=consumer the broker owns it (its group.consumer.* settings; \
                 group.remote.assignor names a broker-side assignor)"
            ),
            ConfigError::ShareOnly { name } => write!(
                f,
                "setting `{name}` applies to a share consumer only (ShareConfig); this consumer \
                 belongs to a consumer group"
            ),
            ConfigError::ProducerOnly { name } => write!(
                f,
                "setting `{name}` applies to a producer only (ProducerConfig); a consumer \
                 produces nothing with it"
            ),
            ConfigError::NotForProducers { name } => write!(
                f,
                "setting `{name}` does not apply to a producer: a producer takes the connection \
                 and security settings and its own (acks, linger.ms, batch.size, ...)"
            ),
            ConfigError::File {
                path,
                kind,
                message,
            } => write!(
                f,
                "cannot read properties file {}: {message} ({kind:?})",
                path.display()
            ),
            ConfigError::Syntax {
                path,
                line,
                message,
            } => match path {
                Some(path) => write!(f, "{}:{line}: {message}", path.display()),
                None => write!(f, "properties line {line}: {message}"),
            },
        }
    }
}

/// A configuration error's message states the rule in one line for the operator, so
/// [`ConfigError::Strategies`] displays the [`StrategyError`] (the rule broken) after the setting's
/// name, and returns that error's own source (none) rather than the error again; the other
/// variants are leaves.
impl Error for ConfigError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ConfigError::Strategies(e) => e.source(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_is_a_config_kind() {
        let refusals = [
            ConfigError::Missing { name: "group.id" },
            ConfigError::AutoCommitRefused,
            ConfigError::ShareOnly {
                name: "share.acquire.mode",
            },
            ConfigError::Syntax {
                path: None,
                line: 1,
                message: "bad escape".to_string(),
            },
        ];
        for e in refusals {
            assert_eq!(e.kind(), ErrorKind::Config, "{e}");
        }
    }
}
