//! Configuration tests that need no broker.
//!
//! Modules:
//! * [`secrets_wiped`]: The library's copies of a secret are wiped before their memory is freed.

pub mod secrets_wiped;
