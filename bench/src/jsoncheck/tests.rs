//! The checks of [`super`] on the goldens, real reports of guest runs, and broken copies of
//! them: each refusal's exact message.

use super::*;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

fn parse(text: &str) -> Result<Value, serde_json::Error> {
    verbs_lab::json::from_str_strict(text)
}

fn read(path: &str) -> Value {
    let p = format!("{DIR}/{path}");
    parse(&std::fs::read_to_string(&p).unwrap()).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// Every report our tools write passes: the goldens (client, bandwidth and latency,
/// --report_gbits, --procs) and documents of real guest runs (a server, a UD latency sweep,
/// a --procs sweep), and a collective's.
#[test]
fn accepts_the_goldens_and_real_reports() {
    let mut n = 0;
    for dir in ["../perftest/tests/golden", "tests/jsoncheck"] {
        for e in std::fs::read_dir(format!("{DIR}/{dir}")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json") {
                let doc = parse(&std::fs::read_to_string(&p).unwrap()).unwrap();
                check_report(&doc, None).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                n += 1;
            }
        }
    }
    assert!(n >= 8, "{n} reports");
    let server = read("tests/jsoncheck/80-server.json");
    assert_eq!(server["run"]["role"], "server");
    let coll = read("tests/jsoncheck/coll_all_reduce.json");
    assert_eq!(check_report(&coll, Some(&[8, 16])), Ok(vec![8, 16]));
}

/// `doc` with the value at `pointer` replaced by `v` (or removed, for `None`).
fn with(doc: &Value, pointer: &str, v: Option<Value>) -> Value {
    let mut d = doc.clone();
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let p = d.pointer_mut(parent).unwrap();
    match (p, v) {
        (Value::Object(o), Some(v)) => drop(o.insert(key.to_string(), v)),
        (Value::Object(o), None) => drop(o.remove(key)),
        (Value::Array(a), Some(v)) => a[key.parse::<usize>().unwrap()] = v,
        (Value::Array(a), None) => drop(a.remove(key.parse::<usize>().unwrap())),
        _ => panic!("{pointer}"),
    }
    d
}

fn refused(doc: &Value, want: &str) {
    match check_report(doc, None) {
        Ok(s) => panic!("accepted ({s:?}), expected \"{want}\""),
        Err(e) => assert_eq!(e, want),
    }
}

