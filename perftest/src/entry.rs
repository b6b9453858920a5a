//! The `main` of every `vl_*` tool: parse → dispatch (a `--procs` worker, a `--procs`
//! coordinator, or one run of [`crate::run`]) → report → exit code.
//!
//! Exit codes ([`EXIT_CODES`], printed by every tool's `--help`): 0 success; 1 the run failed
//! (the error says which step, and the peer's reason when it reported one); 2 a bad command
//! line (nothing was run); 3 ([`EXIT_GATE_FAILED`](crate::output::gates::EXIT_GATE_FAILED)) the run
//! completed but missed a gate; 130 and 143 the run was stopped by SIGINT or SIGTERM (see
//! [`crate::signals`]). A fatal event of the device (a port that went down, a QP in a fatal
//! error, the device being removed) fails the run with 1, named: see [`crate::events`].

use std::process::ExitCode;
use std::time::Duration;

use verbs_lab::fail::{self, Fail};

use crate::measure::result::{BwRow, LatRow, RunInfo};
use crate::output::Reporter;
use crate::params::{Config, Params, Tool};
use crate::run::{measures, run_tool, RowSink};
use crate::signals::Control;

pub use crate::params::EXIT_CODES;

/// The whole tool: parses the command line for `tool`, runs, reports, and returns the exit
/// code. Errors are printed as `vl_write_bw: error: ...` on stderr ([`Fail::exit`]).
pub fn main(tool: Tool) -> ExitCode {
    let name = tool.name();
    // The one run control of this process: the signals' handler holds it, every run below is
    // handed it.
    let control = match crate::signals::install(&name) {
        Ok(c) => c,
        Err(e) => {
            return Fail::failed(format!(
                "cannot set up the handling of SIGINT and SIGTERM: {e}"
            ))
            .exit(&name)
        }
    };
    verbs_lab::cli::generate_if_asked(|| Params::command_for(tool));
    let params = Params::parse_for(tool);
    let cfg = match Config::new(tool, &params) {
        Ok(c) => c,
        Err(e) => return Fail::usage(e).exit(&name),
    };
    // A run is one thread, which takes the signals as it waits and looks at its peer
    // (verbs_lab::signals). The modes that block where they cannot look — a worker waiting for
    // its coordinator's word, a coordinator for its workers, a server's runs on threads of
    // their own — take them on the signal thread.
    let blocks_elsewhere = cfg.procs.worker.is_some()
        || cfg.procs.count.is_some()
        || (cfg.serve && cfg.concurrent > 1);
    if blocks_elsewhere {
        if let Err(e) = verbs_lab::signals::on_thread() {
            return Fail::failed(format!("cannot start the signal thread: {e}")).exit(&name);
        }
    }
    if cfg.procs.worker.is_some() {
        return crate::procs::worker_main(&cfg, &control);
    }
    for note in &cfg.notes {
        verbs_lab::eprintln_whole!("{name}: note: {note}");
    }
    let out = match checked_output(&cfg, &params) {
        Ok(out) => out,
        Err(fail) => return fail.exit(&name),
    };
    if cfg.procs.count.is_some() {
        return crate::procs::coordinator_main(&cfg, &control, &out);
    }
    if cfg.serve && cfg.concurrent > 1 {
        return crate::serve::serve_concurrent(&cfg, &control, &out);
    }
    if cfg.serve {
        return serve(&cfg, &control, &out);
    }
    let mut reporter = Reporter::new(&out);
    let ran = run_tool(&cfg, &control, &mut reporter).map_err(|e| ended(&control, e));
    fail::exit(
        &name,
        ran.and_then(|result| Ok(reporter.finish(&result)?.code())),
    )
}

/// The output flags, checked before anything runs (each refusal a usage error, exit 2); the
/// gates dropped on a side that measures nothing.
fn checked_output(cfg: &Config, params: &Params) -> Result<crate::params::OutputArgs, Fail> {
    let name = cfg.tool.name();
    crate::output::check_applicable(&params.output, cfg.tool.metric).map_err(Fail::usage)?;
    crate::output::check_cycles(&params.output).map_err(Fail::usage)?;
    let mut out = params.output.clone();
    if !measures(cfg) && out.has_gates() {
        // Symmetric command lines are the habit: the gates are the measuring side's business
        // (perftest's server, too, prints the client's row without checking -w/-y).
        let (this, peer) = match cfg.is_server() {
            true => ("server", "client"),
            false => ("client", "server"),
        };
        verbs_lab::eprintln_whole!(
            "{name}: note: the {this} measures nothing in this test; the gates are checked by \
             the {peer}"
        );
        out.clear_gates();
    }
    out.check_writable(measures(cfg)).map_err(Fail::usage)?;
    Ok(out)
}

