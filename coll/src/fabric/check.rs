//! Rank 0's check: the rounds of each mode, turned into flows, run on the [`World`], and their
//! numbers gathered into pairs (pairs mode) or per-target and per-host shares (incast,
//! all-to-all), with the time each round took.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::args::{Args, Mode};
use super::flows::{Flow, Kind};
use super::plan::{tournament, Pair};
use super::verdict::{judge, judge_against, references, PairResult, Rules, Verdict};
use super::world::{RoundOutcomes, World};

/// One round as it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundLog {
    /// "round 2", "re-test 1", "incast into 3", "all-to-all".
    pub name: String,
    /// The pairs (pairs mode) or the flows' (source, destination).
    pub pairs: Vec<(usize, usize)>,
    pub seconds: f64,
}

/// One bandwidth flow of incast or all-to-all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlowResult {
    pub src: usize,
    pub dst: usize,
    pub bw_mib_s: Option<f64>,
    pub error: Option<String>,
}

/// What the pairs mode found.
#[derive(Debug, Clone, PartialEq)]
pub struct PairsOutcome {
    /// Every pair of the hosts, in the tournament's order, as first measured.
    pub first: Vec<PairResult>,
    /// The same pairs after the re-test: the better of the two measurements for those re-tested.
    pub pairs: Vec<PairResult>,
    pub retested: Vec<Pair>,
    pub verdict: Verdict,
}

/// What the check found, whichever the mode.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    Pairs(PairsOutcome),
    /// Incast (a round per target) or all-to-all (one round): every flow.
    Flows(Vec<FlowResult>),
}

/// The whole check's record.
pub struct Checked {
    pub found: Found,
    pub rounds: Vec<RoundLog>,
    pub seconds: f64,
}

/// The rules of `args`.
pub fn rules(args: &Args) -> Rules {
    Rules {
        tolerance: args.tolerance,
        reference: args.reference,
        // GB/s (10^9 bytes) to MiB/s.
        expect_mib_s: args.expect.map(|g| g * 1e9 / (1024.0 * 1024.0)),
        lat_factor: args.lat_factor,
    }
}

/// Runs the check of `args.mode` on `world`.
pub fn run(args: &Args, world: &mut World) -> Checked {
    let start = Instant::now();
    let mut rounds = Vec::new();
    let found = match args.mode {
        Mode::Pairs => Found::Pairs(pairs(args, world, &mut rounds)),
        Mode::Incast | Mode::AllToAll => Found::Flows(stress(args, world, &mut rounds)),
    };
    Checked {
        found,
        rounds,
        seconds: start.elapsed().as_secs_f64(),
    }
}

/// Ports of the servers: each host's servers take `--port`, `--port` + 1, ... in the order of
/// the flows, over the whole check (ranks on one host share its ports), so that no test ever
/// meets a listener left from an earlier round; past 65535 they start again at `--port`.
pub struct Ports {
    base: u16,
    next: HashMap<u64, u32>,
}

impl Ports {
    pub fn new(base: u16) -> Ports {
        Ports {
            base,
            next: HashMap::new(),
        }
    }

    fn of(&mut self, world: &World, server: u32) -> u16 {
        let k = self
            .next
            .entry(world.table[server as usize].host_hash)
            .or_insert(0);
        let span = 65536 - u32::from(self.base);
        let p = u32::from(self.base) + *k % span;
        *k += 1;
        p as u16
    }
}

/// Progress on stderr, when it is a terminal.
fn progress(text: &str) {
    if std::io::stderr().is_terminal() {
        verbs_lab::eprintln_whole!("vl_fabric_check: {text}");
    }
}

/// The flows of a round of `pairs`: per pair, bandwidth a→b, then b→a, then the latency
/// ping-pong (three steps, one after the other; the pairs of the round at once).
fn pair_flows(args: &Args, world: &World, ports: &mut Ports, pairs: &[Pair]) -> Vec<Flow> {
    let mut flows = Vec::new();
    for &(a, b) in pairs {
        let (a, b) = (a as u32, b as u32);
        for (step, kind, src, dst) in [
            (0, Kind::Bw, a, b),
            (1, Kind::Bw, b, a),
            (2, Kind::Lat, a, b),
        ] {
            let mut f = Flow {
                id: flows.len() as u32,
                kind,
                src,
                dst,
                step,
                port: 0,
            };
            f.port = ports.of(world, f.server(args.test));
            flows.push(f);
        }
    }
    flows
}

/// Runs `pairs` as one round named `name` and returns their results (in order).
fn pair_round(
    args: &Args,
    world: &mut World,
    ports: &mut Ports,
    pairs: &[Pair],
    name: &str,
    rounds: &mut Vec<RoundLog>,
) -> Vec<PairResult> {
    let live: Vec<Pair> = pairs
        .iter()
        .copied()
        .filter(|&(a, b)| world.alive(a) && world.alive(b))
        .collect();
    let list: Vec<String> = live.iter().map(|(a, b)| format!("{a}-{b}")).collect();
    progress(&format!("{name}: pairs {}", list.join(" ")));
    let flows = pair_flows(args, world, ports, &live);
    let t = Instant::now();
    let out = if live.is_empty() {
        Vec::new()
    } else {
        world.round(args, &flows, name)
    };
    rounds.push(RoundLog {
        name: name.into(),
        pairs: live.clone(),
        seconds: t.elapsed().as_secs_f64(),
    });
    pairs
        .iter()
        .map(|&(a, b)| match live.iter().position(|&p| p == (a, b)) {
            Some(i) => pair_result(world, (a, b), &out[3 * i..3 * i + 3]),
            None => unmeasured(world, (a, b), "before its round"),
        })
        .collect()
}

