//! One error type for everything the wire layer can report.
//!
//! The consumer and group layers must decide, for every failure, whether to retry, refresh
//! metadata, rejoin the group or give up. That decision needs the Kafka error code intact (not a
//! string), a clear split between transport trouble and protocol violations, and the partition and
//! offset of a bad record batch. Hence one precise enum instead of a boxed error.

use std::fmt;
use std::io;
use std::sync::Arc;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;

use crate::basics::error_kind::ErrorKind;

/// A Kafka error code as returned by a broker, kept as the raw `i16` so that codes newer than
/// `kafka-protocol` still round-trip, with the name and retriability looked up on demand.
///
/// The one table of the codes this crate acts on: the wire, group, consumer and share layers
/// all name codes by these constants, and nowhere else declares one. Each is built on
/// `kafka-protocol`'s `ResponseError` (generated from Apache Kafka's `Errors.java`), so no
/// number is written here a second time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KafkaCode(pub i16);

impl KafkaCode {
    /// `NONE`: success. Group responses are classified with it included (it means "proceed");
    /// elsewhere [`KafkaCode::from_code`] turns it into `None`.
    pub const NONE: KafkaCode = KafkaCode(0);
    /// `OFFSET_OUT_OF_RANGE`: the fetch position is outside the log; the consumer must reset.
    pub const OFFSET_OUT_OF_RANGE: KafkaCode = KafkaCode(ResponseError::OffsetOutOfRange.code());
    /// `CORRUPT_MESSAGE`: a record batch failed its checks (CRC, framing); also what a share
    /// fetch reports for a partition whose records cannot be decoded.
    pub const CORRUPT_MESSAGE: KafkaCode = KafkaCode(ResponseError::CorruptMessage.code());
    /// `UNKNOWN_TOPIC_OR_PARTITION`: stale metadata or a topic that does not exist (yet).
    pub const UNKNOWN_TOPIC_OR_PARTITION: KafkaCode =
        KafkaCode(ResponseError::UnknownTopicOrPartition.code());
    /// `LEADER_NOT_AVAILABLE`: a leader election is in progress.
    pub const LEADER_NOT_AVAILABLE: KafkaCode = KafkaCode(ResponseError::LeaderNotAvailable.code());
    /// `NOT_LEADER_OR_FOLLOWER`: the leader moved; refresh metadata.
    pub const NOT_LEADER_OR_FOLLOWER: KafkaCode =
        KafkaCode(ResponseError::NotLeaderOrFollower.code());
    /// `REQUEST_TIMED_OUT`: the broker gave up waiting (e.g. for replicas).
    pub const REQUEST_TIMED_OUT: KafkaCode = KafkaCode(ResponseError::RequestTimedOut.code());
    /// `REPLICA_NOT_AVAILABLE`: a replica the request needs is not available; refresh metadata.
    pub const REPLICA_NOT_AVAILABLE: KafkaCode =
        KafkaCode(ResponseError::ReplicaNotAvailable.code());
    /// `OFFSET_METADATA_TOO_LARGE`: the commit metadata string is longer than the broker allows.
    pub const OFFSET_METADATA_TOO_LARGE: KafkaCode =
        KafkaCode(ResponseError::OffsetMetadataTooLarge.code());
    /// `COORDINATOR_LOAD_IN_PROGRESS`: the coordinator is still loading offsets; retry.
    pub const COORDINATOR_LOAD_IN_PROGRESS: KafkaCode =
        KafkaCode(ResponseError::CoordinatorLoadInProgress.code());
    /// `COORDINATOR_NOT_AVAILABLE`: no coordinator yet; find it again.
    pub const COORDINATOR_NOT_AVAILABLE: KafkaCode =
        KafkaCode(ResponseError::CoordinatorNotAvailable.code());
    /// `NOT_COORDINATOR`: the coordinator moved; find it again.
    pub const NOT_COORDINATOR: KafkaCode = KafkaCode(ResponseError::NotCoordinator.code());
    /// `ILLEGAL_GENERATION`: the generation we sent is not the group's current one (the group
    /// rebalanced without us); the member must not commit.
    pub const ILLEGAL_GENERATION: KafkaCode = KafkaCode(ResponseError::IllegalGeneration.code());
    /// `INCONSISTENT_GROUP_PROTOCOL`: no assignor in our list is supported by every member, or
    /// the protocol type differs.
    pub const INCONSISTENT_GROUP_PROTOCOL: KafkaCode =
        KafkaCode(ResponseError::InconsistentGroupProtocol.code());
    /// `INVALID_GROUP_ID`: the group id is empty or invalid.
    pub const INVALID_GROUP_ID: KafkaCode = KafkaCode(ResponseError::InvalidGroupId.code());
    /// `UNKNOWN_MEMBER_ID`: the member was removed from the group.
    pub const UNKNOWN_MEMBER_ID: KafkaCode = KafkaCode(ResponseError::UnknownMemberId.code());
    /// `INVALID_SESSION_TIMEOUT`: `session.timeout.ms` is outside the broker's allowed range.
    pub const INVALID_SESSION_TIMEOUT: KafkaCode =
        KafkaCode(ResponseError::InvalidSessionTimeout.code());
    /// `REBALANCE_IN_PROGRESS`: the group is rebalancing; rejoin.
    pub const REBALANCE_IN_PROGRESS: KafkaCode =
        KafkaCode(ResponseError::RebalanceInProgress.code());
    /// `INVALID_COMMIT_OFFSET_SIZE`: the offset commit request is too large.
    pub const INVALID_COMMIT_OFFSET_SIZE: KafkaCode =
        KafkaCode(ResponseError::InvalidCommitOffsetSize.code());
    /// `TOPIC_AUTHORIZATION_FAILED`: not authorized for the topic.
    pub const TOPIC_AUTHORIZATION_FAILED: KafkaCode =
        KafkaCode(ResponseError::TopicAuthorizationFailed.code());
    /// `GROUP_AUTHORIZATION_FAILED`: not authorized for the group.
    pub const GROUP_AUTHORIZATION_FAILED: KafkaCode =
        KafkaCode(ResponseError::GroupAuthorizationFailed.code());
    /// `CLUSTER_AUTHORIZATION_FAILED`: not authorized for a cluster operation (e.g. describing a
    /// broker's configuration without DESCRIBE_CONFIGS on the cluster).
    pub const CLUSTER_AUTHORIZATION_FAILED: KafkaCode =
        KafkaCode(ResponseError::ClusterAuthorizationFailed.code());
    /// `UNSUPPORTED_SASL_MECHANISM`: the listener does not enable the SASL mechanism we asked for.
    pub const UNSUPPORTED_SASL_MECHANISM: KafkaCode =
        KafkaCode(ResponseError::UnsupportedSaslMechanism.code());
    /// `ILLEGAL_SASL_STATE`: a SASL request out of order.
    pub const ILLEGAL_SASL_STATE: KafkaCode = KafkaCode(ResponseError::IllegalSaslState.code());
    /// `SASL_AUTHENTICATION_FAILED`: wrong credentials (or an unknown user).
    pub const SASL_AUTHENTICATION_FAILED: KafkaCode =
        KafkaCode(ResponseError::SaslAuthenticationFailed.code());
    /// `UNSUPPORTED_VERSION`: the broker does not speak the version we sent.
    pub const UNSUPPORTED_VERSION: KafkaCode = KafkaCode(ResponseError::UnsupportedVersion.code());
    /// `TOPIC_ALREADY_EXISTS`: CreateTopics for a topic that exists; callers that only want the
    /// topic to exist ignore it.
    pub const TOPIC_ALREADY_EXISTS: KafkaCode = KafkaCode(ResponseError::TopicAlreadyExists.code());
    /// `INVALID_REQUEST`: the broker found the request malformed; librdkafka's mock also
    /// answers it to a follower's late SyncGroup.
    pub const INVALID_REQUEST: KafkaCode = KafkaCode(ResponseError::InvalidRequest.code());
    /// `FENCED_LEADER_EPOCH`: our leader epoch is newer than the broker's view.
    pub const FENCED_LEADER_EPOCH: KafkaCode = KafkaCode(ResponseError::FencedLeaderEpoch.code());
    /// `UNKNOWN_LEADER_EPOCH`: our leader epoch is older than the broker's view.
    pub const UNKNOWN_LEADER_EPOCH: KafkaCode = KafkaCode(ResponseError::UnknownLeaderEpoch.code());
    /// `MEMBER_ID_REQUIRED` (KIP-394): the first JoinGroup must be repeated with the member id
    /// the broker returned.
    pub const MEMBER_ID_REQUIRED: KafkaCode = KafkaCode(ResponseError::MemberIdRequired.code());
    /// `GROUP_MAX_SIZE_REACHED`: the group has as many members as `group.max.size` allows.
    pub const GROUP_MAX_SIZE_REACHED: KafkaCode =
        KafkaCode(ResponseError::GroupMaxSizeReached.code());
    /// `FENCED_INSTANCE_ID` (KIP-345): another member with our static `group.instance.id` took
    /// over.
    pub const FENCED_INSTANCE_ID: KafkaCode = KafkaCode(ResponseError::FencedInstanceId.code());
    /// `STALE_MEMBER_EPOCH`: a KIP-848 commit carrying an old member epoch.
    pub const STALE_MEMBER_EPOCH: KafkaCode = KafkaCode(ResponseError::StaleMemberEpoch.code());
    /// `FENCED_MEMBER_EPOCH`: a KIP-848 member that was fenced by the coordinator.
    pub const FENCED_MEMBER_EPOCH: KafkaCode = KafkaCode(ResponseError::FencedMemberEpoch.code());
    /// `UNKNOWN_TOPIC_ID`: stale metadata for a topic id.
    pub const UNKNOWN_TOPIC_ID: KafkaCode = KafkaCode(ResponseError::UnknownTopicId.code());
    /// `GROUP_ID_NOT_FOUND`: the group id belongs to a group of another type (a share member
    /// cannot join it), or a leave (-2) named a group the coordinator does not have.
    pub const GROUP_ID_NOT_FOUND: KafkaCode = KafkaCode(ResponseError::GroupIdNotFound.code());
    /// `UNRELEASED_INSTANCE_ID`: another member still holds our `group.instance.id`.
    pub const UNRELEASED_INSTANCE_ID: KafkaCode =
        KafkaCode(ResponseError::UnreleasedInstanceId.code());
    /// `UNSUPPORTED_ASSIGNOR`: the broker does not know `group.remote.assignor`.
    pub const UNSUPPORTED_ASSIGNOR: KafkaCode =
        KafkaCode(ResponseError::UnsupportedAssignor.code());
    /// `INVALID_REGULAR_EXPRESSION` (named INVALID_SUBSCRIPTION_REGEX in older schemas): the
    /// broker (RE2/J) refused the subscription pattern, which only the application can change.
    pub const INVALID_REGULAR_EXPRESSION: KafkaCode =
        KafkaCode(ResponseError::InvalidRegularExpression.code());
    /// `INVALID_RECORD_STATE`: an acknowledged record is not acquired by this member (its lock
    /// expired, or it was acknowledged already).
    pub const INVALID_RECORD_STATE: KafkaCode = KafkaCode(ResponseError::InvalidRecordState.code());
    /// `SHARE_SESSION_NOT_FOUND`: the broker has no share session for this member.
    pub const SHARE_SESSION_NOT_FOUND: KafkaCode =
        KafkaCode(ResponseError::ShareSessionNotFound.code());
    /// `INVALID_SHARE_SESSION_EPOCH`: the share session epoch is not the one the broker expects.
    pub const INVALID_SHARE_SESSION_EPOCH: KafkaCode =
        KafkaCode(ResponseError::InvalidShareSessionEpoch.code());
    /// `SHARE_SESSION_LIMIT_REACHED`: the broker holds as many share sessions as it allows.
    pub const SHARE_SESSION_LIMIT_REACHED: KafkaCode =
        KafkaCode(ResponseError::ShareSessionLimitReached.code());

