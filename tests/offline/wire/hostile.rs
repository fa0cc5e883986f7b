//! A hostile broker's bytes, handed to the decoder without a broker: five bytes that claim two
//! billion brokers cost an error, not the heap. The attacks that go through a tampering proxy in
//! front of a real broker are `brokers::wire::hostile`.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use kafka_protocol::messages::{self as msg, ApiKey};

use crate::counting_alloc::{LIVE, PEAK};

#[test]
fn five_bytes_claiming_two_billion_brokers_allocate_almost_nothing() {
    // Without the pre-check, kafka-protocol reserves 2^31 - 1 broker structs for these 5 bytes.
    let baseline = LIVE.load(Ordering::SeqCst);
    PEAK.store(baseline, Ordering::SeqCst);
    let mut body = Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 0x00]);
    let result = rebalance_guard::wire::bounded::decode::<msg::MetadataResponse>(
        ApiKey::Metadata,
        1,
        &mut body,
    );
    let peak = PEAK.load(Ordering::SeqCst).saturating_sub(baseline);
    eprintln!("5-byte array bomb: peak heap growth {peak} bytes");
    assert!(
        matches!(result, Err(rebalance_guard::wire::WireError::Malformed { ref field, .. }) if field == "Brokers"),
        "{result:?}"
    );
    assert!(peak < 4096, "the refusal allocated {peak} bytes");
}
