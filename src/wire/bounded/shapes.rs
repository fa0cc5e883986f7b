//! The shape of every response this client decodes: field kinds and the versions each field
//! exists in, as the Kafka protocol defines them (Apache Kafka's public message schemas).
//!
//! Only what bounding needs is kept: the kind of each field (fixed width, string, bytes, array,
//! struct), its version range, the tag of a tagged field, and the versions in which a struct field
//! may be null (its encoding then starts with a marker byte). Other nullability is not recorded:
//! the walker accepts a null string, bytes or array anywhere, because a null allocates nothing
//! and refusing one is `kafka-protocol`'s job. The tests in `super::tests` encode bytes from these tables, decode
//! them with `kafka-protocol` and require the identical bytes back, for every version of every
//! API, so a table that disagrees with the codec fails the build's tests.

use kafka_protocol::messages::ApiKey;

use super::{f, txn_shapes, Kind as K, Schema, MAX};

/// ApiVersions response (API 18), versions 0-4.
pub(super) static API_VERSIONS: Schema = Schema {
    api: ApiKey::ApiVersions,
    versions: (0, 4),
    flexible_from: 3,
    fields: &[
        f("ErrorCode", K::I16, 0, MAX),
        f(
            "ApiKeys",
            K::Array(&K::Struct(&[
                f("ApiKey", K::I16, 0, MAX),
                f("MinVersion", K::I16, 0, MAX),
                f("MaxVersion", K::I16, 0, MAX),
            ])),
            0,
            MAX,
        ),
        f("ThrottleTimeMs", K::I32, 1, MAX),
        f(
            "SupportedFeatures",
            K::Array(&K::Struct(&[
                f("Name", K::Str, 3, MAX),
                f("MinVersion", K::I16, 3, MAX),
                f("MaxVersion", K::I16, 3, MAX),
            ])),
            3,
            MAX,
        )
        .tagged(0),
        f("FinalizedFeaturesEpoch", K::I64, 3, MAX).tagged(1),
        f(
            "FinalizedFeatures",
            K::Array(&K::Struct(&[
                f("Name", K::Str, 3, MAX),
                f("MaxVersionLevel", K::I16, 3, MAX),
                f("MinVersionLevel", K::I16, 3, MAX),
            ])),
            3,
            MAX,
        )
        .tagged(2),
        f("ZkMigrationReady", K::Bool, 3, MAX).tagged(3),
    ],
};

/// Metadata response (API 3), versions 0-12.
pub(super) static METADATA: Schema = Schema {
    api: ApiKey::Metadata,
    versions: (0, 12),
    flexible_from: 9,
    fields: &[
        f("ThrottleTimeMs", K::I32, 3, MAX),
        f(
            "Brokers",
            K::Array(&K::Struct(&[
                f("NodeId", K::I32, 0, MAX),
                f("Host", K::Str, 0, MAX),
                f("Port", K::I32, 0, MAX),
                f("Rack", K::Str, 1, MAX),
            ])),
            0,
            MAX,
        ),
        f("ClusterId", K::Str, 2, MAX),
        f("ControllerId", K::I32, 1, MAX),
        f(
            "Topics",
            K::Array(&K::Struct(&[
                f("ErrorCode", K::I16, 0, MAX),
                f("Name", K::Str, 0, MAX),
                f("TopicId", K::Uuid, 10, MAX),
                f("IsInternal", K::Bool, 1, MAX),
                f(
                    "Partitions",
                    K::Array(&K::Struct(&[
                        f("ErrorCode", K::I16, 0, MAX),
                        f("PartitionIndex", K::I32, 0, MAX),
                        f("LeaderId", K::I32, 0, MAX),
                        f("LeaderEpoch", K::I32, 7, MAX),
                        f("ReplicaNodes", K::Array(&K::I32), 0, MAX),
                        f("IsrNodes", K::Array(&K::I32), 0, MAX),
                        f("OfflineReplicas", K::Array(&K::I32), 5, MAX),
                    ])),
                    0,
                    MAX,
                ),
                f("TopicAuthorizedOperations", K::I32, 8, MAX),
            ])),
            0,
            MAX,
        ),
        f("ClusterAuthorizedOperations", K::I32, 8, 10),
    ],
};

