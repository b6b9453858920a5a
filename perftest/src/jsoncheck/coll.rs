//! What a valid collective's `--json` report is (the `"rows"` half of `vl_jsoncheck`, see
//! [`super`]): a known `tool` naming its `collective`, a `"version"`, one rank
//! record and one time per rank, at least one row, sizes strictly increasing (no number
//! negative: [`super::check_report`]), and the `wrong` total the sum of its rows'. The report is read into the writer's
//! own structs ([`CollJson`]).

use std::collections::BTreeMap;

use serde_json::Value;
use verbs_lab::coll::Coll;

use super::{increasing, known_tool, typed, typed_rows};
use crate::coll::report::{CollJson, MeasureJson, RankJson, RowJson};

impl MeasureJson<'_> {
    /// Its figures, each rank's time, and its wrong count (the sum of the ranks').
    fn check(&self, path: &str, nranks: usize) -> Result<u64, String> {
        if self.per_rank_time_us.len() != nranks {
            return Err(format!(
                "{path}.per_rank_time_us: {} time(s) for {nranks} rank(s)",
                self.per_rank_time_us.len()
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
    let colls = [
        Coll::AllReduce,
        Coll::ReduceScatter,
        Coll::AllGather,
        Coll::Broadcast { root: 0 },
        Coll::SendRecv,
    ];
    let tools: Vec<(String, &str)> = colls
        .iter()
        .map(|c| (format!("vl_{}_perf", c.name()), c.name()))
        .collect();
    let coll = known_tool(&tools, &rep.tool, "collectives")?;
    if rep.version.is_empty() {
        return Err("version: empty".into());
    }
    if rep.collective != *coll {
        return Err(format!(
            "collective: \"{}\" is not what {} runs (\"{coll}\")",
            rep.collective, rep.tool
        ));
    }
    if rep.nranks == 0 {
        return Err("nranks: 0".into());
    }
    let ranks: Vec<RankJson> = typed_rows(&rep.ranks, "ranks")?;
    if ranks.len() != rep.nranks {
        return Err(format!(
            "ranks: {} record(s) for nranks {}",
            ranks.len(),
            rep.nranks
        ));
    }
    if rep.rows.is_empty() {
        return Err("rows: empty: the run measured nothing".into());
    }
    let rows: Vec<RowJson<Value>> = typed_rows(&rep.rows, "rows")?;
    let mut wrong = 0;
    for (i, r) in rows.iter().enumerate() {
        let path = format!("rows[{i}]");
        if r.size == 0 {
            return Err(format!("{path}.size: 0"));
        }
        for (key, m) in [
            ("out_of_place", Some(&r.out_of_place)),
            ("in_place", r.in_place.as_ref()),
        ] {
            if let Some(m) = m {
                let p = format!("{path}.{key}");
                let m: MeasureJson = typed(m, &p)?;
                wrong += m.check(&p, rep.nranks)?;
            }
        }
    }
    if wrong != rep.wrong {
        return Err(format!(
            "wrong: {} is not the sum of the rows' ({wrong})",
            rep.wrong
        ));
    }
    let sizes: Vec<u64> = rows.iter().map(|r| r.size as u64).collect();
    increasing("rows", "size", &sizes, false)?;
    Ok(sizes)
}
