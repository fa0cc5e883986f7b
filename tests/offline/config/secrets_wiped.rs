//! The library's copies of a secret are wiped before their memory is freed: a heap dump or a
//! reused allocation must not show a password that the configuration once held.
//!
//! How it is seen: the `offline` binary's global allocator zeroes every allocation it hands out (so
//! every byte it later reads is initialised), moves every reallocation (so the old block is
//! freed, as a growing buffer's old block is), and before freeing any block looks for each
//! test's marker secret in it, counting the blocks that still hold one. Each test uses its own
//! marker, so the tests can run in parallel; the markers live only in static strings and files,
//! never in a heap block the test itself frees.

use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};

use rebalance_guard::config::JaasConfig;
use rebalance_guard::consumer::ConsumerConfig;

/// The marker secrets, one per test. A block counts when it holds a marker's first
/// [`PREFIX`] bytes: a buffer that grew by reallocation leaves its old block holding only the
/// start of the secret.
const MARKERS: [&[u8]; 4] = [
    b"Zq9jas-marker-secret",
    b"Zq9fil-marker-secret",
    b"Zq9jfl-marker-secret",
    b"Zq9bld-marker-secret",
];

/// How much of a marker a freed block must hold to count (less than the smallest block a
/// growing `String` starts with).
const PREFIX: usize = 6;

static FREED_WITH_MARKER: [AtomicUsize; 4] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];

/// Counts the markers `block` still holds: the watcher of the `offline` binary's allocator
/// (`counting_alloc::Counting::watching`, installed in `main.rs`), called with every block about
/// to be freed once a test here called [`watch`]. That allocator zeroes every block it hands out
/// and moves every reallocation, so every byte read here is initialised.
pub fn scan(block: &[u8]) {
    for (marker, count) in MARKERS.iter().zip(&FREED_WITH_MARKER) {
        if block.windows(PREFIX).any(|w| w == &marker[..PREFIX]) {
            count.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Turns the search of freed blocks on for the rest of this test's process.
fn watch() {
    crate::counting_alloc::watch_frees();
}

fn freed_with(marker: usize) -> usize {
    FREED_WITH_MARKER[marker].load(Ordering::SeqCst)
}

#[test]
fn a_parsed_jaas_line_leaves_no_copy_of_its_password_in_freed_memory() {
    watch();
    const LINE: &str = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="Zq9jas-marker-secret";"#;
    for _ in 0..3 {
        let jaas = JaasConfig::parse(LINE).expect("parses");
        assert_eq!(jaas.password().expose().len(), MARKERS[0].len());
        drop(jaas);
    }
    // A refused line that holds the password where another option's value should be.
    const REFUSED: &str = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" other="Zq9jas-marker-secret";"#;
    assert!(JaasConfig::parse(REFUSED).is_err());
    assert_eq!(freed_with(0), 0, "freed blocks still holding the password");
}

/// A properties file with the password given directly (`sasl.password`), and one with it in a
/// `sasl.jaas.config` line continued over two lines.
#[test]
fn a_properties_file_leaves_no_copy_of_its_password_in_freed_memory() {
    watch();
    const TEXT: &str = "bootstrap.servers=127.0.0.1:9092\n\
                        group.id=orders\n\
                        security.protocol=SASL_PLAINTEXT\n\
                        sasl.mechanism=SCRAM-SHA-512\n\
                        sasl.username=alice\n\
                        sasl.password = Zq9fil-marker-secret   \n";
    const JAAS_TEXT: &str = "bootstrap.servers=127.0.0.1:9092\n\
                             group.id=orders\n\
                             security.protocol=SASL_PLAINTEXT\n\
                             sasl.mechanism=SCRAM-SHA-512\n\
                             sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \\\n\
                             \x20   required username=\"alice\" password=\"Zq9jfl-marker-secret\";\n";
    let dir = std::env::temp_dir().join(format!("rg-secrets-wiped-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("temp dir");
    for (file, text, marker) in [("direct", TEXT, 1), ("jaas", JAAS_TEXT, 2)] {
        let path = dir.join(file);
        fs::write(&path, text).expect("write");
        for _ in 0..3 {
            let config = ConsumerConfig::from_properties_file(&path).expect("builds");
            let sasl = config.sasl().expect("sasl");
            assert_eq!(sasl.password.expose().len(), MARKERS[marker].len());
            let client = config.client_config();
            drop((sasl, client, config));
        }
        assert_eq!(
            freed_with(marker),
            0,
            "{file}: freed blocks still holding the password"
        );
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_configuration_built_by_name_leaves_no_copy_of_its_password_in_freed_memory() {
    watch();
    for _ in 0..3 {
        let config = ConsumerConfig::builder()
            .set("bootstrap.servers", "127.0.0.1:9092")
            .set("group.id", "orders")
            .set("security.protocol", "SASL_PLAINTEXT")
            .set("sasl.mechanism", "PLAIN")
            .set("sasl.username", "alice")
            .set("sasl.password", "Zq9bld-marker-secret")
            .build()
            .expect("builds");
        let printed = format!("{config:?} {:?}", config.to_properties());
        assert!(!printed.contains("Zq9"), "{printed}");
        drop(printed);
        drop(config);
    }
    assert_eq!(freed_with(3), 0, "freed blocks still holding the password");
}
