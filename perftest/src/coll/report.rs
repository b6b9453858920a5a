//! The nccl-tests layout: header, one row per size with out-of-place and in-place columns, the
//! footer; the bandwidth arithmetic; the JSON document.

use verbs_lab::coll::{Coll, DataType, RankRecord, RedOp};
use verbs_lab::json::{Object, Value};

/// One placement's measurement of one size, over all ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct Measure {
    /// Average time of one collective, per rank (µs).
    pub per_rank_us: Vec<f64>,
    /// Wrong elements per rank (`None`: not checked).
    pub wrong: Option<Vec<u64>>,
}

impl Measure {
    /// The time reported: the slowest rank's (a collective is over when the last rank is done).
    pub fn time_us(&self) -> f64 {
        self.per_rank_us.iter().copied().fold(0.0, f64::max)
    }
    pub fn wrong_total(&self) -> Option<u64> {
        self.wrong.as_ref().map(|w| w.iter().sum())
    }
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub size: usize,
    pub count: usize,
    pub out_of_place: Measure,
    /// `None` where the collective has no in-place form (sendrecv).
    pub in_place: Option<Measure>,
}

/// Algorithm bandwidth in GB/s (10^9 bytes) of `size` bytes in `time_us`.
pub fn algbw(size: usize, time_us: f64) -> f64 {
    if time_us > 0.0 {
        size as f64 / time_us / 1e3
    } else {
        0.0
    }
}

/// Bus bandwidth: [`algbw`] × nccl-tests' factor for the collective and world size.
pub fn busbw(coll: Coll, n: usize, size: usize, time_us: f64) -> f64 {
    algbw(size, time_us) * coll.busbw_factor(n)
}

/// The `count` column: elements per rank as nccl-tests prints it (per-rank part for
/// reduce-scatter and all-gather).
pub fn count_column(coll: Coll, n: usize, size: usize, dtype: DataType) -> usize {
    let total = size / dtype.size();
    match coll {
        Coll::ReduceScatter | Coll::AllGather => total / n,
        _ => total,
    }
}

/// The table's context: what every row shares.
pub struct Table<'a> {
    pub tool: &'a str,
    pub coll: Coll,
    pub n: usize,
    pub dtype: DataType,
    pub op: Option<RedOp>,
}

impl Table<'_> {
    pub fn header(&self, ranks: &[RankRecord], params: &str) -> String {
        let mut s = format!("# {}: {params}\n#\n# Using devices\n", self.tool);
        for r in ranks {
            s += &format!(
                "#  Rank {:2} Pid {:7} on {:>10} device {:>6} cpu {}\n",
                r.rank,
                r.pid,
                r.host,
                r.device,
                r.cpu.map_or("-".to_string(), |c| c.to_string())
            );
        }
        s += "#\n";
        s += &format!(
            "# {:>10} {:>12} {:>8} {:>6} {:>6}  {:^36}  {:^36}\n",
            "", "", "", "", "", "out-of-place", "in-place"
        );
        s +=
            &format!(
            "# {:>10} {:>12} {:>8} {:>6} {:>6}  {:>8} {:>8} {:>8} {:>7}  {:>8} {:>8} {:>8} {:>7}\n",
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
            "algbw", "busbw", "#wrong"
        );
        s +=
            &format!(
            "# {:>10} {:>12} {:>8} {:>6} {:>6}  {:>8} {:>8} {:>8} {:>7}  {:>8} {:>8} {:>8} {:>7}",
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
            "(GB/s)", ""
        );
        s
    }

    fn cols(&self, size: usize, m: Option<&Measure>) -> String {
        match m {
            None => format!("{:>8} {:>8} {:>8} {:>7}", "N/A", "N/A", "N/A", "N/A"),
            Some(m) => {
                let t = m.time_us();
                format!(
                    "{:>8.1} {:>8.4} {:>8.4} {:>7}",
                    t,
                    algbw(size, t),
                    busbw(self.coll, self.n, size, t),
                    m.wrong_total().map_or("N/A".to_string(), |w| w.to_string())
                )
            }
        }
    }

    pub fn row(&self, r: &Row) -> String {
        let root = match self.coll {
            Coll::Broadcast { root } => root as i64,
            _ => -1,
        };
        format!(
            "  {:>10} {:>12} {:>8} {:>6} {:>6}  {}  {}",
            r.size,
            r.count,
            self.dtype.name(),
            self.op.map_or("none", RedOp::name),
            root,
            self.cols(r.size, Some(&r.out_of_place)),
            self.cols(r.size, r.in_place.as_ref())
        )
    }

    /// The average bus bandwidth over every measured column (nccl-tests' footer value).
    pub fn avg_busbw(&self, rows: &[Row]) -> f64 {
        let v: Vec<f64> = rows
            .iter()
            .flat_map(|r| {
                std::iter::once(&r.out_of_place)
                    .chain(r.in_place.as_ref())
                    .map(|m| busbw(self.coll, self.n, r.size, m.time_us()))
            })
            .collect();
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    }

    pub fn footer(&self, rows: &[Row]) -> String {
        let wrong: u64 = total_wrong(rows);
        format!(
            "# Out of bounds values : {wrong} {}\n# Avg bus bandwidth    : {:.6}\n#",
            if wrong == 0 { "OK" } else { "FAILED" },
            self.avg_busbw(rows)
        )
    }

    pub fn json(&self, ranks: &[RankRecord], params: Object, rows: &[Row]) -> Value {
        let ranks: Vec<Value> = ranks
            .iter()
            .map(|r| {
                Object::new()
                    .field("rank", r.rank)
                    .field("host", r.host.as_str())
                    .field("pid", r.pid)
                    .field("device", r.device.as_str())
                    .field("cpu", r.cpu)
                    .into()
            })
            .collect();
        let meas = |size: usize, m: &Measure| -> Value {
            let t = m.time_us();
            Object::new()
                .field("time_us", t)
                .field("algbw_gbs", algbw(size, t))
                .field("busbw_gbs", busbw(self.coll, self.n, size, t))
                .field("wrong", m.wrong_total())
                .field(
                    "per_rank_time_us",
                    Value::Array(m.per_rank_us.iter().map(|&x| x.into()).collect()),
                )
                .field(
                    "per_rank_wrong",
                    m.wrong
                        .as_ref()
                        .map(|w| Value::Array(w.iter().map(|&x| x.into()).collect())),
                )
                .into()
        };
        let wrong = total_wrong(rows);
        let avg = self.avg_busbw(rows);
        let rows: Vec<Value> = rows
            .iter()
            .map(|r| {
                Object::new()
                    .field("size", r.size as u64)
                    .field("count", r.count as u64)
                    .field("out_of_place", meas(r.size, &r.out_of_place))
                    .field("in_place", r.in_place.as_ref().map(|m| meas(r.size, m)))
                    .into()
            })
            .collect();
        Object::new()
            .field("tool", self.tool)
            .field("collective", self.coll.name())
            .field("nranks", self.n as u64)
            .field("type", self.dtype.name())
            .field("redop", self.op.map(RedOp::name))
            .field("busbw_factor", self.coll.busbw_factor(self.n))
            .field("params", params)
            .field("ranks", ranks)
            .field("rows", rows)
            .field("wrong", wrong)
            .field("avg_busbw_gbs", avg)
            .into()
    }
}

