//! `--openmetrics FILE` of the collective tools: rank 0's table in the text format that
//! Prometheus scrapes and node_exporter's textfile collector reads, beside the `vl_*` tools'
//! (`vl_perftest::report::openmetrics`, whose writer this shares).
//!
//! Every sample carries `tool`, `collective`, `type`, `redop` and `ranks`; each row's samples add
//! `bytes` (the size the row moved) and `placement` (`out_of_place`, `in_place`). Families, all
//! gauges in base units:
//!
//! | family | what |
//! |---|---|
//! | `vl_coll_run_info` | 1, with the version, the hosts and the root as labels |
//! | `vl_coll_time_seconds` | the slowest rank's time per collective |
//! | `vl_coll_algorithm_bandwidth_bytes_per_second` | algbw: bytes / time |
//! | `vl_coll_bus_bandwidth_bytes_per_second` | busbw: algbw × nccl-tests' factor |
//! | `vl_coll_wrong_elements` | `#wrong`, with `-c 1` only |
//! | `vl_coll_bus_bandwidth_average_bytes_per_second` | the footer's average |
//! | `vl_gate_passed` | 1 or 0 for `--min-busbw` / `NCCL_TESTS_MIN_BW` (label `gate`) |

use super::report::{algbw, busbw, Measure, Row, Table};
use crate::kernels::RedOp;
use vl_perftest::report::openmetrics::{labels_with, Family};

/// The whole file: `table`'s rows, the run on `hosts` hosts, and the gate's verdict (as the
/// gate was given, and whether it held) when there is one.
pub fn render(table: &Table, rows: &[Row], hosts: u32, gate: Option<(&str, bool)>) -> String {
    let collective = table
        .tool
        .trim_start_matches("vl_")
        .trim_end_matches("_perf")
        .to_string();
    let base: Vec<(&str, String)> = vec![
        ("tool", table.tool.to_string()),
        ("collective", collective),
        ("type", table.dtype.name().to_string()),
        ("redop", table.op.map_or("none", RedOp::name).to_string()),
        ("ranks", table.n.to_string()),
    ];
    let with = |extra: &[(&str, String)]| labels_with(&base, extra);
    let mut out = String::new();
    let mut f = Family { out: &mut out };

    f.head(
        "vl_coll_run_info",
        "A run of a collective tool; its labels say which version ran, on how many hosts.",
        None,
    );
    let root = table.coll.root().map_or(-1, |r| r as i64);
    let info = with(&[
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        ("hosts", hosts.to_string()),
        ("root", root.to_string()),
    ]);
    f.sample("vl_coll_run_info", &info, 1.0);

    // Every measured column of every row: (size, placement, measure).
    let cols: Vec<(usize, &str, &Measure)> = rows
        .iter()
        .flat_map(|r| {
            std::iter::once((r.size, "out_of_place", &r.out_of_place))
                .chain(r.in_place.as_ref().map(|m| (r.size, "in_place", m)))
        })
        .collect();
    let at = |size: usize, placement: &str| {
        with(&[
            ("bytes", size.to_string()),
            ("placement", placement.to_string()),
        ])
    };
    type Value = fn(&Table, usize, &Measure) -> Option<f64>;
    let families: [(&str, &str, Option<&str>, Value); 4] = [
        (
            "vl_coll_time_seconds",
            "The slowest rank's time per collective at each size.",
            Some("seconds"),
            |_, _, m| Some(m.time_us() / 1e6),
        ),
        (
            "vl_coll_algorithm_bandwidth_bytes_per_second",
            "algbw: the bytes of the row over its time.",
            Some("bytes_per_second"),
            |_, size, m| Some(algbw(size, m.time_us()) * 1e9),
        ),
        (
            "vl_coll_bus_bandwidth_bytes_per_second",
            "busbw: algbw times nccl-tests' factor for the collective and the ranks.",
            Some("bytes_per_second"),
            |t, size, m| Some(busbw(t.coll, t.n, size, m.time_us()) * 1e9),
        ),
        (
            "vl_coll_wrong_elements",
            "Elements that differed from the expected values (-c 1).",
            None,
            |_, _, m| m.wrong_total().map(|w| w as f64),
        ),
    ];
    for (name, help, unit, value) in families {
        let samples: Vec<(String, f64)> = cols
            .iter()
            .filter_map(|&(size, p, m)| value(table, size, m).map(|v| (at(size, p), v)))
            .collect();
        if samples.is_empty() {
            continue;
        }
        f.head(name, help, unit);
        for (l, v) in samples {
            f.sample(name, &l, v);
        }
    }
    let name = "vl_coll_bus_bandwidth_average_bytes_per_second";
    f.head(
        name,
        "The average bus bandwidth over every measured column (the footer's).",
        Some("bytes_per_second"),
    );
    f.sample(name, &with(&[]), table.avg_busbw(rows) * 1e9);
    let gates: Vec<(String, bool)> = gate
        .map(|(g, ok)| (g.to_string(), ok))
        .into_iter()
        .collect();
    f.gates(&base, &gates);
    out.push_str("# EOF\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::DataType;
    use crate::schedule::Coll;

    #[test]
    fn a_row_becomes_one_sample_per_family_and_placement() {
        let t = Table {
            tool: "vl_all_reduce_perf",
            coll: Coll::AllReduce,
            n: 4,
            dtype: DataType::F32,
            op: Some(RedOp::Sum),
            channels: 1,
        };
        let m = |us: f64, wrong: Option<Vec<u64>>| Measure {
            per_rank_us: vec![us / 2.0, us],
            wrong,
        };
        let rows = [Row {
            size: 1_000_000,
            count: 250_000,
            out_of_place: m(1000.0, Some(vec![0, 2])),
            in_place: Some(m(2000.0, Some(vec![0, 0]))),
            algo: None,
        }];
        let text = render(&t, &rows, 2, Some(("--min-busbw 5", false)));
        let base = "tool=\"vl_all_reduce_perf\",collective=\"all_reduce\",type=\"float\",\
                    redop=\"sum\",ranks=\"4\"";
        for line in [
            format!("vl_coll_time_seconds{{{base},bytes=\"1000000\",placement=\"out_of_place\"}} 0.001"),
            // 1 MB in 1 ms = 1 GB/s of algbw; busbw x 2(n-1)/n = 1.5.
            format!("vl_coll_algorithm_bandwidth_bytes_per_second{{{base},bytes=\"1000000\",placement=\"out_of_place\"}} 1000000000"),
            format!("vl_coll_bus_bandwidth_bytes_per_second{{{base},bytes=\"1000000\",placement=\"in_place\"}} 750000000"),
            format!("vl_coll_wrong_elements{{{base},bytes=\"1000000\",placement=\"out_of_place\"}} 2"),
            format!("vl_coll_bus_bandwidth_average_bytes_per_second{{{base}}} 1125000000"),
            format!("vl_gate_passed{{{base},gate=\"--min-busbw 5\"}} 0"),
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line} in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
        // Without -c 1 there is no #wrong family at all.
        let rows = [Row {
            in_place: None,
            out_of_place: m(1000.0, None),
            ..rows[0].clone()
        }];
        assert!(!render(&t, &rows, 1, None).contains("vl_coll_wrong_elements"));
    }
}
