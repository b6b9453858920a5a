//! `--out_json [--out_json_file F]`: the JSON file perftest writes, with perftest's keys and
//! structure (`"test_info"` as its header block, `"results"` as its row; perftest 6.29's valid
//! JSON, not the unquoted keys of older builds), so that readers of perftest's file read ours.
//!
//! perftest rewrites the file for every size, so after `-a` only the last size survives; ours
//! keeps that last size in `"results"` and adds every size, in the same layout, under
//! `"all_results"`.

use serde_json::{json, Map, Value};

use super::Verbosity;
use super::{round_to, BwUnit};
use crate::measure::result::{BwRow, LatRow, Metric, Rows, RunInfo, RunResult, TestKind};

/// perftest's default file name (`DEFAULT_JSON_FILE_NAME`).
pub const DEFAULT_FILE: &str = "perftest_out.json";

/// The document, indented, with a final newline.
pub fn render_perftest_json(
    result: &RunResult,
    verbosity: Option<Verbosity>,
    report_gbits: bool,
) -> String {
    render_perftest_json_counters(result, verbosity, report_gbits, None, None)
}

/// [`render_perftest_json`] with the NIC counter deltas under `"counters"` (our addition).
pub fn render_perftest_json_counters(
    result: &RunResult,
    verbosity: Option<Verbosity>,
    report_gbits: bool,
    counters: Option<&crate::counters::Snapshot>,
    cpu: Option<&crate::cpu_util::CpuReport>,
) -> String {
    let info = &result.info;
    let unit = BwUnit::new(report_gbits);
    let mut rows: Vec<Value> = match &result.rows {
        Rows::Bw(rows) => rows
            .iter()
            .map(|r| bw_results(r, verbosity, unit))
            .collect(),
        Rows::Lat(rows) => rows
            .iter()
            .map(|r| lat_results(info, r, verbosity))
            .collect(),
    };
    // perftest's REPORT_EXT_CPU_UTIL_JSON: "CPU_util" after each row's numbers.
    if let Some(c) = cpu {
        for (row, u) in rows.iter_mut().zip(&c.util_percent) {
            row["CPU_util"] = json!(round_to(*u, 2));
        }
    }
    let mut doc = Map::new();
    put(&mut doc, "test_info", test_info(info));
    if let Some(last) = rows.last() {
        put(&mut doc, "results", last.clone());
    }
    put(&mut doc, "all_results", rows);
    if let Some(c) = counters {
        put(&mut doc, "counters", super::json::counters_object(c));
    }
    if let Some(c) = cpu {
        put(
            &mut doc,
            "process_cpu_s",
            round_to(c.process_cpu.as_secs_f64(), 6),
        );
    }
    super::pretty_json(&doc)
}

/// Sets `key` of `o` to `value`: the keys of perftest's file come and go with the options, in
/// perftest's order.
fn put(o: &mut Map<String, Value>, key: &str, value: impl Into<Value>) {
    o.insert(key.to_string(), value.into());
}

/// perftest's test name: `RDMA_Write_BW_Test`, `Atomic_FETCH_AND_ADD_Bidirectional_BW_Test`.
fn test_name(info: &RunInfo) -> String {
    super::text::title(info).replace(' ', "_")
}

