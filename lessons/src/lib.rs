//! What every lesson shares. What a lesson *teaches* stays in its own `main.rs`; these modules
//! hold only what earlier lessons already taught, one job each:
//!
//! | module | what | taught in |
//! |---|---|---|
//! | [`args`] | the shared flags and their checks before any verbs call | every lesson |
//! | [`narrator`] | numbered steps and the lines under them (`-q` silences); every line printed ([`outln!`]), a quiet end on a closed stdout | every lesson |
//! | [`device`] | opening the device, its port and GID, the `-m` path MTU; a wait that explains a timeout | 01 |
//! | [`peer`] | the out-of-band connection, the endpoint record, the barrier after RTS | 03 |
//! | [`terms`] | the `key=value` test parameters the two sides agree on | 05–08 |
//! | [`qp`] | the RC QP, its bring-up to RTS, one side's working set | 02, 03 |
//! | [`data`] | the byte pattern both sides compute, and where a message differs | 04 |
//! | [`pingpong`] | `ibv_rc_pingpong`'s record, handshake, wr_ids, loop bookkeeping and summary lines | 04, 11, 12 |
//! | [`steal`] | time a busy-polling thread's vCPU did not execute (steal time), seen from inside a guest | 09, 14 |
//!
//! Everything is also at the crate's root (`use verbs_lab_lessons::{open_device, Narrator}`),
//! together with the `main` of the lessons ([`lesson_main`]) and the parsing of their command
//! lines ([`parse_args`]).

#![forbid(unsafe_code)]

use anyhow::Result;

pub mod args;
pub mod data;
pub mod device;
pub mod narrator;
pub mod peer;
pub mod pingpong;
pub mod qp;
pub mod steal;
pub mod terms;

pub use args::{check_range, CommonArgs, DevicePairArgs, PingPongArgs, Role};
pub use data::{first_mismatch, pattern};
pub use device::{open_device, open_named_device, poll_one_explained, Device};
pub use narrator::{say_mr, Narrator};
pub use peer::{exchange, exchange_endpoints, meet, oob_connect, peer_rts_barrier, PeerInfo};
pub use pingpong::{
    decode_rc_pingpong, encode_rc_pingpong, pingpong_recvs, print_pingpong_summary,
    print_round_trips, rc_pingpong_handshake, read_peer_record, require_peer_gid, Finished,
    PingPong, Summary, RC_PINGPONG_DONE, RC_PINGPONG_RECORD_LEN, RECV_WRID, SEND_WRID,
};
pub use qp::{connect_opts, connect_qp, create_rc_qp, create_rc_qp_inline, rc_connect_opts, Side};
pub use terms::{exchange_params, recv_params, same_as_client, send_params, Terms};
pub use verbs_lab::outln;
pub use verbs_lab::stdout::until_stdout_closes;

/// Prints an error chain the way every tool of the project does (`verbs_lab::cli::failed`) and
/// returns the exit code 1.
pub fn report_error(program: &str, e: &anyhow::Error) -> std::process::ExitCode {
    verbs_lab::cli::failed(program, e)
}

/// The clap command of the lesson `program`: `A`'s flags, named `program` and carrying the
/// crate's version. Every lesson's command is named here, once, so that `--version`, the usage
/// line of an error and the man page say the lesson's name rather than the package's.
pub fn lesson_command<A: clap::CommandFactory>(program: &'static str) -> clap::Command {
    A::command()
        .name(program)
        .version(env!("CARGO_PKG_VERSION"))
}

/// Parses the command line of the lesson `program` ([`lesson_command`]); with
/// `verbs_lab::cli::GENERATE_ENV` set, writes the man page and completions instead and exits
/// (`verbs_lab::cli::generate_if_asked`). A bad flag ends the program as clap ends it (exit 2),
/// a number that is not one in plain words (`verbs_lab::cli::explain_number_error`).
pub fn parse_args<A: clap::Parser>(program: &'static str) -> A {
    verbs_lab::cli::generate_if_asked(|| lesson_command::<A>(program));
    let mut cmd = verbs_lab::cli::negative_numbers_are_values(lesson_command::<A>(program));
    cmd.try_get_matches_from_mut(std::env::args_os())
        .and_then(|mut m| A::from_arg_matches_mut(&mut m))
        .unwrap_or_else(|e| {
            let e = verbs_lab::cli::explain_number_error(e.format(&mut cmd), &mut cmd);
            verbs_lab::cli::exit_on_usage_error(&e, program)
        })
}

/// The `main` of every lesson but 10, 13 and 15 (which start workers or choose a role
/// first): parse the flags ([`parse_args`]), refuse what `check` refuses before any verbs call
/// (a usage error, exit 2, [`usage_error`]), then `run` with what `check` returned; an error
/// from `run` is reported by [`report_error`] (exit 1), a closed stdout ends it quietly
/// (exit 0, [`until_stdout_closes`]).
pub fn lesson_main<A: clap::Parser, T>(
    program: &'static str,
    check: impl FnOnce(&A) -> Result<T>,
    run: impl FnOnce(&A, T) -> Result<()>,
) -> std::process::ExitCode {
    let args: A = parse_args(program);
    let checked = check(&args).unwrap_or_else(|e| usage_error::<A>(program, &e));
    until_stdout_closes(|| match run(&args, checked) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => report_error(program, &e),
    })
}

/// Ends the lesson `program` as a bad flag ends it — `PROGRAM: error: MESSAGE`, the usage line,
/// exit status 2 ([`verbs_lab::cli::exit_on_usage_error`]) — for refusals found after parsing
/// but before any verbs call.
pub fn usage_error<P: clap::CommandFactory>(program: &'static str, e: &anyhow::Error) -> ! {
    let e = lesson_command::<P>(program)
        .error(clap::error::ErrorKind::ValueValidation, format!("{e:#}"));
    verbs_lab::cli::exit_on_usage_error(&e, program)
}
