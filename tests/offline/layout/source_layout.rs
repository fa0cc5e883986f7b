//! The source layout's rules, checked on the crate's own `src/` tree (std only, no broker):
//!
//! 1. No two sibling modules (children of one parent) use each other, directly or through their
//!    own children. A child may use its parent (`super::`) and a parent its children; two
//!    siblings only one way. Where one type's `impl` is split over several files, those files
//!    are children of the module that declares the type (as in `wire/client/`).
//! 2. The top-level modules are layers, bottom first: `basics` (the vocabulary every layer
//!    names: `TopicPartition`, `ErrorKind`), `guard`, `wire`, `group`, `config` (the client
//!    settings both consumers read), `metrics`, then `consumer` and `share` side by side, then
//!    `testing` and `fuzzing`. A module uses only layers below its own: no arrow runs up, and
//!    the two consumers use neither each other. `lib.rs` is no layer: a path through one of its
//!    re-exports (`crate::TopicPartition`) is a use of the module it re-exports.
//! 3. No file has more than 900 lines outside its tests (`#[cfg(test)]` modules, files named
//!    `tests.rs`, anything under a `tests/` folder).
//! 4. Each folder's module file (`lib.rs`, `mod.rs`, or `name.rs` beside the folder `name/`)
//!    names every file and folder in it in its top doc comment: the map a reader starts from.
//!
//! What counts as a use: every path that starts with `crate::`, `super::` or `self::` outside
//! test code, doc comments included (an intra-doc link makes the docs depend on its target),
//! resolved to the longest module of that path that exists; and the names inside a
//! `use super::{a, b}` or `use crate::x::{a, b}` group. A path through a re-export
//! (`crate::wire::Client`) is a use of the module that re-exports it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// A module's path below the crate root, `["wire", "client"]`; the root itself is empty.
type ModPath = Vec<String>;

const MAX_NON_TEST_LINES: usize = 900;

/// Every `.rs` file under `src/`: (path relative to `src/` with `/` separators, text), sorted.
fn source_files() -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for path in entries.map(|entry| entry.expect("a directory entry").path()) {
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let rel = path.strip_prefix(root).expect("below src/");
                let rel = rel.to_string_lossy().replace('\\', "/");
                let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
                out.push((rel, text));
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &src, &mut files);
    files.sort();
    assert!(files.len() > 10, "only {} files under src/", files.len());
    files
}

/// `wire/client/mod.rs` is `["wire", "client"]`, `wire/error.rs` `["wire", "error"]`, `lib.rs`
/// the root.
fn module_path(rel: &str) -> ModPath {
    let mut path: ModPath = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
        path.pop();
    }
    path
}

/// A test file: `tests.rs`, or a file under a `tests/` folder.
fn is_test_file(module: &ModPath) -> bool {
    module.iter().any(|name| name == "tests")
}

