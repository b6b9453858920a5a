//! The one strict JSON parser (RFC 8259): what `vl_jsoncheck`, the plot test and the report
//! tests read `--json` files with.
//!
//! Strict means: no trailing commas, no leading zeros, no bare `NaN`/`Infinity`, no raw control
//! characters in strings, no lone surrogates, no duplicate keys, nothing after the value, and at
//! most [`MAX_DEPTH`] nested arrays/objects (so hostile input cannot exhaust the stack).
//!
//! Numbers become [`Value::UInt`] (non-negative integers that fit a `u64`), [`Value::Int`]
//! (negative ones that fit an `i64`) or [`Value::Float`] (everything else), so a document this
//! crate wrote reads back as the same [`Value`].
//!
//! ```
//! use verbs_lab::json::{parse, Value};
//!
//! let v = parse(r#"{"bytes": 65536, "bw": 1163.05, "tags": ["a"]}"#).unwrap();
//! assert_eq!(v.get("bytes").and_then(Value::as_u64), Some(65536));
//! assert_eq!(v.get("bw").and_then(Value::as_f64), Some(1163.05));
//! assert!(parse("[1,]").unwrap_err().to_string().contains("byte 3"));
//! ```

use std::fmt;

use super::{Object, Value};

/// Deepest nesting of arrays and objects accepted.
pub const MAX_DEPTH: usize = 64;

/// Why a text is not JSON, and where: byte offset and line (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub what: String,
    pub byte: usize,
    pub line: usize,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid JSON at byte {} (line {}): {}",
            self.byte, self.line, self.what
        )
    }
}

impl std::error::Error for ParseError {}

/// Parses one JSON text (surrounding whitespace allowed).
pub fn parse(text: &str) -> Result<Value, ParseError> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
        depth: 0,
    };
    let v = p.value()?;
    if p.i != p.s.len() {
        return Err(p.err("text after the value"));
    }
    Ok(v)
}

