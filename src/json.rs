//! The one JSON writer and parser of verbs-lab: the tools' `--json` output, and everything that
//! reads it back (`vl_jsoncheck`, `--plot`'s tests, the report tests).
//!
//! Build a [`Value`] tree, then print it compact (`to_string()`, via [`Display`](fmt::Display))
//! or indented ([`Value::pretty`]); read a text back with [`parse`] (strict RFC 8259). Whatever the tree holds, the text is valid JSON (RFC 8259):
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

mod parse;
pub use parse::{parse, ParseError, MAX_DEPTH};

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
from_via!(Bool as bool: bool);
from_via!(String as String: &str, String, &String);
from_via!(Object as Object: Object);

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

    #[test]
    fn strings_are_escaped_and_round_trip() {
        let nasty = "quote \" backslash \\ slash / nl \n cr \r tab \t bs \u{8} ff \u{c} \
                     nul \u{0} esc \u{1b} us \u{1f} del \u{7f} é ✓ 🦀 ls \u{2028} ps \u{2029}";
        let q = quote(nasty);
        assert!(!q.chars().any(|c| (c as u32) < 0x20), "{q}");
        assert!(q.contains(r#"\""#) && q.contains(r"\\") && q.contains(r"\n"));
        assert!(q.contains(r"\u0000") && q.contains(r"\u001b") && q.contains(r"\u2028"));
        assert_eq!(parse(&q).unwrap(), Value::from(nasty));
        assert_eq!(quote(""), "\"\"");
        assert_eq!(quote("plain"), "\"plain\"");
        // Keys are escaped like values.
        let o = Object::new().field("k\"ey\n", "v");
        assert_eq!(o.to_string(), r#"{"k\"ey\n":"v"}"#);
        assert_eq!(parse(&o.to_string()).unwrap(), Value::Object(o));
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
            assert_eq!(
                parse(&s).unwrap_or_else(|e| panic!("{s}: {e}")),
                Value::from(x)
            );
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

    /// [`sample`] as [`parse`] reads it: NaN was written as null.
    fn sample_read_back() -> Value {
        let mut v = sample();
        if let Value::Object(o) = &mut v {
            o.insert("rate", Value::Null);
        }
        v
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
        assert_eq!(parse(&sample().to_string()).unwrap(), sample_read_back());
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
        assert_eq!(parse(&p).unwrap(), sample_read_back());
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
