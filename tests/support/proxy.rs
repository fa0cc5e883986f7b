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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

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

/// One request held back by [`Proxy::hold_next`]: where it is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Catching {
    /// Nothing asked for.
    Idle,
    /// The next request of this api key is to be held for at most this long.
    Armed(i16, Duration),
    /// Held since `since` on connection `conn`; `trigger` once an answer of the same api key
    /// passed on another connection.
    Holding {
        key: i16,
        conn: u64,
        since: Instant,
        at_most: Duration,
        trigger: bool,
    },
    /// Delivered to the broker after `held` (`by_trigger`: because another connection's
    /// request of the same key was answered); `answered` once the broker's answer came back.
    Delivered {
        key: i16,
        conn: u64,
        correlation: i32,
        held: Duration,
        by_trigger: bool,
        answered: bool,
    },
}

/// What [`Proxy::hold_next`] did with the request it held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// How long the request waited in the proxy.
    pub held: Duration,
    /// Delivered because a request of the same api key on another connection was answered
    /// first (false: because the hold's time was up).
    pub overtaken: bool,
    /// The broker answered the held request (its answer passed the proxy).
    pub answered: bool,
}

#[derive(Default)]
struct Catch {
    state: Mutex<Option<Catching>>,
    changed: Condvar,
    /// The held request's bytes after its correlation id, and the requests sent again with
    /// the same bytes (a client's retry of it): (connection, correlation id). A twin's answer
    /// does not count as overtaking the held request.
    held_body: Mutex<Vec<u8>>,
    twins: Mutex<std::collections::HashSet<(u64, i32)>>,
}

impl Catch {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Catching>> {
        self.state.lock().unwrap()
    }

    /// A request of `key` with `correlation` read on connection `conn`: held here if it is the
    /// one asked for, until another connection's request of its key is answered or its time
    /// is up.
    fn maybe_hold(&self, conn: u64, key: i16, correlation: i32, body: &[u8]) {
        let mut state = self.lock();
        let (armed, at_most) = match *state {
            Some(Catching::Armed(armed, at_most)) => (armed, at_most),
            Some(Catching::Holding { key: held, .. } | Catching::Delivered { key: held, .. })
                if held == key && *self.held_body.lock().unwrap() == body =>
            {
                self.twins.lock().unwrap().insert((conn, correlation));
                return;
            }
            _ => return,
        };
        if armed != key {
            return;
        }
        *self.held_body.lock().unwrap() = body.to_vec();
        let since = Instant::now();
        *state = Some(Catching::Holding {
            key,
            conn,
            since,
            at_most,
            trigger: false,
        });
        loop {
            let Some(Catching::Holding { trigger, .. }) = *state else {
                return;
            };
            let left = (since + at_most).saturating_duration_since(Instant::now());
            if trigger || left.is_zero() {
                *state = Some(Catching::Delivered {
                    key,
                    conn,
                    correlation,
                    held: since.elapsed(),
                    by_trigger: trigger,
                    answered: false,
                });
                self.changed.notify_all();
                return;
            }
            state = self.changed.wait_timeout(state, left).unwrap().0;
        }
    }