#[test]
fn refuses_a_broken_bandwidth_report() {
    let doc = read("../perftest/tests/golden/bw_sweep.json");
    let row2 = doc["results"][2].clone();
    let b = |k: &str| doc["results"][2][k].clone();
    refused(
        &with(&doc, "/results", Some(Value::Array(vec![]))),
        "results: empty: the client measured nothing (only a latency test's server may \
         report no row)",
    );
    refused(
        &with(&doc, "/results/2/bw_avg_mib_s", Some("fast".into())),
        "results[2].bw_avg_mib_s: invalid type: string \"fast\", expected f64",
    );
    refused(
        &with(&doc, "/results/2/bw_avg_mib_s", Some((-5.0).into())),
        "results[2].bw_avg_mib_s: -5 is negative",
    );
    refused(
        &with(&doc, "/results/2/bw_avg_mib_s", Some(Value::Null)),
        "results[2].bw_avg_mib_s: invalid type: null, expected f64",
    );
    refused(
        &with(&doc, "/results/2/bytes", Some((-8).into())),
        "results[2].bytes: -8 is negative",
    );
    refused(
        &with(&doc, "/results/2/bytes", None),
        "results[2]: missing field `bytes`",
    );
    let swapped = with(&doc, "/results/1", Some(row2.clone()));
    let swapped = with(&swapped, "/results/2", Some(doc["results"][1].clone()));
    let (s1, s2) = (doc["results"][1]["bytes"].clone(), b("bytes"));
    refused(
        &swapped,
        &format!("results[2].bytes: {s1} after {s2}: the sizes must increase strictly"),
    );
    let mut dup = doc.clone();
    dup["results"].as_array_mut().unwrap().push(row2);
    refused(
        &dup,
        &format!("results[3].bytes: {s2} after {s2}: the sizes must increase strictly"),
    );
    refused(
        &with(&doc, "/format", Some(99.into())),
        "format: 99 is not the layout this checker reads (1)",
    );
    let e = check_report(&with(&doc, "/tool", Some("ib_write_bw".into())), None).unwrap_err();
    assert!(
        e.starts_with("tool: \"ib_write_bw\" is not one of verbs-lab's perftest tools (vl_write_bw, vl_write_lat, vl_read_bw"),
        "{e}"
    );
    refused(
        &with(&doc, "/tool", Some("vl_read_bw".into())),
        "run: test \"RDMA_Write\", metric \"bw\" is not what vl_read_bw measures \
         (\"RDMA_Read\", \"bw\")",
    );
    let avg = b("bw_avg_mib_s").as_f64().unwrap();
    refused(
        &with(&doc, "/results/2/bw_peak_mib_s", Some((avg / 2.0).into())),
        &format!(
            "results[2].bw_peak_mib_s: {} is below the average {avg} ({} bytes)",
            avg / 2.0,
            b("bytes")
        ),
    );
    // --no_peak writes a peak of 0: not measured.
    let no_peak = with(&doc, "/results/2/bw_peak_mib_s", Some(0.0.into()));
    assert!(check_report(&no_peak, None).is_ok());
    refused(
        &with(&doc, "/results/2/iterations", Some(0.into())),
        &format!(
            "results[2].iterations: 0 ({} bytes): the row measured nothing",
            b("bytes")
        ),
    );
    refused(
        &with(&doc, "/run/role", Some("peer".into())),
        "run.role: \"peer\" is neither \"client\" nor \"server\"",
    );
    refused(
        &with(&doc, "/run/mtu", Some("4096".into())),
        "run.mtu: invalid type: string \"4096\", expected u32",
    );
    // The QP settings are read flattened into the run: a fault among them, or among the run's
    // own keys after them, is still named by its key.
    refused(
        &with(
            &doc,
            "/run/outstanding_reads",
            Some(5_000_000_000u64.into()),
        ),
        "run.outstanding_reads: invalid value: integer `5000000000`, expected u32",
    );
    refused(&with(&doc, "/run/qps", None), "run: missing field `qps`");
    refused(
        &with(&doc, "/run/iterations", Some("many".into())),
        "run.iterations: invalid type: string \"many\", expected u64",
    );
    refused(
        &with(&doc, "/version", None),
        "the report: missing field `version`",
    );
    refused(&Value::Array(vec![]), "the report is not a JSON object");
    refused(
        &read("../perftest/tests/golden/bw.out_json"),
        "the file is perftest's own --out_json layout (\"test_info\"), not a vl_* tool's or \
         a collective's --json report",
    );
    refused(
        &with(&doc, "/results", None),
        "the report has neither \"results\" (a vl_* perftest tool's --json) nor \
         \"rows\" (a collective's --json)",
    );
}

/// A --run_infinitely report repeats its one size, one row per -D period.
/// Another reader's file is named, with the tool that reads it.
#[test]
fn names_the_files_of_the_other_readers() {
    refused(
        &read("../docs/benchmarks.json"),
        "the file is scripts/bench-vs-perftest's benchmarks.json (drawn by vl_benchchart), not \
         a vl_* tool's or a collective's --json report",
    );
    let coll = read("tests/jsoncheck/coll_all_reduce.json");
    assert_eq!(
        vl_perftest::report::plot::comparisons(&coll).unwrap_err(),
        "the file is a collective's --json report (read by vl_jsoncheck); vl_benchchart reads \
         scripts/bench-vs-perftest's benchmarks.json"
    );
    assert_eq!(
        vl_perftest::report::plot::panels(&coll).err().unwrap(),
        "the file is a collective's --json report (read by vl_jsoncheck); --plot reads a vl_* \
         tool's --json report"
    );
}

#[test]
fn a_run_infinitely_report_repeats_its_size() {
    let doc = read("../perftest/tests/golden/bw_sweep.json");
    let row = doc["results"][0].clone();
    let mut inf = with(
        &doc,
        "/results",
        Some(Value::Array(vec![row.clone(), row.clone()])),
    );
    refused(
        &inf,
        &format!(
            "results[1].bytes: {0} after {0}: the sizes must increase strictly",
            row["bytes"]
        ),
    );
    inf["run"]["duration_s"] = 2.0.into();
    assert_eq!(check_report(&inf, None).map(|s| s.len()), Ok(2));
}

#[test]
fn refuses_a_broken_latency_report() {
    let doc = read("../perftest/tests/golden/lat.json");
    let r = &doc["results"][0];
    let p999 = r["t_p99_9_us"].as_f64().unwrap();
    let high = r["t_max_us"].as_f64().unwrap() + 1.0;
    refused(
        &with(&doc, "/results/0/t_p99_us", Some(high.into())),
        &format!(
            "results[0].t_p99_9_us: {p999} is below t_p99_us {high}: the statistics must be \
             in order"
        ),
    );
    refused(
        &with(&doc, "/results/0/t_avg_us", Some(0.into())),
        &format!(
            "results[0].t_avg_us: 0 ({} bytes): not positive",
            r["bytes"]
        ),
    );
    refused(
        &with(&doc, "/results/0/samples", Some(0.into())),
        &format!(
            "results[0].samples: 0 ({} bytes), yet the row has times: a row without samples \
             has null times",
            r["bytes"]
        ),
    );
    refused(
        &with(&doc, "/results/0/t_max_us", Some(Value::Null)),
        &format!(
            "results[0]: a time is null in a row of {} samples",
            r["samples"]
        ),
    );
}

