//! Host tests of `--procs`: the worker report codec and its chunking (round trips; truncated,
//! padded and garbage input refused), the aggregate over one interval against a plain reference
//! computation (disjoint, overlapping and nested intervals), the CPU choice, the parameters, and
//! the report of a multi-process run in every format (golden files `procs_*`).
//!
//! Regenerate the goldens with `UPDATE_GOLDEN=1 cargo test -p verbs-lab-perftest --test procs`
//! and review the diff by eye.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use verbs_lab::affinity::{CpuChoice, CpuList};
use verbs_lab::mq::{WorkerMsg, MAX_MSG_LEN};
use vl_perftest::measure::aggregate::{aggregate, aggregate_info, row_messages, totals};
use vl_perftest::measure::result::{
    BwRow, Metric, ProcessResult, QpSettings, Rows, RunInfo, RunResult, Span, TestKind,
};
use vl_perftest::output::{GateOutcome, OutputArgs, OutputFormat, Reporter};
use vl_perftest::params::{Config, Params, Tool};
use vl_perftest::procs::{
    chunks, pick_worker_cpu, Assembler, WorkerReport, CHUNK_DATA, REPORT_VERSION,
};
use vl_perftest::report::{
    endpoint_line, render_csv, render_csv_procs, render_json, render_json_procs, render_table,
    render_table_procs, render_text, render_text_procs,
};

const MIB: f64 = 1024.0 * 1024.0;

// ---------------------------------------------------------------------------------------------
// Fixtures

