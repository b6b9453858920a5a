//! The messages of the coordinator/worker protocol and their strict binary codec.

use std::fmt;

use crate::wire::{clip, Reader, WireError, Writer};

/// The first two bytes of every message.
pub const MAGIC: [u8; 2] = *b"VL";
/// The codec version this build writes and the only one it reads.
pub const VERSION: u8 = 1;
/// Header: magic (2), version (1), type (1), sender (u32), payload length (u16); big-endian.
pub const HEADER_LEN: usize = 10;
/// The largest opaque payload of a [`WorkerMsg::Result`] (7 KiB).
pub const MAX_RESULT: usize = 7 * 1024;
/// The largest text (UTF-8 bytes) of [`WorkerMsg::Error`], [`WorkerMsg::Text`] and
/// [`WorkerMsg::Abort`].
pub const MAX_TEXT: usize = 2048;
/// The largest encoded message: a full [`WorkerMsg::Result`]. Fits the default `msgsize_max` (8192)
/// with room for a later header to grow.
pub const MAX_MSG_LEN: usize = HEADER_LEN + MAX_RESULT;
const _: () = assert!(
    MAX_MSG_LEN <= 8192,
    "a message must fit the default msgsize_max"
);
/// The sender id of the coordinator (workers are numbered from 0).
pub const COORDINATOR: u32 = u32::MAX;
/// Priorities run from 0 to `MQ_PRIO_MAX - 1` (32768 on Linux); higher is received first.
pub const MQ_PRIO_MAX: u32 = 32768;

/// One message of the coordinator/worker protocol.
///
/// A run goes: each worker sends `Hello` (and `Ready` when it has set itself up), the
/// coordinator sends each a `Go`, each worker sends its `Result` and `Done` — or an `Error`.
/// The coordinator may send `Abort` instead of `Go`, or at any time. `Text` is free text for
/// demonstrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerMsg {
    /// A worker introduces itself: its process id and the CPU it is pinned to, if any.
    Hello {
        worker: u32,
        pid: u32,
        cpu: Option<u32>,
    },
    /// A worker is set up and waits for `Go`.
    Ready { worker: u32 },
    /// Start (coordinator → worker). `start_at_ns`: a `CLOCK_MONOTONIC` instant (the clock is
    /// the same in every process of the machine, see [`monotonic_ns`]) at which all workers
    /// should start; 0 means now.
    Go { start_at_ns: u64 },
    /// A worker's results: opaque bytes whose layout the caller defines (at most
    /// [`MAX_RESULT`]).
    Result { worker: u32, payload: Vec<u8> },
    /// A worker failed; `message` says why (at most [`MAX_TEXT`] bytes: see [`WorkerMsg::error`]).
    Error { worker: u32, message: String },
    /// A worker has sent everything and is about to exit.
    Done { worker: u32 },
    /// A worker has reached the barrier before step `step` (a benchmark: the measurement of
    /// `step`-byte messages) and waits for `Go`.
    Barrier { worker: u32, step: u64 },
    /// Free text from anyone (at most [`MAX_TEXT`] bytes).
    Text { from: u32, text: String },
    /// Stop now (coordinator → worker), with the reason.
    Abort { reason: String },
}

crate::wire_codes! {
    /// The type byte of each message, and its name in errors.
    enum MsgType {
        Hello = 1 => "Hello",
        Ready = 2 => "Ready",
        Go = 3 => "Go",
        Result = 4 => "Result",
        Error = 5 => "Error",
        Done = 6 => "Done",
        Text = 7 => "Text",
        Abort = 8 => "Abort",
        Barrier = 9 => "Barrier",
    }
}

/// "Not pinned" in the `cpu` field of a `Hello` on the wire.
const NO_CPU: u32 = u32::MAX;

