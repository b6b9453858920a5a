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

use verbs_lab::oob::{OobConn, OobError};
use verbs_lab::verbs::{Gid, Mtu};

use crate::params::describe_param;
use crate::result::{BwRow, Metric, TestKind};

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

const T_HELLO: u8 = 1;
const T_ACCEPT: u8 = 2;
const T_ERROR: u8 = 3;
const T_ENDPOINTS: u8 = 4;
const T_SYNC: u8 = 5;
const T_TALLY: u8 = 6;
const T_RESULT: u8 = 7;
const T_HEARTBEAT: u8 = 8;

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

/// The phases both sides step through together (see the protocol document).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// QPs connected, before the first size.
    Connected,
    /// A size's buffers are prepared and its receives posted.
    Ready,
    /// The warm-up of a size (TALLY only).
    WarmUp,
    /// The measured run of a size (SYNC starts it; TALLY ends it).
    Measure,
    /// A size is finished (checks and results exchanged).
    Done,
    /// The last message of a run.
    Finish,
    /// `--run_infinitely`: the client asks for one more period (SYNC(period, N)); it sends
    /// SYNC(finish, 0) instead to stop, and the server answers in kind.
    Period,
}

impl Phase {
    fn code(self) -> u8 {
        match self {
            Phase::Connected => 1,
            Phase::Ready => 2,
            Phase::WarmUp => 3,
            Phase::Measure => 4,
            Phase::Done => 5,
            Phase::Finish => 6,
            Phase::Period => 7,
        }
    }
    fn from_code(c: u8) -> Option<Phase> {
        Some(match c {
            1 => Phase::Connected,
            2 => Phase::Ready,
            3 => Phase::WarmUp,
            4 => Phase::Measure,
            5 => Phase::Done,
            6 => Phase::Finish,
            7 => Phase::Period,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Phase::Connected => "connected",
            Phase::Ready => "ready",
            Phase::WarmUp => "warm-up",
            Phase::Measure => "measurement",
            Phase::Done => "done",
            Phase::Finish => "finish",
            Phase::Period => "period",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A barrier token: both sides send one and expect the same phase and size back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sync {
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
    Sync(Sync),
    Tally(Tally),
    Result(WireRow),
    /// "Still running": sent about once a second by a side that is sending, so a waiting peer
    /// can tell a long run from a dead one.
    Heartbeat,
}

impl Msg {
    /// The message's name, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            Msg::Hello(_) => "HELLO",
            Msg::Accept(_) => "ACCEPT",
            Msg::Error(_) => "ERROR",
            Msg::Endpoints(_) => "ENDPOINTS",
            Msg::Sync(_) => "SYNC",
            Msg::Tally(_) => "TALLY",
            Msg::Result(_) => "RESULT",
            Msg::Heartbeat => "HEARTBEAT",
        }
    }
}

/// Why a record was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtoError {
    /// The record ended inside `field`.
    Truncated { field: &'static str },
    /// Bytes left after the last field.
    Trailing { extra: usize },
    /// An empty frame.
    Empty,
    /// A type byte we do not know.
    UnknownType(u8),
    /// A HELLO without our magic: the peer is not a verbs-lab tool.
    BadMagic([u8; 4]),
    /// A HELLO (or ACCEPT) of another protocol version.
    Version { peer: u16 },
    /// A count or length above its limit.
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    /// A value outside what the field allows.
    BadValue { field: &'static str, detail: String },
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::Truncated { field } => write!(f, "the record ends inside {field}"),
            ProtoError::Trailing { extra } => {
                write!(f, "{extra} unexpected byte(s) after the last field")
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
            ProtoError::TooLong { field, len, max } => {
                write!(
                    f,
                    "{field} has {len} entries/bytes, more than the limit of {max}"
                )
            }
            ProtoError::BadValue { field, detail } => write!(f, "bad {field}: {detail}"),
        }
    }
}

impl std::error::Error for ProtoError {}

// ---- encoding ------------------------------------------------------------------------------

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.u64(v.to_bits());
    }
    /// Text with a one-byte length (callers keep it within the field's limit).
    fn str8(&mut self, s: &str) {
        let b = &s.as_bytes()[..s.len().min(255)];
        self.u8(b.len() as u8);
        self.0.extend_from_slice(b);
    }
    /// Text with a two-byte length.
    fn str16(&mut self, s: &str) {
        let b = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
        self.u16(b.len() as u16);
        self.0.extend_from_slice(b);
    }
}

