//! The user's documentation, compiled. Each module below is one markdown file of the repository
//! (README.md and the guide under docs/) included as its doc comment, so that
//! `cargo test -p user-build --doc --features tls` builds every Rust block in them
//! against the library as an application depends on it (without the internal `test-support`
//! feature), and runs those that need no broker (the others are `no_run`). A block that names
//! an item the public API lacks, or that no longer compiles, fails that command.
//!
//! The modules exist only for doc tests (`cfg(doctest)`): nothing here is built otherwise.
//!
//! A page added to docs/ without a module here would escape the check; this example fails then:
//!
//! ```
//! let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
//! let this = std::fs::read_to_string(format!("{root}/user-build/src/lib.rs")).unwrap();
//! let mut pages = vec!["README.md".to_string()];
//! for entry in std::fs::read_dir(format!("{root}/docs")).unwrap() {
//!     let name = entry.unwrap().file_name().into_string().unwrap();
//!     if name.ends_with(".md") {
//!         pages.push(format!("docs/{name}"));
//!     }
//! }
//! for page in pages {
//!     let include = format!("include_str!(\"../../{page}\")");
//!     assert!(this.contains(&include), "{page} is not compiled: add `#[doc = {include}]`");
//! }
//! ```

#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
mod readme {}

#[cfg(doctest)]
#[doc = include_str!("../../docs/guide.md")]
mod guide {}

#[cfg(doctest)]
#[doc = include_str!("../../docs/configuration.md")]
mod configuration {}

#[cfg(doctest)]
#[doc = include_str!("../../docs/share-groups.md")]
mod share_groups {}

#[cfg(doctest)]
#[doc = include_str!("../../docs/producer.md")]
mod producer {}

#[cfg(doctest)]
#[doc = include_str!("../../docs/exactly-once.md")]
mod exactly_once {}

#[cfg(doctest)]
#[doc = include_str!("../../docs/security.md")]
mod security {}

#[cfg(doctest)]
#[doc = include_str!("../../docs/operations.md")]
mod operations {}

#[cfg(doctest)]
#[doc = include_str!("../../docs/demo.md")]
mod demo {}

#[cfg(doctest)]
#[doc = include_str!("../../docs/testing.md")]
mod testing {}

#[cfg(doctest)]
#[doc = include_str!("../../docs/benchmarks.md")]
mod benchmarks {}

#[cfg(doctest)]
#[doc = include_str!("../../docs/DESIGN.md")]
mod design {}