/// Why bytes are not a message (decoding), or a message cannot be sent (encoding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// Fewer bytes than a header.
    Short { len: usize },
    /// The first two bytes are not [`MAGIC`]: not one of our messages at all.
    Magic { got: [u8; 2] },
    /// A version this build does not speak.
    Version { got: u8 },
    /// A type byte no version-1 message has.
    UnknownType { got: u8 },
    /// The header's length field disagrees with the bytes that follow it.
    Length { declared: usize, actual: usize },
    /// The payload does not have the layout of its type.
    Payload { kind: &'static str, reason: String },
    /// A payload larger than its type allows.
    TooLarge {
        kind: &'static str,
        len: usize,
        max: usize,
    },
    /// A sender that cannot send this type (only the coordinator sends `Go` and `Abort`, and a
    /// worker cannot use the coordinator's id).
    Sender { kind: &'static str, sender: u32 },
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Short { len } => write!(
                f,
                "{len} bytes are shorter than the {HEADER_LEN}-byte message header"
            ),
            CodecError::Magic { got } => write!(
                f,
                "bad magic {:#04x} {:#04x} (expected 'VL'): not a verbs-lab message",
                got[0], got[1]
            ),
            CodecError::Version { got } => write!(
                f,
                "message version {got} is not understood by this build (it speaks version \
                 {VERSION}): are both sides built from the same source?"
            ),
            CodecError::UnknownType { got } => {
                write!(f, "unknown message type {got} for version {VERSION}")
            }
            CodecError::Length { declared, actual } => write!(
                f,
                "the header declares a {declared}-byte payload but {actual} bytes follow \
                 (truncated or padded)"
            ),
            CodecError::Payload { kind, reason } => write!(f, "malformed {kind}: {reason}"),
            CodecError::TooLarge { kind, len, max } => {
                write!(
                    f,
                    "{kind} payload of {len} bytes exceeds its limit of {max}"
                )
            }
            CodecError::Sender { kind, sender } => {
                if *sender == COORDINATOR {
                    write!(f, "{kind} claims the coordinator's id as its sender")
                } else {
                    write!(
                        f,
                        "{kind} from worker {sender}: only the coordinator sends it"
                    )
                }
            }
        }
    }
}

impl std::error::Error for CodecError {}

impl WorkerMsg {
    /// An `Error` message; a text longer than [`MAX_TEXT`] is cut at a character boundary and
    /// marked with "…".
    pub fn error(worker: u32, message: impl Into<String>) -> WorkerMsg {
        WorkerMsg::Error {
            worker,
            message: bounded_text(message.into()),
        }
    }

    /// A `Text` message, cut to [`MAX_TEXT`] like [`WorkerMsg::error`].
    pub fn text(from: u32, text: impl Into<String>) -> WorkerMsg {
        WorkerMsg::Text {
            from,
            text: bounded_text(text.into()),
        }
    }

