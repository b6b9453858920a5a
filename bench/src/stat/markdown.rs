//! The generated part of `docs/benchmarks.md` (the results table, the misses, the other
//! columns, the charts, the cost, every round, the broken runs, the settings, the commands,
//! the environment) and the console summary, from the same statistics as the JSON.

use std::fmt::Write as _;

use super::json::mode;
use super::{
    command, row_settings, row_stats, Kind, Records, RowStats, Test, Verdict, COST_COLUMNS,
};

/// `v` with `decimals` places, or "–".
fn f(v: Option<f64>, decimals: usize) -> String {
    v.map_or("–".into(), |x| format!("{x:.decimals$}"))
}

/// A signed difference in percent: one decimal, more below 0.1 % until the first digit that is
/// not 0 shows (a deterministic row's miss of -0.03 % must not print as -0.0 %, nor one of
/// -0.002 % as -0.00 %).
fn pct(x: f64) -> String {
    let places = if x == 0.0 || x.abs() >= 0.1 {
        1
    } else if x.abs() >= 0.01 {
        2
    } else {
        3
    };
    format!("{x:+.places$}%")
}

/// A ratio with three decimals, more (up to five) where fewer would round it to exactly 1 and
/// it is not 1.
fn ratio_text(r: f64) -> String {
    let mut places = 3;
    while places < 5 && r != 1.0 && format!("{r:.places$}").trim_end_matches('0') == "1." {
        places += 1;
    }
    format!("{r:.places$}")
}

/// [`ratio_text`] of a ratio that may be missing ("–").
fn ratio_or_dash(v: Option<f64>) -> String {
    v.map_or("–".into(), ratio_text)
}

/// The decimals a row's values are printed with.
fn places(kind: Kind) -> usize {
    if kind == Kind::Rate {
        6
    } else {
        2
    }
}

fn label(kind: Kind) -> &'static str {
    match kind {
        Kind::Bw => "BW average, MiB/s (higher better)",
        Kind::Rate => "MsgRate, Mpps (higher better)",
        Kind::Lat => "t_typical, µs (lower better)",
    }
}

/// The other columns of a row worth a median (name, column, decimals): informational.
fn other_columns(kind: Kind) -> &'static [(&'static str, usize, usize)] {
    match kind {
        Kind::Bw => &[("MsgRate, Mpps", 5, 6), ("BW peak, MiB/s", 3, 2)],
        Kind::Rate => &[
            ("BW average, MiB/s (2 decimals)", 4, 2),
            ("BW peak, MiB/s", 3, 2),
        ],
        Kind::Lat => &[
            ("t_avg, µs", 6, 2),
            ("99% percentile, µs", 8, 2),
            ("t_min, µs", 3, 2),
            ("99.9% percentile, µs", 9, 2),
        ],
    }
}

/// `a / b` of two positive numbers, with two decimals, or "–".
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 => format!("{:.2}", a / b),
        _ => "–".into(),
    }
}

/// The generated markdown and the console summary of `rec`.
pub fn render(rec: &Records) -> (String, String) {
    let stats: Vec<(&Test, RowStats)> = rec.tests.iter().map(|t| (t, row_stats(rec, t))).collect();
    let mut md = String::new();
    results(rec, &stats, &mut md);
    misses(&stats, deterministic(rec), &mut md);
    others(rec, &mut md);
    charts(rec, &mut md);
    cost(rec, &mut md);
    rounds(rec, &stats, &mut md);
    broken(rec, &mut md);
    settings(rec, &mut md);
    commands(rec, &mut md);
    environment(rec, &mut md);
    (md, summary(rec, &stats))
}

