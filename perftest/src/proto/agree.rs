//! The server's check that a client's HELLO asks for the same run.

use super::Hello;
use crate::params::{describe_param, Warmup};

// ---- agreement -----------------------------------------------------------------------------

/// The server's check of a client's HELLO against its own: the same tool, and every parameter
/// equal. The error names each differing parameter with both values, e.g.
/// `message size (-s / -a): client 8192, server 4096`, each with where it came from when that
/// is not what was typed (`tx depth (-t): client 50 (-t 64 capped to -n), server 16`): a value
/// may carry its origin after it in parentheses, which the comparison ignores.
///
/// One parameter is settled rather than compared: a server without `--warmup` (`auto`) runs
/// the client's warm-up ([`client_warmup`]), so that a client's `--warmup 0` (perftest's
/// default, measuring cold) needs no server of its own.
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
            Some((_, cv)) if bare(cv) == bare(sv) => {}
            Some((_, cv)) if k == WARMUP && sv == "auto" && Warmup::from_wire(cv).is_some() => {}
            Some((_, cv)) if k == WARMUP && cv == "auto" => diffs.push(format!(
                "{}: client auto (the default), server {sv}; give the client the same \
                 --warmup, or start the server without it (it then takes the client's)",
                describe(k)
            )),
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

/// The HELLO's key of the warm-up.
const WARMUP: &str = "warmup";

/// The warm-up the client asked for, which a server without `--warmup` runs (see
/// [`check_hello`]); `None` when the HELLO carries none that reads.
pub fn client_warmup(client: &Hello) -> Option<Warmup> {
    let (_, v) = client.params.iter().find(|(k, _)| k == WARMUP)?;
    Warmup::from_wire(v)
}

/// A wire value without its origin: `50` of `50 (-t 64 capped to -n)`.
fn bare(value: &str) -> &str {
    value.split_once(" (").map_or(value, |(v, _)| v)
}

fn describe(key: &str) -> String {
    match describe_param(key) {
        "parameter" => format!("parameter '{key}'"),
        d => d.to_string(),
    }
}
