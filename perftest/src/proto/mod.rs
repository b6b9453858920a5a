//! The out-of-band protocol of the `vl_*` tools: what client and server tell each other over TCP
//! before, between and after the RDMA traffic. The full specification, with the message layouts
//! and the order of the phases, is `docs/oob-protocol.md`.
//!
//! Every message travels as one [`verbs_lab::oob`] frame (4-byte big-endian length, at most
//! [`MAX_FRAME`] bytes) holding a binary record: a type byte, then fixed fields in big-endian
//! order; text is length-prefixed UTF-8 with a per-field limit; lists carry a count checked
//! against a limit before anything is allocated. The decoder is strict: a record that is
//! truncated, too long, has trailing bytes, an unknown type, a value out of range or text that is
//! not what the field allows is refused with a [`ProtoError`] — never a panic, never a guess.

use std::fmt;
use std::time::Duration;

use verbs_lab::verbs::{Gid, Mtu};
use verbs_lab::wire::WireError;

use crate::measure::result::{BwRow, Metric, TestKind};

mod agree;
mod channel;
mod codec;

pub use agree::{check_hello, client_warmup};
pub use channel::{ChanError, Channel, PeerFailed};
pub use codec::{decode, encode};

/// The first bytes of a HELLO: "VLPT" (verbs-lab perftest).
pub const MAGIC: [u8; 4] = *b"VLPT";
/// The protocol version; both sides must speak the same one.
pub const VERSION: u16 = 1;
/// The largest frame either side accepts.
pub const MAX_FRAME: usize = 64 * 1024;
/// Longest tool or device name.
pub const MAX_NAME: usize = 64;
/// Longest ERROR text.
pub const MAX_TEXT: usize = 4096;
/// Most parameters in a HELLO.
pub const MAX_PARAMS: usize = 64;
/// Longest parameter key and value.
pub const MAX_KEY: usize = 32;
pub const MAX_VALUE: usize = 64;
/// Most QP records in an ENDPOINTS or TALLY (the `-q` limit).
pub const MAX_QPS: usize = crate::params::MAX_QPS as usize;

verbs_lab::wire_codes! {
    /// The type byte that starts every record, and the message's name in errors.
    enum MsgType {
        Hello = 1 => "HELLO",
        Accept = 2 => "ACCEPT",
        Error = 3 => "ERROR",
        Endpoints = 4 => "ENDPOINTS",
        Sync = 5 => "SYNC",
        Tally = 6 => "TALLY",
        Result = 7 => "RESULT",
        Heartbeat = 8 => "HEARTBEAT",
    }
}

/// The client's opening message: who it is and every parameter that must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    /// The binary, e.g. `vl_write_bw`.
    pub tool: String,
    pub test: TestKind,
    pub metric: Metric,
    /// (key, value) text pairs from [`crate::params::Config::wire_params`].
    pub params: Vec<(String, String)>,
}

/// The server's answer when it agrees to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accept {
    pub version: u16,
    pub tool: String,
}

/// One QP as the peer must know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpEndpoint {
    /// QP number (24 bits).
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    pub lid: u16,
    pub gid: Gid,
    /// The buffer the peer may access (RDMA write/read target, atomic word): rkey and address.
    pub rkey: u32,
    pub addr: u64,
    /// That buffer is `slots` slots of `slot_stride` bytes.
    pub slot_stride: u32,
    pub slots: u32,
}

/// Everything a side tells the other about its resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub device: String,
    /// The port's active MTU, in bytes.
    pub active_mtu: u32,
    /// The port's largest message.
    pub max_msg_sz: u32,
    /// RDMA reads/atomics this side accepts in flight per QP (its responder resources).
    pub max_dest_rd_atomic: u8,
    /// The Q_Key of UD QPs.
    pub qkey: u32,
    pub qps: Vec<QpEndpoint>,
}

verbs_lab::wire_codes! {
    /// The phases both sides step through together (see the protocol document).
    pub enum Phase {
        /// QPs connected, before the first size.
        Connected = 1 => "connected",
        /// A size's buffers are prepared and its receives posted.
        Ready = 2 => "ready",
        /// The warm-up of a size (TALLY only).
        WarmUp = 3 => "warm-up",
        /// The measured run of a size (SYNC starts it; TALLY ends it).
        Measure = 4 => "measurement",
        /// A size is finished (checks and results exchanged).
        Done = 5 => "done",
        /// The last message of a run.
        Finish = 6 => "finish",
        /// `--run_infinitely`: the client asks for one more period (SYNC(period, N)); it sends
        /// SYNC(finish, 0) instead to stop, and the server answers in kind.
        Period = 7 => "period",
    }
}

verbs_lab::display_by_name!(Phase);

