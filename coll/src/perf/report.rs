//! The nccl-tests layout: header, one row per size with out-of-place and in-place columns, the
//! footer; the bandwidth arithmetic; the JSON document's layout (and, in `vl_bench::jsoncheck`, what a valid
//! one is).

use std::borrow::Cow;

use crate::bootstrap::places;
use crate::{Algo, Coll, DataType, Place, RankRecord, RedOp};
use serde::{Deserialize, Serialize};

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
    /// The algorithm that ran it, for the collectives that have a choice (all-reduce,
    /// all-to-all).
    pub algo: Option<Algo>,
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

/// Whether the collective cuts the buffer into one equal part per rank (nccl-tests rounds its
/// count down to a multiple of the ranks for these).
pub fn per_rank_parts(coll: Coll) -> bool {
    coll.blocks() || matches!(coll, Coll::ReduceScatter | Coll::AllGather)
}

/// The bytes a row moves for the requested `size`: nccl-tests' rule, the count rounded down to
/// a multiple of the ranks where each rank has an equal part (reduce-scatter, all-gather,
/// all-to-all, gather, scatter); the row prints this size, and its bandwidths follow from it.
pub fn moved_size(coll: Coll, n: usize, size: usize, dtype: DataType) -> usize {
    let count = size / dtype.size();
    let count = if per_rank_parts(coll) {
        count / n * n
    } else {
        count
    };
    count * dtype.size()
}

/// The `count` column: elements per rank as nccl-tests prints it (the per-rank part where
/// each rank has one, as [`moved_size`]).
pub fn count_column(coll: Coll, n: usize, size: usize, dtype: DataType) -> usize {
    let total = size / dtype.size();
    if per_rank_parts(coll) {
        total / n
    } else {
        total
    }
}

/// `v` in at most `width` characters as nccl-tests prints its time and bandwidth columns: two
/// decimals where they fit, else one, else none, else an exponent (C's `%.1e`).
pub fn fit(v: f64, width: usize) -> String {
    for prec in [2, 1, 0] {
        let s = format!("{v:>width$.prec$}");
        if s.len() <= width {
            return s;
        }
    }
    let e = format!("{v:.1e}");
    // Rust writes `3.5e6`; C writes `3.5e+06`.
    let (m, x) = e.split_once('e').unwrap_or((&e, "0"));
    let x: i32 = x.parse().unwrap_or(0);
    let sign = if x < 0 { '-' } else { '+' };
    format!("{:>width$}", format!("{m}e{sign}{:02}", x.abs()))
}

/// The table's context: what every row shares.
pub struct Table<'a> {
    pub tool: &'a str,
    pub coll: Coll,
    pub n: usize,
    pub dtype: DataType,
    pub op: Option<RedOp>,
    /// QPs per ring neighbour (`--channels`): a CSV column, before the algorithm (all-reduce's,
    /// all-to-all's).
    pub channels: usize,
}