fn results(rec: &Records, stats: &[(&Test, RowStats)], md: &mut String) {
    let broken = rec.runs.iter().filter(|r| !r.ok).count();
    let _ = writeln!(md, "## Results\n");
    let _ = writeln!(
        md,
        "{}, {} UTC. {} rounds per row ({} planned + {} extra for broken runs), {} runs, {} \
         broken. Raw outputs: `{}/`.\n",
        mode(rec).1,
        rec.env("date_utc"),
        rec.rounds(),
        rec.env_int("runs"),
        rec.env_int("extra_rounds"),
        rec.runs.len(),
        broken,
        rec.env("out_dir")
    );
    md.push_str(
        "Goal: our bandwidth ≥ perftest's (ratio ≥ 1) and our latency ≤ perftest's (ratio ≤ 1) \
         on every row. Ratio = ours / perftest; **median of rounds** = the median of each \
         round's ratio (the verdict), **of medians** = ratio of the two medians. *Rounds meeting \
         goal*: in how many comparable rounds our run beat or equalled perftest's. A row \
         **ties** where it misses by less than either tool's own half-range between runs and \
         ours was ahead in at least two rounds and behind in at least two: the two cannot be \
         told apart; the goal is not met.\n\n",
    );
    md.push_str(
        "| row | metric | vl_* median (min–max; ±half-range) | ib_* median (min–max; ±half-range) | ratio: median of rounds \
         (range) | ratio of medians | rounds meeting goal | verdict |\n",
    );
    md.push_str("|---|---|---|---|---|---|---|---|\n");
    for (t, st) in stats {
        let p = places(t.kind);
        let rmed = st.ratios.map(|s| s.median);
        let diff = || pct((rmed.unwrap_or(0.0) - 1.0) * 100.0);
        let mut v = match st.verdict {
            Verdict::Misses => format!("**MISSES** ({})", diff()),
            Verdict::Ties => format!("**ties** ({}, inside both tools' spread)", diff()),
            Verdict::NoData => "**NO DATA**".into(),
            Verdict::Meets => format!("meets ({})", diff()),
        };
        if st.disagree {
            v.push_str("; ratio of medians disagrees");
        }
        let side = |s: Option<super::Spread>| {
            format!(
                "{} ({}–{}; {}), n={}",
                f(s.map(|s| s.median), p),
                f(s.map(|s| s.min), p),
                f(s.map(|s| s.max), p),
                s.and_then(|s| s.spread_pct())
                    .map_or("—".into(), |x| format!("±{:.1}%", x / 2.0)),
                s.map_or(0, |s| s.n)
            )
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} ({}–{}) | {} | {} of {} | {} |",
            t.name,
            label(t.kind),
            side(st.ours),
            side(st.perftest),
            ratio_or_dash(rmed),
            ratio_or_dash(st.ratios.map(|s| s.min)),
            ratio_or_dash(st.ratios.map(|s| s.max)),
            ratio_or_dash(st.of_medians),
            st.won,
            st.compared(),
            v
        );
    }
}

/// Whether the guest of `rec` ran in deterministic time (QEMU's instruction counting).
fn deterministic(rec: &Records) -> bool {
    rec.env("accelerator").contains("instruction counting")
}

fn misses(stats: &[(&Test, RowStats)], deterministic: bool, md: &mut String) {
    md.push_str("\n### Rows that miss the goal\n\n");
    if stats.iter().all(|(_, st)| st.verdict == Verdict::Meets) {
        md.push_str("None: every row meets the goal on the median of the per-round ratios.\n");
    }
    for (t, st) in stats {
        miss(t, st, md);
    }
    narrow_passes(stats, deterministic, md);
    if stats.iter().any(|(_, st)| st.verdict != Verdict::Meets) {
        md.push_str(if deterministic {
            "\nIn deterministic time the runs of a row agree within ±0.0–0.6 % (the 1 MiB rows \
             excepted: a run falls into one of rxe's regimes): a miss smaller than that where \
             the rounds split, two or more each way, is a tie, not a verdict; a miss in every \
             round, or every round but one, is a cost of ours, however small.\n"
        } else {
            "\nUnder TCG a pair of runs varies by ±10–20%: a miss of a few percent, or one where \
             the rounds split, needs more rounds (`--runs 9`, `--only ROW`) before it means \
             anything; a miss in every round does.\n"
        });
    }
}

/// The median of a row's per-round ratios (0 without any).
fn median_of_rounds(st: &RowStats) -> f64 {
    st.ratios.map_or(0.0, |s| s.median)
}

/// The ratio of a row's two medians (0 without it).
fn ratio_of_medians(st: &RowStats) -> f64 {
    st.of_medians.unwrap_or(0.0)
}

