//! What a valid `vl_fabric_check --json` report is: read into the writer's own struct
//! ([`FabricJson`]), the tool and layout known, the hosts numbered 0..n, and then judged again:
//!
//! * pairs mode: every pair of the n hosts exactly once; the rules, applied to the report's own
//!   numbers against its references, give exactly its slow pairs and suspect hosts (the gone
//!   hosts after them), and its exit status follows;
//! * incast and all-to-all: every flow between two different hosts at most once;
//! * every round's pairs are hosts of the report.

use std::collections::HashSet;

use serde_json::Value;

use super::typed;
use vl_coll::fabric::report::{exit_code, FabricJson, FORMAT, TOOL};
use vl_coll::fabric::verdict::judge_against;

/// Checks a fabric report; gives its bandwidth message size, as the other reports give theirs.
pub(crate) fn check_fabric(doc: &Value) -> Result<Vec<u64>, String> {
    let d: FabricJson = typed(doc, "")?;
    if d.tool != TOOL || d.format != FORMAT {
        return Err(format!(
            "tool {:?} format {}: this checker knows {TOOL} format {FORMAT}",
            d.tool, d.format
        ));
    }
    let n = d.hosts.len();
    if n < 2 {
        return Err(format!("hosts: {n}: a check has at least 2"));
    }
    if let Some((i, h)) = d.hosts.iter().enumerate().find(|(i, h)| h.rank != *i) {
        return Err(format!("hosts[{i}].rank: {}, not {i}", h.rank));
    }
    let host = |path: String, h: usize| match h < n {
        true => Ok(()),
        false => Err(format!("{path}: host {h} of a check of {n} hosts")),
    };
    for (i, r) in d.rounds.iter().enumerate() {
        for (k, &(a, b)) in r.pairs.iter().enumerate() {
            host(format!("rounds[{i}].pairs[{k}]"), a.max(b))?;
        }
    }
    match d.mode.as_str() {
        "pairs" => check_pairs(&d, n)?,
        "incast" | "all-to-all" => {
            let mut seen = HashSet::new();
            for (i, f) in d.flows.iter().enumerate() {
                host(format!("flows[{i}]"), f.src.max(f.dst))?;
                if f.src == f.dst || !seen.insert((f.src, f.dst)) {
                    return Err(format!(
                        "flows[{i}]: {} -> {} is a host to itself or a flow twice",
                        f.src, f.dst
                    ));
                }
            }
        }
        m => {
            return Err(format!(
                "mode: {m:?} is no mode (pairs, incast, all-to-all)"
            ))
        }
    }
    if d.exit != exit_code(&d) {
        return Err(format!(
            "exit: {}, but the report's findings give {}",
            d.exit,
            exit_code(&d)
        ));
    }
    Ok(vec![d.params.size])
}

fn check_pairs(d: &FabricJson, n: usize) -> Result<(), String> {
    let mut seen = HashSet::new();
    for (i, p) in d.pairs.iter().enumerate() {
        let (a, b) = (p.result.a, p.result.b);
        if a >= b || b >= n || !seen.insert((a, b)) {
            return Err(format!(
                "pairs[{i}]: ({a}, {b}) is not a pair a < b < {n} seen once"
            ));
        }
    }
    if seen.len() != n * (n - 1) / 2 {
        return Err(format!(
            "pairs: {} pairs, but {n} hosts make {}",
            seen.len(),
            n * (n - 1) / 2
        ));
    }
    let gone: Vec<bool> = d.hosts.iter().map(|h| h.gone.is_some()).collect();
    let results: Vec<_> = d.pairs.iter().map(|p| p.result.clone()).collect();
    let v = judge_against(n, &results, &gone, &d.rules, (d.ref_bw_mib_s, d.ref_lat_us));
    if v.slow != d.slow {
        return Err(format!(
            "slow: the rules on the report's numbers give the slow pairs {:?}, the report says {:?}",
            v.slow.iter().map(|s| (s.a, s.b)).collect::<Vec<_>>(),
            d.slow.iter().map(|s| (s.a, s.b)).collect::<Vec<_>>()
        ));
    }
    let want: Vec<usize> = v
        .suspects
        .iter()
        .copied()
        .chain((0..n).filter(|&h| gone[h]))
        .collect();
    let got: Vec<usize> = d.suspects.iter().map(|s| s.rank).collect();
    if want != got {
        return Err(format!(
            "suspects: the rules give hosts {want:?} (then the gone ones), the report names {got:?}"
        ));
    }
    Ok(())
}
