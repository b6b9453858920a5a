//! The output options every `vl_*` tool shares (their flags: `params::OutputArgs`), and the [`Reporter`] that prints a run as it
//! happens and writes the files and checks the gates at the end.
//!
//! ```no_run
//! # use vl_perftest::output::Reporter;
//! # use vl_perftest::params::OutputArgs;
//! # use vl_perftest::measure::result::{RunInfo, RunResult};
//! # fn run(args: &OutputArgs, info: RunInfo, result: RunResult) -> anyhow::Result<std::process::ExitCode> {
//! vl_perftest::output::check_applicable(args, info.metric).map_err(anyhow::Error::msg)?;
//! let mut reporter = Reporter::new(args);
//! reporter.header(&info);
//! // ... for each size: reporter.bw_row(&info, &row);
//! let outcome = reporter.finish(&result)?;
//! Ok(outcome.exit_code())
//! # }
//! ```

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

pub use crate::params::{OutputArgs, OutputFormat};

use crate::cpu_util::CpuSample;
use crate::measure::result::{BwRow, LatRow, ProcessResult, Rows, RunInfo, RunResult};
pub use crate::output::gates::{GateOutcome, LatGate, EXIT_GATE_FAILED};
use crate::output::gates::{PERFTEST_BW_LIMIT_ERROR, PERFTEST_MSGRATE_LIMIT_ERROR};
pub use crate::report::Verbosity;
pub use crate::report::{render_csv, render_json, render_perftest_json, render_table, render_text};
use crate::report::{
    render_csv_procs, render_json_counters, render_json_procs, render_table_procs, text, BwUnit,
};

mod check;
pub mod gates;

use check::gate_summary;
pub use check::{check_applicable, check_gates};

/// `-C` needs the CPU's frequency to turn nanoseconds into cycles: refused (exit 2) where
/// `/proc/cpuinfo` does not give it, rather than printing another unit.
pub fn check_cycles(args: &OutputArgs) -> Result<(), String> {
    match args.report_cycles {
        true => crate::report::cycles::cpu_mhz()
            .map(drop)
            .map_err(|e| format!("-C/--report-cycles: {e}; leave out -C to report microseconds")),
        false => Ok(()),
    }
}

impl OutputArgs {
    /// The file of `--out_json`: `--out_json_file`, or perftest's default; `None` without either.
    fn out_json_path(&self) -> Option<PathBuf> {
        (self.out_json || self.out_json_file.is_some()).then(|| {
            self.out_json_file
                .clone()
                .unwrap_or_else(|| PathBuf::from(crate::report::perftest_json::DEFAULT_FILE))
        })
    }

