//! The security settings' value types: `security.protocol`, `sasl.mechanism`, `sasl.password`,
//! the Java `sasl.jaas.config` line, the OAUTHBEARER token callback, the `ssl.*` file paths and
//! `ssl.endpoint.identification.algorithm`; their rules between each other are in `cross.rs`.
//!
//! Why the secrets are typed: `sasl.password` and `sasl.jaas.config` are held as
//! [`Secret`]s, so `Debug` of the builder, of the validated configuration and of the wire
//! settings never shows them, [`ConsumerConfig::to_properties`](super::ConsumerConfig) prints
//! [`HIDDEN`] in their place (as Java's client logs `[hidden]`), and no parse error quotes them.

use std::fmt;
use std::path::PathBuf;

use super::values::SettingValue;
use super::ConfigError;
use crate::wire::secret::WipedString;
use crate::wire::{OAuthBearerCallback, SaslMechanism, Secret};

/// What `to_properties` prints instead of a secret; refused when read back, so a printed
/// configuration fed back in fails loudly instead of authenticating with the placeholder.
pub const HIDDEN: &str = "[hidden]";

/// How connections are secured (`security.protocol`), by Kafka's names.
///
/// Why all four in every build: without the cargo feature `tls`, a `.properties` file for a TLS
/// cluster then fails with a message naming the feature, rather than "unknown value".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    /// No TLS, no authentication.
    Plaintext,
    /// TLS without SASL (needs the cargo feature `tls`).
    Ssl,
    /// SASL authentication without TLS.
    SaslPlaintext,
    /// SASL over TLS (needs the cargo feature `tls`).
    SaslSsl,
}

impl SecurityProtocol {
    /// The value as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections authenticate with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    /// Whether connections run over TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Parses a configuration value, ignoring case (as Java does).
    pub fn from_name(value: &str) -> Option<Self> {
        [
            SecurityProtocol::Plaintext,
            SecurityProtocol::Ssl,
            SecurityProtocol::SaslPlaintext,
            SecurityProtocol::SaslSsl,
        ]
        .into_iter()
        .find(|p| p.as_str().eq_ignore_ascii_case(value.trim()))
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SettingValue for SecurityProtocol {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        SecurityProtocol::from_name(text).ok_or_else(|| ConfigError::InvalidValue {
            name,
            value: text.to_string(),
            expected: "a security protocol (allowed: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)",
        })
    }
    fn text(&self) -> String {
        self.as_str().to_string()
    }
}

/// Mechanisms Kafka knows that this library does not implement, with the reason.
const UNBUILT_MECHANISMS: &[(&str, &str)] = &[(
    "GSSAPI",
    "GSSAPI (Kerberos) is not supported: it needs a C library; use PLAIN, SCRAM or OAUTHBEARER",
)];

impl SettingValue for SaslMechanism {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        if let Some((_, reason)) = UNBUILT_MECHANISMS
            .iter()
            .find(|(m, _)| m.eq_ignore_ascii_case(text))
        {
            return Err(ConfigError::Unavailable {
                name,
                value: text.to_string(),
                reason,
            });
        }
        SaslMechanism::from_name(text).ok_or_else(|| ConfigError::InvalidValue {
            name,
            value: text.to_string(),
            expected: "a SASL mechanism (allowed: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, \
                       OAUTHBEARER)",
        })
    }
    fn text(&self) -> String {
        self.name().to_string()
    }
}

fn placeholder_refused(name: &'static str) -> ConfigError {
    ConfigError::InvalidSecret {
        name,
        problem: format!(
            "{HIDDEN} is what to_properties prints in place of the secret; give the real value"
        ),
    }
}

/// The text is the password; the printed form is [`HIDDEN`].
impl SettingValue for Secret {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        if text == HIDDEN {
            return Err(placeholder_refused(name));
        }
        Ok(Secret::new(text))
    }
    fn text(&self) -> String {
        HIDDEN.to_string()
    }
}

/// The login module of a `sasl.jaas.config` line, which decides the mechanisms it can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginModule {
    /// `org.apache.kafka.common.security.plain.PlainLoginModule`: `sasl.mechanism=PLAIN`.
    Plain,
    /// `org.apache.kafka.common.security.scram.ScramLoginModule`: `SCRAM-SHA-256` or `-512`.
    Scram,
}

impl LoginModule {
    const PLAIN_CLASS: &'static str = "org.apache.kafka.common.security.plain.PlainLoginModule";
    const SCRAM_CLASS: &'static str = "org.apache.kafka.common.security.scram.ScramLoginModule";

