//! The one strict reader of our JSON documents (a `--json` report, `scripts/bench-vs-perftest`'s
//! `benchmarks.json`, the `--plot` chart's own report): RFC 8259 as serde_json reads it, and
//! no key given twice in one object.
//!
//! serde_json's own [`Value`] keeps the last of two equal keys, and a derived `Deserialize`
//! refuses some duplicates and not others (a map field takes the last): which of the two a
//! reader takes is anyone's guess, so a document holding one is not valid. [`from_str_strict`]
//! refuses it wherever it is, naming the key, the object it is in and where in the text:
//!
//! ```text
//! duplicate key "bytes" in results[0] at line 3 column 40
//! ```
//!
//! Every reader of our documents (`vl_jsoncheck`, `vl_benchchart`, `--plot`, the tests) goes
//! through it.

use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess};
use serde_json::{Map, Value};

/// Reads one JSON text into `T`, refusing a key given twice in any object at any depth (see
/// the module documentation). The text is read into a [`Value`] first, then into `T`: a syntax
/// error or a duplicate key names its line and column, a value of the wrong type for `T` only
/// its field.
pub fn from_str_strict<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let doc = Strict { at: &At::Top }.deserialize(&mut de)?;
    de.end()?;
    serde_json::from_value(doc)
}

/// Where a value is in the document, for the error: `results[0].run`.
enum At<'a> {
    Top,
    Key(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
}

impl fmt::Display for At<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            At::Top => f.write_str("the top-level object"),
            At::Key(At::Top, k) => f.write_str(k),
            At::Key(up, k) => write!(f, "{up}.{k}"),
            At::Index(At::Top, i) => write!(f, "[{i}]"),
            At::Index(up, i) => write!(f, "{up}[{i}]"),
        }
    }
}

/// Reads the value at `at` into a [`Value`], as serde_json's own does, except that an object
/// with a key given twice is an error.
struct Strict<'a> {
    at: &'a At<'a>,
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> de::Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(b.into())
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(n.into())
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(n.into())
    }
    fn visit_f64<E>(self, x: f64) -> Result<Value, E> {
        Ok(x.into())
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(s.into())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(Strict {
            at: &At::Index(self.at, items.len()),
        })? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut o = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if o.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "duplicate key \"{key}\" in {}",
                    self.at
                )));
            }
            let v = map.next_value_seed(Strict {
                at: &At::Key(self.at, &key),
            })?;
            o.insert(key, v);
        }
        Ok(Value::Object(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        from_str_strict::<Value>(text).unwrap_err().to_string()
    }

    #[test]
    fn a_key_given_twice_is_refused_at_any_depth_with_its_place() {
        assert_eq!(
            err("{\"tool\":\"t\",\n \"tool\":\"u\"}"),
            "duplicate key \"tool\" in the top-level object at line 2 column 7"
        );
        assert_eq!(
            err(r#"{"a":{"b":[{"c":1,"c":2}]}}"#),
            "duplicate key \"c\" in a.b[0] at line 1 column 21"
        );
        assert_eq!(
            err(r#"[{"x":{"y":{"z":0,"z":0}}}]"#),
            "duplicate key \"z\" in [0].x.y at line 1 column 21"
        );
        // The same key in different objects is no duplicate.
        let ok = r#"{"a":{"k":1},"b":{"k":2},"c":[{"k":3},{"k":4}]}"#;
        assert_eq!(from_str_strict::<Value>(ok).unwrap().to_string(), ok);
    }

    #[test]
    fn what_rfc_8259_does_not_allow_is_refused() {
        for bad in [
            "[1,]",
            "{\"a\":1,}",
            "[01]",
            "[NaN]",
            "[Infinity]",
            "\"tab\there\"",
            r#""\ud800""#,
            "{} {}",
            "{'a':1}",
            "",
        ] {
            assert!(
                from_str_strict::<Value>(bad).is_err(),
                "{bad:?} was accepted"
            );
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(
            from_str_strict::<Value>(&deep).is_err(),
            "200 levels of nesting were accepted"
        );
    }

    #[test]
    fn every_kind_of_value_reads_back_as_itself_and_into_a_type() {
        let all =
            r#"{"n":null,"t":true,"u":18446744073709551615,"i":-5,"x":-1.5e-3,"s":"é","a":[{}]}"#;
        assert_eq!(
            from_str_strict::<Value>(all).unwrap().to_string(),
            all.replace("-1.5e-3", "-0.0015")
        );
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Row {
            bytes: u64,
            tags: std::collections::BTreeMap<String, u32>,
        }
        assert_eq!(
            from_str_strict::<Row>(r#"{"bytes":2,"tags":{"a":1}}"#).unwrap(),
            Row {
                bytes: 2,
                tags: [("a".to_string(), 1)].into()
            }
        );
        // serde's derive would keep the last "a" of a map field: the strict reader refuses it.
        assert_eq!(
            from_str_strict::<Row>(r#"{"bytes":2,"tags":{"a":1,"a":2}}"#)
                .unwrap_err()
                .to_string(),
            "duplicate key \"a\" in tags at line 1 column 28"
        );
        assert!(from_str_strict::<Row>(r#"{"bytes":"2","tags":{}}"#)
            .unwrap_err()
            .to_string()
            .contains("expected u64"));
    }
}
