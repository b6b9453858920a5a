//! The out-of-band channel: a TCP connection the two sides use to exchange what RDMA needs
//! before it can run (QPN, PSN, GID, rkey, address) and to synchronise afterwards.
//!
//! Every wait is bounded: accepting, connecting and each read carry a timeout, and the error
//! says which step was waiting. Framed messages have a length limit checked before allocating,
//! so a hostile or confused peer cannot make us allocate or read without bound.

use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// What went wrong on the out-of-band channel.
#[derive(Debug)]
pub enum OobError {
    /// Nothing arrived (or no peer came) within the timeout.
    Timeout { what: String, after: Duration },
    /// The peer closed the connection: it exited or crashed.
    Closed { what: String },
    /// A socket operation failed.
    Io { what: String, err: io::Error },
    /// A framed message announced more bytes than the limit.
    TooLong {
        what: String,
        len: usize,
        max: usize,
    },
    /// The peer sent something we cannot parse.
    Malformed { what: String, detail: String },
}

impl fmt::Display for OobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OobError::Timeout { what, after } => write!(
                f,
                "timed out after {:.0} s waiting for {what}: is the peer running, with the same \
                 port and parameters?",
                after.as_secs_f64()
            ),
            OobError::Closed { what } => {
                write!(f, "the peer closed the connection while we waited for {what} (did it exit with an error?)")
            }
            OobError::Io { what, err } => write!(f, "{what}: {err}"),
            OobError::TooLong { what, len, max } => {
                write!(
                    f,
                    "{what}: the peer announced {len} bytes, more than the limit of {max}"
                )
            }
            OobError::Malformed { what, detail } => {
                write!(f, "malformed {what} from the peer: {detail}")
            }
        }
    }
}

impl std::error::Error for OobError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OobError::Io { err, .. } => Some(err),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, OobError>;

/// An established out-of-band connection.
pub struct OobConn {
    stream: TcpStream,
    peer: SocketAddr,
    timeout: Duration,
}

const POLL_STEP: Duration = Duration::from_millis(50);

/// Waits for one client on `port` (all addresses), at most `timeout`.
pub fn accept(port: u16, timeout: Duration) -> Result<OobConn> {
    Listener::bind(port)?.accept(timeout)
}

/// A listening socket that stays open between accepts, for a server that takes several clients
/// on one port. (Binding anew for each client would not do: a client that connects while the
/// previous listener still exists lands in its backlog, and is reset when that listener closes.)
pub struct Listener {
    listener: TcpListener,
    port: u16,
}

impl Listener {
    /// Listens on `port` (all addresses).
    pub fn bind(port: u16) -> Result<Listener> {
        let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| OobError::Io {
            what: format!("cannot listen on TCP port {port} (another server running? try -p)"),
            err: e,
        })?;
        listener.set_nonblocking(true).map_err(|err| OobError::Io {
            what: "set_nonblocking".into(),
            err,
        })?;
        Ok(Listener { listener, port })
    }

    /// The port listened on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Waits for the next client, at most `timeout`.
    pub fn accept(&self, timeout: Duration) -> Result<OobConn> {
        let port = self.port;
        let start = Instant::now();
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => return OobConn::new(stream, peer, timeout),
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    if start.elapsed() >= timeout {
                        return Err(OobError::Timeout {
                            what: format!("a client to connect to TCP port {port}"),
                            after: timeout,
                        });
                    }
                    std::thread::sleep(POLL_STEP);
                }
                Err(e) => {
                    return Err(OobError::Io {
                        what: format!("accept on port {port}"),
                        err: e,
                    })
                }
            }
        }
    }
}