    /// The type's name, as in error messages: "Hello", "Result", ...
    pub fn kind(&self) -> &'static str {
        self.msg_type().name()
    }

    /// Who sent it: a worker number, or [`COORDINATOR`].
    pub fn sender(&self) -> u32 {
        match self {
            WorkerMsg::Hello { worker, .. }
            | WorkerMsg::Ready { worker }
            | WorkerMsg::Result { worker, .. }
            | WorkerMsg::Error { worker, .. }
            | WorkerMsg::Done { worker }
            | WorkerMsg::Barrier { worker, .. } => *worker,
            WorkerMsg::Text { from, .. } => *from,
            WorkerMsg::Go { .. } | WorkerMsg::Abort { .. } => COORDINATOR,
        }
    }

    fn msg_type(&self) -> MsgType {
        match self {
            WorkerMsg::Hello { .. } => MsgType::Hello,
            WorkerMsg::Ready { .. } => MsgType::Ready,
            WorkerMsg::Go { .. } => MsgType::Go,
            WorkerMsg::Result { .. } => MsgType::Result,
            WorkerMsg::Error { .. } => MsgType::Error,
            WorkerMsg::Done { .. } => MsgType::Done,
            WorkerMsg::Text { .. } => MsgType::Text,
            WorkerMsg::Abort { .. } => MsgType::Abort,
            WorkerMsg::Barrier { .. } => MsgType::Barrier,
        }
    }

    /// The wire form: header, then payload. Refuses payloads over their limit, a worker using
    /// the coordinator's id, and `Hello { cpu: Some(u32::MAX) }` (that value means "none").
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        let kind = self.kind();
        let mut p = Writer::new();
        match self {
            WorkerMsg::Hello { pid, cpu, .. } => {
                if *cpu == Some(NO_CPU) {
                    return Err(CodecError::Payload {
                        kind,
                        reason: format!("CPU {NO_CPU} is reserved for 'not pinned'"),
                    });
                }
                p.u32(*pid);
                p.u32(cpu.unwrap_or(NO_CPU));
            }
            WorkerMsg::Ready { .. } | WorkerMsg::Done { .. } => {}
            WorkerMsg::Go { start_at_ns } => p.u64(*start_at_ns),
            WorkerMsg::Barrier { step, .. } => p.u64(*step),
            WorkerMsg::Result { payload, .. } => {
                if payload.len() > MAX_RESULT {
                    return Err(CodecError::TooLarge {
                        kind,
                        len: payload.len(),
                        max: MAX_RESULT,
                    });
                }
                p.raw(payload);
            }
            WorkerMsg::Error { message: t, .. }
            | WorkerMsg::Text { text: t, .. }
            | WorkerMsg::Abort { reason: t } => {
                if t.len() > MAX_TEXT {
                    return Err(CodecError::TooLarge {
                        kind,
                        len: t.len(),
                        max: MAX_TEXT,
                    });
                }
                p.raw(t.as_bytes());
            }
        }
        let sender = self.sender();
        let worker_sent = !matches!(
            self,
            WorkerMsg::Go { .. } | WorkerMsg::Abort { .. } | WorkerMsg::Text { .. }
        );
        if worker_sent && sender == COORDINATOR {
            return Err(CodecError::Sender { kind, sender });
        }
        let payload = p.into_bytes();
        let mut out = Writer::with_capacity(HEADER_LEN + payload.len());
        out.raw(&MAGIC);
        out.u8(VERSION);
        out.u8(self.msg_type().code());
        out.u32(sender);
        // Every payload limit is below u16::MAX.
        out.u16(payload.len() as u16);
        out.raw(&payload);
        Ok(out.into_bytes())
    }

    /// Parses exactly one message. Strict: wrong magic, version, type, length, payload layout,
    /// sender or UTF-8 is refused with the reason. The encoding is canonical: whatever decodes
    /// encodes back to the same bytes.
    pub fn decode(bytes: &[u8]) -> Result<WorkerMsg, CodecError> {
        if bytes.len() < HEADER_LEN {
            return Err(CodecError::Short { len: bytes.len() });
        }
        // The header is complete (checked above): its reads cannot fail.
        let mut h = Reader::new(bytes);
        let header = |_: WireError| CodecError::Short { len: bytes.len() };
        let magic = h.take(2, "magic").map_err(header)?;
        if magic != MAGIC {
            return Err(CodecError::Magic {
                got: [magic[0], magic[1]],
            });
        }
        let version = h.u8("version").map_err(header)?;
        if version != VERSION {
            return Err(CodecError::Version { got: version });
        }
        let t = h.u8("type").map_err(header)?;
        let t = MsgType::from_code(t).ok_or(CodecError::UnknownType { got: t })?;
        let sender = h.u32("sender").map_err(header)?;
        let declared = h.u16("length").map_err(header)? as usize;
        let p = h.rest();
        if declared != p.len() {
            return Err(CodecError::Length {
                declared,
                actual: p.len(),
            });
        }
        decode_payload(t, sender, p)
    }
}