/// `code` without its `#[cfg(test)] mod name { .. }` blocks and `#[cfg(test)] mod name;` lines.
/// The block ends where its braces balance (braces inside strings are counted too: test modules
/// here have balanced ones).
fn strip_tests(code: &str) -> String {
    let lines: Vec<&str> = code.lines().collect();
    let mut kept = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let next = lines.get(i + 1).map_or("", |line| line.trim());
        // `pub(crate) mod tests {` and `mod tests {` alike.
        let next = match next.strip_prefix("pub") {
            Some(rest) => rest.split_once(' ').map_or("", |(_, item)| item),
            None => next,
        };
        if lines[i].trim() == "#[cfg(test)]" && next.starts_with("mod ") {
            if next.ends_with(';') {
                i += 2;
                continue;
            }
            if next.contains('{') {
                let mut depth = 0;
                i += 1;
                while i < lines.len() {
                    depth += lines[i].matches('{').count() as i64;
                    depth -= lines[i].matches('}').count() as i64;
                    i += 1;
                    if depth <= 0 {
                        break;
                    }
                }
                continue;
            }
        }
        kept.push(lines[i]);
        i += 1;
    }
    kept.join("\n")
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The modules that `code`, the non-test code of module `from`, uses (see the file's doc).
fn uses(from: &ModPath, code: &str, modules: &BTreeSet<ModPath>) -> BTreeSet<ModPath> {
    let paths = rooted_paths(code).into_iter();
    let mut used: BTreeSet<ModPath> = paths.filter_map(|p| resolve(from, &p, modules)).collect();
    // Groups: `use super::{a, b}` and `use crate::x::{a, b}` name modules `a` and `b`.
    for (_, after) in code
        .match_indices("use ")
        .map(|(i, _)| code.split_at(i + 4))
    {
        let Some((head, body)) = after.split_once("::{") else {
            continue;
        };
        let head: Vec<&str> = head.split("::").collect();
        let base = match head[..] {
            ["super"] => from[..from.len().saturating_sub(1)].to_vec(),
            ["crate", ..] if head.iter().all(|s| !s.is_empty() && s.chars().all(is_word)) => {
                head[1..].iter().map(|s| s.to_string()).collect()
            }
            _ => continue,
        };
        let body = body.split('}').next().unwrap_or("");
        for name in body.split(|c| !is_word(c)).filter(|name| !name.is_empty()) {
            let module = [base.clone(), vec![name.to_string()]].concat();
            if modules.contains(&module) {
                used.insert(module);
            }
        }
    }
    used
}

/// Every path of two or more segments that starts with `crate::`, `super::` or `self::` (also
/// `$crate::`, not `myself::`), as its segments.
fn rooted_paths(code: &str) -> Vec<Vec<&str>> {
    let mut paths = Vec::new();
    let mut at = 0;
    while let Some(offset) = code[at..].find(['c', 's']) {
        at += offset;
        let rooted = ["crate::", "super::", "self::"]
            .iter()
            .any(|r| code[at..].starts_with(r));
        if !rooted || code[..at].ends_with(is_word) {
            at += 1;
            continue;
        }
        let mut segments = Vec::new();
        loop {
            let len = code[at..]
                .find(|c: char| !is_word(c))
                .unwrap_or(code.len() - at);
            segments.push(&code[at..at + len]);
            at += len;
            match code[at..].strip_prefix("::") {
                Some(rest) if rest.starts_with(is_word) => at += 2,
                _ => break,
            }
        }
        // A lone root (`use super::{a, b}`) is a group, read by `uses`.
        if segments.len() > 1 {
            paths.push(segments);
        }
    }
    paths
}

/// The module that `path`, written in module `from`, lands in: the longest prefix of its target
/// that is a module (`crate::wire::Client` lands in `wire`).
fn resolve(from: &ModPath, path: &[&str], modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let (mut target, mut rest) = match path.split_first() {
        Some((&"crate", rest)) => (Vec::new(), rest),
        _ => (from.clone(), path),
    };
    while let Some((&root @ ("super" | "self"), tail)) = rest.split_first() {
        if root == "super" {
            target.pop();
        }
        rest = tail;
    }
    target.extend(rest.iter().map(|s| s.to_string()));
    let mut prefixes = (1..=target.len()).rev().map(|k| &target[..k]);
    prefixes
        .find(|prefix| modules.contains(*prefix))
        .map(<[String]>::to_vec)
}

/// The circles of sibling modules: each strongly connected component (of two or more siblings)
/// of the "uses" graph among the children of one folder, its members sorted, the components in
/// order. A use from or of a descendant counts for the sibling it is under. Pairs that use each
/// other are the smallest circles; a longer one (a -> b -> c -> a) hides from a check of pairs.
fn sibling_cycles(uses: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (from, targets) in uses {
        for to in targets {
            // Where the two paths part: the two children of their deepest common ancestor.
            if let Some(k) = (0..from.len().min(to.len())).find(|&k| from[k] != to[k]) {
                edges
                    .entry(from[..=k].to_vec())
                    .or_default()
                    .insert(to[..=k].to_vec());
            }
        }
    }
    // Tarjan's algorithm; siblings of different folders are never joined by an edge, so one
    // pass over the whole graph finds each folder's components.
    struct Walk<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<ModPath, usize>,
        low: BTreeMap<ModPath, usize>,
        stack: Vec<ModPath>,
        on_stack: BTreeSet<ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: &ModPath) {
            let n = self.index.len();
            self.index.insert(v.clone(), n);
            self.low.insert(v.clone(), n);
            self.stack.push(v.clone());
            self.on_stack.insert(v.clone());
            let next: Vec<ModPath> = self
                .edges
                .get(v)
                .map(|w| w.iter().cloned().collect())
                .unwrap_or_default();
            for w in next {
                if !self.index.contains_key(&w) {
                    self.visit(&w);
                    let low = self.low[v].min(self.low[&w]);
                    self.low.insert(v.clone(), low);
                } else if self.on_stack.contains(&w) {
                    let low = self.low[v].min(self.index[&w]);
                    self.low.insert(v.clone(), low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(&w);
                    let root = &w == v;
                    component.push(w);
                    if root {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}

/// The layers, bottom first; the top-level modules of one layer stand side by side and use
/// neither each other (rule 2 of the file's doc).
const LAYERS: &[&[&str]] = &[
    &["basics"],
    &["guard"],
    &["wire"],
    &["group"],
    &["config"],
    &["metrics"],
    &["producer"],
    &["consumer", "share"],
    &["fuzzing"],
    &["testing"],
];

/// What `lib.rs` re-exports: each name (`TopicPartition`) and the module it comes from
/// (`["basics"]`), read from its `pub use a::b::{X, Y};` and `pub use a::X;` lines.
fn root_reexports(lib: &str) -> BTreeMap<String, ModPath> {
    let mut names = BTreeMap::new();
    for item in lib.split(';') {
        let Some(path) = item.trim().strip_prefix("pub use ") else {
            continue;
        };
        let path = path.split_whitespace().collect::<Vec<_>>().join(" ");
        let (module, group) = match path.split_once("::{") {
            Some((module, group)) => (module, group.trim_end_matches('}')),
            None => path.rsplit_once("::").unwrap_or(("", &path)),
        };
        let module: ModPath = module
            .trim_start_matches("crate::")
            .split("::")
            .map(String::from)
            .collect();
        for name in group
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            let name = name.rsplit(" as ").next().unwrap_or(name);
            names.insert(name.to_string(), module.clone());
        }
    }
    names
}

/// The modules that `code` reaches through the crate root's re-exports: `crate::TopicPartition`
/// and `use crate::{ErrorKind, TopicPartition}` name the modules those items come from.
fn uses_through_root(code: &str, reexports: &BTreeMap<String, ModPath>) -> BTreeSet<ModPath> {
    let mut used: BTreeSet<ModPath> = rooted_paths(code)
        .into_iter()
        .filter(|path| path[0] == "crate")
        .filter_map(|path| reexports.get(path[1]).cloned())
        .collect();
    for (at, _) in code.match_indices("crate::{") {
        if code[..at].ends_with(is_word) {
            continue;
        }
        let body = code[at + "crate::{".len()..]
            .split('}')
            .next()
            .unwrap_or("");
        let names = body.split(|c| !is_word(c)).filter(|name| !name.is_empty());
        used.extend(names.filter_map(|name| reexports.get(name).cloned()));
    }
    used
}

/// Each use that runs sideways or up between layers: (user, used), as top-level module names,
/// sorted; also any top-level module [`LAYERS`] leaves out, used by itself.
fn layer_violations(uses: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<(String, String)> {
    let layer = |name: &str| LAYERS.iter().position(|layer| layer.contains(&name));
    let mut found = BTreeSet::new();
    for (from, targets) in uses {
        let Some(from) = from.first() else {
            continue; // the crate root declares and re-exports, it is no layer
        };
        let Some(user) = layer(from) else {
            found.insert((from.clone(), from.clone()));
            continue;
        };
        for to in targets.iter().filter_map(|to| to.first()) {
            let ok = to == from || layer(to).is_some_and(|used| used < user);
            if !ok {
                found.insert((from.clone(), to.clone()));
            }
        }
    }
    found.into_iter().collect()
}

/// For each folder whose module file's top doc comment leaves out some of its files or
/// folders: that module file and the names it leaves out.
fn unmapped_files(files: &[(String, String)]) -> Vec<String> {
    let texts: BTreeMap<&str, &str> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    // Folder ("" for src/ itself) -> the names of its files (without `.rs`) and folders.
    let mut children: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for rel in texts.keys() {
        let parts: Vec<&str> = rel.split('/').collect();
        for depth in 0..parts.len() {
            let name = parts[depth].trim_end_matches(".rs");
            if !(depth + 1 == parts.len() && matches!(name, "mod" | "lib")) {
                let folder = parts[..depth].join("/");
                children.entry(folder).or_default().insert(name.to_string());
            }
        }
    }
    let mut offenders = Vec::new();
    for (folder, names) in &children {
        let module_file = match folder.as_str() {
            "" => "lib.rs".to_string(),
            _ if texts.contains_key(format!("{folder}/mod.rs").as_str()) => {
                format!("{folder}/mod.rs")
            }
            _ => format!("{folder}.rs"),
        };
        let Some(text) = texts.get(module_file.as_str()) else {
            offenders.push(format!(
                "{folder}/: no module file ({module_file} or {folder}/mod.rs)"
            ));
            continue;
        };
        let doc: String = text
            .lines()
            .map(str::trim)
            .take_while(|line| line.is_empty() || line.starts_with("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let named = |name: &str| {
            doc.match_indices(name).any(|(i, _)| {
                !doc[..i].ends_with(is_word) && !doc[i + name.len()..].starts_with(is_word)
            })
        };
        let missing: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| !named(n))
            .collect();
        if !missing.is_empty() {
            offenders.push(format!("{module_file}: {}", missing.join(", ")));
        }
    }
    offenders
}

fn show(module: &ModPath) -> String {
    module.join("/")
}

#[test]
fn the_checks_read_small_samples_as_intended() {
    let m = |path: &str| -> ModPath { path.split('/').map(String::from).collect() };

    assert_eq!(module_path("wire/client/mod.rs"), m("wire/client"));
    assert_eq!(module_path("wire/error.rs"), m("wire/error"));
    assert!(module_path("lib.rs").is_empty());
    assert!(is_test_file(&m("group/session/tests/coordinator")));

    let code = "use super::a::X;\n#[cfg(test)]\nmod tests {\n    use super::b::Y;\n    \
                fn f() {\n    }\n}\n#[cfg(test)]\nmod more;\n#[cfg(test)]\n\
                pub(crate) mod tests {}\nfn g() {}";
    assert_eq!(strip_tests(code), "use super::a::X;\nfn g() {}");

    let modules: BTreeSet<ModPath> = ["wire", "wire/a", "wire/b", "wire/c", "wire/c/d", "wire/e"]
        .into_iter()
        .map(m)
        .collect();
    let code = "use super::b::Thing;\n//! see [`crate::wire::c::d::f`]\n$crate::wire::e::X\n\
                use super::{c, Missing};\nmyself::b::z; self.x; crate::wire::Client";
    let expected: BTreeSet<ModPath> = ["wire", "wire/b", "wire/c", "wire/c/d", "wire/e"]
        .into_iter()
        .map(m)
        .collect();
    assert_eq!(uses(&m("wire/a"), code, &modules), expected);
    let expected: BTreeSet<ModPath> = [m("wire"), m("wire/a"), m("wire/c")].into();
    assert_eq!(
        uses(
            &m("wire/b/x"),
            "use super::super::a;\nuse crate::wire::{c, z};",
            &modules
        ),
        expected
    );

    let graph: BTreeMap<ModPath, BTreeSet<ModPath>> = [
        (m("a/x"), [m("b/y")].into()),    // through children: a uses b
        (m("b"), [m("a")].into()),        // and b uses a
        (m("a"), [m("a/x")].into()),      // a parent may use its child
        (m("a/x/deep"), [m("a")].into()), // and a child its ancestors
        (m("c"), [m("a")].into()),        // one way only
    ]
    .into();
    assert_eq!(sibling_cycles(&graph), [vec![m("a"), m("b")]]);
    // A circle of three siblings (no pair of them uses each other), beside an unrelated one.
    let graph: BTreeMap<ModPath, BTreeSet<ModPath>> = [
        (m("g/a"), [m("g/b")].into()),
        (m("g/b/x"), [m("g/c")].into()),
        (m("g/c"), [m("g/a/y")].into()),
        (m("g/d"), [m("g/a")].into()),
        (m("h"), [m("g")].into()),
    ]
    .into();
    assert_eq!(sibling_cycles(&graph), [vec![m("g/a"), m("g/b"), m("g/c")]]);

    let lib = "pub mod wire;\npub use basics::{ErrorKind, TopicPartition};\n\
               pub use consumer::{\n    Batch,\n    Consumer as C,\n};\npub use wire::Client;";
    let reexports = root_reexports(lib);
    assert_eq!(reexports["TopicPartition"], m("basics"));
    assert_eq!(reexports["C"], m("consumer"));
    assert_eq!(reexports["Client"], m("wire"));
    assert_eq!(reexports.len(), 5);
    let code =
        "use crate::{ErrorKind, wire};\nfn f(_: crate::TopicPartition) {}\nmy_crate::{Batch}";
    assert_eq!(uses_through_root(code, &reexports), [m("basics")].into());
    let graph: BTreeMap<ModPath, BTreeSet<ModPath>> = [
        (vec![], [m("consumer"), m("wire")].into()), // the root: no layer
        (m("guard/x"), [m("basics"), m("guard")].into()), // down, and inside itself
        (m("wire"), [m("group/y")].into()),          // up
        (m("share"), [m("consumer"), m("group")].into()), // sideways, and down
        (m("elsewhere"), [m("basics")].into()),      // in no layer
    ]
    .into();
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(
        layer_violations(&graph),
        [
            pair("elsewhere", "elsewhere"),
            pair("share", "consumer"),
            pair("wire", "group")
        ]
    );

    let files: Vec<(String, String)> = [
        (
            "lib.rs",
            "//! The crate: `a` and `b/`; not `e`.\n\n//! More.\nmod a;\n//! c d",
        ),
        ("a.rs", ""),
        ("b/mod.rs", "//! Only `c.rs`.\n"),
        ("b/c.rs", ""),
        ("b/dd.rs", "//! d"),
        ("f/g.rs", ""),
    ]
    .map(|(p, t)| (p.to_string(), t.to_string()))
    .into();
    assert_eq!(
        unmapped_files(&files),
        [
            "lib.rs: f",
            "b/mod.rs: dd",
            "f/: no module file (f.rs or f/mod.rs)"
        ]
    );
}

#[test]
fn no_sibling_modules_use_each_other_around_a_circle() {
    let files = source_files();
    let modules: BTreeSet<ModPath> = files.iter().map(|(rel, _)| module_path(rel)).collect();
    let graph: BTreeMap<ModPath, BTreeSet<ModPath>> = files
        .iter()
        .map(|(rel, text)| (module_path(rel), text))
        .filter(|(module, _)| !is_test_file(module))
        .map(|(module, text)| {
            let used = uses(&module, &strip_tests(text), &modules);
            (module, used)
        })
        .collect();
    let cycles: Vec<String> = sibling_cycles(&graph)
        .iter()
        .map(|circle| {
            let names: Vec<String> = circle.iter().map(show).collect();
            format!("  {}", names.join(" <-> "))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "{} circle(s) of sibling modules that use each other, directly or around (make one the \
         other's child, move what they need down into the lowest one, or pass it in as a \
         parameter):\n{}",
        cycles.len(),
        cycles.join("\n")
    );
}

#[test]
fn no_layer_uses_one_above_it_or_beside_it() {
    let files = source_files();
    let modules: BTreeSet<ModPath> = files.iter().map(|(rel, _)| module_path(rel)).collect();
    let lib = files
        .iter()
        .find(|(rel, _)| rel == "lib.rs")
        .expect("src/lib.rs");
    let reexports = root_reexports(&lib.1);
    let graph: BTreeMap<ModPath, BTreeSet<ModPath>> = files
        .iter()
        .map(|(rel, text)| (module_path(rel), strip_tests(text)))
        .filter(|(module, _)| !is_test_file(module))
        .map(|(module, code)| {
            let mut used = uses(&module, &code, &modules);
            used.extend(uses_through_root(&code, &reexports));
            (module, used)
        })
        .collect();
    let order: Vec<String> = LAYERS.iter().map(|layer| layer.join(" | ")).collect();
    let wrong: Vec<String> = layer_violations(&graph)
        .iter()
        .map(|(from, to)| match from == to {
            true => format!("  {from}: in no layer (add it to LAYERS)"),
            false => format!("  {from} -> {to}"),
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} use(s) that run up or sideways between the layers (bottom first: {}; a module \
         uses only layers below its own: move what both need down, or pass it in from above):\n{}",
        wrong.len(),
        order.join(" < "),
        wrong.join("\n")
    );
}

#[test]
fn no_source_file_has_more_than_900_lines_outside_its_tests() {
    let big: Vec<String> = source_files()
        .iter()
        .filter(|(rel, _)| !is_test_file(&module_path(rel)))
        .map(|(rel, text)| (strip_tests(text).lines().count(), rel))
        .filter(|(lines, _)| *lines > MAX_NON_TEST_LINES)
        .map(|(lines, rel)| format!("  src/{rel}: {lines} lines"))
        .collect();
    assert!(
        big.is_empty(),
        "{} file(s) have more than {MAX_NON_TEST_LINES} lines outside their tests (split them \
         into child modules):\n{}",
        big.len(),
        big.join("\n")
    );
}

#[test]
fn every_folder_map_names_each_of_its_files() {
    let offenders: Vec<String> = unmapped_files(&source_files())
        .iter()
        .map(|offender| format!("  src/{offender}"))
        .collect();
    assert!(
        offenders.is_empty(),
        "{} module file(s) whose top doc comment (the folder's map) does not name every file \
         and folder beside it (add one line each saying what it is for):\n{}",
        offenders.len(),
        offenders.join("\n")
    );
}
