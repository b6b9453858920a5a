//! One established connection ([`OobConn`]): framed messages and raw reads with a deadline per
//! frame, the barrier, the non-blocking read; and [`connect`], the client's way to get one.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::{OobError, Result, POLL_STEP};
use crate::fdwait::{deadline_after, deadline_from};

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

/// How long [`connect_noting`] lets a server refuse (or not answer) before it says so.
pub const NOTE_AFTER: Duration = Duration::from_secs(2);

/// The longest one connection attempt waits for the server's answer: between attempts the
/// client takes the signals that came ([`crate::signals::sleep`]), so a Ctrl-C while a server
/// does not answer ends it within this.
const CONNECT_TRY: Duration = Duration::from_secs(1);

/// Connects to a server at `host:port`, retrying while it is not listening yet, at most
/// `timeout` in all.
pub fn connect(host: &str, port: u16, timeout: Duration) -> Result<OobConn> {
    connect_noting(host, port, timeout, |_| {})
}

/// As [`connect`]; when the server has not accepted within [`NOTE_AFTER`], calls `note` once
/// with what is happening (whom it tries, the last error, how long it goes on), so that a
/// person who gave the wrong address or started the client first is not left waiting in
/// silence.
pub fn connect_noting(
    host: &str,
    port: u16,
    timeout: Duration,
    note: impl FnOnce(String),
) -> Result<OobConn> {
    match connect_unless(host, port, timeout, note, || false)? {
        Some(conn) => Ok(conn),
        None => unreachable!("a connect that nothing stops returns a connection or an error"),
    }
}

/// As [`connect_noting`], but between attempts asks `stop` whether to give up (a client whose
/// device went away while its server did not answer yet): `Ok(None)` when it did, and the
/// caller names why.
pub fn connect_unless(
    host: &str,
    port: u16,
    timeout: Duration,
    note: impl FnOnce(String),
    mut stop: impl FnMut() -> bool,
) -> Result<Option<OobConn>> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| OobError::Io {
            what: format!("cannot resolve server '{host}'"),
            err: e,
        })?
        .collect();
    let start = Instant::now();
    let mut last_err = None;
    let mut note = Some(note);
    while start.elapsed() < timeout {
        for addr in &addrs {
            let left = timeout
                .saturating_sub(start.elapsed())
                .max(Duration::from_millis(10));
            match TcpStream::connect_timeout(addr, left.min(CONNECT_TRY)) {
                Ok(stream) => return OobConn::new(stream, *addr, timeout).map(Some),
                Err(e) => last_err = Some(e),
            }
        }
        if stop() {
            return Ok(None);
        }
        if start.elapsed() >= NOTE_AFTER {
            if let (Some(note), Some(e)) = (note.take(), &last_err) {
                let all = timeout.as_secs_f64();
                note(format!(
                    "the server at {host}:{port} does not accept yet ({e}); trying again, for \
                     {all:.0} s in all"
                ));
            }
        }
        crate::signals::sleep(POLL_STEP * 2);
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
    /// The socket, e.g. for a signal's handler that shuts down its reading side to wake a reader.
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.stream.as_raw_fd()
    }
}

impl std::os::fd::AsFd for OobConn {
    /// The socket, e.g. to hold a duplicate that outlives this connection's reads.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

impl OobConn {
    /// Ends our side after a last reply and waits (at most the read timeout) for the peer to
    /// read it and close, so that the reply is not lost to a reset.
    pub(super) fn close_after_reply(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
        let mut sink = [0u8; 256];
        let _ = self.stream.read(&mut sink);
    }

    pub(super) fn new(stream: TcpStream, peer: SocketAddr, timeout: Duration) -> Result<OobConn> {
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
        deadline_from(
            self.pending_since.unwrap_or_else(Instant::now),
            self.timeout,
        )
    }

    /// Blocks until `pending` holds `need` bytes or `deadline` passes.
    fn fill_until(&mut self, need: usize, deadline: Instant, what: &str) -> Result<()> {
        let mut chunk = [0u8; 4096];
        while self.pending.len() < need {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timed_out(what));
            }
            // The wait takes the signals that arrive meanwhile (a stop shuts our reading side,
            // which ends it): a blocking read would not.
            let readable = crate::signals::wait_readable(self.stream.as_fd(), Some(deadline))
                .map_err(|e| self.classify(io::Error::from(e), what))?;
            if !readable {
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

    /// Sends one framed message ([`super::frame`]): a 4-byte big-endian length, then the bytes.
    pub fn send_msg(&mut self, payload: &[u8], what: &str) -> Result<()> {
        self.send_raw(&super::frame(payload, what)?, what)
    }

    /// Receives one framed message of at most `max` bytes; a longer announcement is refused
    /// before anything is allocated. The frame must begin within the timeout and end within the
    /// timeout of its first byte.
    pub fn recv_msg(&mut self, max: usize, what: &str) -> Result<Vec<u8>> {
        let deadline = self.deadline();
        self.fill_until(4, deadline, what)?;
        let len = self.frame_len(max, what)?;
        // The rest gets the timeout from the frame's first byte, not what was left of the wait
        // for it: a header that came just in time is not "half a frame, then silence".
        let deadline = self.deadline();
        self.fill_until(4 + len, deadline, what)?;
        Ok(self.take_frame(len))
    }

    /// Receives one framed message if a whole one has arrived, without blocking: reads what
    /// the socket holds now and keeps a partial frame for later. A partial frame older than the
    /// timeout is an error (a peer that sends half a frame and stops).
    pub fn try_recv_msg(&mut self, max: usize, what: &str) -> Result<Option<Vec<u8>>> {
        use nix::sys::socket::{recv, MsgFlags};
        use std::os::fd::AsRawFd;
        // Small: a running benchmark calls this every few milliseconds and almost always finds
        // nothing; zeroing a page-sized buffer each time cost it 0.2 % of a 2-byte message's
        // time in the guest (measured with callgrind). Longer frames take a few more reads.
        let mut chunk = [0u8; 256];
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
        use nix::poll::{PollFd, PollFlags};
        if !self.pending.is_empty() {
            return Ok(true);
        }
        let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
        crate::signals::poll_until(&mut fds, Some(deadline_after(wait))).map_err(|e| OobError::Io {
            what: "polling the out-of-band socket".into(),
            err: io::Error::from(e),
        })
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
