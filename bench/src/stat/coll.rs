//! The statistics of `scripts/bench-coll-vs-mpi` (`vl_benchstat --coll DIR`, one collective per
//! DIR, named by `DIR/params`' `coll=`, all_reduce when absent): from each round's output,
//! `DIR/rows/R-ours.out` (`vl_COLL_perf`) and `DIR/rows/R-mpi.out` (Open MPI's timer, the same
//! columns), per size the median busbw of each with its range, the
//! median time, the median of the per-round ratios ours/Open MPI and the ratio of the medians
//! ([`table`]); from ours' `--profile` lines (`DIR/rows/R-ours.*`), the medians of where rank
//! 0's time went ([`profile`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};

use super::{median, num, Spread};

/// One file of `DIR/rows/`, `R-SIDE.EXT`: its round, its side (`ours`, `mpi`), its extension
/// (`out`, `err`), its text.
pub struct Output {
    pub round: u32,
    pub side: String,
    pub ext: String,
    pub text: String,
}

/// Every file of `dir/rows/` named `R-SIDE.EXT`.
pub fn read_outputs(dir: &Path) -> Result<Vec<Output>> {
    let rows = dir.join("rows");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&rows).with_context(|| format!("reading {}", rows.display()))? {
        let path = e?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some((stem, ext)) = name.rsplit_once('.') else {
            continue;
        };
        let Some((round, side)) = stem.split_once('-') else {
            continue;
        };
        let Ok(round) = round.parse() else {
            continue;
        };
        let text = vl_perftest::input::read_text(&path).map_err(anyhow::Error::msg)?;
        out.push(Output {
            round,
            side: side.to_string(),
            ext: ext.to_string(),
            text,
        });
    }
    Ok(out)
}