    /// `OUT_OF_ORDER_SEQUENCE_NUMBER`: the leader expected another sequence from this producer
    /// for the partition (an earlier batch is missing, or the leader lost the producer's state).
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: KafkaCode =
        KafkaCode(ResponseError::OutOfOrderSequenceNumber.code());
    /// `DUPLICATE_SEQUENCE_NUMBER`: the batch was written already (older brokers say so
    /// instead of answering with its offset).
    pub const DUPLICATE_SEQUENCE_NUMBER: KafkaCode =
        KafkaCode(ResponseError::DuplicateSequenceNumber.code());
    /// `UNKNOWN_PRODUCER_ID`: the leader has no state for this producer id (its records were
    /// deleted by retention, or it expired after `transactional.id.expiration.ms`).
    pub const UNKNOWN_PRODUCER_ID: KafkaCode = KafkaCode(ResponseError::UnknownProducerId.code());
    /// `INVALID_PRODUCER_EPOCH`: a newer epoch of this producer id exists.
    pub const INVALID_PRODUCER_EPOCH: KafkaCode =
        KafkaCode(ResponseError::InvalidProducerEpoch.code());
    /// `PRODUCER_FENCED`: another producer with the same transactional id took over.
    pub const PRODUCER_FENCED: KafkaCode = KafkaCode(ResponseError::ProducerFenced.code());
    /// `INVALID_TXN_STATE`: a transactional request that the transaction's state does not allow
    /// (e.g. an EndTxn with no transaction ongoing, or a transactional batch for a partition that
    /// was never added to the transaction).
    pub const INVALID_TXN_STATE: KafkaCode = KafkaCode(ResponseError::InvalidTxnState.code());
    /// `INVALID_PRODUCER_ID_MAPPING`: the producer id is not (or no longer) the one the
    /// coordinator has for the transactional id (it expired after
    /// `transactional.id.expiration.ms`, or another id took over).
    pub const INVALID_PRODUCER_ID_MAPPING: KafkaCode =
        KafkaCode(ResponseError::InvalidProducerIdMapping.code());
    /// `INVALID_TRANSACTION_TIMEOUT`: the transaction timeout exceeds the broker's
    /// `transaction.max.timeout.ms`.
    pub const INVALID_TRANSACTION_TIMEOUT: KafkaCode =
        KafkaCode(ResponseError::InvalidTransactionTimeout.code());
    /// `CONCURRENT_TRANSACTIONS`: the coordinator is still completing this transactional id's
    /// previous transaction (writing its markers); the same request succeeds shortly. Retriable,
    /// as Kafka's `ConcurrentTransactionsException` is (a `RetriableException`), although
    /// `kafka-protocol`'s table says otherwise.
    pub const CONCURRENT_TRANSACTIONS: KafkaCode =
        KafkaCode(ResponseError::ConcurrentTransactions.code());
    /// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`: an ACL refuses this principal the transactional
    /// id.
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: KafkaCode =
        KafkaCode(ResponseError::TransactionalIdAuthorizationFailed.code());
    /// `TRANSACTIONAL_ID_NOT_FOUND`: the coordinator has no state for the transactional id.
    pub const TRANSACTIONAL_ID_NOT_FOUND: KafkaCode =
        KafkaCode(ResponseError::TransactionalIdNotFound.code());
    /// `TRANSACTION_ABORTABLE`: the transaction cannot complete but the producer may abort it and
    /// go on (KIP-890: e.g. a TxnOffsetCommit v4 for a group whose offsets partition was not
    /// added to the transaction).
    pub const TRANSACTION_ABORTABLE: KafkaCode =
        KafkaCode(ResponseError::TransactionAbortable.code());
    /// `UNSTABLE_OFFSET_COMMIT`: a transaction holds offsets of the partition that are neither
    /// committed nor aborted yet; an OffsetFetch asking for stable offsets (KIP-447) waits.
    pub const UNSTABLE_OFFSET_COMMIT: KafkaCode =
        KafkaCode(ResponseError::UnstableOffsetCommit.code());
    /// `OPERATION_NOT_ATTEMPTED`: AddPartitionsToTxn did not try this partition because
    /// another one of the request failed; it is asked again with the rest.
    pub const OPERATION_NOT_ATTEMPTED: KafkaCode =
        KafkaCode(ResponseError::OperationNotAttempted.code());
    /// `MESSAGE_TOO_LARGE`: the request or a batch exceeds the broker's or topic's limit.
    pub const MESSAGE_TOO_LARGE: KafkaCode = KafkaCode(ResponseError::MessageTooLarge.code());
    /// `NOT_ENOUGH_REPLICAS`: fewer in-sync replicas than `min.insync.replicas`; nothing written.
    pub const NOT_ENOUGH_REPLICAS: KafkaCode = KafkaCode(ResponseError::NotEnoughReplicas.code());

