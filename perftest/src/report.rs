//! Turning a [`RunResult`](crate::measure::result::RunResult) into text: perftest's layout, a table, JSON
//! and CSV.
//!
//! Every format is a pure function of the result (and the bandwidth unit), so each has a golden
//! test; [`crate::output::Reporter`] streams the text layout through the same functions.
//!
//! | format | for | what it holds |
//! |---|---|---|
//! | [`render_text`] | people and existing perftest parsers | perftest's header, columns and precision |
//! | [`render_table`] | people | a parameter table and every statistic (p99.99 too) |
//! | [`render_json`] | programs | one document: tool, version, run parameters, every row |
//! | [`render_csv`] | spreadsheets | one header line, one line per row |
//! | [`render_perftest_json`] | readers of perftest's `--out_json` file | perftest's keys: `test_info`, `results` |
//! | [`plot::render_svg`] | people | `--plot`: an SVG chart of a sweep, drawn from the JSON |
//! | [`openmetrics::render`] | Prometheus, node_exporter's textfile collector | `--openmetrics`: rows, counter deltas, gate verdicts |
//!
//! The `--json` layout is declared once, in [`schema`]: [`render_json`] writes it, and
//! `vl_bench::jsoncheck::check_report` (`vl_jsoncheck`) reads a report back into it and checks it.
//!
//! ## Multi-process runs (`--procs N`)
//! Each format has a `render_*_procs` variant taking the processes
//! ([`ProcessResult`](crate::measure::result::ProcessResult)) beside the totals, which stay where a
//! single-process run puts its rows. JSON: the top level `{"tool", "version", "format", "run",
//! "results"}` gains `"processes": [{"process": N, "pid": .., "cpu": .., "results": [..]}, ..]`.
//! CSV: the first column, `process`, is `all` for the totals and 0..N-1 for each process's line.
//! Text: a `#procI` line per process before each total row, skipped by parsers that read rows by
//! their leading number. Table: a `process` column. Readers that select by key or column name
//! keep working, and the gates check the totals.

use std::fmt::Write as _;

use crate::measure::result::{to_gbits, to_mib_per_sec};

mod csv;
pub mod cycles;
mod json;
pub mod openmetrics;
pub mod perftest_json;
pub mod plot;
pub mod schema;
mod table;
pub mod text;

pub use csv::{render_csv, render_csv_procs};
pub use json::pretty_json;
pub use json::{render_json, render_json_counters, render_json_procs, FORMAT_VERSION};
pub use perftest_json::render_perftest_json;
pub use table::{render_table, render_table_procs};
pub use text::{render_text, render_text_procs};

/// perftest's `--output=UNITS`: print only this number per result, nothing else on stdout.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verbosity {
    /// BW average, in MiB/s (Gb/s with --report_gbits), as `%lf`.
    #[value(name = "bandwidth")]
    Bandwidth,
    /// MsgRate in Mpps, as `%lf`.
    #[value(name = "message_rate")]
    MessageRate,
    /// t_avg in microseconds, as `%lf`.
    #[value(name = "latency")]
    Latency,
}

impl Verbosity {
    /// perftest's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Verbosity::Bandwidth => "bandwidth",
            Verbosity::MessageRate => "message_rate",
            Verbosity::Latency => "latency",
        }
    }
}

/// The unit bandwidth is reported in: perftest's MiB/s (2^20 bytes), or Gb/s (10^9 bits) with
/// `--report_gbits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BwUnit {
    MiBps,
    Gbps,
}

impl BwUnit {
    pub fn new(report_gbits: bool) -> BwUnit {
        if report_gbits {
            BwUnit::Gbps
        } else {
            BwUnit::MiBps
        }
    }

    /// Bytes per second in this unit.
    pub fn convert(self, bytes_per_sec: f64) -> f64 {
        match self {
            BwUnit::MiBps => to_mib_per_sec(bytes_per_sec),
            BwUnit::Gbps => to_gbits(bytes_per_sec),
        }
    }

    /// perftest's spelling, as in `BW average[MiB/sec]`.
    pub fn label(self) -> &'static str {
        match self {
            BwUnit::MiBps => "MiB/sec",
            BwUnit::Gbps => "Gb/sec",
        }
    }

    /// The unit as the `--json` report names it (`"report_unit"`): `MiB/s` or `Gb/s`.
    pub fn name(self) -> &'static str {
        match self {
            BwUnit::MiBps => "MiB/s",
            BwUnit::Gbps => "Gb/s",
        }
    }

    /// The unit a `--json` report names ([`BwUnit::name`]); MiB/s, the default, for any other.
    pub fn from_name(name: Option<&str>) -> BwUnit {
        match name {
            Some(n) if n == BwUnit::Gbps.name() => BwUnit::Gbps,
            _ => BwUnit::MiBps,
        }
    }

    /// perftest's choice of row format: a Gb/s average below 0.1 takes the extended one
    /// (`REPORT_FMT_EXT`, six decimals), so that a slow link does not read 0.00.
    pub(crate) fn extended(self, avg: f64) -> bool {
        self == BwUnit::Gbps && avg < 0.1
    }

    /// Decimals of a bandwidth as the text row, the table and perftest's JSON show it, for a
    /// row whose average is `avg`: 6 in the extended format, else 2.
    pub(crate) fn shown_decimals(self, avg: f64) -> usize {
        if self.extended(avg) {
            6
        } else {
            2
        }
    }

    /// The suffix of CSV columns and JSON keys: `mib_s` or `gbit_s`.
    pub fn key(self) -> &'static str {
        match self {
            BwUnit::MiBps => "mib_s",
            BwUnit::Gbps => "gbit_s",
        }
    }

    /// Decimals that resolve about 1 KiB/s or 1 kbit/s.
    pub(crate) fn decimals(self) -> usize {
        match self {
            BwUnit::MiBps => 3,
            BwUnit::Gbps => 6,
        }
    }
}

