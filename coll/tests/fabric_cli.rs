//! vl_fabric_check on the host, where no RDMA device is needed before the rounds: bad command
//! lines are refused before anything runs (exit 2, `vl_fabric_check: error: ` and the reason), a
//! rank that never arrives is named by rank 0 when the rendezvous' bound passes (exit 1), and a
//! second check on a master port already taken is refused (exit 1), each within its bound.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vl_fabric_check");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("MASTER_ADDR")
        .env_remove("MASTER_PORT")
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .output()
        .expect("vl_fabric_check starts")
}

fn fails(args: &[&str], code: i32, reason: &str) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(reason), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?} printed a report");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn bad_command_lines_are_refused_before_anything_runs() {
    fails(&["--tolerance", "2"], 2, "2 is not a share");
    fails(&["--lat-factor", "0.5"], 2, "a factor of at least 1");
    fails(&["--expect", "0"], 2, "above 0");
    fails(&["--mode", "ring"], 2, "invalid value 'ring'");
    fails(
        &["--np", "1"],
        2,
        "vl_fabric_check: error: --np 1: a fabric check needs at least 2",
    );
    fails(
        &["--np", "2", "--rank", "0"],
        2,
        "--np starts its own ranks",
    );
    fails(
        &[
            "--rank",
            "0",
            "--world-size",
            "1",
            "--master",
            "127.0.0.1:1",
        ],
        2,
        "needs at least 2 ranks",
    );
    // The launch flags are the collectives' (torchrun's way across hosts), refused alike.
    fails(
        &["--nnodes", "1:4"],
        2,
        "torchrun's elastic --nnodes MIN:MAX",
    );
    fails(
        &["--np", "1", "--node-rank", "1"],
        2,
        "--node-rank needs --nnodes N",
    );
    fails(
        &["--np", "1", "--nnodes", "2"],
        2,
        "--nnodes 2 needs --node-rank K",
    );
    fails(
        &["--nnodes", "2", "--node-rank", "0"],
        2,
        "--nnodes and --node-rank go with --np N",
    );
    let master = format!("127.0.0.1:{}", free_port());
    fails_as_rank0(
        "2",
        &master,
        &["--json", "/nonexistent-dir/x.json"],
        2,
        "--json /nonexistent-dir/x.json: cannot write this file",
    );
}

/// Rank 0 of a world of `world` at `master`, with `extra` options.
fn rank0(world: &str, master: &str, extra: &[&str]) -> Vec<String> {
    ["--rank", "0", "--world-size", world, "--master", master]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

fn fails_as_rank0(world: &str, master: &str, extra: &[&str], code: i32, reason: &str) {
    let args = rank0(world, master, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fails(&args, code, reason);
}

#[test]
fn a_rank_that_never_arrives_is_named_within_the_bound() {
    let master = format!("127.0.0.1:{}", free_port());
    let t = Instant::now();
    fails_as_rank0(
        "3",
        &master,
        &["--bootstrap-timeout", "1"],
        1,
        "ranks 1, 2 of 3 never reached the master",
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
}

#[test]
fn a_second_check_on_the_same_master_port_is_refused() {
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    fails_as_rank0(
        "2",
        &format!("127.0.0.1:{port}"),
        &["--bootstrap-timeout", "2"],
        1,
        &format!("rank 0 cannot listen on TCP port {port}"),
    );
}

/// `--help`'s description of `flag` (the lines after its heading, up to the next flag), from
/// the help text `help`, as one line (clap puts `[default: ..]` on a line of its own where a
/// tool has long help texts, beside the text where it has none).
fn described(help: &str, flag: &str) -> String {
    let mut lines = help.lines().skip_while(|l| {
        let l = l.trim_start();
        !(l.starts_with(&format!("{flag} ")) || l.contains(&format!(", {flag} ")) || l == flag)
    });
    assert!(lines.next().is_some(), "{flag} is not in the help:\n{help}");
    let text: Vec<&str> = lines
        .take_while(|l| !l.trim_start().starts_with('-') && !l.starts_with(|c: char| c != ' '))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    text.join(" ")
}

#[test]
fn the_launch_flags_are_the_collectives_with_the_same_help() {
    let help = |exe: &str| {
        let out = Command::new(exe).arg("--help").output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8(out.stdout).unwrap()
    };
    let fabric = help(BIN);
    let coll = help(env!("CARGO_BIN_EXE_vl_all_reduce_perf"));
    for flag in [
        "--ib-dev",
        "--ib-port",
        "--gid-index",
        "--np",
        "--nnodes",
        "--node-rank",
        "--rank",
        "--world-size",
        "--local-rank",
        "--master",
        "--bootstrap-timeout",
    ] {
        let d = described(&fabric, flag);
        assert!(!d.is_empty(), "{flag} has no description");
        assert_eq!(d, described(&coll, flag), "{flag}");
    }
    // The vl_* tools' letters for the device and port, which the collectives give to nccl-tests.
    assert!(fabric.contains("-d, --ib-dev <DEV,...>"), "{fabric}");
    assert!(fabric.contains("-i, --ib-port <IB_PORT>"), "{fabric}");
}