fn info(process: u32) -> RunInfo {
    let qpn = 0x11 + 2 * process;
    RunInfo {
        tool: "vl_write_bw".into(),
        version: "0.1.0".into(),
        test: TestKind::Write,
        metric: Metric::Bw,
        role: "client".into(),
        conn_type: "RC".into(),
        device: "rxe1".into(),
        ib_port: 1,
        link_layer: "Ethernet".into(),
        gid_index: 1,
        gid: "::ffff:192.168.77.2".into(),
        remote_gid: "::ffff:192.168.77.1".into(),
        qp: QpSettings {
            mtu: 4096,
            qps: 1,
            tx_depth: 128,
            rx_depth: 1,
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
        iterations: 1000,
        warmup_iterations: 16,
        cpu: Some((
            process as usize,
            "one per process among the allowed CPUs 0-1".into(),
        )),
        report_gbits: false,
        qp_timeout: 20,
        rdma_cm: false,
        local_endpoints: vec![endpoint_line(
            0,
            qpn,
            0x3a5b1c + process,
            None,
            Some((0x1a2b + process, 0x55d5_c0a0_1000)),
        )],
        remote_endpoints: vec![endpoint_line(
            0,
            qpn + 1,
            0x0c4d2e + process,
            None,
            Some((0x2b3c + process, 0x5603_1f40_2000)),
        )],
    }
}

fn row(bytes: u64, iterations: u64, peak_mib: f64, avg_mib: f64, elapsed_ms: u64) -> BwRow {
    let avg_bps = avg_mib * MIB;
    BwRow {
        bytes,
        iterations,
        peak_bps: peak_mib * MIB,
        avg_bps,
        msg_rate_mpps: avg_bps / bytes as f64 / 1e6,
        elapsed: Duration::from_millis(elapsed_ms),
    }
}

/// A row of `msgs` messages of `bytes` over `[start_ms, end_ms]`, as a worker measures it.
fn measured(bytes: u64, msgs: u64, start_ms: u64, end_ms: u64) -> (BwRow, Span) {
    let elapsed = Duration::from_millis(end_ms - start_ms);
    let secs = elapsed.as_secs_f64();
    let avg_bps = (msgs * bytes) as f64 / secs;
    let r = BwRow {
        bytes,
        iterations: msgs,
        peak_bps: avg_bps * 1.05,
        avg_bps,
        msg_rate_mpps: msgs as f64 / secs / 1e6,
        elapsed,
    };
    let ms = 1_000_000u64;
    let span = Span {
        start_ns: 5_000_000_000 + start_ms * ms,
        end_ns: 5_000_000_000 + end_ms * ms,
    };
    (r, span)
}

/// A process from its measurements.
fn process(process: u32, m: Vec<(BwRow, Span)>) -> ProcessResult {
    ProcessResult {
        process,
        pid: 4242 + process,
        cpu: info(process).cpu,
        rows: m.iter().map(|(r, _)| *r).collect(),
        spans: m.iter().map(|(_, s)| *s).collect(),
    }
}

/// Two processes, two sizes each: at 4096 bytes their intervals overlap by most of their
/// length, at 65536 bytes process 1 starts 20 ms after process 0.
fn two_processes() -> Vec<ProcessResult> {
    vec![
        process(
            0,
            vec![measured(4096, 1000, 0, 13), measured(65536, 1000, 100, 204)],
        ),
        process(
            1,
            vec![measured(4096, 1000, 1, 15), measured(65536, 1000, 120, 229)],
        ),
    ]
}

/// The coordinator's view: the totals and the processes.
fn procs_run() -> (RunResult, Vec<ProcessResult>) {
    let procs = two_processes();
    let infos = [info(0), info(1)];
    let total_info = aggregate_info(&infos.iter().collect::<Vec<_>>()).unwrap();
    let rows = totals(&procs).unwrap();
    (
        RunResult {
            info: total_info,
            rows: Rows::Bw(rows),
        },
        procs,
    )
}

fn report() -> WorkerReport {
    WorkerReport {
        pid: 4242,
        info: info(0),
        rows: two_processes()[0].rows.clone(),
        spans: two_processes()[0].spans.clone(),
    }
}

// ---------------------------------------------------------------------------------------------
// The report codec

#[test]
fn report_round_trips() {
    let r = report();
    let b = r.encode().unwrap();
    assert_eq!(&b[..5], b"VLPR\x02");
    assert_eq!(WorkerReport::decode(&b).unwrap(), r);

    // Every optional field set, non-finite numbers, a sweep of 23 rows, many QPs.
    let mut r = report();
    r.info.atomic_type = Some("CMP_AND_SWAP".into());
    r.info.duration = Some(Duration::from_secs(5));
    r.info.cpu = None;
    r.info.bidirectional = true;
    r.info.role = "server ✓".into();
    r.rows = (1..24)
        .map(|e| row(1 << e, 7, f64::INFINITY, 1.5 * e as f64, e))
        .collect();
    r.spans = (1..24)
        .map(|e| Span {
            start_ns: e,
            end_ns: u64::MAX - e,
        })
        .collect();
    r.rows[0].avg_bps = f64::NAN;
    r.info.local_endpoints = vec!["x".repeat(90); 64];
    let b = r.encode().unwrap();
    let back = WorkerReport::decode(&b).unwrap();
    assert!(back.rows[0].avg_bps.is_nan());
    assert_eq!(
        back.encode().unwrap(),
        b,
        "canonical: decodes and encodes to the same bytes"
    );
    assert_eq!(back.info, r.info);
}

#[test]
fn truncated_padded_and_garbage_reports_are_refused() {
    let b = report().encode().unwrap();
    for n in 0..b.len() {
        let e = WorkerReport::decode(&b[..n]).expect_err("a truncated report");
        assert!(!e.to_string().is_empty());
    }
    let mut padded = b.clone();
    padded.push(0);
    assert!(WorkerReport::decode(&padded)
        .unwrap_err()
        .to_string()
        .contains("1 bytes after the end"));

    let mut bad = b.clone();
    bad[0] = b'X';
    assert!(WorkerReport::decode(&bad)
        .unwrap_err()
        .to_string()
        .contains("bad magic"));
    let mut bad = b.clone();
    bad[4] = REPORT_VERSION + 1;
    assert!(WorkerReport::decode(&bad)
        .unwrap_err()
        .to_string()
        .contains("report version 3"));
    // A row count far beyond the bytes: refused before allocating.
    let mut bad = b.clone();
    bad[9..13].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(WorkerReport::decode(&bad)
        .unwrap_err()
        .to_string()
        .contains("the rows announced"));

    // Pseudo-random garbage, and random corruptions of a valid report: refused or decoded,
    // never a panic; garbage with the wrong magic is always refused.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..2000 {
        let len = (next() % 600) as usize;
        let g: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if !g.starts_with(b"VLPR") {
            assert!(WorkerReport::decode(&g).is_err());
        }
        let mut c = b.clone();
        let i = (next() as usize) % c.len();
        c[i] ^= (next() as u8) | 1;
        let _ = WorkerReport::decode(&c);
    }
}

