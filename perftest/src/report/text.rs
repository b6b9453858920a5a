//! perftest's text layout, byte for byte where parsers look: the 87-dash separators, the column
//! header lines, and the row formats with perftest's widths, precision and tabs
//! (`REPORT_FMT`, `REPORT_FMT_EXT`, `REPORT_FMT_LAT`, `REPORT_FMT_LAT_DUR` in
//! `perftest_parameters.h`). Scripts that split ib_write_bw's rows on whitespace read ours.
//!
//! The header has perftest 6.x's lines in perftest's order and words (Debian 12's 6.06 layout:
//! `PCIe relax order` and `ibv_wr* API` without upstream's second columns), GID bytes in decimal
//! as perftest prints them; our own lines (`CPU pinned`, `Processes`) come after perftest's last
//! (`Data ex. method`). The numbers differ where perftest is wrong: t_max is the true maximum and
//! t_stdev keeps its fraction (see `measure/stats.rs`).
//! p99.99 and the median's neighbours live in the table, JSON and CSV, never here.

use std::fmt::Write as _;
use std::str::FromStr;

use verbs_lab::verbs::Gid;

use super::{cfix, BwUnit};
use crate::measure::aggregate::SizeTotal;
use crate::measure::result::{
    BwRow, LatRow, Metric, ProcessResult, Rows, RunInfo, RunResult, TestKind,
};

/// perftest's `RESULT_LINE`: 87 dashes.
pub const SEPARATOR: &str =
    "---------------------------------------------------------------------------------------";

/// What perftest's server prints before it waits for the client (with the empty line before).
pub const WAITING_BANNER: &str = "\n************************************\n\
                                  * Waiting for client to connect... *\n\
                                  ************************************\n";

/// The whole text report: [`header`], every row, [`footer`] — exactly what the
/// [`Reporter`](crate::output::Reporter) streams.
pub fn render_text(result: &RunResult, report_gbits: bool) -> String {
    let unit = BwUnit::new(report_gbits);
    let info = &result.info;
    let mut out = header(info, unit);
    match &result.rows {
        Rows::Bw(rows) => rows.iter().for_each(|r| out.push_str(&bw_row(r, unit))),
        Rows::Lat(rows) => rows.iter().for_each(|r| out.push_str(&lat_row(info, r))),
    }
    out.push_str(&footer(info));
    out
}

/// The text report of a `--procs N` run: the header (with a `CPU pinned` line per process),
/// then for each size a `#procI` line per process, the `#sum` line, and the aggregate over one
/// interval in the normal row format, then the footer. A parser of ib_write_bw's output that
/// takes the lines starting with a number after `#bytes` reads exactly the aggregates.
pub fn render_text_procs(
    result: &RunResult,
    procs: &[ProcessResult],
    report_gbits: bool,
) -> String {
    let unit = BwUnit::new(report_gbits);
    let info = &result.info;
    let mut out = header_procs(info, procs, unit);
    match &result.rows {
        Rows::Bw(rows) => out.push_str(&procs_rows(rows, procs, unit)),
        Rows::Lat(rows) => rows.iter().for_each(|r| out.push_str(&lat_row(info, r))),
    }
    out.push_str(&footer(info));
    out
}

/// For each size: one [`proc_row`] per process that measured it, the [`sum_row`] (when the
/// processes' intervals are known), then the total's [`bw_row`].
pub fn procs_rows(totals: &[BwRow], procs: &[ProcessResult], unit: BwUnit) -> String {
    let sums = crate::measure::aggregate::aggregate(procs).unwrap_or_default();
    let mut out = String::new();
    for (j, total) in totals.iter().enumerate() {
        for p in procs {
            if let Some(r) = p.rows.get(j) {
                out.push_str(&proc_row(p, r, unit));
            }
        }
        if let Some(t) = sums.get(j) {
            out.push_str(&sum_row(t, unit));
        }
        out.push_str(&bw_row(total, unit));
    }
    out
}

/// The `#sum` line of a size: the plain sum of the processes' own rows, labelled, then how
/// long all of them ran at once. The result row below it is the aggregate over one interval.
pub fn sum_row(t: &SizeTotal, unit: BwUnit) -> String {
    let r = bw_row(&t.sum, unit);
    format!(
        "#sum{}\tsum of the processes' own averages; all ran at once for {:.3} of the {:.3} ms \
         from the first start to the last end ({:.1}%)\n",
        r.trim_end_matches('\n'),
        t.overlap.as_secs_f64() * 1e3,
        t.union.len().as_secs_f64() * 1e3,
        100.0 * t.overlap_fraction()
    )
}