    /// `None` for code 0 (success), so that response handling can write `if let Some(code)`.
    pub fn from_code(code: i16) -> Option<KafkaCode> {
        if code == 0 {
            None
        } else {
            Some(KafkaCode(code))
        }
    }

    /// Kafka's symbolic name for the code (e.g. `NotLeaderOrFollower`), or `Unknown(n)`.
    pub fn name(self) -> String {
        match ResponseError::try_from_code(self.0) {
            None => "None".to_string(),
            Some(ResponseError::Unknown(n)) => format!("Unknown({n})"),
            Some(e) => format!("{e}"),
        }
    }

    /// Whether an authorizer refused the request (topic, group or cluster ACLs): the same
    /// request is refused again until an operator grants the permission, so a caller doing
    /// something optional skips it instead of retrying.
    pub fn is_authorization(self) -> bool {
        matches!(
            self,
            KafkaCode::TOPIC_AUTHORIZATION_FAILED
                | KafkaCode::GROUP_AUTHORIZATION_FAILED
                | KafkaCode::CLUSTER_AUTHORIZATION_FAILED
                | KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
    }

    /// Whether Kafka itself classifies the error as retriable (same request may succeed later).
    /// Follows Kafka's exception classes; where `kafka-protocol`'s table differs from them
    /// (CONCURRENT_TRANSACTIONS), Kafka wins.
    pub fn retriable(self) -> bool {
        self == KafkaCode::CONCURRENT_TRANSACTIONS
            || ResponseError::try_from_code(self.0).is_some_and(|e| e.is_retriable())
    }

    /// Errors after which the client must refresh its metadata (leader cache) before retrying.
    pub fn is_stale_metadata(self) -> bool {
        matches!(
            self,
            KafkaCode::NOT_LEADER_OR_FOLLOWER
                | KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
                | KafkaCode::LEADER_NOT_AVAILABLE
                | KafkaCode::FENCED_LEADER_EPOCH
                | KafkaCode::UNKNOWN_LEADER_EPOCH
                | KafkaCode::UNKNOWN_TOPIC_ID
                | KafkaCode::REPLICA_NOT_AVAILABLE
        )
    }

    /// Whether the code says that the generation (classic) or member epoch (consumer group
    /// protocol) a request was made in is over: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
    /// FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS (the generation is being replaced; a commit for
    /// it is refused), FENCED_MEMBER_EPOCH, STALE_MEMBER_EPOCH. Work of that generation must not
    /// be committed; its partitions may be another member's already. See
    /// [`ErrorKind::GenerationOver`].
    pub fn ends_generation(self) -> bool {
        matches!(
            self,
            KafkaCode::ILLEGAL_GENERATION
                | KafkaCode::UNKNOWN_MEMBER_ID
                | KafkaCode::FENCED_INSTANCE_ID
                | KafkaCode::REBALANCE_IN_PROGRESS
                | KafkaCode::FENCED_MEMBER_EPOCH
                | KafkaCode::STALE_MEMBER_EPOCH
        )
    }

    /// [`ErrorKind::GenerationOver`] for a code that [ends the generation](Self::ends_generation),
    /// [`ErrorKind::Refused`] for any other.
    pub fn kind(self) -> ErrorKind {
        if self.ends_generation() {
            ErrorKind::GenerationOver
        } else {
            ErrorKind::Refused
        }
    }

    /// Errors after which the group coordinator must be looked up again.
    pub fn is_coordinator_moved(self) -> bool {
        matches!(
            self,
            KafkaCode::NOT_COORDINATOR | KafkaCode::COORDINATOR_NOT_AVAILABLE
        )
    }
}

impl fmt::Display for KafkaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// Human-readable API name used in errors ("Fetch", "OffsetCommit", or the raw key).
pub(crate) fn api_name(key: i16) -> String {
    match ApiKey::try_from(key) {
        Ok(k) => format!("{k:?}"),
        Err(()) => format!("ApiKey({key})"),
    }
}

/// Everything that can go wrong talking to a broker.
///
/// `Clone`, because one failure often belongs to several results: a broker that breaks during a
/// Fetch fails every partition asked from it, and each partition's result carries the error.
/// The one non-`Clone` cause, `io::Error`, is shared behind an `Arc`, so a copy keeps its kind,
/// message and source exactly.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum WireError {
    /// The broker answered with a Kafka error code (top-level or for the one item we asked about).
    Kafka {
        /// API key of the request that failed.
        api: i16,
        /// The error code; `code.retriable()` says whether the same request may succeed later.
        code: KafkaCode,
        /// Extra context: the partition, group or broker message, when there is one.
        context: String,
    },
    /// A socket error (refused, reset, broken pipe...). The connection is unusable afterwards.
    /// Shared (see the type's doc) so that every result the failure affects can carry it.
    Io(Arc<io::Error>),
    /// No response within the request timeout (or no connection within the connect timeout).
    Timeout {
        /// What timed out, e.g. "connect to 127.0.0.1:9092" or "Fetch response".
        what: String,
    },
    /// A frame claimed more bytes than the configured maximum; nothing was allocated for it.
    FrameTooLarge {
        /// The size the frame claimed.
        len: i64,
        /// The configured maximum response size.
        max: usize,
    },
    /// The peer closed the connection in the middle of a frame.
    Truncated {
        /// Bytes the frame claimed.
        expected: usize,
        /// Bytes received before the connection closed.
        got: usize,
    },
    /// A response carried a correlation id that does not match the request in flight.
    CorrelationMismatch {
        /// The id we sent.
        expected: i32,
        /// The id we received.
        got: i32,
    },
    /// A message could not be encoded or decoded, or broke the protocol in another way.
    Protocol(String),
    /// A response's lengths do not fit its bytes (an array claiming more elements than could
    /// follow, a string longer than the frame, a tagged field overrunning its size): refused
    /// before decoding, so a hostile or broken broker cannot make the client allocate for a
    /// claim. The connection is dropped, as for any undecodable response.
    Malformed {
        /// API key of the response.
        api: i16,
        /// Its version.
        version: i16,
        /// Where: the field path, e.g. `Topics[2].Partitions[0].ReplicaNodes`.
        field: String,
        /// What did not fit.
        reason: String,
    },
    /// The broker and we share no version of an API.
    UnsupportedVersion {
        /// The API that cannot be used.
        api: i16,
        /// The versions this client can speak (inclusive).
        ours: (i16, i16),
        /// The versions the broker advertised (inclusive), or `None` if it advertised none.
        broker: Option<(i16, i16)>,
    },
    /// A record batch failed its checks (CRC, lengths, decompression) or could not be decoded.
    CorruptBatch {
        /// Topic of the partition whose data is bad.
        topic: String,
        /// Partition index.
        partition: i32,
        /// Base offset of the bad batch (or the fetch offset if the header itself was unreadable).
        offset: i64,
        /// What exactly was wrong.
        reason: String,
    },
    /// A broker id, topic or partition is not (or no longer) in the cluster metadata.
    UnknownBroker {
        /// Broker id that was looked up.
        node_id: i32,
    },
    /// Retries were exhausted; `last` is the final failure.
    RetriesExhausted {
        /// What was being attempted.
        what: String,
        /// How many attempts were made.
        attempts: u32,
        /// The error of the last attempt.
        last: Box<WireError>,
    },
    /// No bootstrap server could be reached (each one's error is listed).
    NoBrokerAvailable {
        /// `address: error` for each server tried.
        tried: Vec<String>,
    },
    /// A configuration value is invalid (e.g. an empty bootstrap list).
    Config(String),
    /// SASL authentication failed: refused credentials, a mechanism the listener does not enable,
    /// or a server that broke the SCRAM rules (its nonce, iteration count or signature). Not
    /// retriable: the same credentials fail the same way, and retrying would only flood the
    /// broker (or lock the account). Never carries the password.
    Authentication {
        /// The SASL mechanism, e.g. `SCRAM-SHA-256`.
        mechanism: &'static str,
        /// The broker's address.
        broker: String,
        /// Why: the broker's error message, or the rule the server broke.
        reason: String,
    },
    /// No OAUTHBEARER token could be had: the token callback failed (or is still running in
    /// another thread) and no valid token is cached. Retriable, unlike [`WireError::Authentication`]:
    /// an identity provider's outage passes, and the next connection attempt asks the callback
    /// again; a consumer must not die of it.
    TokenUnavailable {
        /// Why, as the callback said it (a callback's text must hold no secret).
        reason: String,
    },
    /// The TLS handshake was refused: the broker's certificate is not trusted or does not name
    /// the host, or the broker refused ours. Not retriable, like a refused password: the same
    /// certificates fail the same way.
    Tls {
        /// The broker's address.
        broker: String,
        /// Why, with the setting that would fix it.
        reason: String,
    },
}

