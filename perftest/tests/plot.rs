//! `--plot`: the SVG of a sweep holds the report's numbers. The SVG is read back as text (its
//! `<polyline>`s and `<text>`s) and compared with the JSON report it was drawn from.

use serde_json::Value;
use verbs_lab::json::from_str_strict;
use vl_perftest::report::plot::{check_svg, has_text, panels, polylines, render_svg, X_DESC};

fn golden(name: &str) -> Value {
    let path = format!("{}/tests/golden/{name}", env!("CARGO_MANIFEST_DIR"));
    from_str_strict::<Value>(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The values of `key` in the report's rows.
fn column(doc: &Value, key: &str) -> Vec<f64> {
    doc.get("results")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|r| r.get(key).and_then(Value::as_f64).unwrap())
        .collect()
}

/// Series in a colour other than black (the axes), in document order.
fn lines(svg: &str) -> Vec<(String, Vec<(i32, i32)>)> {
    polylines(svg)
        .unwrap()
        .into_iter()
        .filter(|(c, _)| c != "#000000")
        .collect()
}

/// Pixel y grows downwards: a larger value must sit higher, equal values level.
fn assert_same_order(values: &[f64], ys: &[i32]) {
    for i in 0..values.len() {
        for j in 0..values.len() {
            if values[i] > values[j] {
                assert!(ys[i] <= ys[j], "{values:?} drawn at {ys:?}");
            }
        }
    }
}

#[test]
fn a_bandwidth_sweep_plots_bandwidth_and_message_rate_per_size() {
    let doc = golden("bw_sweep.json");
    let svg = render_svg(&doc).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // Axes: the x description on both panels, the y descriptions in the report's unit.
    assert_eq!(svg.matches(&format!(">\n{X_DESC}\n<")).count(), 2);
    assert!(has_text(&svg, "bandwidth [MiB/s]") && has_text(&svg, "message rate [Mpps]"));
    assert!(
        has_text(&svg, "average") && has_text(&svg, "peak"),
        "legend"
    );
    // Three series (average, peak, message rate), one point per size.
    let sizes = column(&doc, "bytes");
    let l = lines(&svg);
    assert_eq!(l.len(), 3, "{l:?}");
    for (_, pts) in &l {
        assert_eq!(pts.len(), sizes.len());
        // x is a log axis: sizes 2, 64K, 8M are 15 and 7 doublings apart.
        let dx: Vec<f64> = pts.windows(2).map(|w| f64::from(w[1].0 - w[0].0)).collect();
        assert!((dx[0] / dx[1] - 15.0 / 7.0).abs() < 0.02, "{pts:?}");
    }
    assert_same_order(
        &column(&doc, "bw_avg_mib_s"),
        &l[0].1.iter().map(|p| p.1).collect::<Vec<_>>(),
    );
    assert_same_order(
        &column(&doc, "msg_rate_mpps"),
        &l[2].1.iter().map(|p| p.1).collect::<Vec<_>>(),
    );
    // And exactly where the numbers fall on the axes.
    assert_eq!(
        check_svg(&svg, &doc).unwrap(),
        "3 line(s) of 3 point(s) each, at the report's numbers"
    );
}

#[test]
fn gbits_reports_plot_gbits() {
    let doc = golden("bw_gbits.json");
    let svg = render_svg(&doc).unwrap();
    assert!(has_text(&svg, "bandwidth [Gb/s]"));
    let p = panels(&doc).unwrap();
    let avg: Vec<f64> = p[0].series[0].points.iter().map(|pt| pt.1).collect();
    assert_eq!(avg, column(&doc, "bw_avg_gbit_s"));
    check_svg(&svg, &doc).unwrap();
}

#[test]
fn a_latency_run_plots_its_percentiles() {
    let doc = golden("lat.json");
    let svg = render_svg(&doc).unwrap();
    assert!(has_text(&svg, "latency [usec]") && has_text(&svg, "p99.99"));
    let l = lines(&svg);
    assert_eq!(l.len(), 6, "min, median, p99, p99.9, p99.99, max");
    let sizes = column(&doc, "bytes").len();
    assert!(l.iter().all(|(_, pts)| pts.len() == sizes));
    // At every size the percentiles stack: min lowest on the page (largest y), max highest.
    for k in 0..sizes {
        let ys: Vec<i32> = l.iter().map(|(_, pts)| pts[k].1).collect();
        assert!(ys.windows(2).all(|w| w[0] >= w[1]), "{ys:?}");
    }
    check_svg(&svg, &doc).unwrap();
}

#[test]
fn the_check_catches_a_chart_of_other_numbers() {
    let doc = golden("bw_sweep.json");
    let svg = render_svg(&doc).unwrap();
    // The same report with one average changed: the SVG no longer matches it.
    let text = std::fs::read_to_string(format!(
        "{}/tests/golden/bw_sweep.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let other = from_str_strict::<Value>(&text.replacen(
        "\"bw_avg_mib_s\": 1163.05",
        "\"bw_avg_mib_s\": 600.0",
        1,
    ))
    .unwrap();
    let e = check_svg(&svg, &other).unwrap_err();
    assert!(
        e.contains("\"average\" line") && e.contains("bw_avg_mib_s"),
        "{e}"
    );
    // A chart with a series missing.
    let cut = svg.replacen("<polyline", "<notaline", 1);
    let first_series = lines(&svg)[0].0.clone();
    let cut = if lines(&cut).iter().any(|(c, _)| *c == first_series) {
        // The first polyline was an axis: cut the first series' line instead.
        svg.replacen(
            &format!("stroke=\"{first_series}\""),
            "stroke=\"#123456\"",
            1,
        )
    } else {
        cut
    };
    assert!(check_svg(&cut, &doc)
        .unwrap_err()
        .contains("expected one line"));
    // Not a report at all.
    assert!(check_svg(&svg, &from_str_strict::<Value>("{}").unwrap()).is_err());
}

/// A bench-vs-perftest report of two tools: write_bw at three sizes (listed out of order, the
/// perftest side of one without a valid run) and read_lat at one.
fn bench_report() -> Value {
    let row = |name: &str, family: &str, bytes: u64, kind: &str, ours: &str, theirs: &str| {
        format!(
            r#"{{"name":"{name}","family":"{family}","bytes":{bytes},"kind":"{kind}",
                "ours_stats":{ours},"perftest_stats":{theirs}}}"#
        )
    };
    let st = |med: f64, lo: f64, hi: f64| {
        format!(r#"{{"valid":3,"median":{med},"min":{lo},"max":{hi}}}"#)
    };
    let none = r#"{"valid":0,"median":null,"min":null,"max":null}"#;
    let rows = [
        row(
            "write_bw_65536",
            "write_bw",
            65536,
            "bw",
            &st(300.0, 250.0, 320.0),
            &st(200.0, 100.0, 400.0),
        ),
        row(
            "write_bw_2",
            "write_bw",
            2,
            "rate",
            &st(1.5, 1.0, 2.0),
            none,
        ),
        row(
            "write_bw_4096",
            "write_bw",
            4096,
            "bw",
            &st(50.0, 40.0, 60.0),
            &st(100.0, 90.0, 110.0),
        ),
        row(
            "read_lat_2",
            "read_lat",
            2,
            "lat",
            &st(40.0, 35.0, 60.0),
            &st(40.0, 30.0, 45.0),
        ),
    ];
    from_str_strict::<Value>(&format!(r#"{{"rows":[{}]}}"#, rows.join(","))).unwrap()
}

#[test]
fn bench_rows_group_into_one_chart_per_tool_relative_to_perftest() {
    use vl_perftest::report::plot::{comparisons, Spread};
    let c = comparisons(&bench_report()).unwrap();
    assert_eq!(c.len(), 2);
    assert_eq!(c[0].family, "write_bw");
    assert!(c[0].y_desc.contains("higher is better"), "{}", c[0].y_desc);
    // Sorted by size; 2 B has no perftest median, so no point on either side.
    let sizes: Vec<f64> = c[0].ours.iter().map(|s| s.bytes).collect();
    assert_eq!(sizes, vec![4096.0, 65536.0]);
    // Every value over perftest's median at its size.
    assert_eq!(
        c[0].ours[1],
        Spread {
            bytes: 65536.0,
            median: 1.5,
            min: 1.25,
            max: 1.6
        }
    );
    assert_eq!(
        c[0].perftest[0],
        Spread {
            bytes: 4096.0,
            median: 1.0,
            min: 0.9,
            max: 1.1
        }
    );
    assert_eq!(c[0].ours[0].median, 0.5);
    assert_eq!(c[1].family, "read_lat");
    assert!(c[1].y_desc.contains("lower is better"));
    assert!(
        comparisons(&from_str_strict::<Value>(r#"{"other":[]}"#).unwrap())
            .unwrap_err()
            .contains("no \"rows\"")
    );
    // A vl_* report given instead is named as one.
    assert_eq!(
        comparisons(&from_str_strict::<Value>(r#"{"results":[]}"#).unwrap()).unwrap_err(),
        "the file is a vl_* tool's --json report (read by vl_jsoncheck); vl_benchchart reads \
         scripts/bench-vs-perftest's benchmarks.json"
    );
}

#[test]
fn a_comparison_chart_draws_each_side_at_its_ratios() {
    use vl_perftest::report::plot::{comparison_panel, comparisons, render_comparison_svg};
    let c = &comparisons(&bench_report()).unwrap()[0];
    let svg = render_comparison_svg(c).unwrap();
    let panel = comparison_panel(c);
    assert!(has_text(&svg, &panel.title) && has_text(&svg, &c.y_desc));
    let got = lines(&svg);
    // One polyline per side, two points each.
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!((got[0].1.len(), got[1].1.len()), (2, 2));
    // Ours at 4 KiB (0.5) sits lower on the chart (a larger y pixel) than at 64 KiB (1.5);
    // perftest's two points are both at 1, level.
    assert!(got[0].1[0].1 > got[0].1[1].1);
    assert_eq!(got[1].1[0].1, got[1].1[1].1);
    // The spread bands are drawn: the translucent rectangles, one per point.
    let bands = svg
        .split("<rect")
        .skip(1)
        .filter(|r| r.contains("opacity=\"0.3\""))
        .count();
    assert_eq!(bands, 4, "{svg}");
}

/// Runs `f` on a thread of its own and waits at most 60 s for it: an axis whose tick generator
/// never returns fails the test instead of hanging it.
fn within_a_minute<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: not drawn or refused within 60 s (an endless axis)"))
}

#[test]
fn a_chart_of_extreme_numbers_is_drawn_or_refused_without_hanging() {
    use vl_perftest::report::plot::{render_comparison_svg, Comparison, Spread, AXIS_LIMIT};
    // The largest size or value an axis takes (its end, 6 times it at most, stays finite).
    let top = AXIS_LIMIT;
    let values = [
        0.0,
        5e-324,
        1e-310,
        1.0,
        1e300,
        top,
        1.1e307,
        f64::MAX,
        f64::INFINITY,
        f64::NAN,
        -1.0,
    ];
    let sizes = [
        1.0,
        2.0,
        1e300,
        top,
        1.1e307,
        f64::MAX,
        0.5,
        0.0,
        f64::INFINITY,
    ];
    let results = within_a_minute("extreme charts", move || {
        let mut out = Vec::new();
        for &bytes in &sizes {
            for &v in &values {
                let s = Spread {
                    bytes,
                    median: v,
                    min: 0.0,
                    max: v,
                };
                let c = Comparison {
                    family: "x".into(),
                    y_desc: "y".into(),
                    ours: vec![s],
                    perftest: vec![Spread {
                        median: 1.0,
                        min: 1.0,
                        max: 1.0,
                        ..s
                    }],
                };
                out.push((bytes, v, render_comparison_svg(&c)));
            }
        }
        out
    });
    for (bytes, v, got) in results {
        let drawable = (1.0..=top).contains(&bytes) && (0.0..=top).contains(&v);
        match got {
            Ok(svg) => assert!(
                drawable && svg.contains("<polyline"),
                "{bytes} B, {v}: drawn"
            ),
            Err(e) => {
                assert!(!drawable, "{bytes} B, {v}: {e}");
                let why = if (1.0..=top).contains(&bytes) {
                    "a chart shows finite values of 0 or more, up to 1e+307"
                } else {
                    "a message size on the chart's log axis is a finite number of at least 1 byte"
                };
                assert!(
                    e.starts_with("drawing the chart: the \"ours\" line of \"x: ")
                        && e.ends_with(why),
                    "{bytes} B, {v}: {e}"
                );
            }
        }
    }
}

#[test]
fn a_run_chart_of_an_infinite_axis_is_refused_not_drawn_forever() {
    // `--plot` and `vl_jsoncheck --plot` draw a run's report: a peak of 1.7e308 would end the
    // y axis at 1.1 × 1.7e308 = inf, where plotters' tick generator never returns.
    let text = std::fs::read_to_string(format!(
        "{}/tests/golden/bw_sweep.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let peak = golden("bw_sweep.json")["results"][0]["bw_peak_mib_s"].to_string();
    let doc = from_str_strict::<Value>(&text.replacen(
        &format!("\"bw_peak_mib_s\": {peak}"),
        "\"bw_peak_mib_s\": 1.7e308",
        1,
    ))
    .unwrap();
    assert_eq!(doc["results"][0]["bw_peak_mib_s"], 1.7e308);
    let svg = render_svg(&golden("bw_sweep.json")).unwrap();
    let (drawn, checked) = within_a_minute("a peak of 1.7e308", move || {
        (render_svg(&doc), check_svg(&svg, &doc))
    });
    let want = "the \"peak\" line of \"RDMA_Write BW Test: bandwidth\" has the value 1.7e+308 at \
                2 bytes: a chart shows finite values of 0 or more, up to 1e+307";
    assert_eq!(drawn.unwrap_err(), format!("drawing the chart: {want}"));
    assert_eq!(checked.unwrap_err(), want);
}

#[test]
fn bench_rows_a_chart_cannot_show_are_refused_by_their_json_path() {
    use vl_perftest::report::plot::comparisons;
    let refused = |edits: &[(&str, &str)]| -> String {
        let mut text = bench_report().to_string();
        for (from, to) in edits {
            assert!(text.contains(from), "{from} in {text}");
            text = text.replacen(from, to, 1);
        }
        comparisons(&from_str_strict::<Value>(&text).unwrap()).unwrap_err()
    };
    // rows[0] is write_bw at 64 KiB: ours 300 (250..320), perftest's median 200.
    assert_eq!(
        refused(&[("\"median\":300", "\"median\":-5")]),
        "rows[0].ours_stats.median: -5 is negative"
    );
    assert_eq!(
        refused(&[("\"bytes\":4096", "\"bytes\":0")]),
        "rows[2].bytes: 0 is not a message size (a whole number of bytes, at least 1: the \
         chart's axis is logarithmic)"
    );
    assert_eq!(
        refused(&[("\"bytes\":4096", "\"bytes\":65536")]),
        "rows[2].bytes: 65536 again in the family \"write_bw\" (rows[0] has it): a chart has \
         one point per size"
    );
    // Finite on its own, infinite on the axis: 1e305 over a median of 0.001.
    assert_eq!(
        refused(&[
            ("\"max\":320", "\"max\":1e305"),
            ("\"median\":200", "\"median\":0.001")
        ]),
        "rows[0].ours_stats.max: 1e+305 over perftest's median 0.001 is 1e+308: too large for \
         a chart's axis"
    );
}