/// One process's row of a `--procs` run: `#procI` glued to the normal row, then a tab and
/// `cpu C pid P` (`cpu -` when not pinned). It starts with `#`, so parsers that read rows by
/// their leading number skip it; split on whitespace, its fields 2-6 are the row's 1-5.
pub fn proc_row(p: &ProcessResult, row: &BwRow, unit: BwUnit) -> String {
    let r = bw_row(row, unit);
    let cpu = p
        .cpu
        .as_ref()
        .map_or_else(|| "-".to_string(), |(c, _)| c.to_string());
    format!(
        "#proc{}{}\tcpu {cpu} pid {}\n",
        p.process,
        r.trim_end_matches('\n'),
        p.pid
    )
}

/// perftest's test title: `RDMA_Write BW Test`, `Atomic FETCH_AND_ADD Bidirectional BW Test`,
/// `Send Latency Test`.
pub fn title(info: &RunInfo) -> String {
    let mut t = match info.with_imm {
        // perftest's names of the tests with --send_with_imm and --write_with_imm.
        true => format!("{}_imm ", info.test.perftest_name()),
        false => format!("{} ", info.test.perftest_name()),
    };
    if info.test == TestKind::Atomic {
        if let Some(a) = &info.atomic_type {
            let _ = write!(t, "{a} ");
        }
    }
    match info.metric {
        Metric::Bw => {
            if info.bidirectional {
                t.push_str("Bidirectional ");
            }
            if info.qp.post_list > 1 {
                t.push_str("Post List ");
            }
            t.push_str("BW ");
        }
        Metric::Lat => t.push_str("Latency "),
    }
    t.push_str("Test");
    t
}

/// The header block: parameters, the QP endpoints, and the column header line.
pub fn header(info: &RunInfo, unit: BwUnit) -> String {
    header_procs(info, &[], unit)
}

/// [`header`] of a `--procs` run: the `CPU pinned` line becomes a `Processes` line and one
/// `CPU pinned` line per process (`process I: CPU (why)`). Without processes, [`header`].
pub fn header_procs(info: &RunInfo, procs: &[ProcessResult], unit: BwUnit) -> String {
    let mut s = String::new();
    s.push_str(SEPARATOR);
    s.push('\n');
    let _ = writeln!(s, "                    {}", title(info));
    if info.use_events {
        let _ = writeln!(s, " Test with events. Using {}_comp0", info.device);
    }
    let _ = writeln!(
        s,
        " Dual-port       : OFF\t\tDevice         : {}",
        info.device
    );
    let _ = writeln!(
        s,
        " Number of qps   : {}\t\tTransport type : IB",
        info.qp.qps
    );
    let _ = writeln!(
        s,
        " Connection type : {}\t\tUsing SRQ      : OFF",
        info.conn_type
    );
    // Memory is never registered with relaxed ordering; posts go through ibv_post_send.
    s.push_str(" PCIe relax order: OFF\n");
    s.push_str(" ibv_wr* API     : OFF\n");
    if info.perftest_shows_tx_depth() {
        line(&mut s, "TX depth", &info.qp.tx_depth);
    }
    if info.qp.post_list > 1 {
        line(&mut s, "Post List", &info.qp.post_list);
    }
    if info.qp.recv_post_list > 1 {
        line(&mut s, "Recv Post List", &info.qp.recv_post_list);
    }
    if info.perftest_shows_rx_depth() {
        line(&mut s, "RX depth", &info.qp.rx_depth);
    }
    if info.metric == Metric::Bw {
        line(&mut s, "CQ Moderation", &info.qp.cq_moderation);
    }
    line(&mut s, "Mtu", &format_args!("{}[B]", info.qp.mtu));
    line(&mut s, "Link type", &info.link_layer);
    line(&mut s, "GID index", &info.gid_index);
    if matches!(info.test, TestKind::Read | TestKind::Atomic) {
        line(&mut s, "Outstand reads", &info.qp.outstanding_reads);
    } else {
        line(
            &mut s,
            "Max inline data",
            &format_args!("{}[B]", info.qp.max_inline),
        );
    }
    let _ = writeln!(
        s,
        " rdma_cm QPs\t : {}",
        if info.rdma_cm { "ON" } else { "OFF" }
    );
    // perftest's words for an exchange over a TCP socket; ours is the verbs-lab protocol.
    line(&mut s, "Data ex. method", &"Ethernet");
    cpu_lines(&mut s, info, procs);
    s.push_str(SEPARATOR);
    s.push('\n');
    endpoint_lines(&mut s, info);
    s.push_str(SEPARATOR);
    s.push('\n');
    if !passive(info) {
        s.push_str(&column_header(info, unit));
        s.push('\n');
    }
    s
}