#[test]
fn chunks_fit_a_message_and_reassemble_strictly() {
    let blob: Vec<u8> = (0..(2 * CHUNK_DATA + 100)).map(|i| i as u8).collect();
    let parts = chunks(&blob).unwrap();
    assert_eq!(parts.len(), 3);
    for p in &parts {
        let m = WorkerMsg::Result {
            worker: 1,
            payload: p.clone(),
        };
        assert!(m.encode().unwrap().len() <= MAX_MSG_LEN);
    }
    let mut a = Assembler::default();
    assert_eq!(a.push(&parts[0]).unwrap(), None);
    assert_eq!(a.push(&parts[1]).unwrap(), None);
    assert_eq!(a.push(&parts[2]).unwrap(), Some(blob.clone()));
    assert!(a.push(&parts[2]).unwrap_err().contains("after the last"));

    let mut a = Assembler::default();
    assert!(a.push(&parts[1]).unwrap_err().contains("expected chunk 0"));
    let mut a = Assembler::default();
    a.push(&parts[0]).unwrap();
    assert!(a.push(&parts[0]).unwrap_err().contains("expected chunk 1"));
    let mut a = Assembler::default();
    a.push(&parts[0]).unwrap();
    let mut other = parts[1].clone();
    other[3] = 9;
    assert!(a.push(&other).unwrap_err().contains("announces 9 chunks"));
    let mut a = Assembler::default();
    assert!(a
        .push(&[0, 0, 1])
        .unwrap_err()
        .to_string()
        .contains("shorter than its header"));
    let mut short = parts[0].clone();
    short.truncate(100);
    assert!(Assembler::default()
        .push(&short)
        .unwrap_err()
        .to_string()
        .contains("carries 96 bytes"));

    // A small report is one chunk.
    let b = report().encode().unwrap();
    let parts = chunks(&b).unwrap();
    assert_eq!(parts.len(), 1);
    let mut a = Assembler::default();
    assert_eq!(a.push(&parts[0]).unwrap(), Some(b));
}

// ---------------------------------------------------------------------------------------------
// The sum

/// One process's measurement: (messages, start ms, end ms).
type Interval = (u64, u64, u64);

/// The reference: the plain definition, written out without the code under test.
/// (aggregate MiB/s, aggregate Mpps, sum of averages MiB/s, union ms, overlap ms)
fn reference(procs: &[Interval], size: u64) -> (f64, f64, f64, f64, f64) {
    let start = procs.iter().map(|p| p.1).min().unwrap();
    let end = procs.iter().map(|p| p.2).max().unwrap();
    let last_start = procs.iter().map(|p| p.1).max().unwrap();
    let first_end = procs.iter().map(|p| p.2).min().unwrap();
    let union_s = (end - start) as f64 / 1e3;
    let msgs: u64 = procs.iter().map(|p| p.0).sum();
    let sum: f64 = procs
        .iter()
        .map(|p| (p.0 * size) as f64 / ((p.2 - p.1) as f64 / 1e3) / MIB)
        .sum();
    let overlap = first_end.saturating_sub(last_start) as f64;
    (
        (msgs * size) as f64 / union_s / MIB,
        msgs as f64 / union_s / 1e6,
        sum,
        (end - start) as f64,
        overlap,
    )
}

#[test]
fn aggregate_is_total_bytes_over_the_union_of_the_intervals() {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    let size = 65536;
    // Disjoint, overlapping, nested, identical, three.
    let cases: [(&str, Vec<Interval>); 5] = [
        ("disjoint", vec![(1000, 0, 100), (1000, 100, 200)]),
        ("overlapping", vec![(1000, 0, 100), (1200, 40, 160)]),
        ("nested", vec![(3000, 0, 300), (500, 100, 150)]),
        ("identical", vec![(1000, 10, 110), (1000, 10, 110)]),
        (
            "three, one far apart",
            vec![(700, 0, 70), (800, 5, 80), (900, 400, 490)],
        ),
    ];
    for (name, ps) in cases {
        let procs: Vec<ProcessResult> = ps
            .iter()
            .enumerate()
            .map(|(i, p)| process(i as u32, vec![measured(size, p.0, p.1, p.2)]))
            .collect();
        let t = &aggregate(&procs).unwrap()[0];
        let (avg, rate, sum, union_ms, overlap_ms) = reference(&ps, size);
        let mib = t.row.avg_bps / MIB;
        assert!(
            close(mib, avg),
            "{name}: aggregate {mib} MiB/s, reference {avg}"
        );
        assert!(close(t.row.msg_rate_mpps, rate), "{name}: rate");
        assert!(close(t.sum.avg_bps / MIB, sum), "{name}: sum");
        assert_eq!(
            t.union.len(),
            Duration::from_millis(union_ms as u64),
            "{name}"
        );
        assert_eq!(
            t.overlap,
            Duration::from_millis(overlap_ms as u64),
            "{name}"
        );
        assert_eq!(t.row.elapsed, t.union.len(), "{name}");
        assert_eq!(t.messages, ps.iter().map(|p| p.0).sum::<u64>(), "{name}");
        assert_eq!(t.bytes, t.messages * size, "{name}");
        // The sum overstates whenever the intervals do not coincide, and only then.
        if name == "identical" {
            assert!(close(t.sum.avg_bps, t.row.avg_bps), "{name}");
            assert_eq!(t.overlap_fraction(), 1.0);
        } else {
            assert!(
                t.sum.avg_bps > t.row.avg_bps * 1.01,
                "{name}: the sum should overstate"
            );
        }
    }
    // Disjoint: half the sum, no overlap.
    let d: [Interval; 2] = [(1000, 0, 100), (1000, 100, 200)];
    let procs: Vec<ProcessResult> = d
        .iter()
        .enumerate()
        .map(|(i, p)| process(i as u32, vec![measured(size, p.0, p.1, p.2)]))
        .collect();
    let t = &aggregate(&procs).unwrap()[0];
    assert!(close(t.row.avg_bps * 2.0, t.sum.avg_bps));
    assert_eq!(t.overlap, Duration::ZERO);
}