/// A pair that a gone host kept from being measured.
fn unmeasured(world: &World, (a, b): Pair, when: &str) -> PairResult {
    let who = [a, b]
        .into_iter()
        .find(|&h| !world.alive(h))
        .map_or(String::new(), |h| {
            format!("{} (rank {h}) was gone {when}", world.table[h].host)
        });
    PairResult {
        error: Some(format!("not measured: {who}")),
        ..PairResult::empty(a, b)
    }
}

/// A pair's three outcomes (a→b, b→a, latency) as its result.
fn pair_result(world: &World, (a, b): Pair, out: &[Option<Result<f64, String>>]) -> PairResult {
    let mut p = PairResult::empty(a, b);
    let mut error = None;
    let mut take = |o: &Option<Result<f64, String>>| match o {
        Some(Ok(x)) => Some(*x),
        Some(Err(e)) => {
            error.get_or_insert_with(|| e.clone());
            None
        }
        None => None,
    };
    p.bw_ab_mib_s = take(&out[0]);
    p.bw_ba_mib_s = take(&out[1]);
    p.lat_us = take(&out[2]);
    p.error = error;
    if !(world.alive(a) && world.alive(b)) {
        let why = unmeasured(world, (a, b), "during its round").error;
        if !p.complete() {
            p.error = why;
        }
    } else if p.error.is_none() && !p.complete() {
        p.error = Some("no outcome came back".into());
    }
    p
}

/// The pairs mode: the tournament, then the slow pairs again.
fn pairs(args: &Args, world: &mut World, rounds: &mut Vec<RoundLog>) -> PairsOutcome {
    let n = world.table.len();
    let plan = tournament(n);
    let mut ports = Ports::new(args.port);
    let mut first = Vec::new();
    for (i, round) in plan.iter().enumerate() {
        let name = format!("round {}/{}", i + 1, plan.len());
        first.extend(pair_round(args, world, &mut ports, round, &name, rounds));
    }
    let rules = rules(args);
    let gone = |w: &World| (0..n).map(|h| !w.alive(h)).collect::<Vec<bool>>();
    let refs = references(&first, &rules);
    let v1 = judge(n, &first, &gone(world), &rules);
    let mut pairs = first.clone();
    let mut retested = Vec::new();
    if !args.no_retest {
        let slow: Vec<Pair> = v1
            .slow
            .iter()
            .map(|s| (s.a, s.b))
            .filter(|&(a, b)| world.alive(a) && world.alive(b))
            .collect();
        // Each alone: what other pairs do to the fabric meanwhile is no part of the re-test.
        let again_rounds: Vec<Vec<Pair>> = slow.iter().map(|&p| vec![p]).collect();
        for (i, round) in again_rounds.iter().enumerate() {
            let name = format!("re-test {}/{}", i + 1, again_rounds.len());
            let again = pair_round(args, world, &mut ports, round, &name, rounds);
            for r in again {
                if let Some(p) = pairs.iter_mut().find(|p| (p.a, p.b) == (r.a, r.b)) {
                    // A host gone during the re-test leaves the first measurement standing.
                    if r.complete() || world.alive(r.a) && world.alive(r.b) {
                        *p = p.best_of(&r);
                    }
                    retested.push((r.a, r.b));
                }
            }
        }
    }
    let verdict = judge_against(n, &pairs, &gone(world), &rules, refs);
    PairsOutcome {
        first,
        pairs,
        retested,
        verdict,
    }
}

/// Incast (each live host in turn receives from all the others at once) or all-to-all (every
/// host sends to every other at once, one round).
fn stress(args: &Args, world: &mut World, rounds: &mut Vec<RoundLog>) -> Vec<FlowResult> {
    let n = world.table.len();
    let sets: Vec<(String, Vec<Pair>)> = match args.mode {
        Mode::Incast => (0..n)
            .map(|t| {
                let into: Vec<Pair> = (0..n).filter(|&s| s != t).map(|s| (s, t)).collect();
                (format!("incast into {t}"), into)
            })
            .collect(),
        _ => vec![(
            "all-to-all".into(),
            (0..n)
                .flat_map(|s| (0..n).filter(move |&d| d != s).map(move |d| (s, d)))
                .collect(),
        )],
    };
    let mut results = Vec::new();
    let mut ports = Ports::new(args.port);
    for (name, set) in sets {
        let live: Vec<Pair> = set
            .iter()
            .copied()
            .filter(|&(s, d)| world.alive(s) && world.alive(d))
            .collect();
        progress(&format!("{name}: {} flows at once", live.len()));
        let flows: Vec<Flow> = live
            .iter()
            .enumerate()
            .map(|(i, &(s, d))| {
                let mut f = Flow {
                    id: i as u32,
                    kind: Kind::Bw,
                    src: s as u32,
                    dst: d as u32,
                    step: 0,
                    port: 0,
                };
                f.port = ports.of(world, f.server(args.test));
                f
            })
            .collect();
        let t = Instant::now();
        let out: RoundOutcomes = if flows.is_empty() {
            Vec::new()
        } else {
            world.round(args, &flows, &name)
        };
        rounds.push(RoundLog {
            name,
            pairs: live.clone(),
            seconds: t.elapsed().as_secs_f64(),
        });
        for &(s, d) in &set {
            let o = live
                .iter()
                .position(|&p| p == (s, d))
                .and_then(|i| out[i].clone());
            let (bw, error) = match o {
                Some(Ok(x)) => (Some(x), None),
                Some(Err(e)) => (None, Some(e)),
                None => (
                    None,
                    unmeasured(world, (s.min(d), s.max(d)), "by then").error,
                ),
            };
            results.push(FlowResult {
                src: s,
                dst: d,
                bw_mib_s: bw,
                error,
            });
        }
    }
    results
}