impl Table<'_> {
    /// nccl-tests' header: the parameters, then a line per rank (with its local rank among
    /// the ranks of its host) and the hosts.
    pub fn header(&self, ranks: &[RankRecord], params: &str) -> String {
        let mut s = format!("# {}: {params}\n#\n# Using devices\n", self.tool);
        let places = places(ranks);
        for (r, p) in ranks.iter().zip(&places) {
            s += &format!(
                "#  Rank {:2} Pid {:7} on {:>10} device {:>6} cpu {} local {} of {}\n",
                r.rank,
                r.pid,
                r.host,
                r.device,
                r.cpu.map_or("-".to_string(), |c| c.to_string()),
                p.local_rank,
                p.local_size
            );
        }
        if let Some(p) = places.first() {
            let how = match (
                places.iter().all(|p| p.given),
                places.iter().any(|p| p.given),
            ) {
                (true, _) => "given by the launcher",
                (false, false) => "counted from the host names",
                (false, true) => "given by the launcher or counted from the host names",
            };
            let hosts = if p.hosts == 1 { "host" } else { "hosts" };
            s += &format!("#  {} {hosts}, local ranks {how}\n", p.hosts);
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
                    "{:>8} {:>8.4} {:>8.4} {:>7}",
                    fit(t, 7),
                    algbw(size, t),
                    busbw(self.coll, self.n, size, t),
                    m.wrong_total().map_or("N/A".to_string(), |w| w.to_string())
                )
            }
        }
    }

    /// One row of the table (as rank 0 prints it).
    pub fn row(&self, r: &Row) -> String {
        let root = self.coll.root().map_or(-1, |r| r as i64);
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

    /// nccl-tests' footer: the wrong values, then the average bus bandwidth, followed by OK
    /// or FAILED when the run has a floor for it (`floor`, GB/s).
    pub fn footer(&self, rows: &[Row], floor: Option<f64>) -> String {
        let wrong: u64 = total_wrong(rows);
        let avg = self.avg_busbw(rows);
        let verdict = match floor {
            Some(f) if avg < f => " FAILED",
            Some(_) => " OK",
            None => "",
        };
        format!(
            "# Out of bounds values : {wrong} {}\n# Avg bus bandwidth    : {avg:.6}{verdict}\n#",
            if wrong == 0 { "OK" } else { "FAILED" },
        )
    }

    /// The `--csv` document: a header with the units in the column names, then one line per
    /// row; a placement that does not exist (sendrecv's in-place) or was not checked leaves
    /// its fields empty.
    pub fn csv(&self, rows: &[Row]) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        let mut head: Vec<String> = ["size_bytes", "count", "type", "redop", "root"]
            .map(String::from)
            .into();
        for p in ["oop", "ip"] {
            for c in ["time_us", "algbw_gbs", "busbw_gbs", "wrong"] {
                head.push(format!("{p}_{c}"));
            }
        }
        head.push("channels".into());
        // The collectives with a choice of algorithm say which ran, last.
        let algo = self.coll.chooses_algorithm();
        if algo {
            head.push("algo".into());
        }
        let _ = w.write_record(&head);
        let cols = |size: usize, m: Option<&Measure>| -> Vec<String> {
            match m {
                None => vec![String::new(); 4],
                Some(m) => {
                    let t = m.time_us();
                    vec![
                        format!("{t:.3}"),
                        format!("{:.6}", algbw(size, t)),
                        format!("{:.6}", busbw(self.coll, self.n, size, t)),
                        m.wrong_total().map_or(String::new(), |w| w.to_string()),
                    ]
                }
            }
        };
        for r in rows {
            let mut rec = vec![
                r.size.to_string(),
                r.count.to_string(),
                self.dtype.name().to_string(),
                self.op.map_or("none", RedOp::name).to_string(),
                self.coll.root().map_or(-1, |x| x as i64).to_string(),
            ];
            rec.extend(cols(r.size, Some(&r.out_of_place)));
            rec.extend(cols(r.size, r.in_place.as_ref()));
            rec.push(self.channels.to_string());
            if algo {
                rec.push(r.algo.map_or("", Algo::name).to_string());
            }
            let _ = w.write_record(&rec);
        }
        String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
    }

    /// The `--json` document of the run: the table's context, `params` (the command line's
    /// numbers), the ranks, every row and the footer's figures.
    pub fn json<'a, P: Serialize>(
        &'a self,
        ranks: &'a [RankRecord],
        params: P,
        rows: &'a [Row],
    ) -> CollJson<'a, P> {
        let meas = |size: usize, m: &'a Measure| {
            let t = m.time_us();
            MeasureJson {
                time_us: t,
                algbw_gbs: algbw(size, t),
                busbw_gbs: busbw(self.coll, self.n, size, t),
                wrong: m.wrong_total(),
                per_rank_time_us: Cow::Borrowed(&m.per_rank_us),
                per_rank_wrong: m.wrong.as_deref().map(Cow::Borrowed),
            }
        };
        CollJson {
            tool: self.tool.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            collective: self.coll.name().into(),
            nranks: self.n,
            dtype: self.dtype.name().into(),
            redop: self.op.map(|o| o.name().into()),
            busbw_factor: self.coll.busbw_factor(self.n),
            params,
            ranks: ranks
                .iter()
                .zip(places(ranks))
                .map(|(r, p)| RankJson::new(r, p))
                .collect(),
            rows: rows
                .iter()
                .map(|r| RowJson {
                    size: r.size,
                    count: r.count,
                    out_of_place: meas(r.size, &r.out_of_place),
                    in_place: r.in_place.as_ref().map(|m| meas(r.size, m)),
                    algo: r.algo.map(|a| a.name().to_string()),
                })
                .collect(),
            wrong: total_wrong(rows),
            avg_busbw_gbs: self.avg_busbw(rows),
        }
    }
}

