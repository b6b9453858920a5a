//! A tiny JSON writer for the tools' `--json` output (verbs-lab has no serde).
//!
//! Build a [`Value`] tree, then print it compact (`to_string()`, via [`Display`](fmt::Display))
//! or indented ([`Value::pretty`]). Whatever the tree holds, the text is valid JSON (RFC 8259):
//! strings are escaped, non-finite floats (`NaN`, `±inf`) become `null`, and object keys are kept
//! unique and in insertion order.
//!
//! ```
//! use verbs_lab::json::{Object, Value};
//!
//! let doc = Object::new()
//!     .field("device", "rxe0")
//!     .field("max_qp", 1_u64 << 17)
//!     .field("bw_gbps", 0.09)
//!     .field("numa_node", None::<u32>)
//!     .field("ports", vec![Value::from(1_u32)]);
//! assert_eq!(
//!     doc.to_string(),
//!     r#"{"device":"rxe0","max_qp":131072,"bw_gbps":0.09,"numa_node":null,"ports":[1]}"#
//! );
//! ```

use std::fmt::{self, Write};

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    /// A signed integer, printed exactly.
    Int(i64),
    /// An unsigned integer, printed exactly (GUIDs, byte counts up to `u64::MAX`).
    UInt(u64),
    /// A float; `NaN` and infinities print as `null`.
    Float(f64),
    String(String),
    Array(Vec<Value>),
    Object(Object),
}

/// A JSON object: keys in insertion order, each key at most once.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Object {
    fields: Vec<(String, Value)>,
}

impl Object {
    pub fn new() -> Object {
        Object::default()
    }

    /// Builder form of [`Object::insert`].
    pub fn field(mut self, key: impl Into<String>, value: impl Into<Value>) -> Object {
        self.insert(key, value);
        self
    }

    /// Sets `key` to `value`; a key set twice keeps its first position and its last value.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        let value = value.into();
        match self.fields.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.fields.push((key, value)),
        }
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The fields in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v))
    }
}

impl Value {
    /// An array from anything that iterates over values.
    pub fn array<T: Into<Value>>(items: impl IntoIterator<Item = T>) -> Value {
        Value::Array(items.into_iter().map(Into::into).collect())
    }

    /// The text indented by two spaces per level, one field or element per line.
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        write_value(&mut out, self, Some(0)).expect("writing to a String cannot fail");
        out
    }
}

impl fmt::Display for Value {
    /// The compact text: no whitespace at all.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_value(f, self, None)
    }
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_object(f, self, None)
    }
}

impl Object {
    /// See [`Value::pretty`].
    pub fn pretty(&self) -> String {
        let mut out = String::new();
        write_object(&mut out, self, Some(0)).expect("writing to a String cannot fail");
        out
    }
}

/// Writes `s` as a JSON string literal, quotes included.
///
/// `"` and `\` are escaped, control characters U+0000–U+001F become `\n`, `\t`, ... or
/// `\u00XX`; U+2028 and U+2029 are escaped too, so the text is also valid JavaScript.
pub fn write_str(out: &mut impl Write, s: &str) -> fmt::Result {
    out.write_char('"')?;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        let esc: Option<&str> = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '\u{08}' => Some("\\b"),
            '\u{0c}' => Some("\\f"),
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => None,
            _ => continue,
        };
        out.write_str(&s[start..i])?;
        match esc {
            Some(e) => out.write_str(e)?,
            None => write!(out, "\\u{:04x}", c as u32)?,
        }
        start = i + c.len_utf8();
    }
    out.write_str(&s[start..])?;
    out.write_char('"')
}

/// A JSON string literal of `s` (see [`write_str`]).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_str(&mut out, s).expect("writing to a String cannot fail");
    out
}

fn write_float(out: &mut impl Write, x: f64) -> fmt::Result {
    if x.is_finite() {
        // Debug prints the shortest text that reads back as the same f64, with a fraction or an
        // exponent ("3.0", "1e-7", "1e300"): all of these are valid JSON numbers.
        write!(out, "{x:?}")
    } else {
        out.write_str("null")
    }
}

