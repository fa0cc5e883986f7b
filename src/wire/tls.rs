//! TLS for `SSL` and `SASL_SSL` listeners, with rustls on the `ring` crypto provider, behind the
//! cargo feature `tls`.
//!
//! Why these choices:
//! - **rustls**: TLS in Rust, so a TLS build needs no OpenSSL; behind a feature because its
//!   crypto provider compiles C and assembly, and the default build stays free of C.
//! - **ring as the provider**, chosen per connection with `ClientConfig::builder_with_provider`
//!   (never the process default, which another crate in the same program could install): it
//!   builds with nothing but a C compiler, while aws-lc-rs also wants CMake (or prebuilt
//!   bindings per target) and is several times larger to compile. Kafka brokers offer the
//!   ECDHE+AES-GCM/ChaCha20 suites ring implements.
//! - **The operating system's trust store** (`rustls-native-certs`) when `ssl.ca.location` is
//!   unset: a company's internal CA, which is how most self-run clusters are signed, is trusted
//!   once it is in the OS store, and store updates arrive with OS updates instead of with a
//!   rebuild of this library (as a compiled-in list like webpki-roots would need).
//! - **PEM through `rustls-pki-types`** (its `PemObject` API): one parser for certificates and
//!   keys; `rustls-pemfile` is unmaintained.
//!
//! `ssl.endpoint.identification.algorithm=none` keeps the chain check and skips only the host
//! name check, as in Java. The handshake runs under the connect deadline (see
//! [`super::stream`]), and TLS refusals are [`WireError::Tls`], not retried.

use std::path::{Path, PathBuf};
#[cfg(feature = "tls")]
use std::sync::{Arc, OnceLock};

#[cfg(feature = "tls")]
use std::time::Instant;

#[cfg(feature = "tls")]
use super::error::{Result, WireError};
#[cfg(feature = "tls")]
use super::stream::{Socket, Stream};

/// How connections run TLS: whom to trust, the client certificate (mTLS), and whether the
/// broker's host name is checked. Loading the files is deferred to the first connection and
/// shared by every clone, so each connection does not re-read them; `TlsConfig::load` (feature `tls`) checks
/// them up front.
#[derive(Clone, Debug)]
pub struct TlsConfig {
    ca_location: Option<PathBuf>,
    certificate_location: Option<PathBuf>,
    key_location: Option<PathBuf>,
    verify_hostname: bool,
    #[cfg(feature = "tls")]
    built: Arc<OnceLock<Arc<rustls::ClientConfig>>>,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig::new()
    }
}

impl PartialEq for TlsConfig {
    fn eq(&self, other: &TlsConfig) -> bool {
        self.ca_location == other.ca_location
            && self.certificate_location == other.certificate_location
            && self.key_location == other.key_location
            && self.verify_hostname == other.verify_hostname
    }
}

impl TlsConfig {
    /// Trusts the operating system's store, verifies the broker's host name, no client
    /// certificate: the safe default.
    pub fn new() -> TlsConfig {
        TlsConfig {
            ca_location: None,
            certificate_location: None,
            key_location: None,
            verify_hostname: true,
            #[cfg(feature = "tls")]
            built: Arc::default(),
        }
    }

    /// Trusts only the CA certificates of this PEM file (`ssl.ca.location`) instead of the OS
    /// store.
    pub fn with_ca_location(mut self, path: impl Into<PathBuf>) -> TlsConfig {
        self.ca_location = Some(path.into());
        self.reset()
    }

