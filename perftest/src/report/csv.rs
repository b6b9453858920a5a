//! The `--csv` file: one header line with unit-carrying column names, one line per row.
//!
//! Bandwidth columns are in the report's unit (`bw_avg_mib_s`, or `bw_avg_gbit_s` with
//! `--report_gbits`). Numbers have fixed decimals: 3 for MiB/s and usec (1 KiB/s, 1 ns), 6 for
//! Gb/s, 9 for Mpps (so 8 MiB messages keep their digits);
//! a value that is not finite, or a column that does not apply (`tps` outside duration mode),
//! is an empty field. The first column, `process`, is `all` for a run's totals; a `--procs N`
//! run adds, before each size's totals, one line per process numbered 0..N-1 and a `sum` line
//! (the plain sum of the processes' own figures; `all` is the aggregate over one interval).

use csv::Writer;

use super::BwUnit;
use crate::measure::result::{BwRow, ProcessResult, Rows, RunResult};

/// The `--csv` document, with a final newline.
pub fn render_csv(result: &RunResult, report_gbits: bool) -> String {
    render_csv_procs(result, &[], report_gbits)
}

/// The `--csv` document of a `--procs N` run: for each size, a line per process (`process`
/// 0..N-1), then the totals (`all`). Without processes, exactly [`render_csv`].
pub fn render_csv_procs(result: &RunResult, procs: &[ProcessResult], report_gbits: bool) -> String {
    // The csv crate joins each record's fields and ends the line in "\n" (its default); it would
    // quote a field holding a comma or a quote, which none of ours (numbers, `all`, `sum`) does.
    let mut w = Writer::from_writer(Vec::new());
    match &result.rows {
        Rows::Bw(rows) => {
            let u = BwUnit::new(report_gbits);
            let (k, d) = (u.key(), u.decimals());
            let header =
                format!("process,bytes,iterations,bw_peak_{k},bw_avg_{k},msg_rate_mpps,elapsed_us");
            record(&mut w, header.split(','));
            let line = |w: &mut Writer<Vec<u8>>, process: &str, r: &BwRow| {
                record(
                    w,
                    [
                        process.to_string(),
                        r.bytes.to_string(),
                        r.iterations.to_string(),
                        num(u.convert(r.peak_bps), d),
                        num(u.convert(r.avg_bps), d),
                        num(r.msg_rate_mpps, 9),
                        num(r.elapsed.as_secs_f64() * 1e6, 3),
                    ],
                );
            };
            let sums = crate::measure::aggregate::aggregate(procs).unwrap_or_default();
            for (j, r) in rows.iter().enumerate() {
                for p in procs {
                    if let Some(pr) = p.rows.get(j) {
                        line(&mut w, &p.process.to_string(), pr);
                    }
                }
                if let Some(t) = sums.get(j) {
                    line(&mut w, "sum", &t.sum);
                }
                line(&mut w, "all", r);
            }
        }
        Rows::Lat(rows) => {
            let header = "process,bytes,iterations,samples,t_min_us,t_median_us,t_avg_us,\
                          t_stdev_us,t_p99_us,t_p99_9_us,t_p99_99_us,t_max_us,tps";
            record(&mut w, header.split(','));
            for r in rows {
                let st = &r.stats;
                let counts = [
                    "all".to_string(),
                    r.bytes.to_string(),
                    r.iterations.to_string(),
                    st.samples.to_string(),
                ];
                let times = st.columns_us().map(|x| num(x, 3));
                let tps = r.tps.map(|t| num(t, 3)).unwrap_or_default();
                record(&mut w, counts.into_iter().chain(times).chain([tps]));
            }
        }
    }
    let bytes = w
        .into_inner()
        .expect("a CSV writer into memory cannot fail");
    String::from_utf8(bytes).expect("every field is UTF-8")
}

/// Writes one line of fields.
fn record<I>(w: &mut Writer<Vec<u8>>, fields: I)
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    w.write_record(fields)
        .expect("a CSV writer into memory cannot fail");
}

/// A fixed-decimal number, or an empty field when it is not finite.
fn num(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        String::new()
    }
}