fn newline(out: &mut impl Write, indent: Option<usize>) -> fmt::Result {
    if let Some(level) = indent {
        out.write_char('\n')?;
        for _ in 0..level {
            out.write_str("  ")?;
        }
    }
    Ok(())
}

fn write_value(out: &mut impl Write, v: &Value, indent: Option<usize>) -> fmt::Result {
    match v {
        Value::Null => out.write_str("null"),
        Value::Bool(b) => out.write_str(if *b { "true" } else { "false" }),
        Value::Int(i) => write!(out, "{i}"),
        Value::UInt(u) => write!(out, "{u}"),
        Value::Float(x) => write_float(out, *x),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            if items.is_empty() {
                return out.write_str("[]");
            }
            out.write_char('[')?;
            let inner = indent.map(|l| l + 1);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_char(',')?;
                }
                newline(out, inner)?;
                write_value(out, item, inner)?;
            }
            newline(out, indent)?;
            out.write_char(']')
        }
        Value::Object(o) => write_object(out, o, indent),
    }
}

fn write_object(out: &mut impl Write, o: &Object, indent: Option<usize>) -> fmt::Result {
    if o.fields.is_empty() {
        return out.write_str("{}");
    }
    out.write_char('{')?;
    let inner = indent.map(|l| l + 1);
    for (i, (k, v)) in o.fields.iter().enumerate() {
        if i > 0 {
            out.write_char(',')?;
        }
        newline(out, inner)?;
        write_str(out, k)?;
        out.write_str(if indent.is_some() { ": " } else { ":" })?;
        write_value(out, v, inner)?;
    }
    newline(out, indent)?;
    out.write_char('}')
}

macro_rules! from_via {
    ($variant:ident as $target:ty: $($t:ty),*) => {
        $(impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::$variant(<$target>::from(v))
            }
        })*
    };
}
from_via!(Int as i64: i8, i16, i32, i64);
from_via!(UInt as u64: u8, u16, u32, u64);
from_via!(Float as f64: f32, f64);