/// A row's line under "Rows that miss the goal": a miss, a row without comparable rounds, or a
/// pass on one measure only (borderline); nothing for a clear pass.
fn miss(t: &Test, st: &RowStats, md: &mut String) {
    let (med, won, n) = (median_of_rounds(st), st.won, st.compared());
    match st.verdict {
        Verdict::Meets => {
            if st.disagree {
                let _ = writeln!(
                    md,
                    "- {} meets the goal on the median of rounds ({med:.3}) but not on the \
                     ratio of medians ({:.3}): borderline.",
                    t.name,
                    ratio_of_medians(st)
                );
            }
        }
        Verdict::NoData => {
            let _ = writeln!(
                md,
                "- **{}: no comparable round** (ours valid {} times, perftest {} times): \
                 nothing can be said; see the broken runs below.",
                t.name,
                st.ours.map_or(0, |s| s.n),
                st.perftest.map_or(0, |s| s.n)
            );
        }
        Verdict::Ties => {
            let half = |s: Option<super::Spread>| {
                s.and_then(|s| s.spread_pct())
                    .map_or("–".into(), |x| format!("±{:.2}%", x / 2.0))
            };
            let _ = writeln!(
                md,
                "- **{} ties**: the median of rounds is {} ({}), less than either tool's own \
                 spread between runs (ours {}, perftest's {}), and ours was ahead or equal in \
                 {won} of {n} rounds: at this precision the two cannot be told apart. The goal \
                 is not met; more rounds (`--only {} --runs 15`) may settle it.",
                t.name,
                ratio_text(med),
                pct((med - 1.0) * 100.0),
                half(st.ours),
                half(st.perftest),
                t.name
            );
        }
        Verdict::Misses => {
            let p = places(t.kind);
            let (o, q) = (
                st.ours.map_or(0.0, |s| s.median),
                st.perftest.map_or(0.0, |s| s.median),
            );
            if t.kind == Kind::Lat {
                let _ = writeln!(
                    md,
                    "- **{} misses**: our t_typical is {} above perftest's (median of \
                     rounds {}; medians {o:.2} vs {q:.2} µs, ratio {}); ours was at \
                     least as fast in {won} of {n} rounds.",
                    t.name,
                    pct((med - 1.0) * 100.0).trim_start_matches('+'),
                    ratio_text(med),
                    ratio_text(ratio_of_medians(st))
                );
            } else {
                let _ = writeln!(
                    md,
                    "- **{} misses**: our {} is {} below perftest's (median of rounds \
                     {}; medians {o:.p$} vs {q:.p$} {}, ratio {}); ours was at least \
                     as fast in {won} of {n} rounds.",
                    t.name,
                    if t.kind == Kind::Bw {
                        "BW average"
                    } else {
                        "MsgRate"
                    },
                    pct((1.0 - med) * 100.0).trim_start_matches('+'),
                    ratio_text(med),
                    t.kind.unit(),
                    ratio_text(ratio_of_medians(st))
                );
            }
        }
    }
}

/// The rows that pass on both measures, one of them within 5% of 1 (1% in deterministic time):
/// listed, as a pass that another run could turn.
fn narrow_passes(stats: &[(&Test, RowStats)], deterministic: bool, md: &mut String) {
    let within = if deterministic { 0.01 } else { 0.05 };
    let mut narrow = 0;
    for (t, st) in stats {
        if st.verdict != Verdict::Meets || st.disagree {
            continue;
        }
        let d1 = (median_of_rounds(st) - 1.0).abs();
        let d2 = st.of_medians.map_or(1.0, |x| (x - 1.0).abs());
        if d1 >= within && d2 >= within {
            continue;
        }
        if narrow == 0 {
            md.push_str(if deterministic {
                "\nNarrow passes (a ratio within 1% of 1: a few times a row's spread between \
                 rounds, another boot could turn it):\n\n"
            } else {
                "\nNarrow passes (a ratio within 5% of 1: inside TCG's noise, could go either \
                 way on another run):\n\n"
            });
        }
        narrow += 1;
        let _ = writeln!(
            md,
            "- {}: median of rounds {:.3}, ratio of medians {:.3}, ours ahead or equal in {} of \
             {} rounds.",
            t.name,
            median_of_rounds(st),
            ratio_of_medians(st),
            st.won,
            st.compared()
        );
    }
}

