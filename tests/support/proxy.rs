//! A loopback TCP proxy in front of a single-node broker, for tests that must see or stall what
//! goes over the wire.
//!
//! It records the (api key, version) of every request passing through it, and it can hold all
//! traffic (a network partition between our client and the broker, without touching the
//! broker, which other tests share). The broker advertises itself as `127.0.0.1:<port>` in
//! Metadata and FindCoordinator answers; the proxy writes its own port over the broker's there
//! (same length, so nothing else in the frame moves), which makes a client that bootstraps
//! through the proxy open every further connection (the heartbeat thread's included) through it
//! too. Its threads end when the connections close; it only ever listens on 127.0.0.1.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;

use kafka_protocol::messages::ApiKey;

/// Whether traffic may pass, shared by every connection of one proxy.
#[derive(Default)]
struct Gate {
    held: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    fn wait_open(&self) {
        let mut held = self.held.lock().unwrap();
        while *held {
            held = self.changed.wait(held).unwrap();
        }
    }
}

/// One frame passing through the proxy, as an observer sees it: reported when the proxy has read
/// it and before it forwards it, so whatever the observer records next happened after the request
/// left the client, or before the answer reached it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traffic {
    /// A request of this api key, on its way to the broker.
    Request(i16),
    /// The answer to a request of this api key, on its way to the client.
    Response(i16),
}

type Observer = Arc<Mutex<Option<Arc<dyn Fn(Traffic) + Send + Sync>>>>;

fn report(observer: &Observer, traffic: Traffic) {
    let observer = observer.lock().unwrap().clone();
    if let Some(observer) = observer {
        observer(traffic);
    }
}

/// A running proxy; see the module docs.
pub struct Proxy {
    addr: String,
    seen: Arc<Mutex<Vec<(i16, i16)>>>,
    gate: Arc<Gate>,
    observer: Observer,
}

impl Proxy {
    /// Starts a proxy in front of `upstream` (`127.0.0.1:PORT` of a single-node broker).
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        Proxy::start_on(listener, upstream, vec![(upstream_port(upstream), port)])
    }

    /// One proxy per node of a cluster (`upstreams` in node order), each rewriting every
    /// node's address in Metadata and FindCoordinator answers to that node's proxy: a client
    /// bootstrapped through them reaches every node through its proxy, so holding one proxy
    /// cuts that node off from the client while the cluster still sees it alive.
    pub fn start_cluster(upstreams: &[String]) -> Vec<Proxy> {
        let listeners: Vec<TcpListener> = upstreams
            .iter()
            .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind proxy"))
            .collect();
        let ports: Vec<(u16, u16)> = upstreams
            .iter()
            .zip(&listeners)
            .map(|(up, l)| {
                (
                    upstream_port(up),
                    l.local_addr().expect("proxy address").port(),
                )
            })
            .collect();
        listeners
            .into_iter()
            .zip(upstreams)
            .map(|(l, up)| Proxy::start_on(l, up, ports.clone()))
            .collect()
    }

    fn start_on(listener: TcpListener, upstream: &str, ports: Vec<(u16, u16)>) -> Proxy {
        let addr = listener.local_addr().expect("proxy address");
        assert!(upstream.starts_with("127.0.0.1:"), "{upstream}");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Gate::default());
        let observer: Observer = Arc::default();
        let (recorder, gate_of_all, observer_of_all) =
            (seen.clone(), gate.clone(), observer.clone());
        let upstream = upstream.to_string();
        let rewrites: Vec<([u8; 4], [u8; 4])> = ports
            .iter()
            .map(|&(from, to)| ((from as i32).to_be_bytes(), (to as i32).to_be_bytes()))
            .collect();
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (Ok(client2), Ok(server2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                let inflight: Arc<Mutex<HashMap<i32, i16>>> = Arc::default();
                let (rec, apis, gate) = (recorder.clone(), inflight.clone(), gate_of_all.clone());
                let watch = observer_of_all.clone();
                thread::spawn(move || {
                    let _ = pump_requests(client, server, &rec, &apis, &gate, &watch);
                });
                let rewrites = rewrites.clone();
                let gate = gate_of_all.clone();
                let watch = observer_of_all.clone();
                thread::spawn(move || {
                    let _ = pump_responses(server2, client2, &inflight, &rewrites, &gate, &watch);
                });
            }
        });
        Proxy {
            addr: addr.to_string(),
            seen,
            gate,
            observer,
        }
    }

    /// Calls `observer` with every frame from now on, in the order the proxy reads them.
    pub fn observe(&self, observer: impl Fn(Traffic) + Send + Sync + 'static) {
        *self.observer.lock().unwrap() = Some(Arc::new(observer));
    }

    /// The address to bootstrap through.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Every (api key, version) sent through the proxy so far, in order.
    pub fn seen(&self) -> Vec<(i16, i16)> {
        self.seen.lock().unwrap().clone()
    }

    /// Stops forwarding in both directions: requests and answers wait in the proxy (the
    /// connections stay open, as in a network partition that drops nothing yet).
    pub fn hold(&self) {
        *self.gate.held.lock().unwrap() = true;
    }

    /// Forwards again whatever waited, and everything after.
    pub fn release(&self) {
        *self.gate.held.lock().unwrap() = false;
        self.gate.changed.notify_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.release();
    }
}