/// "96 B", "64 KiB", "1 MiB" (`scripts/bench-coll-vs-mpi -b` may start below 1 KiB).
fn size_label(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes as f64 / 1048576.0)
    } else if bytes >= 1 << 10 {
        format!("{} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

/// A median the table prints as 0 when there is none (no valid run).
fn med0(v: &[f64]) -> f64 {
    median(v).unwrap_or(0.0)
}

/// nccl-tests' bus-bandwidth factor of the collective named `coll` (as in `vl_COLL_perf`) on
/// `n` ranks.
fn busbw_factor(coll: &str, n: u32) -> Result<f64> {
    let n = f64::from(n.max(1));
    Ok(match coll {
        "all_reduce" => 2.0 * (n - 1.0) / n,
        "all_gather" | "reduce_scatter" | "alltoall" | "gather" | "scatter" => (n - 1.0) / n,
        "broadcast" | "reduce" | "sendrecv" => 1.0,
        other => anyhow::bail!("'{other}' is not a collective of ours (coll= in params)"),
    })
}

/// The world size an output's header names (`nranks N`), if it names one. mpirun may print its
/// own warnings before the header: every comment line is looked at.
fn nranks(text: &str) -> Option<u32> {
    text.lines().filter(|l| l.starts_with('#')).find_map(|l| {
        let rest = &l[l.find("nranks ")? + "nranks ".len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

/// The busbw and time table (markdown) of collective `coll` over `rounds` rounds of the `.out`
/// files.
pub fn table(outputs: &[Output], rounds: u32, coll: &str) -> Result<String> {
    // (round, side, size) -> (busbw MB/s, time us). busbw from the time (the printed GB/s has
    // too few digits here): size / time x the collective's factor for the header's nranks.
    let mut m: BTreeMap<(u64, u32, &str), (f64, f64)> = BTreeMap::new();
    for o in outputs.iter().filter(|o| o.ext == "out") {
        // An output that printed no row needs no header; one with rows must name its world.
        let has_rows = o.text.lines().any(|l| l.starts_with(' '));
        let factor = match nranks(&o.text) {
            Some(n) => busbw_factor(coll, n)?,
            None if has_rows => anyhow::bail!(
                "round {}'s output ({}) has rows but no 'nranks N' in its header",
                o.round,
                o.side
            ),
            None => continue,
        };
        for line in o.text.lines().filter(|l| l.starts_with(' ')) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (Some(size), Some(t)) = (
                f.first().and_then(|s| s.parse::<u64>().ok()),
                f.get(5).and_then(|s| num(s)),
            ) else {
                continue;
            };
            // A row that moved nothing (fewer elements than ranks) has no bandwidth to compare.
            if t > 0.0 && size > 0 {
                m.insert(
                    (size, o.round, o.side.as_str()),
                    (size as f64 / t * factor, t),
                );
            }
        }
    }
    let mut md = String::from(
        "| size | busbw ours, MB/s: median (min–max) | busbw Open MPI, MB/s: median (min–max) | \
         time ours / Open MPI, µs (medians) | ratio ours/Open MPI: median of rounds | ratio of \
         the medians | rounds |\n|---:|---|---|---|---:|---:|---:|\n",
    );
    let mut sizes: Vec<u64> = m.keys().map(|k| k.0).collect();
    sizes.dedup();
    for s in sizes {
        let (mut o, mut to, mut p, mut tp, mut r) = (vec![], vec![], vec![], vec![], vec![]);
        for k in 1..=rounds {
            let ours = m.get(&(s, k, "ours"));
            let mpi = m.get(&(s, k, "mpi"));
            if let Some(&(bw, t)) = ours {
                o.push(bw);
                to.push(t);
            }
            if let Some(&(bw, t)) = mpi {
                p.push(bw);
                tp.push(t);
            }
            if let (Some(a), Some(b)) = (ours, mpi) {
                r.push(a.0 / b.0);
            }
        }
        let spread =
            |v: &[f64]| Spread::of(v).map_or((0.0, 0.0, 0.0), |s| (s.median, s.min, s.max));
        let ((mo, lo, hi), (mp, lp, hp)) = (spread(&o), spread(&p));
        let _ = writeln!(
            md,
            "| {} | {mo:.3} ({lo:.3}–{hi:.3}) | {mp:.3} ({lp:.3}–{hp:.3}) | {:.0} / {:.0} | **{:.2}** \
             | {:.2} | {} |",
            size_label(s),
            med0(&to),
            med0(&tp),
            med0(&r),
            if mp > 0.0 { mo / mp } else { 0.0 },
            r.len()
        );
    }
    Ok(md)
}

/// The `--profile` table (markdown) of ours' out-of-place lines, or "" when there are none.
/// A line: `# profile rank 0 65536 B out-of-place: 1.23 ms per collective = post 0.10 + apply
/// 0.20 (1234 B) + poll 0.30 + idle 0.40 ms; 5.0 writes, 3.0 sleeps`.
pub fn profile(outputs: &[Output]) -> String {
    // size -> per line: total, post, apply, poll, idle, writes, sleeps (fields 8 14 17 22 25 27 29).
    const FIELDS: [usize; 7] = [8, 14, 17, 22, 25, 27, 29];
    let mut by_size: BTreeMap<u64, Vec<[f64; 7]>> = BTreeMap::new();
    for o in outputs.iter().filter(|o| o.side == "ours") {
        for line in o.text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 29 || f[0] != "#" || f[1] != "profile" || f[6] != "out-of-place:" {
                continue;
            }
            let Ok(size) = f[4].parse() else { continue };
            let vals = FIELDS.map(|i| num(f[i - 1]).unwrap_or(0.0));
            by_size.entry(size).or_default().push(vals);
        }
    }
    if by_size.is_empty() {
        return String::new();
    }
    let mut md = String::from(
        "| size | ms per collective | post | apply (copy + reduce + credit) | poll | idle (asleep \
         or spinning) | writes | sleeps |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (s, lines) in by_size {
        let col = |i: usize| med0(&lines.iter().map(|v| v[i]).collect::<Vec<_>>());
        let _ = writeln!(
            md,
            "| {} | {:.1} | {:.2} | {:.2} | {:.2} | {:.1} | {:.0} | {:.0} |",
            size_label(s),
            col(0),
            col(1),
            col(2),
            col(3),
            col(4),
            col(5),
            col(6)
        );
    }
    md
}

/// Writes `dir/table.md` and `dir/profile.md` from `dir/rows/` and `dir/params`' `runs=` and
/// `coll=`.
pub fn write(dir: &Path) -> Result<()> {
    let params = dir.join("params");
    let text = vl_perftest::input::read_text(&params).map_err(anyhow::Error::msg)?;
    let rounds = text
        .lines()
        .find_map(|l| l.strip_prefix("runs="))
        .and_then(|r| r.parse().ok())
        .with_context(|| format!("{} has no runs=N", params.display()))?;
    let coll = text
        .lines()
        .find_map(|l| l.strip_prefix("coll="))
        .unwrap_or("all_reduce");
    let outputs = read_outputs(dir)?;
    for (name, md) in [
        ("table.md", table(&outputs, rounds, coll)?),
        ("profile.md", profile(&outputs)),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(round: u32, side: &str, text: &str) -> Output {
        Output {
            round,
            side: side.into(),
            ext: "out".into(),
            text: text.into(),
        }
    }

    #[test]
    fn bus_bandwidth_follows_the_collective_and_the_header_world() {
        // 8 ranks: all-reduce 2(n-1)/n = 1.75, all-to-all (n-1)/n = 0.875; 1000 B in 10 us =
        // 100 MB/s of algbw.
        let ours = "# vl_alltoall_perf: nranks 8 (from Open MPI)\n#\n         1000  250  float  \
                    none  -1  10.0  0.10  0.09  0\n";
        let mpi =
            "# coll_timer: Open MPI alltoall float, nranks 8, -b 8\n        1000  250  float  \
                   none  -1  20.0  0.05  0.04  N/A\n";
        let outs = [out(1, "ours", ours), out(1, "mpi", mpi)];
        let t = table(&outs, 1, "alltoall").unwrap();
        assert!(
            t.contains("| 1000 B | 87.500 (87.500–87.500) | 43.750 (43.750–43.750)"),
            "{t}"
        );
        assert!(t.contains("**2.00**"), "{t}");
        let t = table(&outs, 1, "all_reduce").unwrap();
        assert!(t.contains("| 1000 B | 175.000"), "{t}");
        assert!(table(&outs, 1, "allgather").is_err());
        assert_eq!(nranks("# x: nranks 12, y\n 8 2"), Some(12));
        assert_eq!(nranks("no header\n"), None);
        assert_eq!(
            nranks("[node1:00440] plm:rsh: Warning\n# t: nranks 4, -b 8\n"),
            Some(4)
        );
    }

    #[test]
    fn sizes_are_labelled_in_their_own_unit() {
        let labels: Vec<String> = [8, 96, 1024, 1536, 65536, 1 << 20, 3 << 19]
            .into_iter()
            .map(super::size_label)
            .collect();
        assert_eq!(
            labels,
            ["8 B", "96 B", "1 KiB", "1.5 KiB", "64 KiB", "1 MiB", "1.5 MiB"]
        );
    }
}
