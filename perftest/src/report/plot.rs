//! `--plot FILE.svg`: a sweep as a chart, drawn from the run's own JSON report so that the
//! chart shows exactly the numbers the report holds.
//!
//! | tool | panels (x: message size, log₂ axis) |
//! |---|---|
//! | `vl_*_bw` | average and peak bandwidth (the report's unit); message rate (Mpps) |
//! | `vl_*_lat` | latency percentiles: min, median, p99, p99.9, p99.99, max (µs) |
//!
//! plotters draws it with its SVG backend and its built-in font metrics: no system font is
//! read, so it works in the busybox guest and on CI machines without fonts; the viewer
//! renders the text with its own sans-serif.
//!
//! [`comparisons`] and [`render_comparison_svg`] draw the charts of `docs/benchmarks.md` from
//! `scripts/bench-vs-perftest`'s JSON (`vl_benchchart`): per tool, ours against perftest per
//! message size, each the median of the rounds with a band over their range (min to max),
//! relative to perftest's median at that size (absolute numbers span four decades across a
//! sweep, and under emulation only the ratios mean something; the table has the numbers).
//!
//! Each series has a colour of its own ([`Series::color`]), drawn as one `<polyline>` with a
//! point per message size. [`check_svg`] uses that to read an SVG back and prove that its
//! points are the report's numbers (`vl_jsoncheck --plot`, and the host tests).

use std::fmt::Write as _;
use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

use super::schema::Document;
use super::BwUnit;

/// Width of the chart, and height of each panel, in pixels.
const WIDTH: u32 = 800;
const PANEL_HEIGHT: u32 = 380;

/// The x axis's description, on every panel.
pub const X_DESC: &str = "message size [bytes]";

/// One line of a panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: &'static str,
    /// The JSON key of each row the line plots.
    pub key: String,
    pub color: RGBColor,
    /// (bytes, value) per row, in the report's order.
    pub points: Vec<(f64, f64)>,
    /// (bytes, low, high) per row: a band drawn under the point (the spread of the rounds of a
    /// benchmark); empty for a run's own chart.
    pub spread: Vec<(f64, f64, f64)>,
}

/// One chart of the SVG: a title, the y axis's description and its lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    pub y_desc: String,
    pub series: Vec<Series>,
    /// The legend's corner: where the lines usually are not (message rate falls with size).
    pub legend: SeriesLabelPosition,
}

/// A line as drawn: its points in pixels.
pub type Pixels = Vec<(i32, i32)>;

/// Colours, one per series of a chart, distinct and readable on white.
const BLUE: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const ORANGE: RGBColor = RGBColor(0xff, 0x7f, 0x0e);
const GREEN: RGBColor = RGBColor(0x2c, 0xa0, 0x2c);
const RED: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const PURPLE: RGBColor = RGBColor(0x94, 0x67, 0xbd);
const GREY: RGBColor = RGBColor(0x7f, 0x7f, 0x7f);

