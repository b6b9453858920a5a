//! The one binary codec of the project: a [`Writer`] and a [`Reader`] for the big-endian
//! records that processes exchange (the message queues of [`crate::mq`], the worker reports of
//! the benchmarks' `--procs`, the benchmarks' out-of-band messages, the collectives' bootstrap
//! records in `vl_coll::bootstrap`).
//!
//! The layout is deliberately plain: integers big-endian, `f64` as its IEEE-754 bits, a
//! boolean as one byte 0 or 1, an optional value as a 0/1 tag byte and the value, a text as a
//! 16-bit length and UTF-8, a list as a 32-bit count and its items. Records whose layout was
//! fixed elsewhere (the benchmarks' out-of-band protocol, the collectives' bootstrap) give a
//! length or count another [`Width`] and a limit of their own: [`Writer::text`],
//! [`Writer::blob`], [`Reader::text`], [`Reader::blob`], [`Reader::length`]. The [`Reader`] is strict,
//! because the bytes come from another process that may be of another build, or broken:
//! every truncation, a boolean or tag that is neither 0 nor 1, text that is not UTF-8, a
//! count larger than the remaining bytes could hold (checked *before* anything is allocated)
//! and trailing bytes ([`Reader::finish`]) are refused with a [`WireError`] that names the
//! field. Decoding never panics, whatever the input. A one-byte code (a message type, a phase)
//! is declared once, with its name, by [`wire_codes!`](crate::wire_codes).
//!
//! ```
//! use verbs_lab::wire::{Reader, Writer};
//! let mut w = Writer::new();
//! w.u32(7);
//! w.str("rxe0").unwrap();
//! let bytes = w.into_bytes();
//! let mut r = Reader::new(&bytes);
//! assert_eq!(r.u32("count").unwrap(), 7);
//! assert_eq!(r.str("device").unwrap(), "rxe0");
//! r.finish().unwrap();
//! ```

use std::fmt;

mod code_table;

/// Why bytes could not be read, or a value could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than `what` needs.
    Truncated {
        what: String,
        need: usize,
        at: usize,
        left: usize,
    },
    /// Bytes after the end of the record.
    Trailing { extra: usize },
    /// A value that has no meaning in its field (a boolean of 2, a text that is not UTF-8, an
    /// unknown code, a count the bytes cannot hold, a wrong magic or version).
    Invalid { what: String, reason: String },
    /// A value too large for its length field or its limit (writing or reading).
    TooLong {
        what: String,
        len: usize,
        max: usize,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated {
                what,
                need,
                at,
                left,
            } => write!(
                f,
                "truncated: {what} needs {need} bytes at offset {at}, {left} left"
            ),
            WireError::Trailing { extra } => {
                write!(f, "{extra} bytes after the end of the record")
            }
            WireError::Invalid { what, reason } => write!(f, "{what}: {reason}"),
            WireError::TooLong { what, len, max } => {
                write!(
                    f,
                    "{what}: {len} bytes (or items) exceed the limit of {max}"
                )
            }
        }
    }
}

impl std::error::Error for WireError {}

impl WireError {
    /// An [`WireError::Invalid`] for field `what`.
    pub fn invalid(what: &str, reason: impl Into<String>) -> WireError {
        WireError::Invalid {
            what: what.to_string(),
            reason: reason.into(),
        }
    }
}

/// The width of a length or count field: one, two or four bytes, big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Width {
    U8,
    U16,
    U32,
}

impl Width {
    /// The largest length the field can carry.
    pub fn max(self) -> usize {
        match self {
            Width::U8 => u8::MAX as usize,
            Width::U16 => u16::MAX as usize,
            Width::U32 => u32::MAX as usize,
        }
    }
}

/// Builds a record.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    pub fn with_capacity(n: usize) -> Writer {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The record.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// Raw bytes, as they are (a magic, a payload whose length the caller wrote).
    pub fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn u16(&mut self, v: u16) {
        self.raw(&v.to_be_bytes());
    }

    pub fn u32(&mut self, v: u32) {
        self.raw(&v.to_be_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.raw(&v.to_be_bytes());
    }

    /// The IEEE-754 bits: NaN and the infinities survive the trip.
    pub fn f64(&mut self, v: f64) {
        self.u64(v.to_bits());
    }

    /// One byte, 0 or 1.
    pub fn bool(&mut self, v: bool) {
        self.u8(v.into());
    }

    /// A length or count `n` in a field of `width`; fails when it does not fit (`what` names
    /// the value, for the error).
    pub fn length(&mut self, width: Width, n: usize, what: &str) -> Result<(), WireError> {
        if n > width.max() {
            return Err(WireError::TooLong {
                what: what.to_string(),
                len: n,
                max: width.max(),
            });
        }
        match width {
            Width::U8 => self.u8(n as u8),
            Width::U16 => self.u16(n as u16),
            Width::U32 => self.u32(n as u32),
        }
        Ok(())
    }

    /// A length of `width`, then the bytes.
    pub fn blob(&mut self, width: Width, b: &[u8]) -> Result<(), WireError> {
        self.length(width, b.len(), "a byte string")?;
        self.raw(b);
        Ok(())
    }

    /// A length of `width`, then the UTF-8 bytes.
    pub fn text(&mut self, width: Width, s: &str) -> Result<(), WireError> {
        self.length(width, s.len(), "a text")?;
        self.raw(s.as_bytes());
        Ok(())
    }

    /// A 16-bit length, then the UTF-8 bytes; fails beyond 65535 bytes.
    pub fn str(&mut self, s: &str) -> Result<(), WireError> {
        self.text(Width::U16, s)
    }

    /// A 32-bit count of items; fails beyond `u32::MAX`.
    pub fn count(&mut self, n: usize) -> Result<(), WireError> {
        self.length(Width::U32, n, "a list")
    }

    /// A count, then each text.
    pub fn strs(&mut self, v: &[String]) -> Result<(), WireError> {
        self.count(v.len())?;
        v.iter().try_for_each(|s| self.str(s))
    }
}

