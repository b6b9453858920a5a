//! The verdicts, with the rules stated: which pairs are slow, which hosts are suspect. Pure
//! functions of the numbers, so that the rules are tested on made-up matrices and a report can
//! be judged again from its JSON (`vl_jsoncheck`).
//!
//! 1. **Slow pair.** A direction a→b is slow when its bandwidth is below `tolerance` × the
//!    reference: `--expect` when given, else the best direction measured in the whole check.
//!    A pair is slow when either direction is, when its latency is above `lat_factor` × the
//!    lowest latency measured, or when its test failed while both hosts were alive.
//! 2. **Suspect host.** A host is suspect when more than half of its measured pairs are slow,
//!    and more than half of the hosts are not in that state. When most hosts have mostly slow
//!    pairs the trouble is the fabric's (or `--expect` is too high), not one host's: the slow
//!    pairs are named and no host is blamed. (On a slowed host every one of its pairs is slow
//!    while each other host has one slow pair, the one with it; a slow spine link slows the
//!    flows that cross it, spread over many hosts.)
//! 3. **Re-test.** The caller measures the slow pairs once more and judges the better of the
//!    two measurements ([`PairResult::best_of`]): a pair is reported slow only when it was slow
//!    both times.
//!
//! A host that went during the check is named apart (the caller's); its pairs that were not
//! measured are excluded here.

use serde::{Deserialize, Serialize};

/// What one pair measured: bandwidth each way, MiB/s, and the latency, µs (half the
/// ping-pong's round trip, perftest's t_typical); or why it could not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairResult {
    pub a: usize,
    pub b: usize,
    /// a → b and b → a, MiB/s.
    pub bw_ab_mib_s: Option<f64>,
    pub bw_ba_mib_s: Option<f64>,
    pub lat_us: Option<f64>,
    /// The first failure of the pair's tests, in the words of the side that met it.
    pub error: Option<String>,
}

impl PairResult {
    /// A pair not measured (yet): no numbers.
    pub fn empty(a: usize, b: usize) -> PairResult {
        PairResult {
            a,
            b,
            bw_ab_mib_s: None,
            bw_ba_mib_s: None,
            lat_us: None,
            error: None,
        }
    }

    /// Whether every number is in and no test failed.
    pub fn complete(&self) -> bool {
        self.error.is_none()
            && self.bw_ab_mib_s.is_some()
            && self.bw_ba_mib_s.is_some()
            && self.lat_us.is_some()
    }

    /// The better of two measurements of the same pair: each bandwidth's higher, the lower
    /// latency; a failed measurement gives way to a complete one.
    pub fn best_of(&self, again: &PairResult) -> PairResult {
        match (self.complete(), again.complete()) {
            (false, true) => return again.clone(),
            (_, false) => return self.clone(),
            (true, true) => {}
        }
        let hi = |x: Option<f64>, y: Option<f64>| x.zip(y).map(|(x, y)| x.max(y));
        PairResult {
            a: self.a,
            b: self.b,
            bw_ab_mib_s: hi(self.bw_ab_mib_s, again.bw_ab_mib_s),
            bw_ba_mib_s: hi(self.bw_ba_mib_s, again.bw_ba_mib_s),
            lat_us: self.lat_us.zip(again.lat_us).map(|(x, y)| x.min(y)),
            error: None,
        }
    }
}

/// Which measured bandwidth the pairs are held to (without `--expect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Reference {
    /// The best direction measured: right where the fabric's pairs differ by a few per cent.
    Best,
    /// The median direction: where single runs scatter widely (emulated hosts, a busy fabric),
    /// one lucky run does not raise the bar for all.
    Median,
}

/// The rules' numbers (their defaults are the tool's flags').
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rules {
    /// A direction is slow below this share of the reference bandwidth.
    pub tolerance: f64,
    /// The measured reference, when there is no `--expect`.
    pub reference: Reference,
    /// The reference bandwidth, MiB/s (`--expect`, given in GB/s); `None`: the best measured.
    pub expect_mib_s: Option<f64>,
    /// A pair is slow above this multiple of the lowest latency.
    pub lat_factor: f64,
}

impl Rules {
    /// The rules in words, as the report prints them.
    pub fn describe(&self) -> Vec<String> {
        let reference = match (self.expect_mib_s, self.reference) {
            (Some(e), _) => format!("the expected {e:.2} MiB/s (--expect)"),
            (None, Reference::Best) => "the best direction measured (--reference best)".into(),
            (None, Reference::Median) => {
                "the median direction measured (--reference median)".into()
            }
        };
        vec![
            format!(
                "a pair is slow when a direction's bandwidth < {:.2} (--tolerance) x {reference}, \
                 its latency > {:.2} (--lat-factor) x the lowest latency measured, or its test \
                 failed with both hosts alive",
                self.tolerance, self.lat_factor
            ),
            "a host is suspect when more than half of its measured pairs are slow and more than \
             half of the hosts are not; slow pairs are re-tested once, each alone, and reported \
             only when slow both times"
                .into(),
        ]
    }
}

