//! `--format table`: the run's parameters and its rows as two tables, with every statistic the
//! text layout leaves out (median, p99.99, the sample count). Markdown-style tables, so the
//! output reads in a terminal and renders when pasted into an issue or a CI summary.

use comfy_table::{presets, CellAlignment, Table};

use super::{cfix, BwUnit};
use crate::measure::result::{BwRow, Metric, ProcessResult, Rows, RunInfo, RunResult, TestKind};

/// Both tables, each preceded by a title line, with a final newline.
pub fn render_table(result: &RunResult, report_gbits: bool) -> String {
    render_table_procs(result, &[], report_gbits)
}

/// The tables of a `--procs N` run: the parameters name the processes and their CPUs, and the
/// results table gains a first column `process` (0..N-1 for each process, `all` for the sum).
/// Without processes, exactly [`render_table`].
pub fn render_table_procs(
    result: &RunResult,
    procs: &[ProcessResult],
    report_gbits: bool,
) -> String {
    let info = &result.info;
    let unit = BwUnit::new(report_gbits);
    format!(
        "{} — {} {}\n\n{}\n\n{}\n",
        super::text::title(info),
        info.tool,
        info.version,
        parameters(info, procs),
        rows(result, procs, unit)
    )
}

fn new_table() -> Table {
    let mut t = Table::new();
    t.load_style(presets::ASCII_MARKDOWN);
    // Never look at the terminal: the same result renders the same everywhere.
    t.force_no_tty();
    t
}

fn parameters(info: &RunInfo, procs: &[ProcessResult]) -> Table {
    let mut p: Vec<(&str, String)> = vec![
        ("role", info.role.clone()),
        (
            "device",
            format!(
                "{} port {} ({})",
                info.device, info.ib_port, info.link_layer
            ),
        ),
        ("GID", format!("{} (index {})", info.gid, info.gid_index)),
        ("remote GID", info.remote_gid.clone()),
        (
            "connection",
            format!(
                "{}, {} QP{}",
                info.conn_type,
                info.qp.qps,
                if info.qp.qps == 1 { "" } else { "s" }
            ),
        ),
        ("MTU", format!("{} B", info.qp.mtu)),
        ("TX depth", info.qp.tx_depth.to_string()),
    ];
    if info.test == TestKind::Send {
        p.push(("RX depth", info.qp.rx_depth.to_string()));
    }
    if info.metric == Metric::Bw {
        p.push(("CQ moderation", info.qp.cq_moderation.to_string()));
    }
    if info.qp.post_list > 1 {
        p.push(("post list", info.qp.post_list.to_string()));
    }
    match info.test {
        TestKind::Read | TestKind::Atomic => {
            p.push(("outstanding reads", info.qp.outstanding_reads.to_string()))
        }
        _ => p.push(("max inline", format!("{} B", info.qp.max_inline))),
    }
    if let Some(a) = &info.atomic_type {
        p.push(("atomic", a.clone()));
    }
    let on = |b: bool| if b { "yes" } else { "no" }.to_string();
    p.push(("bidirectional", on(info.bidirectional)));
    p.push((
        "completions",
        if info.use_events { "events" } else { "polling" }.into(),
    ));
    match info.duration {
        Some(d) => p.push(("duration", format!("{} s", d.as_secs_f64()))),
        None => p.push(("iterations", info.iterations.to_string())),
    }
    p.push(("warm-up iterations", info.warmup_iterations.to_string()));
    p.push(("QP timeout", info.qp_timeout.to_string()));
    let cpu = |c: &Option<(usize, String)>| match c {
        Some((cpu, why)) => format!("{cpu} ({why})"),
        None => "not pinned".into(),
    };
    if procs.is_empty() {
        p.push(("CPU", cpu(&info.cpu)));
    } else {
        p.push(("processes", procs.len().to_string()));
        for pr in procs {
            p.push((
                "process",
                format!("{}: pid {}, CPU {}", pr.process, pr.pid, cpu(&pr.cpu)),
            ));
        }
    }
    for (side, eps) in [
        ("local QP", &info.local_endpoints),
        ("remote QP", &info.remote_endpoints),
    ] {
        for ep in eps {
            p.push((side, ep.clone()));
        }
    }

    let mut t = new_table();
    t.set_header(vec!["parameter", "value"]);
    for (k, v) in p {
        t.add_row(vec![k.to_string(), v]);
    }
    t
}

fn rows(result: &RunResult, procs: &[ProcessResult], unit: BwUnit) -> Table {
    let mut t = new_table();
    match &result.rows {
        Rows::Bw(rows) => {
            let u = unit.label();
            let mut header = Vec::new();
            if !procs.is_empty() {
                header.push("process".to_string());
            }
            header.extend([
                "bytes".to_string(),
                "iterations".to_string(),
                format!("BW peak [{u}]"),
                format!("BW average [{u}]"),
                "msg rate [Mpps]".to_string(),
            ]);
            t.set_header(header);
            let cells = |process: Option<String>, r: &BwRow| {
                let (peak, avg) = (unit.convert(r.peak_bps), unit.convert(r.avg_bps));
                let mut c: Vec<String> = process.into_iter().collect();
                c.extend([
                    r.bytes.to_string(),
                    r.iterations.to_string(),
                    cfix(peak, 0, unit.shown_decimals(avg)),
                    cfix(avg, 0, unit.shown_decimals(avg)),
                    cfix(r.msg_rate_mpps, 0, 6),
                ]);
                c
            };
            let sums = crate::measure::aggregate::aggregate(procs).unwrap_or_default();
            for (j, r) in rows.iter().enumerate() {
                for p in procs {
                    if let Some(pr) = p.rows.get(j) {
                        t.add_row(cells(Some(p.process.to_string()), pr));
                    }
                }
                if let Some(s) = sums.get(j) {
                    t.add_row(cells(Some("sum".to_string()), &s.sum));
                }
                t.add_row(cells((!procs.is_empty()).then(|| "all".to_string()), r));
            }
        }
        Rows::Lat(rows) => {
            let duration = result.info.duration.is_some();
            let mut header: Vec<&str> = vec![
                "bytes",
                "iterations",
                "samples",
                "min [usec]",
                "median [usec]",
                "avg [usec]",
                "stdev [usec]",
                "p99 [usec]",
                "p99.9 [usec]",
                "p99.99 [usec]",
                "max [usec]",
            ];
            if duration {
                header.push("tps");
            }
            t.set_header(header);
            for r in rows {
                let st = &r.stats;
                let mut cells = vec![
                    r.bytes.to_string(),
                    r.iterations.to_string(),
                    st.samples.to_string(),
                ];
                for x in st.columns_us() {
                    cells.push(cfix(x, 0, 2));
                }
                if duration {
                    cells.push(cfix(r.tps.unwrap_or(f64::NAN), 0, 2));
                }
                t.add_row(cells);
            }
        }
    }
    // Every column is a number: right-aligned, so digits line up.
    for c in t.column_iter_mut() {
        c.set_cell_alignment(CellAlignment::Right);
    }
    t
}
