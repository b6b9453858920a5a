//! What every lesson shares. What a lesson *teaches* stays in its own `main.rs`; these modules
//! hold only what earlier lessons already taught, one job each:
//!
//! | module | what | taught in |
//! |---|---|---|
//! | [`args`] | the shared flags and their checks before any verbs call | every lesson |
//! | [`narrator`] | numbered steps and the lines under them (`-q` silences) | every lesson |
//! | [`device`] | opening the device, its port and GID, the `-m` path MTU; a wait that explains a timeout | 01 |
//! | [`peer`] | the out-of-band connection, the endpoint record, the barrier after RTS | 03 |
//! | [`terms`] | the `key=value` test parameters the two sides agree on | 05–08 |
//! | [`qp`] | the RC QP, its bring-up to RTS, one side's working set | 02, 03 |
//! | [`data`] | the byte pattern both sides compute, and where a message differs | 04 |
//! | [`pingpong`] | `ibv_rc_pingpong`'s record, handshake, wr_ids, loop bookkeeping and summary lines | 04, 11, 12 |
//!
//! Everything is also at the crate's root (`use verbs_lab_lessons::{open_device, Narrator}`),
//! together with the `main` of the lessons ([`lesson_main`]).

#![forbid(unsafe_code)]

use anyhow::Result;

pub mod args;
pub mod data;
pub mod device;
pub mod narrator;
pub mod peer;
pub mod pingpong;
pub mod qp;
pub mod terms;

pub use args::{check_device_flags, parse_size, CommonArgs, DevicePairArgs, Role};
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

/// Prints an error chain the way every tool of the project does (`verbs_lab::cli::failed`) and
/// returns the exit code 1.
pub fn report_error(program: &str, e: &anyhow::Error) -> std::process::ExitCode {
    verbs_lab::cli::failed(program, e)
}

/// The `main` of every lesson but 10, 13 and 15 (which start workers or choose a role
/// first): parse the flags (`verbs_lab::cli::parse`), refuse what `check`
/// refuses before any verbs call (a usage error, exit 2, [`usage_error`]), then `run` with what
/// `check` returned; an error from `run` is reported by [`report_error`] (exit 1).
pub fn lesson_main<A: clap::Parser, T>(
    program: &str,
    check: impl FnOnce(&A) -> Result<T>,
    run: impl FnOnce(&A, T) -> Result<()>,
) -> std::process::ExitCode {
    let args: A = verbs_lab::cli::parse();
    let checked = check(&args).unwrap_or_else(|e| usage_error::<A>(&e));
    match run(&args, checked) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => report_error(program, &e),
    }
}

/// Ends the program the way clap ends it for a bad flag — `error: MESSAGE`, the usage line,
/// exit status 2 — for refusals found after parsing but before any verbs call.
pub fn usage_error<P: clap::CommandFactory>(e: &anyhow::Error) -> ! {
    P::command()
        .error(clap::error::ErrorKind::ValueValidation, format!("{e:#}"))
        .exit()
}