#[test]
fn aggregate_keeps_the_rows_bookkeeping() {
    let procs = two_processes();
    let t = aggregate(&procs).unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(t[1].row.bytes, 65536);
    assert_eq!(
        t[1].row.iterations, 2000,
        "#iterations counts every process's messages, as -q counts every QP's"
    );
    assert_eq!(t[1].sum.iterations, 2000);
    assert_eq!(row_messages(&procs[0].rows[1]), 1000);
    assert!(t[1].row.peak_bps >= t[1].row.avg_bps);
    assert_eq!(t[1].sum.elapsed, Duration::from_millis(109));
    assert_eq!(t[1].row.elapsed, Duration::from_millis(129));

    // Duration mode: different counts per process; their sum.
    let mut p = two_processes();
    p[0].rows[0].iterations = 900;
    p[1].rows[0].iterations = 1101;
    assert_eq!(aggregate(&p).unwrap()[0].row.iterations, 2001);

    // One process: its own figures.
    let one = &two_processes()[..1];
    let t = aggregate(one).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
    assert!(close(t[0].row.avg_bps, one[0].rows[0].avg_bps));
    assert_eq!(t[0].row.elapsed, one[0].rows[0].elapsed);
    assert!(aggregate(&[]).unwrap().is_empty());

    // Processes that measured different sizes cannot be summed; intervals must be there.
    let mut p = two_processes();
    p[1].rows.pop();
    assert!(aggregate(&p).unwrap_err().contains("measured 1 sizes"));
    let mut p = two_processes();
    p[1].rows[0].bytes = 8192;
    assert!(aggregate(&p).unwrap_err().contains("8192 bytes"));
    let mut p = two_processes();
    p[1].spans.pop();
    assert!(aggregate(&p)
        .unwrap_err()
        .contains("1 intervals for 2 sizes"));
    let mut p = two_processes();
    p[1].spans[0].end_ns = 0;
    assert!(aggregate(&p).unwrap_err().contains("ends"));
}

#[test]
fn aggregate_info_lists_every_qp() {
    let infos = [info(0), info(1)];
    let t = aggregate_info(&infos.iter().collect::<Vec<_>>()).unwrap();
    assert_eq!(t.qp.qps, 2);
    assert_eq!(t.local_endpoints.len(), 2);
    assert_eq!(t.remote_endpoints[1], infos[1].remote_endpoints[0]);
    assert_eq!(t.cpu, None, "each process has its own CPU");
    assert!(aggregate_info(&[]).is_none());
}

// ---------------------------------------------------------------------------------------------
// CPUs and parameters

#[test]
fn workers_get_a_cpu_each() {
    let allowed: CpuList = "0-1".parse().unwrap();
    let dont = || CpuChoice::DontPin {
        why: "sysfs gives no NIC-local CPUs for rxe0".into(),
    };
    assert_eq!(pick_worker_cpu(dont(), &allowed, 0).unwrap().0, 0);
    assert_eq!(pick_worker_cpu(dont(), &allowed, 1).unwrap().0, 1);
    let (cpu, why) = pick_worker_cpu(dont(), &allowed, 2).unwrap();
    assert_eq!(cpu, 0);
    assert!(
        why.contains("shared") && why.contains("no NIC-local"),
        "{why}"
    );
    assert_eq!(pick_worker_cpu(dont(), &CpuList::default(), 0), None);
    let pin = CpuChoice::Pin {
        cpu: 7,
        why: "NIC-local".into(),
    };
    assert_eq!(
        pick_worker_cpu(pin, &allowed, 1),
        Some((7, "NIC-local".into()))
    );
}

