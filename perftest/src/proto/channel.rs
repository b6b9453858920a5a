//! The out-of-band connection speaking this protocol: framing, heartbeats, bounded waits and
//! the ERROR a failing side sends.

use std::fmt;
use std::time::Duration;

use verbs_lab::oob::{OobConn, OobError};

use crate::events::{DeviceEvent, RunFault};
use crate::signals::Control;

use super::*;

// ---- the channel ---------------------------------------------------------------------------

/// The peer said it failed (an ERROR message): its text. The peer has printed it too, so this
/// side does not send an ERROR back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerFailed {
    pub peer: &'static str,
    pub text: String,
}

impl fmt::Display for PeerFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the {} reported: {}", self.peer, self.text)
    }
}

impl std::error::Error for PeerFailed {}

/// A failure of the channel itself (transport, codec or protocol order).
#[derive(Debug)]
pub enum ChanError {
    Oob(OobError),
    Proto {
        what: String,
        err: ProtoError,
    },
    Peer(PeerFailed),
    Unexpected {
        what: String,
        got: String,
    },
    /// The peer stayed alive (heartbeats) but did not send `what` within the phase's limit.
    Stalled {
        what: String,
        after: Duration,
    },
}

impl fmt::Display for ChanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChanError::Oob(e) => write!(f, "out-of-band channel: {e}"),
            ChanError::Proto { what, err } => write!(f, "{what} is malformed: {err}"),
            ChanError::Peer(p) => write!(f, "{p}"),
            ChanError::Unexpected { what, got } => write!(
                f,
                "protocol out of step: expected {what}, the peer sent {got}"
            ),
            ChanError::Stalled { what, after } => write!(
                f,
                "waited {:.0} s for {what}, and the peer sent only heartbeats: it is alive but \
                 stuck (the limit follows from -n/-D, -s and -u; see docs/oob-protocol.md)",
                after.as_secs_f64()
            ),
        }
    }
}

// The Display of every variant already holds its cause: no `source`, so that `{:#}` does not
// print it twice.
impl std::error::Error for ChanError {}

impl From<OobError> for ChanError {
    fn from(e: OobError) -> Self {
        ChanError::Oob(e)
    }
}

/// The out-of-band connection speaking this protocol.
pub struct Channel {
    conn: OobConn,
    /// "server" or "client": what the other side is called in messages.
    peer: &'static str,
    /// The longest a wait for one message may last while the peer sends only heartbeats.
    phase_limit: Duration,
    /// An ERROR went out: the peer knows why this side stops.
    error_sent: bool,
    /// The event of the run's device that ends the run, once one came ([`Channel::watch_device`]).
    fault: RunFault,
    /// The tool's signals ([`Channel::stop_on_signals`]); none reach a channel until then.
    control: Control,
}

impl Channel {
    pub fn new(conn: OobConn, peer: &'static str) -> Channel {
        let phase_limit = conn.timeout() * 4;
        Channel {
            conn,
            peer,
            phase_limit,
            error_sent: false,
            fault: RunFault::default(),
            control: Control::default(),
        }
    }

    /// From now on the run on this channel also stops when its device reports a fatal event
    /// ([`crate::events::watch`]): [`Channel::check_stop`] fails with it.
    pub fn watch_device(&mut self, fault: RunFault) {
        self.fault = fault;
    }

    /// From now on the run on this channel also stops when the tool's `control` receives a
    /// stop signal: [`Channel::check_stop`] fails with [`crate::signals::Interrupted`].
    pub fn stop_on_signals(&mut self, control: &Control) {
        self.control = control.clone();
    }

    /// The tool's run control this channel stops on (see [`Channel::stop_on_signals`]).
    pub fn control(&self) -> &Control {
        &self.control
    }

    /// The fatal event of the run's device, if one came (looked at now: see
    /// [`crate::events::RunFault::fatal_now`]).
    pub fn device_fault(&self) -> Option<DeviceEvent> {
        self.fault.fatal_now()
    }

    /// Fails once the run must stop: a signal came ([`Control::check`]), or its device
    /// reported a fatal event. The loops call it as they look at the peer.
    pub fn check_stop(&self) -> anyhow::Result<()> {
        self.control.check().map_err(anyhow::Error::new)?;
        self.fault.check().map_err(anyhow::Error::new)
    }

    /// The longest a wait for one message (a tally, a barrier, endpoints) may last while the
    /// peer sends only heartbeats; a run sets it from its parameters.
    pub fn set_phase_limit(&mut self, limit: Duration) {
        self.phase_limit = limit;
    }

    pub fn phase_limit(&self) -> Duration {
        self.phase_limit
    }

