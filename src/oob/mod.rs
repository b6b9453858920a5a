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
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

mod conn;
mod listen;
#[cfg(test)]
mod tests;

pub use conn::{connect, connect_noting, connect_unless, OobConn, NOTE_AFTER};
pub use listen::{accept, Listener, Refuser};

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

// The Display of every variant already holds its cause (`Io` prints its io::Error): no
// `source`, so that `{:#}` does not print the cause twice ("cannot resolve server 'x': failed
// to lookup address information: ...: failed to lookup address information: ...").
impl std::error::Error for OobError {}

pub type Result<T> = std::result::Result<T, OobError>;

/// One frame of the channel: the payload's length as 4 big-endian bytes, then the payload.
/// The only place a frame is built: [`OobConn::send_msg`] sends it, and a tool that must write
/// one straight to the socket (perftest's last-gasp ERROR on a signal) builds it here too, so
/// both change together. A payload longer than `u32::MAX` bytes is [`OobError::TooLong`].
pub fn frame(payload: &[u8], what: &str) -> Result<Vec<u8>> {
    let len = u32::try_from(payload.len()).map_err(|_| OobError::TooLong {
        what: what.into(),
        len: payload.len(),
        max: u32::MAX as usize,
    })?;
    let mut frame = Vec::with_capacity(4 + payload.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(payload);
    Ok(frame)
}

const POLL_STEP: Duration = Duration::from_millis(50);