/// How a run that failed ends the tool: stopped by a signal, `NAME: interrupted by SIGINT: the
/// peer was told, the run torn down` and 130 or 143; otherwise its error ([`Fail`]'s code).
pub fn ended(control: &Control, e: anyhow::Error) -> Fail {
    match control.received() {
        Some(i) => Fail::stopped(
            i.exit_code(),
            anyhow::anyhow!("{i}: the peer was told, the run torn down"),
        ),
        None => Fail::from(e),
    }
}

/// How long a `--serve` server waits for a client before it simply waits again.
const SERVE_WAIT: Duration = Duration::from_secs(86_400);

/// The runs a `--serve` server has served, for its summary.
#[derive(Default)]
pub struct Served {
    pub completed: u32,
    pub failed: u32,
}

impl Served {
    pub fn summary(&self) -> String {
        format!(
            "served {} client(s): {} completed, {} failed",
            self.completed + self.failed,
            self.completed,
            self.failed
        )
    }
}

/// A sink that tells the serve loop whether the run got as far as listening: an error before
/// it (the device, the port) is the server's own and ends the serving.
struct Listened<'a> {
    reporter: &'a mut Reporter,
    listening: bool,
}

impl RowSink for Listened<'_> {
    fn header(&mut self, info: &RunInfo) {
        self.reporter.header(info)
    }
    fn bw_row(&mut self, info: &RunInfo, row: &BwRow) {
        self.reporter.bw_row(info, row)
    }
    fn lat_row(&mut self, info: &RunInfo, row: &LatRow) {
        self.reporter.lat_row(info, row)
    }
    fn bw_directions(&mut self, local: &BwRow, remote: &BwRow) {
        self.reporter.bw_directions(local, remote)
    }
    fn lat_samples(&mut self, info: &RunInfo, samples: &[u64]) {
        self.reporter.lat_samples(info, samples)
    }
    fn counters(&mut self, deltas: crate::counters::Snapshot) {
        self.reporter.set_counters(deltas)
    }
    fn listening(&mut self) {
        self.listening = true;
        self.reporter.waiting_banner()
    }
    fn note(&mut self, tool: &str, text: &str) {
        RowSink::note(self.reporter, tool, text)
    }
}

/// `--serve`: one run after another, each with a client of its own, until SIGINT or SIGTERM.
/// A client's failure (refused, killed, gone silent) ends its run only: logged, counted, and
/// the server listens again. A failure before listening (the device, the port), or a fatal
/// event of the device or its port during a run, ends the server (exit 1). Stopped by a
/// signal: the summary, exit 0.
fn serve(cfg: &Config, control: &Control, out: &crate::params::OutputArgs) -> ExitCode {
    let name = cfg.tool.name();
    let mut cfg = cfg.clone();
    cfg.peer.wait = SERVE_WAIT;
    let mut served = Served::default();
    loop {
        control.set_serve_summary(served.summary());
        let mut reporter = Reporter::new(out);
        let mut sink = Listened {
            reporter: &mut reporter,
            listening: false,
        };
        let run = run_tool(&cfg, control, &mut sink);
        let listened = sink.listening;
        let client = served.completed + served.failed + 1;
        match run.and_then(|result| reporter.finish(&result)) {
            Ok(_) => {
                served.completed += 1;
                verbs_lab::eprintln_whole!("{name}: --serve: client {client} completed");
            }
            Err(e) if control.received().is_some() => {
                served.failed += 1;
                let i = control.received().expect("checked");
                verbs_lab::eprintln_whole!(
                    "{name}: --serve: {i} during the run of client {client} ({e:#}): {}",
                    served.summary()
                );
                return ExitCode::SUCCESS;
            }
            Err(e) if !listened => return Fail::from(e).exit(&name),
            // The device failed under the run (its error is the event, see run.rs): the
            // server's own failure, not the client's.
            Err(e) if crate::events::in_chain(&e).is_some() => {
                served.failed += 1;
                verbs_lab::eprintln_whole!("{name}: --serve: {}", served.summary());
                return Fail::from(e).exit(&name);
            }
            Err(e) if waited_in_vain(&e) => {}
            Err(e) => {
                served.failed += 1;
                verbs_lab::eprintln_whole!(
                    "{name}: --serve: client {client} failed: {e:#}; waiting for the next client"
                );
            }
        }
    }
}

/// Whether the run ended because no client came within the wait (the server waits again).
fn waited_in_vain(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<verbs_lab::oob::OobError>(),
            Some(verbs_lab::oob::OobError::Timeout { .. })
        )
    }) && e.to_string().starts_with("waiting for a client")
}
