//! [`on_brokers!`](crate::on_brokers): the broker a test runs on is a module of its name, not a
//! suffix. A test written once over a [`BrokerKind`](super::BrokerKind) (`fn
//! name(kind: BrokerKind)`) becomes one `#[test]` per broker, `kafka::name`, `mock::name`,
//! `tansu::name` (and `kafka3::name` where the 3.9 broker is meant), so that nextest's filters
//! select a broker by module (`-E 'test(/::mock::/)'`) and a reader finds every instance of a test
//! by its one name.
//!
//! ```ignore
//! crate::on_brokers! {
//!     kafka {
//!         commit_after_a_batch_is_last_plus_one,                // super::name(BrokerKind::Kafka)
//!         handoff_range => handoff(BrokerKind::Kafka, "range"), // another call
//!     }
//!     mock { commit_after_a_batch_is_last_plus_one }
//! }
//! ```
//!
//! Where a broker also has tests written out (a body of its own), its module is written out too,
//! and the macro's entries go inside it with the broker named first:
//!
//! ```ignore
//! mod kafka {
//!     use super::*;
//!
//!     crate::on_brokers!(kafka: commit_after_a_batch_is_last_plus_one);
//!
//!     #[test]
//!     fn an_eager_rebalance_stops_every_partition() { ... }
//! }
//! ```
//!
//! Each broker's module sees its parent's items (`use super::*`); a body that calls a function of
//! the parent with the test's own name says `super::name`. A tier's `main.rs` declares this file
//! (`#[path = "../support/on_brokers.rs"] mod on_brokers;`) before the modules that use it.

/// One `#[test]` per broker: see the [module notes](self).
#[macro_export]
macro_rules! on_brokers {
    (@call $module:ident $name:ident) => {
        super::$name($crate::on_brokers!(@kind $module))
    };
    (@call $module:ident $name:ident, $call:expr) => {
        $call
    };
    (@kind kafka) => { $crate::support::BrokerKind::Kafka };
    (@kind kafka3) => { $crate::support::BrokerKind::Kafka3 };
    (@kind mock) => { $crate::support::BrokerKind::Mock };
    (@kind tansu) => { $crate::support::BrokerKind::Tansu };
    // Inside a broker's module written out: one `#[test]` per entry.
    ($module:ident: $( $name:ident $(=> $call:expr)? ),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::on_brokers!(@call $module $name $(, $call)?);
            }
        )*
    };
    // A module per broker, each with its entries.
    ($( $module:ident { $( $name:ident $(=> $call:expr)? ),* $(,)? } )*) => {
        $(
            mod $module {
                #[allow(unused_imports)]
                use super::*;
                $crate::on_brokers!($module: $( $name $(=> $call)? ),*);
            }
        )*
    };
}