/// The `--json` document of a collective benchmark, written by rank 0 (see [`Table::json`])
/// and read back by `vl_jsoncheck` (`vl_bench::jsoncheck`): the one layout of both.
///
/// `P`: the command line's numbers; `K`, `R`: how a rank and a row are held (the writer's own
/// structs, or [`serde_json::Value`] for a reader that reads them one by one, for the path of
/// a fault).
#[derive(Serialize, Deserialize)]
pub struct CollJson<'a, P, K = RankJson<'a>, R = RowJson<MeasureJson<'a>>> {
    pub tool: Cow<'a, str>,
    /// verbs-lab's version, as in the `vl_*` tools' documents.
    pub version: Cow<'a, str>,
    /// nccl-tests' name: `all_reduce`, `broadcast`, ...
    pub collective: Cow<'a, str>,
    pub nranks: usize,
    /// The element type: `float`, `int32`, ...
    #[serde(rename = "type")]
    pub dtype: Cow<'a, str>,
    /// The reduction (`sum`, ...); `null` for a collective without one.
    pub redop: Option<Cow<'a, str>>,
    /// busbw / algbw for this collective and world size.
    pub busbw_factor: f64,
    pub params: P,
    pub ranks: Vec<K>,
    pub rows: Vec<R>,
    /// Wrong elements over every row, placement and rank.
    pub wrong: u64,
    /// The footer's average bus bandwidth (GB/s).
    pub avg_busbw_gbs: f64,
}

/// Where one rank ran.
#[derive(Serialize, Deserialize)]
pub struct RankJson<'a> {
    pub rank: u32,
    pub host: Cow<'a, str>,
    pub pid: u32,
    pub device: Cow<'a, str>,
    pub cpu: Option<u32>,
    /// Its index among the ranks of its host, and how many they are (absent in documents of
    /// builds before they were written).
    pub local_rank: Option<u32>,
    pub local_size: Option<u32>,
    /// Whether its launcher gave the local rank (`false`: counted from the host names).
    pub local_rank_given: Option<bool>,
}