    /// An answer of `key` to `correlation` on connection `conn` is about to go to its client.
    /// The held request's own answer is noted; another connection's answer of the same key
    /// releases the held request and waits (at most 10 s) until the broker answered it, so
    /// that the held request is executed before this client hears its answer.
    fn on_answer(&self, conn: u64, key: i16, correlation: i32) {
        let mut state = self.lock();
        match *state {
            Some(Catching::Holding {
                key: held,
                conn: held_on,
                ref mut trigger,
                ..
            }) if held == key
                && held_on != conn
                && !self.twins.lock().unwrap().contains(&(conn, correlation)) =>
            {
                *trigger = true;
                self.changed.notify_all();
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    if let Some(Catching::Delivered { answered: true, .. }) = *state {
                        return;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return;
                    }
                    state = self.changed.wait_timeout(state, left).unwrap().0;
                }
            }
            Some(Catching::Delivered {
                conn: held_on,
                correlation: held,
                ref mut answered,
                ..
            }) if held_on == conn && held == correlation => {
                *answered = true;
                self.changed.notify_all();
            }
            _ => {}
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
    catch: Arc<Catch>,
    /// Both ends of every connection carried so far, for [`Proxy::cut`].
    open: Arc<Mutex<Vec<TcpStream>>>,
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
        let catch: Arc<Catch> = Arc::default();
        let (recorder, gate_of_all, observer_of_all) =
            (seen.clone(), gate.clone(), observer.clone());
        let catch_of_all = catch.clone();
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let open_of_all = open.clone();
        let connections = AtomicU64::new(0);
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
                if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                    open_of_all.lock().unwrap().extend([c, s]);
                }
                let inflight: Arc<Mutex<HashMap<i32, i16>>> = Arc::default();
                let (rec, apis, gate) = (recorder.clone(), inflight.clone(), gate_of_all.clone());
                let watch = observer_of_all.clone();
                let conn = Link {
                    id: connections.fetch_add(1, Ordering::SeqCst),
                    catch: catch_of_all.clone(),
                };
                let link = Link {
                    id: conn.id,
                    catch: conn.catch.clone(),
                };
                thread::spawn(move || {
                    let _ = pump_requests(client, server, &rec, &apis, &gate, &watch, &link);
                });
                let rewrites = rewrites.clone();
                let gate = gate_of_all.clone();
                let watch = observer_of_all.clone();
                thread::spawn(move || {
                    let _ = pump_responses(
                        server2, client2, &inflight, &rewrites, &gate, &watch, &conn,
                    );
                });
            }
        });
        Proxy {
            addr: addr.to_string(),
            seen,
            gate,
            observer,
            catch,
            open,
        }
    }

    /// Closes every connection carried so far, both sides (the client reads the end of its
    /// stream, the broker sees its connection close), and keeps accepting new ones: a
    /// connection cut in the network, or a broker's connection dropped under a client.
    pub fn cut(&self) {
        let open = std::mem::take(&mut *self.open.lock().unwrap());
        for stream in &open {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Holds the next request of `api_key` (whichever connection sends it; the requests behind
    /// it on its connection wait behind it, as on the wire) until a request of the same key on
    /// another connection was answered, or `at_most` passed. When another connection's request
    /// overtakes it, the held one is delivered to the broker first and that other request's
    /// answer is passed on only once the broker answered the held one: a late request a broker
    /// executes right after a newer one, as a request stuck in a network or a busy broker is.
    pub fn hold_next(&self, api_key: i16, at_most: Duration) {
        *self.catch.lock() = Some(Catching::Armed(api_key, at_most));
    }

    /// True once the request asked for by [`Proxy::hold_next`] arrived (held or delivered).
    pub fn holding(&self) -> bool {
        matches!(
            *self.catch.lock(),
            Some(Catching::Holding { .. } | Catching::Delivered { .. })
        )
    }

    /// What became of the request asked for by [`Proxy::hold_next`], once it was delivered.
    pub fn held(&self) -> Option<Held> {
        match *self.catch.lock() {
            Some(Catching::Delivered {
                held,
                by_trigger,
                answered,
                ..
            }) => Some(Held {
                held,
                overtaken: by_trigger,
                answered,
            }),
            _ => None,
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

/// One proxied connection as [`Proxy::hold_next`] sees it.
struct Link {
    id: u64,
    catch: Arc<Catch>,
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
    link: &Link,
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
            link.catch
                .maybe_hold(link.id, key, correlation, &frame[8..]);
        }
        gate.wait_open();
        write_frame(&mut server, &frame)?;
    })();
    // The client closed its side: what it sent is executed all the same (a broker executes
    // every request it read), so the broker's side stays open until those were answered
    // (at most 30 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !inflight.lock().unwrap().is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
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
    link: &Link,
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
        if let (Some(key), Some(correlation)) = (key, correlation) {
            link.catch.on_answer(link.id, key, correlation);
        }
        if let Some(key) = key {
            report(observer, Traffic::Response(key));
        }
        write_frame(&mut client, &frame)?;
    })();
    let _ = client.shutdown(Shutdown::Write);
    result
}
