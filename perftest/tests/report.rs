//! Host tests of the report: golden files for every format, perftest compatibility of the text
//! layout, JSON validity, the streaming reporter, and the gates.
//!
//! Regenerate the goldens with `UPDATE_GOLDEN=1 cargo test -p verbs-lab-perftest --test report`
//! and review the diff by eye before committing.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{CommandFactory, Parser};
use serde_json::Value;
use verbs_lab::json::from_str_strict;
use vl_perftest::measure::result::{
    BwRow, LatRow, Metric, QpSettings, Rows, RunInfo, RunResult, TestKind,
};
use vl_perftest::measure::stats::LatStats;
use vl_perftest::output::check_applicable;
use vl_perftest::output::gates::EXIT_GATE_FAILED;
use vl_perftest::output::{
    check_gates, render_csv, render_json, render_perftest_json, render_table, render_text,
    GateOutcome, OutputArgs, OutputFormat, Reporter, Verbosity,
};
use vl_perftest::report::{endpoint_line, text};

// ---------------------------------------------------------------------------------------------
// Fixtures

const MIB: f64 = 1024.0 * 1024.0;

fn bw_info() -> RunInfo {
    RunInfo {
        tool: "vl_write_bw".into(),
        version: "0.1.0".into(),
        test: TestKind::Write,
        metric: Metric::Bw,
        role: "client".into(),
        conn_type: "RC".into(),
        device: "rxe0".into(),
        ib_port: 1,
        link_layer: "Ethernet".into(),
        gid_index: 1,
        gid: "::ffff:192.168.77.1".into(),
        remote_gid: "::ffff:192.168.77.2".into(),
        qp: QpSettings {
            mtu: 1024,
            qps: 1,
            tx_depth: 128,
            rx_depth: 512,
            post_list: 1,
            recv_post_list: 1,
            cq_moderation: 100,
            max_inline: 0,
            outstanding_reads: 16,
        },
        atomic_type: None,
        bidirectional: false,
        reversed: false,
        with_imm: false,
        use_events: false,
        duration: None,
        iterations: 5000,
        warmup_iterations: 100,
        cpu: Some((2, "NIC-local: rxe0 NUMA node 0 CPUs 0-3".into())),
        report_gbits: false,
        qp_timeout: 14,
        rdma_cm: false,
        local_endpoints: vec![endpoint_line(
            0,
            0x11,
            0x3a5b1c,
            None,
            Some((0x1a2b, 0x55d5_c0a0_1000)),
        )],
        remote_endpoints: vec![endpoint_line(
            0,
            0x12,
            0x0c4d2e,
            None,
            Some((0x2b3c, 0x5603_1f40_2000)),
        )],
    }
}

fn bw_row(bytes: u64, iterations: u64, peak_mib: f64, avg_mib: f64) -> BwRow {
    let avg_bps = avg_mib * MIB;
    BwRow {
        bytes,
        iterations,
        peak_bps: peak_mib * MIB,
        avg_bps,
        msg_rate_mpps: avg_bps / bytes as f64 / 1e6,
        elapsed: Duration::from_secs_f64(bytes as f64 * iterations as f64 / avg_bps),
    }
}

/// (a) a bandwidth sweep over three sizes, MiB/s.
fn bw_sweep() -> RunResult {
    RunResult {
        info: bw_info(),
        rows: Rows::Bw(vec![
            bw_row(2, 5000, 1.92, 1.87),
            bw_row(65536, 5000, 1187.44, 1163.05),
            bw_row(8388608, 5000, 1204.73, 1201.18),
        ]),
    }
}

/// (c) the same kind of sweep for --report_gbits, with a first row slow enough (below
/// 0.1 Gb/s) to take perftest's six-decimal format.
fn bw_gbits() -> RunResult {
    let mut info = bw_info();
    info.report_gbits = true;
    info.tool = "vl_read_bw".into();
    info.test = TestKind::Read;
    info.bidirectional = true;
    info.qp.qps = 2;
    info.local_endpoints = vec![
        endpoint_line(
            0,
            0x11,
            0x3a5b1c,
            Some(16),
            Some((0x1a2b, 0x55d5_c0a0_1000)),
        ),
        endpoint_line(
            0,
            0x13,
            0x1f0000,
            Some(16),
            Some((0x1a2b, 0x55d5_c0a0_1000)),
        ),
    ];
    info.remote_endpoints = vec![
        endpoint_line(
            0,
            0x12,
            0x0c4d2e,
            Some(16),
            Some((0x2b3c, 0x5603_1f40_2000)),
        ),
        endpoint_line(
            0,
            0x14,
            0x00beef,
            Some(16),
            Some((0x2b3c, 0x5603_1f40_2000)),
        ),
    ];
    let gb = 1e9 / 8.0; // bytes per second in one Gb/s
    let row = |bytes: u64, peak_gb: f64, avg_gb: f64| {
        let avg_bps = avg_gb * gb;
        BwRow {
            bytes,
            iterations: 1000,
            peak_bps: peak_gb * gb,
            avg_bps,
            msg_rate_mpps: avg_bps / bytes as f64 / 1e6,
            elapsed: Duration::from_secs_f64(bytes as f64 * 1000.0 / avg_bps),
        }
    };
    RunResult {
        info,
        rows: Rows::Bw(vec![
            row(2, 0.041234, 0.0401),
            row(4096, 3.25, 3.18),
            row(1048576, 9.87, 9.79),
        ]),
    }
}