impl<'a> RankJson<'a> {
    pub fn new(r: &'a RankRecord, p: Place) -> RankJson<'a> {
        RankJson {
            rank: r.rank,
            host: r.host.as_str().into(),
            pid: r.pid,
            device: r.device.as_str().into(),
            cpu: r.cpu,
            local_rank: Some(p.local_rank),
            local_size: Some(p.local_size),
            local_rank_given: Some(p.given),
        }
    }
}

/// One size: its out-of-place and (`null` where there is none) in-place measurement; `M`, how
/// a measurement is held ([`MeasureJson`], or a [`serde_json::Value`] to read one by one).
#[derive(Serialize, Deserialize)]
pub struct RowJson<M> {
    pub size: usize,
    pub count: usize,
    pub out_of_place: M,
    pub in_place: Option<M>,
    /// The algorithm that ran this size (`ring`, `rd`, `direct`), for all-reduce and
    /// all-to-all; absent for the collectives that have only the ring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algo: Option<String>,
}

/// One placement of one size: the table's columns, then each rank's own figures.
#[derive(Serialize, Deserialize)]
pub struct MeasureJson<'a> {
    pub time_us: f64,
    pub algbw_gbs: f64,
    pub busbw_gbs: f64,
    pub wrong: Option<u64>,
    pub per_rank_time_us: Cow<'a, [f64]>,
    pub per_rank_wrong: Option<Cow<'a, [u64]>>,
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
    fn sizes_counts_and_times_are_nccl_tests() {
        // --np 3 -b 7 -e 1000 -f 4, float: 1 float rounds down to 0, 7 to 6 (24 B), 112 to
        // 111 (444 B); --np 5 -d int64: 1 and 3 elements to 0, 14 to 10 (80 B).
        let rows = [7, 28, 112, 448].map(|b| moved_size(Coll::ReduceScatter, 3, b, DataType::F32));
        assert_eq!(rows, [0, 24, 108, 444]);
        assert_eq!(count_column(Coll::AllGather, 3, 444, DataType::F32), 37);
        let rows = [8, 24, 112].map(|b| moved_size(Coll::AllGather, 5, b, DataType::I64));
        assert_eq!(rows, [0, 0, 80]);
        assert_eq!(moved_size(Coll::AllReduce, 3, 28, DataType::F32), 28);
        assert_eq!(
            moved_size(Coll::Reduce { root: 0 }, 3, 28, DataType::F32),
            28
        );
        assert_eq!(count_column(Coll::AllToAll, 4, 1024, DataType::F32), 64);
        // Seven characters: two decimals while they fit, then one, then none, then C's %.1e.
        assert_eq!(fit(0.0309, 7), "   0.03");
        assert_eq!(fit(99.994, 7), "  99.99");
        assert_eq!(fit(9999.994, 7), "9999.99");
        assert_eq!(fit(10000.04, 7), "10000.0");
        assert_eq!(fit(3540338.0, 7), "3540338");
        assert_eq!(fit(12345678.0, 7), "1.2e+07");
    }

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

    /// Rank `rank` of `world` on `host`, its local rank given by its launcher or not.
    fn rank_on(rank: u32, world: u32, host: &str, local_rank: Option<u32>) -> RankRecord {
        RankRecord {
            rank,
            world_size: world,
            version: crate::bootstrap::PROTOCOL_VERSION,
            host: host.into(),
            host_hash: crate::bootstrap::place::host_hash(host, "boot"),
            pid: 100 + rank,
            local_rank,
            device: "rxe0".into(),
            cpu: Some(rank),
            lid: 0,
            gid: verbs_lab::verbs::Gid::ZERO,
            mtu: 1024,
            left_qpn: 0,
            left_psn: 0,
            right_qpn: 0,
            right_psn: 0,
            slots: Default::default(),
            slot_bytes: 0,
            nslots: 0,
            terms: Vec::new(),
        }
    }

