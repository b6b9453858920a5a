//! What a valid collective's `--json` report is (the `"rows"` half of `vl_jsoncheck`, see
//! [`super`]). The report is read into the writer's own structs ([`CollJson`]), then held to
//! what the writer computes: a known `tool` naming its `collective`, a `"version"`, the
//! element `type` and the `redop` (`null` for a collective that does not reduce) among the
//! tools' own, the `busbw_factor` of the collective and world size, one rank record per rank
//! 0..nranks-1, at least one row, sizes strictly increasing, each row's `count` its size in
//! elements (per rank where nccl-tests prints it so), each measure's time positive and the
//! slowest rank's, its bandwidths those of its time, the `wrong` counts summed right, the
//! footer's average bus bandwidth that of the rows — and no wrong element: a report of a run
//! whose check (`-c 1`) failed is refused, as the run itself exited 1. (No number is negative:
//! [`super::check_report`].)

use std::collections::BTreeMap;

use serde_json::Value;
use vl_coll::{Coll, DataType, RedOp};

use super::{increasing, known_tool, typed, typed_rows};
use vl_coll::perf::report::{
    algbw, busbw, count_column, per_rank_parts, CollJson, MeasureJson, RankJson, RowJson,
};

/// `got` (at `path`) is `want` but for rounding (to 4 significant digits, as a table shows
/// them: the writer's own figures match to the last bit).
fn computed(path: &str, got: f64, want: f64, what: &str) -> Result<(), String> {
    if (got - want).abs() <= 1e-3 * got.abs().max(want.abs()) {
        Ok(())
    } else {
        Err(format!("{path}: {got} is not {what} ({want})"))
    }
}

/// The run a measure belongs to: what its bandwidths follow from.
struct Run {
    coll: Coll,
    nranks: usize,
}

/// What a measurement of a collective's row must satisfy beyond its type.
trait CheckMeasure {
    /// The wrong elements it reports, or `Err` naming the JSON `path` and what is wrong.
    fn check(&self, path: &str, run: &Run, size: usize) -> Result<u64, String>;
}

impl CheckMeasure for MeasureJson<'_> {
    /// Its time (positive, the slowest rank's), bandwidths, and wrong count (the sum of the
    /// ranks'), which it returns.
    fn check(&self, path: &str, run: &Run, size: usize) -> Result<u64, String> {
        let n = run.nranks;
        if self.per_rank_time_us.len() != n {
            return Err(format!(
                "{path}.per_rank_time_us: {} time(s) for {n} rank(s)",
                self.per_rank_time_us.len()
            ));
        }
        let t = self.time_us;
        if t <= 0.0 {
            return Err(format!("{path}.time_us: {t} ({size} bytes): not positive"));
        }
        let slowest = self.per_rank_time_us.iter().copied().fold(0.0, f64::max);
        computed(
            &format!("{path}.time_us"),
            t,
            slowest,
            "the slowest rank's time",
        )?;
        computed(
            &format!("{path}.algbw_gbs"),
            self.algbw_gbs,
            algbw(size, t),
            "the size over the time",
        )?;
        computed(
            &format!("{path}.busbw_gbs"),
            self.busbw_gbs,
            busbw(run.coll, n, size, t),
            "the algorithm bandwidth times the bus factor",
        )?;
        if let Some(w) = self.per_rank_wrong.as_ref().filter(|w| w.len() != n) {
            return Err(format!(
                "{path}.per_rank_wrong: {} count(s) for {n} rank(s)",
                w.len()
            ));
        }
        let sum = self.per_rank_wrong.as_ref().map(|w| w.iter().sum::<u64>());
        if sum != self.wrong {
            return Err(format!(
                "{path}.wrong: {:?} is not the sum of per_rank_wrong ({sum:?})",
                self.wrong
            ));
        }
        Ok(self.wrong.unwrap_or(0))
    }
}

/// The report's element type and reduction: the tools' own names, a reduction exactly when
/// the collective reduces.
fn check_type(
    rep: &CollJson<BTreeMap<String, Value>, Value, Value>,
    coll: Coll,
) -> Result<DataType, String> {
    let dtype = rep
        .dtype
        .parse::<DataType>()
        .ok()
        .filter(|d| d.name() == rep.dtype)
        .ok_or_else(|| {
            let names: Vec<&str> = DataType::ALL.iter().map(|d| d.name()).collect();
            format!("type: \"{}\" is not one of {}", rep.dtype, names.join(", "))
        })?;
    match (&rep.redop, coll.reduces()) {
        (Some(op), true) if op.parse::<RedOp>().is_ok() => Ok(dtype),
        (Some(op), true) => {
            let names: Vec<&str> = RedOp::ALL.iter().map(|o| o.name()).collect();
            Err(format!(
                "redop: \"{op}\" is not one of {}",
                names.join(", ")
            ))
        }
        (None, true) => Err(format!("redop: null, but {} reduces", rep.collective)),
        (Some(op), false) => Err(format!(
            "redop: \"{op}\", but {} does not reduce (null)",
            rep.collective
        )),
        (None, false) => Ok(dtype),
    }
}