fn upstream_port(upstream: &str) -> u16 {
    upstream
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("upstream port")
}

/// Reads one size-prefixed Kafka frame.
pub fn read_frame(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut frame = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
    s.read_exact(&mut frame)?;
    Ok(frame)
}

/// Writes one size-prefixed Kafka frame.
pub fn write_frame(s: &mut TcpStream, frame: &[u8]) -> io::Result<()> {
    s.write_all(&(frame.len() as i32).to_be_bytes())?;
    s.write_all(frame)
}

fn pump_requests(
    mut client: TcpStream,
    mut server: TcpStream,
    seen: &Mutex<Vec<(i16, i16)>>,
    inflight: &Mutex<HashMap<i32, i16>>,
    gate: &Gate,
    observer: &Observer,
) -> io::Result<()> {
    let result = (|| loop {
        let frame = read_frame(&mut client)?;
        if frame.len() >= 8 {
            let key = i16::from_be_bytes([frame[0], frame[1]]);
            let version = i16::from_be_bytes([frame[2], frame[3]]);
            let correlation = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            seen.lock().unwrap().push((key, version));
            inflight.lock().unwrap().insert(correlation, key);
            report(observer, Traffic::Request(key));
        }
        gate.wait_open();
        write_frame(&mut server, &frame)?;
    })();
    let _ = server.shutdown(Shutdown::Write);
    result
}

fn pump_responses(
    mut server: TcpStream,
    mut client: TcpStream,
    inflight: &Mutex<HashMap<i32, i16>>,
    rewrites: &[([u8; 4], [u8; 4])],
    gate: &Gate,
    observer: &Observer,
) -> io::Result<()> {
    let host = b"127.0.0.1";
    let result = (|| loop {
        let mut frame = read_frame(&mut server)?;
        let correlation = frame
            .get(..4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let key = correlation.and_then(|c| inflight.lock().unwrap().remove(&c));
        if key == Some(ApiKey::Metadata as i16) || key == Some(ApiKey::FindCoordinator as i16) {
            let mut at = 0;
            while at + host.len() + 4 <= frame.len() {
                if frame[at..].starts_with(host) {
                    let port = at + host.len()..at + host.len() + 4;
                    if let Some((_, to)) = rewrites
                        .iter()
                        .find(|(from, _)| frame[port.clone()] == *from)
                    {
                        frame[port].copy_from_slice(to);
                    }
                }
                at += 1;
            }
        }
        gate.wait_open();
        if let Some(key) = key {
            report(observer, Traffic::Response(key));
        }
        write_frame(&mut client, &frame)?;
    })();
    let _ = client.shutdown(Shutdown::Write);
    result
}
