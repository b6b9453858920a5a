//! vl_jsoncheck — checks a `--json` report where no JSON tool is at hand (the SoftRoCE guest is
//! busybox only): the file must be one valid JSON text (RFC 8259, parsed strictly here), a
//! vl_* report with a `results` array whose rows have positive `iterations` and a positive
//! average (`bw_avg_gbit_s` or `t_avg_us`), and — with `--sizes` — exactly those message sizes,
//! in order.
//!
//! ```text
//! vl_jsoncheck sweep.json --sizes 2,4,8,16
//! ```
//! Exit status 0 when every check holds, 1 otherwise (the message says which).

#![forbid(unsafe_code)]

use std::process::ExitCode;

/// A parsed JSON value (numbers kept as f64: enough for checking a report).
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// A strict recursive-descent parser with a depth limit.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
}

const MAX_DEPTH: usize = 64;

impl Parser<'_> {
    fn err(&self, what: &str) -> String {
        let line = self.s[..self.i.min(self.s.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        format!("invalid JSON at byte {} (line {line}): {what}", self.i)
    }
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, b: u8) -> Result<(), String> {
        if self.peek() == Some(b) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(&format!("expected '{}'", b as char)))
        }
    }
    fn lit(&mut self, word: &str, v: Json) -> Result<Json, String> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            Err(self.err(&format!("expected {word}")))
        }
    }
    fn value(&mut self) -> Result<Json, String> {
        self.ws();
        let v = match self.peek() {
            None => return Err(self.err("unexpected end")),
            Some(b'{') => self.object()?,
            Some(b'[') => self.array()?,
            Some(b'"') => Json::Str(self.string()?),
            Some(b't') => self.lit("true", Json::Bool(true))?,
            Some(b'f') => self.lit("false", Json::Bool(false))?,
            Some(b'n') => self.lit("null", Json::Null)?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(c) => return Err(self.err(&format!("unexpected character {:?}", c as char))),
        };
        self.ws();
        Ok(v)
    }
    fn nest(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        Ok(())
    }
    fn object(&mut self) -> Result<Json, String> {
        self.nest()?;
        self.eat(b'{')?;
        let mut fields: Vec<(String, Json)> = Vec::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            self.depth -= 1;
            return Ok(Json::Obj(fields));
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a key"));
            }
            let k = self.string()?;
            if fields.iter().any(|(f, _)| *f == k) {
                return Err(self.err(&format!("duplicate key \"{k}\"")));
            }
            self.ws();
            self.eat(b':')?;
            let v = self.value()?;
            fields.push((k, v));
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    self.depth -= 1;
                    return Ok(Json::Obj(fields));
                }
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }
    fn array(&mut self) -> Result<Json, String> {
        self.nest()?;
        self.eat(b'[')?;
        let mut items = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            self.depth -= 1;
            return Ok(Json::Arr(items));
        }
        loop {
            items.push(self.value()?);
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    self.depth -= 1;
                    return Ok(Json::Arr(items));
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }
    fn hex4(&mut self) -> Result<u32, String> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| self.err("bad \\u escape"))?;
        self.i += 4;
        Ok(h)
    }
    fn string(&mut self) -> Result<String, String> {
        self.eat(b'"')?;
        let mut out = String::new();
        loop {
            let c = self.peek().ok_or_else(|| self.err("unterminated string"))?;
            match c {
                b'"' => {
                    self.i += 1;
                    return Ok(out);
                }
                b'\\' => {
                    self.i += 1;
                    let e = self.peek().ok_or_else(|| self.err("unterminated escape"))?;
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let cp = if (0xd800..0xdc00).contains(&hi) {
                                if !self.s[self.i..].starts_with(b"\\u") {
                                    return Err(self.err("lone high surrogate"));
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return Err(self.err("bad low surrogate"));
                                }
                                0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                            } else {
                                hi
                            };
                            out.push(char::from_u32(cp).ok_or_else(|| self.err("bad code point"))?);
                        }
                        _ => return Err(self.err("unknown escape")),
                    }
                }
                0x00..=0x1f => return Err(self.err("control character in a string")),
                _ => {
                    // One UTF-8 character.
                    let len = match c {
                        0x00..=0x7f => 1,
                        0xc0..=0xdf => 2,
                        0xe0..=0xef => 3,
                        0xf0..=0xf7 => 4,
                        _ => return Err(self.err("invalid UTF-8")),
                    };
                    let ch = self
                        .s
                        .get(self.i..self.i + len)
                        .and_then(|b| std::str::from_utf8(b).ok())
                        .ok_or_else(|| self.err("invalid UTF-8"))?;
                    out.push_str(ch);
                    self.i += len;
                }
            }
        }
    }
    fn number(&mut self) -> Result<Json, String> {
        let start = self.i;
        let digits = |p: &mut Parser<'_>| {
            let d = p.i;
            while matches!(p.peek(), Some(b'0'..=b'9')) {
                p.i += 1;
            }
            p.i - d
        };
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(self.err("expected a digit")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if digits(self) == 0 {
                return Err(self.err("expected a digit after '.'"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if digits(self) == 0 {
                return Err(self.err("expected an exponent"));
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).map_err(|_| self.err("number"))?;
        text.parse::<f64>()
            .map(Json::Num)
            .map_err(|_| self.err("bad number"))
    }
}

/// Parses one JSON text.
fn parse(text: &[u8]) -> Result<Json, String> {
    let mut p = Parser {
        s: text,
        i: 0,
        depth: 0,
    };
    let v = p.value()?;
    if p.i != text.len() {
        return Err(p.err("text after the value"));
    }
    Ok(v)
}

/// The report checks: a `results` array whose rows' `bytes` are `sizes` (if given).
fn check_report(doc: &Json, sizes: Option<&[u64]>) -> Result<Vec<u64>, String> {
    for key in ["tool", "version", "run"] {
        doc.get(key)
            .ok_or_else(|| format!("the report has no \"{key}\""))?;
    }
    let Some(Json::Arr(rows)) = doc.get("results") else {
        return Err("the report has no \"results\" array".into());
    };
    let mut got = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let Some(Json::Num(b)) = r.get("bytes") else {
            return Err(format!("results[{i}] has no numeric \"bytes\""));
        };
        match r.get("iterations") {
            Some(Json::Num(n)) if *n > 0.0 => {}
            _ => {
                return Err(format!(
                    "results[{i}] ({b} bytes) has no positive \"iterations\""
                ))
            }
        }
        // The measurement itself: a bandwidth or a latency row holds a positive average.
        for key in ["bw_avg_gbit_s", "t_avg_us"] {
            match r.get(key) {
                None => {}
                Some(Json::Num(v)) if *v > 0.0 => {}
                Some(v) => {
                    return Err(format!(
                        "results[{i}] ({b} bytes): \"{key}\" is {v:?}, not positive"
                    ))
                }
            }
        }
        got.push(*b as u64);
    }
    if let Some(want) = sizes {
        if got != want {
            return Err(format!(
                "the results hold the sizes {got:?}, expected {want:?}"
            ));
        }
    }
    Ok(got)
}

fn run() -> Result<String, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: vl_jsoncheck FILE [--sizes N,N,...]";
    let (file, sizes) = match args.as_slice() {
        [f] => (f, None),
        [f, flag, list] if flag == "--sizes" => {
            let v = list
                .split(',')
                .map(|s| s.trim().parse::<u64>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| format!("--sizes: '{list}' is not a list of numbers; {usage}"))?;
            (f, Some(v))
        }
        _ => return Err(usage.into()),
    };
    let text = std::fs::read(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let doc = parse(&text).map_err(|e| format!("{file}: {e}"))?;
    let got = check_report(&doc, sizes.as_deref()).map_err(|e| format!("{file}: {e}"))?;
    Ok(format!(
        "{file}: valid JSON, {} result row(s), sizes {got:?}",
        got.len()
    ))
}

fn main() -> ExitCode {
    match run() {
        Ok(msg) => {
            println!("ok: {msg}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vl_jsoncheck: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_report_goldens() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json") {
                let doc = parse(&std::fs::read(&p).unwrap())
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                check_report(&doc, None).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                n += 1;
            }
        }
        assert!(n > 0, "no golden JSON found in {dir}");
    }

    #[test]
    fn refuses_what_is_not_json() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "01",
            "1.",
            "-",
            "1e",
            "\"\\x\"",
            "\"a",
            "tru",
            "{\"a\":1}{}",
            "[\"\u{1}\"]",
            "\"\\ud800\"",
            "{\"a\":1,\"a\":2}",
            "NaN",
            "[1 2]",
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "accepted {bad:?}");
        }
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(parse(deep.as_bytes()).unwrap_err().contains("deeply"));
    }

    #[test]
    fn accepts_json_and_checks_sizes() {
        let doc = parse(
            br#" {"tool":"vl_write_bw","version":"0.1.0","run":{},"results":[
                {"bytes":2,"iterations":10,"x":-1.5e-3},{"bytes":4,"iterations":10,"s":"\u00e9\ud83d\ude00"}]} "#,
        )
        .unwrap();
        assert_eq!(check_report(&doc, Some(&[2, 4])), Ok(vec![2, 4]));
        assert!(check_report(&doc, Some(&[2, 4, 8]))
            .unwrap_err()
            .contains("expected [2, 4, 8]"));
        let empty =
            parse(br#"{"tool":"t","version":"v","run":{},"results":[{"bytes":2,"iterations":0}]}"#)
                .unwrap();
        assert!(check_report(&empty, None)
            .unwrap_err()
            .contains("iterations"));
        let zero = parse(
            br#"{"tool":"t","version":"v","run":{},"results":[{"bytes":2,"iterations":5,"bw_avg_gbit_s":0.0}]}"#,
        )
        .unwrap();
        assert!(check_report(&zero, None)
            .unwrap_err()
            .contains("not positive"));
    }
}
