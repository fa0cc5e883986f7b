//! The one name every layer uses for "a partition of a topic".

use std::fmt;
use std::sync::Arc;

/// Identifies a partition of a topic.
///
/// Every layer (guard, wire, group, consumer) keys its state by this type, so an assignment
/// decoded from the network can be handed to the guard without conversion. The topic is an
/// `Arc<str>` because the same topic name is shared by many partitions and many records; cloning a
/// `TopicPartition` must stay cheap on the hot path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: Arc<str>,
    /// Partition index within the topic.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds a `TopicPartition` from anything that converts into a shared topic name.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}