fn others(rec: &Records, md: &mut String) {
    md.push_str("\n### Other columns (medians of valid runs; informational)\n\n");
    md.push_str("| row | column | vl_* | ib_* | ours / perftest | |\n");
    md.push_str("|---|---|---|---|---|---|\n");
    for t in &rec.tests {
        for &(name, col, p) in other_columns(t.kind) {
            let a = rec.spread(&t.name, true, col).map(|s| s.median);
            let b = rec.spread(&t.name, false, col).map(|s| s.median);
            let x = match (a, b) {
                (Some(a), Some(b)) if a > 0.0 && b > 0.0 => Some(a / b),
                _ => None,
            };
            let mark = match x {
                Some(x) if t.kind != Kind::Lat && x < 1.0 => "ours lower",
                Some(x) if t.kind == Kind::Lat && x > 1.0 => "ours higher",
                _ => "",
            };
            let _ = writeln!(
                md,
                "| {} | {name} | {} | {} | {} | {mark} |",
                t.name,
                f(a, p),
                f(b, p),
                f(x, 3)
            );
        }
    }
    md.push_str(
        "\nBW peak is each tool's own definition (see docs/measurement.md) and is not comparable \
         between them; t_max is left out for the same reason (perftest drops its two largest \
         samples).\n",
    );
}

fn charts(rec: &Records, md: &mut String) {
    if rec.env("sweep") != "1" {
        return;
    }
    md.push_str(
        "\n### Charts\n\nPer tool: each side's primary metric divided by perftest's median at \
         that size (perftest's median is 1; message size on a log₂ axis), the median of the valid \
         rounds with a band from the fastest to the slowest round. Drawn by `vl_benchchart` from \
         `benchmarks.json`.\n",
    );
    let mut seen: Vec<&str> = Vec::new();
    for t in &rec.tests {
        let fam = t.family();
        if !seen.contains(&fam) {
            seen.push(fam);
            let _ = writeln!(
                md,
                "\n![{fam}: vl_* against ib_* per message size](charts/{fam}.svg)"
            );
        }
    }
}

fn cost(rec: &Records, md: &mut String) {
    md.push_str(
        "\n### Cost of a run (peak RSS and CPU time)\n\nEach side ran under busybox's `time -v` \
         (wait4(2)'s rusage of the tool): the peak resident set (ru_maxrss, KiB) and the CPU time \
         (user + system, s; two decimals). Medians over the valid runs; ratio = vl_* / ib_* \
         (goal ≤ 1). CPU time of a busy-polling tool is about its run time: it tracks how long \
         the run lasted, not only how much work it did.\n\n",
    );
    md.push_str(
        "| row | client RSS KiB vl_* / ib_* (ratio) | client CPU s vl_* / ib_* (ratio) | server \
         RSS KiB vl_* / ib_* (ratio) | server CPU s vl_* / ib_* (ratio) |\n",
    );
    md.push_str("|---|---|---|---|---|\n");
    for t in &rec.tests {
        let mut line = format!("| {}", t.name);
        for col in COST_COLUMNS {
            let a = rec.spread(&t.name, true, col).map(|s| s.median);
            let b = rec.spread(&t.name, false, col).map(|s| s.median);
            let p = if col % 2 == 0 { 0 } else { 2 };
            let _ = write!(line, " | {} / {} ({})", f(a, p), f(b, p), ratio(a, b));
        }
        md.push_str(&line);
        md.push_str(" |\n");
    }
}

fn rounds(rec: &Records, stats: &[(&Test, RowStats)], md: &mut String) {
    md.push_str(
        "\n### Every round\n\nPrimary metric of each valid run, in the order run (✗ = broken, \
         see below).\n\n| row | round | first | vl_* | ib_* | ratio |\n|---|---|---|---|---|---|\n",
    );
    let planned = rec.env_int("runs");
    for (t, st) in stats {
        let col = t.kind.column();
        for r in 1..=rec.rounds() {
            let (mut ov, mut pv, mut first, mut seen) = (String::new(), String::new(), "", false);
            for k in rec.runs_of(&t.name).filter(|k| k.round == r) {
                seen = true;
                let val = match (k.ok, k.value(col)) {
                    (false, _) => "✗".into(),
                    (true, Some(v)) => f(Some(v), places(t.kind)),
                    (true, None) => k.cols[col - 1].clone(),
                };
                if k.ours {
                    ov = val;
                } else {
                    pv = val;
                }
                if k.slot == "1" {
                    first = if k.ours { "vl_*" } else { "ib_*" };
                }
            }
            if !seen {
                continue;
            }
            let ratio = st.round_ratios.iter().find(|x| x.0 == r).map(|x| x.1);
            let _ = writeln!(
                md,
                "| {} | {r}{} | {first} | {ov} | {pv} | {} |",
                t.name,
                if i64::from(r) > planned {
                    " (extra)"
                } else {
                    ""
                },
                ratio_or_dash(ratio)
            );
        }
    }
}