/// A collective's report: its sizes.
pub(crate) fn check_coll(doc: &Value) -> Result<Vec<u64>, String> {
    if doc.get("version").is_none() {
        return Err(
            "version: missing: a collective's report names the verbs-lab version \
                    that wrote it (an older vl_*_perf wrote none: rerun it)"
                .into(),
        );
    }
    let rep: CollJson<BTreeMap<String, Value>, Value, Value> = typed(doc, "")?;
    let coll = check_identity(&rep)?;
    let n = rep.nranks;
    if n == 0 {
        return Err("nranks: 0".into());
    }
    let dtype = check_type(&rep, coll)?;
    computed(
        "busbw_factor",
        rep.busbw_factor,
        coll.busbw_factor(n),
        &format!("{}'s on {n} rank(s)", coll.name()),
    )?;
    check_ranks(&rep.ranks, n)?;
    if rep.rows.is_empty() {
        return Err("rows: empty: the run measured nothing".into());
    }
    let rows: Vec<RowJson<Value>> = typed_rows(&rep.rows, "rows")?;
    let sizes: Vec<u64> = rows.iter().map(|r| r.size as u64).collect();
    // Where nccl-tests rounds the count down to a multiple of the ranks, two requested sizes
    // may move the same bytes, and a small one none at all.
    let rounds = per_rank_parts(coll);
    match sizes.windows(2).position(|w| w[1] < w[0]) {
        Some(i) if rounds => {
            return Err(format!(
                "rows[{}].size: {} after {}: the sizes must not decrease",
                i + 1,
                sizes[i + 1],
                sizes[i]
            ))
        }
        _ if rounds => {}
        _ => increasing("rows", "size", &sizes, false)?,
    }
    let (wrong, busbws) = check_rows(&rows, Run { coll, nranks: n }, dtype, rounds)?;
    if wrong != rep.wrong {
        return Err(format!(
            "wrong: {} is not the sum of the rows' ({wrong})",
            rep.wrong
        ));
    }
    if wrong > 0 {
        return Err(format!(
            "wrong: {wrong} element(s) held a wrong value after the collective (-c 1): the \
             report is of a run that FAILED its check"
        ));
    }
    computed(
        "avg_busbw_gbs",
        rep.avg_busbw_gbs,
        busbws.iter().sum::<f64>() / busbws.len() as f64,
        "the average of the rows' bus bandwidths",
    )?;
    Ok(sizes)
}

/// The tool the report names, one of ours, and the collective it runs; the version present.
fn check_identity(rep: &CollJson<BTreeMap<String, Value>, Value, Value>) -> Result<Coll, String> {
    let colls = [
        Coll::AllReduce,
        Coll::ReduceScatter,
        Coll::AllGather,
        Coll::Broadcast { root: 0 },
        Coll::SendRecv,
        Coll::AllToAll,
        Coll::Reduce { root: 0 },
        Coll::Gather { root: 0 },
        Coll::Scatter { root: 0 },
    ];
    let tools: Vec<(String, Coll)> = colls
        .iter()
        .map(|&c| (format!("vl_{}_perf", c.name()), c))
        .collect();
    let coll = *known_tool(&tools, &rep.tool, "collectives")?;
    if rep.version.is_empty() {
        return Err("version: empty".into());
    }
    if rep.collective != coll.name() {
        return Err(format!(
            "collective: \"{}\" is not what {} runs (\"{}\")",
            rep.collective,
            rep.tool,
            coll.name()
        ));
    }
    Ok(coll)
}

/// One record per rank, each of 0..n once.
fn check_ranks(ranks: &[Value], n: usize) -> Result<(), String> {
    let ranks: Vec<RankJson> = typed_rows(ranks, "ranks")?;
    if ranks.len() != n {
        return Err(format!("ranks: {} record(s) for nranks {n}", ranks.len()));
    }
    let mut numbers: Vec<u32> = ranks.iter().map(|r| r.rank).collect();
    numbers.sort_unstable();
    if !numbers.iter().copied().eq(0..n as u32) {
        return Err(format!(
            "ranks: the ranks are {numbers:?}, not each of 0..{} once (nranks {n})",
            n - 1
        ));
    }
    Ok(())
}

/// Each row's size and count, and each measurement's numbers: the wrong elements of all of them
/// and every bus bandwidth, in order.
fn check_rows(
    rows: &[RowJson<Value>],
    run: Run,
    dtype: DataType,
    rounds: bool,
) -> Result<(u64, Vec<f64>), String> {
    let (coll, n) = (run.coll, run.nranks);
    let (mut wrong, mut busbws) = (0, Vec::new());
    for (i, r) in rows.iter().enumerate() {
        let path = format!("rows[{i}]");
        if r.size == 0 && !rounds {
            return Err(format!("{path}.size: 0"));
        }
        let count = count_column(coll, n, r.size, dtype);
        if r.count != count {
            return Err(format!(
                "{path}.count: {} is not the count of {} bytes of {} ({count})",
                r.count,
                r.size,
                dtype.name()
            ));
        }
        for (key, m) in [
            ("out_of_place", Some(&r.out_of_place)),
            ("in_place", r.in_place.as_ref()),
        ] {
            if let Some(m) = m {
                let p = format!("{path}.{key}");
                let m: MeasureJson = typed(m, &p)?;
                wrong += m.check(&p, &run, r.size)?;
                busbws.push(m.busbw_gbs);
            }
        }
    }
    Ok((wrong, busbws))
}