/// The panels of a `--json` report: bandwidth and message rate for `"metric": "bw"`, latency
/// percentiles for `"lat"`. An error names what the document lacks.
pub fn panels(doc: &Value) -> Result<Vec<Panel>, String> {
    Document::expect(doc, Document::Report, "--plot")?;
    let run = doc.get("run").ok_or("the report has no \"run\"")?;
    let rows = doc
        .get("results")
        .and_then(Value::as_array)
        .ok_or("the report has no \"results\" array")?;
    if rows.is_empty() {
        return Err("the report has no result rows to plot".into());
    }
    let title = run.get("title").and_then(Value::as_str).unwrap_or("vl_*");
    let series = |name: &'static str, key: &str, color: RGBColor| -> Result<Series, String> {
        let points = rows
            .iter()
            .enumerate()
            // A latency row without samples (a server's `-n 1`) has no times to draw.
            .filter(|(_, r)| r.get("samples").and_then(Value::as_u64) != Some(0))
            .map(|(i, r)| {
                let x = r.get("bytes").and_then(Value::as_f64);
                let y = r.get(key).and_then(Value::as_f64);
                x.zip(y)
                    .ok_or_else(|| format!("results[{i}] has no numeric \"bytes\" and \"{key}\""))
            })
            .collect::<Result<_, _>>()?;
        Ok(Series {
            name,
            key: key.to_string(),
            color,
            points,
            spread: Vec::new(),
        })
    };
    match run.get("metric").and_then(Value::as_str) {
        Some("bw") => {
            let u = BwUnit::from_name(run.get("report_unit").and_then(Value::as_str));
            let (unit, key) = (u.name(), u.key());
            Ok(vec![
                Panel {
                    title: format!("{title}: bandwidth"),
                    y_desc: format!("bandwidth [{unit}]"),
                    series: vec![
                        series("average", &format!("bw_avg_{key}"), BLUE)?,
                        series("peak", &format!("bw_peak_{key}"), ORANGE)?,
                    ],
                    legend: SeriesLabelPosition::UpperLeft,
                },
                Panel {
                    title: format!("{title}: message rate"),
                    y_desc: "message rate [Mpps]".into(),
                    series: vec![series("message rate", "msg_rate_mpps", GREEN)?],
                    legend: SeriesLabelPosition::UpperRight,
                },
            ])
        }
        Some("lat") => Ok(vec![Panel {
            title: format!("{title}: latency"),
            y_desc: "latency [usec]".into(),
            series: vec![
                series("min", "t_min_us", GREY)?,
                series("median", "t_median_us", BLUE)?,
                series("p99", "t_p99_us", GREEN)?,
                series("p99.9", "t_p99_9_us", ORANGE)?,
                series("p99.99", "t_p99_99_us", RED)?,
                series("max", "t_max_us", PURPLE)?,
            ],
            legend: SeriesLabelPosition::UpperLeft,
        }]),
        other => Err(format!(
            "the report's \"run\".\"metric\" is {other:?}, expected \"bw\" or \"lat\""
        )),
    }
}

/// The SVG of a `--json` report (see the module docs).
pub fn render_svg(doc: &Value) -> Result<String, String> {
    let panels = panels(doc)?;
    let mut svg = String::new();
    draw(&panels, &mut svg).map_err(|e| format!("drawing the chart: {e}"))?;
    Ok(svg)
}