fn lat_stats(base: f64) -> LatStats {
    LatStats {
        samples: 999,
        min_us: base,
        max_us: base * 31.7,
        median_us: base * 1.12,
        avg_us: base * 1.25,
        stdev_us: base * 0.734,
        p99_us: base * 3.4,
        p999_us: base * 12.9,
        p9999_us: base * 30.1,
    }
}

/// (b) a latency run, two sizes.
fn lat_run() -> RunResult {
    let info = RunInfo {
        tool: "vl_send_lat".into(),
        test: TestKind::Send,
        metric: Metric::Lat,
        role: "server".into(),
        qp: QpSettings {
            tx_depth: 1,
            ..bw_info().qp
        },
        iterations: 1000,
        warmup_iterations: 10,
        cpu: None,
        local_endpoints: vec![endpoint_line(0, 0x11, 0x3a5b1c, None, None)],
        remote_endpoints: vec![endpoint_line(0, 0x12, 0x0c4d2e, None, None)],
        ..bw_info()
    };
    RunResult {
        info,
        rows: Rows::Lat(vec![
            LatRow {
                bytes: 2,
                iterations: 1000,
                stats: lat_stats(8.12),
                tps: None,
            },
            LatRow {
                bytes: 4096,
                iterations: 1000,
                stats: lat_stats(15.5),
                tps: None,
            },
        ]),
    }
}

/// A duration-mode (`-D`) latency run: perftest's four-column layout.
fn lat_duration() -> RunResult {
    let mut r = lat_run();
    r.info.duration = Some(Duration::from_secs(5));
    if let Rows::Lat(rows) = &mut r.rows {
        for row in rows.iter_mut() {
            row.iterations = 512_345;
            row.stats.samples = 512_345;
            row.tps = Some(1e6 / (2.0 * row.stats.avg_us));
        }
    }
    r
}

// ---------------------------------------------------------------------------------------------
// Golden files

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Compares `actual` with the golden file `name`, or rewrites it under `UPDATE_GOLDEN=1`.
fn golden(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        let (n, (e, a)) = expected
            .lines()
            .chain(std::iter::repeat("<end>"))
            .zip(actual.lines().chain(std::iter::repeat("<end>")))
            .enumerate()
            .find(|(_, (e, a))| e != a)
            .unwrap_or((0, ("(line endings differ)", "")));
        panic!(
            "{} differs at line {}:\n  expected: {e:?}\n  actual:   {a:?}\n\
             (UPDATE_GOLDEN=1 regenerates; review the diff)\n--- actual ---\n{actual}",
            path.display(),
            n + 1
        );
    }
}

fn all_formats(name: &str, r: &RunResult, gbits: bool) {
    golden(&format!("{name}.txt"), &render_text(r, gbits));
    golden(&format!("{name}.table.md"), &render_table(r, gbits));
    golden(&format!("{name}.json"), &render_json(r, gbits));
    golden(&format!("{name}.csv"), &render_csv(r, gbits));
}

#[test]
fn golden_bw_sweep() {
    all_formats("bw_sweep", &bw_sweep(), false);
}

#[test]
fn golden_latency() {
    all_formats("lat", &lat_run(), false);
}

#[test]
fn golden_report_gbits() {
    all_formats("bw_gbits", &bw_gbits(), true);
}

#[test]
fn golden_latency_duration_mode() {
    golden("lat_duration.txt", &render_text(&lat_duration(), false));
    golden("lat_duration.csv", &render_csv(&lat_duration(), false));
}

// ---------------------------------------------------------------------------------------------
// perftest compatibility of the text layout

/// The lines a perftest parser looks for, verbatim from perftest_parameters.h.
const PERFTEST_BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
const PERFTEST_BW_HEADER_G: &str =
    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
const PERFTEST_LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  \
     t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% \
     percentile[usec] ";
const PERFTEST_LAT_DUR_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// The rows after the column header line, as a whitespace-splitting parser sees them.
fn parsed_rows(text: &str, header: &str) -> Vec<Vec<f64>> {
    let mut lines = text.lines().skip_while(|l| *l != header);
    assert_eq!(lines.next(), Some(header), "no column header in\n{text}");
    lines
        .take_while(|l| !l.starts_with("---"))
        .map(|l| {
            l.split_whitespace()
                .map(|w| {
                    w.parse::<f64>()
                        .unwrap_or_else(|_| panic!("{w:?} in {l:?}"))
                })
                .collect()
        })
        .collect()
}

