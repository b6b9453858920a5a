//! `vl_benchstat`: from a benchmark's records (tests.tsv, runs.tsv, env files) to
//! benchmarks.json, whose medians and ratios are the ones the method defines (ratios of
//! alternating rounds in which both runs were valid; broken runs left out), in the layout
//! `vl_benchchart` reads.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use verbs_lab::json::from_str_strict;
use vl_perftest::report::plot::comparisons;

const TESTS: &str = "\
write_bw_65536\tbw\tpair\tvl_write_bw\tib_write_bw\t-s 65536 -n 1000\tTOOL -d rxe0 -p PORT -s 65536 -n 1000\tTOOL -d rxe1 -p PORT -s 65536 -n 1000 192.168.77.1
atomic_lat\tlat\tpair\tvl_atomic_lat\tib_atomic_lat\t-n 1000\tTOOL -d rxe0 -p PORT -n 1000\tTOOL -d rxe1 -p PORT -n 1000 192.168.77.1
";

/// A line of runs.tsv: `status` ok or broken, `value` the verdict's column (c4 for bw, c5 for
/// lat).
fn run(seq: u32, test: &str, round: u32, ours: bool, ok: bool, value: &str) -> String {
    let first = (round % 2 == 1) == ours;
    let (side, tool) = match (ours, test) {
        (true, "atomic_lat") => ("ours", "vl_atomic_lat"),
        (false, "atomic_lat") => ("perftest", "ib_atomic_lat"),
        (true, _) => ("ours", "vl_write_bw"),
        (false, _) => ("perftest", "ib_write_bw"),
    };
    let cols = if test == "atomic_lat" {
        format!("8\t1000\t10\t90\t{value}\t21\t1\t40\t60")
    } else {
        format!("65536\t1000\t900\t{value}\t0.01\t-\t-\t-\t-")
    };
    let status = if ok {
        "ok\t-"
    } else {
        "broken\tthe client exited with 1"
    };
    format!(
        "{seq}\t{test}\t{round}\t{}\t{side}\t{tool}\t{}\t0\t{}\t3.0\t{status}\t{cols}\t-\tqps=1\tqps=1\traw/{seq:03}\t6000\t0.5\t6000\t0.25",
        if first { 1 } else { 2 },
        19100 + seq,
        if ok { 0 } else { 1 }
    )
}

/// A row's run as [`run`] takes it: round, ours, status ok, the verdict's value.
type RunSpec<'a> = (u32, bool, bool, &'a str);

fn records(name: &str) -> PathBuf {
    // write_bw: rounds 1-4; round 3's perftest run is broken (its value must be ignored), so
    // three rounds compare: 1000/800, 900/1000, 1100/1000 = 1.25, 0.9, 1.1.
    let bw = [
        (1, true, true, "1000"),
        (1, false, true, "800"),
        (2, false, true, "1000"),
        (2, true, true, "900"),
        (3, true, true, "1200"),
        (3, false, false, "1"),
        (4, false, true, "1000"),
        (4, true, true, "1100"),
    ];
    // atomic_lat: perftest never valid (one run printed inf, which the guest called ok), so no
    // round compares.
    let lat = [
        (1, true, true, "50"),
        (1, false, true, "inf"),
        (2, false, false, "-"),
        (2, true, true, "52"),
    ];
    records_of(name, &bw, &lat)
}

/// A scratch directory `name` holding the records of the runs `bw` of write_bw_65536 and `lat`
/// of atomic_lat, in that order, 4 planned rounds.
fn records_of(name: &str, bw: &[RunSpec], lat: &[RunSpec]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut runs = vec!["seq\ttest\t...header".to_string()];
    let rows = [("write_bw_65536", bw), ("atomic_lat", lat)];
    for (test, &(round, ours, ok, v)) in rows
        .iter()
        .flat_map(|(test, specs)| specs.iter().map(move |s| (*test, s)))
    {
        runs.push(run(runs.len() as u32, test, round, ours, ok, v));
    }
    std::fs::write(dir.join("tests.tsv"), TESTS).unwrap();
    std::fs::write(dir.join("runs.tsv"), runs.join("\n") + "\n").unwrap();
    std::fs::write(
        dir.join("env.txt"),
        "runs=4\nsweep=0\nquick=0\nextra_rounds=0\nrxe0_mtu=4096\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("host.env"),
        "date_utc=2026-12-02T06:00:00\nonly=\nout_dir=.vm-out/bench-x\ngit_dirty=0\n",
    )
    .unwrap();
    dir
}

