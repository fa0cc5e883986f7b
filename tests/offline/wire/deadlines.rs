//! Read deadlines are deadlines: a peer that trickles a frame one byte at a time, each byte
//! just before a socket timeout would fire, cannot keep one frame read alive past the request
//! timeout (issue: a socket timeout reset per chunk let it run forever).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiVersionsRequest;
use rebalance_guard::wire::{Connection, ConnectionConfig, WireError};

/// Accepts one connection on a fresh local port and hands it to `serve` on a new thread.
fn one_connection_peer(
    serve: impl FnOnce(TcpStream) + Send + 'static,
) -> (String, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let handle = thread::spawn(move || {
        let Ok((s, _)) = listener.accept() else {
            return;
        };
        serve(s);
    });
    (addr, handle)
}

/// Accepts one connection, reads the request, then sends a frame header claiming 1000 bytes
/// and one body byte every `every`, `bytes` times.
fn trickling_peer(every: Duration, bytes: usize) -> (String, thread::JoinHandle<()>) {
    one_connection_peer(move |mut s| {
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).is_err() {
            return;
        }
        let mut req = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
        let _ = s.read_exact(&mut req);
        let _ = s.write_all(&1000i32.to_be_bytes());
        for _ in 0..bytes {
            thread::sleep(every);
            if s.write_all(&[0]).is_err() {
                return;
            }
        }
    })
}

/// An unnegotiated connection to `addr` with a 1 s request timeout.
fn connect_with_1s_deadline(addr: &str) -> Connection {
    let config = ConnectionConfig {
        request_timeout: Duration::from_secs(1),
        ..ConnectionConfig::default()
    };
    Connection::connect_unnegotiated(addr, &config).expect("connect")
}

#[test]
fn a_trickled_frame_ends_at_the_request_deadline() {
    // A byte every 100 ms for 30 s; the request timeout is 1 s.
    let (addr, peer) = trickling_peer(Duration::from_millis(100), 300);
    let mut conn = connect_with_1s_deadline(&addr);
    let started = Instant::now();
    let r = conn.send(&ApiVersionsRequest::default(), 0);
    let took = started.elapsed();
    assert!(matches!(r, Err(WireError::Timeout { .. })), "{r:?}");
    assert!(conn.is_broken());
    // Generous bound: the peer would trickle for 30 s.
    assert!(took < Duration::from_secs(6), "the read lasted {took:?}");
    drop(conn);
    let _ = peer.join();
}

#[test]
fn a_trickled_length_prefix_ends_at_the_request_deadline() {
    let (addr, peer) = one_connection_peer(|mut s| {
        let mut buf = [0u8; 64];
        let _ = s.read(&mut buf);
        // Three of the four length bytes, slowly, then nothing for 20 s.
        for _ in 0..3 {
            thread::sleep(Duration::from_millis(300));
            let _ = s.write_all(&[0]);
        }
        thread::sleep(Duration::from_secs(20));
    });
    let mut conn = connect_with_1s_deadline(&addr);
    let started = Instant::now();
    let r = conn.send(&ApiVersionsRequest::default(), 0);
    assert!(matches!(r, Err(WireError::Timeout { .. })), "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    drop(conn);
    drop(peer);
}
