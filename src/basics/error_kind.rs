//! [`ErrorKind`]: the one classification of failures that every layer's error type maps to.
//!
//! Why it sits at the bottom: the wire, group, consumer and share layers each return their own
//! precise error enum, and each offers `kind()` so that an application can react to the
//! situation without knowing which layer reported it. The classification itself belongs to
//! none of them.

/// What kind of failure an error is: the situation a caller must react to, named the same for
/// every error type of the crate: `kind()` on `WireError`, `GroupError`, the group layer's
/// `CommitError`, `ConsumerError`, `ConfigError`, `ShareError` and the guard's refusals.
///
/// Why it exists: one situation reaches a caller through several types and variants. A
/// membership that is over arrives as a fatal FENCED_INSTANCE_ID, an OffsetCommit refused with
/// ILLEGAL_GENERATION, a commit the member did not send because its generation ended, or a
/// STALE_MEMBER_EPOCH; a network failure as a socket error, a timeout, exhausted retries, no
/// broker reachable. A worker must tell these apart (drop the work of a generation that is over
/// and go on; wait out the network; stop and have an operator fix what the broker refuses)
/// without matching every layer's variants or downcasting. The kind is derived from the
/// variants and their Kafka codes; the error itself still carries the details.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The generation or membership the work belonged to is over: fenced (FENCED_INSTANCE_ID,
    /// FENCED_MEMBER_EPOCH), unknown member, illegal generation, rebalance in progress, stale
    /// member epoch, or a commit not sent because the generation ended. Nothing of it may be
    /// committed any more; its partitions may be another member's already, which resumes from
    /// the last committed position. (Whether the consumer rejoins on its own depends on the
    /// error: a fenced static member's instance id is taken for good.)
    GenerationOver,
    /// The network failed: a socket error, a timeout, a connection closed mid-frame, no broker
    /// reachable, a broker no longer in the metadata, or a token provider that is unavailable.
    /// Transient: the same request may succeed later.
    Network,
    /// The broker refused: an error code (authorization, a setting outside the broker's limits,
    /// an unsupported request; see the code), or our SASL credentials or TLS certificate.
    Refused,
    /// A broker or another member broke the protocol: a malformed or corrupt response, a
    /// mismatched correlation id, no API version in common, an assignment that cannot be read.
    Protocol,
    /// The configuration is invalid or asks for something this build does not support.
    Config,
    /// The application's handler failed or panicked on a record (which is delivered again).
    Handler,
    /// The consumer or group member was closed.
    Closed,
    /// A thread could not be started, or died: close the consumer and start a new one.
    Internal,
    /// The guard did not admit or count a record because it needs nothing more, or not yet: a
    /// redelivery of work already done (a repeated idempotency key, a record already completed
    /// or admitted, an offset below what was admitted), or a record held back (a seek while its
    /// handler runs, a full completed-offsets map) that is handed out again later. Nothing is
    /// wrong: the record is simply not processed now.
    Skipped,
}