fn benchstat(dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vl_benchstat"))
        .arg(dir)
        .output()
        .unwrap()
}

/// What `vl_benchstat` made of the records in `dir` (it must succeed; `what` names the case):
/// benchmarks.json, generated.md and summary.txt.
fn report(dir: &Path, what: &str) -> (Value, String, String) {
    let out = benchstat(dir);
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    (
        from_str_strict(&read("benchmarks.json")).unwrap(),
        read("generated.md"),
        read("summary.txt"),
    )
}

#[test]
fn medians_and_ratios_of_alternating_rounds_into_benchmarks_json() {
    let dir = records("benchstat-records");
    let (doc, md, summary) = report(&dir, "records");
    assert_eq!(doc["mode"], "full");
    assert_eq!(doc["runs_total"], 12);
    assert_eq!(doc["runs_broken"], 3, "atomic_lat's inf is a broken run");
    assert_eq!(doc["rows_missing_goal"], 1);
    let bw = &doc["rows"][0];
    assert_eq!(bw["family"], "write_bw");
    assert_eq!(bw["bytes"], 65536);
    assert_eq!(bw["kind"], "bw");
    // Ours: 900 1000 1100 1200 (even count: the middle two's mean); perftest: 800 1000 1000.
    assert_eq!(
        bw["ours_stats"],
        serde_json::json!({"valid": 4, "median": 1050, "min": 900, "max": 1200, "spread_pct": 28.57})
    );
    assert_eq!(
        bw["perftest_stats"],
        serde_json::json!({"valid": 3, "median": 1000, "min": 800, "max": 1000, "spread_pct": 20.0})
    );
    assert_eq!(bw["ratio_median_of_rounds"], 1.1);
    assert_eq!(bw["ratio_of_medians"], 1.05);
    assert_eq!(bw["rounds_compared"], 3);
    assert_eq!(bw["rounds_meeting_goal"], 2);
    assert_eq!(bw["verdict"], "meets");
    assert_eq!(bw["cost"]["ours"]["server_cpu_s"], 0.25);
    assert_eq!(bw["runs"].as_array().unwrap().len(), 8);
    assert_eq!(bw["runs"][5]["problem"], "the client exited with 1");
    assert_eq!(
        bw["runs"][0]["client_command"],
        "vl_write_bw -d rxe1 -p 19101 -s 65536 -n 1000 192.168.77.1"
    );
    let lat = &doc["rows"][1];
    assert_eq!(lat["bytes"], 8);
    assert_eq!(lat["ours_stats"]["median"], 51);
    assert_eq!(
        lat["perftest_stats"],
        serde_json::json!({"valid": 0, "median": null, "min": null, "max": null, "spread_pct": null})
    );
    assert_eq!(lat["ratio_median_of_rounds"], Value::Null);
    assert_eq!(lat["verdict"], "NO DATA");
    assert_eq!(lat["runs"][1]["t_typical"], Value::Null);
    assert_eq!(
        lat["runs"][1]["problem"],
        r#"the metric t_typical "inf" is not a number"#
    );
    // vl_benchchart's reader takes it: one chart, the bw row over perftest's median.
    let charts = comparisons(&doc).unwrap();
    assert_eq!(charts.len(), 1);
    assert_eq!(charts[0].ours[0].median, 1.05);
    // The report and the summary say the same.
    assert!(md.contains("| write_bw_65536 | BW average, MiB/s (higher better) | 1050.00 (900.00–1200.00; ±14.3%), n=4 | 1000.00 (800.00–1000.00; ±10.0%), n=3 | 1.100 (0.900–1.250) | 1.050 | 2 of 3 | meets (+10.0%) |"), "{md}");
    assert!(
        md.contains("- **atomic_lat: no comparable round** (ours valid 2 times, perftest 0 times)"),
        "{md}"
    );
    assert!(
        summary.ends_with("12 runs, 3 broken; 1 of 2 rows miss the goal\n"),
        "{summary}"
    );
}

