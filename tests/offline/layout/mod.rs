//! Checks of the repository itself: the source layout, docs/DESIGN.md against the code, and the
//! demo's and benchmark's own checkers.
//!
//! Modules:
//! * [`design_doc`]: `docs/DESIGN.md` as built, checked without a broker (std only).
//! * [`script_checks`]: The demo's and the benchmark's own checkers, checked without a broker.
//! * [`source_layout`]: The source layout's rules, checked on the crate's own `src/` tree (std
//!   only, no broker).

mod design_doc;
mod script_checks;
mod source_layout;