fn test_code(t: TestKind) -> u8 {
    match t {
        TestKind::Write => 1,
        TestKind::Read => 2,
        TestKind::Send => 3,
        TestKind::Atomic => 4,
    }
}

fn metric_code(m: Metric) -> u8 {
    match m {
        Metric::Bw => 1,
        Metric::Lat => 2,
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The record of a message (the payload of one frame).
pub fn encode(msg: &Msg) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(64));
    match msg {
        Msg::Hello(h) => {
            w.u8(T_HELLO);
            w.0.extend_from_slice(&MAGIC);
            w.u16(h.version);
            w.str8(clip(&h.tool, MAX_NAME));
            w.u8(test_code(h.test));
            w.u8(metric_code(h.metric));
            let n = h.params.len().min(MAX_PARAMS);
            w.u8(n as u8);
            for (k, v) in &h.params[..n] {
                w.str8(clip(k, MAX_KEY));
                w.str8(clip(v, MAX_VALUE));
            }
        }
        Msg::Accept(a) => {
            w.u8(T_ACCEPT);
            w.u16(a.version);
            w.str8(clip(&a.tool, MAX_NAME));
        }
        Msg::Error(text) => {
            w.u8(T_ERROR);
            let clean: String = text
                .chars()
                .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
                .collect();
            w.str16(clip(&clean, MAX_TEXT));
        }
        Msg::Endpoints(e) => {
            w.u8(T_ENDPOINTS);
            w.str8(clip(&e.device, MAX_NAME));
            w.u32(e.active_mtu);
            w.u32(e.max_msg_sz);
            w.u8(e.max_dest_rd_atomic);
            w.u32(e.qkey);
            let n = e.qps.len().min(MAX_QPS);
            w.u16(n as u16);
            for q in &e.qps[..n] {
                w.u32(q.qpn);
                w.u32(q.psn);
                w.u16(q.lid);
                w.0.extend_from_slice(&q.gid.0);
                w.u32(q.rkey);
                w.u64(q.addr);
                w.u32(q.slot_stride);
                w.u32(q.slots);
            }
        }
        Msg::Sync(s) => {
            w.u8(T_SYNC);
            w.u8(s.phase.code());
            w.u64(s.size);
        }
        Msg::Tally(t) => {
            w.u8(T_TALLY);
            w.u8(t.phase.code());
            w.u64(t.size);
            let n = t.per_qp.len().min(MAX_QPS);
            w.u16(n as u16);
            for c in &t.per_qp[..n] {
                w.u64(*c);
            }
        }
        Msg::Result(r) => {
            w.u8(T_RESULT);
            w.u64(r.bytes);
            w.u64(r.iterations);
            w.f64(r.peak_bps);
            w.f64(r.avg_bps);
            w.f64(r.msg_rate_mpps);
            w.u64(r.elapsed_ns);
        }
        Msg::Heartbeat => w.u8(T_HEARTBEAT),
    }
    w.0
}

// ---- decoding ------------------------------------------------------------------------------

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

