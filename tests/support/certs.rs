//! Test certificates, made at run time with the `openssl` command (never committed): a CA, a
//! broker certificate for 127.0.0.1 and localhost, one for another host name, a client
//! certificate for mTLS, and a second CA that signed none of them.
//!
//! Why the `openssl` command and not a Rust crate: it is on every machine the tests run on and
//! keeps the dev-dependency tree small; the keys are EC P-256 in PKCS#8 PEM, which both Kafka's
//! PEM keystore and rustls read.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run openssl (it must be on PATH): {e}"));
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn self_signed_ca(dir: &Path, name: &str) {
    let (key, pem, subject) = (
        format!("{name}.key"),
        format!("{name}.pem"),
        format!("/CN={name}"),
    );
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "2",
            "-subj",
            &subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

fn leaf(dir: &Path, name: &str, san: &str, usage: &str) {
    let (key, csr, crt, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
        format!("{name}.ext"),
    );
    let subject = format!("/CN={name}");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &subject,
        ],
    );
    fs::write(
        dir.join(&ext),
        format!("subjectAltName={san}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n"),
    )
    .expect("write extensions");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ],
    );
    // Kafka's PEM keystore: the key and its chain in one file.
    let pem = [
        fs::read_to_string(dir.join(&key)).expect("key"),
        fs::read_to_string(dir.join(&crt)).expect("certificate"),
    ]
    .concat();
    fs::write(dir.join(format!("{name}.pem")), pem).expect("write keystore");
}

/// Writes into `dir`: `ca.pem`; `broker.pem` (key + certificate for `127.0.0.1` and
/// `localhost`); `other-host.pem` (for `other-host.invalid` only); `client.crt` and `client.key`
/// (client authentication); `untrusted-ca.pem` (a CA that signed nothing the broker shows).
pub fn generate(dir: &Path) {
    fs::create_dir_all(dir).expect("create the certificate directory");
    self_signed_ca(dir, "ca");
    self_signed_ca(dir, "untrusted-ca");
    leaf(dir, "broker", "DNS:localhost,IP:127.0.0.1", "serverAuth");
    leaf(dir, "other-host", "DNS:other-host.invalid", "serverAuth");
    leaf(dir, "client", "DNS:rg-test-client", "clientAuth");
}
