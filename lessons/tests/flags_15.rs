//! Lesson 15 on the host: `--np` with the flags of a rank launched by hand is refused with what
//! each is for (exit 2), and every rank flag is explained in `--help`.

use std::process::{Command, Output};

const L15: &str = env!("CARGO_BIN_EXE_lesson15_ring_allreduce");

fn run(args: &[&str]) -> Output {
    Command::new(L15)
        .args(args)
        .env_remove("VL_COORDINATOR_PID")
        .output()
        .unwrap_or_else(|e| panic!("{L15} starts: {e}"))
}

/// The lesson run with `args` and, of this process's environment, only `PATH` and `env`.
fn run_in_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(L15)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{L15} starts: {e}"))
}

#[test]
fn np_with_a_rank_launched_by_hand_says_which_is_which() {
    for extra in [["--rank", "0"], ["--world-size", "3"], ["--master", "h:1"]] {
        let mut args = vec!["--np", "2"];
        args.extend(extra);
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err.trim_end(),
            "lesson15_ring_allreduce: error: --np starts its own ranks: leave out --rank, \
             --world-size, --local-rank and --master (they are for launching each rank \
             yourself, without --np)",
            "{args:?}"
        );
    }
}

#[test]
fn every_rank_flag_is_explained_in_the_help() {
    let help = String::from_utf8_lossy(&run(&["--help"]).stdout).to_string();
    for flag in ["--rank", "--world-size", "--local-rank", "--master"] {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(flag))
            .unwrap_or_else(|| panic!("{flag} in {help}"));
        let text = line.trim_start().split_once("  ").map(|(_, t)| t.trim());
        assert!(text.is_some_and(|t| !t.is_empty()), "{flag}: {line:?}");
    }
}

/// No launcher and no flags, a world of one, or a launcher variable that is not a number: a bad
/// command line (exit 2) that says what to give, before any verbs call.
#[test]
fn a_rank_that_cannot_be_a_ring_is_a_usage_error() {
    for (env, says) in [
        (vec![], "a ring needs at least 2 ranks: run with --np 3"),
        (
            vec![("RANK", "0"), ("WORLD_SIZE", "1")],
            "a ring needs at least 2 ranks",
        ),
        (vec![("RANK", "x"), ("WORLD_SIZE", "2")], "RANK=\"x\""),
    ] {
        let out = run_in_env(&[], &env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {err}");
        assert!(
            err.starts_with("lesson15_ring_allreduce: error: ") && err.contains(says),
            "{env:?}: {err}"
        );
    }
}

/// F7 and M2 on the lesson: launchers that disagree, and a vector too long to narrate or to
/// register, are refused at once (exit 2) saying what to give.
#[test]
fn disagreeing_launchers_and_a_huge_count_are_usage_errors() {
    for (args, env, says) in [
        (
            vec![],
            vec![
                ("OMPI_COMM_WORLD_RANK", "1"),
                ("OMPI_COMM_WORLD_SIZE", "2"),
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "29500"),
            ],
            "two launchers disagree about this process: RANK=0 WORLD_SIZE=2 (torchrun",
        ),
        (
            vec!["--count", "100000000"],
            vec![],
            "--count 100000000: give 1 to 4096: the lesson prints every element",
        ),
        (vec!["--count", "0"], vec![], "--count 0: give 1 to 4096"),
    ] {
        let out = run_in_env(&args, &env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {err}");
        assert!(
            err.starts_with("lesson15_ring_allreduce: error: ") && err.contains(says),
            "{args:?} {env:?}: {err}"
        );
    }
}