type PResult<T> = Result<T, ProtoError>;

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> PResult<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or(ProtoError::Truncated { field })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self, field: &'static str) -> PResult<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }
    fn u8(&mut self, field: &'static str) -> PResult<u8> {
        Ok(self.array::<1>(field)?[0])
    }
    fn u16(&mut self, field: &'static str) -> PResult<u16> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }
    fn u32(&mut self, field: &'static str) -> PResult<u32> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }
    fn u64(&mut self, field: &'static str) -> PResult<u64> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }
    /// A finite, non-negative number.
    fn f64(&mut self, field: &'static str) -> PResult<f64> {
        let v = f64::from_bits(self.u64(field)?);
        if !v.is_finite() || v < 0.0 {
            return Err(ProtoError::BadValue {
                field,
                detail: format!("{v} is not a finite non-negative number"),
            });
        }
        Ok(v)
    }
    fn text(&mut self, len: usize, max: usize, field: &'static str) -> PResult<&'a str> {
        if len > max {
            return Err(ProtoError::TooLong { field, len, max });
        }
        let b = self.take(len, field)?;
        std::str::from_utf8(b).map_err(|e| ProtoError::BadValue {
            field,
            detail: format!("not UTF-8 ({e})"),
        })
    }
    fn str8(&mut self, max: usize, field: &'static str) -> PResult<&'a str> {
        let len = self.u8(field)? as usize;
        self.text(len, max, field)
    }
    fn str16(&mut self, max: usize, field: &'static str) -> PResult<&'a str> {
        let len = self.u16(field)? as usize;
        self.text(len, max, field)
    }
    fn count(&mut self, max: usize, field: &'static str, wide: bool) -> PResult<usize> {
        let n = if wide {
            self.u16(field)? as usize
        } else {
            self.u8(field)? as usize
        };
        if n > max {
            return Err(ProtoError::TooLong { field, len: n, max });
        }
        Ok(n)
    }
    fn finish(self) -> PResult<()> {
        match self.buf.len() - self.pos {
            0 => Ok(()),
            extra => Err(ProtoError::Trailing { extra }),
        }
    }
}

fn bad(field: &'static str, detail: impl Into<String>) -> ProtoError {
    ProtoError::BadValue {
        field,
        detail: detail.into(),
    }
}

/// A name made of `[a-z0-9_]`, 1..=max characters.
fn check_ident(s: &str, field: &'static str) -> PResult<()> {
    if s.is_empty() {
        return Err(bad(field, "empty"));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_'))
    {
        return Err(bad(
            field,
            format!("character {c:?} is not one of [a-z0-9_]"),
        ));
    }
    Ok(())
}

/// Printable ASCII (what parameter values and device names are made of).
fn check_printable(s: &str, field: &'static str) -> PResult<()> {
    if s.is_empty() {
        return Err(bad(field, "empty"));
    }
    if let Some(c) = s.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(bad(
            field,
            format!("character {c:?} is not printable ASCII"),
        ));
    }
    Ok(())
}

fn decode_test(c: u8) -> PResult<TestKind> {
    Ok(match c {
        1 => TestKind::Write,
        2 => TestKind::Read,
        3 => TestKind::Send,
        4 => TestKind::Atomic,
        _ => return Err(bad("test kind", format!("code {c}"))),
    })
}

fn decode_metric(c: u8) -> PResult<Metric> {
    Ok(match c {
        1 => Metric::Bw,
        2 => Metric::Lat,
        _ => return Err(bad("metric", format!("code {c}"))),
    })
}

fn decode_phase(r: &mut Reader<'_>) -> PResult<Phase> {
    let c = r.u8("phase")?;
    Phase::from_code(c).ok_or_else(|| bad("phase", format!("code {c}")))
}

/// Parses one record. Refuses anything that is not exactly a message of this version.
pub fn decode(buf: &[u8]) -> Result<Msg, ProtoError> {
    if buf.is_empty() {
        return Err(ProtoError::Empty);
    }
    if buf.len() > MAX_FRAME {
        return Err(ProtoError::TooLong {
            field: "record",
            len: buf.len(),
            max: MAX_FRAME,
        });
    }
    let mut r = Reader { buf, pos: 1 };
    let msg = match buf[0] {
        T_HELLO => {
            let magic = r.array::<4>("magic")?;
            if magic != MAGIC {
                return Err(ProtoError::BadMagic(magic));
            }
            let version = r.u16("version")?;
            if version != VERSION {
                return Err(ProtoError::Version { peer: version });
            }
            let tool = r.str8(MAX_NAME, "tool name")?;
            check_ident(tool, "tool name")?;
            let test = decode_test(r.u8("test kind")?)?;
            let metric = decode_metric(r.u8("metric")?)?;
            let n = r.count(MAX_PARAMS, "parameter list", false)?;
            let mut params: Vec<(String, String)> = Vec::with_capacity(n);
            for _ in 0..n {
                let k = r.str8(MAX_KEY, "parameter name")?;
                check_ident(k, "parameter name")?;
                let v = r.str8(MAX_VALUE, "parameter value")?;
                check_printable(v, "parameter value")?;
                if params.iter().any(|(pk, _)| pk == k) {
                    return Err(bad("parameter list", format!("'{k}' appears twice")));
                }
                params.push((k.to_string(), v.to_string()));
            }
            Msg::Hello(Hello {
                version,
                tool: tool.to_string(),
                test,
                metric,
                params,
            })
        }
        T_ACCEPT => {
            let version = r.u16("version")?;
            if version != VERSION {
                return Err(ProtoError::Version { peer: version });
            }
            let tool = r.str8(MAX_NAME, "tool name")?;
            check_ident(tool, "tool name")?;
            Msg::Accept(Accept {
                version,
                tool: tool.to_string(),
            })
        }
        T_ERROR => {
            let text = r.str16(MAX_TEXT, "error text")?;
            if text.is_empty() {
                return Err(bad("error text", "empty"));
            }
            if let Some(c) = text.chars().find(|c| c.is_control() && *c != '\n') {
                return Err(bad("error text", format!("control character {c:?}")));
            }
            Msg::Error(text.to_string())
        }
        T_ENDPOINTS => {
            let device = r.str8(MAX_NAME, "device name")?;
            check_printable(device, "device name")?;
            let active_mtu = r.u32("active MTU")?;
            if Mtu::from_bytes(active_mtu).is_none() {
                return Err(bad("active MTU", format!("{active_mtu} is not an IB MTU")));
            }
            let max_msg_sz = r.u32("max message size")?;
            if max_msg_sz == 0 {
                return Err(bad("max message size", "0"));
            }
            let max_dest_rd_atomic = r.u8("responder resources")?;
            let qkey = r.u32("Q_Key")?;
            let n = r.count(MAX_QPS, "QP list", true)?;
            if n == 0 {
                return Err(bad("QP list", "no QP"));
            }
            let mut qps = Vec::with_capacity(n);
            for _ in 0..n {
                let qpn = r.u32("QPN")?;
                let psn = r.u32("PSN")?;
                let lid = r.u16("LID")?;
                let gid = Gid(r.array::<16>("GID")?);
                let rkey = r.u32("rkey")?;
                let addr = r.u64("address")?;
                let slot_stride = r.u32("slot stride")?;
                let slots = r.u32("slot count")?;
                if qpn > 0xff_ffff || qpn == 0 {
                    return Err(bad("QPN", format!("{qpn:#x} is not a 24-bit QP number")));
                }
                if psn > 0xff_ffff {
                    return Err(bad("PSN", format!("{psn:#x} is wider than 24 bits")));
                }
                if slot_stride == 0 || slots == 0 {
                    return Err(bad(
                        "slots",
                        format!("{slots} slots of {slot_stride} bytes"),
                    ));
                }
                let span = u64::from(slot_stride) * u64::from(slots);
                if addr.checked_add(span).is_none() {
                    return Err(bad(
                        "address",
                        format!("{addr:#x} + {span} bytes wraps around"),
                    ));
                }
                qps.push(QpEndpoint {
                    qpn,
                    psn,
                    lid,
                    gid,
                    rkey,
                    addr,
                    slot_stride,
                    slots,
                });
            }
            Msg::Endpoints(Endpoints {
                device: device.to_string(),
                active_mtu,
                max_msg_sz,
                max_dest_rd_atomic,
                qkey,
                qps,
            })
        }
        T_SYNC => {
            let phase = decode_phase(&mut r)?;
            let size = r.u64("size")?;
            Msg::Sync(Sync { phase, size })
        }
        T_TALLY => {
            let phase = decode_phase(&mut r)?;
            let size = r.u64("size")?;
            let n = r.count(MAX_QPS, "tally", true)?;
            let mut per_qp = Vec::with_capacity(n);
            for _ in 0..n {
                per_qp.push(r.u64("tally count")?);
            }
            Msg::Tally(Tally {
                phase,
                size,
                per_qp,
            })
        }
        T_RESULT => Msg::Result(WireRow {
            bytes: r.u64("bytes")?,
            iterations: r.u64("iterations")?,
            peak_bps: r.f64("peak bandwidth")?,
            avg_bps: r.f64("average bandwidth")?,
            msg_rate_mpps: r.f64("message rate")?,
            elapsed_ns: r.u64("elapsed time")?,
        }),
        T_HEARTBEAT => Msg::Heartbeat,
        t => return Err(ProtoError::UnknownType(t)),
    };
    r.finish()?;
    Ok(msg)
}

// ---- agreement -----------------------------------------------------------------------------

/// The server's check of a client's HELLO against its own: the same tool, and every parameter
/// equal. The error names each differing parameter with both values, e.g.
/// `message size (-s / -a): client 8192, server 4096`.
pub fn check_hello(server: &Hello, client: &Hello) -> Result<(), String> {
    if client.version != server.version {
        return Err(format!(
            "protocol version mismatch: client version {}, server version {}; run the same \
             verbs-lab release on both sides",
            client.version, server.version
        ));
    }
    if (client.test, client.metric) != (server.test, server.metric) {
        return Err(format!(
            "tool mismatch: the client runs {}, this server {}; start the same tool on both sides",
            client.tool, server.tool
        ));
    }
    let mut diffs = Vec::new();
    for (k, sv) in &server.params {
        match client.params.iter().find(|(ck, _)| ck == k) {
            Some((_, cv)) if cv == sv => {}
            Some((_, cv)) => diffs.push(format!("{}: client {cv}, server {sv}", describe(k))),
            None => diffs.push(format!(
                "{}: the client did not send it (server {sv})",
                describe(k)
            )),
        }
    }
    for (k, cv) in &client.params {
        if !server.params.iter().any(|(sk, _)| sk == k) {
            diffs.push(format!(
                "parameter '{k}': unknown to this server (client {cv})"
            ));
        }
    }
    if diffs.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "parameter mismatch: {}; give both sides the same options",
            diffs.join("; ")
        ))
    }
}

fn describe(key: &str) -> String {
    match describe_param(key) {
        "parameter" => format!("parameter '{key}'"),
        d => d.to_string(),
    }
}

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
            ChanError::Proto { what, err } => write!(f, "refused the peer's {what}: {err}"),
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
}

impl Channel {
    pub fn new(conn: OobConn, peer: &'static str) -> Channel {
        let phase_limit = conn.timeout() * 4;
        Channel {
            conn,
            peer,
            phase_limit,
            error_sent: false,
        }
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

    /// The socket (see [`crate::signals::watch_socket`]).
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
                    err: ProtoError::BadValue {
                        field: "frame length",
                        detail: format!(
                            "{len} bytes announced (limit {MAX_FRAME}): the peer does not speak \
                             the verbs-lab protocol (a perftest ib_* tool?); run vl_* tools on \
                             both sides"
                        ),
                    },
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
        self.send(&Msg::Sync(Sync { phase, size }))?;
        let what = format!("the {}'s {phase} barrier (size {size})", self.peer);
        match self.recv_skipping_heartbeats(&what)? {
            Msg::Sync(s) if s.phase == phase && s.size == size => Ok(()),
            Msg::Sync(s) => Err(ChanError::Unexpected {
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
            Msg::Sync(Sync {
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

    #[test]
    fn random_bytes_are_refused_without_panicking() {
        // xorshift64: deterministic, no crate. Every record must come back Ok or Err.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..50_000 {
            let len = (next() % 96) as usize;
            let rec: Vec<u8> = (0..len).map(|_| next() as u8).collect();
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
}
