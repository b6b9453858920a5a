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
        comparisons(&from_str_strict::<Value>(r#"{"results":[]}"#).unwrap())
            .unwrap_err()
            .contains("no \"rows\"")
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
