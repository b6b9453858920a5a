//! The `main` of every `vl_*` tool: parse → dispatch (a `--procs` worker, a `--procs`
//! coordinator, or one run of [`crate::run`]) → report → exit code.
//!
//! Exit codes ([`EXIT_CODES`], printed by every tool's `--help`): 0 success; 1 the run failed
//! (the error says which step, and the peer's reason when it reported one); 2 a bad command
//! line (nothing was run); 3 ([`EXIT_GATE_FAILED`](crate::gates::EXIT_GATE_FAILED)) the run
//! completed but missed a gate; 130 and 143 the run was stopped by SIGINT or SIGTERM (see
//! [`crate::signals`]). A fatal event of the device (a port that went down, a QP in a fatal
//! error, the device being removed) fails the run with 1, named: see [`crate::events`].

use std::process::ExitCode;

use verbs_lab::cli::failed;

use crate::output::Reporter;
use crate::params::{Config, Params, Tool};
use crate::run::{measures, run_tool};

pub use crate::params::EXIT_CODES;

/// The whole tool: parses the command line for `tool`, runs, reports, and returns the exit
/// code. Errors are printed as `vl_write_bw: error: ...` on stderr.
pub fn main(tool: Tool) -> ExitCode {
    let name = tool.name();
    if let Err(e) = crate::signals::install(&name) {
        verbs_lab::eprintln_whole!(
            "{name}: error: cannot set up the handling of SIGINT and SIGTERM: {e}"
        );
        return ExitCode::FAILURE;
    }
    verbs_lab::cli::generate_if_asked(|| Params::command_for(tool));
    let params = Params::parse_for(tool);
    let cfg = match Config::new(tool, &params) {
        Ok(c) => c,
        Err(e) => {
            verbs_lab::eprintln_whole!("{name}: error: {e}");
            return ExitCode::from(2);
        }
    };
    if cfg.procs.worker.is_some() {
        return crate::procs::worker_main(&cfg);
    }
    for note in &cfg.notes {
        verbs_lab::eprintln_whole!("{name}: note: {note}");
    }
    if let Err(e) = crate::output::check_applicable(&params.output, tool.metric) {
        verbs_lab::eprintln_whole!("{name}: error: {e}");
        return ExitCode::from(2);
    }
    let mut out = params.output.clone();
    if !measures(&cfg) && out.has_gates() {
        // Symmetric command lines are the habit: the gates are the measuring side's business
        // (perftest's server, too, prints the client's row without checking -w/-y).
        verbs_lab::eprintln_whole!(
            "{name}: note: the server measures nothing in this test; the gates are checked by \
             the client"
        );
        out.clear_gates();
    }
    if let Err(e) = out.check_writable(measures(&cfg)) {
        verbs_lab::eprintln_whole!("{name}: error: {e}");
        return ExitCode::from(2);
    }
    if cfg.procs.count.is_some() {
        return crate::procs::coordinator_main(&cfg, &out);
    }
    let mut reporter = Reporter::new(&out);
    match run_tool(&cfg, &mut reporter) {
        Ok(result) => match reporter.finish(&result) {
            Ok(outcome) => outcome.exit_code(),
            Err(e) => failed(&name, &e),
        },
        Err(e) => match crate::signals::received() {
            Some(i) => {
                verbs_lab::eprintln_whole!("{name}: {i}: the peer was told, the run torn down");
                ExitCode::from(i.exit_code())
            }
            None => failed(&name, &e),
        },
    }
}