    /// The Java class name.
    pub fn class(self) -> &'static str {
        match self {
            LoginModule::Plain => LoginModule::PLAIN_CLASS,
            LoginModule::Scram => LoginModule::SCRAM_CLASS,
        }
    }

    /// Whether this module authenticates with `mechanism`.
    pub fn serves(self, mechanism: SaslMechanism) -> bool {
        match self {
            LoginModule::Plain => mechanism == SaslMechanism::Plain,
            LoginModule::Scram => matches!(
                mechanism,
                SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512
            ),
        }
    }
}

/// A parsed Java `sasl.jaas.config` line for PLAIN or SCRAM, e.g.
/// `org.apache.kafka.common.security.scram.ScramLoginModule required username="alice"
/// password="...";`.
///
/// Why parsed at all: configurations copied from a Java client carry their credentials this
/// way. The whole line is a secret (it holds the password): `Debug` shows the module and user
/// only, `to_properties` prints `[hidden]`.
#[derive(Clone, PartialEq, Eq)]
pub struct JaasConfig {
    module: LoginModule,
    username: String,
    password: Secret,
}

impl fmt::Debug for JaasConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JaasConfig")
            .field("module", &self.module)
            .field("username", &self.username)
            .field("password", &self.password)
            .finish()
    }
}

impl JaasConfig {
    /// Parses the line; errors describe what is wrong without quoting any of it.
    pub fn parse(line: &str) -> Result<JaasConfig, ConfigError> {
        jaas_parse(line).map_err(|problem| ConfigError::InvalidSecret {
            name: "sasl.jaas.config",
            problem: problem.to_string(),
        })
    }

    /// The login module.
    pub fn module(&self) -> LoginModule {
        self.module
    }

    /// The `username` option.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// The `password` option.
    pub fn password(&self) -> &Secret {
        &self.password
    }
}

impl SettingValue for JaasConfig {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        if text == HIDDEN {
            return Err(placeholder_refused(name));
        }
        JaasConfig::parse(text)
    }
    fn text(&self) -> String {
        HIDDEN.to_string()
    }
}

/// A file path (`ssl.ca.location` and the others): the text is the path.
impl SettingValue for PathBuf {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        if text.is_empty() {
            return Err(ConfigError::InvalidValue {
                name,
                value: String::new(),
                expected: "a file path",
            });
        }
        Ok(PathBuf::from(text))
    }
    fn text(&self) -> String {
        self.display().to_string()
    }
}

/// `ssl.endpoint.identification.algorithm`: whether the broker's certificate must name the host
/// connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndpointIdentification {
    /// `https` (the default, as in Java): the certificate must name the host.
    Https,
    /// `none` (or an empty value, Java's way of writing it): the chain is still verified, the
    /// host name is not. For brokers reached through an address their certificates do not
    /// carry; needs `ssl.ca.location`, since any public CA would do otherwise.
    None,
}

impl SettingValue for EndpointIdentification {
    fn parse(name: &'static str, text: &str) -> Result<Self, ConfigError> {
        if text.eq_ignore_ascii_case("https") {
            Ok(EndpointIdentification::Https)
        } else if text.is_empty() || text.eq_ignore_ascii_case("none") {
            Ok(EndpointIdentification::None)
        } else {
            Err(ConfigError::InvalidValue {
                name,
                value: text.to_string(),
                expected: "https (verify the broker's host name) or none (an empty value too)",
            })
        }
    }
    fn text(&self) -> String {
        match self {
            EndpointIdentification::Https => "https",
            EndpointIdentification::None => "none",
        }
        .to_string()
    }
}

/// What `to_properties` prints for the token callback; a callback cannot be written as text.
pub const CALLBACK: &str = "[callback]";

/// A callback is Rust code: it is given with the typed builder method only.
impl SettingValue for OAuthBearerCallback {
    fn parse(name: &'static str, _text: &str) -> Result<Self, ConfigError> {
        Err(ConfigError::Unavailable {
            name,
            value: String::new(),
            reason: "a token callback cannot be given as text; set it with \
                     ConsumerConfigBuilder::sasl_oauthbearer_token_callback",
        })
    }
    fn text(&self) -> String {
        CALLBACK.to_string()
    }
}

