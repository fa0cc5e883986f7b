//! Bad frames from a peer cost only what the peer sent: an oversized length claim and a
//! truncated frame give errors without allocating the claimed size. A tiny fake server on
//! 127.0.0.1 plays the broker; the tier's counting allocator (`counting_alloc`) records the largest
//! single allocation made by the test thread while the client reads the bad frame.

use std::cell::Cell;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::thread;
use std::time::Duration;

use kafka_protocol::messages::ApiVersionsRequest;
use rebalance_guard::wire::{Connection, ConnectionConfig, WireError};

use crate::counting_alloc::THREAD_LARGEST as LARGEST;

/// Accepts one connection, reads one request, writes `reply`, closes.
fn fake_server(reply: Vec<u8>) -> (String, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let handle = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut len = [0u8; 4];
        s.read_exact(&mut len).expect("request length");
        let mut req = vec![0u8; i32::from_be_bytes(len) as usize];
        s.read_exact(&mut req).expect("request");
        let _ = s.write_all(&reply);
    });
    (addr, handle)
}

/// Sends one request to a fake server answering `reply`; returns the error and the largest
/// allocation made on this thread while waiting for and reading the answer.
fn largest_allocation_reading(reply: Vec<u8>) -> (WireError, usize) {
    let (addr, server) = fake_server(reply);
    let config = ConnectionConfig {
        request_timeout: Duration::from_secs(5),
        ..ConnectionConfig::default()
    };
    let mut conn = Connection::connect_unnegotiated(&addr, &config).expect("connect");
    LARGEST.with(|m| m.set(0));
    let err = conn
        .send(&ApiVersionsRequest::default(), 0)
        .expect_err("a bad frame must be an error");
    let largest = LARGEST.with(Cell::get);
    server.join().expect("server");
    assert!(conn.is_broken(), "the connection must not be reused");
    (err, largest)
}

#[test]
fn bad_frames_cost_only_what_was_sent() {
    // 1. A frame claiming 2 GiB - 1: refused before any allocation for it.
    let (err, largest) = largest_allocation_reading(i32::MAX.to_be_bytes().to_vec());
    assert!(
        matches!(err, WireError::FrameTooLarge { len, .. } if len == i64::from(i32::MAX)),
        "{err:?}"
    );
    assert!(largest < 64 * 1024, "allocated {largest} bytes");

    // 2. A frame claiming 60 MiB (under the 64 MiB limit) that ends after 10 bytes.
    let mut reply = (60 * 1024 * 1024i32).to_be_bytes().to_vec();
    reply.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    let (err, largest) = largest_allocation_reading(reply);
    assert!(
        matches!(err, WireError::Truncated { expected, got: 10 } if expected == 60 * 1024 * 1024),
        "{err:?}"
    );
    // Reads grow in chunks of at most 1 MiB, never by the claim.
    assert!(largest <= 2 * 1024 * 1024, "allocated {largest} bytes");
}