/// The payload of a message of type `t` from `sender`, whose header was valid.
fn decode_payload(t: MsgType, sender: u32, p: &[u8]) -> Result<WorkerMsg, CodecError> {
    let kind = t.name();
    let exact = |n: usize| -> Result<(), CodecError> {
        if p.len() == n {
            Ok(())
        } else {
            Err(CodecError::Payload {
                kind,
                reason: format!("{} payload bytes, expected {n}", p.len()),
            })
        }
    };
    let text = |max: usize| -> Result<String, CodecError> {
        if p.len() > max {
            return Err(CodecError::TooLarge {
                kind,
                len: p.len(),
                max,
            });
        }
        String::from_utf8(p.to_vec()).map_err(|e| CodecError::Payload {
            kind,
            reason: format!(
                "text is not UTF-8 (invalid byte at {})",
                e.utf8_error().valid_up_to()
            ),
        })
    };
    let bad = |e: WireError| CodecError::Payload {
        kind,
        reason: e.to_string(),
    };
    let from_coordinator = matches!(t, MsgType::Go | MsgType::Abort);
    if from_coordinator != (sender == COORDINATOR) && t != MsgType::Text {
        return Err(CodecError::Sender { kind, sender });
    }
    let worker = sender;
    let msg = match t {
        MsgType::Hello => {
            exact(8)?;
            let mut r = Reader::new(p);
            let pid = r.u32("pid").map_err(bad)?;
            let cpu = r.u32("cpu").map_err(bad)?;
            WorkerMsg::Hello {
                worker,
                pid,
                cpu: (cpu != NO_CPU).then_some(cpu),
            }
        }
        MsgType::Ready => {
            exact(0)?;
            WorkerMsg::Ready { worker }
        }
        MsgType::Go => {
            exact(8)?;
            WorkerMsg::Go {
                start_at_ns: Reader::new(p).u64("start_at_ns").map_err(bad)?,
            }
        }
        MsgType::Barrier => {
            exact(8)?;
            WorkerMsg::Barrier {
                worker,
                step: Reader::new(p).u64("step").map_err(bad)?,
            }
        }
        MsgType::Result => {
            if p.len() > MAX_RESULT {
                return Err(CodecError::TooLarge {
                    kind,
                    len: p.len(),
                    max: MAX_RESULT,
                });
            }
            WorkerMsg::Result {
                worker,
                payload: p.to_vec(),
            }
        }
        MsgType::Error => WorkerMsg::Error {
            worker,
            message: text(MAX_TEXT)?,
        },
        MsgType::Done => {
            exact(0)?;
            WorkerMsg::Done { worker }
        }
        MsgType::Text => WorkerMsg::Text {
            from: sender,
            text: text(MAX_TEXT)?,
        },
        MsgType::Abort => WorkerMsg::Abort {
            reason: text(MAX_TEXT)?,
        },
    };
    Ok(msg)
}

/// Cuts `s` to at most [`MAX_TEXT`] bytes at a character boundary, ending in "…".
fn bounded_text(mut s: String) -> String {
    if s.len() <= MAX_TEXT {
        return s;
    }
    let ellipsis = "…";
    s.truncate(clip(&s, MAX_TEXT - ellipsis.len()).len());
    s.push_str(ellipsis);
    s
}

impl fmt::Display for WorkerMsg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerMsg::Hello { worker, pid, cpu } => match cpu {
                Some(c) => write!(
                    f,
                    "Hello from worker {worker} (pid {pid}, pinned to CPU {c})"
                ),
                None => write!(f, "Hello from worker {worker} (pid {pid}, not pinned)"),
            },
            WorkerMsg::Ready { worker } => write!(f, "Ready from worker {worker}"),
            WorkerMsg::Go { start_at_ns: 0 } => write!(f, "Go (start now)"),
            WorkerMsg::Go { start_at_ns } => write!(f, "Go (start at monotonic {start_at_ns} ns)"),
            WorkerMsg::Result { worker, payload } => {
                write!(f, "Result from worker {worker} ({} bytes)", payload.len())
            }
            WorkerMsg::Error { worker, message } => {
                write!(f, "Error from worker {worker}: {message}")
            }
            WorkerMsg::Done { worker } => write!(f, "Done from worker {worker}"),
            WorkerMsg::Text { from, text } if *from == COORDINATOR => {
                write!(f, "Text from the coordinator: {text:?}")
            }
            WorkerMsg::Text { from, text } => write!(f, "Text from {from}: {text:?}"),
            WorkerMsg::Abort { reason } => write!(f, "Abort: {reason}"),
            WorkerMsg::Barrier { worker, step } => {
                write!(f, "Barrier from worker {worker} (before step {step})")
            }
        }
    }
}

/// Nanoseconds on `CLOCK_MONOTONIC`: one clock for every process of the machine, so a
/// coordinator can name a common start instant in [`WorkerMsg::Go`].
pub fn monotonic_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    // CLOCK_MONOTONIC cannot fail on Linux with a valid timespec.
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("clock_gettime(CLOCK_MONOTONIC)");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let b = WorkerMsg::Done {
            worker: 0x0102_0304,
        }
        .encode()
        .unwrap();
        assert_eq!(b, [b'V', b'L', 1, 6, 1, 2, 3, 4, 0, 0]);
    }

    #[test]
    fn bounded_text_cuts_at_a_char_boundary() {
        let s = "é".repeat(MAX_TEXT);
        let t = bounded_text(s);
        assert!(t.len() <= MAX_TEXT && t.ends_with('…'));
    }
}