/// A latency server's `-n 1`: one answer, no sample; its row has null times, and passes.
#[test]
fn a_row_without_samples_has_null_times() {
    let doc = read("../perftest/tests/golden/lat.json");
    let mut one = with(&doc, "/results/0/samples", Some(0.into()));
    let row = one["results"][0].as_object_mut().unwrap();
    for (k, v) in row.iter_mut() {
        if k.starts_with("t_") {
            *v = Value::Null;
        }
    }
    one["results"].as_array_mut().unwrap().truncate(1);
    let bytes = one["results"][0]["bytes"].as_u64().unwrap();
    assert_eq!(check_report(&one, None), Ok(vec![bytes]));
}

/// A latency server of a read test measured nothing: its report has no row, and passes.
#[test]
fn a_latency_server_may_have_no_row() {
    let doc = read("../perftest/tests/golden/lat.json");
    let mut server = with(&doc, "/results", Some(Value::Array(vec![])));
    server["run"]["role"] = "server".into();
    assert_eq!(check_report(&server, None), Ok(vec![]));
}

#[test]
fn refuses_a_broken_procs_report() {
    let doc = read("tests/jsoncheck/procs2-sweep.json");
    refused(
        &with(
            &doc,
            "/processes/1/results/0/bw_avg_gbit_s",
            Some((-1.0).into()),
        ),
        "processes[1].results[0].bw_avg_gbit_s: -1 is negative",
    );
    refused(
        &with(&doc, "/aggregate/0/overlap_fraction", Some(1.5.into())),
        "aggregate[0].overlap_fraction: 1.5 is not in 0..=1",
    );
    refused(
        &with(&doc, "/processes/0/pid", Some("x".into())),
        "processes[0].pid: invalid type: string \"x\", expected u32",
    );
}

#[test]
fn refuses_a_broken_collective_report() {
    let doc = read("tests/jsoncheck/coll_all_reduce.json");
    refused(
        &with(&doc, "/version", None),
        "version: missing: a collective's report names the verbs-lab version that wrote \
         it (an older vl_*_perf wrote none: rerun it)",
    );
    refused(
        &with(&doc, "/rows", Some(Value::Array(vec![]))),
        "rows: empty: the run measured nothing",
    );
    refused(
        &with(&doc, "/rows/1/size", Some(8.into())),
        "rows[1].size: 8 after 8: the sizes must increase strictly",
    );
    // All-reduce moves every requested byte: a row of 0 B is not one of its rows (it is for
    // the collectives that round the count down to a multiple of the ranks).
    refused(
        &with(&doc, "/rows/0/size", Some(0.into())),
        "rows[0].size: 0",
    );
    refused(
        &with(&doc, "/rows/0/out_of_place/busbw_gbs", Some((-1.0).into())),
        "rows[0].out_of_place.busbw_gbs: -1 is negative",
    );
    // Every number, whatever its place: no figure of either layout can be negative.
    refused(
        &with(
            &doc,
            "/rows/1/out_of_place/per_rank_time_us/1",
            Some((-0.5).into()),
        ),
        "rows[1].out_of_place.per_rank_time_us[1]: -0.5 is negative",
    );
    refused(
        &with(&doc, "/avg_busbw_gbs", Some((-2.0).into())),
        "avg_busbw_gbs: -2 is negative",
    );
    refused(
        &with(&doc, "/params/iters", Some((-1).into())),
        "params.iters: -1 is negative",
    );
    refused(
        &with(
            &doc,
            "/rows/0/in_place/per_rank_time_us",
            Some(vec![1.0].into()),
        ),
        "rows[0].in_place.per_rank_time_us: 1 time(s) for 2 rank(s)",
    );
    refused(
        &with(
            &doc,
            "/rows/0/out_of_place/per_rank_wrong/1",
            Some(3.into()),
        ),
        "rows[0].out_of_place.wrong: Some(0) is not the sum of per_rank_wrong (Some(3))",
    );
    refused(
        &with(&doc, "/wrong", Some(2.into())),
        "wrong: 2 is not the sum of the rows' (0)",
    );
    refused(
        &with(&doc, "/tool", Some("vl_broadcast_perf".into())),
        "collective: \"all_reduce\" is not what vl_broadcast_perf runs (\"broadcast\")",
    );
    refused(
        &with(&doc, "/ranks/1", None),
        "ranks: 1 record(s) for nranks 2",
    );
    let e = check_report(&with(&doc, "/tool", Some("all_reduce_perf".into())), None).unwrap_err();
    assert!(
        e.starts_with(
            "tool: \"all_reduce_perf\" is not one of verbs-lab's collectives (vl_all_reduce_perf,"
        ),
        "{e}"
    );
}