fn broken(rec: &Records, md: &mut String) {
    md.push_str("\n### Broken runs (left out of every median and ratio)\n\n");
    let out_dir = rec.env("out_dir");
    if rec.runs.iter().all(|k| k.ok) {
        md.push_str("None.\n");
    } else {
        md.push_str(
            "| row | round | tool | exit (server/client) | what happened | raw output |\n\
             |---|---|---|---|---|---|\n",
        );
        for k in rec.runs.iter().filter(|k| !k.ok) {
            let calib = if k.calibration != "-" {
                format!(" ({})", k.calibration)
            } else {
                String::new()
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {}/{} | {}{calib} | `{out_dir}/{}.{{client,server,log}}` |",
                k.test, k.round, k.tool, k.server_rc, k.client_rc, k.reason, k.raw
            );
        }
    }
    let ncal = rec
        .runs
        .iter()
        .filter(|k| k.ok && k.calibration != "-")
        .count();
    if ncal > 0 {
        let _ = writeln!(
            md,
            "\n{ncal} valid runs printed perftest's calibration warning (\"Correlation \
             coefficient r^2 < 0.9\") and still printed positive numbers; they are counted."
        );
    }
}

fn settings(rec: &Records, md: &mut String) {
    md.push_str(
        "\n### Effective settings (from each tool's header)\n\nWhat the client (c) and server \
         (s) headers of the first run of each tool say; a setting both tools print must agree, \
         or the comparison is not like for like.\n\n| row | vl_* | ib_* | agree? |\n\
         |---|---|---|---|\n",
    );
    for t in &rec.tests {
        let s = row_settings(rec, t);
        let agree = if s.diff.is_empty() {
            "yes".to_string()
        } else {
            format!("**NO**: {}", s.diff)
        };
        let _ = writeln!(
            md,
            "| {} | c: {}<br>s: {} | c: {}<br>s: {} | {agree} |",
            t.name, s.ours_client, s.ours_server, s.perftest_client, s.perftest_server
        );
    }
}

fn commands(rec: &Records, md: &mut String) {
    md.push_str(
        "\n### Commands\n\nServer first (on rxe0), then, once it listens, the client (on rxe1). \
         `PORT` is 19100 + the run's number: every run has its own (each run's exact commands \
         are in `benchmarks.json`). Environment in the guest: `ulimit -l unlimited`, our binaries \
         first on PATH (stripped copies of the repository's `target/release` in the guest's RAM, \
         `/opt/vl-bin`).\n\n```\n",
    );
    for t in &rec.tests {
        let _ = writeln!(md, "# {}", t.name);
        for tool in [&t.ours, &t.perftest] {
            let _ = writeln!(
                md,
                "{}\n{}",
                command(&t.server_cmd, tool, None),
                command(&t.client_cmd, tool, None)
            );
        }
    }
    md.push_str("```\n");
}