#[test]
fn a_run_whose_metric_is_no_measurement_is_broken_and_left_out_alike() {
    for (bad, why) in [
        ("nan", r#"the metric bw_average "nan" is not a number"#),
        ("abc", r#"the metric bw_average "abc" is not a number"#),
        (
            "1e309",
            "the metric bw_average 1e309 is not a finite number",
        ),
        ("-5", "the metric bw_average -5 is negative"),
        (
            "0.00",
            "the metric bw_average 0.00 is zero, not a measurement",
        ),
        (
            "1e307",
            "the metric bw_average 1e307 is above 1e12 MiB/s, not a measurement",
        ),
    ] {
        // Round 1's ours printed `bad`; round 2 compares 1000 / 900.
        let bw = [
            (1, true, true, bad),
            (1, false, true, "800"),
            (2, false, true, "900"),
            (2, true, true, "1000"),
        ];
        let dir = records_of("benchstat-bad-metric", &bw, &[]);
        let (doc, md, summary) = report(&dir, bad);
        assert_eq!(doc["runs_total"], 4, "{bad}");
        assert_eq!(doc["runs_broken"], 1, "{bad}");
        let row = &doc["rows"][0];
        assert_eq!(row["runs"][0]["valid"], false, "{bad}");
        assert_eq!(row["runs"][0]["problem"], why, "{bad}");
        assert_eq!(
            row["ours_stats"],
            serde_json::json!({"valid": 1, "median": 1000, "min": 1000, "max": 1000, "spread_pct": 0.0}),
            "{bad}"
        );
        assert_eq!(row["rounds_compared"], 1, "{bad}");
        assert_eq!(row["rounds_meeting_goal"], 1, "{bad}");
        assert_eq!(row["verdict"], "meets", "{bad}");
        assert!(
            md.contains(&format!(
                "| write_bw_65536 | 1 | vl_write_bw | 0/0 | {why} | `.vm-out/bench-x/raw/001.{{client,server,log}}` |"
            )),
            "{bad}: {md}"
        );
        assert!(
            md.contains("| write_bw_65536 | 1 | vl_* | ✗ | 800.00 | – |"),
            "{bad}: {md}"
        );
        assert!(
            summary.contains("4 runs, 1 broken; 1 of 2 rows miss the goal"),
            "{bad}: {summary}"
        );
    }
}

#[test]
fn a_miss_inside_both_tools_noise_where_the_rounds_split_is_a_tie_not_a_pass() {
    // Ratios 0.998, 1.001, 0.997, 1.001 (median 0.9995): 0.05 % below, ours ±0.40 % and
    // perftest's ±0.20 % between their own runs, ours ahead in two rounds of four.
    let split = [
        (1, true, true, "1000"),
        (1, false, true, "1002"),
        (2, false, true, "1000"),
        (2, true, true, "1001"),
        (3, true, true, "995"),
        (3, false, true, "998"),
        (4, false, true, "1002"),
        (4, true, true, "1003"),
    ];
    let (doc, md, summary) = report(&records_of("benchstat-tie", &split, &[]), "split");
    let row = &doc["rows"][0];
    assert_eq!(row["verdict"], "ties");
    assert_eq!(row["goal_met"], false, "a tie does not meet the goal");
    assert_eq!(row["rounds_meeting_goal"], 2);
    assert_eq!(
        doc["rows_missing_goal"], 2,
        "the tie and atomic_lat's missing row"
    );
    assert_eq!(doc["rows_tied"], 1);
    assert!(
        md.contains("| 2 of 4 | **ties** (-0.05%, inside both tools' spread) |"),
        "{md}"
    );
    assert!(
        md.contains(
            "- **write_bw_65536 ties**: the median of rounds is 0.9995 (-0.05%), less than either \
             tool's own spread between runs (ours ±0.40%, perftest's ±0.20%), and ours was \
             ahead or equal in 2 of 4 rounds"
        ),
        "{md}"
    );
    assert!(
        summary.ends_with(
            "8 runs, 0 broken; 2 of 2 rows miss the goal (1 of them a tie: inside both tools' \
             spread, the rounds split)\n"
        ),
        "{summary}"
    );

    // Ours behind in three rounds of four, by as little: a miss (a cost of ours), not a tie.
    let mut behind = split;
    behind[3].3 = "999";
    let (doc, ..) = report(&records_of("benchstat-tie-behind", &behind, &[]), "behind");
    assert_eq!(doc["rows"][0]["verdict"], "MISSES");
    assert_eq!(doc["rows_tied"], 0);
}

#[test]
fn missing_records_are_an_error_with_exit_status_1() {
    let dir = records("benchstat-missing");
    std::fs::remove_file(dir.join("runs.tsv")).unwrap();
    let out = benchstat(&dir);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("vl_benchstat: error: cannot read ") && err.contains("runs.tsv"),
        "{err}"
    );
    assert!(!dir.join("benchmarks.json").exists());
}

#[test]
fn coll_medians_per_size_and_profile() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("benchstat-coll");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("rows")).unwrap();
    std::fs::write(dir.join("params"), "runs=3\nline=-b 64K -e 64K\n").unwrap();
    // Times (us) of 64 KiB per round: ours 100 200 400, Open MPI 200 200 (round 3 printed no
    // row). busbw = 65536 / t x 1.5 (all-reduce, no coll= in params, on the headers' 4 ranks).
    let row = |t: u32| {
        format!(
            "       65536         16384     float     sum      -1  {t}.0   0.66   0.98      0\n"
        )
    };
    for (round, ours, mpi) in [(1, 100, Some(200)), (2, 200, Some(200)), (3, 400, None)] {
        let w = |side: &str, text: String| {
            std::fs::write(dir.join("rows").join(format!("{round}-{side}.out")), text).unwrap()
        };
        w(
            "ours",
            format!(
                "# vl_all_reduce_perf: nranks 4 (from Open MPI)\n#  size count type\n{}",
                row(ours)
            ),
        );
        w(
            "mpi",
            mpi.map(|t| {
                format!(
                    "# coll_timer: Open MPI all_reduce float, nranks 4, -b 64K\n{}",
                    row(t)
                )
            })
            .unwrap_or_default(),
        );
        std::fs::write(
            dir.join("rows").join(format!("{round}-ours.err")),
            format!("# profile rank 0 65536 B out-of-place: {round}.00 ms per collective = post 0.10 + apply 0.20 (65536 B) + poll 0.30 + idle 0.40 ms; 6.0 writes, {round}.0 sleeps\n"),
        )
        .unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_vl_benchstat"))
        .arg("--coll")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = std::fs::read_to_string(dir.join("table.md")).unwrap();
    // ours: 983.04 491.52 245.76 (median 491.52); Open MPI 491.52 twice; ratios 2 and 1 (median
    // 1.5) over the two rounds both have.
    assert_eq!(
        table.lines().nth(2),
        Some("| 64 KiB | 491.520 (245.760–983.040) | 491.520 (491.520–491.520) | 200 / 200 | **1.50** | 1.00 | 2 |")
    );
    let profile = std::fs::read_to_string(dir.join("profile.md")).unwrap();
    assert_eq!(
        profile.lines().nth(2),
        Some("| 64 KiB | 2.0 | 0.10 | 0.20 | 0.30 | 0.4 | 6 | 2 |")
    );
}