impl WireError {
    /// A socket error, shared so that copies of it stay exact.
    pub fn io(error: io::Error) -> WireError {
        WireError::Io(Arc::new(error))
    }

    /// A Kafka error for `api` with no extra context.
    pub fn kafka(api: ApiKey, code: KafkaCode, context: impl Into<String>) -> WireError {
        WireError::Kafka {
            api: api as i16,
            code,
            context: context.into(),
        }
    }

    /// The Kafka error code, if this is (or wraps) a broker error.
    pub fn kafka_code(&self) -> Option<KafkaCode> {
        match self {
            WireError::Kafka { code, .. } => Some(*code),
            WireError::RetriesExhausted { last, .. } => last.kafka_code(),
            _ => None,
        }
    }

    /// Whether retrying (possibly after reconnecting or refreshing metadata) may succeed.
    ///
    /// Transport failures and timeouts are retriable because a broker may come back; protocol
    /// violations, corrupt data and version mismatches are not, since they will repeat.
    pub fn retriable(&self) -> bool {
        match self {
            WireError::Kafka { code, .. } => code.retriable(),
            WireError::Io(_)
            | WireError::Timeout { .. }
            | WireError::Truncated { .. }
            | WireError::NoBrokerAvailable { .. }
            | WireError::TokenUnavailable { .. } => true,
            _ => false,
        }
    }

