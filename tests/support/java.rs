//! How a test starts one of the Java programs (`scripts/Peer.java`, `scripts/SharePeer.java`,
//! `scripts/ProducerPeer.java`, `scripts/TxnPeer.java`):
//! from the classes `scripts/setup-test-env` compiled, never from the source.
//!
//! Why compiled once: `java scripts/Peer.java` (a single-file source launch) compiles the program
//! in memory at every start, about 2 s of CPU on an idle two-core machine and several times that
//! in a loaded run, for each of the dozens of Java members a run starts. `scripts/setup-test-env`
//! compiles the programs with `javac` against the pinned kafka-clients into
//! `.cache/java/classes-<KAFKA_CLIENTS_VERSION>/`, again whenever a source is newer than its class.
//!
//! Why no fallback to the in-memory compile: classes missing or older than their source fail the
//! test at once with a message that names `scripts/setup-test-env`, so a run (CI included) proves
//! the setup path, and a member never runs code older than the source a reader sees.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use super::kafka::pinned;
use super::repo_root;

/// JVM flags for a Java peer: start fast (C1 only, serial GC, a small heap) on a machine shared
/// with brokers and other members.
const JAVA_FLAGS: &[&str] = &[
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Xss512k",
    "-Xmx192m",
    "-Djava.awt.headless=true",
];

/// The directory `scripts/setup-test-env` compiles the Java programs into.
pub fn classes_dir() -> PathBuf {
    let version = pinned("KAFKA_CLIENTS_VERSION");
    repo_root().join(format!(".cache/java/classes-{version}"))
}

/// `java <flags> -cp <classes>:<kafka-clients> <program>`, ready for the program's own flags.
/// `program` is the class and source name (`Peer` for `scripts/Peer.java`).
///
/// Panics, naming `scripts/setup-test-env`, when the program's class is missing or older than
/// its source (see the module documentation).
pub fn java_program(program: &str) -> Command {
    let source = repo_root().join(format!("scripts/{program}.java"));
    let class = classes_dir().join(format!("{program}.class"));
    let source_time = modified(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    match modified(&class) {
        Ok(class_time) if class_time >= source_time => {}
        Ok(_) => panic!(
            "{} is older than {}: run scripts/setup-test-env, which compiles the Java programs \
             again when a source changed",
            class.display(),
            source.display()
        ),
        Err(e) => panic!(
            "{}: {e}: run scripts/setup-test-env, which compiles scripts/{program}.java with javac",
            class.display()
        ),
    }
    let mut cmd = Command::new("java");
    cmd.args(JAVA_FLAGS)
        .arg("-cp")
        .arg(format!(
            "{}:{}",
            classes_dir().display(),
            clients_classpath()
        ))
        .arg(program);
    cmd
}

fn modified(path: &Path) -> std::io::Result<SystemTime> {
    fs::metadata(path)?.modified()
}

/// The classpath of the pinned kafka-clients (and a log4j2 binding), written by
/// `scripts/setup-test-env`.
fn clients_classpath() -> String {
    let version = pinned("KAFKA_CLIENTS_VERSION");
    let path = repo_root().join(format!(".cache/kafka/clients-{version}/classpath"));
    fs::read_to_string(&path)
        .unwrap_or_else(|e| {
            panic!(
                "read {}: {e} (run scripts/setup-test-env first)",
                path.display()
            )
        })
        .trim()
        .to_string()
}