fn config(tool: Tool, args: &str) -> Result<Config, String> {
    let argv = std::iter::once("vl").chain(args.split_whitespace());
    let p = Params::try_parse_for(tool, argv).map_err(|e| e.to_string())?;
    Config::new(tool, &p)
}

const WRITE_BW: Tool = Tool::new(TestKind::Write, Metric::Bw);
const WRITE_LAT: Tool = Tool::new(TestKind::Write, Metric::Lat);

#[test]
fn procs_parameters() {
    let c = config(WRITE_BW, "--procs 2 -p 18000").unwrap();
    assert_eq!(
        (c.procs.count, c.peer.port, c.procs.worker.is_none()),
        (Some(2), 18000, true)
    );
    let param = |c: &Config| {
        c.wire_params()
            .into_iter()
            .find(|(k, _)| *k == "processes")
            .map(|(_, v)| v)
    };
    assert_eq!(param(&c).as_deref(), Some("2"));
    // Without --procs the server compares 1: a client with --procs 2 is refused by name.
    assert_eq!(param(&config(WRITE_BW, "").unwrap()).as_deref(), Some("1"));

    let w = config(
        WRITE_BW,
        "--procs 2 -p 18000 --vl-worker 1 --vl-queue /vl-procs-1",
    )
    .unwrap();
    assert_eq!(w.peer.port, 18001, "worker I uses the base port + I");
    assert_eq!(w.procs.worker.as_ref().map(|w| w.index), Some(1));
    assert_eq!(param(&w), param(&c), "workers compare the same N");

    let e = config(WRITE_LAT, "--procs 2").unwrap_err();
    assert!(
        e.contains("--procs 2: vl_write_lat measures latency"),
        "{e}"
    );
    assert!(config(WRITE_BW, "--procs 0")
        .unwrap_err()
        .to_string()
        .contains("--procs 0"));
    assert!(config(WRITE_BW, "--procs 65")
        .unwrap_err()
        .to_string()
        .contains("at most 64"));
    assert!(config(WRITE_BW, "--procs 3 -p 65534")
        .unwrap_err()
        .to_string()
        .contains("beyond 65535"));
    assert!(config(WRITE_BW, "--vl-worker 0 --vl-queue /q")
        .unwrap_err()
        .to_string()
        .contains("needs --procs"));
    assert!(config(WRITE_BW, "--procs 2 --vl-worker 2 --vl-queue /q")
        .unwrap_err()
        .to_string()
        .contains("numbered 0..1"));
    assert!(config(WRITE_BW, "--procs 2 --vl-worker 0").is_err());
}

// ---------------------------------------------------------------------------------------------
// The report: goldens and what parsers read

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Compares `actual` with the golden file `name`, or rewrites it under `UPDATE_GOLDEN=1`.
fn golden(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "{} differs (UPDATE_GOLDEN=1 regenerates; review the diff)\n--- actual ---\n{actual}",
        path.display()
    );
}

#[test]
fn golden_procs() {
    let (total, procs) = procs_run();
    golden("procs_bw.txt", &render_text_procs(&total, &procs, false));
    golden(
        "procs_bw.table.md",
        &render_table_procs(&total, &procs, false),
    );
    golden("procs_bw.json", &render_json_procs(&total, &procs, false));
    golden("procs_bw.csv", &render_csv_procs(&total, &procs, false));
    golden(
        "procs_bw_gbits.txt",
        &render_text_procs(&total, &procs, true),
    );
    golden(
        "procs_bw_gbits.csv",
        &render_csv_procs(&total, &procs, true),
    );
}

#[test]
fn without_processes_the_procs_renderers_are_the_plain_ones() {
    let (total, _) = procs_run();
    for gbits in [false, true] {
        assert_eq!(
            render_text_procs(&total, &[], gbits),
            render_text(&total, gbits)
        );
        assert_eq!(
            render_json_procs(&total, &[], gbits),
            render_json(&total, gbits)
        );
        assert_eq!(
            render_csv_procs(&total, &[], gbits),
            render_csv(&total, gbits)
        );
        assert_eq!(
            render_table_procs(&total, &[], gbits),
            render_table(&total, gbits)
        );
    }
}