/// `Module flag key=value ... ;` with values quoted (`"..."`, backslash escapes) or bare. Only
/// `username` and `password` are accepted as options: any other (such as SCRAM's `tokenauth`
/// for delegation tokens) would be silently ignored otherwise. Every problem is a fixed text, so
/// no part of the line (which holds the password) can reach an error.
fn jaas_parse(line: &str) -> Result<JaasConfig, &'static str> {
    let line = line.trim();
    let Some(body) = line.strip_suffix(';') else {
        return Err("the line must end with `;`");
    };
    let mut rest = body.trim_start();
    let word_end = |s: &str| s.find(char::is_whitespace).unwrap_or(s.len());
    let class_end = word_end(rest);
    let module = match &rest[..class_end] {
        LoginModule::PLAIN_CLASS => LoginModule::Plain,
        LoginModule::SCRAM_CLASS => LoginModule::Scram,
        other if other.ends_with("OAuthBearerLoginModule") => {
            return Err(
                "OAUTHBEARER tokens come from a callback, not from a JAAS line: give \
                 it with ConsumerConfigBuilder::sasl_oauthbearer_token_callback and \
                 leave sasl.jaas.config unset",
            )
        }
        other if other.contains("Krb5LoginModule") => {
            return Err(
                "Kerberos (GSSAPI) is not supported; use PlainLoginModule or ScramLoginModule",
            )
        }
        _ => {
            return Err("the login module must be \
                 org.apache.kafka.common.security.plain.PlainLoginModule or \
                 org.apache.kafka.common.security.scram.ScramLoginModule")
        }
    };
    rest = rest[class_end..].trim_start();
    let flag_end = word_end(rest);
    let flag = &rest[..flag_end];
    if !["required", "requisite", "sufficient", "optional"]
        .iter()
        .any(|f| f.eq_ignore_ascii_case(flag))
    {
        return Err("the login module must be followed by a flag such as `required`");
    }
    rest = rest[flag_end..].trim_start();
    let mut username = None;
    let mut password: Option<Secret> = None;
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else {
            return Err("an option lacks `=value`");
        };
        let key = rest[..eq].trim();
        rest = rest[eq + 1..].trim_start();
        // Reserved for the longest value the rest can hold, so it never reallocates (which
        // would free a partial copy of the password unwiped); wiped unless it is kept.
        let mut value = WipedString(String::with_capacity(rest.len()));
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some((_, escaped)) => value.0.push(escaped),
                        None => break,
                    },
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    c => value.0.push(c),
                }
            }
            let Some(end) = end else {
                return Err("a quoted value is not closed");
            };
            rest = quoted[end + 1..].trim_start();
        } else {
            let end = word_end(rest);
            value.0.push_str(&rest[..end]);
            rest = rest[end..].trim_start();
        }
        match key {
            "username" => username = Some(std::mem::take(&mut value.0)),
            "password" => password = Some(Secret::new(std::mem::take(&mut value.0))),
            "tokenauth" => {
                return Err("delegation tokens (tokenauth) are not supported");
            }
            // The name is not quoted: a mangled line may have the password in its place.
            _ => return Err("an option other than username and password is given"),
        }
    }
    let username = username
        .filter(|u| !u.trim().is_empty())
        .ok_or("option `username` is missing or empty")?;
    let password = password
        .filter(|p| !p.is_empty())
        .ok_or("option `password` is missing or empty")?;
    Ok(JaasConfig {
        module,
        username,
        password,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jaas_lines_for_plain_and_scram_parse() {
        let j = JaasConfig::parse(
            r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="p\"w;d";"#,
        )
        .unwrap();
        assert_eq!(j.module(), LoginModule::Scram);
        assert_eq!(j.username(), "alice");
        assert_eq!(j.password().expose(), "p\"w;d");
        let j = JaasConfig::parse(
            "org.apache.kafka.common.security.plain.PlainLoginModule required username=bob password=x1 ;",
        )
        .unwrap();
        assert_eq!(j.module(), LoginModule::Plain);
        assert!(j.module().serves(SaslMechanism::Plain));
        assert!(!j.module().serves(SaslMechanism::ScramSha256));
        assert_eq!(j.password().expose(), "x1");
    }

    #[test]
    fn jaas_errors_never_quote_the_line() {
        let secret = "Zq9-very-secret";
        for line in [
            format!(
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="{secret}""#
            ),
            format!(
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="{secret};"#
            ),
            format!(r#"com.example.Other required password="{secret}";"#),
            format!(
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required password="{secret}" tokenauth=true;"#
            ),
            format!(
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required password="{secret}";"#
            ),
            format!(r#"org.apache.kafka.common.security.scram.ScramLoginModule {secret};"#),
            format!(
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="a" {secret}="x";"#
            ),
        ] {
            let err = JaasConfig::parse(&line).unwrap_err();
            let text = format!("{err} {err:?}");
            assert!(!text.contains("Zq9"), "{text}");
            assert_eq!(err.setting(), Some("sasl.jaas.config"));
        }
    }
}