fn environment(rec: &Records, md: &mut String) {
    let e = |k: &str| rec.env(k);
    md.push_str("\n### Environment\n\n| | |\n|---|---|\n");
    let dirty = rec.env_int("git_dirty");
    let perftest = if e("perftest_version").is_empty() {
        "?".to_string()
    } else {
        format!("prints Version: {}", e("perftest_version"))
    };
    let cargo = if e("cargo").is_empty() {
        "no cargo build".to_string()
    } else {
        format!("cargo build {}", e("cargo"))
    };
    let lines = [
        format!("date | {} UTC", e("date_utc")),
        format!("command | `{}`", e("command")),
        format!(
            "verbs-lab commit | {}{}",
            e("git_commit"),
            if dirty > 0 {
                format!(" + {dirty} uncommitted changes (work tree)")
            } else {
                String::new()
            }
        ),
        format!("vl_* version | {}", e("verbs_lab_version")),
        format!(
            "perftest | {perftest} (Debian package {})",
            e("perftest_package")
        ),
        format!("host CPU | {}, {} CPUs", e("host_cpu"), e("host_cpus")),
        format!(
            "host load (1/5/15 min) | {} at start, {} at end",
            e("host_load_start"),
            e("host_load_end")
        ),
        format!("accelerator | {}", e("accelerator")),
        format!("QEMU | {}", e("qemu")),
        format!("guest kernel | {}", e("guest_kernel")),
        format!(
            "guest CPU | {}, {} vCPUs, {} MiB",
            e("guest_cpu"),
            e("guest_vcpus"),
            rec.env_int("guest_mem_kib") / 1024
        ),
        format!("guest clocksource | {}", e("guest_clocksource")),
        format!("rxe active MTU | {}", e("rxe0_mtu")),
        format!(
            "time | {} s in all (`softroce-vm run`: {cargo}, boot, {} s of runs in the guest, \
             power-off)",
            e("total_secs"),
            e("bench_secs")
        ),
        format!(
            "raw outputs | `{}/` (`raw/`, `runs.tsv`, `console.log`)",
            e("out_dir")
        ),
    ];
    for l in lines {
        let _ = writeln!(md, "| {l} |");
    }
}

fn summary(rec: &Records, stats: &[(&Test, RowStats)]) -> String {
    let mut sm = format!(
        "{:<14} {:<9} {:>14} {:>14} {:>9} {:>9} {:>7}  {}\n",
        "row", "metric", "vl_* median", "ib_* median", "ratio", "of-medns", "rounds", "verdict"
    );
    for (t, st) in stats {
        let p = places(t.kind);
        let agree = row_settings(rec, t).diff.is_empty();
        let _ = writeln!(
            sm,
            "{:<14} {:<9} {:>14} {:>14} {:>9} {:>9} {:>7}  {}{}",
            t.name,
            if t.kind == Kind::Lat {
                "t_typ us"
            } else {
                t.kind.unit()
            },
            f(st.ours.map(|s| s.median), p),
            f(st.perftest.map(|s| s.median), p),
            ratio_or_dash(st.ratios.map(|s| s.median)),
            ratio_or_dash(st.of_medians),
            format!("{}/{}", st.won, st.compared()),
            st.verdict.name(),
            if agree { "" } else { " (settings differ!)" }
        );
    }
    let missing = stats
        .iter()
        .filter(|(_, st)| st.verdict != Verdict::Meets)
        .count();
    let ties = stats
        .iter()
        .filter(|(_, st)| st.verdict == Verdict::Ties)
        .count();
    let _ = writeln!(
        sm,
        "{} runs, {} broken; {missing} of {} rows miss the goal{}",
        rec.runs.len(),
        rec.runs.iter().filter(|r| !r.ok).count(),
        rec.tests.len(),
        if ties > 0 {
            format!(" ({ties} of them a tie: inside both tools' spread, the rounds split)")
        } else {
            String::new()
        }
    );
    sm
}

#[cfg(test)]
mod tests {
    use super::{pct, ratio_text};

    #[test]
    fn small_differences_stay_visible() {
        assert_eq!(pct(-0.03), "-0.03%");
        assert_eq!(pct(0.0), "+0.0%");
        assert_eq!(pct(-0.1), "-0.1%");
        assert_eq!(pct(18.3), "+18.3%");
        assert_eq!(ratio_text(0.99972), "0.9997");
        assert_eq!(ratio_text(1.0), "1.000");
        assert_eq!(ratio_text(1.00049), "1.0005");
        assert_eq!(ratio_text(0.9994), "0.999");
        assert_eq!(ratio_text(1.183), "1.183");
        assert_eq!(ratio_text(0.99998), "0.99998");
        assert_eq!(ratio_text(1.000004), "1.00000");
        assert_eq!(pct(-0.002), "-0.002%");
        assert_eq!(pct(0.04), "+0.04%");
    }
}