    /// The situation this error reports (see [`ErrorKind`]); for
    /// [`RetriesExhausted`](WireError::RetriesExhausted), that of the last attempt.
    pub fn kind(&self) -> ErrorKind {
        match self {
            WireError::Kafka { code, .. } => code.kind(),
            WireError::RetriesExhausted { last, .. } => last.kind(),
            WireError::Io(_)
            | WireError::Timeout { .. }
            | WireError::Truncated { .. }
            | WireError::NoBrokerAvailable { .. }
            | WireError::UnknownBroker { .. }
            | WireError::TokenUnavailable { .. } => ErrorKind::Network,
            WireError::Authentication { .. } | WireError::Tls { .. } => ErrorKind::Refused,
            WireError::FrameTooLarge { .. }
            | WireError::CorrelationMismatch { .. }
            | WireError::Protocol(_)
            | WireError::Malformed { .. }
            | WireError::UnsupportedVersion { .. }
            | WireError::CorruptBatch { .. } => ErrorKind::Protocol,
            WireError::Config(_) => ErrorKind::Config,
        }
    }

    /// Whether the connection that produced this error must be dropped and re-established.
    pub fn breaks_connection(&self) -> bool {
        matches!(
            self,
            WireError::Io(_)
                | WireError::Timeout { .. }
                | WireError::FrameTooLarge { .. }
                | WireError::Truncated { .. }
                | WireError::CorrelationMismatch { .. }
                | WireError::Protocol(_)
                | WireError::Malformed { .. }
                | WireError::Authentication { .. }
                | WireError::TokenUnavailable { .. }
                | WireError::Tls { .. }
        )
    }

    /// Whether this is (or wraps) a broker's authorization refusal ([`KafkaCode::is_authorization`]):
    /// the credentials were accepted, but the principal may not do this.
    pub fn is_authorization_refused(&self) -> bool {
        self.kafka_code().is_some_and(KafkaCode::is_authorization)
    }

