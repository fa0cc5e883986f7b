//! Where the wire client works around a broker that deviates from Kafka: each workaround is one
//! named function or constant here (or, when it cannot be separated from its parser, one named
//! function elsewhere that this list points to), documented with the broker, what it does wrong,
//! what Kafka does, and what the client does instead. The general path calls them by name.
//!
//! A workaround here never changes what a Kafka broker is sent or how its answers are read: it
//! only applies where Kafka's behaviour cannot occur. The group layer's workarounds are in
//! `group/quirks.rs`; docs/DESIGN.md ("Brokers in tests") lists both.
//!
//! - [`controller_or_any_broker`]: librdkafka's mock names a controller that is not in its broker
//!   list.
//! - `records/mod.rs` `control_marker`: librdkafka's mock writes transaction markers with a CRC of 0,
//!   so the marker type is read without `kafka-protocol`'s CRC check (a marker carries no user
//!   data; every data batch is still checked).

use std::collections::BTreeMap;

/// The broker to send controller requests (CreateTopics) to.
///
/// **librdkafka's mock cluster** reports controller id 0 in its Metadata answers while it
/// numbers its brokers from 1, so the controller it names is no broker at all. **Kafka** names
/// one of the brokers in the same answer. A controller id missing from the broker list
/// therefore falls back to any known broker (the mock serves CreateTopics on each of them);
/// with Kafka the named controller is always in the list, so Kafka never takes the fallback.
/// `None` when no broker is known. Only the broker ids matter, so any map keyed by them will do
/// (the client passes its broker list).
pub(crate) fn controller_or_any_broker<B>(
    controller: Option<i32>,
    brokers: &BTreeMap<i32, B>,
) -> Option<i32> {
    controller
        .filter(|id| brokers.contains_key(id))
        .or_else(|| brokers.keys().next().copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::BrokerInfo;

    fn brokers(ids: &[i32]) -> BTreeMap<i32, BrokerInfo> {
        ids.iter()
            .map(|&id| {
                (
                    id,
                    BrokerInfo {
                        node_id: id,
                        host: "127.0.0.1".to_string(),
                        port: 9092,
                        rack: None,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_controller_outside_the_broker_list_falls_back_to_a_known_broker() {
        // Kafka: the named controller is a broker of the list.
        assert_eq!(
            controller_or_any_broker(Some(2), &brokers(&[1, 2, 3])),
            Some(2)
        );
        // librdkafka's mock: controller 0, brokers 1..=3.
        assert_eq!(
            controller_or_any_broker(Some(0), &brokers(&[1, 2, 3])),
            Some(1)
        );
        assert_eq!(controller_or_any_broker(None, &brokers(&[4])), Some(4));
        assert_eq!(controller_or_any_broker(Some(0), &brokers(&[])), None);
    }
}