/// The header block, as perftest's `write_test_info_to_file`, key for key and in its order.
fn test_info(info: &RunInfo) -> Map<String, Value> {
    let mut o = Map::new();
    put(&mut o, "test", test_name(info));
    if info.use_events {
        put(
            &mut o,
            "Test with events",
            format!("Using_{}_comp0", info.device),
        );
    }
    put(&mut o, "Dual_port", "OFF");
    put(&mut o, "Device", info.device.as_str());
    put(&mut o, "Number_of_qps", info.qp.qps);
    put(&mut o, "Transport_type", "IB");
    put(&mut o, "Connection_type", info.conn_type.as_str());
    put(&mut o, "Using_SRQ", "OFF");
    put(&mut o, "PCIe_relax_order", "OFF");
    put(&mut o, "ibv_wr_API", "OFF");
    if info.perftest_shows_tx_depth() {
        put(&mut o, "TX_depth", info.qp.tx_depth);
    }
    if info.qp.post_list > 1 {
        put(&mut o, "Post_List", info.qp.post_list);
    }
    if info.perftest_shows_rx_depth() {
        put(&mut o, "RX_depth", info.qp.rx_depth);
    }
    if info.metric == Metric::Bw {
        put(&mut o, "CQ_Moderation", info.qp.cq_moderation);
    }
    put(&mut o, "Mtu", info.qp.mtu);
    put(&mut o, "Link_type", info.link_layer.as_str());
    put(&mut o, "GID_index", info.gid_index);
    if matches!(info.test, TestKind::Read | TestKind::Atomic) {
        put(&mut o, "Outstand_reads", info.qp.outstanding_reads);
    } else {
        put(&mut o, "Max_inline_data", info.qp.max_inline);
    }
    put(
        &mut o,
        "rdma_cm_QPs",
        if info.rdma_cm { "ON" } else { "OFF" },
    );
    put(&mut o, "Use_ROCm_memory", "OFF");
    put(&mut o, "Use_MUSA_memory", "OFF");
    put(&mut o, "Data_ex_method", "Ethernet");
    o
}

/// A number as perftest's `%.Nf` would print it.
fn num(x: f64, decimals: usize) -> Value {
    round_to(x, decimals).into()
}

/// One bandwidth row as perftest's `"results"`: `REPORT_FMT_JSON` (six decimals for a Gb/s
/// average below 0.1, `REPORT_FMT_EXT_JSON`), or the one number of `--output=UNITS`.
fn bw_results(r: &BwRow, verbosity: Option<Verbosity>, unit: BwUnit) -> Value {
    let avg = unit.convert(r.avg_bps);
    match verbosity {
        Some(Verbosity::Bandwidth) => return json!({ "bw_avg": num(avg, 6) }),
        Some(Verbosity::MessageRate) => return json!({ "msgRate_avg": num(r.msg_rate_mpps, 6) }),
        _ => {}
    }
    let d = unit.shown_decimals(avg);
    json!({
        "MsgSize": r.bytes,
        "n_iterations": r.iterations,
        "BW_peak": num(unit.convert(r.peak_bps), d),
        "BW_average": num(avg, d),
        "MsgRate": num(r.msg_rate_mpps, 6),
    })
}

/// One latency row as perftest's `"results"`: `REPORT_FMT_LAT_JSON` (`REPORT_FMT_LAT_DUR_JSON`
/// in duration mode), or `avg_lat` / `t_avg` alone with `--output=latency`.
fn lat_results(info: &RunInfo, r: &LatRow, verbosity: Option<Verbosity>) -> Value {
    let st = &r.stats;
    let duration = info.duration.is_some();
    if verbosity == Some(Verbosity::Latency) {
        let key = if duration { "t_avg" } else { "avg_lat" };
        return json!({ key: num(st.avg_us, 6) });
    }
    if duration {
        return json!({
            "MsgSize": r.bytes,
            "n_iterations": r.iterations,
            "t_avg": num(st.avg_us, 2),
            "tps_average": num(r.tps.unwrap_or(f64::NAN), 2),
        });
    }
    json!({
        "MsgSize": r.bytes,
        "n_iterations": r.iterations,
        "t_min": num(st.min_us, 2),
        "t_max": num(st.max_us, 2),
        "t_typical": num(st.median_us, 2),
        "t_avg": num(st.avg_us, 2),
        "t_stdev": num(st.stdev_us, 2),
        "percentile_99": num(st.p99_us, 2),
        "percentile_99.9": num(st.p999_us, 2),
    })
}
