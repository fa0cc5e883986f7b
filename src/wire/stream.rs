//! The byte stream under a [`Connection`](super::Connection): TCP, or TLS over TCP, with real
//! deadlines for name resolution, connecting, and every read and write.
//!
//! Why deadlines and not socket timeouts: a socket timeout bounds one `read` call, so a peer
//! that sends one byte just before each timeout keeps a frame read alive forever; rustls makes
//! it worse, because one read of the TLS stream may loop over several socket reads to complete a
//! record. Here the deadline lives in [`Socket`], *below* TLS: before every system call it sets
//! the socket timeout to the time left and fails with `TimedOut` once none is left, so no
//! sequence of reads above it (our framing, rustls's record layer, its handshake) can outlast
//! the deadline, whatever the peer trickles.
//!
//! Resolution and connecting share one deadline per connect attempt: DNS runs on a helper thread
//! that is abandoned when the deadline passes (std offers no resolver with a timeout), and each
//! resolved address gets only what is left of the attempt's time, not a fresh timeout each.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::error::{Result, WireError};

/// A TCP stream whose reads and writes fail with `TimedOut` at a deadline, however the peer
/// paces its bytes.
pub(super) struct Socket {
    tcp: TcpStream,
    read_deadline: Option<Instant>,
    write_deadline: Option<Instant>,
}

impl Socket {
    pub(super) fn new(tcp: TcpStream) -> Socket {
        Socket {
            tcp,
            read_deadline: None,
            write_deadline: None,
        }
    }

    /// Both directions end by `deadline` (the TLS handshake, under the connect deadline).
    #[cfg(feature = "tls")]
    pub(super) fn set_deadlines(&mut self, deadline: Instant) {
        self.read_deadline = Some(deadline);
        self.write_deadline = Some(deadline);
    }

    fn set_nodelay(&self) -> io::Result<()> {
        self.tcp.set_nodelay(true)
    }
}

/// The time left until `deadline`, or `TimedOut` when there is none.
fn time_left(deadline: Instant, what: &str) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{what} deadline passed"),
        ));
    }
    Ok(left)
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(deadline) = self.read_deadline {
            self.tcp
                .set_read_timeout(Some(time_left(deadline, "read")?))?;
        }
        self.tcp.read(buf)
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(deadline) = self.write_deadline {
            self.tcp
                .set_write_timeout(Some(time_left(deadline, "write")?))?;
        }
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

/// The connection's byte stream: plain TCP or TLS, both over a [`Socket`].
pub(super) enum Stream {
    /// `PLAINTEXT` and `SASL_PLAINTEXT`.
    Plain(Socket),
    /// `SSL` and `SASL_SSL`.
    #[cfg(feature = "tls")]
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, Socket>>),
}

impl Stream {
    fn socket(&mut self) -> &mut Socket {
        match self {
            Stream::Plain(s) => s,
            #[cfg(feature = "tls")]
            Stream::Tls(s) => &mut s.sock,
        }
    }

    /// Every read from now on (TLS records included) ends by `deadline`.
    pub(super) fn set_read_deadline(&mut self, deadline: Instant) {
        self.socket().read_deadline = Some(deadline);
    }

    /// Every write from now on (TLS records included) ends by `deadline`.
    pub(super) fn set_write_deadline(&mut self, deadline: Instant) {
        self.socket().write_deadline = Some(deadline);
    }