    /// "server" or "client".
    pub fn peer_name(&self) -> &'static str {
        self.peer
    }

    /// The socket (see [`Control::watch_socket`]).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.conn)
    }

    pub fn peer_addr(&self) -> std::net::SocketAddr {
        self.conn.peer()
    }

    /// The timeout of each later read and write.
    pub fn set_timeout(&mut self, t: Duration) -> Result<(), ChanError> {
        Ok(self.conn.set_timeout(t)?)
    }

    pub fn timeout(&self) -> Duration {
        self.conn.timeout()
    }

    pub fn send(&mut self, msg: &Msg) -> Result<(), ChanError> {
        let rec = encode(msg);
        Ok(self.conn.send_msg(&rec, msg.name())?)
    }

    /// Receives the next message; `what` names what we wait for (in timeout errors). An ERROR
    /// from the peer becomes [`ChanError::Peer`].
    pub fn recv(&mut self, what: &str) -> Result<Msg, ChanError> {
        let rec = self.conn.recv_msg(MAX_FRAME, what);
        self.decode_frame(rec, what)
    }

    /// The next message if a whole one has arrived; never blocks (a partial frame waits for
    /// the next call, and fails once it is older than the timeout).
    pub fn try_recv(&mut self, what: &str) -> Result<Option<Msg>, ChanError> {
        match self.conn.try_recv_msg(MAX_FRAME, what) {
            Ok(None) => Ok(None),
            Ok(Some(rec)) => self.decode_frame(Ok(rec), what).map(Some),
            Err(e) => self.decode_frame(Err(e), what).map(Some),
        }
    }

    fn decode_frame(&self, rec: Result<Vec<u8>, OobError>, what: &str) -> Result<Msg, ChanError> {
        let rec = match rec {
            Ok(r) => r,
            Err(OobError::TooLong { len, .. }) => {
                return Err(ChanError::Proto {
                    what: what.to_string(),
                    err: ProtoError::Wire(WireError::invalid(
                        "frame length",
                        format!(
                            "{len} bytes announced (limit {MAX_FRAME}): the peer does not speak \
                             the verbs-lab protocol (a perftest ib_* tool?); run vl_* tools on \
                             both sides"
                        ),
                    )),
                })
            }
            Err(e) => return Err(e.into()),
        };
        match decode(&rec) {
            Ok(Msg::Error(text)) => Err(ChanError::Peer(PeerFailed {
                peer: self.peer,
                text,
            })),
            Ok(m) => Ok(m),
            Err(err) => Err(ChanError::Proto {
                what: what.to_string(),
                err,
            }),
        }
    }

    /// Receives the next message other than a HEARTBEAT, within the phase limit: a peer that
    /// sends only heartbeats ends the wait with [`ChanError::Stalled`] naming `what`.
    pub fn recv_skipping_heartbeats(&mut self, what: &str) -> Result<Msg, ChanError> {
        let start = std::time::Instant::now();
        loop {
            match self.recv(what)? {
                Msg::Heartbeat => self.check_stalled(start, what)?,
                m => return Ok(m),
            }
        }
    }

    /// Fails with [`ChanError::Stalled`] once a wait that began at `start` is past the limit.
    pub fn check_stalled(&self, start: std::time::Instant, what: &str) -> Result<(), ChanError> {
        let waited = start.elapsed();
        if waited > self.phase_limit {
            return Err(ChanError::Stalled {
                what: what.to_string(),
                after: waited,
            });
        }
        Ok(())
    }

    /// True when a message (or the peer's close) is waiting: never blocks longer than `wait`.
    pub fn readable(&self, wait: Duration) -> Result<bool, ChanError> {
        Ok(self.conn.poll_readable(wait)?)
    }

    /// A barrier: sends SYNC(phase, size) and expects the same from the peer.
    pub fn sync(&mut self, phase: Phase, size: u64) -> Result<(), ChanError> {
        self.send(&Msg::Barrier(Barrier { phase, size }))?;
        let what = format!("the {}'s {phase} barrier (size {size})", self.peer);
        match self.recv_skipping_heartbeats(&what)? {
            Msg::Barrier(s) if s.phase == phase && s.size == size => Ok(()),
            Msg::Barrier(s) => Err(ChanError::Unexpected {
                what: format!("SYNC({phase}, size {size})"),
                got: format!("SYNC({}, size {})", s.phase, s.size),
            }),
            other => Err(ChanError::Unexpected {
                what: format!("SYNC({phase}, size {size})"),
                got: other.name().to_string(),
            }),
        }
    }

    /// Best effort: tells the peer why we stop. Errors are ignored (the peer may be gone).
    pub fn send_error(&mut self, text: &str) {
        self.error_sent = true;
        let _ = self.send(&Msg::Error(text.to_string()));
    }

    /// Whether an ERROR was sent on this channel.
    pub fn error_sent(&self) -> bool {
        self.error_sent
    }

    /// After a local failure: an ERROR the peer may have sent in the meantime (it often explains
    /// ours: a refused validation, a failed completion), waiting at most `wait`.
    pub fn pending_peer_error(&mut self, wait: Duration) -> Option<PeerFailed> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.readable(left) {
                Ok(true) => {}
                _ => return None,
            }
            let saved = self.conn.timeout();
            let _ = self.conn.set_timeout(left.max(Duration::from_millis(10)));
            let got = self.recv("a pending ERROR");
            let _ = self.conn.set_timeout(saved);
            match got {
                Err(ChanError::Peer(p)) => return Some(p),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
    }
}
