//! Fuzz target (d): group member metadata and assignments, and every assignor on what was
//! decoded.
//!
//! Input layout: byte 0 the member count (1 + mod 4); per member a 2-byte big-endian length and
//! that many bytes of subscription metadata; then one byte per distinct subscribed topic (its
//! partition count, mod 9); the rest is assignment bytes.
//!
//! Properties: no panic; what decodes re-encodes at its version and decodes to the same fields;
//! every assignor, run on the decoded members, names every member, assigns each partition at
//! most once, only partitions that exist, only of topics the member subscribed to, in sorted
//! lists; a cooperative assignment never hands out a partition another member still owns.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::group::assignor::{assign_and_encode, LeaderError, MemberSubscription, Strategy};
use crate::group::subscription::{
    decode_assignment, decode_subscription, encode_assignment, encode_subscription, Assignment,
    DecodedSubscription, Subscription, MAX_KNOWN_VERSION, NO_GENERATION,
};
use crate::group::AssignError;
use crate::TopicPartition;

fn sorted(parts: &[TopicPartition]) -> Vec<TopicPartition> {
    let set: BTreeSet<TopicPartition> = parts.iter().cloned().collect();
    set.into_iter().collect()
}

fn check_subscription_round_trip(d: &DecodedSubscription) {
    let version = d.version.min(MAX_KNOWN_VERSION);
    let Ok(bytes) = encode_subscription(&d.subscription, version) else {
        return;
    };
    let again = decode_subscription(&bytes);
    let Ok(again) = again else {
        panic!("our own v{version} subscription does not decode: {again:?}");
    };
    let (a, b) = (&d.subscription, &again.subscription);
    assert_eq!(again.version, version);
    assert_eq!(a.topics, b.topics, "topics");
    assert_eq!(a.user_data, b.user_data, "user data");
    if version >= 1 {
        assert_eq!(
            sorted(&a.owned_partitions),
            b.owned_partitions,
            "owned partitions"
        );
    }
    if version >= 2 {
        assert_eq!(a.generation_id, b.generation_id, "generation");
    } else {
        assert_eq!(b.generation_id, NO_GENERATION);
    }
    if version >= 3 {
        assert_eq!(a.rack_id, b.rack_id, "rack");
    }
}

fn check_assignment_round_trip(a: &Assignment) {
    for version in 0..=MAX_KNOWN_VERSION {
        let Ok(bytes) = encode_assignment(a, version) else {
            continue;
        };
        let again = decode_assignment(&bytes);
        let Ok(again) = again else {
            panic!("our own v{version} assignment does not decode: {again:?}");
        };
        assert_eq!(
            sorted(&a.partitions),
            again.partitions,
            "v{version} partitions"
        );
        assert_eq!(a.user_data, again.user_data, "v{version} user data");
    }
}

fn check_assignors(members: &[MemberSubscription], counts: &BTreeMap<String, i32>) {
    for strategy in Strategy::ALL {
        let assignor = strategy.assignor();
        let result = assignor.assign(members, counts);
        let Ok(assignment) = result else {
            // Duplicate member ids are refused by design; nothing else may fail.
            assert!(
                matches!(result, Err(AssignError::DuplicateMember(_))),
                "{strategy}: {result:?}"
            );
            continue;
        };
        let mut seen: BTreeSet<&TopicPartition> = BTreeSet::new();
        for m in members {
            assert!(
                assignment.contains_key(&m.member_id),
                "{strategy}: member missing"
            );
        }
        for (member, parts) in &assignment {
            let sub = members
                .iter()
                .find(|m| &m.member_id == member)
                .map(|m| &m.subscription);
            let Some(sub) = sub else {
                panic!("{strategy}: assignment names unknown member {member:?}");
            };
            assert!(
                parts.windows(2).all(|w| w[0] < w[1]),
                "{strategy}: list not sorted"
            );
            for p in parts {
                assert!(seen.insert(p), "{strategy}: {p} assigned twice");
                assert!(
                    sub.topics.iter().any(|t| **t == *p.topic),
                    "{strategy}: {p} given to {member}, not subscribed to it"
                );
                let count = counts.get(&*p.topic).copied().unwrap_or(0);
                assert!(
                    (0..count).contains(&p.partition),
                    "{strategy}: {p} does not exist"
                );
            }
        }
        let encoded = assign_and_encode(assignor, members, counts);
        assert!(
            !matches!(
                encoded,
                Err(LeaderError::Assign(AssignError::CooperativeViolation(_)))
            ),
            "{strategy}: {encoded:?}"
        );
    }
}

/// Runs target (d) on one input.
pub fn check(input: &[u8]) {
    let Some((&n, mut rest)) = input.split_first() else {
        return;
    };
    let mut members = Vec::new();
    for i in 0..1 + usize::from(n % 4) {
        let Some((len, tail)) = rest.split_at_checked(2) else {
            return;
        };
        let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
        let Some((meta, tail)) = tail.split_at_checked(len.min(tail.len())) else {
            return;
        };
        rest = tail;
        let Ok(decoded) = decode_subscription(meta) else {
            continue;
        };
        check_subscription_round_trip(&decoded);
        let instance = (i % 2 == 1).then(|| format!("instance-{}", i / 2));
        members.push(MemberSubscription::new(
            format!("member-{i}"),
            instance,
            decoded,
        ));
    }
    let topics: BTreeSet<&String> = members
        .iter()
        .flat_map(|m| m.subscription.topics.iter())
        .collect();
    let mut counts = BTreeMap::new();
    for t in topics {
        let Some((&c, tail)) = rest.split_first() else {
            break;
        };
        rest = tail;
        counts.insert(t.clone(), i32::from(c % 9));
    }
    if let Ok(a) = decode_assignment(rest) {
        check_assignment_round_trip(&a);
    }
    if !members.is_empty() {
        check_assignors(&members, &counts);
    }
}

fn member_seed(sub: &Subscription, version: i16) -> Vec<u8> {
    let meta = encode_subscription(sub, version).unwrap_or_default();
    let mut out = (meta.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&meta);
    out
}

/// Seeds: members of each version with owned partitions that overlap, and an assignment.
pub(crate) fn seeds() -> Vec<Vec<u8>> {
    let tp = |t: &str, p: i32| TopicPartition::new(t, p);
    let mut a = Subscription::new(["orders", "payments"]);
    a.owned_partitions = vec![tp("orders", 0), tp("orders", 1), tp("payments", 2)];
    a.generation_id = 4;
    a.rack_id = Some("rack-a".into());
    let mut b = Subscription::new(["orders"]);
    b.owned_partitions = vec![tp("orders", 1), tp("orders", 2)];
    b.generation_id = 3;
    let mut c = Subscription::new(["payments", "audit"]);
    c.user_data = Bytes::from_static(&[0, 0, 0, 4]);
    let assignment = encode_assignment(
        &Assignment {
            partitions: vec![tp("orders", 0), tp("audit", 1)],
            user_data: Bytes::new(),
        },
        3,
    )
    .unwrap_or_default();
    let mut out = Vec::new();
    for version in 0..=MAX_KNOWN_VERSION {
        let mut input = vec![2u8];
        input.extend(member_seed(&a, version));
        input.extend(member_seed(&b, version));
        input.extend(member_seed(&c, 3));
        input.extend([3, 4, 2]); // audit, orders, payments
        input.extend_from_slice(&assignment);
        out.push(input);
    }
    out
}