/// Draws `panels` into `svg` and returns where each series' points landed, in pixels.
fn draw(panels: &[Panel], svg: &mut String) -> Result<Vec<Vec<Pixels>>, String> {
    let height = PANEL_HEIGHT * panels.len() as u32;
    let root = SVGBackend::with_string(svg, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let areas = root.split_evenly((panels.len(), 1));
    let mut pixels = Vec::new();
    for (panel, area) in panels.iter().zip(&areas) {
        let axes = axes(panel)?;
        pixels.push(draw_panel(panel, axes, area).map_err(|e| e.to_string())?);
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(pixels)
}

type DrawResult<T> = Result<T, DrawingAreaErrorKind<std::io::Error>>;

/// The largest size or value a chart draws. An axis ends past its largest one by a factor of 6
/// at most (4 × 1.5 around a single size), and that end must still be finite: 6e307 is.
pub const AXIS_LIMIT: f64 = 1e307;

/// Whether `v` (a size or a value) leaves room for its axis ([`AXIS_LIMIT`]).
pub fn fits_axis(v: f64) -> bool {
    v.abs() <= AXIS_LIMIT
}

/// A panel's axes — x (message size, log₂) and y (from 0 to a little above the highest value) —
/// or why its numbers cannot be drawn. plotters' tick generator never returns for an axis that
/// ends at infinity or at a size of 0 on the log axis (it multiplies towards the end), so every
/// point must be a size of at least 1 byte and a finite value of 0 or more, small enough that
/// the axis's end is finite too ([`fits_axis`]). Those axes it walks in a bounded number of
/// steps (the host tests draw the extremes).
fn axes(p: &Panel) -> Result<(Range<f64>, Range<f64>), String> {
    for s in &p.series {
        let bands = s.spread.iter().flat_map(|&(x, lo, hi)| [(x, lo), (x, hi)]);
        for (x, y) in s.points.iter().copied().chain(bands) {
            let line = format!("the \"{}\" line of \"{}\"", s.name, p.title);
            if !(x >= 1.0 && fits_axis(x)) {
                return Err(format!(
                    "{line} has a point at {} bytes: a message size on the chart's log axis is \
                     a finite number of at least 1 byte",
                    number(x)
                ));
            }
            if !(y >= 0.0 && fits_axis(y)) {
                return Err(format!(
                    "{line} has the value {} at {} bytes: a chart shows finite values of 0 or \
                     more, up to {}",
                    number(y),
                    number(x),
                    number(AXIS_LIMIT)
                ));
            }
        }
    }
    let all = || p.series.iter().flat_map(|s| s.points.iter());
    let x_min = all().map(|pt| pt.0).fold(f64::INFINITY, f64::min).max(1.0);
    let mut x_max = all().map(|pt| pt.0).fold(0.0, f64::max);
    if x_max <= x_min {
        // One size: widen the axis around it so the point sits inside.
        x_max = x_min * 4.0;
    }
    let highs = p.series.iter().flat_map(|s| s.spread.iter().map(|b| b.2));
    let y_top = all().map(|pt| pt.1).chain(highs).fold(0.0, f64::max);
    let y_top = if y_top > 0.0 { y_top * 1.1 } else { 1.0 };
    Ok((x_min / 1.5..x_max * 1.5, 0.0..y_top))
}

fn draw_panel(
    p: &Panel,
    (x_axis, y_axis): (Range<f64>, Range<f64>),
    area: &DrawingArea<SVGBackend<'_>, Shift>,
) -> DrawResult<Vec<Pixels>> {
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x_axis.log_scale().base(2.0), y_axis)?;
    chart
        .configure_mesh()
        .x_desc(X_DESC)
        .y_desc(&p.y_desc)
        .x_label_formatter(&|x| size_label(*x))
        .draw()?;
    let mut pixels = Vec::new();
    for s in &p.series {
        let color = s.color;
        // The spread as a translucent band a little wider than the point (rectangles, so that
        // each series stays one polyline).
        chart.draw_series(s.spread.iter().map(|&(x, lo, hi)| {
            Rectangle::new([(x / 1.12, lo), (x * 1.12, hi)], color.mix(0.3).filled())
        }))?;
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 4), (x + 14, y + 4)], color.filled()));
        chart.draw_series(
            s.points
                .iter()
                .map(|&pt| Circle::new(pt, 3, color.filled())),
        )?;
        pixels.push(s.points.iter().map(|pt| chart.backend_coord(pt)).collect());
    }
    chart
        .configure_series_labels()
        .position(p.legend.clone())
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(pixels)
}

/// One side of a benchmark row: the median of its valid rounds and their range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub bytes: f64,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// One chart of `docs/benchmarks.md`: a tool (a row family such as `write_bw`), ours against
/// perftest at each message size both have a median for.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub family: String,
    pub y_desc: String,
    pub ours: Vec<Spread>,
    pub perftest: Vec<Spread>,
}