/// Fetch response (API 1), versions 0-17.
pub(super) static FETCH: Schema = Schema {
    api: ApiKey::Fetch,
    versions: (0, 17),
    flexible_from: 12,
    fields: &[
        f("ThrottleTimeMs", K::I32, 1, MAX),
        f("ErrorCode", K::I16, 7, MAX),
        f("SessionId", K::I32, 7, MAX),
        f(
            "Responses",
            K::Array(&K::Struct(&[
                f("Topic", K::Str, 0, 12),
                f("TopicId", K::Uuid, 13, MAX),
                f(
                    "Partitions",
                    K::Array(&K::Struct(&[
                        f("PartitionIndex", K::I32, 0, MAX),
                        f("ErrorCode", K::I16, 0, MAX),
                        f("HighWatermark", K::I64, 0, MAX),
                        f("LastStableOffset", K::I64, 4, MAX),
                        f("LogStartOffset", K::I64, 5, MAX),
                        f(
                            "DivergingEpoch",
                            K::Struct(&[
                                f("Epoch", K::I32, 12, MAX),
                                f("EndOffset", K::I64, 12, MAX),
                            ]),
                            12,
                            MAX,
                        )
                        .tagged(0),
                        f(
                            "CurrentLeader",
                            K::Struct(&[
                                f("LeaderId", K::I32, 12, MAX),
                                f("LeaderEpoch", K::I32, 12, MAX),
                            ]),
                            12,
                            MAX,
                        )
                        .tagged(1),
                        f(
                            "SnapshotId",
                            K::Struct(&[
                                f("EndOffset", K::I64, 0, MAX),
                                f("Epoch", K::I32, 0, MAX),
                            ]),
                            12,
                            MAX,
                        )
                        .tagged(2),
                        f(
                            "AbortedTransactions",
                            K::Array(&K::Struct(&[
                                f("ProducerId", K::I64, 4, MAX),
                                f("FirstOffset", K::I64, 4, MAX),
                            ])),
                            4,
                            MAX,
                        ),
                        f("PreferredReadReplica", K::I32, 11, MAX),
                        f("Records", K::Records, 0, MAX),
                    ])),
                    0,
                    MAX,
                ),
            ])),
            0,
            MAX,
        ),
        f(
            "NodeEndpoints",
            K::Array(&K::Struct(&[
                f("NodeId", K::I32, 16, MAX),
                f("Host", K::Str, 16, MAX),
                f("Port", K::I32, 16, MAX),
                f("Rack", K::Str, 16, MAX),
            ])),
            16,
            MAX,
        )
        .tagged(0),
    ],
};

