//! `--out_json [--out_json_file F]`: the JSON file perftest writes, with perftest's keys and
//! structure (`"test_info"` as its header block, `"results"` as its row; perftest 6.29's valid
//! JSON, not the unquoted keys of older builds), so that readers of perftest's file read ours.
//!
//! perftest rewrites the file for every size, so after `-a` only the last size survives; ours
//! keeps that last size in `"results"` and adds every size, in the same layout, under
//! `"all_results"`.

use verbs_lab::json::{Object, Value};

use super::Verbosity;
use super::{round_to, BwUnit};
use crate::result::{BwRow, LatRow, Metric, Rows, RunInfo, RunResult, TestKind};

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
    let mut rows: Vec<Object> = match &result.rows {
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
        for (o, u) in rows.iter_mut().zip(&c.util_percent) {
            o.insert("CPU_util", round_to(*u, 2));
        }
    }
    let mut doc = Object::new().field("test_info", test_info(info));
    if let Some(last) = rows.last() {
        doc.insert("results", last.clone());
    }
    doc.insert("all_results", Value::array(rows));
    if let Some(c) = counters {
        doc.insert("counters", super::json::counters_object(c));
    }
    if let Some(c) = cpu {
        doc.insert("process_cpu_s", round_to(c.process_cpu.as_secs_f64(), 6));
    }
    let mut text = doc.pretty();
    text.push('\n');
    text
}

/// perftest's test name: `RDMA_Write_BW_Test`, `Atomic_FETCH_AND_ADD_Bidirectional_BW_Test`.
fn test_name(info: &RunInfo) -> String {
    super::text::title(info).replace(' ', "_")
}

/// The header block, as perftest's `write_test_info_to_file`, key for key and in its order.
fn test_info(info: &RunInfo) -> Object {
    let mut o = Object::new().field("test", test_name(info));
    if info.use_events {
        o.insert("Test with events", format!("Using_{}_comp0", info.device));
    }
    o.insert("Dual_port", "OFF");
    o.insert("Device", info.device.as_str());
    o.insert("Number_of_qps", info.qps);
    o.insert("Transport_type", "IB");
    o.insert("Connection_type", info.conn_type.as_str());
    o.insert("Using_SRQ", "OFF");
    o.insert("PCIe_relax_order", "OFF");
    o.insert("ibv_wr_API", "OFF");
    if info.perftest_shows_tx_depth() {
        o.insert("TX_depth", info.tx_depth);
    }
    if info.post_list > 1 {
        o.insert("Post_List", info.post_list);
    }
    if info.perftest_shows_rx_depth() {
        o.insert("RX_depth", info.rx_depth);
    }
    if info.metric == Metric::Bw {
        o.insert("CQ_Moderation", info.cq_moderation);
    }
    o.insert("Mtu", info.mtu);
    o.insert("Link_type", info.link_layer.as_str());
    o.insert("GID_index", info.gid_index);
    if matches!(info.test, TestKind::Read | TestKind::Atomic) {
        o.insert("Outstand_reads", info.outstanding_reads);
    } else {
        o.insert("Max_inline_data", info.max_inline);
    }
    o.insert("rdma_cm_QPs", if info.rdma_cm { "ON" } else { "OFF" });
    o.insert("Use_ROCm_memory", "OFF");
    o.insert("Use_MUSA_memory", "OFF");
    o.insert("Data_ex_method", "Ethernet");
    o
}

/// A number as perftest's `%.Nf` would print it.
fn num(x: f64, decimals: usize) -> Value {
    round_to(x, decimals).into()
}

/// One bandwidth row as perftest's `"results"`: `REPORT_FMT_JSON` (six decimals for a Gb/s
/// average below 0.1, `REPORT_FMT_EXT_JSON`), or the one number of `--output=UNITS`.
fn bw_results(r: &BwRow, verbosity: Option<Verbosity>, unit: BwUnit) -> Object {
    let avg = unit.convert(r.avg_bps);
    match verbosity {
        Some(Verbosity::Bandwidth) => return Object::new().field("bw_avg", num(avg, 6)),
        Some(Verbosity::MessageRate) => {
            return Object::new().field("msgRate_avg", num(r.msg_rate_mpps, 6))
        }
        _ => {}
    }
    let d = if unit == BwUnit::Gbps && avg < 0.1 {
        6
    } else {
        2
    };
    Object::new()
        .field("MsgSize", r.bytes)
        .field("n_iterations", r.iterations)
        .field("BW_peak", num(unit.convert(r.peak_bps), d))
        .field("BW_average", num(avg, d))
        .field("MsgRate", num(r.msg_rate_mpps, 6))
}

/// One latency row as perftest's `"results"`: `REPORT_FMT_LAT_JSON` (`REPORT_FMT_LAT_DUR_JSON`
/// in duration mode), or `avg_lat` / `t_avg` alone with `--output=latency`.
fn lat_results(info: &RunInfo, r: &LatRow, verbosity: Option<Verbosity>) -> Object {
    let st = &r.stats;
    let duration = info.duration.is_some();
    if verbosity == Some(Verbosity::Latency) {
        let key = if duration { "t_avg" } else { "avg_lat" };
        return Object::new().field(key, num(st.avg_us, 6));
    }
    let o = Object::new()
        .field("MsgSize", r.bytes)
        .field("n_iterations", r.iterations);
    if duration {
        return o
            .field("t_avg", num(st.avg_us, 2))
            .field("tps_average", num(r.tps.unwrap_or(f64::NAN), 2));
    }
    o.field("t_min", num(st.min_us, 2))
        .field("t_max", num(st.max_us, 2))
        .field("t_typical", num(st.median_us, 2))
        .field("t_avg", num(st.avg_us, 2))
        .field("t_stdev", num(st.stdev_us, 2))
        .field("percentile_99", num(st.p99_us, 2))
        .field("percentile_99.9", num(st.p999_us, 2))
}