impl From<usize> for Value {
    fn from(v: usize) -> Value {
        Value::UInt(v as u64)
    }
}
impl From<isize> for Value {
    fn from(v: isize) -> Value {
        Value::Int(v as i64)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::String(v)
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::String(v.clone())
    }
}
impl From<Object> for Value {
    fn from(v: Object) -> Value {
        Value::Object(v)
    }
}
impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Value {
        Value::array(v)
    }
}
/// `None` is `null`.
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A strict RFC 8259 recognizer, so the tests check validity, not just expected strings.
    /// Returns the decoded strings it met, in order, to check escaping round-trips.
    fn validate(text: &str) -> Result<Vec<String>, String> {
        struct P<'a> {
            b: &'a [u8],
            i: usize,
            strings: Vec<String>,
        }
        impl P<'_> {
            fn err<T>(&self, what: &str) -> Result<T, String> {
                Err(format!("{what} at byte {}", self.i))
            }
            fn ws(&mut self) {
                while self.i < self.b.len() && b" \t\r\n".contains(&self.b[self.i]) {
                    self.i += 1;
                }
            }
            fn eat(&mut self, lit: &[u8]) -> bool {
                if self.b[self.i..].starts_with(lit) {
                    self.i += lit.len();
                    true
                } else {
                    false
                }
            }
            fn digits(&mut self) -> usize {
                let s = self.i;
                while self.i < self.b.len() && self.b[self.i].is_ascii_digit() {
                    self.i += 1;
                }
                self.i - s
            }
            fn value(&mut self) -> Result<(), String> {
                self.ws();
                match self.b.get(self.i) {
                    Some(b'{') => {
                        self.i += 1;
                        self.ws();
                        if self.eat(b"}") {
                            return Ok(());
                        }
                        loop {
                            self.ws();
                            self.string()?;
                            self.ws();
                            if !self.eat(b":") {
                                return self.err("expected ':'");
                            }
                            self.value()?;
                            self.ws();
                            if self.eat(b"}") {
                                return Ok(());
                            }
                            if !self.eat(b",") {
                                return self.err("expected ',' or '}'");
                            }
                        }
                    }
                    Some(b'[') => {
                        self.i += 1;
                        self.ws();
                        if self.eat(b"]") {
                            return Ok(());
                        }
                        loop {
                            self.value()?;
                            self.ws();
                            if self.eat(b"]") {
                                return Ok(());
                            }
                            if !self.eat(b",") {
                                return self.err("expected ',' or ']'");
                            }
                        }
                    }
                    Some(b'"') => self.string(),
                    Some(b't') if self.eat(b"true") => Ok(()),
                    Some(b'f') if self.eat(b"false") => Ok(()),
                    Some(b'n') if self.eat(b"null") => Ok(()),
                    Some(b'-' | b'0'..=b'9') => {
                        self.eat(b"-");
                        if !self.eat(b"0") && self.digits() == 0 {
                            return self.err("expected digits");
                        }
                        if self.eat(b".") && self.digits() == 0 {
                            return self.err("expected fraction digits");
                        }
                        if self.eat(b"e") || self.eat(b"E") {
                            let _ = self.eat(b"+") || self.eat(b"-");
                            if self.digits() == 0 {
                                return self.err("expected exponent digits");
                            }
                        }
                        Ok(())
                    }
                    _ => self.err("expected a value"),
                }
            }
            fn string(&mut self) -> Result<(), String> {
                if !self.eat(b"\"") {
                    return self.err("expected '\"'");
                }
                let mut s: Vec<u16> = Vec::new();
                loop {
                    let Some(&c) = self.b.get(self.i) else {
                        return self.err("unterminated string");
                    };
                    self.i += 1;
                    match c {
                        b'"' => break,
                        0..=0x1f => return self.err("raw control character in string"),
                        b'\\' => {
                            let Some(&e) = self.b.get(self.i) else {
                                return self.err("unterminated escape");
                            };
                            self.i += 1;
                            let u = match e {
                                b'"' => 0x22,
                                b'\\' => 0x5c,
                                b'/' => 0x2f,
                                b'b' => 8,
                                b'f' => 12,
                                b'n' => 10,
                                b'r' => 13,
                                b't' => 9,
                                b'u' => {
                                    let hex = self.b.get(self.i..self.i + 4).unwrap_or(b"");
                                    let hex = std::str::from_utf8(hex).unwrap_or("");
                                    let Ok(u) = u16::from_str_radix(hex, 16) else {
                                        return self.err("bad \\u escape");
                                    };
                                    self.i += 4;
                                    u
                                }
                                _ => return self.err("bad escape"),
                            };
                            s.push(u);
                        }
                        _ => {
                            // Copy one UTF-8 sequence (the input is a &str, so it is valid).
                            let start = self.i - 1;
                            while self.i < self.b.len() && self.b[self.i] & 0xc0 == 0x80 {
                                self.i += 1;
                            }
                            let ch = std::str::from_utf8(&self.b[start..self.i]).unwrap();
                            s.extend(ch.encode_utf16());
                        }
                    }
                }
                self.strings
                    .push(String::from_utf16(&s).map_err(|e| e.to_string())?);
                Ok(())
            }
        }
        let mut p = P {
            b: text.as_bytes(),
            i: 0,
            strings: Vec::new(),
        };
        p.value()?;
        p.ws();
        if p.i != p.b.len() {
            return p.err("trailing characters");
        }
        Ok(p.strings)
    }

    #[test]
    fn the_validator_rejects_invalid_json() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "\"\n\"",
            "01",
            "1.",
            "NaN",
            "{a:1}",
            "[1] 2",
            "\"\\x\"",
        ] {
            assert!(validate(bad).is_err(), "accepted {bad:?}");
        }
        assert!(validate(" {\"a\" : [1, -2.5e-3, true, null, {}]} ").is_ok());
    }

    #[test]
    fn strings_are_escaped_and_round_trip() {
        let nasty = "quote \" backslash \\ slash / nl \n cr \r tab \t bs \u{8} ff \u{c} \
                     nul \u{0} esc \u{1b} us \u{1f} del \u{7f} é ✓ 🦀 ls \u{2028} ps \u{2029}";
        let q = quote(nasty);
        assert!(!q.chars().any(|c| (c as u32) < 0x20), "{q}");
        assert!(q.contains(r#"\""#) && q.contains(r"\\") && q.contains(r"\n"));
        assert!(q.contains(r"\u0000") && q.contains(r"\u001b") && q.contains(r"\u2028"));
        assert_eq!(validate(&q).unwrap(), vec![nasty.to_string()]);
        assert_eq!(quote(""), "\"\"");
        assert_eq!(quote("plain"), "\"plain\"");
        // Keys are escaped like values.
        let o = Object::new().field("k\"ey\n", "v");
        assert_eq!(o.to_string(), r#"{"k\"ey\n":"v"}"#);
        assert_eq!(validate(&o.to_string()).unwrap(), vec!["k\"ey\n", "v"]);
    }

    #[test]
    fn numbers() {
        assert_eq!(Value::from(-5_i32).to_string(), "-5");
        assert_eq!(Value::from(i64::MIN).to_string(), "-9223372036854775808");
        assert_eq!(Value::from(u64::MAX).to_string(), "18446744073709551615");
        assert_eq!(Value::from(3.0).to_string(), "3.0");
        assert_eq!(Value::from(0.1).to_string(), "0.1");
        assert_eq!(Value::from(-0.0).to_string(), "-0.0");
        assert_eq!(Value::from(1e-7).to_string(), "1e-7");
        assert_eq!(Value::from(1.5e300).to_string(), "1.5e300");
        assert_eq!(Value::from(f64::NAN).to_string(), "null");
        assert_eq!(Value::from(f64::INFINITY).to_string(), "null");
        assert_eq!(Value::from(f64::NEG_INFINITY).to_string(), "null");
        assert_eq!(Value::from(f32::NAN).to_string(), "null");
        for x in [
            0.0,
            1e-320,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::MIN,
            12345.678,
            2.5e-3,
        ] {
            let s = Value::from(x).to_string();
            validate(&s).unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(s.parse::<f64>().unwrap(), x, "{s}");
        }
    }

    fn sample() -> Value {
        Object::new()
            .field("name", "rxe0")
            .field("guid", 0x0011_2233_4455_6677_u64)
            .field("numa", None::<u32>)
            .field("ok", true)
            .field("rate", f64::NAN)
            .field("empty_list", Vec::<u32>::new())
            .field("empty_obj", Object::new())
            .field(
                "ports",
                vec![Object::new()
                    .field("port", 1_u8)
                    .field("gids", vec!["fe80::1", "::ffff:192.168.77.1"])],
            )
            .into()
    }

    #[test]
    fn compact_output() {
        assert_eq!(
            sample().to_string(),
            concat!(
                r#"{"name":"rxe0","guid":4822678189205111,"numa":null,"ok":true,"rate":null,"#,
                r#""empty_list":[],"empty_obj":{},"#,
                r#""ports":[{"port":1,"gids":["fe80::1","::ffff:192.168.77.1"]}]}"#
            )
        );
        validate(&sample().to_string()).unwrap();
    }

    #[test]
    fn pretty_output() {
        let p = sample().pretty();
        assert_eq!(
            p,
            r#"{
  "name": "rxe0",
  "guid": 4822678189205111,
  "numa": null,
  "ok": true,
  "rate": null,
  "empty_list": [],
  "empty_obj": {},
  "ports": [
    {
      "port": 1,
      "gids": [
        "fe80::1",
        "::ffff:192.168.77.1"
      ]
    }
  ]
}"#
        );
        validate(&p).unwrap();
        assert_eq!(Value::Null.pretty(), "null");
        assert_eq!(Value::array([1_u8, 2]).pretty(), "[\n  1,\n  2\n]");
    }

    #[test]
    fn keys_stay_unique() {
        let mut o = Object::new().field("a", 1_u8).field("b", 2_u8);
        o.insert("a", "again");
        assert_eq!(o.to_string(), r#"{"a":"again","b":2}"#);
        assert_eq!(o.len(), 2);
        assert_eq!(o.get("a"), Some(&Value::from("again")));
        assert_eq!(o.get("zz"), None);
        assert_eq!(o.iter().map(|(k, _)| k).collect::<Vec<_>>(), vec!["a", "b"]);
    }
}