/// Wrong elements over every row, placement and rank.
pub fn total_wrong(rows: &[Row]) -> u64 {
    rows.iter()
        .flat_map(|r| std::iter::once(&r.out_of_place).chain(r.in_place.as_ref()))
        .filter_map(Measure::wrong_total)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidths_are_nccl_tests() {
        // 1 MB in 1000 µs = 1 GB/s; all-reduce on 4 ranks: busbw 1.5 GB/s.
        assert!((algbw(1_000_000, 1000.0) - 1.0).abs() < 1e-12);
        assert!((busbw(Coll::AllReduce, 4, 1_000_000, 1000.0) - 1.5).abs() < 1e-12);
        assert!((busbw(Coll::AllGather, 4, 1_000_000, 1000.0) - 0.75).abs() < 1e-12);
        assert!((busbw(Coll::SendRecv, 4, 1_000_000, 1000.0) - 1.0).abs() < 1e-12);
        assert_eq!(algbw(8, 0.0), 0.0);
        assert_eq!(count_column(Coll::AllGather, 4, 1024, DataType::F32), 64);
        assert_eq!(count_column(Coll::AllReduce, 4, 1024, DataType::F32), 256);
    }

    #[test]
    fn the_row_and_footer_read_like_nccl_tests() {
        let t = Table {
            tool: "vl_all_reduce_perf",
            coll: Coll::AllReduce,
            n: 4,
            dtype: DataType::F32,
            op: Some(RedOp::Sum),
        };
        let m = |us: f64, w: u64| Measure {
            per_rank_us: vec![us / 2.0, us],
            wrong: Some(vec![0, w]),
        };
        let rows = vec![Row {
            size: 1_000_000,
            count: 250_000,
            out_of_place: m(1000.0, 0),
            in_place: Some(m(500.0, 2)),
        }];
        let line = t.row(&rows[0]);
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[..5], ["1000000", "250000", "float", "sum", "-1"]);
        assert_eq!(f[5..9], ["1000.0", "1.0000", "1.5000", "0"]);
        assert_eq!(f[9..], ["500.0", "2.0000", "3.0000", "2"]);
        let foot = t.footer(&rows);
        assert!(foot.contains("# Out of bounds values : 2 FAILED"), "{foot}");
        assert!(foot.contains("# Avg bus bandwidth    : 2.250000"), "{foot}");
        let j = t.json(&[], Object::new(), &rows).to_string();
        assert!(j.contains("\"per_rank_time_us\":[500.0,1000.0]"), "{j}");
        assert!(j.contains("\"wrong\":2"), "{j}");
    }
}
