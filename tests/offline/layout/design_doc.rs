//! `docs/DESIGN.md` as built, checked without a broker (std only):
//!
//! 1. Every test its invariant table names exists: each backticked name in the table's "tests"
//!    column is a module of a test tier (`offline::guard::verification`, a file or folder under
//!    `tests/`), a broker's instance of a test (`kafka::name`, `{kafka,mock}::name`: an entry of
//!    that broker's module in an `on_brokers!` block), or a function defined somewhere under
//!    `tests/` or `src/` (`{kafka,mock}` alternatives expanded, a trailing `*` read as a prefix),
//!    so the table cannot point an auditor at a test that was renamed or deleted.
//! 2. Every hop of the paths it lists (numbered items of "Paths an auditor follows",
//!    `` `src/FILE.rs:LINE` `NAME` ``) names a function (or the type) defined at that line of that
//!    file, so the counts a reader checks are the code's. `scripts/design-hops` rewrites the line
//!    numbers after code moved.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn design() -> String {
    fs::read_to_string(root().join("docs/DESIGN.md")).expect("docs/DESIGN.md")
}

/// Every `.rs` file below `dir`, as text.
fn rust_sources(dir: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}")));
        }
    }
}

/// The names of every function defined under `tests/` and `src/`.
fn defined_functions() -> BTreeSet<String> {
    let mut texts = Vec::new();
    rust_sources(&root().join("tests"), &mut texts);
    rust_sources(&root().join("src"), &mut texts);
    let mut names = BTreeSet::new();
    for text in &texts {
        for (at, _) in text.match_indices("fn ") {
            let preceded_by_word = text[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            if preceded_by_word {
                continue;
            }
            let name: String = text[at + 3..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// The brokers a test can run on, as `on_brokers!` names their modules.
const BROKER_MODULES: [&str; 4] = ["kafka", "kafka3", "mock", "tansu"];

/// Every `(broker module, test name)` under `tests/`, as the tiers write them: an
/// `on_brokers!` block (`crate::on_brokers! {` at the start of a line, a broker's module at four
/// spaces, its entries at eight: `name,` or `name => call,`), or a broker's module written out
/// (`mod kafka {` at the start of a line), whose tests are its `fn name(` at four spaces and the
/// entries of the `on_brokers!` call inside it at eight.
fn broker_instances() -> BTreeSet<(String, String)> {
    let mut texts = Vec::new();
    rust_sources(&root().join("tests"), &mut texts);
    let mut found = BTreeSet::new();
    for text in &texts {
        let mut block = false;
        let mut call = false;
        let mut module: Option<&str> = None;
        for line in text.lines() {
            if line == "crate::on_brokers! {" {
                block = true;
                continue;
            }
            if let Some(name) = line
                .strip_prefix("mod ")
                .and_then(|l| l.strip_suffix(" {"))
                .filter(|name| BROKER_MODULES.contains(name))
            {
                module = Some(name);
                continue;
            }
            if line == "}" {
                block = false;
                call = false;
                module = None;
                continue;
            }
            if block {
                if let Some(name) = line
                    .strip_prefix("    ")
                    .and_then(|l| l.strip_suffix(" {"))
                    .filter(|name| BROKER_MODULES.contains(name))
                {
                    module = Some(name);
                    continue;
                }
            }
            let Some(module) = module else { continue };
            if line == "    crate::on_brokers!(" {
                call = true;
                continue;
            }
            if line == "    );" {
                call = false;
                continue;
            }
            let (rest, ends) = match (line.strip_prefix("    fn "), line.strip_prefix("        ")) {
                (Some(rest), _) => (rest, &["("][..]),
                (None, Some(rest)) if block || call => (rest, &[",", " =>"][..]),
                _ => continue,
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && ends.iter().any(|end| rest[name.len()..].starts_with(end)) {
                found.insert((module.to_string(), name));
            }
        }
    }
    found
}

/// Whether a tier's module (`offline::guard::verification`) is a file or a folder under `tests/`.
fn tier_module_exists(path: &str) -> bool {
    let rel = path.replace("::", "/");
    let tests = root().join("tests");
    tests.join(format!("{rel}.rs")).exists() || tests.join(&rel).join("mod.rs").exists()
}

/// The text between backticks, in order.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// `a_{kafka,mock}` -> `a_kafka`, `a_mock` (one brace group, as the table writes them).
fn expand(name: &str) -> Vec<String> {
    match (name.find('{'), name.find('}')) {
        (Some(open), Some(close)) if open < close => name[open + 1..close]
            .split(',')
            .map(|alt| format!("{}{}{}", &name[..open], alt, &name[close + 1..]))
            .collect(),
        _ => vec![name.to_string()],
    }
}

/// Whether a backticked token of the tests column is meant as a test's name: snake case with at
/// least two underscores (the table's module paths, file paths, settings and commands have
/// `::`, `/`, `.`, `=` or spaces).
fn is_test_name(token: &str) -> bool {
    let core: String = token.chars().filter(|c| !"{},*".contains(*c)).collect();
    !core.is_empty()
        && core
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && core.matches('_').count() >= 2
}

/// The "tests" cells of the invariant table (its rows' last column).
fn invariant_test_cells(design: &str) -> Vec<String> {
    let start = design
        .find("## Invariants")
        .expect("DESIGN.md has an \"Invariants\" section");
    let section = &design[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    section[..end]
        .lines()
        .filter(|line| line.starts_with("| ") && !line.starts_with("| ---"))
        .skip(1) // the header row
        .filter_map(|line| {
            let cells: Vec<&str> = line
                .trim_end()
                .trim_end_matches('|')
                .trim_end()
                .split(" | ")
                .collect();
            (cells.len() >= 3).then(|| cells[cells.len() - 1].to_string())
        })
        .collect()
}

#[test]
fn every_test_the_invariant_table_names_exists() {
    let design = design();
    let functions = defined_functions();
    let instances = broker_instances();
    let cells = invariant_test_cells(&design);
    assert!(
        cells.len() >= 20,
        "the invariant table has {} rows",
        cells.len()
    );
    let mut missing = Vec::new();
    let mut checked = 0;
    for cell in &cells {
        for token in backticked(cell) {
            if ["offline::", "brokers::", "clusters::"]
                .iter()
                .any(|tier| token.starts_with(tier))
            {
                checked += 1;
                if !tier_module_exists(token) {
                    missing.push(token.to_string());
                }
                continue;
            }
            let (brokers, name) = match token.split_once("}::") {
                Some((head, name)) if token.starts_with('{') => {
                    (head[1..].split(',').collect::<Vec<_>>(), name)
                }
                _ => match token.split_once("::") {
                    Some((broker, name)) if BROKER_MODULES.contains(&broker) => {
                        (vec![broker], name)
                    }
                    _ => (Vec::new(), token),
                },
            };
            if !is_test_name(name) {
                continue;
            }
            for name in expand(name) {
                let matches = |f: &str| match name.strip_suffix('*') {
                    Some(prefix) => f.starts_with(prefix),
                    None => f == name,
                };
                if brokers.is_empty() {
                    checked += 1;
                    if !functions.iter().any(|f| matches(f)) {
                        missing.push(name.clone());
                    }
                }
                for broker in &brokers {
                    checked += 1;
                    if !BROKER_MODULES.contains(broker)
                        || !instances.iter().any(|(b, f)| b == broker && matches(f))
                    {
                        missing.push(format!("{broker}::{name}"));
                    }
                }
            }
        }
    }
    assert!(
        checked >= 50,
        "only {checked} test names read from the table"
    );
    assert!(
        missing.is_empty(),
        "docs/DESIGN.md's invariant table names tests that do not exist: {missing:?}"
    );
}

/// The hops of the numbered lists of the "Paths an auditor follows" section: each
/// `` `src/FILE.rs:LINE` `NAME` `` pair, and `` `:LINE` `NAME` `` for another line of the file
/// the list item named last.
fn path_hops(design: &str) -> Vec<(String, usize, String)> {
    let start = design
        .find("## Paths an auditor follows")
        .expect("DESIGN.md has a \"Paths an auditor follows\" section");
    let section = &design[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    let mut hops = Vec::new();
    for line in section[..end].lines() {
        let numbered = line
            .split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if !numbered {
            continue;
        }
        let tokens = backticked(line);
        let mut file = String::new();
        for pair in tokens.windows(2) {
            let Some((place, number)) = pair[0].rsplit_once(':') else {
                continue;
            };
            let Ok(number) = number.parse::<usize>() else {
                continue;
            };
            if place.starts_with("src/") && place.ends_with(".rs") {
                file = place.to_string();
            } else if !place.is_empty() || file.is_empty() {
                continue;
            }
            hops.push((file.clone(), number, pair[1].to_string()));
        }
    }
    hops
}

#[test]
fn every_hop_of_the_paths_names_the_function_at_its_line() {
    let hops = path_hops(&design());
    assert!(
        hops.len() >= 40,
        "only {} file:line hops in docs/DESIGN.md",
        hops.len()
    );
    let mut wrong = Vec::new();
    for (file, number, name) in &hops {
        let text = fs::read_to_string(root().join(file)).unwrap_or_default();
        let at = text.lines().nth(number.wrapping_sub(1)).unwrap_or("");
        let bare = name.rsplit("::").next().unwrap_or(name);
        let defines = ["fn ", "struct ", "enum ", "trait "]
            .iter()
            .any(|kind| at.contains(&format!("{kind}{bare}")));
        if !defines {
            wrong.push(format!(
                "{file}:{number} `{name}`: the line is {:?}",
                at.trim()
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "hops in docs/DESIGN.md that do not name what is defined at their line:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_readers_of_the_table_read_samples_as_intended() {
    assert_eq!(expand("a_b_{kafka,mock}"), vec!["a_b_kafka", "a_b_mock"]);
    assert!(is_test_name(
        "commit_after_a_batch_is_last_plus_one_{kafka,mock,tansu}"
    ));
    assert!(is_test_name(
        "batch_sizing_keeps_a_slow_handler_in_the_group_*"
    ));
    assert!(!is_test_name("group::session::tests"));
    assert!(!is_test_name("processing.order=key"));
    assert!(!is_test_name("cargo bench --bench guard threads_"));
    let table = "## Invariants\n\n| invariant | where | tests |\n| --- | --- | --- |\n\
                 | a | b | `x_y_z`; `consumer_loop` |\n\n## Next\n| q | r | `not_in_table_x` |\n";
    assert_eq!(
        invariant_test_cells(table),
        vec!["`x_y_z`; `consumer_loop`"]
    );
}