    /// Whether this is (or wraps) a failed SASL authentication or a refused TLS handshake,
    /// which no retry can fix: the callers that try another broker after a connection error
    /// stop at once instead.
    pub fn is_authentication(&self) -> bool {
        match self {
            WireError::Authentication { .. } | WireError::Tls { .. } => true,
            WireError::RetriesExhausted { last, .. } => last.is_authentication(),
            _ => false,
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Kafka { api, code, context } => {
                write!(f, "{} failed with {}", api_name(*api), code)?;
                if !context.is_empty() {
                    write!(f, ": {context}")?;
                }
                if code.retriable() {
                    write!(f, " (retriable)")?;
                }
                Ok(())
            }
            // The kind, not the message: the io::Error is the source.
            WireError::Io(e) => write!(f, "I/O error ({})", e.kind()),
            WireError::Timeout { what } => write!(f, "timed out: {what}"),
            WireError::FrameTooLarge { len, max } => write!(
                f,
                "response frame claims {len} bytes, more than the maximum of {max} bytes"
            ),
            WireError::Truncated { expected, got } => write!(
                f,
                "connection closed mid-frame: got {got} of {expected} bytes"
            ),
            WireError::CorrelationMismatch { expected, got } => write!(
                f,
                "response correlation id {got} does not match request {expected}"
            ),
            WireError::Protocol(m) => write!(f, "protocol error: {m}"),
            WireError::Malformed {
                api,
                version,
                field,
                reason,
            } => write!(
                f,
                "malformed {} v{version} response at {field}: {reason}",
                api_name(*api)
            ),
            WireError::UnsupportedVersion { api, ours, broker } => {
                write!(
                    f,
                    "no common version for {}: client supports {}..={}, ",
                    api_name(*api),
                    ours.0,
                    ours.1
                )?;
                match broker {
                    Some((lo, hi)) => write!(f, "broker supports {lo}..={hi}"),
                    None => write!(f, "broker does not advertise it"),
                }
            }
            WireError::CorruptBatch {
                topic,
                partition,
                offset,
                reason,
            } => write!(
                f,
                "corrupt record batch in {topic}-{partition} at offset {offset}: {reason}"
            ),
            WireError::UnknownBroker { node_id } => {
                write!(f, "broker {node_id} is not in the cluster metadata")
            }
            WireError::RetriesExhausted { what, attempts, .. } => {
                write!(f, "{what} failed after {attempts} attempts")
            }
            WireError::NoBrokerAvailable { tried } => {
                write!(f, "no broker reachable (tried {})", tried.join("; "))
            }
            WireError::Config(m) => write!(f, "invalid configuration: {m}"),
            WireError::Authentication {
                mechanism,
                broker,
                reason,
            } => write!(
                f,
                "SASL {mechanism} authentication with {broker} failed: {reason} (not retried: \
                 check the user name, password and mechanism)"
            ),
            WireError::TokenUnavailable { reason } => {
                write!(f, "no OAUTHBEARER token: {reason} (retriable)")
            }
            WireError::Tls { broker, reason } => {
                write!(f, "TLS with {broker} refused: {reason} (not retried)")
            }
        }
    }
}

/// The socket error ([`WireError::Io`]) and the last attempt's error
/// ([`WireError::RetriesExhausted`]) are returned here and not repeated by `Display`; every other
/// variant is a leaf. Print the whole chain with [`ErrorChain`].
impl std::error::Error for WireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WireError::Io(e) => Some(e.as_ref()),
            WireError::RetriesExhausted { last, .. } => Some(last.as_ref()),
            _ => None,
        }
    }
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => WireError::Timeout {
                what: format!("socket operation ({e})"),
            },
            _ => WireError::io(e),
        }
    }
}

/// Displays an error and every error under it ([`source`](std::error::Error::source)), as
/// `outer: inner: innermost`.
///
/// Why: this crate's errors follow the Rust API guidelines. Each one's `Display` says what failed
/// at its own layer, and the error it wraps is returned from `source()` instead of being repeated,
/// so that a chain printer (this one, `anyhow`'s `{:#}`, a tracing subscriber) shows each cause
/// once. `{e}` therefore shows only the outermost layer; a log line or a report that should
/// show everything formats `ErrorChain(&e)` instead.
///
/// ```
/// use rebalance_guard::{ErrorChain, WireError};
///
/// let e = WireError::RetriesExhausted {
///     what: "Fetch".to_string(),
///     attempts: 3,
///     last: Box::new(WireError::Timeout { what: "Fetch response".to_string() }),
/// };
/// assert_eq!(e.to_string(), "Fetch failed after 3 attempts");
/// assert_eq!(
///     ErrorChain(&e).to_string(),
///     "Fetch failed after 3 attempts: timed out: Fetch response"
/// );
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut next = self.0.source();
        while let Some(cause) = next {
            write!(f, ": {cause}")?;
            next = cause.source();
        }
        Ok(())
    }
}

/// Shorthand used throughout the wire layer.
pub type Result<T> = std::result::Result<T, WireError>;

/// The most bytes of a broker's own text (an error message, a SCRAM `e=` reason, an OAUTHBEARER
/// status) that an error carries; enough for any real reason Kafka gives.
pub(crate) const MAX_BROKER_TEXT: usize = 256;