    #[test]
    fn the_header_and_json_show_each_ranks_local_rank_and_the_hosts() {
        let t = Table {
            tool: "vl_all_reduce_perf",
            coll: Coll::AllReduce,
            n: 4,
            dtype: DataType::F32,
            op: Some(RedOp::Sum),
            channels: 1,
        };
        let hosts = ["node1", "node2", "node1", "node2"];
        let ranks: Vec<RankRecord> = (0..4)
            .map(|r| rank_on(r, 4, hosts[r as usize], None))
            .collect();
        let h = t.header(&ranks, "nranks 4");
        let lines: Vec<&str> = h.lines().filter(|l| l.starts_with("#  ")).collect();
        assert_eq!(
            lines[..5],
            [
                "#  Rank  0 Pid     100 on      node1 device   rxe0 cpu 0 local 0 of 2",
                "#  Rank  1 Pid     101 on      node2 device   rxe0 cpu 1 local 0 of 2",
                "#  Rank  2 Pid     102 on      node1 device   rxe0 cpu 2 local 1 of 2",
                "#  Rank  3 Pid     103 on      node2 device   rxe0 cpu 3 local 1 of 2",
                "#  2 hosts, local ranks counted from the host names",
            ]
        );
        let given: Vec<RankRecord> = (0..2)
            .map(|r| rank_on(r, 2, "guest", Some(1 - r)))
            .collect();
        let h = t.header(&given, "nranks 2");
        assert!(h.contains(" cpu 0 local 1 of 2\n"), "{h}");
        assert!(
            h.contains("#  1 host, local ranks given by the launcher\n"),
            "{h}"
        );
        let doc = serde_json::to_value(t.json(&ranks, serde_json::Map::new(), &[])).unwrap();
        assert_eq!(doc["ranks"][2]["host"], "node1");
        assert_eq!(doc["ranks"][2]["local_rank"], 1);
        assert_eq!(doc["ranks"][2]["local_size"], 2);
        assert_eq!(doc["ranks"][2]["local_rank_given"], false);
    }

    #[test]
    fn the_row_and_footer_read_like_nccl_tests() {
        let t = Table {
            tool: "vl_all_reduce_perf",
            coll: Coll::AllReduce,
            n: 4,
            dtype: DataType::F32,
            op: Some(RedOp::Sum),
            channels: 1,
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
            algo: Some(Algo::Rd),
        }];
        let line = t.row(&rows[0]);
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[..5], ["1000000", "250000", "float", "sum", "-1"]);
        assert_eq!(f[5..9], ["1000.00", "1.0000", "1.5000", "0"]);
        assert_eq!(f[9..], ["500.00", "2.0000", "3.0000", "2"]);
        let foot = t.footer(&rows, None);
        assert!(foot.contains("# Out of bounds values : 2 FAILED"), "{foot}");
        assert!(
            foot.contains("# Avg bus bandwidth    : 2.250000\n"),
            "{foot}"
        );
        let foot = t.footer(&rows, Some(2.3));
        assert!(
            foot.contains("# Avg bus bandwidth    : 2.250000 FAILED\n"),
            "{foot}"
        );
        let foot = t.footer(&rows, Some(2.25));
        assert!(
            foot.contains("# Avg bus bandwidth    : 2.250000 OK\n"),
            "{foot}"
        );
        let j = serde_json::to_string(&t.json(&[], serde_json::Map::new(), &rows)).unwrap();
        assert!(j.contains("\"per_rank_time_us\":[500.0,1000.0]"), "{j}");
        assert!(j.contains("\"wrong\":2"), "{j}");
        let doc = serde_json::to_value(t.json(&[], serde_json::Map::new(), &rows)).unwrap();
        let keys: Vec<&str> = doc
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "tool",
                "version",
                "collective",
                "nranks",
                "type",
                "redop",
                "busbw_factor",
                "params",
                "ranks",
                "rows",
                "wrong",
                "avg_busbw_gbs"
            ]
        );
        assert_eq!(doc["rows"][0]["in_place"]["time_us"], 500.0);
        assert_eq!(doc["rows"][0]["algo"], "rd");
        let csv = t.csv(&rows);
        let mut lines = csv.lines();
        assert!(
            lines.next().unwrap().ends_with(",ip_wrong,channels,algo"),
            "{csv}"
        );
        assert!(lines.next().unwrap().ends_with(",2,1,rd"), "{csv}");
        assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"));
        // The one layout reads back what it wrote, to the byte.
        let text = vl_perftest::report::pretty_json(&t.json(&[], serde_json::Map::new(), &rows));
        let back: CollJson<serde_json::Map<String, serde_json::Value>> =
            verbs_lab::json::from_str_strict(&text).unwrap();
        assert_eq!(vl_perftest::report::pretty_json(&back), text);
    }
}