/// The rows a perftest parser reads: numeric lines after the `#bytes` header.
fn numeric_rows(text: &str) -> Vec<Vec<f64>> {
    text.lines()
        .skip_while(|l| !l.contains("#bytes"))
        .skip(1)
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|f| f.parse::<u64>().is_ok())
        })
        .map(|l| l.split_whitespace().map(|f| f.parse().unwrap()).collect())
        .collect()
}

#[test]
fn a_perftest_parser_reads_the_aggregates_and_the_proc_lines_add_up_to_the_sum() {
    let (total, procs) = procs_run();
    let text = render_text_procs(&total, &procs, false);
    let rows = numeric_rows(&text);
    assert_eq!(
        rows.len(),
        2,
        "one result row per size: the aggregates\n{text}"
    );
    assert_eq!((rows[1][0], rows[1][1]), (65536.0, 2000.0));
    // 2 × 1000 × 65536 bytes over the 129 ms from the first start to the last end.
    let aggregate = 2000.0 * 65536.0 / 0.129 / MIB;
    assert!((rows[1][3] - aggregate).abs() < 0.006, "{:?}", rows[1]);

    // The #proc lines: fields 2-6 are the row's, then "cpu C pid P".
    let procs_lines: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("#proc"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(procs_lines.len(), 4);
    assert_eq!(procs_lines[2][0], "#proc0");
    assert_eq!(procs_lines[3][0], "#proc1");
    assert_eq!(&procs_lines[3][6..], ["cpu", "1", "pid", "4243"]);
    let sum: f64 = procs_lines[2..]
        .iter()
        .map(|f| f[4].parse::<f64>().unwrap())
        .sum();
    let sum_line: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("#sum"))
        .nth(1)
        .expect("a #sum line per size")
        .split_whitespace()
        .collect();
    assert_eq!(sum_line[1], "65536");
    let labelled: f64 = sum_line[4].parse().unwrap();
    assert!((sum - labelled).abs() < 0.011, "{sum} vs {labelled}");
    assert!(
        labelled > rows[1][3] * 1.1,
        "the sum overstates: {labelled}"
    );
    assert!(
        text.contains("all ran at once for 84.000 of the 129.000 ms"),
        "the overlap is shown\n{text}"
    );
    // The header names both CPUs and the QPs of both processes.
    assert!(text.contains(" CPU pinned      : process 1: 1 (one per process"));
    assert!(text.contains(" Number of qps   : 2\t"));
    assert_eq!(text.matches(" local address: ").count(), 2);
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_reporter_prints_and_writes_the_processes_and_gates_the_sum() {
    let (total, procs) = procs_run();
    let dir = std::env::temp_dir().join(format!("vl-procs-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, csv) = (dir.join("r.json"), dir.join("r.csv"));
    // At 65536 bytes each process alone misses 900 MiB/s, the aggregate (968.99) meets it; at
    // 4096 bytes the aggregate (520.83) misses it.
    let args = OutputArgs {
        json: Some(json.clone()),
        csv: Some(csv.clone()),
        min_bw: Some(900.0),
        ..OutputArgs::default()
    };
    let out = Captured::default();
    let outcome = Reporter::with_writer(&args, Box::new(out.clone()))
        .finish_procs(&total, &procs)
        .unwrap();
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert_eq!(text, render_text_procs(&total, &procs, false));
    assert_eq!(
        std::fs::read_to_string(&json).unwrap(),
        render_json_procs(&total, &procs, false)
    );
    assert_eq!(
        std::fs::read_to_string(&csv).unwrap(),
        render_csv_procs(&total, &procs, false)
    );
    match outcome {
        GateOutcome::Failed(m) => {
            assert_eq!(m.len(), 1, "{m:?}");
            assert!(
                m[0].contains("average BW 520.83 MiB/sec at 4096 bytes"),
                "{m:?}"
            );
        }
        GateOutcome::Passed => panic!("the 4096-byte aggregate is below the gate"),
    }

    // Table mode prints both tables with the process column.
    let args = OutputArgs {
        format: OutputFormat::Table,
        ..OutputArgs::default()
    };
    let out = Captured::default();
    let outcome = Reporter::with_writer(&args, Box::new(out.clone()))
        .finish_procs(&total, &procs)
        .unwrap();
    assert!(outcome.passed());
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    assert_eq!(text, render_table_procs(&total, &procs, false));
    std::fs::remove_dir_all(&dir).unwrap();
}