/// Connects to a server at `host:port`, retrying while it is not listening yet, at most
/// `timeout` in all.
pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<OobConn> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| OobError::Io {
            what: format!("cannot resolve server '{host}'"),
            err: e,
        })?
        .collect();
    let start = Instant::now();
    let mut last_err = None;
    while start.elapsed() < timeout {
        for addr in &addrs {
            let left = timeout
                .saturating_sub(start.elapsed())
                .max(Duration::from_millis(10));
            match TcpStream::connect_timeout(addr, left.min(Duration::from_secs(5))) {
                Ok(stream) => return OobConn::new(stream, *addr, timeout),
                Err(e) => last_err = Some(e),
            }
        }
        std::thread::sleep(POLL_STEP * 2);
    }
    let detail = last_err
        .map(|e| format!(" (last error: {e})"))
        .unwrap_or_default();
    Err(OobError::Timeout {
        what: format!("the server at {host}:{port} to accept{detail}"),
        after: timeout,
    })
}

impl OobConn {
    fn new(stream: TcpStream, peer: SocketAddr, timeout: Duration) -> Result<OobConn> {
        let io = |err| OobError::Io {
            what: "configuring the TCP socket".into(),
            err,
        };
        stream.set_nonblocking(false).map_err(io)?;
        stream.set_nodelay(true).map_err(io)?;
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        Ok(OobConn {
            stream,
            peer,
            timeout,
        })
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The per-operation timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the timeout of every later read and write (e.g. longer while a benchmark runs).
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<()> {
        let io = |err| OobError::Io {
            what: "setting the socket timeout".into(),
            err,
        };
        self.stream.set_read_timeout(Some(timeout)).map_err(io)?;
        self.stream.set_write_timeout(Some(timeout)).map_err(io)?;
        self.timeout = timeout;
        Ok(())
    }

    /// Writes all of `buf`; `what` names it in errors.
    pub fn send_raw(&mut self, buf: &[u8], what: &str) -> Result<()> {
        self.stream
            .write_all(buf)
            .map_err(|e| self.classify(e, &format!("sending {what}")))
    }

    /// Reads exactly `buf.len()` bytes, within the timeout (which restarts on every byte
    /// received: a slow but live peer is not cut off, a silent one is).
    pub fn recv_raw(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(OobError::Closed { what: what.into() }),
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.classify(e, what)),
            }
        }
        Ok(())
    }

    /// Sends one framed message: a 4-byte big-endian length, then the bytes.
    pub fn send_msg(&mut self, payload: &[u8], what: &str) -> Result<()> {
        let len = u32::try_from(payload.len()).map_err(|_| OobError::TooLong {
            what: what.into(),
            len: payload.len(),
            max: u32::MAX as usize,
        })?;
        let mut frame = Vec::with_capacity(4 + payload.len());
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(payload);
        self.send_raw(&frame, what)
    }

    /// Receives one framed message of at most `max` bytes; a longer announcement is refused
    /// before anything is allocated.
    pub fn recv_msg(&mut self, max: usize, what: &str) -> Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.recv_raw(&mut len, what)?;
        let len = u32::from_be_bytes(len) as usize;
        if len > max {
            return Err(OobError::TooLong {
                what: what.into(),
                len,
                max,
            });
        }
        let mut buf = vec![0u8; len];
        self.recv_raw(&mut buf, what)?;
        Ok(buf)
    }

    /// A barrier: both sides send a one-byte token and wait for the other's.
    pub fn barrier(&mut self, what: &str) -> Result<()> {
        self.send_raw(b"B", what)?;
        let mut b = [0u8; 1];
        self.recv_raw(&mut b, what)?;
        if b[0] != b'B' {
            return Err(OobError::Malformed {
                what: what.into(),
                detail: format!("barrier token {:#04x}", b[0]),
            });
        }
        Ok(())
    }

    /// Whether a read would not block: data (or the peer's close) is waiting. Waits at most
    /// `wait` (`poll(2)` on the socket), so a busy loop can look at the channel now and then
    /// without blocking on it.
    pub fn poll_readable(&self, wait: Duration) -> Result<bool> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let ms = wait.as_millis().min(i32::MAX as u128) as i32;
        let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
        loop {
            match poll(&mut fds, timeout) {
                Ok(n) => return Ok(n > 0),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    return Err(OobError::Io {
                        what: "polling the out-of-band socket".into(),
                        err: io::Error::from(e),
                    })
                }
            }
        }
    }

    fn classify(&self, e: io::Error, what: &str) -> OobError {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => OobError::Timeout {
                what: what.into(),
                after: self.timeout,
            },
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
                OobError::Closed { what: what.into() }
            }
            _ => OobError::Io {
                what: what.into(),
                err: e,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn framed_messages_round_trip() {
        let port = free_port();
        let t = std::thread::spawn(move || {
            let mut c = accept(port, Duration::from_secs(10)).unwrap();
            let m = c.recv_msg(100, "hello").unwrap();
            c.send_msg(&m, "echo").unwrap();
            c.barrier("end").unwrap();
        });
        let mut c = connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
        c.send_msg(b"abc", "hello").unwrap();
        assert_eq!(c.recv_msg(100, "echo").unwrap(), b"abc");
        c.barrier("end").unwrap();
        t.join().unwrap();
    }

    #[test]
    fn oversized_frame_is_refused_before_allocating() {
        let port = free_port();
        let t = std::thread::spawn(move || {
            let mut c = accept(port, Duration::from_secs(10)).unwrap();
            c.send_raw(&u32::MAX.to_be_bytes(), "len").unwrap();
        });
        let mut c = connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
        let e = c.recv_msg(1024, "parameters").unwrap_err();
        assert!(
            matches!(e, OobError::TooLong { len, max: 1024, .. } if len == u32::MAX as usize),
            "{e}"
        );
        t.join().unwrap();
    }

    #[test]
    fn silent_peer_times_out_and_closed_peer_is_named() {
        let port = free_port();
        let t = std::thread::spawn(move || {
            let c = accept(port, Duration::from_secs(10)).unwrap();
            std::thread::sleep(Duration::from_millis(600));
            drop(c);
        });
        let mut c = connect("127.0.0.1", port, Duration::from_millis(300)).unwrap();
        let mut b = [0u8; 4];
        let e = c.recv_raw(&mut b, "the server's endpoint").unwrap_err();
        assert!(matches!(e, OobError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("the server's endpoint"));
        c.set_timeout(Duration::from_secs(5)).unwrap();
        let e = c.recv_raw(&mut b, "the server's endpoint").unwrap_err();
        assert!(matches!(e, OobError::Closed { .. }), "{e}");
        t.join().unwrap();
    }

    #[test]
    fn one_listener_serves_clients_that_connect_early() {
        let port = free_port();
        let l = Listener::bind(port).unwrap();
        // Both clients connect before the server accepts either: both must be served.
        let clients: Vec<_> = (0..2u8)
            .map(|i| {
                std::thread::spawn(move || {
                    let mut c = connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
                    c.send_msg(&[i], "id").unwrap();
                    c.barrier("done").unwrap();
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        let mut conns: Vec<OobConn> = (0..2)
            .map(|_| l.accept(Duration::from_secs(10)).unwrap())
            .collect();
        let mut ids: Vec<u8> = conns
            .iter_mut()
            .map(|c| c.recv_msg(1, "id").unwrap()[0])
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, [0, 1]);
        for c in &mut conns {
            c.barrier("done").unwrap();
        }
        for t in clients {
            t.join().unwrap();
        }
    }

    #[test]
    fn nobody_listening_times_out() {
        let port = free_port();
        let e = connect("127.0.0.1", port, Duration::from_millis(300))
            .err()
            .unwrap();
        assert!(e.to_string().contains("timed out"), "{e}");
        let e = accept(free_port(), Duration::from_millis(200))
            .err()
            .unwrap();
        assert!(e.to_string().contains("a client to connect"), "{e}");
    }
}