#[test]
fn text_rows_parse_like_perftest_output() {
    let text = render_text(&bw_sweep(), false);
    let sep = "-".repeat(87);
    assert!(text.starts_with(&format!("{sep}\n")));
    assert!(text.ends_with(&format!("{sep}\n")));
    let rows = parsed_rows(&text, PERFTEST_BW_HEADER);
    assert_eq!(
        rows,
        vec![
            vec![2.0, 5000.0, 1.92, 1.87, 0.980419],
            vec![65536.0, 5000.0, 1187.44, 1163.05, 0.018609],
            vec![8388608.0, 5000.0, 1204.73, 1201.18, 0.000150],
        ]
    );
    // The exact bytes of perftest's REPORT_FMT, tabs included.
    assert!(
        text.contains(" 65536      5000             1187.44            1163.05\t\t     0.018609\n")
    );

    let text = render_text(&bw_gbits(), true);
    let rows = parsed_rows(&text, PERFTEST_BW_HEADER_G);
    assert_eq!(rows.len(), 3);
    assert_eq!(
        &rows[0][2..4],
        &[0.041234, 0.0401],
        "six decimals below 0.1 Gb/s"
    );
    assert_eq!(&rows[2][2..4], &[9.87, 9.79]);

    let text = render_text(&lat_run(), false);
    let rows = parsed_rows(&text, PERFTEST_LAT_HEADER);
    // bytes, iterations, t_min, t_max, t_typical, t_avg, t_stdev, p99, p99.9: nine columns,
    // t_max the true maximum and t_typical the median.
    assert_eq!(
        rows[0],
        vec![2.0, 1000.0, 8.12, 257.40, 9.09, 10.15, 5.96, 27.61, 104.75]
    );
    assert_eq!(rows.len(), 2);
    assert!(
        !text.contains("p99.99") && !text.contains("244.41"),
        "p99.99 stays out"
    );

    let text = render_text(&lat_duration(), false);
    let rows = parsed_rows(&text, PERFTEST_LAT_DUR_HEADER);
    assert_eq!(rows[0], vec![2.0, 512345.0, 10.15, 49261.08]);
}

#[test]
fn header_block_reads_like_perftest() {
    let text = render_text(&bw_sweep(), false);
    for line in [
        "                    RDMA_Write BW Test",
        " Dual-port       : OFF\t\tDevice         : rxe0",
        " Number of qps   : 1\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " TX depth        : 128",
        " CQ Moderation   : 100",
        " Mtu             : 1024[B]",
        " Link type       : Ethernet",
        " GID index       : 1",
        " Max inline data : 0[B]",
        " CPU pinned      : 2 (NIC-local: rxe0 NUMA node 0 CPUs 0-3)",
        " local address: LID 0000 QPN 0x0011 PSN 0x3a5b1c RKey 0x001a2b VAddr 0x0055d5c0a01000",
        " remote address: LID 0000 QPN 0x0012 PSN 0xc4d2e RKey 0x002b3c VAddr 0x0056031f402000",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:77:01",
        " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:77:02",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    // A send-latency server: RX depth, no CQ moderation, not pinned.
    let text = render_text(&lat_run(), false);
    assert!(text.contains("                    Send Latency Test\n"));
    assert!(text.contains(" RX depth        : 512\n"));
    assert!(!text.contains("CQ Moderation"));
    assert!(text.contains(" CPU pinned      : no\n"));
}

#[test]
fn titles() {
    let mut info = bw_info();
    info.bidirectional = true;
    assert_eq!(text::title(&info), "RDMA_Write Bidirectional BW Test");
    info.test = TestKind::Atomic;
    info.atomic_type = Some("FETCH_AND_ADD".into());
    info.bidirectional = false;
    info.qp.post_list = 4;
    assert_eq!(text::title(&info), "Atomic FETCH_AND_ADD Post List BW Test");
    info.metric = Metric::Lat;
    assert_eq!(text::title(&info), "Atomic FETCH_AND_ADD Latency Test");
}

// ---------------------------------------------------------------------------------------------
// JSON: read back with serde_json

/// Reading a parsed report in a test: a missing key or a wrong type is a failed test.
trait Field<'a> {
    fn get(self, key: &str) -> Option<&'a Value>;
    fn num(self) -> f64;
    fn arr(self) -> &'a [Value];
    fn str(self) -> &'a str;
}

impl<'a> Field<'a> for Option<&'a Value> {
    fn get(self, key: &str) -> Option<&'a Value> {
        Some(
            self.unwrap_or_else(|| panic!("no value to read {key:?} from"))
                .get(key)
                .unwrap_or_else(|| panic!("no key {key:?}")),
        )
    }
    fn num(self) -> f64 {
        self.and_then(Value::as_f64).expect("a number")
    }
    fn arr(self) -> &'a [Value] {
        self.and_then(Value::as_array).expect("an array")
    }
    fn str(self) -> &'a str {
        self.and_then(Value::as_str).expect("a string")
    }
}