    /// Whether the peer has closed (or reset) the connection, read without blocking and without
    /// taking any byte: an end of stream or a socket error says so. Bytes waiting (a TLS record
    /// the peer sent unasked, such as a session ticket) say nothing either way: they are left
    /// for the next read, which finds out. Meant for an idle connection that owes no answer.
    pub(super) fn peer_closed(&mut self) -> bool {
        let tcp = &self.socket().tcp;
        if tcp.set_nonblocking(true).is_err() {
            return true;
        }
        let mut byte = [0u8; 1];
        let closed = match tcp.peek(&mut byte) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => {
                e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted
            }
        };
        closed || tcp.set_nonblocking(false).is_err()
    }

    /// Whether the stream runs TLS.
    pub(super) fn is_tls(&self) -> bool {
        !matches!(self, Stream::Plain(_))
    }

    /// Opens a plain stream to `addr`: resolution and connecting within one `deadline`.
    pub(super) fn open(addr: &str, deadline: Instant) -> Result<Socket> {
        let targets = resolve(addr, deadline, system_resolver)?;
        let tcp = connect_any(addr, &targets, deadline)?;
        let socket = Socket::new(tcp);
        socket.set_nodelay()?;
        Ok(socket)
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stream::Plain(_) => f.write_str("Plain"),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => write!(
                f,
                "Tls({:?})",
                s.conn.protocol_version().map(|v| v.as_str().unwrap_or("?"))
            ),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A resolver: the system's, or a test's.
pub(super) type Resolver = fn(&str) -> io::Result<Vec<SocketAddr>>;

/// The system resolver (`getaddrinfo` through std).
pub(super) fn system_resolver(addr: &str) -> io::Result<Vec<SocketAddr>> {
    addr.to_socket_addrs().map(Iterator::collect)
}

/// Resolves `addr` ("host:port") by `deadline`. A literal address needs no lookup; a name is
/// looked up on a helper thread, which is left to finish on its own if the deadline passes (its
/// answer is then dropped).
pub(super) fn resolve(
    addr: &str,
    deadline: Instant,
    resolver: Resolver,
) -> Result<Vec<SocketAddr>> {
    if let Ok(literal) = addr.parse::<SocketAddr>() {
        return Ok(vec![literal]);
    }
    let (tx, rx) = mpsc::channel();
    let name = addr.to_string();
    thread::Builder::new()
        .name("rg-resolve".into())
        .spawn(move || {
            let _ = tx.send(resolver(&name));
        })
        .map_err(WireError::io)?;
    let left = deadline.saturating_duration_since(Instant::now());
    match rx.recv_timeout(left) {
        Ok(Ok(targets)) if !targets.is_empty() => Ok(targets),
        Ok(Ok(_)) => Err(WireError::Config(format!("{addr} resolved to no address"))),
        Ok(Err(e)) => Err(WireError::Config(format!("cannot resolve {addr}: {e}"))),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(WireError::Timeout {
            what: format!("resolving {addr}"),
        }),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(WireError::Config(format!(
            "cannot resolve {addr}: the resolver thread ended without an answer"
        ))),
    }
}

/// Connects to the first of `targets` that accepts, all of them within one `deadline`.
pub(super) fn connect_any(
    addr: &str,
    targets: &[SocketAddr],
    deadline: Instant,
) -> Result<TcpStream> {
    let mut last = None;
    for target in targets {
        let Ok(left) = time_left(deadline, "connect") else {
            break;
        };
        match TcpStream::connect_timeout(target, left) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) if e.kind() != io::ErrorKind::TimedOut && Instant::now() < deadline => {
            WireError::io(io::Error::new(e.kind(), format!("connect to {addr}: {e}")))
        }
        _ => WireError::Timeout {
            what: format!("connect to {addr}"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn slow_resolver(_: &str) -> io::Result<Vec<SocketAddr>> {
        thread::sleep(Duration::from_secs(20));
        Ok(Vec::new())
    }

    #[test]
    fn a_hanging_name_lookup_ends_at_the_connect_deadline() {
        let started = Instant::now();
        let r = resolve(
            "broker.example:9092",
            started + Duration::from_millis(300),
            slow_resolver,
        );
        assert!(matches!(r, Err(WireError::Timeout { .. })), "{r:?}");
        // Generous: the lookup itself would take 20 s.
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_literal_address_needs_no_lookup() {
        let r = resolve("127.0.0.1:9092", Instant::now(), slow_resolver);
        assert_eq!(
            r.map_err(|e| e.to_string()),
            Ok(vec!["127.0.0.1:9092".parse().unwrap()])
        );
    }

    /// A loopback address whose connects hang: a listener that never accepts, its accept queue
    /// filled, so the kernel drops further SYNs and the client waits.
    fn hanging_listener() -> (TcpListener, SocketAddr, Vec<TcpStream>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let mut held = Vec::new();
        for _ in 0..4096 {
            match TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
                Ok(s) => held.push(s),
                Err(_) => return (listener, addr, held),
            }
        }
        panic!("the accept queue of a loopback listener never filled up");
    }

    #[test]
    fn one_deadline_covers_every_resolved_address() {
        let (_listener, addr, _held) = hanging_listener();
        let started = Instant::now();
        let r = connect_any(
            "hanging",
            &[addr, addr, addr, addr],
            started + Duration::from_millis(700),
        );
        assert!(matches!(r, Err(WireError::Timeout { .. })), "{r:?}");
        // With a full timeout per address this would take four times the deadline.
        assert!(
            started.elapsed() < Duration::from_millis(2400),
            "{:?}",
            started.elapsed()
        );
    }
}
