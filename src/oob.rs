//! The out-of-band channel: a TCP connection the two sides use to exchange what RDMA needs
//! before it can run (QPN, PSN, GID, rkey, address) and to synchronise afterwards.
//!
//! Every wait is bounded: accepting, connecting and each read carry a timeout, and the error
//! says which step was waiting. A read's timeout is a deadline for the whole frame (or the whole
//! raw read), not restarted by each byte, so a peer that trickles one byte at a time cannot hold
//! a reader longer than a silent one. Framed messages have a length limit checked before
//! allocating, so a hostile or confused peer cannot make us allocate or read without bound.
//!
//! A server listens on [`DEFAULT_BIND`] (every IPv6 and IPv4 address of the host) unless told
//! otherwise ([`Listener::bind_on`]); a [`Listener`] outlives its accepts, so a server can drop a
//! stray connection and wait for the next one, and can turn away a second client while a run is
//! in progress ([`Listener::refuse_others`]).

use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where a server listens unless told otherwise: every address, IPv6 and IPv4 (`[::]` with
/// `IPV6_V6ONLY` off, so IPv4 clients arrive as `::ffff:a.b.c.d`); on a kernel without IPv6,
/// every IPv4 address (`0.0.0.0`).
pub const DEFAULT_BIND: IpAddr = IpAddr::V6(Ipv6Addr::UNSPECIFIED);

/// What went wrong on the out-of-band channel.
#[derive(Debug)]
pub enum OobError {
    /// Nothing arrived (or no peer came) within the timeout.
    Timeout { what: String, after: Duration },
    /// The peer closed the connection: it exited or crashed. `got` counts the bytes of the
    /// unfinished message that arrived before it closed (0: it closed between messages).
    Closed { what: String, got: usize },
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
            OobError::Closed { what, got: 0 } => write!(
                f,
                "the peer closed the connection while we waited for {what} (did it exit with an \
                 error?)"
            ),
            OobError::Closed { what, got } => write!(
                f,
                "the peer closed the connection after {got} byte(s) of {what}, in the middle of \
                 it (did it exit with an error?)"
            ),
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
    /// Bytes received but not yet handed out: the start of a frame read without blocking
    /// ([`OobConn::try_recv_msg`]) or the bytes after one.
    pending: Vec<u8>,
    /// When the oldest byte of `pending` arrived: the frame's deadline runs from here.
    pending_since: Option<Instant>,
}

const POLL_STEP: Duration = Duration::from_millis(50);

/// Waits for one client on `port` ([`DEFAULT_BIND`]), at most `timeout`.
pub fn accept(port: u16, timeout: Duration) -> Result<OobConn> {
    Listener::bind(port)?.accept(timeout)
}

/// A listening socket that stays open between accepts, for a server that takes several clients
/// on one port, or drops stray connections and keeps waiting. (Binding anew for each client
/// would not do: a client that connects while the previous listener still exists lands in its
/// backlog, and is reset when that listener closes.)
pub struct Listener {
    listener: TcpListener,
    port: u16,
    addr: SocketAddr,
}

impl Listener {
    /// Listens on `port` of [`DEFAULT_BIND`].
    pub fn bind(port: u16) -> Result<Listener> {
        Self::bind_on(DEFAULT_BIND, port)
    }

    /// Listens on `port` of `ip`: one local address, or `::` / `0.0.0.0` for all of them.
    pub fn bind_on(ip: IpAddr, port: u16) -> Result<Listener> {
        let listener = match ip {
            IpAddr::V6(v6) if v6.is_unspecified() => match dual_stack(port) {
                Ok(l) => Ok(l),
                // No IPv6 in this kernel: every IPv4 address is the next best "everywhere".
                Err(e) if e.raw_os_error() == Some(nix::libc::EAFNOSUPPORT) => {
                    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
                }
                Err(e) => Err(e),
            },
            _ => TcpListener::bind((ip, port)),
        }
        .map_err(|e| OobError::Io {
            what: format!(
                "cannot listen on TCP port {port} of {} (another server running? try -p; a \
                 --bind address must be one of this host's)",
                fmt_ip(ip)
            ),
            err: e,
        })?;
        listener.set_nonblocking(true).map_err(|err| OobError::Io {
            what: "set_nonblocking".into(),
            err,
        })?;
        let addr = listener.local_addr().map_err(|err| OobError::Io {
            what: "the listener's address".into(),
            err,
        })?;
        Ok(Listener {
            listener,
            port: addr.port(),
            addr,
        })
    }

    /// The port listened on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The address listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits for the next client, at most `timeout`.
    pub fn accept(&self, timeout: Duration) -> Result<OobConn> {
        self.accept_conn(timeout, timeout)
    }

    /// Waits for the next client, at most `wait`; the connection's reads and writes get
    /// `timeout` each.
    pub fn accept_conn(&self, wait: Duration, timeout: Duration) -> Result<OobConn> {
        let port = self.port;
        let start = Instant::now();
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => return OobConn::new(stream, canonical(peer), timeout),
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted =>
                {
                    let left = wait.saturating_sub(start.elapsed());
                    if left.is_zero() {
                        return Err(OobError::Timeout {
                            what: format!("a client to connect to TCP port {port}"),
                            after: wait,
                        });
                    }
                    // Sleeps until a client is there (or the time is up): no timer wakes us.
                    let _ = wait_any(&[self.listener.as_fd()], Some(left));
                }
                // A client that connected and reset before we took it: not our failure.
                Err(e) if e.kind() == ErrorKind::ConnectionAborted => continue,
                Err(e) => {
                    return Err(OobError::Io {
                        what: format!("accept on port {port}"),
                        err: e,
                    })
                }
            }
        }
    }

    /// From now until the returned guard is dropped, a thread takes every further connection
    /// and turns it away: it reads what the client opens with (at most `REFUSE_READ`, so that
    /// closing does not reset the connection before the client reads our answer), sends it
    /// `reply` as one frame, logs one line through `log`, and closes. The run in progress is
    /// not touched. The thread sleeps in `poll(2)` until a client comes or the guard is
    /// dropped (which closes the guard's end of a socket pair); dropping the guard stops it at
    /// once and closes the listener.
    pub fn refuse_others(
        self,
        reply: Vec<u8>,
        log: impl Fn(SocketAddr) + Send + 'static,
    ) -> io::Result<Refuser> {
        let (stop, stopped) = UnixStream::pair()?;
        let thread = std::thread::spawn(move || loop {
            match wait_any(&[stopped.as_fd(), self.listener.as_fd()], None) {
                Ok(ready) if ready.first() == Some(&true) => return,
                Ok(_) => {}
                // poll(2) itself failed: nothing to turn away with; the run goes on.
                Err(_) => return,
            }
            // A client gone before we took it (WouldBlock, ConnectionAborted): wait for the next.
            if let Ok((stream, peer)) = self.listener.accept() {
                if let Ok(mut c) = OobConn::new(stream, canonical(peer), REFUSE_READ) {
                    let _ = c.recv_msg(64 * 1024, "the opening message");
                    let _ = c.send_msg(&reply, "the refusal");
                    let _ = c.stream.shutdown(std::net::Shutdown::Write);
                    let mut sink = [0u8; 256];
                    let _ = c.stream.read(&mut sink);
                }
                log(canonical(peer));
            }
        });
        Ok(Refuser {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

/// Sleeps in `poll(2)` until one of `fds` is readable (or hung up), at most `timeout` (`None`:
/// until then); says which were. A signal does not end the wait early with an error.
fn wait_any(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Rounded up, so that a wait never ends just before its deadline.
                let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut p: Vec<PollFd> = fds
            .iter()
            .map(|f| PollFd::new(*f, PollFlags::POLLIN))
            .collect();
        match poll(&mut p, ms) {
            Ok(_) => {
                return Ok(p
                    .iter()
                    .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                    .collect())
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

/// How long [`Listener::refuse_others`] reads a refused client's opening message.
const REFUSE_READ: Duration = Duration::from_secs(2);

/// Turns away further clients while it lives (see [`Listener::refuse_others`]).
pub struct Refuser {
    stop: Option<UnixStream>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Refuser {
    fn drop(&mut self) {
        // Closing our end makes the thread's end readable (end of file): it wakes and returns.
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `[::]:port` with IPV6_V6ONLY off: IPv6 and IPv4 clients alike, whatever the sysctl default.
fn dual_stack(port: u16) -> io::Result<TcpListener> {
    use nix::sys::socket::{
        bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
        SockaddrIn6,
    };
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    setsockopt(&fd, sockopt::Ipv6V6Only, &false)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    let sa = SockaddrIn6::from(std::net::SocketAddrV6::new(
        Ipv6Addr::UNSPECIFIED,
        port,
        0,
        0,
    ));
    bind(std::os::fd::AsRawFd::as_raw_fd(&fd), &sa)?;
    listen(&fd, Backlog::new(128).unwrap_or(Backlog::MAXCONN))?;
    Ok(TcpListener::from(fd))
}

/// An IPv4 client of a dual-stack listener as plain IPv4.
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

fn fmt_ip(ip: IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) if v6.is_unspecified() => "every address ([::] and 0.0.0.0)".into(),
        IpAddr::V4(v4) if v4.is_unspecified() => "every IPv4 address (0.0.0.0)".into(),
        other => other.to_string(),
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

impl std::os::fd::AsRawFd for OobConn {
    /// The socket, e.g. for a signal thread that shuts down its reading side to wake a reader.
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.stream.as_raw_fd()
    }
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
            pending: Vec::new(),
            pending_since: None,
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
        self.stream.write_all(buf).map_err(|e| {
            match self.classify(e, &format!("{what} to be sent")) {
                // "... while we waited for X to be sent"; a plain socket error reads better
                // as "sending X: ...".
                OobError::Io { err, .. } => OobError::Io {
                    what: format!("sending {what}"),
                    err,
                },
                other => other,
            }
        })
    }

    /// Reads exactly `buf.len()` bytes, all within the timeout: a deadline for the whole read,
    /// not restarted by each byte, so a trickling peer is cut off like a silent one.
    pub fn recv_raw(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        let deadline = self.deadline();
        self.fill_until(buf.len(), deadline, what)?;
        buf.copy_from_slice(&self.pending[..buf.len()]);
        self.consume(buf.len());
        Ok(())
    }

    /// The deadline of the next read: the timeout from now, or from the arrival of the first
    /// byte already waiting (a frame begun earlier does not get a fresh timeout).
    fn deadline(&self) -> Instant {
        self.pending_since.unwrap_or_else(Instant::now) + self.timeout
    }

    /// Blocks until `pending` holds `need` bytes or `deadline` passes.
    fn fill_until(&mut self, need: usize, deadline: Instant, what: &str) -> Result<()> {
        let mut chunk = [0u8; 4096];
        while self.pending.len() < need {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timed_out(what));
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| self.classify(e, what))?;
            // Never read past `need`: what follows belongs to the next read (a lesson may hand
            // the socket's next bytes to someone else, e.g. after a barrier).
            let want = (need - self.pending.len()).min(chunk.len());
            match self.stream.read(&mut chunk[..want]) {
                Ok(0) => return Err(self.closed(what)),
                Ok(n) => self.keep(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(self.timed_out(what))
                }
                Err(e) => return Err(self.classify(e, what)),
            }
        }
        Ok(())
    }

    fn closed(&self, what: &str) -> OobError {
        OobError::Closed {
            what: what.into(),
            got: self.pending.len(),
        }
    }

    fn timed_out(&self, what: &str) -> OobError {
        if self.pending.is_empty() {
            OobError::Timeout {
                what: what.into(),
                after: self.timeout,
            }
        } else {
            OobError::Timeout {
                what: format!(
                    "the rest of {what} (the peer sent {} byte(s) of it, then too little)",
                    self.pending.len()
                ),
                after: self.timeout,
            }
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        if self.pending.is_empty() {
            self.pending_since = Some(Instant::now());
        }
        self.pending.extend_from_slice(bytes);
    }

    fn consume(&mut self, n: usize) {
        self.pending.drain(..n);
        // What is left is the start of the next frame, which arrived just now for its purposes.
        self.pending_since = (!self.pending.is_empty()).then(Instant::now);
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
    /// before anything is allocated. The whole frame must arrive within the timeout.
    pub fn recv_msg(&mut self, max: usize, what: &str) -> Result<Vec<u8>> {
        let deadline = self.deadline();
        self.fill_until(4, deadline, what)?;
        let len = self.frame_len(max, what)?;
        self.fill_until(4 + len, deadline, what)?;
        Ok(self.take_frame(len))
    }

    /// Receives one framed message if a whole one has arrived, without blocking: reads what
    /// the socket holds now and keeps a partial frame for later. A partial frame older than the
    /// timeout is an error (a peer that sends half a frame and stops).
    pub fn try_recv_msg(&mut self, max: usize, what: &str) -> Result<Option<Vec<u8>>> {
        use nix::sys::socket::{recv, MsgFlags};
        use std::os::fd::AsRawFd;
        let mut chunk = [0u8; 4096];
        loop {
            if self.pending.len() >= 4 {
                let len = self.frame_len(max, what)?;
                if self.pending.len() >= 4 + len {
                    return Ok(Some(self.take_frame(len)));
                }
            }
            // Only what completes this frame: later bytes stay in the socket.
            let need = if self.pending.len() < 4 {
                4 - self.pending.len()
            } else {
                4 + self.frame_len(max, what)? - self.pending.len()
            };
            let want = need.min(chunk.len());
            match recv(
                self.stream.as_raw_fd(),
                &mut chunk[..want],
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(0) => return Err(self.closed(what)),
                Ok(n) => self.keep(&chunk[..n]),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(e) => return Err(self.classify(io::Error::from(e), what)),
            }
        }
        if self
            .pending_since
            .is_some_and(|t| t.elapsed() > self.timeout)
        {
            return Err(self.timed_out(what));
        }
        Ok(None)
    }

    /// The length announced by the frame at the head of `pending` (4 bytes present), checked.
    fn frame_len(&self, max: usize, what: &str) -> Result<usize> {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.pending[..4]);
        let len = u32::from_be_bytes(b) as usize;
        if len > max {
            return Err(OobError::TooLong {
                what: what.into(),
                len,
                max,
            });
        }
        Ok(len)
    }

    fn take_frame(&mut self, len: usize) -> Vec<u8> {
        let frame = self.pending[4..4 + len].to_vec();
        self.consume(4 + len);
        frame
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
        if !self.pending.is_empty() {
            return Ok(true);
        }
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
                self.closed(what)
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
        assert!(matches!(e, OobError::Closed { got: 0, .. }), "{e}");
        t.join().unwrap();
    }

    #[test]
    fn a_peer_that_closes_mid_frame_is_told_apart_from_one_that_closes_between_frames() {
        let port = free_port();
        let t = std::thread::spawn(move || {
            let mut c = accept(port, Duration::from_secs(10)).unwrap();
            // A frame announcing 64 bytes, then 3 of them, then the end of the connection.
            c.send_raw(&[0, 0, 0, 64, 1, 2, 3], "half a frame").unwrap();
        });
        let mut c = connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
        let e = c.recv_msg(1024, "the HELLO").unwrap_err();
        assert!(matches!(e, OobError::Closed { got: 7, .. }), "{e}");
        assert!(
            e.to_string().contains("after 7 byte(s) of the HELLO"),
            "{e}"
        );
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

    #[test]
    fn a_trickling_peer_is_cut_off_by_the_frame_deadline() {
        let port = free_port();
        let t = std::thread::spawn(move || {
            let mut c = accept(port, Duration::from_secs(10)).unwrap();
            // Announce 8 bytes, then one byte every 100 ms: each byte alone is within the
            // timeout, the frame as a whole is not.
            c.send_raw(&8u32.to_be_bytes(), "len").unwrap();
            for _ in 0..8 {
                std::thread::sleep(Duration::from_millis(100));
                if c.send_raw(b"x", "byte").is_err() {
                    break;
                }
            }
        });
        let mut c = connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
        c.set_timeout(Duration::from_millis(350)).unwrap();
        let start = Instant::now();
        let e = c.recv_msg(100, "the tally").unwrap_err();
        assert!(matches!(e, OobError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("the rest of the tally"), "{e}");
        assert!(
            start.elapsed() < Duration::from_millis(700),
            "{:?}",
            start.elapsed()
        );
        t.join().unwrap();
    }

    #[test]
    fn try_recv_keeps_half_a_frame_without_blocking() {
        let port = free_port();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let mut c = accept(port, Duration::from_secs(10)).unwrap();
            c.send_raw(&[0, 0, 0, 3, b'a'], "half").unwrap();
            go_rx.recv().unwrap();
            c.send_raw(b"bc", "rest").unwrap();
            c.send_msg(b"next", "next").unwrap();
            go_rx.recv().unwrap();
        });
        let mut c = connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        assert_eq!(c.try_recv_msg(100, "m").unwrap(), None);
        assert!(start.elapsed() < Duration::from_millis(50));
        go_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            c.try_recv_msg(100, "m").unwrap().as_deref(),
            Some(&b"abc"[..])
        );
        // The next frame is still whole for a blocking read.
        assert_eq!(c.recv_msg(100, "m").unwrap(), b"next");
        go_tx.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn half_a_frame_left_too_long_is_an_error() {
        let port = free_port();
        let t = std::thread::spawn(move || {
            let mut c = accept(port, Duration::from_secs(10)).unwrap();
            c.send_raw(&[0, 0], "half a length").unwrap();
            std::thread::sleep(Duration::from_millis(800));
        });
        let mut c = connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
        c.set_timeout(Duration::from_millis(200)).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(c.try_recv_msg(100, "a heartbeat").unwrap(), None);
        std::thread::sleep(Duration::from_millis(250));
        let e = c.try_recv_msg(100, "a heartbeat").unwrap_err();
        assert!(e.to_string().contains("the rest of a heartbeat"), "{e}");
        t.join().unwrap();
    }

    #[test]
    fn listens_on_ipv4_ipv6_and_both() {
        // The default takes IPv4 clients too (dual stack), and names them as IPv4.
        let l = Listener::bind(0).unwrap();
        let port = l.port();
        let t = std::thread::spawn(move || {
            connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        });
        let c = l.accept(Duration::from_secs(5)).unwrap();
        assert_eq!(c.peer().ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        t.join().unwrap();
        // A given IPv6 address.
        if let Ok(l) = Listener::bind_on(IpAddr::V6(Ipv6Addr::LOCALHOST), 0) {
            let port = l.port();
            let t = std::thread::spawn(move || {
                connect("::1", port, Duration::from_secs(5)).unwrap();
            });
            let c = l.accept(Duration::from_secs(5)).unwrap();
            assert_eq!(c.peer().ip(), IpAddr::V6(Ipv6Addr::LOCALHOST));
            t.join().unwrap();
        }
        // A given IPv4 address; an address not of this host is refused with a hint.
        let l = Listener::bind_on(IpAddr::V4(Ipv4Addr::LOCALHOST), 0).unwrap();
        assert!(l.local_addr().is_ipv4());
        let e = Listener::bind_on("192.0.2.1".parse().unwrap(), 0)
            .err()
            .unwrap();
        assert!(e.to_string().contains("--bind"), "{e}");
    }

    #[test]
    fn a_refuser_answers_later_clients_and_stops() {
        let l = Listener::bind_on(IpAddr::V4(Ipv4Addr::LOCALHOST), 0).unwrap();
        let port = l.port();
        let (tx, rx) = std::sync::mpsc::channel();
        let guard = l
            .refuse_others(b"busy".to_vec(), move |a| {
                let _ = tx.send(a);
            })
            .unwrap();
        let mut c = connect("127.0.0.1", port, Duration::from_secs(5)).unwrap();
        c.send_msg(b"hello", "hello").unwrap();
        assert_eq!(c.recv_msg(100, "the answer").unwrap(), b"busy");
        let logged = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(logged.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        drop(guard);
        // The listener is closed with the guard.
        let e = connect("127.0.0.1", port, Duration::from_millis(300)).err();
        assert!(e.is_some());
    }

    #[test]
    fn a_refuser_stops_at_once_when_dropped() {
        let l = Listener::bind_on(IpAddr::V4(Ipv4Addr::LOCALHOST), 0).unwrap();
        let guard = l.refuse_others(b"busy".to_vec(), |_| {}).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        drop(guard);
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    #[test]
    fn accept_times_out_then_takes_a_late_client() {
        let l = Listener::bind_on(IpAddr::V4(Ipv4Addr::LOCALHOST), 0).unwrap();
        let port = l.port();
        let e = l.accept(Duration::from_millis(120)).err().unwrap();
        assert!(e.to_string().contains("a client"), "{e}");
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            connect("127.0.0.1", port, Duration::from_secs(5)).unwrap()
        });
        let c = l.accept(Duration::from_secs(10)).unwrap();
        drop(c);
        t.join().unwrap();
    }
}