impl Value {
    /// The field `key` of an object; `None` for a missing key or a value that is no object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(o) => o.get(key),
            _ => None,
        }
    }

    /// Any number as an `f64` (integers beyond 2^53 lose precision).
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(i) => Some(i as f64),
            Value::UInt(u) => Some(u as f64),
            Value::Float(x) => Some(x),
            _ => None,
        }
    }

    /// A non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::UInt(u) => Some(u),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> ParseError {
        let at = self.i.min(self.s.len());
        ParseError {
            what: what.to_string(),
            byte: at,
            line: self.s[..at].iter().filter(|&&b| b == b'\n').count() + 1,
        }
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> Result<(), ParseError> {
        if self.peek() == Some(b) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", b as char)))
        }
    }

    fn literal(&mut self, word: &str, v: Value) -> Result<Value, ParseError> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err(&format!("expected {word}")))
        }
    }

    /// A value with the whitespace around it.
    fn value(&mut self) -> Result<Value, ParseError> {
        self.ws();
        let v = match self.peek() {
            None => return Err(self.err("unexpected end of the text")),
            Some(b'{') => self.nested(Self::object)?,
            Some(b'[') => self.nested(Self::array)?,
            Some(b'"') => Value::String(self.string()?),
            Some(b't') => self.literal("true", Value::Bool(true))?,
            Some(b'f') => self.literal("false", Value::Bool(false))?,
            Some(b'n') => self.literal("null", Value::Null)?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(c) => return Err(self.err(&format!("unexpected character {:?}", c as char))),
        };
        self.ws();
        Ok(v)
    }

    fn nested(
        &mut self,
        f: fn(&mut Self) -> Result<Value, ParseError>,
    ) -> Result<Value, ParseError> {
        if self.depth == MAX_DEPTH {
            return Err(self.err(&format!("nested more than {MAX_DEPTH} levels deep")));
        }
        self.depth += 1;
        let v = f(self);
        self.depth -= 1;
        v
    }

    fn object(&mut self) -> Result<Value, ParseError> {
        let mut o = Object::new();
        self.sequence(b'{', b'}', |p| {
            p.ws();
            if p.peek() != Some(b'"') {
                return Err(p.err("expected a key in quotes"));
            }
            let key = p.string()?;
            if o.get(&key).is_some() {
                return Err(p.err(&format!("duplicate key \"{key}\"")));
            }
            p.ws();
            p.eat(b':')?;
            let v = p.value()?;
            o.insert(key, v);
            Ok(())
        })?;
        Ok(Value::Object(o))
    }

    fn array(&mut self) -> Result<Value, ParseError> {
        let mut items = Vec::new();
        self.sequence(b'[', b']', |p| {
            items.push(p.value()?);
            Ok(())
        })?;
        Ok(Value::Array(items))
    }

    /// `open`, then items (each read by `item`, which ends after the whitespace that follows it)
    /// separated by commas, then `close`: the frame an object and an array share.
    fn sequence(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Result<(), ParseError>,
    ) -> Result<(), ParseError> {
        self.eat(open)?;
        self.ws();
        if self.peek() == Some(close) {
            self.i += 1;
            return Ok(());
        }
        loop {
            item(self)?;
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(c) if c == close => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.err(&format!("expected ',' or '{}'", close as char))),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, ParseError> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| self.err("bad \\u escape (four hex digits expected)"))?;
        self.i += 4;
        Ok(h)
    }

    /// `\uXXXX`, with a following low surrogate when XXXX is a high one.
    fn unicode_escape(&mut self) -> Result<char, ParseError> {
        let hi = self.hex4()?;
        let cp = match hi {
            0xd800..=0xdbff => {
                if !self.s[self.i..].starts_with(b"\\u") {
                    return Err(self.err("lone high surrogate"));
                }
                self.i += 2;
                let lo = self.hex4()?;
                if !(0xdc00..=0xdfff).contains(&lo) {
                    return Err(self.err("high surrogate without its low surrogate"));
                }
                0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
            }
            0xdc00..=0xdfff => return Err(self.err("lone low surrogate")),
            _ => hi,
        };
        char::from_u32(cp).ok_or_else(|| self.err("bad code point"))
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.eat(b'"')?;
        let mut out = String::new();
        loop {
            let c = self.peek().ok_or_else(|| self.err("unterminated string"))?;
            self.i += 1;
            match c {
                b'"' => return Ok(out),
                b'\\' => {
                    let e = self.peek().ok_or_else(|| self.err("unterminated escape"))?;
                    self.i += 1;
                    out.push(match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return Err(self.err("unknown escape")),
                    });
                }
                0x00..=0x1f => {
                    self.i -= 1;
                    return Err(self.err("raw control character in a string"));
                }
                _ => {
                    // One UTF-8 sequence: the input is a &str, so it is whole and valid.
                    let start = self.i - 1;
                    while matches!(self.peek(), Some(b) if b & 0xc0 == 0x80) {
                        self.i += 1;
                    }
                    out.push_str(std::str::from_utf8(&self.s[start..self.i]).expect("a &str"));
                }
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<Value, ParseError> {
        let start = self.i;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.err("expected a digit")),
        }
        let mut integer = true;
        if self.peek() == Some(b'.') {
            self.i += 1;
            integer = false;
            if self.digits() == 0 {
                return Err(self.err("expected a digit after '.'"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            integer = false;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.err("expected exponent digits"));
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).expect("ASCII");
        if integer {
            if negative {
                if let Ok(i) = text.parse::<i64>() {
                    return Ok(Value::Int(i));
                }
            } else if let Ok(u) = text.parse::<u64>() {
                return Ok(Value::UInt(u));
            }
        }
        match text.parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(Value::Float(x)),
            _ => Err(self.err(&format!("number {text} is out of range"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_json() {
        for bad in [
            "",
            " ",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{a:1}",
            "01",
            "-01",
            "1.",
            ".5",
            "-",
            "1e",
            "+1",
            "1e999",
            "NaN",
            "Infinity",
            "tru",
            "nul",
            "\"\\x\"",
            "\"a",
            "\"\t\"",
            "\"\n\"",
            "[\"\u{1}\"]",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"\\ud800\\u0041\"",
            "\"\\u12\"",
            "\"\\u+123\"",
            "{\"a\":1,\"a\":2}",
            "{\"a\":1}{}",
            "[1] 2",
            "[1 2]",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(parse(&deep).unwrap_err().what.contains("levels deep"));
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn errors_say_where() {
        let e = parse("{\n  \"a\": 1,\n  \"a\": 2\n}").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.to_string().contains("duplicate key \"a\""), "{e}");
        let e = parse("[\"x\u{1}\"]").unwrap_err();
        assert_eq!(e.byte, 3, "{e}");
    }

    #[test]
    fn reads_values() {
        let v = parse(
            " {\"a\" : [1, -2, -2.5e-3, 18446744073709551615, -9223372036854775808, \
             18446744073709551616, true, false, null, \"\\u00e9\\ud83d\\ude00\\/\", {}, []]} ",
        )
        .unwrap();
        assert_eq!(
            v.get("a").unwrap().as_array().unwrap(),
            &[
                Value::UInt(1),
                Value::Int(-2),
                Value::Float(-2.5e-3),
                Value::UInt(u64::MAX),
                Value::Int(i64::MIN),
                Value::Float(18446744073709551616.0),
                Value::Bool(true),
                Value::Bool(false),
                Value::Null,
                Value::from("é😀/"),
                Value::Object(Object::new()),
                Value::Array(vec![]),
            ]
        );
        assert_eq!(v.get("zz"), None);
        assert_eq!(Value::from(3_u8).get("a"), None);
        assert_eq!(Value::from(-3_i8).as_f64(), Some(-3.0));
        assert_eq!(Value::from(-3_i8).as_u64(), None);
    }
}
