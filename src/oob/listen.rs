//! The server's side: a [`Listener`] that outlives its accepts (IPv6 and IPv4 on one socket),
//! [`accept`] for one client, and the [`Refuser`] that turns away clients while a run goes on.

use std::io::{self, ErrorKind};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use super::{OobConn, OobError, Result, DEFAULT_BIND};
use crate::background::Background;
use crate::fdwait::deadline_after;

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
        let thread = Background::spawn("refuse-others", move |stopped| loop {
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
                    c.close_after_reply();
                }
                log(canonical(peer));
            }
        })?;
        Ok(Refuser { _thread: thread })
    }
}

/// Sleeps in `poll(2)` until one of `fds` is readable (or hung up), at most `timeout` (`None`:
/// until then); says which were ([`crate::signals::poll_until`]: it takes the signals that
/// arrive meanwhile).
fn wait_any(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    use nix::poll::{PollFd, PollFlags};
    let mut p: Vec<PollFd> = fds
        .iter()
        .map(|f| PollFd::new(*f, PollFlags::POLLIN))
        .collect();
    crate::signals::poll_until(&mut p, timeout.map(deadline_after))?;
    Ok(p.iter()
        .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
        .collect())
}

/// How long [`Listener::refuse_others`] reads a refused client's opening message.
const REFUSE_READ: Duration = Duration::from_secs(2);

/// Turns away further clients while it lives (see [`Listener::refuse_others`]).
pub struct Refuser {
    _thread: Background,
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