    /// Presents this certificate chain and private key (PEM; `ssl.certificate.location`,
    /// `ssl.key.location`), for brokers that require client authentication (mTLS).
    pub fn with_client_certificate(
        mut self,
        certificate: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> TlsConfig {
        self.certificate_location = Some(certificate.into());
        self.key_location = Some(key.into());
        self.reset()
    }

    /// Whether the broker's certificate must name the host we connect to
    /// (`ssl.endpoint.identification.algorithm`: `https` is true, `none` false). Turning it off
    /// keeps the check that a trusted CA signed the certificate.
    pub fn with_hostname_verification(mut self, verify: bool) -> TlsConfig {
        self.verify_hostname = verify;
        self.reset()
    }

    /// `ssl.ca.location`.
    pub fn ca_location(&self) -> Option<&Path> {
        self.ca_location.as_deref()
    }

    /// `ssl.certificate.location`.
    pub fn certificate_location(&self) -> Option<&Path> {
        self.certificate_location.as_deref()
    }

    /// `ssl.key.location`.
    pub fn key_location(&self) -> Option<&Path> {
        self.key_location.as_deref()
    }

    /// Whether host names are verified.
    pub fn verifies_hostname(&self) -> bool {
        self.verify_hostname
    }

    /// A changed setting invalidates the cached rustls configuration.
    fn reset(self) -> TlsConfig {
        #[cfg(feature = "tls")]
        return TlsConfig {
            built: Arc::default(),
            ..self
        };
        #[cfg(not(feature = "tls"))]
        self
    }

    /// Reads and checks the files now (the configuration builder calls this, so a missing or
    /// malformed file is refused at build time). The error names the file's setting.
    #[cfg(feature = "tls")]
    pub fn load(&self) -> std::result::Result<(), TlsFileError> {
        self.client_config().map(|_| ())
    }

    #[cfg(feature = "tls")]
    fn client_config(&self) -> std::result::Result<Arc<rustls::ClientConfig>, TlsFileError> {
        if let Some(built) = self.built.get() {
            return Ok(built.clone());
        }
        let built = Arc::new(build::client_config(self)?);
        // A race with another thread builds twice; either result is the same.
        let _ = self.built.set(built.clone());
        Ok(built)
    }
}

/// A TLS file that cannot be used: which setting, which file, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFileError {
    /// The setting naming the file (`ssl.ca.location`, ...).
    pub setting: &'static str,
    /// The file, if the problem concerns one (the OS store has none).
    pub path: Option<PathBuf>,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for TlsFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Some(p) => write!(f, "{} ({}): {}", self.setting, p.display(), self.problem),
            None => write!(f, "{}: {}", self.setting, self.problem),
        }
    }
}

/// A leaf: it wraps no other error.
impl std::error::Error for TlsFileError {}

/// Runs the TLS handshake on `socket` for `addr` ("host:port"), by `deadline`.
#[cfg(feature = "tls")]
pub(super) fn handshake(
    mut socket: Socket,
    addr: &str,
    config: &TlsConfig,
    deadline: Instant,
) -> Result<Stream> {
    use rustls::pki_types::ServerName;
    let client_config = config
        .client_config()
        .map_err(|e| WireError::Config(e.to_string()))?;
    let host = host_of(addr);
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| WireError::Config(format!("{host} is not a valid TLS server name: {e}")))?;
    let mut conn =
        rustls::ClientConnection::new(client_config, name).map_err(|e| WireError::Tls {
            broker: addr.to_string(),
            reason: e.to_string(),
        })?;
    socket.set_deadlines(deadline);
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut socket) {
            return Err(io_error(e, addr, "TLS handshake"));
        }
    }
    Ok(Stream::Tls(Box::new(rustls::StreamOwned::new(
        conn, socket,
    ))))
}

/// Without the feature: refused with a message naming it.
#[cfg(not(feature = "tls"))]
pub(super) fn unavailable() -> super::error::WireError {
    super::error::WireError::Config(
        "TLS (security.protocol SSL or SASL_SSL) needs this library built with the cargo \
         feature `tls`"
            .to_string(),
    )
}

/// The host part of "host:port" (IPv6 brackets removed).
#[cfg(any(feature = "tls", test))]
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// An I/O error from a TLS stream: a rustls refusal (certificate, alert) becomes
/// [`WireError::Tls`] with an explanation; anything else stays an I/O error or a timeout.
#[cfg(feature = "tls")]
pub(super) fn io_error(e: std::io::Error, addr: &str, what: &str) -> WireError {
    use std::io::ErrorKind;
    if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return WireError::Tls {
            broker: addr.to_string(),
            reason: explain(tls),
        };
    }
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => WireError::Timeout {
            what: format!("{what} with {addr}"),
        },
        kind => WireError::io(std::io::Error::new(
            kind,
            format!("{what} with {addr}: {e}"),
        )),
    }
}

#[cfg(feature = "tls")]
fn explain(e: &rustls::Error) -> String {
    use rustls::{AlertDescription, CertificateError, Error};
    match e {
        Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "the broker's certificate does not name the host connected to ({e}); fix the \
             certificate or the bootstrap address, or set \
             ssl.endpoint.identification.algorithm=none to skip only the host-name check"
        ),
        Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "the broker's certificate is not signed by a trusted CA ({e}); set ssl.ca.location \
             to the CA that signed it, or add that CA to the operating system's store"
        ),
        Error::AlertReceived(AlertDescription::CertificateRequired)
        | Error::AlertReceived(AlertDescription::HandshakeFailure)
        | Error::AlertReceived(AlertDescription::BadCertificate)
        | Error::AlertReceived(AlertDescription::UnknownCA) => format!(
            "the broker refused the handshake ({e}); if it requires client authentication, set \
             ssl.certificate.location and ssl.key.location to a certificate its CA signed"
        ),
        other => other.to_string(),
    }
}