/// One slow pair and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlowPair {
    pub a: usize,
    pub b: usize,
    pub reasons: Vec<String>,
}

/// One host's pairs: how many were measured (both hosts alive at the time), how many slow.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Tally {
    pub measured: usize,
    pub slow: usize,
}

impl Tally {
    fn mostly_slow(self) -> bool {
        self.measured > 0 && 2 * self.slow > self.measured
    }
}

/// What the rules say of a set of pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The bandwidth the pairs are held to (MiB/s) and the lowest latency (µs).
    pub ref_bw_mib_s: Option<f64>,
    pub ref_lat_us: Option<f64>,
    pub slow: Vec<SlowPair>,
    /// Per host (index = rank).
    pub tallies: Vec<Tally>,
    pub suspects: Vec<usize>,
    /// More than half of the hosts have mostly slow pairs: no host is blamed.
    pub widespread: bool,
}

/// The rules applied to `pairs` on `n` hosts; pairs with a host in `gone` that were not
/// measured are left out. Every number in `pairs` must be finite.
pub fn judge(n: usize, pairs: &[PairResult], gone: &[bool], rules: &Rules) -> Verdict {
    let (ref_bw, ref_lat) = references(pairs, rules);
    judge_against(n, pairs, gone, rules, (ref_bw, ref_lat))
}

/// The references of `pairs`: `--expect` or the best direction measured (MiB/s), and the
/// lowest latency (µs). A re-test is judged against the first pass's references: a pair that
/// ran alone may go faster than any pair did among the others, and must not raise the bar for
/// pairs that were never measured again.
pub fn references(pairs: &[PairResult], rules: &Rules) -> (Option<f64>, Option<f64>) {
    let complete = || pairs.iter().filter(|p| p.complete());
    let mut bws: Vec<f64> = complete()
        .flat_map(|p| [p.bw_ab_mib_s, p.bw_ba_mib_s])
        .flatten()
        .collect();
    bws.sort_by(f64::total_cmp);
    let measured = match rules.reference {
        Reference::Best => bws.last().copied(),
        Reference::Median if bws.is_empty() => None,
        Reference::Median if bws.len() % 2 == 1 => Some(bws[bws.len() / 2]),
        Reference::Median => Some((bws[bws.len() / 2 - 1] + bws[bws.len() / 2]) / 2.0),
    };
    let lowest = complete()
        .filter_map(|p| p.lat_us)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
    (rules.expect_mib_s.or(measured), lowest)
}

/// [`judge`] against given references ([`references`]).
pub fn judge_against(
    n: usize,
    pairs: &[PairResult],
    gone: &[bool],
    rules: &Rules,
    (ref_bw, ref_lat): (Option<f64>, Option<f64>),
) -> Verdict {
    let gone = |h: usize| gone.get(h).copied().unwrap_or(false);
    let counted: Vec<&PairResult> = pairs
        .iter()
        .filter(|p| p.complete() || (p.error.is_some() && !gone(p.a) && !gone(p.b)))
        .collect();
    let mut tallies = vec![Tally::default(); n];
    let mut slow = Vec::new();
    for p in counted {
        let reasons = reasons(p, ref_bw, ref_lat, rules);
        for h in [p.a, p.b] {
            if let Some(t) = tallies.get_mut(h) {
                t.measured += 1;
                t.slow += usize::from(!reasons.is_empty());
            }
        }
        if !reasons.is_empty() {
            slow.push(SlowPair {
                a: p.a,
                b: p.b,
                reasons,
            });
        }
    }
    let mostly: Vec<usize> = (0..n).filter(|&h| tallies[h].mostly_slow()).collect();
    let widespread = 2 * mostly.len() > n;
    Verdict {
        ref_bw_mib_s: ref_bw,
        ref_lat_us: ref_lat,
        slow,
        tallies,
        suspects: if widespread { Vec::new() } else { mostly },
        widespread,
    }
}

/// Whether the slow pairs of `n` hosts (every pair judged) split the hosts in two groups of at
/// least two hosts each, with every pair between the groups slow and none within a group: the
/// mark of a link that joins the groups (a leaf's uplinks; a spine link, when `--qps` spreads
/// every pair over the spines), not of a host. The groups in rank order, host 0's first.
pub fn cut(n: usize, slow: &[(usize, usize)]) -> Option<(Vec<usize>, Vec<usize>)> {
    let is_slow = |a: usize, b: usize| slow.iter().any(|&p| p == (a, b) || p == (b, a));
    let (one, other): (Vec<usize>, Vec<usize>) = (0..n).partition(|&h| h == 0 || !is_slow(0, h));
    let across = |a: usize, b: usize| one.contains(&a) != one.contains(&b);
    let exact = (0..n).all(|a| (a + 1..n).all(|b| is_slow(a, b) == across(a, b)));
    (one.len() >= 2 && other.len() >= 2 && exact).then_some((one, other))
}