/// The charts of a `scripts/bench-vs-perftest` JSON report: its rows grouped by `"family"` in
/// the report's order, sorted by `"bytes"`, every value divided by perftest's median at its
/// size (so perftest's median is 1). A size without a perftest median has no point on either
/// side (nothing to compare); neither has a side without a valid run. An error names what the
/// document lacks, or the JSON path of a number no chart can show: a size that is not a whole
/// number of at least 1 byte (the axis is logarithmic), a size given twice in one family, a
/// negative statistic, or one so large over perftest's median that the axis would overflow.
pub fn comparisons(doc: &Value) -> Result<Vec<Comparison>, String> {
    Document::expect(doc, Document::Benchmarks, "vl_benchchart")?;
    let rows = doc
        .get("rows")
        .and_then(Value::as_array)
        .ok_or("the report has no \"rows\" array (not scripts/bench-vs-perftest's JSON?)")?;
    let mut out: Vec<Comparison> = Vec::new();
    // (family, bytes) → the first row of that size.
    let mut sizes = std::collections::HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        let field = |k: &str| r.get(k).ok_or(format!("rows[{i}] has no \"{k}\""));
        let family = field("family")?
            .as_str()
            .ok_or(format!("rows[{i}].family"))?;
        let size = field("bytes")?;
        let bytes = size.as_u64().filter(|b| *b >= 1).ok_or(format!(
            "rows[{i}].bytes: {size} is not a message size (a whole number of bytes, at \
                 least 1: the chart's axis is logarithmic)"
        ))?;
        let key = (family.to_string(), bytes);
        if let Some(first) = sizes.insert(key, i) {
            return Err(format!(
                "rows[{i}].bytes: {bytes} again in the family \"{family}\" (rows[{first}] has \
                 it): a chart has one point per size"
            ));
        }
        let bytes = bytes as f64;
        let y_desc = match field("kind")?.as_str() {
            Some("bw" | "rate") => "BW or MsgRate / perftest median (higher is better)",
            Some("lat") => "t_typical / perftest median (lower is better)",
            other => return Err(format!("rows[{i}].kind is {other:?}")),
        };
        let ours = side_spread(r, i, "ours_stats", bytes)?;
        let theirs = side_spread(r, i, "perftest_stats", bytes)?;
        let base = theirs.map(|t| t.median).filter(|m| *m > 0.0);
        let ours = over_median(i, "ours_stats", ours, base)?;
        let theirs = over_median(i, "perftest_stats", theirs, base)?;
        let idx = match out.iter().position(|c| c.family == family) {
            Some(k) => k,
            None => {
                out.push(Comparison {
                    family: family.to_string(),
                    y_desc: y_desc.to_string(),
                    ours: Vec::new(),
                    perftest: Vec::new(),
                });
                out.len() - 1
            }
        };
        let c = &mut out[idx];
        c.ours.extend(ours);
        c.perftest.extend(theirs);
    }
    // A tool with no valid run on either side has nothing to draw.
    out.retain(|c| !c.ours.is_empty() || !c.perftest.is_empty());
    for c in &mut out {
        c.ours.sort_by(|a, b| a.bytes.total_cmp(&b.bytes));
        c.perftest.sort_by(|a, b| a.bytes.total_cmp(&b.bytes));
    }
    Ok(out)
}

/// One side of `rows[i]` (`k`: `ours_stats` or `perftest_stats`) at `bytes`: its median and
/// range, or none when a statistic is missing (the side has no valid run); an error names a
/// negative one.
fn side_spread(r: &Value, i: usize, k: &str, bytes: f64) -> Result<Option<Spread>, String> {
    let st = r.get(k).ok_or(format!("rows[{i}] has no \"{k}\""))?;
    let num = |n: &str| -> Result<Option<f64>, String> {
        let v = st.get(n);
        match v.and_then(Value::as_f64) {
            Some(x) if x < 0.0 => Err(format!(
                "rows[{i}].{k}.{n}: {} is negative",
                v.unwrap_or(&Value::Null)
            )),
            x => Ok(x),
        }
    };
    Ok(match (num("median")?, num("min")?, num("max")?) {
        (Some(median), Some(min), Some(max)) => Some(Spread {
            bytes,
            median,
            min,
            max,
        }),
        _ => None,
    })
}

/// A side of `rows[i]` (`k`) over perftest's median `base` at its size: none without either.
/// A value over a tiny median can outgrow any axis (1e307 / 0.01 is infinite): an error then.
fn over_median(
    i: usize,
    k: &str,
    v: Option<Spread>,
    base: Option<f64>,
) -> Result<Option<Spread>, String> {
    let (Some(v), Some(b)) = (v, base) else {
        return Ok(None);
    };
    let over = |n: &str, x: f64| {
        let r = x / b;
        if fits_axis(r) {
            Ok(r)
        } else {
            Err(format!(
                "rows[{i}].{k}.{n}: {} over perftest's median {} is {}: too large for a \
                 chart's axis",
                number(x),
                number(b),
                number(r)
            ))
        }
    };
    Ok(Some(Spread {
        bytes: v.bytes,
        median: over("median", v.median)?,
        min: over("min", v.min)?,
        max: over("max", v.max)?,
    }))
}

/// The panel of a comparison: ours in blue, perftest in orange, each with its spread.
pub fn comparison_panel(c: &Comparison) -> Panel {
    let series = |name: &'static str, color: RGBColor, v: &[Spread]| Series {
        name,
        key: format!("{name}_stats.median"),
        color,
        points: v.iter().map(|s| (s.bytes, s.median)).collect(),
        spread: v.iter().map(|s| (s.bytes, s.min, s.max)).collect(),
    };
    Panel {
        title: format!(
            "{}: vl_* and perftest over the perftest median (min-max of rounds)",
            c.family
        ),
        y_desc: c.y_desc.clone(),
        series: vec![
            series("ours", BLUE, &c.ours),
            series("perftest", ORANGE, &c.perftest),
        ],
        legend: SeriesLabelPosition::UpperLeft,
    }
}