/// `vl_benchchart` on a report `json` (written to a scratch directory) and OUT_DIR `charts` in
/// it: exit status, stderr, and whether anything was written there or beside it.
fn benchchart(name: &str, json: &str) -> (Option<i32>, String, PathBuf) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("benchmarks.json"), json).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vl_benchchart"))
        .arg(dir.join("benchmarks.json"))
        .arg(dir.join("charts"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), err, dir)
}

/// A row of bench-vs-perftest's report with both sides' numbers, of `family`.
fn chart_row(family: &str) -> String {
    let st = r#"{"median": 10.0, "min": 9.0, "max": 11.0}"#;
    format!(
        r#"{{"family": "{family}", "bytes": 65536, "kind": "bw", "ours_stats": {st}, "perftest_stats": {st}}}"#
    )
}

#[test]
fn vl_benchchart_draws_nothing_from_no_rows_and_refuses_a_family_that_is_no_file_name() {
    let (rc, err, dir) = benchchart("benchchart-empty", r#"{"rows": []}"#);
    assert_eq!(rc, Some(1), "{err}");
    assert!(
        err.trim_end()
            .ends_with("benchmarks.json: no rows: nothing drawn"),
        "{err}"
    );
    assert!(!dir.join("charts").exists());
    for family in ["../escaped", "", "a/b", ".hidden"] {
        let doc = format!(
            r#"{{"rows": [{}, {}]}}"#,
            chart_row("write_bw"),
            chart_row(family)
        );
        let (rc, err, dir) = benchchart("benchchart-family", &doc);
        assert_eq!(rc, Some(1), "{err}");
        assert_eq!(
            err.trim_end(),
            format!(
                "vl_benchchart: error: the family {family:?} is not a plain file name (letters, \
                 digits, '_', '-' and '.', not first): no chart of it is written"
            )
        );
        assert!(
            !dir.join("charts").exists(),
            "{family:?}: nothing is written"
        );
        assert!(!dir.join("escaped.svg").exists());
    }
    let (rc, err, dir) = benchchart(
        "benchchart-ok",
        &format!(r#"{{"rows": [{}]}}"#, chart_row("write_bw")),
    );
    assert_eq!(rc, Some(0), "{err}");
    assert!(dir.join("charts/write_bw.svg").exists());
}

#[test]
fn vl_benchchart_refuses_a_number_no_chart_can_show_by_its_json_path() {
    let doc = format!(r#"{{"rows": [{}]}}"#, chart_row("write_bw")).replacen(
        r#""median": 10.0"#,
        r#""median": -5"#,
        1,
    );
    let (rc, err, dir) = benchchart("benchchart-negative", &doc);
    assert_eq!(rc, Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        "vl_benchchart: error: rows[0].ours_stats.median: -5 is negative"
    );
    assert!(!dir.join("charts").exists(), "nothing is written");
}

#[test]
fn vl_benchchart_writes_its_charts_but_fails_on_a_stdout_that_cannot_be_written() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("benchchart-full-stdout");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = format!(r#"{{"rows": [{}]}}"#, chart_row("write_bw"));
    std::fs::write(dir.join("benchmarks.json"), json).unwrap();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vl_benchchart"))
        .arg(dir.join("benchmarks.json"))
        .arg(dir.join("charts"))
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("vl_benchchart: error: cannot write to stdout: No space left on device"),
        "{err}"
    );
    assert!(
        dir.join("charts/write_bw.svg").is_file(),
        "the chart is written all the same"
    );
}

/// The gate end to end: a run's report against a baseline that was 20 % faster on write_bw
/// exits 3 and names the row; against itself it exits 0; a baseline that is no report exits 1.
#[test]
fn the_gate_exits_3_on_a_regression_and_0_on_the_same_numbers() {
    let dir = records("benchstat-gate");
    assert!(benchstat(&dir).status.success());
    let run = dir.join("benchmarks.json");
    let mut base: Value = from_str_strict(&std::fs::read_to_string(&run).unwrap()).unwrap();
    base["rows"][0]["ours_stats"] =
        serde_json::json!({"median": 1260.0, "min": 1250.0, "max": 1270.0});
    let faster = dir.join("baseline-faster.json");
    std::fs::write(&faster, base.to_string()).unwrap();
    let gate = |baseline: &Path| {
        Command::new(env!("CARGO_BIN_EXE_vl_benchstat"))
            .arg("--gate")
            .arg(baseline)
            .arg(&dir)
            .output()
            .unwrap()
    };
    let out = gate(&faster);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("REGRESSED"), "{text}");
    assert!(text.contains("-16.67%"), "1050 against 1260: {text}");
    let out = gate(&run);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = gate(&dir.join("runs.tsv"));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not JSON"));
}