    /// Refuses, before the run, a report file this side could not write at its end (a missing
    /// directory, a directory, no permission): `--json`, `--csv`, `--out_json`, and `--plot` when
    /// `plots` (the side that measures; the other draws nothing). Each is opened for writing —
    /// created and removed again when it did not exist, left as it was when it did — so a typo
    /// costs nothing rather than the whole run. The message names the flag, the path and the
    /// reason.
    pub fn check_writable(&self, plots: bool) -> Result<(), String> {
        let files = [
            ("--json", self.json.clone()),
            ("--csv", self.csv.clone()),
            ("--openmetrics", self.openmetrics.clone()),
            ("--out_json", self.out_json_path()),
            ("--plot", self.plot.clone().filter(|_| plots)),
        ];
        for (flag, path) in files {
            if let Some(path) = path {
                can_write(&path).map_err(|e| {
                    format!(
                        "{flag} {}: cannot write this file: {e}; nothing was run",
                        path.display()
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Whether any gate (ours or perftest's limits) is set.
    pub fn has_gates(&self) -> bool {
        !self.max_counter.is_empty()
            || self.min_bw.is_some()
            || !self.max_lat.is_empty()
            || self.limit_bw.is_some()
            || self.limit_msgrate.is_some()
    }

    /// Whether anything but stdout needs the run's end: a report file (`--json`, `--csv`,
    /// `--out_json`, `--plot`, all written at the end) or a gate (checked at the end, on every
    /// row). Without any, a run whose stdout has lost its reader is of use to no one.
    pub fn needs_the_end(&self) -> bool {
        self.json.is_some()
            || self.csv.is_some()
            || self.openmetrics.is_some()
            || self.out_json_path().is_some()
            || self.plot.is_some()
            || self.has_gates()
    }

    /// Removes every gate (a side that measures nothing checks none).
    pub fn clear_gates(&mut self) {
        self.min_bw = None;
        self.max_lat.clear();
        self.limit_bw = None;
        self.limit_msgrate = None;
        self.max_counter.clear();
    }
}

/// Prints a run as perftest does — header first, each row as its size finishes, footer at the
/// end — then writes `--json` / `--csv` and checks the gates.
///
/// In table mode nothing is printed until [`finish`](Reporter::finish), which prints both
/// tables. Text goes to stdout; gate messages go to stderr.
pub struct Reporter {
    args: OutputArgs,
    out: Box<dyn Write + Send>,
    /// `out` is this process's stdout (see [`Reporter::unread`]).
    is_stdout: bool,
    /// A write to `out` failed with `EPIPE`: its reader is gone.
    out_closed: bool,
    /// The first write to `out` that failed for another reason than `EPIPE`.
    out_failed: Option<io::Error>,
    header_done: bool,
    rows_done: usize,
    /// The run's NIC counter deltas, once known.
    counters: Option<crate::counters::Snapshot>,
    /// `--cpu_util`: the sample at the start of the run and at the last row, and each streamed
    /// row's utilisation.
    cpu_first: Option<CpuSample>,
    cpu_mark: Option<CpuSample>,
    cpu_utils: Vec<f64>,
    /// `--report-both`: each `-b` size's two directions (this side's, the peer's).
    directions: Vec<(BwRow, BwRow)>,
    /// `-C`: CPU cycles per microsecond (the CPU's MHz), read once.
    cycles_per_us: Option<f64>,
}

impl Reporter {
    /// A reporter printing to stdout.
    pub fn new(args: &OutputArgs) -> Reporter {
        Reporter {
            is_stdout: true,
            ..Reporter::with_writer(args, Box::new(io::stdout()))
        }
    }

    /// A reporter printing to `out` (tests, or a tool that wants the text elsewhere).
    pub fn with_writer(args: &OutputArgs, out: Box<dyn Write + Send>) -> Reporter {
        Reporter {
            args: args.clone(),
            out,
            is_stdout: false,
            out_closed: false,
            out_failed: None,
            header_done: false,
            rows_done: 0,
            counters: None,
            cpu_first: None,
            cpu_mark: None,
            cpu_utils: Vec::new(),
            directions: Vec::new(),
            cycles_per_us: args
                .report_cycles
                .then(crate::report::cycles::cpu_mhz)
                .and_then(Result::ok),
        }
    }

    fn unit(&self) -> BwUnit {
        BwUnit::new(self.args.report_gbits)
    }

    fn emit(&mut self, s: &str) {
        // A closed stdout (`| head`) must not abort the measurement: the files and the gates
        // still matter, so a failed write is ignored here — only noted, for `unread`.
        let written = self
            .out
            .write_all(s.as_bytes())
            .and_then(|()| self.out.flush());
        match written {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => self.out_closed = true,
            // Another error (a full disk): the run goes on for its files, then fails with it.
            Err(e) => drop(self.out_failed.get_or_insert(e)),
            Ok(()) => {}
        }
    }

    /// Whether the rest of the run is of use to no one: what this reporter prints has lost
    /// its reader (a write failed with `EPIPE`, or — for stdout, which `--format table` leaves
    /// silent until the end — `poll(2)` says so, [`verbs_lab::stdout::reader_gone`]), and no
    /// report file or gate waits for the end ([`OutputArgs::needs_the_end`]). A run without an
    /// end of its own (`--run_infinitely`) then ends as a signal would end it, quietly.
    pub fn unread(&self) -> bool {
        !self.args.needs_the_end()
            && (self.out_closed || (self.is_stdout && verbs_lab::stdout::reader_gone()))
    }

    /// perftest's server banner, "Waiting for client to connect...", in perftest's text layout:
    /// printed once the server listens with its device open (`RowSink::listening`), so a
    /// server that cannot start never claims to wait.
    pub fn waiting_banner(&mut self) {
        if self.streams_text() {
            self.emit(text::WAITING_BANNER);
        }
    }

    /// Prints the header block (text mode): parameters, QP endpoints, column header. Call it
    /// once the QPs are connected, since it lists both sides' endpoints; later calls do nothing.
    pub fn header(&mut self, info: &RunInfo) {
        if self.header_done {
            return;
        }
        self.header_done = true;
        if self.args.cpu_util {
            let now = crate::cpu_util::sample();
            self.cpu_first = Some(now);
            self.cpu_mark = Some(now);
        }
        if self.streams_text() {
            let mut s = text::header(info, self.unit());
            if self.args.cpu_util && !text::passive(info) {
                // perftest's RESULT_EXT_CPU_UTIL after the column header.
                s.pop();
                s.push_str("    CPU_Util[%]\n");
            }
            self.emit(&s);
        }
    }

    /// `--cpu_util`: the utilisation since the previous row (or the header), recorded.
    fn cpu_tick(&mut self) -> Option<f64> {
        let mark = self.cpu_mark?;
        let now = crate::cpu_util::sample();
        let u = crate::cpu_util::utilisation(&mark, &now);
        self.cpu_mark = Some(now);
        self.cpu_utils.push(u);
        Some(u)
    }

    /// A text row with perftest's CPU column (`REPORT_EXT_CPU_UTIL`) when there is one.
    fn with_cpu(row: String, util: Option<f64>) -> String {
        text::with_cpu(row, util)
    }

    /// Whether rows are streamed in perftest's text layout (not `--format table`, not
    /// `--output=UNITS`).
    fn streams_text(&self) -> bool {
        self.args.format == OutputFormat::Text && self.args.verbosity.is_none()
    }

    /// Keeps the run's NIC counter deltas for the end of the report.
    pub fn set_counters(&mut self, deltas: crate::counters::Snapshot) {
        self.counters = Some(deltas);
    }

    /// Prints one bandwidth row now (text mode), or its bare number (`--output`).
    pub fn bw_row(&mut self, info: &RunInfo, row: &BwRow) {
        self.header(info);
        self.rows_done += 1;
        let util = self.cpu_tick();
        if let Some(v) = self.args.verbosity {
            let s = text::bare_bw(row, v, self.unit());
            self.emit(&s);
        } else if self.streams_text() {
            let s = Self::with_cpu(text::bw_row(row, self.unit()), util);
            self.emit(&s);
        }
    }

    /// Keeps the two directions of a `-b` size for `--report-both`'s block at the end.
    pub fn bw_directions(&mut self, local: &BwRow, remote: &BwRow) {
        if self.args.report_both {
            self.directions.push((*local, *remote));
        }
    }

    /// `-H`, `-U`: prints every sample of a size (ns, in the order taken) as perftest does
    /// before the size's row: `-U` as taken, `-H` sorted, then (perftest's text layout) the
    /// separator and the column header again. In `-C`'s cycles, or in microseconds.
    pub fn lat_samples(&mut self, info: &RunInfo, samples: &[u64]) {
        let (histogram, unsorted) = (self.args.report_histogram, self.args.report_unsorted);
        if !(histogram || unsorted) || self.args.format != OutputFormat::Text {
            return;
        }
        self.header(info);
        let (per_ns, unit) = match self.cycles_per_us {
            Some(mhz) => (mhz / 1000.0, "cycles"),
            None => (1e-3, "usec"),
        };
        let mut s = String::new();
        if unsorted {
            s.push_str(&crate::report::cycles::sample_lines(unit, samples, per_ns));
        }
        if histogram {
            let mut sorted = samples.to_vec();
            sorted.sort_unstable();
            s.push_str(&crate::report::cycles::sample_lines(unit, &sorted, per_ns));
        }
        if self.streams_text() {
            s.push_str(&format!("{}\n", text::SEPARATOR));
            s.push_str(&text::column_header(info, self.unit()));
            s.push_str(if self.args.cpu_util {
                "    CPU_Util[%]\n"
            } else {
                "\n"
            });
        }
        self.emit(&s);
    }

    /// Prints one latency row now (text mode), or its bare number (`--output=latency`); with
    /// `-C` in cycles.
    pub fn lat_row(&mut self, info: &RunInfo, row: &LatRow) {
        self.header(info);
        self.rows_done += 1;
        let util = self.cpu_tick();
        let row = &self.in_cycles(row);
        if self.args.verbosity.is_some() {
            let s = text::bare_lat(row);
            self.emit(&s);
        } else if self.streams_text() {
            let s = Self::with_cpu(text::lat_row(info, row), util);
            self.emit(&s);
        }
    }

    /// `-C`: the row's times in CPU cycles (perftest keeps the `[usec]` headings); the row as
    /// it is otherwise. Only the printed text changes: the report files keep microseconds.
    fn in_cycles(&self, row: &LatRow) -> LatRow {
        match self.cycles_per_us {
            Some(mhz) if row.tps.is_none() => crate::report::cycles::scale_row(row, mhz),
            _ => *row,
        }
    }

    /// Ends the report: prints what the stream has not printed yet (rows not passed to
    /// `bw_row`/`lat_row`, the footer; in table mode both tables), writes `--json` and `--csv`,
    /// and checks the gates, printing each miss to stderr.
    ///
    /// `Err` for a file that cannot be written, or a gate on a metric this tool does not
    /// measure; otherwise the caller exits with [`GateOutcome::exit_code`].
    pub fn finish(self, result: &RunResult) -> anyhow::Result<GateOutcome> {
        self.finish_procs(result, &[])
    }

    /// [`finish`](Reporter::finish) for a `--procs N` run: `result` holds the totals (what the
    /// gates check), `procs` each process's rows, shown beside the totals in every format
    /// (`render_*_procs`). Rows already streamed are not printed again.
    pub fn finish_procs(
        mut self,
        result: &RunResult,
        procs: &[ProcessResult],
    ) -> anyhow::Result<GateOutcome> {
        self.print_rest(result, procs)?;
        self.write_files(result, procs)?;
        check_applicable(&self.args, result.info.metric).map_err(anyhow::Error::msg)?;
        let outcome = self.check_all_gates(result);
        if let Some(path) = &self.args.openmetrics {
            let text = crate::report::openmetrics::render(
                result,
                self.counters.as_ref(),
                &self.gate_verdicts(result),
            );
            write_file(path, "--openmetrics", &text)?;
        }
        match &self.out_failed {
            Some(e) => anyhow::bail!("cannot write to stdout: {e} (the report files were written)"),
            None => Ok(outcome),
        }
    }

    /// Prints on stdout what the stream has not printed yet: the bare rows of `-v`; in text
    /// mode the header if none was streamed, the rows left, the counters and the footer; in
    /// table mode both tables.
    fn print_rest(&mut self, result: &RunResult, procs: &[ProcessResult]) -> anyhow::Result<()> {
        let info = &result.info;
        if let Some(v) = self.args.verbosity {
            let mut rest = String::new();
            match &result.rows {
                Rows::Bw(rows) => rows
                    .iter()
                    .skip(self.rows_done)
                    .for_each(|r| rest.push_str(&text::bare_bw(r, v, self.unit()))),
                Rows::Lat(rows) => rows
                    .iter()
                    .skip(self.rows_done)
                    .for_each(|r| rest.push_str(&text::bare_lat(r))),
            }
            self.emit(&rest);
        }
        match self.args.format {
            _ if self.args.verbosity.is_some() => {}
            OutputFormat::Text => {
                if !self.header_done {
                    self.header_done = true;
                    let s = text::header_procs(info, procs, self.unit());
                    self.emit(&s);
                }
                let mut rest = self.text_rows_left(result, procs);
                if !self.directions.is_empty() {
                    let utils = (self.args.cpu_util).then_some(self.cpu_utils.as_slice());
                    rest.push_str(&text::directions(&self.directions, self.unit(), utils));
                }
                rest.push_str(&self.counter_lines()?);
                rest.push_str(&text::footer(info));
                self.emit(&rest);
            }
            OutputFormat::Table => {
                let s = render_table_procs(result, procs, self.args.report_gbits);
                self.emit(&s);
            }
        }
        Ok(())
    }

    /// The text rows not streamed yet (with `--procs`, each process's beside the totals).
    fn text_rows_left(&self, result: &RunResult, procs: &[ProcessResult]) -> String {
        let mut rest = String::new();
        match &result.rows {
            Rows::Bw(rows) if !procs.is_empty() => {
                let rest_rows = rows.get(self.rows_done..).unwrap_or_default();
                let tail: Vec<ProcessResult> = procs
                    .iter()
                    .map(|p| ProcessResult {
                        rows: p.rows.get(self.rows_done..).unwrap_or_default().to_vec(),
                        spans: p.spans.get(self.rows_done..).unwrap_or_default().to_vec(),
                        ..p.clone()
                    })
                    .collect();
                rest.push_str(&text::procs_rows(rest_rows, &tail, self.unit()));
            }
            Rows::Bw(rows) => rows
                .iter()
                .skip(self.rows_done)
                .for_each(|r| rest.push_str(&text::bw_row(r, self.unit()))),
            Rows::Lat(rows) => rows
                .iter()
                .skip(self.rows_done)
                .for_each(|r| rest.push_str(&text::lat_row(&result.info, r))),
        }
        rest
    }

    /// Writes the report files asked for: `--json`, `--csv`, `--out_json`, `--plot`.
    fn write_files(&self, result: &RunResult, procs: &[ProcessResult]) -> anyhow::Result<()> {
        let gbits = self.args.report_gbits;
        let counters = self.counters.as_ref();
        let cpu = self.cpu_report();
        if let Some(path) = &self.args.json {
            let text = render_json_counters(result, procs, gbits, counters, cpu.as_ref());
            write_file(path, "--json", &text)?;
        }
        if let Some(path) = &self.args.csv {
            write_file(path, "--csv", &render_csv_procs(result, procs, gbits))?;
        }
        if let Some(path) = self.args.out_json_path() {
            let text = crate::report::perftest_json::render_perftest_json_counters(
                result,
                self.args.verbosity,
                gbits,
                counters,
                cpu.as_ref(),
            );
            write_file(&path, "--out_json", &text)?;
        }
        if let Some(path) = &self.args.plot {
            let measured = match &result.rows {
                Rows::Bw(rows) => !rows.is_empty(),
                Rows::Lat(rows) => !rows.is_empty(),
            };
            if measured {
                let doc =
                    verbs_lab::json::from_str_strict(&render_json_procs(result, procs, gbits))?;
                let svg = crate::report::plot::render_svg(&doc).map_err(anyhow::Error::msg)?;
                write_file(path, "--plot", &svg)?;
            } else {
                // Symmetric command lines are the habit: a passive side has nothing to draw.
                verbs_lab::eprintln_whole!(
                    "{}: note: this side measured nothing; no --plot chart written to {}",
                    verbs_lab::stderr::program_name(),
                    path.display()
                );
            }
        }
        Ok(())
    }

    /// Each gate given, as typed, and whether it held on its own (for `--openmetrics`).
    fn gate_verdicts(&self, result: &RunResult) -> crate::report::openmetrics::GateVerdicts {
        let none = OutputArgs {
            min_bw: None,
            max_lat: Vec::new(),
            limit_bw: None,
            limit_msgrate: None,
            max_counter: Vec::new(),
            ..self.args.clone()
        };
        let a = &self.args;
        let mut one: Vec<(String, OutputArgs)> = Vec::new();
        if let Some(w) = a.limit_bw {
            one.push((
                format!("--limit_bw {w}"),
                OutputArgs {
                    limit_bw: Some(w),
                    ..none.clone()
                },
            ));
        }
        if let Some(y) = a.limit_msgrate {
            let o = OutputArgs {
                limit_msgrate: Some(y),
                ..none.clone()
            };
            one.push((format!("--limit_msgrate {y}"), o));
        }
        if let Some(m) = a.min_bw {
            one.push((
                format!("--min-bw {m}"),
                OutputArgs {
                    min_bw: Some(m),
                    ..none.clone()
                },
            ));
        }
        for l in &a.max_lat {
            let o = OutputArgs {
                max_lat: vec![l.clone()],
                ..none.clone()
            };
            one.push((format!("--max-lat {l}"), o));
        }
        let mut out: crate::report::openmetrics::GateVerdicts = one
            .into_iter()
            .map(|(name, args)| (name, check_gates(result, &args) == GateOutcome::Passed))
            .collect();
        for g in &a.max_counter {
            let held = crate::counters::check(std::slice::from_ref(g), self.counters.as_ref());
            out.push((format!("--max-counter {g}"), held.is_empty()));
        }
        out
    }

    /// Checks the gates and `--max-counter`, printing each miss (or the gates passed) on
    /// stderr.
    fn check_all_gates(&self, result: &RunResult) -> GateOutcome {
        let mut outcome = check_gates(result, &self.args);
        let misses = crate::counters::check(&self.args.max_counter, self.counters.as_ref());
        if !misses.is_empty() {
            let mut all = match outcome {
                GateOutcome::Failed(m) => m,
                GateOutcome::Passed => Vec::new(),
            };
            all.extend(misses);
            outcome = GateOutcome::Failed(all);
        }
        // Our lines start with the tool's name; perftest's own error lines stay as perftest
        // prints them, for the scripts that grep them.
        let name = verbs_lab::stderr::program_name();
        match &outcome {
            GateOutcome::Failed(messages) => messages.iter().for_each(|m| {
                if [PERFTEST_BW_LIMIT_ERROR, PERFTEST_MSGRATE_LIMIT_ERROR].contains(&m.as_str()) {
                    verbs_lab::eprintln_whole!("{m}")
                } else {
                    verbs_lab::eprintln_whole!("{name}: {m}")
                }
            }),
            GateOutcome::Passed => {
                if let Some(gates) = gate_summary(&self.args) {
                    verbs_lab::eprintln_whole!("{name}: gates passed: {gates}");
                }
            }
        }
        outcome
    }
}

impl Reporter {
    /// `--cpu_util`'s figures for the JSON files: each streamed row's utilisation and this
    /// process's CPU time since the header.
    fn cpu_report(&self) -> Option<crate::cpu_util::CpuReport> {
        let first = self.cpu_first?;
        let now = crate::cpu_util::sample();
        Some(crate::cpu_util::CpuReport {
            util_percent: self.cpu_utils.clone(),
            process_cpu: now.process.saturating_sub(first.process),
        })
    }

    /// The `--counters` block and perftest's `-W` lines, in text mode (empty without them).
    fn counter_lines(&self) -> anyhow::Result<String> {
        let mut s = String::new();
        let want = self.args.counters || !self.args.report_counters.is_empty();
        let Some(d) = self.counters.as_ref().filter(|_| want) else {
            if want {
                s.push_str(" NIC counters: none read on this side\n");
            }
            return Ok(s);
        };
        if !self.args.report_counters.is_empty() {
            s.push_str(
                &crate::counters::perftest_lines(d, &self.args.report_counters)
                    .map_err(|e| anyhow::anyhow!("-W/--report-counters: {e}"))?,
            );
        }
        if self.args.counters {
            s.push_str(&crate::counters::block(d));
        }
        Ok(s)
    }
}

/// Whether `path` can be opened for writing; a file this creates is removed again. (The
/// collectives check their `--json` with it too.)
pub fn can_write(path: &Path) -> io::Result<()> {
    let existed = fs::symlink_metadata(path).is_ok();
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if !existed {
        fs::remove_file(path)?;
    }
    Ok(())
}

/// Writes a report file (once, at the end, holding every row).
fn write_file(path: &Path, flag: &str, text: &str) -> anyhow::Result<()> {
    fs::write(path, text)
        .with_context(|| format!("cannot write the {flag} file {}", path.display()))
}