#[test]
fn json_holds_every_row_of_a_sweep_and_the_run() {
    let doc = from_str_strict::<Value>(&render_json(&bw_sweep(), false)).expect("valid JSON");
    assert_eq!(doc.get("tool").str(), "vl_write_bw");
    assert_eq!(doc.get("version").str(), "0.1.0");
    assert_eq!(doc.get("format").num(), 1.0);
    let run = doc.get("run");
    assert_eq!(run.get("device").str(), "rxe0");
    assert_eq!(run.get("gid").str(), "::ffff:192.168.77.1");
    assert_eq!(run.get("gid_index").num(), 1.0);
    assert_eq!(run.get("cpu").get("cpu").num(), 2.0);
    assert!(run.get("cpu").get("why").str().contains("NIC-local"));
    assert_eq!(run.get("duration_s"), Some(&Value::Null));
    let rows = doc.get("results").arr();
    let sizes: Vec<f64> = rows.iter().map(|r| r.get("bytes").num()).collect();
    assert_eq!(sizes, vec![2.0, 65536.0, 8388608.0], "every size survives");
    assert_eq!(rows[1].get("bw_avg_mib_s").num(), 1163.05);
    assert_eq!(rows[1].get("bw_peak_mib_s").num(), 1187.44);
    // Both units, whatever the flag.
    let gbit = rows[1].get("bw_avg_gbit_s").num();
    assert!((gbit - 1163.05 * MIB * 8.0 / 1e9).abs() < 1e-6, "{gbit}");

    let doc = from_str_strict::<Value>(&render_json(&lat_run(), false)).expect("valid JSON");
    let rows = doc.get("results").arr();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].get("t_p99_99_us").num(), 244.412);
    assert_eq!(rows[0].get("t_max_us").num(), 257.404);
    assert_eq!(rows[0].get("tps"), Some(&Value::Null));
    assert_eq!(doc.get("run").get("cpu"), Some(&Value::Null));

    let doc = from_str_strict::<Value>(&render_json(&lat_duration(), false)).expect("valid JSON");
    assert_eq!(doc.get("run").get("duration_s").num(), 5.0);
    assert!(doc.get("results").arr()[0].get("tps").num() > 49_000.0);
}

#[test]
fn non_finite_numbers_become_null_or_empty() {
    let mut r = bw_sweep();
    if let Rows::Bw(rows) = &mut r.rows {
        rows[0].avg_bps = f64::NAN;
        rows[0].peak_bps = f64::INFINITY;
    }
    let doc = from_str_strict::<Value>(&render_json(&r, false)).expect("valid JSON despite NaN");
    let row = &doc.get("results").arr()[0];
    assert_eq!(row.get("bw_avg_mib_s"), Some(&Value::Null));
    assert_eq!(row.get("bw_peak_gbit_s"), Some(&Value::Null));
    let csv = render_csv(&r, false);
    assert!(
        csv.lines().nth(1).unwrap().starts_with("all,2,5000,,,"),
        "{csv}"
    );
    let text = render_text(&r, false);
    assert!(text.contains(" 2          5000             inf                nan    "));
    // And an RunInfo string with quotes and newlines stays valid JSON.
    let mut r = bw_sweep();
    r.info.cpu = Some((0, "odd \"why\"\nline".into()));
    let doc = from_str_strict::<Value>(&render_json(&r, false)).unwrap();
    assert_eq!(
        doc.get("run").get("cpu").get("why").str(),
        "odd \"why\"\nline"
    );
}

#[test]
fn csv_has_one_header_and_one_line_per_row() {
    let csv = render_csv(&bw_sweep(), false);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines[0],
        "process,bytes,iterations,bw_peak_mib_s,bw_avg_mib_s,msg_rate_mpps,elapsed_us"
    );
    assert!(render_csv(&bw_gbits(), true).starts_with(
        "process,bytes,iterations,bw_peak_gbit_s,bw_avg_gbit_s,msg_rate_mpps,elapsed_us\n"
    ));
    let csv = render_csv(&lat_run(), false);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3);
    let n = lines[0].split(',').count();
    assert!(lines.iter().all(|l| l.split(',').count() == n));
}

// ---------------------------------------------------------------------------------------------
// The streaming reporter

