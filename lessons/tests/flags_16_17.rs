//! Lessons 16 and 17 on the host, where neither has its cluster: lesson 16 without a launcher,
//! or with a launcher's variables that disagree, and lesson 17 with a bad flag are refused
//! before any verbs call or ssh, exit 2, saying what to do.

use std::process::{Command, Output};

const L16: &str = env!("CARGO_BIN_EXE_lesson16_many_hosts");
const L17: &str = env!("CARGO_BIN_EXE_lesson17_fabric");

/// `exe` with `args` and, of this process's environment, only `PATH` and `env`.
fn run(exe: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(exe)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{exe} starts: {e}"))
}

fn refused(out: &Output, prefix: &str, says: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(prefix) && err.contains(says),
        "expected {says:?} in: {err}"
    );
}

#[test]
fn lesson16_without_a_launcher_says_how_to_start_it() {
    let out = run(L16, &["-d", "rxe0"], &[]);
    refused(
        &out,
        "lesson16_many_hosts: error: no launcher started this rank",
        "start it with srun, mpirun or torchrun's variables",
    );
}

#[test]
fn lesson16_without_a_master_address_names_it() {
    let out = run(L16, &[], &[("RANK", "1"), ("WORLD_SIZE", "8")]);
    refused(
        &out,
        "lesson16_many_hosts: error: ",
        "give --master HOST:PORT (rank 0's host) or set MASTER_ADDR and MASTER_PORT",
    );
}

#[test]
fn lesson16_refuses_launchers_that_disagree() {
    let out = run(
        L16,
        &[],
        &[
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("MASTER_ADDR", "node1"),
            ("MASTER_PORT", "29500"),
        ],
    );
    refused(
        &out,
        "lesson16_many_hosts: error: ",
        "two launchers disagree about this process",
    );
}

#[test]
fn lesson16_and_17_check_their_ranges() {
    refused(
        &run(L16, &["--count", "65"], &[]),
        "lesson16_many_hosts: error: --count 65: give 1 to 64",
        "every rank's vector is printed",
    );
    refused(
        &run(L17, &["--rounds", "0"], &[]),
        "lesson17_fabric: error: --rounds 0: give 1 to 12",
        "each round takes a few seconds",
    );
    refused(
        &run(L17, &["--rate", "1000"], &[]),
        "lesson17_fabric: error: --rate 1000: give 2 to 100",
        "the cable, not the emulated CPUs",
    );
}