/// Why pair `p` is slow (empty: it is not).
fn reasons(
    p: &PairResult,
    ref_bw: Option<f64>,
    ref_lat: Option<f64>,
    rules: &Rules,
) -> Vec<String> {
    if let Some(e) = &p.error {
        return vec![format!("its test failed: {e}")];
    }
    let mut why = Vec::new();
    if let Some(r) = ref_bw {
        let floor = rules.tolerance * r;
        for (from, to, bw) in [(p.a, p.b, p.bw_ab_mib_s), (p.b, p.a, p.bw_ba_mib_s)] {
            if let Some(bw) = bw.filter(|&bw| bw < floor) {
                why.push(format!(
                    "{from}->{to} {bw:.2} MiB/s < {:.2} x {r:.2} = {floor:.2} ({:.0}% of the \
                     reference)",
                    rules.tolerance,
                    100.0 * bw / r
                ));
            }
        }
    }
    if let (Some(r), Some(lat)) = (ref_lat, p.lat_us) {
        let ceiling = rules.lat_factor * r;
        if lat > ceiling {
            why.push(format!(
                "latency {lat:.1} us > {:.2} x {r:.1} = {ceiling:.1} us",
                rules.lat_factor
            ));
        }
    }
    why
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::plan::tournament;

    const RULES: Rules = Rules {
        tolerance: 0.7,
        reference: Reference::Best,
        expect_mib_s: None,
        lat_factor: 3.0,
    };

    /// Every pair of `n` hosts at `bw` each way and `lat`, then `edit` applied to each.
    fn matrix(n: usize, edit: impl Fn(&mut PairResult)) -> Vec<PairResult> {
        tournament(n)
            .concat()
            .into_iter()
            .map(|(a, b)| {
                let mut p = PairResult {
                    a,
                    b,
                    bw_ab_mib_s: Some(5.0 + 0.01 * (a + b) as f64),
                    bw_ba_mib_s: Some(5.1),
                    lat_us: Some(600.0 + a as f64),
                    error: None,
                };
                edit(&mut p);
                p
            })
            .collect()
    }

    #[test]
    fn a_healthy_fabric_has_no_slow_pair_and_no_suspect() {
        for n in [2, 3, 4, 9] {
            let v = judge(n, &matrix(n, |_| {}), &[], &RULES);
            assert!(
                v.slow.is_empty() && v.suspects.is_empty() && !v.widespread,
                "{n}"
            );
            assert_eq!(
                v.tallies.iter().map(|t| t.measured).sum::<usize>(),
                n * (n - 1)
            );
        }
    }

    #[test]
    fn a_host_slow_in_one_direction_only_is_the_one_suspect() {
        // Traffic toward host 2 at half rate (netem on its cable shapes only what goes to it).
        let into_2 = |p: &mut PairResult| {
            if p.b == 2 {
                p.bw_ab_mib_s = Some(2.6);
            }
            if p.a == 2 {
                p.bw_ba_mib_s = Some(2.6);
            }
        };
        for n in [3, 4, 5, 8] {
            let v = judge(n, &matrix(n, into_2), &[], &RULES);
            assert_eq!(v.suspects, vec![2], "n = {n}");
            assert_eq!(v.slow.len(), n - 1, "n = {n}");
            assert!(v.slow.iter().all(|s| s.a == 2 || s.b == 2));
            assert!(
                v.slow[0].reasons[0].contains("->2 2.60 MiB/s < 0.70 x"),
                "{v:?}"
            );
        }
        // Two hosts cannot tell which end is bad: the pair is named, nobody blamed.
        let v = judge(2, &matrix(2, |p| p.bw_ab_mib_s = Some(1.0)), &[], &RULES);
        assert_eq!((v.slow.len(), v.suspects.len(), v.widespread), (1, 0, true));
    }

    #[test]
    fn the_median_reference_is_not_raised_by_one_lucky_run() {
        // One direction ran at three times the others: against the best, every pair is slow;
        // against the median, none.
        let lucky = |p: &mut PairResult| {
            if (p.a, p.b) == (0, 1) {
                p.bw_ab_mib_s = Some(15.0);
            }
        };
        let v = judge(4, &matrix(4, lucky), &[], &RULES);
        assert!(v.slow.len() >= 5 && v.widespread, "{v:?}");
        let median = Rules {
            reference: Reference::Median,
            ..RULES
        };
        let v = judge(4, &matrix(4, lucky), &[], &median);
        assert!(v.slow.is_empty(), "{v:?}");
        assert_eq!(v.ref_bw_mib_s, Some(5.1));
        // Even count: the mean of the middle two.
        assert_eq!(references(&matrix(2, |_| {}), &median).0, Some(5.055));
    }

    #[test]
    fn latency_alone_makes_a_pair_slow() {
        let v = judge(
            4,
            &matrix(4, |p| {
                if p.a == 1 || p.b == 1 {
                    p.lat_us = Some(5000.0);
                }
            }),
            &[],
            &RULES,
        );
        assert_eq!(v.suspects, vec![1]);
        assert!(v.slow[0].reasons[0].starts_with("latency 5000.0 us > 3.00 x 600.0"));
    }

    #[test]
    fn a_slow_spine_link_names_pairs_and_blames_no_host() {
        // Hosts 0, 1 on one leaf, 2, 3 on the other: every pair across the leaves is slow.
        let across = |p: &mut PairResult| {
            if (p.a < 2) != (p.b < 2) {
                p.bw_ab_mib_s = Some(2.0);
            }
        };
        let v = judge(4, &matrix(4, across), &[], &RULES);
        assert_eq!(v.slow.len(), 4);
        assert!(v.suspects.is_empty() && v.widespread);
        let slow: Vec<(usize, usize)> = v.slow.iter().map(|p| (p.a, p.b)).collect();
        assert_eq!(cut(4, &slow), Some((vec![0, 1], vec![2, 3])));
    }

    #[test]
    fn a_cut_needs_two_groups_of_two_and_exactly_the_pairs_between_them() {
        // Groups {0, 2, 4} and {1, 3, 5} of 6 hosts: every pair between them, none within.
        let between: Vec<(usize, usize)> = (0..6)
            .flat_map(|a| (a + 1..6).map(move |b| (a, b)))
            .filter(|&(a, b)| a % 2 != b % 2)
            .collect();
        assert_eq!(cut(6, &between), Some((vec![0, 2, 4], vec![1, 3, 5])));
        // One pair between the groups not slow, or one within a group slow: no cut.
        assert_eq!(cut(6, &between[1..]), None);
        let mut more = between.clone();
        more.push((0, 2));
        assert_eq!(cut(6, &more), None);
        // A slow host is a group of one: the suspect rule's case, not a cut.
        assert_eq!(cut(4, &[(0, 2), (1, 2), (2, 3)]), None);
        assert_eq!(cut(2, &[(0, 1)]), None);
        assert_eq!(cut(4, &[]), None);
    }

    #[test]
    fn expect_holds_every_pair_to_the_given_rate() {
        let rules = Rules {
            expect_mib_s: Some(100.0),
            ..RULES
        };
        let v = judge(4, &matrix(4, |_| {}), &[], &rules);
        assert_eq!(v.slow.len(), 6);
        assert!(v.widespread && v.suspects.is_empty());
        assert_eq!(v.ref_bw_mib_s, Some(100.0));
    }

    #[test]
    fn a_gone_hosts_unmeasured_pairs_are_left_out_and_a_failed_pair_is_slow() {
        let cut = |p: &mut PairResult| {
            if p.a == 3 || p.b == 3 {
                *p = PairResult {
                    error: Some("peer gone".into()),
                    ..PairResult::empty(p.a, p.b)
                };
            }
        };
        let mut gone = vec![false; 4];
        gone[3] = true;
        let v = judge(4, &matrix(4, cut), &gone, &RULES);
        assert!(v.slow.is_empty() && v.suspects.is_empty());
        assert_eq!(v.tallies[3].measured, 0);
        assert_eq!(v.tallies[0].measured, 2);
        // The same failures with host 3 alive: its link is broken, and it is the suspect.
        let v = judge(4, &matrix(4, cut), &[], &RULES);
        assert_eq!(v.suspects, vec![3]);
        assert!(v.slow[0].reasons[0].contains("its test failed: peer gone"));
    }

    #[test]
    fn a_retest_keeps_the_better_measurement() {
        let first = PairResult {
            a: 0,
            b: 1,
            bw_ab_mib_s: Some(2.0),
            bw_ba_mib_s: Some(5.0),
            lat_us: Some(900.0),
            error: None,
        };
        let again = PairResult {
            bw_ab_mib_s: Some(4.9),
            bw_ba_mib_s: Some(4.0),
            lat_us: Some(700.0),
            ..first.clone()
        };
        let best = first.best_of(&again);
        assert_eq!(
            (best.bw_ab_mib_s, best.bw_ba_mib_s, best.lat_us),
            (Some(4.9), Some(5.0), Some(700.0))
        );
        let failed = PairResult {
            error: Some("x".into()),
            ..PairResult::empty(0, 1)
        };
        assert_eq!(failed.best_of(&first), first);
        assert_eq!(first.best_of(&failed), first);
    }
}