#[test]
fn refuses_a_collective_report_that_does_not_add_up() {
    let doc = read("tests/jsoncheck/coll_all_reduce.json");
    // A run whose check found wrong elements: well formed, and a failure.
    let mut failed = with(
        &doc,
        "/rows/0/out_of_place/per_rank_wrong",
        Some(vec![250, 250].into()),
    );
    failed = with(&failed, "/rows/0/out_of_place/wrong", Some(500.into()));
    refused(
        &with(&failed, "/wrong", Some(500.into())),
        "wrong: 500 element(s) held a wrong value after the collective (-c 1): the report is \
         of a run that FAILED its check",
    );
    refused(
        &with(&doc, "/rows/0/out_of_place/time_us", Some(0.0.into())),
        "rows[0].out_of_place.time_us: 0 (8 bytes): not positive",
    );
    refused(
        &with(&doc, "/rows/0/out_of_place/time_us", Some(39.0.into())),
        "rows[0].out_of_place.time_us: 39 is not the slowest rank's time (40.5)",
    );
    refused(
        &with(&doc, "/rows/1/out_of_place/busbw_gbs", Some(0.5.into())),
        "rows[1].out_of_place.busbw_gbs: 0.5 is not the algorithm bandwidth times the bus \
         factor (0.0003809523809523809)",
    );
    refused(
        &with(&doc, "/type", Some("banana".into())),
        "type: \"banana\" is not one of float, double, int32, int64, uint8, int8, uint32, uint64, \
         half, bfloat16",
    );
    refused(
        &with(&doc, "/redop", Some("xor".into())),
        "redop: \"xor\" is not one of sum, prod, min, max, avg",
    );
    refused(
        &with(&doc, "/redop", Some(Value::Null)),
        "redop: null, but all_reduce reduces",
    );
    refused(
        &with(&doc, "/ranks/1/rank", Some(0.into())),
        "ranks: the ranks are [0, 0], not each of 0..1 once (nranks 2)",
    );
    refused(
        &with(&doc, "/busbw_factor", Some(7.5.into())),
        "busbw_factor: 7.5 is not all_reduce's on 2 rank(s) (1)",
    );
    refused(
        &with(&doc, "/rows/0/count", Some(999.into())),
        "rows[0].count: 999 is not the count of 8 bytes of float (2)",
    );
    let e = check_report(&with(&doc, "/avg_busbw_gbs", Some(123456.into())), None).unwrap_err();
    assert!(
        e.starts_with("avg_busbw_gbs: 123456 is not the average of the rows' bus bandwidths"),
        "{e}"
    );
}

#[test]
fn checks_the_sizes_given() {
    let doc = read("../perftest/tests/golden/lat.json");
    let got = check_report(&doc, None).unwrap();
    assert_eq!(check_report(&doc, Some(&got)), Ok(got.clone()));
    let mut more = got.clone();
    more.push(1 << 20);
    assert_eq!(
        check_report(&doc, Some(&more)).unwrap_err(),
        format!("the results hold the sizes {got:?}, expected {more:?}")
    );
}

/// The fabric check's report of two suspects, as its writer makes it (`vl_coll`'s test of the
/// report keeps this file equal to what it writes): it passes; the same report hiding a suspect,
/// or with a measured direction of 0 bytes, does not.
#[test]
fn refuses_a_fabric_report_that_hides_a_suspect() {
    let doc = read("tests/jsoncheck/fabric-suspects.json");
    assert_eq!(check_report(&doc, None), Ok(vec![65536]));
    let mut hid = doc.clone();
    hid["suspects"].as_array_mut().unwrap().remove(0);
    let e = check_report(&hid, None).unwrap_err();
    assert!(
        e.starts_with("suspects: the rules give hosts [2, 3]"),
        "{e}"
    );
    let mut bad = doc.clone();
    bad["pairs"][0]["result"]["b"] = serde_json::json!(0);
    assert!(check_report(&bad, None).is_err());
}