/// A broker's text made safe to put in an error and so in a log line: control and invisible
/// formatting characters escaped (`\n`, `\u{1b}`, a bidirectional override), so a hostile
/// broker cannot forge log lines or hide text; and cut at [`MAX_BROKER_TEXT`] bytes (at a
/// character boundary, saying how much was cut), so it cannot flood the log either.
///
/// Why one function: every place where broker text enters an error calls it, so the rule is
/// the same everywhere.
pub(crate) fn broker_text(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len().min(MAX_BROKER_TEXT));
    for (at, c) in raw.char_indices() {
        let invisible = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}' | '\u{feff}');
        let piece: String = if c.is_control() || invisible {
            c.escape_default().collect()
        } else {
            c.into()
        };
        if out.len() + piece.len() > MAX_BROKER_TEXT {
            out.push_str(&format!("... ({} more bytes)", raw.len() - at));
            break;
        }
        out.push_str(&piece);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn broker_text_is_escaped_and_cut_at_a_character_boundary() {
        assert_eq!(broker_text("invalid-proof"), "invalid-proof");
        assert_eq!(
            broker_text("a\nb\r\u{1b}[2J\u{202e}c"),
            "a\\nb\\r\\u{1b}[2J\\u{202e}c"
        );
        let long = format!(
            "{}\u{e9}{}",
            "x".repeat(MAX_BROKER_TEXT - 1),
            "y".repeat(1000)
        );
        let cut = broker_text(&long);
        assert!(cut.starts_with(&"x".repeat(MAX_BROKER_TEXT - 1)), "{cut}");
        assert!(cut.ends_with("... (1002 more bytes)"), "{cut}");
        assert!(cut.len() <= MAX_BROKER_TEXT + 32, "{}", cut.len());
        // A flood of control characters is cut by its escaped length.
        let cut = broker_text(&"\n".repeat(10_000));
        assert!(cut.len() <= MAX_BROKER_TEXT + 32, "{}", cut.len());
    }

    #[test]
    fn codes_keep_name_and_retriability() {
        assert!(KafkaCode::NOT_LEADER_OR_FOLLOWER.retriable());
        assert!(KafkaCode::NOT_LEADER_OR_FOLLOWER.is_stale_metadata());
        assert!(!KafkaCode::ILLEGAL_GENERATION.retriable());
        assert_eq!(KafkaCode(6).name(), "NotLeaderOrFollower");
        assert_eq!(KafkaCode(9999).name(), "Unknown(9999)");
        assert!(!KafkaCode(9999).retriable());
        assert_eq!(KafkaCode::from_code(0), None);
    }

    #[test]
    fn error_codes_match_the_protocol() {
        let pairs = [
            (
                KafkaCode::OFFSET_OUT_OF_RANGE,
                ResponseError::OffsetOutOfRange,
            ),
            (
                KafkaCode::UNKNOWN_TOPIC_OR_PARTITION,
                ResponseError::UnknownTopicOrPartition,
            ),
            (
                KafkaCode::LEADER_NOT_AVAILABLE,
                ResponseError::LeaderNotAvailable,
            ),
            (
                KafkaCode::NOT_LEADER_OR_FOLLOWER,
                ResponseError::NotLeaderOrFollower,
            ),
            (KafkaCode::REQUEST_TIMED_OUT, ResponseError::RequestTimedOut),
            (
                KafkaCode::REPLICA_NOT_AVAILABLE,
                ResponseError::ReplicaNotAvailable,
            ),
            (
                KafkaCode::OFFSET_METADATA_TOO_LARGE,
                ResponseError::OffsetMetadataTooLarge,
            ),
            (
                KafkaCode::COORDINATOR_LOAD_IN_PROGRESS,
                ResponseError::CoordinatorLoadInProgress,
            ),
            (
                KafkaCode::COORDINATOR_NOT_AVAILABLE,
                ResponseError::CoordinatorNotAvailable,
            ),
            (KafkaCode::NOT_COORDINATOR, ResponseError::NotCoordinator),
            (
                KafkaCode::ILLEGAL_GENERATION,
                ResponseError::IllegalGeneration,
            ),
            (
                KafkaCode::INCONSISTENT_GROUP_PROTOCOL,
                ResponseError::InconsistentGroupProtocol,
            ),
            (KafkaCode::INVALID_GROUP_ID, ResponseError::InvalidGroupId),
            (KafkaCode::UNKNOWN_MEMBER_ID, ResponseError::UnknownMemberId),
            (
                KafkaCode::INVALID_SESSION_TIMEOUT,
                ResponseError::InvalidSessionTimeout,
            ),
            (
                KafkaCode::REBALANCE_IN_PROGRESS,
                ResponseError::RebalanceInProgress,
            ),
            (
                KafkaCode::INVALID_COMMIT_OFFSET_SIZE,
                ResponseError::InvalidCommitOffsetSize,
            ),
            (
                KafkaCode::TOPIC_AUTHORIZATION_FAILED,
                ResponseError::TopicAuthorizationFailed,
            ),
            (
                KafkaCode::GROUP_AUTHORIZATION_FAILED,
                ResponseError::GroupAuthorizationFailed,
            ),
            (
                KafkaCode::CLUSTER_AUTHORIZATION_FAILED,
                ResponseError::ClusterAuthorizationFailed,
            ),
            (
                KafkaCode::UNSUPPORTED_VERSION,
                ResponseError::UnsupportedVersion,
            ),
            (
                KafkaCode::UNSUPPORTED_SASL_MECHANISM,
                ResponseError::UnsupportedSaslMechanism,
            ),
            (
                KafkaCode::ILLEGAL_SASL_STATE,
                ResponseError::IllegalSaslState,
            ),
            (
                KafkaCode::SASL_AUTHENTICATION_FAILED,
                ResponseError::SaslAuthenticationFailed,
            ),
            (
                KafkaCode::TOPIC_ALREADY_EXISTS,
                ResponseError::TopicAlreadyExists,
            ),
            (KafkaCode::INVALID_REQUEST, ResponseError::InvalidRequest),
            (
                KafkaCode::FENCED_LEADER_EPOCH,
                ResponseError::FencedLeaderEpoch,
            ),
            (
                KafkaCode::UNKNOWN_LEADER_EPOCH,
                ResponseError::UnknownLeaderEpoch,
            ),
            (
                KafkaCode::MEMBER_ID_REQUIRED,
                ResponseError::MemberIdRequired,
            ),
            (
                KafkaCode::GROUP_MAX_SIZE_REACHED,
                ResponseError::GroupMaxSizeReached,
            ),
            (
                KafkaCode::FENCED_INSTANCE_ID,
                ResponseError::FencedInstanceId,
            ),
            (KafkaCode::UNKNOWN_TOPIC_ID, ResponseError::UnknownTopicId),
            (
                KafkaCode::FENCED_MEMBER_EPOCH,
                ResponseError::FencedMemberEpoch,
            ),
            (
                KafkaCode::STALE_MEMBER_EPOCH,
                ResponseError::StaleMemberEpoch,
            ),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(ours.0, theirs.code(), "{theirs:?}");
        }
        assert_eq!(ResponseError::try_from_code(KafkaCode::NONE.0), None);
        assert_eq!(KafkaCode::from_code(KafkaCode::NONE.0), None);
    }

    #[test]
    fn unsupported_version_names_api_and_both_ranges() {
        let e = WireError::UnsupportedVersion {
            api: ApiKey::Fetch as i16,
            ours: (4, 12),
            broker: Some((0, 3)),
        };
        let s = e.to_string();
        assert!(s.contains("Fetch"), "{s}");
        assert!(s.contains("4..=12"), "{s}");
        assert!(s.contains("0..=3"), "{s}");
    }

    #[test]
    fn a_copied_error_keeps_its_variant_kind_and_source() {
        let e = WireError::RetriesExhausted {
            what: "Fetch".to_string(),
            attempts: 3,
            last: Box::new(WireError::io(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "reset by peer",
            ))),
        };
        let copy = e.clone();
        assert_eq!(copy.to_string(), e.to_string());
        let WireError::RetriesExhausted { last, .. } = &copy else {
            panic!("variant changed: {copy:?}");
        };
        let WireError::Io(io) = last.as_ref() else {
            panic!("inner variant changed: {last:?}");
        };
        assert_eq!(io.kind(), io::ErrorKind::ConnectionReset);
        assert_eq!(copy.retriable(), e.retriable());
        assert!(last.retriable() && last.breaks_connection());
        let frame = WireError::FrameTooLarge { len: 10, max: 5 }.clone();
        assert!(matches!(
            frame,
            WireError::FrameTooLarge { len: 10, max: 5 }
        ));
    }

    /// Every layer of `e`'s chain, as displayed.
    pub(crate) fn layers(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
        let mut out = vec![e.to_string()];
        let mut next = e.source();
        while let Some(cause) = next {
            out.push(cause.to_string());
            next = cause.source();
        }
        out
    }

    /// Asserts that no layer of `e`'s chain repeats the message of the error under it, so a
    /// chain printer shows each cause once.
    pub(crate) fn assert_chain_shows_each_cause_once(e: &(dyn std::error::Error + 'static)) {
        let layers = layers(e);
        for pair in layers.windows(2) {
            assert!(
                !pair[0].contains(&pair[1]),
                "{:?} repeats its source {:?}",
                pair[0],
                pair[1]
            );
        }
    }

    #[test]
    fn wrapped_errors_are_returned_as_the_source_and_not_repeated() {
        let io = WireError::io(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "connect to 127.0.0.1:9092: refused",
        ));
        assert_eq!(io.to_string(), "I/O error (connection refused)");
        let retried = WireError::RetriesExhausted {
            what: "Metadata".to_string(),
            attempts: 3,
            last: Box::new(io),
        };
        assert_eq!(
            layers(&retried),
            [
                "Metadata failed after 3 attempts",
                "I/O error (connection refused)",
                "connect to 127.0.0.1:9092: refused"
            ]
        );
        assert_chain_shows_each_cause_once(&retried);
        assert_eq!(
            ErrorChain(&retried).to_string(),
            "Metadata failed after 3 attempts: I/O error (connection refused): connect to \
             127.0.0.1:9092: refused"
        );
        let leaf = WireError::kafka(ApiKey::Fetch, KafkaCode::NOT_LEADER_OR_FOLLOWER, "t-0");
        assert!(std::error::Error::source(&leaf).is_none());
        assert_eq!(ErrorChain(&leaf).to_string(), leaf.to_string());
    }

    #[test]
    fn kinds_tell_an_ended_generation_the_network_and_a_refusal_apart() {
        for code in [
            KafkaCode::ILLEGAL_GENERATION,
            KafkaCode::UNKNOWN_MEMBER_ID,
            KafkaCode::FENCED_INSTANCE_ID,
            KafkaCode::REBALANCE_IN_PROGRESS,
            KafkaCode::FENCED_MEMBER_EPOCH,
            KafkaCode::STALE_MEMBER_EPOCH,
        ] {
            let e = WireError::kafka(ApiKey::OffsetCommit, code, "");
            assert_eq!(e.kind(), ErrorKind::GenerationOver, "{code}");
        }
        for code in [
            KafkaCode::GROUP_AUTHORIZATION_FAILED,
            KafkaCode::NOT_COORDINATOR,
            KafkaCode::OFFSET_METADATA_TOO_LARGE,
            KafkaCode(9999),
        ] {
            let e = WireError::kafka(ApiKey::OffsetCommit, code, "");
            assert_eq!(e.kind(), ErrorKind::Refused, "{code}");
        }
        let timeout = WireError::Timeout {
            what: "connect".to_string(),
        };
        assert_eq!(timeout.kind(), ErrorKind::Network);
        assert_eq!(
            WireError::io(io::Error::from(io::ErrorKind::ConnectionReset)).kind(),
            ErrorKind::Network
        );
        assert_eq!(
            WireError::NoBrokerAvailable { tried: vec![] }.kind(),
            ErrorKind::Network
        );
        // Exhausted retries are what their last attempt was.
        let retried = |last: WireError| WireError::RetriesExhausted {
            what: "x".to_string(),
            attempts: 3,
            last: Box::new(last),
        };
        assert_eq!(retried(timeout.clone()).kind(), ErrorKind::Network);
        assert_eq!(
            retried(WireError::kafka(
                ApiKey::Heartbeat,
                KafkaCode::ILLEGAL_GENERATION,
                ""
            ))
            .kind(),
            ErrorKind::GenerationOver
        );
        let refused_login = WireError::Authentication {
            mechanism: "SCRAM-SHA-256",
            broker: "b:9092".to_string(),
            reason: "invalid-proof".to_string(),
        };
        assert_eq!(refused_login.kind(), ErrorKind::Refused);
        assert_eq!(
            WireError::Protocol("bad".to_string()).kind(),
            ErrorKind::Protocol
        );
        assert_eq!(WireError::Config("x".to_string()).kind(), ErrorKind::Config);
    }

    #[test]
    fn io_timeouts_become_timeout() {
        let e: WireError = io::Error::from(io::ErrorKind::WouldBlock).into();
        assert!(matches!(e, WireError::Timeout { .. }));
        assert!(e.retriable());
        assert!(e.breaks_connection());
    }
}