/// A `Write` whose bytes the test can read afterwards.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vl-report-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn streaming_prints_what_render_text_prints_and_writes_the_files() {
    let result = bw_sweep();
    let dir = temp_dir("stream");
    let args = OutputArgs {
        json: Some(dir.join("run.json")),
        csv: Some(dir.join("run.csv")),
        ..OutputArgs::default()
    };
    let cap = Capture::default();
    let mut rep = Reporter::with_writer(&args, Box::new(cap.clone()));
    rep.header(&result.info);
    let header_only = cap.text();
    assert!(header_only.ends_with(&format!("{PERFTEST_BW_HEADER}\n")));
    let Rows::Bw(rows) = &result.rows else {
        unreachable!()
    };
    rep.bw_row(&result.info, &rows[0]);
    assert!(
        cap.text().len() > header_only.len(),
        "a row is printed at once"
    );
    rep.bw_row(&result.info, &rows[1]);
    // The third row is left to finish(), as if the caller had not streamed it.
    let outcome = rep.finish(&result).unwrap();
    assert_eq!(outcome, GateOutcome::Passed);
    assert_eq!(cap.text(), render_text(&result, false));
    assert_eq!(
        std::fs::read_to_string(dir.join("run.json")).unwrap(),
        render_json(&result, false)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("run.csv")).unwrap(),
        render_csv(&result, false)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plot_is_written_from_the_rows_and_skipped_without_any() {
    let dir = temp_dir("plot");
    let args = OutputArgs {
        plot: Some(dir.join("run.svg")),
        ..OutputArgs::default()
    };
    let result = bw_sweep();
    let rep = Reporter::with_writer(&args, Box::new(Capture::default()));
    assert_eq!(rep.finish(&result).unwrap(), GateOutcome::Passed);
    let svg = std::fs::read_to_string(dir.join("run.svg")).unwrap();
    let doc = from_str_strict::<Value>(&render_json(&result, false)).unwrap();
    assert!(vl_perftest::report::plot::check_svg(&svg, &doc).is_ok());
    // A passive server (no rows) with the same command line: no chart, and no failure.
    let mut empty = bw_sweep();
    empty.rows = Rows::Bw(vec![]);
    let args = OutputArgs {
        plot: Some(dir.join("server.svg")),
        ..OutputArgs::default()
    };
    let rep = Reporter::with_writer(&args, Box::new(Capture::default()));
    assert_eq!(rep.finish(&empty).unwrap(), GateOutcome::Passed);
    assert!(!dir.join("server.svg").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn table_mode_prints_everything_at_the_end() {
    let result = lat_run();
    let args = OutputArgs {
        format: OutputFormat::Table,
        ..OutputArgs::default()
    };
    let cap = Capture::default();
    let mut rep = Reporter::with_writer(&args, Box::new(cap.clone()));
    rep.header(&result.info);
    let Rows::Lat(rows) = &result.rows else {
        unreachable!()
    };
    rep.lat_row(&result.info, &rows[0]);
    assert_eq!(cap.text(), "", "nothing before the end");
    rep.finish(&result).unwrap();
    assert_eq!(cap.text(), render_table(&result, false));
    assert!(cap.text().contains("p99.99 [usec]"));
}

/// A stdout on a full disk: every write fails with `ENOSPC`.
struct Full;

impl std::io::Write for Full {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::from_raw_os_error(28))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_stdout_that_cannot_be_written_fails_the_run_after_its_files() {
    let dir = temp_dir("full");
    let args = OutputArgs {
        json: Some(dir.join("run.json")),
        ..OutputArgs::default()
    };
    let result = bw_sweep();
    let mut rep = Reporter::with_writer(&args, Box::new(Full));
    rep.header(&result.info);
    let err = format!("{:#}", rep.finish(&result).unwrap_err());
    assert!(
        err.starts_with("cannot write to stdout: No space left on device"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("run.json")).unwrap(),
        render_json(&result, false)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unwritable_file_is_an_error_naming_it() {
    let args = OutputArgs {
        json: Some(PathBuf::from("/nonexistent-dir/run.json")),
        ..OutputArgs::default()
    };
    let rep = Reporter::with_writer(&args, Box::new(Capture::default()));
    let err = format!("{:#}", rep.finish(&bw_sweep()).unwrap_err());
    assert!(
        err.contains("--json") && err.contains("/nonexistent-dir/run.json"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Gates and the command line

#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    out: OutputArgs,
}

fn parse(args: &[&str]) -> Result<OutputArgs, clap::Error> {
    Cli::try_parse_from(std::iter::once("vl_test").chain(args.iter().copied())).map(|c| c.out)
}

#[test]
fn command_line() {
    Cli::command().debug_assert();
    let a = parse(&[]).unwrap();
    assert!(!a.report_gbits && a.format == OutputFormat::Text && a.max_lat.is_empty());
    assert!(parse(&["--report_gbits"]).unwrap().report_gbits);
    assert!(parse(&["--report-gbits"]).unwrap().report_gbits);
    let a = parse(&[
        "--format",
        "table",
        "--json",
        "r.json",
        "--csv",
        "r.csv",
        "--min-bw",
        "900",
        "--max-lat",
        "p99=50",
        "--max-lat",
        "max=100",
    ])
    .unwrap();
    assert_eq!(a.format, OutputFormat::Table);
    assert_eq!(a.json, Some(PathBuf::from("r.json")));
    assert_eq!(a.min_bw, Some(900.0));
    let keys: Vec<(&str, f64)> = a
        .max_lat
        .iter()
        .map(|g| (g.key.as_str(), g.limit_us))
        .collect();
    assert_eq!(keys, vec![("p99", 50.0), ("max", 100.0)]);
}

#[test]
fn malformed_gates_are_refused_by_the_parser() {
    for (args, says) in [
        (
            &["--max-lat", "p98=50"][..],
            "unknown latency statistic 'p98'",
        ),
        (&["--max-lat", "p99"][..], "no '='"),
        (&["--max-lat", "p99=soon"][..], "not a number"),
        (&["--min-bw=-5"][..], "not a positive bandwidth"),
        (&["--min-bw", "0"][..], "not a positive bandwidth"),
        (&["--min-bw", "lots"][..], "not a positive bandwidth"),
        (&["--format", "html"][..], "html"),
        (&["--output", "table"][..], "table"),
        (&["--limit_bw=-1"][..], "not a limit"),
    ] {
        let e = parse(args).expect_err(&format!("{args:?}"));
        assert!(
            matches!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation | clap::error::ErrorKind::InvalidValue
            ),
            "{args:?}: {:?}",
            e.kind()
        );
        let msg = e.to_string();
        assert!(msg.contains(says), "{args:?}: {msg}");
        assert_eq!(e.exit_code(), 2, "usage errors are not gate failures");
    }
}

#[test]
fn bandwidth_gate_passes_and_fails_with_expected_and_measured() {
    let r = bw_sweep();
    let pass = OutputArgs {
        min_bw: Some(1.5),
        ..OutputArgs::default()
    };
    assert_eq!(check_gates(&r, &pass), GateOutcome::Passed);
    assert_eq!(check_gates(&r, &pass).exit_code(), ExitCode::SUCCESS);

    let fail = OutputArgs {
        min_bw: Some(1200.0),
        ..OutputArgs::default()
    };
    let outcome = check_gates(&r, &fail);
    let GateOutcome::Failed(msgs) = &outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        msgs,
        &vec![
            "gate failed: average BW 1.87 MiB/sec at 2 bytes < minimum 1200.00 MiB/sec".to_string(),
            "gate failed: average BW 1163.05 MiB/sec at 65536 bytes < minimum 1200.00 MiB/sec"
                .to_string(),
        ],
        "every failing row, the passing 8 MiB row not"
    );
    assert_eq!(EXIT_GATE_FAILED, 3);
    assert_eq!(outcome.exit_code(), ExitCode::from(3));

    // In Gb/s with --report_gbits.
    let g = OutputArgs {
        report_gbits: true,
        min_bw: Some(1.0),
        ..OutputArgs::default()
    };
    let GateOutcome::Failed(msgs) = check_gates(&bw_gbits(), &g) else {
        panic!()
    };
    assert_eq!(
        msgs,
        vec!["gate failed: average BW 0.040100 Gb/sec at 2 bytes < minimum 1.00 Gb/sec"]
    );

    // perftest's "0.00 everywhere, exit 0" row cannot pass a gate.
    let mut zero = bw_sweep();
    if let Rows::Bw(rows) = &mut zero.rows {
        rows[2].avg_bps = 0.0;
        rows[1].avg_bps = f64::NAN;
    }
    let GateOutcome::Failed(msgs) = check_gates(&zero, &pass) else {
        panic!()
    };
    assert_eq!(msgs.len(), 2, "{msgs:?}");
}

#[test]
fn latency_gates_check_every_row_and_key() {
    let r = lat_run();
    let pass = OutputArgs {
        max_lat: vec!["p99=60".parse().unwrap(), "avg=20".parse().unwrap()],
        ..OutputArgs::default()
    };
    assert!(check_gates(&r, &pass).passed());
    let fail = OutputArgs {
        max_lat: vec!["p99=50".parse().unwrap(), "max=1000".parse().unwrap()],
        ..OutputArgs::default()
    };
    let GateOutcome::Failed(msgs) = check_gates(&r, &fail) else {
        panic!()
    };
    assert_eq!(
        msgs,
        vec!["gate failed: p99 latency 52.70 usec at 4096 bytes > limit 50.00 usec"]
    );
    // Aliases read the same statistic.
    for (key, value) in [("typical", 9.09), ("p50", 9.09), ("median", 9.09)] {
        let a = OutputArgs {
            max_lat: vec![format!("{key}=9.0").parse().unwrap()],
            ..OutputArgs::default()
        };
        let GateOutcome::Failed(m) = check_gates(&r, &a) else {
            panic!()
        };
        assert!(
            m[0].contains(&format!("latency {value:.2} usec at 2 bytes")),
            "{m:?}"
        );
    }
}

#[test]
fn a_gate_on_a_metric_the_tool_does_not_measure_is_an_error() {
    let min_bw = OutputArgs {
        min_bw: Some(100.0),
        ..OutputArgs::default()
    };
    let e = check_applicable(&min_bw, Metric::Lat).unwrap_err();
    assert!(e.contains("--min-bw") && e.contains("latency"), "{e}");
    assert!(check_applicable(&min_bw, Metric::Bw).is_ok());
    let max_lat = OutputArgs {
        max_lat: vec!["p99=5".parse().unwrap()],
        ..OutputArgs::default()
    };
    assert!(check_applicable(&max_lat, Metric::Bw)
        .unwrap_err()
        .contains("--max-lat"));

    // finish() refuses it as an error (exit 1), not a gate miss (exit 3).
    let rep = Reporter::with_writer(&min_bw, Box::new(Capture::default()));
    let err = rep.finish(&lat_run()).unwrap_err().to_string();
    assert!(err.contains("--min-bw gates bandwidth"), "{err}");
    // check_gates alone never lets it pass silently.
    assert!(!check_gates(&lat_run(), &min_bw).passed());

    // A gate with nothing to check fails rather than passing by not looking.
    let mut empty = bw_sweep();
    empty.rows = Rows::Bw(vec![]);
    let GateOutcome::Failed(m) = check_gates(&empty, &min_bw) else {
        panic!()
    };
    assert!(m[0].contains("no bandwidth was measured"), "{m:?}");
}

#[test]
fn finish_reports_a_missed_gate() {
    let args = OutputArgs {
        max_lat: vec!["p99.9=100".parse().unwrap()],
        ..OutputArgs::default()
    };
    let rep = Reporter::with_writer(&args, Box::new(Capture::default()));
    let outcome = rep.finish(&lat_run()).unwrap();
    assert_eq!(
        outcome,
        GateOutcome::Failed(vec![
            "gate failed: p99.9 latency 104.75 usec at 2 bytes > limit 100.00 usec".into(),
            "gate failed: p99.9 latency 199.95 usec at 4096 bytes > limit 100.00 usec".into(),
        ])
    );
    assert_eq!(outcome.exit_code(), ExitCode::from(EXIT_GATE_FAILED));
}

// ---------------------------------------------------------------------------------------------
// perftest's server rows, -q, --output=UNITS and -w/-y

/// The server of a one-way write test with `-q 2 -n 5000`: perftest's server prints the
/// client's row (xchg_bw_reports), and #iterations counts both QPs' messages.
fn server_q2() -> RunResult {
    let mut info = bw_info();
    info.role = "server".into();
    info.qp.qps = 2;
    info.local_endpoints.push(endpoint_line(
        0,
        0x13,
        0x1a2b3c,
        None,
        Some((0x1a2c, 0x55d5_c0a1_1000)),
    ));
    info.remote_endpoints.push(endpoint_line(
        0,
        0x14,
        0x2b3c4d,
        None,
        Some((0x2b3d, 0x5603_1f41_2000)),
    ));
    RunResult {
        info,
        rows: Rows::Bw(vec![bw_row(65536, 10000, 1187.44, 1163.05)]),
    }
}

#[test]
fn golden_server_rows_and_q() {
    let r = server_q2();
    golden("server_q2.txt", &render_text(&r, false));
    let text = render_text(&r, false);
    assert!(
        !text.contains("TX depth"),
        "perftest's server shows no TX depth"
    );
    let rows = parsed_rows(&text, PERFTEST_BW_HEADER);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][1], 10000.0, "#iterations: -n x -q");
}

/// What `--output=UNITS` prints for `result` through the reporter.
fn bare(result: &RunResult, v: Verbosity, gbits: bool) -> String {
    let args = OutputArgs {
        verbosity: Some(v),
        report_gbits: gbits,
        ..OutputArgs::default()
    };
    let cap = Capture::default();
    let mut rep = Reporter::with_writer(&args, Box::new(cap.clone()));
    rep.header(&result.info);
    if let Rows::Bw(rows) = &result.rows {
        rep.bw_row(&result.info, &rows[0]);
    }
    rep.finish(result).unwrap();
    cap.text()
}

#[test]
fn golden_output_units() {
    let out = format!(
        "--output=bandwidth\n{}--output=bandwidth --report_gbits\n{}--output=message_rate\n{}\
         --output=latency\n{}",
        bare(&bw_sweep(), Verbosity::Bandwidth, false),
        bare(&bw_gbits(), Verbosity::Bandwidth, true),
        bare(&bw_sweep(), Verbosity::MessageRate, false),
        bare(&lat_run(), Verbosity::Latency, false),
    );
    golden("output_units.txt", &out);
    // perftest prints "%lf\n": one number per size and nothing else.
    let b = bare(&bw_sweep(), Verbosity::Bandwidth, false);
    assert_eq!(b, "1.870000\n1163.050000\n1201.180000\n");
}

#[test]
fn perftest_limits_fail_with_perftests_error_line() {
    let args = OutputArgs {
        limit_bw: Some(1200.0),
        ..OutputArgs::default()
    };
    let GateOutcome::Failed(m) = check_gates(&bw_sweep(), &args) else {
        panic!("-w 1200 passed rows of 1.87 and 1163.05 MiB/s")
    };
    assert_eq!(m[0], "Error: BW result is below bw limit");
    assert_eq!(m.len(), 3, "{m:?}");
    assert!(
        m[1].contains("at 2 bytes") && m[2].contains("at 65536 bytes"),
        "{m:?}"
    );
    let args = OutputArgs {
        limit_msgrate: Some(0.5),
        ..OutputArgs::default()
    };
    let GateOutcome::Failed(m) = check_gates(&bw_sweep(), &args) else {
        panic!("-y 0.5 passed")
    };
    assert_eq!(m[0], "Error: Msg rate  is below msg_rate limit");
    // Limits at or below every row pass; 0 always passes (perftest: `limit > measured` fails).
    for (w, y) in [(1.87, 0.0), (0.0, 0.000_15)] {
        let args = OutputArgs {
            limit_bw: Some(w),
            limit_msgrate: Some(y),
            ..OutputArgs::default()
        };
        assert_eq!(
            check_gates(&bw_sweep(), &args),
            GateOutcome::Passed,
            "-w {w} -y {y}"
        );
    }
    // In Gb/s with --report_gbits, as perftest.
    let args = OutputArgs {
        limit_bw: Some(0.02),
        report_gbits: true,
        ..OutputArgs::default()
    };
    assert!(
        !check_gates(&bw_sweep(), &args).passed(),
        "1.87 MiB/s = 0.0157 Gb/s < 0.02 Gb/s"
    );
    assert!(check_applicable(&args, Metric::Lat).is_err());
}

#[test]
fn golden_out_json() {
    let bw = render_perftest_json(&bw_sweep(), None, false);
    golden("bw.out_json", &bw);
    golden(
        "lat.out_json",
        &render_perftest_json(&lat_run(), None, false),
    );
    golden(
        "bw_output_bandwidth.out_json",
        &render_perftest_json(&bw_sweep(), Some(Verbosity::Bandwidth), false),
    );
    // Valid JSON, perftest's keys, the last size in "results" and every size in "all_results".
    let Value::Object(doc) = from_str_strict::<Value>(&bw).expect("valid JSON") else {
        panic!("not an object")
    };
    let keys: Vec<&str> = doc.keys().map(String::as_str).collect();
    assert_eq!(keys, ["test_info", "results", "all_results"]);
    assert!(bw.contains("\"test\": \"RDMA_Write_BW_Test\""), "{bw}");
    assert!(bw.contains("\"BW_average\": 1201.18"), "{bw}");
    let lat = render_perftest_json(&lat_run(), None, false);
    for k in [
        "t_typical",
        "percentile_99",
        "percentile_99.9",
        "Latency_Test",
    ] {
        assert!(lat.contains(k), "{k}: {lat}");
    }
    assert!(from_str_strict::<Value>(&lat).is_ok());
}

#[test]
fn golden_run_infinitely() {
    // Three periods of one size: one row each, as the client and the server print them.
    let mut info = bw_info();
    info.duration = Some(Duration::from_secs(2));
    let r = RunResult {
        info,
        rows: Rows::Bw(vec![
            bw_row(65536, 36000, 1190.12, 1187.44),
            bw_row(65536, 36100, 1195.50, 1190.02),
            bw_row(65536, 35900, 1188.00, 1183.70),
        ]),
    };
    let text = render_text(&r, false);
    golden("run_infinitely.txt", &text);
    assert_eq!(parsed_rows(&text, PERFTEST_BW_HEADER).len(), 3);
}

#[test]
fn cpu_util_adds_perftests_column_and_json_fields() {
    let mut result = bw_sweep();
    result.info.duration = Some(Duration::from_secs(2));
    let dir = temp_dir("cpu");
    let args = OutputArgs {
        cpu_util: true,
        json: Some(dir.join("run.json")),
        out_json: true,
        out_json_file: Some(dir.join("pt.json")),
        ..OutputArgs::default()
    };
    let cap = Capture::default();
    let mut rep = Reporter::with_writer(&args, Box::new(cap.clone()));
    rep.header(&result.info);
    let Rows::Bw(rows) = &result.rows else {
        unreachable!()
    };
    for r in rows {
        rep.bw_row(&result.info, r);
    }
    rep.finish(&result).unwrap();
    let text = cap.text();
    assert!(
        text.contains(&format!("{PERFTEST_BW_HEADER}    CPU_Util[%]\n")),
        "{text}"
    );
    // Every row: perftest's five fields, then a tab and the utilisation.
    let n = text
        .lines()
        .filter(|l| l.starts_with(' ') && l.split_whitespace().count() == 6)
        .filter(|l| l.split_whitespace().nth(5).unwrap().parse::<f64>().is_ok())
        .count();
    assert_eq!(n, 3, "{text}");
    let ours = std::fs::read_to_string(dir.join("run.json")).unwrap();
    assert!(
        ours.contains("\"cpu_util\"") && ours.contains("\"process_cpu_s\""),
        "{ours}"
    );
    let pt = std::fs::read_to_string(dir.join("pt.json")).unwrap();
    assert!(pt.contains("\"CPU_util\""), "{pt}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--run_infinitely | head`: once a row cannot be written because the pipe has no reader, the
/// reporter says the rest of the run is unread — unless a report file or a gate still needs its
/// end. A pipe still read, or a reporter that has not written since its reader left, is read.
#[test]
fn a_pipe_without_reader_leaves_the_run_unread_unless_a_file_or_gate_needs_it() {
    let result = bw_sweep();
    let Rows::Bw(rows) = &result.rows else {
        unreachable!()
    };
    let d = OutputArgs::default;
    // (the options, whether the run is unread once its pipe has no reader)
    let cases = [
        (d(), true),
        (
            OutputArgs {
                verbosity: Some(Verbosity::Bandwidth),
                ..d()
            },
            true,
        ),
        (
            OutputArgs {
                counters: true,
                ..d()
            },
            true,
        ),
        (
            OutputArgs {
                json: Some(PathBuf::from("run.json")),
                ..d()
            },
            false,
        ),
        (
            OutputArgs {
                csv: Some(PathBuf::from("run.csv")),
                ..d()
            },
            false,
        ),
        (
            OutputArgs {
                out_json: true,
                ..d()
            },
            false,
        ),
        (
            OutputArgs {
                plot: Some(PathBuf::from("run.svg")),
                ..d()
            },
            false,
        ),
        (
            OutputArgs {
                min_bw: Some(1.0),
                ..d()
            },
            false,
        ),
        (
            OutputArgs {
                limit_msgrate: Some(1.0),
                ..d()
            },
            false,
        ),
    ];
    for (args, unread) in &cases {
        let (read, write) = nix::unistd::pipe().unwrap();
        let mut rep = Reporter::with_writer(args, Box::new(std::fs::File::from(write)));
        rep.header(&result.info);
        rep.bw_row(&result.info, &rows[0]);
        assert!(!rep.unread(), "the pipe is still read: {args:?}");
        drop(read);
        assert!(!rep.unread(), "nothing was written since: {args:?}");
        rep.bw_row(&result.info, &rows[1]);
        assert_eq!(rep.unread(), *unread, "{args:?}");
    }
    // Another failure than a closed pipe (a full disk) is not a reader that left.
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from_raw_os_error(28))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut rep = Reporter::with_writer(&d(), Box::new(Full));
    rep.bw_row(&result.info, &rows[0]);
    assert!(!rep.unread());
}
