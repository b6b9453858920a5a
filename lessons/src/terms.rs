//! The test parameters the two sides of lessons 05–08 agree on: `key=value` words
//! ([`Terms`]), sent and received over the out-of-band connection, and the rule that a server
//! takes the client's test but refuses a flag it was given with another value.

use std::fmt;

use anyhow::{bail, Context as _, Result};
use verbs_lab::oob::{OobConn, OobError};

use crate::{Narrator, Role};

/// Test parameters one side announces to the other, as `key=value` words on one line
/// (`size=4096 iters=5 notify=imm mtu=4096`): readable in a packet capture, strict to parse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Terms(Vec<(String, String)>);

impl Terms {
    pub fn new() -> Terms {
        Terms::default()
    }

    /// Adds `key=value`. Keys and values are single words (no space, no `=`).
    pub fn with(mut self, key: &str, value: impl fmt::Display) -> Terms {
        let value = value.to_string();
        assert!(
            !key.is_empty() && !key.contains([' ', '=']) && !value.contains([' ', '=']),
            "parameter '{key}={value}' must be two single words"
        );
        self.0.push((key.to_string(), value));
        self
    }

    /// The raw value of `key`, if present.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`, parsed; an error names the key when it is missing or malformed.
    pub fn get<T: std::str::FromStr>(&self, key: &str) -> Result<T>
    where
        T::Err: fmt::Display,
    {
        let raw = self
            .raw(key)
            .ok_or_else(|| anyhow::anyhow!("the peer's parameters lack '{key}' ({self})"))?;
        raw.parse()
            .map_err(|e| anyhow::anyhow!("the peer's parameter {key}={raw} is invalid: {e}"))
    }

    pub fn encode(&self) -> String {
        self.to_string()
    }

    pub fn decode(s: &[u8]) -> std::result::Result<Terms, String> {
        let s = std::str::from_utf8(s).map_err(|_| "not UTF-8 text".to_string())?;
        let mut p = Terms::new();
        for word in s.split_whitespace() {
            let (k, v) = word
                .split_once('=')
                .filter(|(k, v)| !k.is_empty() && !v.contains('='))
                .ok_or_else(|| format!("'{word}' is not key=value"))?;
            p.0.push((k.to_string(), v.to_string()));
        }
        Ok(p)
    }
}

impl fmt::Display for Terms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// Sends one [`Terms`] message; `what` names it in errors.
pub fn send_params(conn: &mut OobConn, p: &Terms, what: &str) -> Result<()> {
    conn.send_msg(p.encode().as_bytes(), what)
        .with_context(|| format!("sending {what}"))
}

/// Receives one [`Terms`] message (at most 1 MiB); `what` names it in errors.
pub fn recv_params(conn: &mut OobConn, what: &str) -> Result<Terms> {
    let raw = conn.recv_msg(1 << 20, what)?;
    Terms::decode(&raw).map_err(|detail| {
        OobError::Malformed {
            what: what.into(),
            detail,
        }
        .into()
    })
}

/// Swaps [`Terms`] with the peer, the client first (as [`exchange`](crate::exchange) does),
/// narrating both.
pub fn exchange_params(
    conn: &mut OobConn,
    role: &Role,
    mine: &Terms,
    n: &Narrator,
) -> Result<Terms> {
    n.say(format!("our parameters:   {mine}"));
    let theirs = if role.is_server() {
        let t = recv_params(conn, "the client's test parameters")?;
        send_params(conn, mine, "our parameters")?;
        t
    } else {
        send_params(conn, mine, "our parameters")?;
        recv_params(conn, "the server's parameters")?
    };
    n.say(format!("their parameters: {theirs}"));
    Ok(theirs)
}

/// A server takes the client's test, but refuses a flag it was given explicitly with another
/// value (`ours`) than the client's: "the client uses -s 8192 but this server was started with
/// -s 4096: give both the same, or none to the server".
pub fn same_as_client<T: PartialEq + fmt::Display>(
    flag: &str,
    ours: Option<T>,
    client: T,
) -> Result<()> {
    if let Some(o) = ours.filter(|o| *o != client) {
        bail!(
            "the client uses {flag} {client} but this server was started with {flag} {o}: give \
             both the same, or none to the server"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_flag_must_match_the_client_or_be_absent() {
        assert!(same_as_client("-s", None, 4096).is_ok());
        assert!(same_as_client("-s", Some(4096), 4096).is_ok());
        let e = same_as_client("-s", Some(4096), 8192)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "the client uses -s 8192 but this server was started with -s 4096: give both the \
             same, or none to the server"
        );
    }

    #[test]
    fn params_round_trip_and_name_bad_keys() {
        let p = Terms::new().with("size", 4096).with("notify", "imm");
        assert_eq!(p.encode(), "size=4096 notify=imm");
        let q = Terms::decode(p.encode().as_bytes()).unwrap();
        assert_eq!(q, p);
        assert_eq!(q.get::<usize>("size").unwrap(), 4096);
        assert!(q
            .get::<u32>("iters")
            .unwrap_err()
            .to_string()
            .contains("'iters'"));
        assert!(q
            .get::<u32>("notify")
            .unwrap_err()
            .to_string()
            .contains("notify=imm"));
        assert!(Terms::decode(b"size").unwrap_err().contains("key=value"));
        assert!(Terms::decode(b"a=b=c").is_err());
    }
}