#[cfg(feature = "tls")]
mod build {
    //! Turns the settings into a rustls client configuration.

    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

    use super::{TlsConfig, TlsFileError};

    fn file_error(setting: &'static str, path: &std::path::Path, problem: String) -> TlsFileError {
        TlsFileError {
            setting,
            path: Some(path.to_path_buf()),
            problem,
        }
    }

    fn certificates(
        setting: &'static str,
        path: &std::path::Path,
    ) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
            .map_err(|e| file_error(setting, path, format!("cannot read PEM certificates: {e}")))?;
        if certs.is_empty() {
            return Err(file_error(
                setting,
                path,
                "holds no `BEGIN CERTIFICATE` section".into(),
            ));
        }
        Ok(certs)
    }

    fn roots(config: &TlsConfig) -> Result<RootCertStore, TlsFileError> {
        let mut roots = RootCertStore::empty();
        match &config.ca_location {
            Some(path) => {
                for cert in certificates("ssl.ca.location", path)? {
                    roots.add(cert).map_err(|e| {
                        file_error("ssl.ca.location", path, format!("not a usable CA: {e}"))
                    })?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                for e in &found.errors {
                    log::debug!("operating system trust store: {e}");
                }
                let (added, _ignored) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err(TlsFileError {
                        setting: "ssl.ca.location",
                        path: None,
                        problem: "unset, and the operating system's trust store holds no usable \
                                  CA certificate; set ssl.ca.location"
                            .into(),
                    });
                }
            }
        }
        Ok(roots)
    }

    pub(super) fn client_config(config: &TlsConfig) -> Result<rustls::ClientConfig, TlsFileError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = Arc::new(roots(config)?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| TlsFileError {
                setting: "ssl.ca.location",
                path: config.ca_location.clone(),
                problem: e.to_string(),
            })?;
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsFileError {
                setting: "security.protocol",
                path: None,
                problem: e.to_string(),
            })?;
        let builder = if config.verify_hostname {
            builder.with_webpki_verifier(webpki)
        } else {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyHostName(webpki)))
        };
        match (&config.certificate_location, &config.key_location) {
            (Some(cert), Some(key)) => {
                let chain = certificates("ssl.certificate.location", cert)?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    file_error(
                        "ssl.key.location",
                        key,
                        format!("cannot read a PEM private key: {e}"),
                    )
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| TlsFileError {
                        setting: "ssl.key.location",
                        path: config.key_location.clone(),
                        problem: format!("the key does not fit the certificate: {e}"),
                    })
            }
            (None, None) => Ok(builder.with_no_client_auth()),
            (Some(_), None) | (None, Some(_)) => Err(TlsFileError {
                setting: "ssl.certificate.location",
                path: None,
                problem: "ssl.certificate.location and ssl.key.location go together".into(),
            }),
        }
    }

    /// `ssl.endpoint.identification.algorithm=none`: the chain is verified as usual, and only a
    /// certificate that does not name the host is accepted anyway.
    #[derive(Debug)]
    struct AnyHostName(Arc<WebPkiServerVerifier>);

    impl ServerCertVerifier for AnyHostName {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            match self.0.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.supported_verify_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_strips_the_port_and_brackets() {
        assert_eq!(host_of("broker-1.example:9093"), "broker-1.example");
        assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9093"), "::1");
    }

    #[test]
    fn tls_config_equality_ignores_the_cache() {
        let a = TlsConfig::new().with_ca_location("/ca.pem");
        let b = a.clone().with_hostname_verification(true);
        assert_eq!(a, b);
        assert_ne!(a, a.clone().with_hostname_verification(false));
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_files_that_are_missing_or_not_pem_name_their_setting() {
        let dir = std::env::temp_dir().join(format!("rg-tls-unit-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let junk = dir.join("junk.pem");
        let _ = std::fs::write(&junk, "not a certificate\n");
        let e = TlsConfig::new().with_ca_location(&junk).load().unwrap_err();
        assert_eq!(e.setting, "ssl.ca.location");
        let e = TlsConfig::new()
            .with_ca_location(dir.join("missing.pem"))
            .load()
            .unwrap_err();
        assert_eq!(e.setting, "ssl.ca.location");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
