//! `--output table`: the run's parameters and its rows as two tables, with every statistic the
//! text layout leaves out (median, p99.99, the sample count). Markdown-style tables, so the
//! output reads in a terminal and renders when pasted into an issue or a CI summary.

use comfy_table::{presets, CellAlignment, Table};

use super::{cfix, BwUnit};
use crate::result::{Metric, Rows, RunInfo, RunResult, TestKind};

/// Both tables, each preceded by a title line, with a final newline.
pub fn render_table(result: &RunResult, report_gbits: bool) -> String {
    let info = &result.info;
    let unit = BwUnit::new(report_gbits);
    format!(
        "{} — {} {}\n\n{}\n\n{}\n",
        super::text::title(info),
        info.tool,
        info.version,
        parameters(info),
        rows(result, unit)
    )
}

fn new_table() -> Table {
    let mut t = Table::new();
    t.load_style(presets::ASCII_MARKDOWN);
    // Never look at the terminal: the same result renders the same everywhere.
    t.force_no_tty();
    t
}

fn parameters(info: &RunInfo) -> Table {
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
                info.qps,
                if info.qps == 1 { "" } else { "s" }
            ),
        ),
        ("MTU", format!("{} B", info.mtu)),
        ("TX depth", info.tx_depth.to_string()),
    ];
    if info.test == TestKind::Send {
        p.push(("RX depth", info.rx_depth.to_string()));
    }
    if info.metric == Metric::Bw {
        p.push(("CQ moderation", info.cq_moderation.to_string()));
    }
    if info.post_list > 1 {
        p.push(("post list", info.post_list.to_string()));
    }
    match info.test {
        TestKind::Read | TestKind::Atomic => {
            p.push(("outstanding reads", info.outstanding_reads.to_string()))
        }
        _ => p.push(("max inline", format!("{} B", info.max_inline))),
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
    p.push((
        "CPU",
        match &info.cpu {
            Some((cpu, why)) => format!("{cpu} ({why})"),
            None => "not pinned".into(),
        },
    ));
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

fn rows(result: &RunResult, unit: BwUnit) -> Table {
    let mut t = new_table();
    match &result.rows {
        Rows::Bw(rows) => {
            let u = unit.label();
            t.set_header(vec![
                "bytes".to_string(),
                "iterations".to_string(),
                format!("BW peak [{u}]"),
                format!("BW average [{u}]"),
                "msg rate [Mpps]".to_string(),
            ]);
            let prec = |x: f64| {
                if unit == BwUnit::Gbps && x < 0.1 {
                    6
                } else {
                    2
                }
            };
            for r in rows {
                let (peak, avg) = (unit.convert(r.peak_bps), unit.convert(r.avg_bps));
                t.add_row(vec![
                    r.bytes.to_string(),
                    r.iterations.to_string(),
                    cfix(peak, 0, prec(avg)),
                    cfix(avg, 0, prec(avg)),
                    cfix(r.msg_rate_mpps, 0, 6),
                ]);
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
                for x in [
                    st.min_us,
                    st.median_us,
                    st.avg_us,
                    st.stdev_us,
                    st.p99_us,
                    st.p999_us,
                    st.p9999_us,
                    st.max_us,
                ] {
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