/// One `key: value` line of the header, the key padded as perftest's.
fn line(s: &mut String, key: &str, value: &dyn std::fmt::Display) {
    let _ = writeln!(s, " {key:<16}: {value}");
}

/// The header's `CPU pinned` line, or with `--procs` its `Processes` line and one `CPU pinned`
/// line per process.
fn cpu_lines(s: &mut String, info: &RunInfo, procs: &[ProcessResult]) {
    let pinned = |cpu: &Option<(usize, String)>| match cpu {
        Some((cpu, why)) => format!("{cpu} ({why})"),
        None => "no".to_string(),
    };
    if procs.is_empty() {
        line(s, "CPU pinned", &pinned(&info.cpu));
    } else {
        line(
            s,
            "Processes",
            &format_args!(
                "{} (--procs: a #proc row per process, their #sum, then the aggregate over one \
                 interval)",
                procs.len()
            ),
        );
        for p in procs {
            let cpu = pinned(&p.cpu);
            line(
                s,
                "CPU pinned",
                &format_args!("process {}: {cpu}", p.process),
            );
        }
    }
}

/// The header's QP endpoints, each side's followed by its GID (when it has one).
fn endpoint_lines(s: &mut String, info: &RunInfo) {
    for (side, endpoints, gid) in [
        ("local", &info.local_endpoints, &info.gid),
        ("remote", &info.remote_endpoints, &info.remote_gid),
    ] {
        for ep in endpoints {
            let _ = writeln!(s, " {side} address: {ep}");
            if !gid.is_empty() {
                let _ = writeln!(s, " GID: {}", gid_bytes(gid));
            }
        }
    }
}

/// The server of a read or atomic latency test: it only serves the client's operations and,
/// like perftest's, prints no column header, no row and no closing separator.
pub fn passive(info: &RunInfo) -> bool {
    info.role == "server"
        && info.metric == Metric::Lat
        && matches!(info.test, TestKind::Read | TestKind::Atomic)
}

/// The 16 bytes of a GID as perftest prints them: colon-separated, each in decimal with at
/// least two digits (`%02d`: `...:255:255:192:168:77:01`); text that is not a GID is printed as
/// given.
fn gid_bytes(gid: &str) -> String {
    match Gid::from_str(gid) {
        Ok(g) => {
            g.0.iter()
                .map(|b| format!("{b:02}"))
                .collect::<Vec<_>>()
                .join(":")
        }
        Err(_) => gid.to_string(),
    }
}

/// The column header line (perftest's `RESULT_FMT`, `RESULT_FMT_G`, `RESULT_FMT_LAT`,
/// `RESULT_FMT_LAT_DUR`), without the newline.
pub fn column_header(info: &RunInfo, unit: BwUnit) -> String {
    match info.metric {
        Metric::Bw => bw_column_header(unit),
        Metric::Lat if info.duration.is_some() => {
            " #bytes        #iterations       t_avg[usec]    tps average".to_string()
        }
        Metric::Lat => " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    \
                         t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% \
                         percentile[usec] "
            .to_string(),
    }
}

/// perftest's `RESULT_FMT` / `RESULT_FMT_G`, without the newline.
fn bw_column_header(unit: BwUnit) -> String {
    let u = unit.label();
    format!(" #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]")
}

/// A text row with perftest's CPU column (`REPORT_EXT_CPU_UTIL`) when there is one.
pub fn with_cpu(row: String, util: Option<f64>) -> String {
    match util {
        Some(u) => format!("{}\t    {}\n", row.trim_end_matches('\n'), cfix(u, 3, 2)),
        None => row,
    }
}

/// perftest's two bandwidth row formats: where they differ (the iterations' width, the gaps
/// and the bandwidths' decimals), the rest of the row is the same.
struct BwRowFormat {
    iters_width: usize,
    after_iters: &'static str,
    bw_decimals: usize,
    after_avg: &'static str,
}

