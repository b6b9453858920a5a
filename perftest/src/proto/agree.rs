//! The server's check that a client's HELLO asks for the same run.

use super::Hello;
use crate::params::describe_param;

// ---- agreement -----------------------------------------------------------------------------

/// The server's check of a client's HELLO against its own: the same tool, and every parameter
/// equal. The error names each differing parameter with both values, e.g.
/// `message size (-s / -a): client 8192, server 4096`, each with where it came from when that
/// is not what was typed (`tx depth (-t): client 50 (-t 64 capped to -n), server 16`): a value
/// may carry its origin after it in parentheses, which the comparison ignores.
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