/// A barrier token: both sides send one and expect the same phase and size back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub phase: Phase,
    pub size: u64,
}

/// What a sender posted (and saw complete) per QP in a phase, so that the receiving side knows
/// how many messages to expect and which pattern each buffer slot must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    pub phase: Phase,
    pub size: u64,
    pub per_qp: Vec<u64>,
}

/// One measured bandwidth row: each side sends its own with `-b`; the client sends its row to
/// the server of a one-way RDMA Write, Read or atomic test (perftest's `xchg_bw_reports`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WireRow {
    pub bytes: u64,
    pub iterations: u64,
    pub peak_bps: f64,
    pub avg_bps: f64,
    pub msg_rate_mpps: f64,
    pub elapsed_ns: u64,
}

impl From<&BwRow> for WireRow {
    fn from(r: &BwRow) -> WireRow {
        WireRow {
            bytes: r.bytes,
            iterations: r.iterations,
            peak_bps: r.peak_bps,
            avg_bps: r.avg_bps,
            msg_rate_mpps: r.msg_rate_mpps,
            elapsed_ns: r.elapsed.as_nanos().min(u64::MAX as u128) as u64,
        }
    }
}

impl From<WireRow> for BwRow {
    fn from(w: WireRow) -> BwRow {
        BwRow {
            bytes: w.bytes,
            iterations: w.iterations,
            peak_bps: w.peak_bps,
            avg_bps: w.avg_bps,
            msg_rate_mpps: w.msg_rate_mpps,
            elapsed: Duration::from_nanos(w.elapsed_ns),
        }
    }
}

/// Every message of the protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    Hello(Hello),
    Accept(Accept),
    /// The sender gives up; the text says why. The connection closes after it.
    Error(String),
    Endpoints(Endpoints),
    Barrier(Barrier),
    Tally(Tally),
    Result(WireRow),
    /// "Still running": sent about once a second by a side that is sending, so a waiting peer
    /// can tell a long run from a dead one.
    Heartbeat,
}

impl Msg {
    /// The message's name, for errors.
    pub fn name(&self) -> &'static str {
        self.msg_type().name()
    }

    /// Its type byte.
    fn msg_type(&self) -> MsgType {
        match self {
            Msg::Hello(_) => MsgType::Hello,
            Msg::Accept(_) => MsgType::Accept,
            Msg::Error(_) => MsgType::Error,
            Msg::Endpoints(_) => MsgType::Endpoints,
            Msg::Barrier(_) => MsgType::Sync,
            Msg::Tally(_) => MsgType::Tally,
            Msg::Result(_) => MsgType::Result,
            Msg::Heartbeat => MsgType::Heartbeat,
        }
    }
}

/// Why a record was refused: what the codec itself refuses, as [`verbs_lab::wire`] says it, or
/// what only this protocol knows to refuse. The texts are this protocol's own (a peer's record
/// "ends inside" a field rather than being "truncated" at an offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtoError {
    /// The codec refused the record: it ends inside a field, has bytes after the last one, a
    /// count or length above its limit, or a value the field does not allow.
    Wire(WireError),
    /// An empty frame.
    Empty,
    /// A type byte we do not know.
    UnknownType(u8),
    /// A HELLO without our magic: the peer is not a verbs-lab tool.
    BadMagic([u8; 4]),
    /// A HELLO (or ACCEPT) of another protocol version.
    Version { peer: u16 },
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::Wire(WireError::Truncated { what, .. }) => {
                write!(f, "the record ends inside {what}")
            }
            ProtoError::Wire(WireError::Trailing { extra }) => {
                write!(f, "{extra} unexpected byte(s) after the last field")
            }
            ProtoError::Wire(WireError::TooLong { what, len, max }) => write!(
                f,
                "{what} has {len} entries/bytes, more than the limit of {max}"
            ),
            ProtoError::Wire(WireError::Invalid { what, reason }) => {
                write!(f, "bad {what}: {reason}")
            }
            ProtoError::Empty => write!(f, "an empty record"),
            ProtoError::UnknownType(t) => write!(f, "unknown message type {t}"),
            ProtoError::BadMagic(m) => write!(
                f,
                "not a verbs-lab peer (its first record starts with {m:02x?}, not \"VLPT\"): run \
                 a vl_* tool on both sides"
            ),
            ProtoError::Version { peer } => write!(
                f,
                "protocol version mismatch: the peer speaks version {peer}, this side version \
                 {VERSION}; run the same verbs-lab release on both sides"
            ),
        }
    }
}

impl From<WireError> for ProtoError {
    fn from(e: WireError) -> ProtoError {
        ProtoError::Wire(e)
    }
}