/// perftest's `REPORT_FMT`.
const REPORT_FMT: BwRowFormat = BwRowFormat {
    iters_width: 10,
    after_iters: "       ",
    bw_decimals: 2,
    after_avg: "\t\t     ",
};

/// perftest's `REPORT_FMT_EXT`.
const REPORT_FMT_EXT: BwRowFormat = BwRowFormat {
    iters_width: 0,
    after_iters: "           ",
    bw_decimals: 6,
    after_avg: "            ",
};

/// One bandwidth row, newline included. Like perftest, a Gb/s average below 0.1 is printed
/// with six decimals (`REPORT_FMT_EXT`) so slow links do not read 0.00.
pub fn bw_row(row: &BwRow, unit: BwUnit) -> String {
    let peak = unit.convert(row.peak_bps);
    let avg = unit.convert(row.avg_bps);
    let f = if unit.extended(avg) {
        &REPORT_FMT_EXT
    } else {
        &REPORT_FMT
    };
    format!(
        " {:<7}    {:<w$}{}{}            {}{}{}\n",
        row.bytes,
        row.iterations,
        f.after_iters,
        cfix(peak, 7, f.bw_decimals),
        cfix(avg, 7, f.bw_decimals),
        f.after_avg,
        cfix(row.msg_rate_mpps, 7, 6),
        w = f.iters_width
    )
}

/// One latency row, newline included: perftest's nine columns, or its duration-mode four
/// (`#bytes #iterations t_avg tps`) when the run had a duration.
pub fn lat_row(info: &RunInfo, row: &LatRow) -> String {
    let st = &row.stats;
    if info.duration.is_some() {
        return format!(
            " {:<7}       {}            {}        {}\n",
            row.bytes,
            row.iterations,
            cfix(st.avg_us, 7, 2),
            cfix(row.tps.unwrap_or(f64::NAN), 7, 2)
        );
    }
    format!(
        " {:<7} {}          {}        {}      {}  \t       {}     \t{}\t\t{} \t\t{}\n",
        row.bytes,
        row.iterations,
        cfix(st.min_us, 7, 2),
        cfix(st.max_us, 7, 2),
        cfix(st.median_us, 7, 2),
        cfix(st.avg_us, 7, 2),
        cfix(st.stdev_us, 7, 2),
        cfix(st.p99_us, 7, 2),
        cfix(st.p999_us, 7, 2)
    )
}

/// perftest's `--report-both` block after the rows of a `-b` run: "Local results" (this side's
/// direction) then "Remote results" (the peer's), each under its own separator and column
/// header, one row per size; with `--cpu_util`, each size's utilisation (`utils`) as in the
/// rows above.
pub fn directions(dirs: &[(BwRow, BwRow)], unit: BwUnit, utils: Option<&[f64]>) -> String {
    let mut s = String::new();
    for (title, remote) in [("Local", false), ("Remote", true)] {
        let _ = write!(s, "{SEPARATOR}\n\n {title} results: \n{SEPARATOR}\n");
        s.push_str(&bw_column_header(unit));
        s.push_str(if utils.is_some() {
            "    CPU_Util[%]\n"
        } else {
            "\n"
        });
        for (i, (l, r)) in dirs.iter().enumerate() {
            let row = bw_row(if remote { r } else { l }, unit);
            s.push_str(&with_cpu(row, utils.and_then(|u| u.get(i).copied())));
        }
    }
    s
}

/// One row as perftest's `--output=bandwidth|message_rate` prints it: the number alone, `%lf`.
pub fn bare_bw(row: &BwRow, v: super::Verbosity, unit: BwUnit) -> String {
    match v {
        super::Verbosity::MessageRate => format!("{}\n", cfix(row.msg_rate_mpps, 0, 6)),
        _ => format!("{}\n", cfix(unit.convert(row.avg_bps), 0, 6)),
    }
}

/// One row as perftest's `--output=latency` prints it: t_avg in microseconds alone, `%lf`.
pub fn bare_lat(row: &LatRow) -> String {
    format!("{}\n", cfix(row.stats.avg_us, 0, 6))
}

/// The closing separator (none on a [`passive`] server).
pub fn footer(info: &RunInfo) -> String {
    if passive(info) {
        String::new()
    } else {
        format!("{SEPARATOR}\n")
    }
}