/// `s` cut to at most `max` bytes on a character boundary: text that must fit a field's limit.
pub fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Reads a record, strictly (see the module comment). Each call names the field it reads, for
/// the error.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, at: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.b.len() - self.at
    }

    /// The offset of the next byte.
    pub fn position(&self) -> usize {
        self.at
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], WireError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.b.len())
            .ok_or_else(|| WireError::Truncated {
                what: what.to_string(),
                need: n,
                at: self.at,
                left: self.remaining(),
            })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.b[self.at..];
        self.at = self.b.len();
        s
    }

    /// The next `N` bytes, as an array (a magic, a GID).
    pub fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8, WireError> {
        Ok(self.array::<1>(what)?[0])
    }

    pub fn u16(&mut self, what: &str) -> Result<u16, WireError> {
        self.array(what).map(u16::from_be_bytes)
    }

    pub fn u32(&mut self, what: &str) -> Result<u32, WireError> {
        self.array(what).map(u32::from_be_bytes)
    }

    pub fn u64(&mut self, what: &str) -> Result<u64, WireError> {
        self.array(what).map(u64::from_be_bytes)
    }

    pub fn f64(&mut self, what: &str) -> Result<f64, WireError> {
        self.u64(what).map(f64::from_bits)
    }

    /// A byte that must be 0 or 1.
    pub fn bool(&mut self, what: &str) -> Result<bool, WireError> {
        self.zero_or_one(what, |v| format!("{v} is not a boolean (0 or 1)"))
    }

    /// A byte of a [`wire_codes!`](crate::wire_codes) table (any `TryFrom<u8, Error = u8>`);
    /// a byte the table lacks is [`WireError::Invalid`], "code N". The one decoding of a code.
    pub fn code<T: TryFrom<u8, Error = u8>>(&mut self, what: &str) -> Result<T, WireError> {
        let v = self.u8(what)?;
        T::try_from(v).map_err(|v| WireError::invalid(what, format!("code {v}")))
    }

    /// The tag of an optional value: 0 (absent) or 1 (present, the value follows).
    pub fn tag(&mut self, what: &str) -> Result<bool, WireError> {
        self.zero_or_one(what, |v| format!("option tag {v} is neither 0 nor 1"))
    }

    /// A byte read as `false` (0) or `true` (1); any other value is refused with `refusal(v)`.
    fn zero_or_one(
        &mut self,
        what: &str,
        refusal: impl FnOnce(u8) -> String,
    ) -> Result<bool, WireError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(WireError::invalid(what, refusal(v))),
        }
    }

    /// A length or count in a field of `width`, refused above `max` (before anything is read
    /// or allocated for it).
    pub fn length(&mut self, width: Width, what: &str, max: usize) -> Result<usize, WireError> {
        let n = match width {
            Width::U8 => self.u8(what)? as usize,
            Width::U16 => self.u16(what)? as usize,
            Width::U32 => self.u32(what)? as usize,
        };
        if n > max {
            return Err(WireError::TooLong {
                what: what.to_string(),
                len: n,
                max,
            });
        }
        Ok(n)
    }

    /// A length of `width` (at most `max`) and that many bytes.
    pub fn blob(&mut self, width: Width, what: &str, max: usize) -> Result<&'a [u8], WireError> {
        let n = self.length(width, what, max)?;
        self.take(n, what)
    }

    /// A length of `width` (at most `max`) and that many bytes of UTF-8.
    pub fn text(&mut self, width: Width, what: &str, max: usize) -> Result<&'a str, WireError> {
        let t = self.blob(width, what, max)?;
        std::str::from_utf8(t).map_err(|e| {
            WireError::invalid(
                what,
                format!("not UTF-8 (invalid byte at {})", e.valid_up_to()),
            )
        })
    }

    /// A 16-bit length and that many bytes of UTF-8.
    pub fn str(&mut self, what: &str) -> Result<String, WireError> {
        self.text(Width::U16, what, Width::U16.max())
            .map(str::to_string)
    }

    /// A 32-bit count of items that take at least `min_item` bytes each: a count the
    /// remaining bytes cannot hold is refused before anything is allocated.
    pub fn count(&mut self, what: &str, min_item: usize) -> Result<usize, WireError> {
        let n = self.u32(what)? as usize;
        if n > self.remaining() / min_item.max(1) {
            return Err(WireError::invalid(
                what,
                format!(
                    "a count of {n} exceeds what the {} bytes left can hold",
                    self.remaining()
                ),
            ));
        }
        Ok(n)
    }

    /// A count, then that many texts.
    pub fn strs(&mut self, what: &str) -> Result<Vec<String>, WireError> {
        let n = self.count(what, 2)?;
        (0..n).map(|_| self.str(what)).collect()
    }

    /// Ends the record: refuses trailing bytes.
    pub fn finish(&self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(WireError::Trailing { extra }),
        }
    }
}

/// xorshift64*: a small deterministic stream of numbers for the codecs' property tests (here,
/// `tests/mq.rs`, `perftest/tests/proto.rs`), so that they need no crate and fail the same way
/// every time. Not for anything that needs unpredictable numbers.
#[derive(Debug, Clone)]
pub struct XorShift(pub u64);

impl XorShift {
    /// The next number (the seed must not be 0).
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests;
