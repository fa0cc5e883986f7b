//! The wire client on single brokers: versions, records and codecs, offsets, configs, faults
//! injected by the mock, a hostile broker, TLS, SASL, the share-group requests.
//!
//! Modules:
//! * [`configs`]: DescribeConfigs for the cluster's failure detection (issue 21, item 6), against
//!   real Apache Kafka (the newest 4.x and the last 3.x) and a scripted broker.
//! * [`faults`]: Version negotiation and failure recovery, driven by librdkafka's mock cluster
//!   fault injection (`api_version`, `leader`, `broker_down`/`broker_up`).
//! * [`hostile`]: A hostile broker.
//! * [`offsets`]: OffsetCommit then OffsetFetch round trip, with metadata, against real Kafka 4.x,
//!   the mock and tansu.
//! * [`records`]: The wire client against real brokers.
//! * [`sasl`]: SASL over SASL_PLAINTEXT against real Kafka 4.x.
//! * [`share`]: The share-group wire layer (`wire::share`) against real Apache Kafka 4.4.
//! * [`tls`]: TLS and SASL_SSL against real Kafka 4.x (feature `tls` only).
//! * [`transactions`]: The transaction requests driven by hand against real Apache Kafka (the
//!   newest 4.x and the last 3.x).
//! * [`versions`]: Version negotiation against real Apache Kafka (the newest 4.x and the last 3.x).

mod configs;
mod faults;
mod hostile;
mod offsets;
mod records;
mod sasl;
mod share;
mod tls;
mod transactions;
mod versions;
