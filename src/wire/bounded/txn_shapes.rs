//! The shapes of the transaction responses (KIP-98, KIP-890): AddPartitionsToTxn,
//! AddOffsetsToTxn, TxnOffsetCommit and EndTxn, kept apart from `shapes.rs` (which lists them
//! in its `ALL`) only so that neither file grows past the size a reader takes in at once. Same
//! rules as there: the kinds and version ranges of Apache Kafka's message schemas, checked
//! against `kafka-protocol`'s codec by `super::tests`.

use kafka_protocol::messages::ApiKey;

use super::{f, Kind as K, Schema, MAX};

/// AddPartitionsToTxn response (API 24), versions 0-5. Clients send v0-3 (one transaction,
/// results by topic); v4+ is the brokers' batch form (results by transaction, a top-level
/// error), described too because `kafka-protocol` decodes it.
pub(super) static ADD_PARTITIONS_TO_TXN: Schema = Schema {
    api: ApiKey::AddPartitionsToTxn,
    versions: (0, 5),
    flexible_from: 3,
    fields: &[
        f("ThrottleTimeMs", K::I32, 0, MAX),
        f("ErrorCode", K::I16, 4, MAX),
        f(
            "ResultsByTransaction",
            K::Array(&K::Struct(&[
                f("TransactionalId", K::Str, 4, MAX),
                f("TopicResults", K::Array(&TXN_TOPIC_RESULT), 4, MAX),
            ])),
            4,
            MAX,
        ),
        f(
            "ResultsByTopicV3AndBelow",
            K::Array(&TXN_TOPIC_RESULT),
            0,
            3,
        ),
    ],
};

/// One topic's partition results in AddPartitionsToTxn (both forms).
const TXN_TOPIC_RESULT: K = K::Struct(&[
    f("Name", K::Str, 0, MAX),
    f(
        "ResultsByPartition",
        K::Array(&K::Struct(&[
            f("PartitionIndex", K::I32, 0, MAX),
            f("PartitionErrorCode", K::I16, 0, MAX),
        ])),
        0,
        MAX,
    ),
]);

/// AddOffsetsToTxn response (API 25), versions 0-4.
pub(super) static ADD_OFFSETS_TO_TXN: Schema = Schema {
    api: ApiKey::AddOffsetsToTxn,
    versions: (0, 4),
    flexible_from: 3,
    fields: &[
        f("ThrottleTimeMs", K::I32, 0, MAX),
        f("ErrorCode", K::I16, 0, MAX),
    ],
};

/// TxnOffsetCommit response (API 28), versions 0-5.
pub(super) static TXN_OFFSET_COMMIT: Schema = Schema {
    api: ApiKey::TxnOffsetCommit,
    versions: (0, 5),
    flexible_from: 3,
    fields: &[
        f("ThrottleTimeMs", K::I32, 0, MAX),
        f(
            "Topics",
            K::Array(&K::Struct(&[
                f("Name", K::Str, 0, MAX),
                f(
                    "Partitions",
                    K::Array(&K::Struct(&[
                        f("PartitionIndex", K::I32, 0, MAX),
                        f("ErrorCode", K::I16, 0, MAX),
                    ])),
                    0,
                    MAX,
                ),
            ])),
            0,
            MAX,
        ),
    ],
};

/// EndTxn response (API 26), versions 0-5 (v5, transaction version 2, adds the producer id and
/// epoch the coordinator bumped to).
pub(super) static END_TXN: Schema = Schema {
    api: ApiKey::EndTxn,
    versions: (0, 5),
    flexible_from: 3,
    fields: &[
        f("ThrottleTimeMs", K::I32, 0, MAX),
        f("ErrorCode", K::I16, 0, MAX),
        f("ProducerId", K::I64, 5, MAX),
        f("ProducerEpoch", K::I16, 5, MAX),
    ],
};