/// One QP's endpoint as the header's `local address:` / `remote address:` lines show it, in
/// perftest's layout: `LID 0000 QPN 0x0011 PSN 0x3a5b1c RKey 0x00001234 VAddr 0x00007f0000001000`.
///
/// `out_reads` is printed for read tests (perftest's `OUT`), `rdma` = (rkey, vaddr) for tests
/// whose peer accesses this memory (write, read, atomic). The engine stores these strings in
/// `RunInfo::local_endpoints` / `remote_endpoints`; the GID line comes from `RunInfo::gid`.
pub fn endpoint_line(
    lid: u16,
    qpn: u32,
    psn: u32,
    out_reads: Option<u32>,
    rdma: Option<(u32, u64)>,
) -> String {
    let mut s = format!(
        "LID {} QPN {} PSN {}",
        c_alt_hex(lid.into(), 4),
        c_alt_hex(qpn.into(), 6),
        c_alt_hex(psn.into(), 6)
    );
    if let Some(o) = out_reads {
        let _ = write!(s, " OUT {}", c_alt_hex(o.into(), 4));
    }
    if let Some((rkey, vaddr)) = rdma {
        // A region registered without remote rights (least privilege: the write client's
        // source) has rkey 0 on rxe, which C's %#08x prints as "00000000". perftest never
        // shows that (its MRs always carry remote rights), and parsers of its output expect
        // "0x": keep the prefix so they read the line unchanged.
        let rkey = match rkey {
            0 => "0x000000".to_string(),
            k => c_alt_hex(k.into(), 8),
        };
        let _ = write!(s, " RKey {rkey} VAddr {}", c_alt_hex(vaddr, 16));
    }
    s
}

/// C's `%#0Nx`: zero-padded to `width` characters, the `0x` prefix counted in the width and
/// left out for zero (so LID 0 prints `0000`, QPN 0x11 with width 6 prints `0x0011`).
fn c_alt_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{:#0width$x}", v)
    }
}

/// C's `%-W.Pf`: like Rust's `{:<W.P}`, but non-finite values print as C prints them
/// (`nan`, `inf`, `-inf`) rather than `NaN`.
pub(crate) fn cfix(x: f64, width: usize, prec: usize) -> String {
    if x.is_finite() {
        format!("{x:<width$.prec$}")
    } else {
        let s = if x.is_nan() {
            "nan"
        } else if x > 0.0 {
            "inf"
        } else {
            "-inf"
        };
        format!("{s:<width$}")
    }
}

/// `x` rounded to `decimals` places, so JSON prints `11034.16`, not `11034.160000000002`.
/// A value too small for `decimals` places keeps 6 significant digits instead of becoming 0 (a
/// few bytes over a slow interval are still a positive bandwidth). Non-finite values pass
/// through (JSON prints them as `null`).
pub(crate) fn round_to(x: f64, decimals: usize) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let at = |places: i32| {
        let scale = 10f64.powi(places);
        let r = (x * scale).round() / scale;
        if r.is_finite() {
            r
        } else {
            x
        }
    };
    let r = at(decimals as i32);
    if r == 0.0 && x != 0.0 {
        // 6 significant digits: the first one is 10^floor(log10 |x|).
        let first = x.abs().log10().floor() as i32;
        at((5 - first).min(300))
    } else {
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_line_matches_perftest_printf() {
        // Values checked against printf(1): "%#04x %#06x %#06x %#08x %#016x".
        assert_eq!(
            endpoint_line(0, 0x11, 0x123456, None, Some((0x1234, 0x7f00_0000_0000))),
            "LID 0000 QPN 0x0011 PSN 0x123456 RKey 0x001234 VAddr 0x007f0000000000"
        );
        assert_eq!(
            endpoint_line(1, 0x1c2, 0x5, Some(16), None),
            "LID 0x01 QPN 0x01c2 PSN 0x0005 OUT 0x10"
        );
        // No remote rights, no rkey: still "0x…", so perftest's parsers read the line.
        assert_eq!(
            endpoint_line(0, 0x10e, 0x6543b, None, Some((0, 0x55e5_9892_b000))),
            "LID 0000 QPN 0x010e PSN 0x6543b RKey 0x000000 VAddr 0x0055e59892b000"
        );
    }

    #[test]
    fn c_float_formatting() {
        assert_eq!(cfix(0.125, 7, 2), "0.12   ", "ties to even, like glibc");
        assert_eq!(cfix(f64::NAN, 7, 2), "nan    ");
        assert_eq!(cfix(f64::NEG_INFINITY, 0, 2), "-inf");
        assert_eq!(cfix(11034.163, 7, 2), "11034.16");
    }

    #[test]
    fn rounding_for_json() {
        assert_eq!(round_to(11034.160000000002, 3).to_string(), "11034.16");
        assert!(round_to(f64::NAN, 3).is_nan());
        assert_eq!(round_to(f64::MAX, 3), f64::MAX);
        // Too small for 6 places: 6 significant digits, never 0.
        assert_eq!(round_to(4.2345678e-8, 6), 4.23457e-8);
        assert_eq!(round_to(-4.2345678e-8, 6), -4.23457e-8);
        assert_eq!(round_to(0.0, 6), 0.0);
        assert_eq!(round_to(0.0000004, 6), 0.0000004);
    }
}