impl std::error::Error for ProtoError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            version: VERSION,
            tool: "vl_write_bw".into(),
            test: TestKind::Write,
            metric: Metric::Bw,
            params: vec![
                ("size".into(), "65536".into()),
                ("connection".into(), "RC".into()),
            ],
        }
    }

    #[test]
    fn every_message_round_trips() {
        let msgs = [
            Msg::Hello(hello()),
            Msg::Accept(Accept {
                version: VERSION,
                tool: "vl_write_bw".into(),
            }),
            Msg::Error("parameter mismatch: x".into()),
            Msg::Endpoints(Endpoints {
                device: "rxe0".into(),
                active_mtu: 4096,
                max_msg_sz: 1 << 23,
                max_dest_rd_atomic: 128,
                qkey: 0x1111_1111,
                qps: vec![QpEndpoint {
                    qpn: 0x11,
                    psn: 0xabcdef,
                    lid: 0,
                    gid: "::ffff:192.168.77.1".parse().unwrap(),
                    rkey: 0x1234,
                    addr: 0x7f00_0000_1000,
                    slot_stride: 65536,
                    slots: 2,
                }],
            }),
            Msg::Barrier(Barrier {
                phase: Phase::Measure,
                size: 8,
            }),
            Msg::Tally(Tally {
                phase: Phase::WarmUp,
                size: 2,
                per_qp: vec![1, 2, 3],
            }),
            Msg::Result(WireRow {
                bytes: 65536,
                iterations: 200,
                peak_bps: 1.5e7,
                avg_bps: 1.2e7,
                msg_rate_mpps: 0.18,
                elapsed_ns: 123_456_789,
            }),
            Msg::Heartbeat,
        ];
        for m in msgs {
            let rec = encode(&m);
            assert_eq!(decode(&rec).as_ref(), Ok(&m), "{}", m.name());
        }
    }

    /// What the codec refuses reads in this protocol's words, not in the codec's.
    #[test]
    fn codec_refusals_keep_the_protocols_texts() {
        let text = |rec: &[u8]| decode(rec).unwrap_err().to_string();
        assert_eq!(text(&[5]), "the record ends inside phase");
        assert_eq!(text(&[8, 0]), "1 unexpected byte(s) after the last field");
        assert_eq!(text(&[5, 9]), "bad phase: code 9");
        assert_eq!(
            text(&[3, 0x10, 0x01]),
            "error text has 4097 entries/bytes, more than the limit of 4096"
        );
        assert_eq!(text(&[222]), "unknown message type 222");
    }

    #[test]
    fn random_bytes_are_refused_without_panicking() {
        // Deterministic bytes (the codec tests' generator). Every record must come back Ok or
        // Err.
        let mut rng = verbs_lab::wire::XorShift(0x2545_f491_4f6c_dd1d);
        for _ in 0..50_000 {
            let len = rng.below(96) as usize;
            let rec: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if let Ok(m) = decode(&rec) {
                assert_eq!(encode(&m), rec);
            }
        }
    }

    #[test]
    fn hello_checks_name_both_values() {
        let s = hello();
        let mut c = hello();
        assert_eq!(check_hello(&s, &c), Ok(()));
        c.params[0].1 = "8192".into();
        let e = check_hello(&s, &c).unwrap_err();
        assert!(
            e.contains("message size (-s / -a): client 8192, server 65536"),
            "{e}"
        );
        c.test = TestKind::Read;
        c.tool = "vl_read_bw".into();
        let e = check_hello(&s, &c).unwrap_err();
        assert!(e.contains("vl_read_bw") && e.contains("vl_write_bw"), "{e}");
    }

    /// A server without --warmup (auto) runs the client's; a server given one compares it, and
    /// a client left at auto against it is told both ways out.
    #[test]
    fn a_default_server_takes_the_clients_warm_up() {
        let with = |w: &str| {
            let mut h = hello();
            h.params.push(("warmup".into(), w.into()));
            h
        };
        let (auto, zero, three) = (with("auto"), with("0"), with("3"));
        assert_eq!(check_hello(&auto, &zero), Ok(()));
        assert_eq!(client_warmup(&zero), Some(crate::params::Warmup::Iters(0)));
        assert_eq!(check_hello(&auto, &auto), Ok(()));
        assert_eq!(check_hello(&three, &three), Ok(()));
        let e = check_hello(&three, &zero).unwrap_err();
        assert!(
            e.contains("warm-up iterations (--warmup): client 0, server 3"),
            "{e}"
        );
        let e = check_hello(&three, &auto).unwrap_err();
        assert!(e.contains("client auto (the default), server 3"), "{e}");
        assert!(e.contains("start the server without it"), "{e}");
        assert!(check_hello(&auto, &with("lots")).is_err());
    }
}
