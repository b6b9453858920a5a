//! The port's NIC counters around a run: every counter of `ports/N/counters/` and
//! `ports/N/hw_counters/` read before the first size and after the last
//! (`verbs_lab::sysfs::PortCounters`), and their deltas —
//! for `--counters` (a text block), `-W/--report-counters LIST` (perftest's `\tNAME=DELTA`
//! lines), `--json`, `--out_json` and the `--max-counter NAME=N` gate.
//!
//! Names keep their directory (`hw_counters/retrans_segs`, `counters/port_xmit_data`), as
//! perftest's `-W` spells them. rxe has only `hw_counters/` (sent_pkts, rcvd_pkts,
//! duplicate_request, out_of_seq_request, rcvd_rnr_err, send_rnr_err, retry_exceeded_err, ...);
//! mlx5 has both.

use std::fmt;
use std::str::FromStr;

use verbs_lab::sysfs::PortCounters;

/// Counter deltas by name, sorted by name.
pub type Snapshot = Vec<(String, u64)>;

/// How every counter of the port rose from `before` (a [`PortCounters::snapshot`] taken before
/// the first size) until now: read again once the kernel's `hw_counters` cache can no longer
/// hold values from before the call ([`PortCounters::read_again`]).
pub fn deltas(before: &PortCounters) -> Snapshot {
    before.changes_to(&before.read_again())
}

/// The delta of `name` (`hw_counters/X`, `counters/X`, or the bare `X` found in either).
pub fn lookup<'a>(d: &'a Snapshot, name: &str) -> Option<&'a (String, u64)> {
    d.iter()
        .find(|(k, _)| k == name)
        .or_else(|| d.iter().find(|(k, _)| k.rsplit('/').next() == Some(name)))
}

/// The `--counters` block: the counters that changed, one per line, after perftest's rows.
pub fn block(d: &Snapshot) -> String {
    let changed: Vec<&(String, u64)> = d.iter().filter(|(_, v)| *v > 0).collect();
    let mut s = String::from(" NIC counters (port deltas over the whole run):\n");
    if changed.is_empty() {
        s.push_str("   (none changed)\n");
    }
    for (k, v) in changed {
        s.push_str(&format!("   {k:<40} {v}\n"));
    }
    s
}

/// perftest's `-W` lines: `\tNAME=DELTA` for each listed counter, then an empty line. A name
/// this port lacks is an error (perftest refuses to start then, too).
pub fn perftest_lines(d: &Snapshot, list: &[String]) -> Result<String, String> {
    let mut s = String::new();
    for name in list {
        let (_, v) = lookup(d, name).ok_or_else(|| missing(d, name))?;
        s.push_str(&format!("\t{name}={v}\n"));
    }
    s.push('\n');
    Ok(s)
}

fn missing(d: &Snapshot, name: &str) -> String {
    let known: Vec<&str> = d.iter().map(|(k, _)| k.as_str()).collect();
    format!(
        "the port has no counter '{name}' (it has: {})",
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    )
}

/// One `--max-counter NAME=N` gate: the counter's delta over the run must be at most `max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterGate {
    pub name: String,
    pub max: u64,
}

impl FromStr for CounterGate {
    type Err = String;
    fn from_str(s: &str) -> Result<CounterGate, String> {
        let (name, max) = crate::output::gates::split_gate(
            s,
            "expected NAME=N, e.g. hw_counters/retrans_segs=0",
        )?;
        let name = name.trim();
        if name.is_empty() || name.contains("..") || name.starts_with('/') {
            return Err(format!("'{name}' is not a counter name"));
        }
        let max = max
            .trim()
            .parse()
            .map_err(|_| format!("'{max}' is not a count (expected NAME=N)"))?;
        Ok(CounterGate {
            name: name.to_string(),
            max,
        })
    }
}

impl fmt::Display for CounterGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.max)
    }
}

/// The misses of `gates` against the deltas `d` (a counter the port lacks is a miss: a gate
/// never passes by not looking).
pub fn check(gates: &[CounterGate], d: Option<&Snapshot>) -> Vec<String> {
    let mut out = Vec::new();
    for g in gates {
        match d.and_then(|d| lookup(d, &g.name)) {
            Some((k, v)) if *v > g.max => out.push(format!(
                "gate failed: NIC counter {k} rose by {v} during the run > limit {}",
                g.max
            )),
            Some(_) => {}
            None => out.push(format!(
                "gate failed: --max-counter {g}: {}",
                match d {
                    Some(d) => missing(d, &g.name),
                    None => "no counters were read on this side".to_string(),
                }
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(v: &[(&str, u64)]) -> Snapshot {
        v.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn deltas_blocks_and_gates() {
        let port = |v| PortCounters::from_values("rxe0", 1, snap(v));
        let before = port(&[("hw_counters/rcvd_pkts", 10), ("hw_counters/retrans", 5)]);
        let after = port(&[("hw_counters/rcvd_pkts", 110), ("hw_counters/retrans", 5)]);
        let d = before.changes_to(&after);
        assert_eq!(
            d,
            snap(&[("hw_counters/rcvd_pkts", 100), ("hw_counters/retrans", 0)])
        );
        assert!(block(&d).contains("hw_counters/rcvd_pkts") && !block(&d).contains("retrans"));
        assert_eq!(
            perftest_lines(&d, &["hw_counters/rcvd_pkts".into()]).unwrap(),
            "\thw_counters/rcvd_pkts=100\n\n"
        );
        assert!(perftest_lines(&d, &["counters/nope".into()])
            .unwrap_err()
            .contains("no counter 'counters/nope'"));
        let g: CounterGate = "rcvd_pkts=99".parse().unwrap();
        assert_eq!(check(std::slice::from_ref(&g), Some(&d)).len(), 1);
        let ok: CounterGate = "hw_counters/retrans=0".parse().unwrap();
        assert!(check(std::slice::from_ref(&ok), Some(&d)).is_empty());
        assert_eq!(check(&[ok], None).len(), 1, "no counters: the gate fails");
        assert_eq!(
            "x".parse::<CounterGate>().unwrap_err(),
            "'x' has no '=' (expected NAME=N, e.g. hw_counters/retrans_segs=0)"
        );
        assert!("../x=1".parse::<CounterGate>().is_err());
        assert!("x=-1".parse::<CounterGate>().is_err());
    }
}