/// ListOffsets response (API 2), versions 0-10.
pub(super) static LIST_OFFSETS: Schema = Schema {
    api: ApiKey::ListOffsets,
    versions: (0, 10),
    flexible_from: 6,
    fields: &[
        f("ThrottleTimeMs", K::I32, 2, MAX),
        f(
            "Topics",
            K::Array(&K::Struct(&[
                f("Name", K::Str, 0, MAX),
                f(
                    "Partitions",
                    K::Array(&K::Struct(&[
                        f("PartitionIndex", K::I32, 0, MAX),
                        f("ErrorCode", K::I16, 0, MAX),
                        f("OldStyleOffsets", K::Array(&K::I64), 0, 0),
                        f("Timestamp", K::I64, 1, MAX),
                        f("Offset", K::I64, 1, MAX),
                        f("LeaderEpoch", K::I32, 4, MAX),
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

/// OffsetFetch response (API 9), versions 0-9.
pub(super) static OFFSET_FETCH: Schema = Schema {
    api: ApiKey::OffsetFetch,
    versions: (0, 9),
    flexible_from: 6,
    fields: &[
        f("ThrottleTimeMs", K::I32, 3, MAX),
        f(
            "Topics",
            K::Array(&K::Struct(&[
                f("Name", K::Str, 0, 7),
                f(
                    "Partitions",
                    K::Array(&K::Struct(&[
                        f("PartitionIndex", K::I32, 0, 7),
                        f("CommittedOffset", K::I64, 0, 7),
                        f("CommittedLeaderEpoch", K::I32, 5, 7),
                        f("Metadata", K::Str, 0, 7),
                        f("ErrorCode", K::I16, 0, 7),
                    ])),
                    0,
                    7,
                ),
            ])),
            0,
            7,
        ),
        f("ErrorCode", K::I16, 2, 7),
        f(
            "Groups",
            K::Array(&K::Struct(&[
                f("GroupId", K::Str, 8, MAX),
                f(
                    "Topics",
                    K::Array(&K::Struct(&[
                        f("Name", K::Str, 8, MAX),
                        f(
                            "Partitions",
                            K::Array(&K::Struct(&[
                                f("PartitionIndex", K::I32, 8, MAX),
                                f("CommittedOffset", K::I64, 8, MAX),
                                f("CommittedLeaderEpoch", K::I32, 8, MAX),
                                f("Metadata", K::Str, 8, MAX),
                                f("ErrorCode", K::I16, 8, MAX),
                            ])),
                            8,
                            MAX,
                        ),
                    ])),
                    8,
                    MAX,
                ),
                f("ErrorCode", K::I16, 8, MAX),
            ])),
            8,
            MAX,
        ),
    ],
};

/// OffsetCommit response (API 8), versions 0-9.
pub(super) static OFFSET_COMMIT: Schema = Schema {
    api: ApiKey::OffsetCommit,
    versions: (0, 9),
    flexible_from: 8,
    fields: &[
        f("ThrottleTimeMs", K::I32, 3, MAX),
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

/// FindCoordinator response (API 10), versions 0-6.
pub(super) static FIND_COORDINATOR: Schema = Schema {
    api: ApiKey::FindCoordinator,
    versions: (0, 6),
    flexible_from: 3,
    fields: &[
        f("ThrottleTimeMs", K::I32, 1, MAX),
        f("ErrorCode", K::I16, 0, 3),
        f("ErrorMessage", K::Str, 1, 3),
        f("NodeId", K::I32, 0, 3),
        f("Host", K::Str, 0, 3),
        f("Port", K::I32, 0, 3),
        f(
            "Coordinators",
            K::Array(&K::Struct(&[
                f("Key", K::Str, 4, MAX),
                f("NodeId", K::I32, 4, MAX),
                f("Host", K::Str, 4, MAX),
                f("Port", K::I32, 4, MAX),
                f("ErrorCode", K::I16, 4, MAX),
                f("ErrorMessage", K::Str, 4, MAX),
            ])),
            4,
            MAX,
        ),
    ],
};

/// JoinGroup response (API 11), versions 0-9.
pub(super) static JOIN_GROUP: Schema = Schema {
    api: ApiKey::JoinGroup,
    versions: (0, 9),
    flexible_from: 6,
    fields: &[
        f("ThrottleTimeMs", K::I32, 2, MAX),
        f("ErrorCode", K::I16, 0, MAX),
        f("GenerationId", K::I32, 0, MAX),
        f("ProtocolType", K::Str, 7, MAX),
        f("ProtocolName", K::Str, 0, MAX),
        f("Leader", K::Str, 0, MAX),
        f("SkipAssignment", K::Bool, 9, MAX),
        f("MemberId", K::Str, 0, MAX),
        f(
            "Members",
            K::Array(&K::Struct(&[
                f("MemberId", K::Str, 0, MAX),
                f("GroupInstanceId", K::Str, 5, MAX),
                f("Metadata", K::Bytes, 0, MAX),
            ])),
            0,
            MAX,
        ),
    ],
};

/// SyncGroup response (API 14), versions 0-5.
pub(super) static SYNC_GROUP: Schema = Schema {
    api: ApiKey::SyncGroup,
    versions: (0, 5),
    flexible_from: 4,
    fields: &[
        f("ThrottleTimeMs", K::I32, 1, MAX),
        f("ErrorCode", K::I16, 0, MAX),
        f("ProtocolType", K::Str, 5, MAX),
        f("ProtocolName", K::Str, 5, MAX),
        f("Assignment", K::Bytes, 0, MAX),
    ],
};

/// Heartbeat response (API 12), versions 0-4.
pub(super) static HEARTBEAT: Schema = Schema {
    api: ApiKey::Heartbeat,
    versions: (0, 4),
    flexible_from: 4,
    fields: &[
        f("ThrottleTimeMs", K::I32, 1, MAX),
        f("ErrorCode", K::I16, 0, MAX),
    ],
};

/// InitProducerId response (API 22), versions 0-5.
pub(super) static INIT_PRODUCER_ID: Schema = Schema {
    api: ApiKey::InitProducerId,
    versions: (0, 5),
    flexible_from: 2,
    fields: &[
        f("ThrottleTimeMs", K::I32, 0, MAX),
        f("ErrorCode", K::I16, 0, MAX),
        f("ProducerId", K::I64, 0, MAX),
        f("ProducerEpoch", K::I16, 0, MAX),
    ],
};

/// LeaveGroup response (API 13), versions 0-5.
pub(super) static LEAVE_GROUP: Schema = Schema {
    api: ApiKey::LeaveGroup,
    versions: (0, 5),
    flexible_from: 4,
    fields: &[
        f("ThrottleTimeMs", K::I32, 1, MAX),
        f("ErrorCode", K::I16, 0, MAX),
        f(
            "Members",
            K::Array(&K::Struct(&[
                f("MemberId", K::Str, 3, MAX),
                f("GroupInstanceId", K::Str, 3, MAX),
                f("ErrorCode", K::I16, 3, MAX),
            ])),
            3,
            MAX,
        ),
    ],
};

/// SaslHandshake response (API 17), versions 0-1.
pub(super) static SASL_HANDSHAKE: Schema = Schema {
    api: ApiKey::SaslHandshake,
    versions: (0, 1),
    flexible_from: i16::MAX,
    fields: &[
        f("ErrorCode", K::I16, 0, MAX),
        f("Mechanisms", K::Array(&K::Str), 0, MAX),
    ],
};

/// SaslAuthenticate response (API 36), versions 0-2.
pub(super) static SASL_AUTHENTICATE: Schema = Schema {
    api: ApiKey::SaslAuthenticate,
    versions: (0, 2),
    flexible_from: 2,
    fields: &[
        f("ErrorCode", K::I16, 0, MAX),
        f("ErrorMessage", K::Str, 0, MAX),
        f("AuthBytes", K::Bytes, 0, MAX),
        f("SessionLifetimeMs", K::I64, 1, MAX),
    ],
};

/// CreateTopics response (API 19), versions 0-7.
pub(super) static CREATE_TOPICS: Schema = Schema {
    api: ApiKey::CreateTopics,
    versions: (0, 7),
    flexible_from: 5,
    fields: &[
        f("ThrottleTimeMs", K::I32, 2, MAX),
        f(
            "Topics",
            K::Array(&K::Struct(&[
                f("Name", K::Str, 0, MAX),
                f("TopicId", K::Uuid, 7, MAX),
                f("ErrorCode", K::I16, 0, MAX),
                f("ErrorMessage", K::Str, 1, MAX),
                f("TopicConfigErrorCode", K::I16, 5, MAX).tagged(0),
                f("NumPartitions", K::I32, 5, MAX),
                f("ReplicationFactor", K::I16, 5, MAX),
                f(
                    "Configs",
                    K::Array(&K::Struct(&[
                        f("Name", K::Str, 5, MAX),
                        f("Value", K::Str, 5, MAX),
                        f("ReadOnly", K::Bool, 5, MAX),
                        f("ConfigSource", K::I8, 5, MAX),
                        f("IsSensitive", K::Bool, 5, MAX),
                    ])),
                    5,
                    MAX,
                ),
            ])),
            0,
            MAX,
        ),
    ],
};

/// Produce response (API 0), versions 0-13 (v13 names topics by id; the client stops at 12).
pub(super) static PRODUCE: Schema = Schema {
    api: ApiKey::Produce,
    versions: (0, 13),
    flexible_from: 9,
    fields: &[
        f(
            "Responses",
            K::Array(&K::Struct(&[
                f("Name", K::Str, 0, 12),
                f("TopicId", K::Uuid, 13, MAX),
                f(
                    "PartitionResponses",
                    K::Array(&K::Struct(&[
                        f("Index", K::I32, 0, MAX),
                        f("ErrorCode", K::I16, 0, MAX),
                        f("BaseOffset", K::I64, 0, MAX),
                        f("LogAppendTimeMs", K::I64, 2, MAX),
                        f("LogStartOffset", K::I64, 5, MAX),
                        f(
                            "RecordErrors",
                            K::Array(&K::Struct(&[
                                f("BatchIndex", K::I32, 8, MAX),
                                f("BatchIndexErrorMessage", K::Str, 8, MAX),
                            ])),
                            8,
                            MAX,
                        ),
                        f("ErrorMessage", K::Str, 8, MAX),
                        f(
                            "CurrentLeader",
                            K::Struct(&[
                                f("LeaderId", K::I32, 10, MAX),
                                f("LeaderEpoch", K::I32, 10, MAX),
                            ]),
                            10,
                            MAX,
                        )
                        .tagged(0),
                    ])),
                    0,
                    MAX,
                ),
            ])),
            0,
            MAX,
        ),
        f("ThrottleTimeMs", K::I32, 1, MAX),
        f(
            "NodeEndpoints",
            K::Array(&K::Struct(&[
                f("NodeId", K::I32, 10, MAX),
                f("Host", K::Str, 10, MAX),
                f("Port", K::I32, 10, MAX),
                f("Rack", K::Str, 10, MAX),
            ])),
            10,
            MAX,
        )
        .tagged(0),
    ],
};

/// DescribeGroups response (API 15), versions 0-6 (v6 adds the per-group ErrorMessage).
pub(super) static DESCRIBE_GROUPS: Schema = Schema {
    api: ApiKey::DescribeGroups,
    versions: (0, 6),
    flexible_from: 5,
    fields: &[
        f("ThrottleTimeMs", K::I32, 1, MAX),
        f(
            "Groups",
            K::Array(&K::Struct(&[
                f("ErrorCode", K::I16, 0, MAX),
                f("ErrorMessage", K::Str, 6, MAX),
                f("GroupId", K::Str, 0, MAX),
                f("GroupState", K::Str, 0, MAX),
                f("ProtocolType", K::Str, 0, MAX),
                f("ProtocolData", K::Str, 0, MAX),
                f(
                    "Members",
                    K::Array(&K::Struct(&[
                        f("MemberId", K::Str, 0, MAX),
                        f("GroupInstanceId", K::Str, 4, MAX),
                        f("ClientId", K::Str, 0, MAX),
                        f("ClientHost", K::Str, 0, MAX),
                        f("MemberMetadata", K::Bytes, 0, MAX),
                        f("MemberAssignment", K::Bytes, 0, MAX),
                    ])),
                    0,
                    MAX,
                ),
                f("AuthorizedOperations", K::I32, 3, MAX),
            ])),
            0,
            MAX,
        ),
    ],
};

/// ConsumerGroupHeartbeat response (API 68), versions 0-1.
pub(super) static CONSUMER_GROUP_HEARTBEAT: Schema = Schema {
    api: ApiKey::ConsumerGroupHeartbeat,
    versions: (0, 1),
    flexible_from: 0,
    fields: &[
        f("ThrottleTimeMs", K::I32, 0, MAX),
        f("ErrorCode", K::I16, 0, MAX),
        f("ErrorMessage", K::Str, 0, MAX),
        f("MemberId", K::Str, 0, MAX),
        f("MemberEpoch", K::I32, 0, MAX),
        f("HeartbeatIntervalMs", K::I32, 0, MAX),
        f(
            "Assignment",
            K::Struct(&[f(
                "TopicPartitions",
                K::Array(&K::Struct(&[
                    f("TopicId", K::Uuid, 0, MAX),
                    f("Partitions", K::Array(&K::I32), 0, MAX),
                ])),
                0,
                MAX,
            )]),
            0,
            MAX,
        )
        .nullable_struct(0, MAX),
    ],
};

/// DescribeConfigs response (API 32), versions 1-4 (v0, without synonyms, is gone from Kafka
/// 4.0).
pub(super) static DESCRIBE_CONFIGS: Schema = Schema {
    api: ApiKey::DescribeConfigs,
    versions: (1, 4),
    flexible_from: 4,
    fields: &[
        f("ThrottleTimeMs", K::I32, 0, MAX),
        f(
            "Results",
            K::Array(&K::Struct(&[
                f("ErrorCode", K::I16, 0, MAX),
                f("ErrorMessage", K::Str, 0, MAX),
                f("ResourceType", K::I8, 0, MAX),
                f("ResourceName", K::Str, 0, MAX),
                f(
                    "Configs",
                    K::Array(&K::Struct(&[
                        f("Name", K::Str, 0, MAX),
                        f("Value", K::Str, 0, MAX),
                        f("ReadOnly", K::Bool, 0, MAX),
                        f("ConfigSource", K::I8, 1, MAX),
                        f("IsSensitive", K::Bool, 0, MAX),
                        f(
                            "Synonyms",
                            K::Array(&K::Struct(&[
                                f("Name", K::Str, 1, MAX),
                                f("Value", K::Str, 1, MAX),
                                f("Source", K::I8, 1, MAX),
                            ])),
                            1,
                            MAX,
                        ),
                        f("ConfigType", K::I8, 3, MAX),
                        f("Documentation", K::Str, 3, MAX),
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

/// IncrementalAlterConfigs response (API 44), versions 0-1.
pub(super) static INCREMENTAL_ALTER_CONFIGS: Schema = Schema {
    api: ApiKey::IncrementalAlterConfigs,
    versions: (0, 1),
    flexible_from: 1,
    fields: &[
        f("ThrottleTimeMs", K::I32, 0, MAX),
        f(
            "Responses",
            K::Array(&K::Struct(&[
                f("ErrorCode", K::I16, 0, MAX),
                f("ErrorMessage", K::Str, 0, MAX),
                f("ResourceType", K::I8, 0, MAX),
                f("ResourceName", K::Str, 0, MAX),
            ])),
            0,
            MAX,
        ),
    ],
};

/// ShareGroupHeartbeat response (API 76), version 1 (v0 was KIP-932's early access, gone from
/// Kafka 4.1).
pub(super) static SHARE_GROUP_HEARTBEAT: Schema = Schema {
    api: ApiKey::ShareGroupHeartbeat,
    versions: (1, 1),
    flexible_from: 0,
    fields: &[
        f("ThrottleTimeMs", K::I32, 0, MAX),
        f("ErrorCode", K::I16, 0, MAX),
        f("ErrorMessage", K::Str, 0, MAX),
        f("MemberId", K::Str, 0, MAX),
        f("MemberEpoch", K::I32, 0, MAX),
        f("HeartbeatIntervalMs", K::I32, 0, MAX),
        f(
            "Assignment",
            K::Struct(&[f(
                "TopicPartitions",
                K::Array(&K::Struct(&[
                    f("TopicId", K::Uuid, 0, MAX),
                    f("Partitions", K::Array(&K::I32), 0, MAX),
                ])),
                0,
                MAX,
            )]),
            0,
            MAX,
        )
        .nullable_struct(0, MAX),
    ],
};

/// ShareFetch response (API 78), versions 1-2 (v2 is laid out as v1; KIP-932).
pub(super) static SHARE_FETCH: Schema = Schema {
    api: ApiKey::ShareFetch,
    versions: (1, 2),
    flexible_from: 0,
    fields: &[
        f("ThrottleTimeMs", K::I32, 0, MAX),
        f("ErrorCode", K::I16, 0, MAX),
        f("ErrorMessage", K::Str, 0, MAX),
        f("AcquisitionLockTimeoutMs", K::I32, 1, MAX),
        f(
            "Responses",
            K::Array(&K::Struct(&[
                f("TopicId", K::Uuid, 0, MAX),
                f(
                    "Partitions",
                    K::Array(&K::Struct(&[
                        f("PartitionIndex", K::I32, 0, MAX),
                        f("ErrorCode", K::I16, 0, MAX),
                        f("ErrorMessage", K::Str, 0, MAX),
                        f("AcknowledgeErrorCode", K::I16, 0, MAX),
                        f("AcknowledgeErrorMessage", K::Str, 0, MAX),
                        f("CurrentLeader", LEADER, 0, MAX),
                        f("Records", K::Records, 0, MAX),
                        f(
                            "AcquiredRecords",
                            K::Array(&K::Struct(&[
                                f("FirstOffset", K::I64, 0, MAX),
                                f("LastOffset", K::I64, 0, MAX),
                                f("DeliveryCount", K::I16, 0, MAX),
                            ])),
                            0,
                            MAX,
                        ),
                    ])),
                    0,
                    MAX,
                ),
            ])),
            0,
            MAX,
        ),
        f(
            "NodeEndpoints",
            K::Array(&K::Struct(&[
                f("NodeId", K::I32, 0, MAX),
                f("Host", K::Str, 0, MAX),
                f("Port", K::I32, 0, MAX),
                f("Rack", K::Str, 0, MAX),
            ])),
            0,
            MAX,
        ),
    ],
};

/// ShareAcknowledge response (API 79), versions 1-2 (v2 adds AcquisitionLockTimeoutMs).
pub(super) static SHARE_ACKNOWLEDGE: Schema = Schema {
    api: ApiKey::ShareAcknowledge,
    versions: (1, 2),
    flexible_from: 0,
    fields: &[
        f("ThrottleTimeMs", K::I32, 0, MAX),
        f("ErrorCode", K::I16, 0, MAX),
        f("ErrorMessage", K::Str, 0, MAX),
        f("AcquisitionLockTimeoutMs", K::I32, 2, MAX),
        f(
            "Responses",
            K::Array(&K::Struct(&[
                f("TopicId", K::Uuid, 0, MAX),
                f(
                    "Partitions",
                    K::Array(&K::Struct(&[
                        f("PartitionIndex", K::I32, 0, MAX),
                        f("ErrorCode", K::I16, 0, MAX),
                        f("ErrorMessage", K::Str, 0, MAX),
                        f("CurrentLeader", LEADER, 0, MAX),
                    ])),
                    0,
                    MAX,
                ),
            ])),
            0,
            MAX,
        ),
        f(
            "NodeEndpoints",
            K::Array(&K::Struct(&[
                f("NodeId", K::I32, 0, MAX),
                f("Host", K::Str, 0, MAX),
                f("Port", K::I32, 0, MAX),
                f("Rack", K::Str, 0, MAX),
            ])),
            0,
            MAX,
        ),
    ],
};

/// A partition's current leader in the share responses.
const LEADER: K = K::Struct(&[
    f("LeaderId", K::I32, 0, MAX),
    f("LeaderEpoch", K::I32, 0, MAX),
]);

/// Every schema, for lookup by API key.
pub(super) static ALL: &[&Schema] = &[
    &API_VERSIONS,
    &METADATA,
    &FETCH,
    &LIST_OFFSETS,
    &OFFSET_FETCH,
    &OFFSET_COMMIT,
    &FIND_COORDINATOR,
    &JOIN_GROUP,
    &SYNC_GROUP,
    &HEARTBEAT,
    &LEAVE_GROUP,
    &SASL_HANDSHAKE,
    &SASL_AUTHENTICATE,
    &CREATE_TOPICS,
    &PRODUCE,
    &INIT_PRODUCER_ID,
    &txn_shapes::ADD_PARTITIONS_TO_TXN,
    &txn_shapes::ADD_OFFSETS_TO_TXN,
    &txn_shapes::TXN_OFFSET_COMMIT,
    &txn_shapes::END_TXN,
    &DESCRIBE_GROUPS,
    &CONSUMER_GROUP_HEARTBEAT,
    &DESCRIBE_CONFIGS,
    &INCREMENTAL_ALTER_CONFIGS,
    &SHARE_GROUP_HEARTBEAT,
    &SHARE_FETCH,
    &SHARE_ACKNOWLEDGE,
];