/// The SVG of one comparison.
pub fn render_comparison_svg(c: &Comparison) -> Result<String, String> {
    let mut svg = String::new();
    draw(&[comparison_panel(c)], &mut svg).map_err(|e| format!("drawing the chart: {e}"))?;
    Ok(svg)
}

/// A number as JSON writes it (`2`, `0.5`, `1e+307`), or `inf`/`NaN`, which JSON cannot hold.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v}")
    } else if v.is_finite() {
        Value::from(v).to_string()
    } else {
        v.to_string()
    }
}

/// "512", "64K", "8M": the x axis's tick labels.
fn size_label(x: f64) -> String {
    let b = x.round() as u64;
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// Checks that `svg` is the chart of `doc`: for every series of [`panels`], one `<polyline>`
/// in its colour whose points are exactly where the report's numbers fall on the axes, and
/// the axes' descriptions. Returns a one-line summary.
pub fn check_svg(svg: &str, doc: &Value) -> Result<String, String> {
    let panels = panels(doc)?;
    let mut scratch = String::new();
    let expected = draw(&panels, &mut scratch)?;
    let lines = polylines(svg)?;
    let mut n_series = 0;
    for (panel, want_panel) in panels.iter().zip(&expected) {
        for text in [X_DESC, &panel.y_desc, &panel.title] {
            if !has_text(svg, text) {
                return Err(format!("no text \"{text}\" in the SVG"));
            }
        }
        for (s, want) in panel.series.iter().zip(want_panel) {
            let color = format!("#{:02X}{:02X}{:02X}", s.color.0, s.color.1, s.color.2);
            let mine: Vec<&Pixels> = lines
                .iter()
                .filter(|(c, _)| c.eq_ignore_ascii_case(&color))
                .map(|(_, pts)| pts)
                .collect();
            match mine.as_slice() {
                [got] if *got == want => n_series += 1,
                [got] => {
                    return Err(format!(
                        "the \"{}\" line ({}) has the points {got:?}, but the report's \"{}\" \
                         values fall at {want:?}",
                        s.name, color, s.key
                    ))
                }
                other => {
                    return Err(format!(
                        "expected one line in {color} for \"{}\", found {}",
                        s.name,
                        other.len()
                    ))
                }
            }
        }
    }
    let sizes = panels[0].series[0].points.len();
    Ok(format!(
        "{n_series} line(s) of {sizes} point(s) each, at the report's numbers"
    ))
}

/// Every `<polyline>` of an SVG (the axes and ticks are black ones): its stroke colour and its
/// points.
pub fn polylines(svg: &str) -> Result<Vec<(String, Pixels)>, String> {
    let mut out = Vec::new();
    for (i, tag) in svg.match_indices("<polyline").map(|(i, _)| (i, &svg[i..])) {
        let tag = &tag[..tag
            .find("/>")
            .ok_or(format!("unterminated <polyline> at byte {i}"))?];
        let attr = |name: &str| -> Option<&str> {
            let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
            let len = tag[start..].find('"')?;
            Some(&tag[start..start + len])
        };
        let stroke = attr("stroke").ok_or(format!("<polyline> without stroke at byte {i}"))?;
        let points = attr("points")
            .ok_or(format!("<polyline> without points at byte {i}"))?
            .split_whitespace()
            .map(|pair| {
                let (x, y) = pair.split_once(',')?;
                Some((x.parse().ok()?, y.parse().ok()?))
            })
            .collect::<Option<Vec<(i32, i32)>>>()
            .ok_or(format!("<polyline> with unreadable points at byte {i}"))?;
        out.push((stroke.to_string(), points));
    }
    Ok(out)
}

/// Whether `svg` has a `<text>` element saying exactly `text`.
pub fn has_text(svg: &str, text: &str) -> bool {
    let t = xml_escape(text);
    // plotters writes `<text ...>` and `</text>` on lines of their own.
    svg.contains(&format!(">{t}<")) || svg.contains(&format!(">\n{t}\n<"))
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => {
                let _ = write!(out, "{c}");
            }
        }
    }
    out
}
