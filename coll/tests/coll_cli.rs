//! The collective benchmarks on the host, as one rank (which needs no NIC) or as `--np`'s
//! launcher: flags are checked the same way whatever the world size, bad ones are refused before
//! anything runs (exit 2, `NAME: error: ` and the reason), a closed stdout ends the sweep
//! quietly, and the `--json` document carries the version.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const ALL_REDUCE: &str = env!("CARGO_BIN_EXE_vl_all_reduce_perf");
const SENDRECV: &str = env!("CARGO_BIN_EXE_vl_sendrecv_perf");
const NEW_TOOLS: [&str; 4] = [
    env!("CARGO_BIN_EXE_vl_alltoall_perf"),
    env!("CARGO_BIN_EXE_vl_reduce_perf"),
    env!("CARGO_BIN_EXE_vl_gather_perf"),
    env!("CARGO_BIN_EXE_vl_scatter_perf"),
];

fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{bin} starts: {e}"))
}

/// `args` are refused with exit status 2 and `reason`, as `NAME: error: ...`, nothing printed.
fn refused(bin: &str, args: &[&str], reason: &str) {
    is_refusal(&run(bin, args), bin, args, reason);
}

/// `out`, of `bin` run with `args`, is a refusal: exit status 2 and `reason`, as `NAME: error:
/// ...`, nothing printed.
fn is_refusal(out: &Output, bin: &str, args: &[&str], reason: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    let name = bin.rsplit('/').next().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(
        err.starts_with(&format!("{name}: error: ")),
        "{args:?}: {err}"
    );
    assert!(err.contains(reason), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?} printed a table");
}

#[test]
fn sizes_beyond_the_registered_buffers_or_the_row_limit_are_refused() {
    refused(
        ALL_REDUCE,
        &["-e", "16G"],
        "-e 17179869184: larger than 2147483648 bytes; each rank registers an input and an output",
    );
    refused(
        ALL_REDUCE,
        &["--slots", "4096", "--slot-size", "1M"],
        "more than 2147483648 bytes; the slots are one registered region",
    );
    refused(
        ALL_REDUCE,
        &["-b", "8", "-e", "1G", "-i", "1"],
        "-i 1: not a whole number of 4-byte elements; give a multiple of 4",
    );
    refused(
        ALL_REDUCE,
        &["-b", "8", "-e", "1G", "-i", "4"],
        "is 268435455 rows, more than the 1000 a sweep may have: give -i 1074820 or more",
    );
}

#[test]
fn a_gate_that_could_never_fail_is_refused() {
    for bad in ["nan", "NaN", "0", "inf", "-1"] {
        let out = run(ALL_REDUCE, &["-e", "64", &format!("--min-busbw={bad}")]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(
            err.contains(&format!("'{bad}' is not a positive bandwidth")),
            "{err}"
        );
    }
}

/// One rank of `vl_sendrecv_perf -e 64` (no NIC needed; unlike one rank's all-reduce, its bus
/// bandwidth is not 0) with `NCCL_TESTS_MIN_BW=value`.
fn with_nccl_min_bw(value: &str, args: &[&str]) -> Output {
    Command::new(SENDRECV)
        .args(["-e", "64"])
        .args(args)
        .env("NCCL_TESTS_MIN_BW", value)
        .output()
        .unwrap()
}

#[test]
fn nccl_tests_min_bw_is_honoured_as_nccl_tests_does_and_the_footer_says_the_verdict() {
    // Far above one rank's bandwidth: the run fails (our gate status), the footer says so.
    let out = with_nccl_min_bw("1000000", &[]);
    let (stdout, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(3), "{stdout}{err}");
    assert!(stdout.contains("# Avg bus bandwidth    : "), "{stdout}");
    assert!(stdout.contains(" FAILED\n#"), "{stdout}");
    assert!(
        err.contains("< 90 % of NCCL_TESTS_MIN_BW=1000000 (900000 GB/s)"),
        "{err}"
    );
    // --min-busbw takes its place, exactly, and its verdict is in the footer too.
    let out = with_nccl_min_bw("1000000", &["--min-busbw", "1e-9"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout
        .lines()
        .any(|l| l.starts_with("# Avg bus bandwidth    : ") && l.ends_with(" OK")));
    // A value nccl-tests' atof would read as 0 (a gate that never fails) is refused.
    for bad in ["fast", "0", ""] {
        let out = with_nccl_min_bw(bad, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {err}");
        assert!(
            err.contains(&format!("NCCL_TESTS_MIN_BW={bad:?}: ")),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "{bad:?}: a table was printed");
    }
}

#[test]
fn one_rank_checks_its_flags_as_many_would() {
    // clap's refusal, through the one range of -u every tool uses.
    let out = run(ALL_REDUCE, &["-e", "64", "-u", "99"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("-u 99: give 0 to 31: the QP ack timeout is a 5-bit exponent"),
        "{err}"
    );
    refused(
        SENDRECV,
        &["-e", "64", "-r", "3"],
        "-r 3: the world here is a single rank (rank 0)",
    );
    // A device that does not exist fails (here: no RDMA at all; in a guest: no such device),
    // instead of a run on the heap that says "device -".
    let out = run(ALL_REDUCE, &["-e", "64", "--ib-dev", "nonexist"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("vl_all_reduce_perf: error: opening the RDMA device"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

/// M7: `-n` said "99999999999 is not in 0..=4294967295", though 0 was then refused too.
#[test]
fn iters_out_of_range_say_the_range_allowed() {
    for n in ["0", "99999999999"] {
        refused(
            ALL_REDUCE,
            &["-e", "64", "-n", n],
            &format!("-n {n}: give 1 to 4294967295: the timed collectives per size"),
        );
    }
}

/// A negative number is the flag's value, refused with what the flag takes: clap took `-1`
/// for an unknown flag and advised `-- -1`.
#[test]
fn negative_numbers_say_what_the_flag_takes() {
    for (args, reason) in [
        (
            &["-r", "-1"][..],
            "--root -1: cannot be negative; give a whole number",
        ),
        (&["-n", "-1"], "-n -1: give 1 to 4294967295"),
        (
            &["-b", "-8"],
            "'-8' is not a size in bytes: it cannot be negative",
        ),
    ] {
        refused(ALL_REDUCE, args, reason);
        let err = String::from_utf8_lossy(&run(ALL_REDUCE, args).stderr).to_string();
        assert!(!err.contains("use '--"), "{args:?}: {err}");
    }
}

/// The launcher variables of `env` (and nothing else of this process's environment).
fn run_in_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(ALL_REDUCE)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{ALL_REDUCE} starts: {e}"))
}

/// F7: under `mpirun -np 2` with a stale `RANK=0 WORLD_SIZE=1` each rank ran alone and passed.
#[test]
fn launchers_that_disagree_are_a_usage_error_but_np_and_flags_override_them() {
    let stale = [
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("RANK", "0"),
        ("WORLD_SIZE", "1"),
    ];
    let small = ["-b", "8", "-e", "8", "-n", "1", "-w", "0"];
    let out = run_in_env(&small, &stale);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with(
            "vl_all_reduce_perf: error: two launchers disagree about this process: RANK=0 \
             WORLD_SIZE=1 (torchrun (RANK/WORLD_SIZE)) but OMPI_COMM_WORLD_RANK=1 \
             OMPI_COMM_WORLD_SIZE=2 (Open MPI (OMPI_COMM_WORLD_*))"
        ) && err.contains("unset RANK WORLD_SIZE LOCAL_RANK"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // Flags override the environment, as the help says; and --np's ranks get flags, so a
    // local run inside such an environment still works (one rank: no NIC needed).
    for args in [
        &["--rank", "0", "--world-size", "1"][..],
        &["--np", "1"][..],
    ] {
        let all: Vec<&str> = args.iter().chain(&small).copied().collect();
        let out = run_in_env(&all, &stale);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{all:?}: {err}");
        let table = String::from_utf8_lossy(&out.stdout);
        assert!(table.contains("nranks 1 (from "), "{all:?}: {table}");
        assert!(
            table.contains("# Out of bounds values : 0 OK"),
            "{all:?}: {table}"
        );
    }
}

#[test]
fn np_says_which_flags_are_for_launching_ranks_yourself() {
    refused(
        ALL_REDUCE,
        &["--np", "2", "--rank", "0"],
        "--np starts its own ranks: leave out --rank, --world-size, --local-rank and --master \
         (they are for launching each rank yourself, without --np); for ranks on several nodes \
         add --nnodes N and --node-rank K, with --master",
    );
    // The launcher checks what every rank would, once, before starting any.
    refused(ALL_REDUCE, &["--np", "2", "-e", "16G"], "-e 17179869184");
    let out = run(ALL_REDUCE, &["--np", "2", "-e", "16G"]);
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

/// A command line, the launcher variables around it, and the reason it is refused.
type Refusal = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
);

/// torchrun's multi-node form, `--np N --nnodes M --node-rank K --master HOST:PORT` on each
/// node: whatever cannot work is refused by the launcher before any rank starts (exit 2, one
/// line saying what to give), with no launcher variables in the environment.
#[test]
fn nnodes_refuses_what_cannot_work_saying_what_to_give() {
    let cases: [Refusal; 12] = [
        (
            "--np 2 --nnodes 1:4",
            &[],
            "invalid value '1:4' for '--nnodes <N>': torchrun's elastic --nnodes MIN:MAX is not \
             offered: the world is fixed at --nnodes × --np ranks when they meet; give one \
             number of nodes, e.g. --nnodes 4",
        ),
        (
            "--np 2 --nnodes 4 --master 127.0.0.1:29500",
            &[],
            "--nnodes 4 needs --node-rank K, this node's number (0..3): start one launcher on \
             each node, each with its own K, node 0 on the host of --master",
        ),
        (
            "--np 2 --nnodes 4 --node-rank 4",
            &[],
            "--node-rank 4: give 0..3, this node's number among the --nnodes 4",
        ),
        (
            "--np 2 --nnodes 4 --node-rank 1",
            &[],
            "--nnodes 4 needs rank 0's address: give --master HOST:PORT (node 0's host, where \
             rank 0 listens), or set MASTER_ADDR and MASTER_PORT, the same on every node",
        ),
        (
            "--np 2 --nnodes 2 --node-rank 0 --master 192.0.2.1:29500",
            &[],
            "--master 192.0.2.1:29500: 192.0.2.1 is not an address of this host (",
        ),
        (
            "--np 2 --nnodes 2 --node-rank 0",
            &[("MASTER_ADDR", "192.0.2.1"), ("MASTER_PORT", "29500")],
            "MASTER_ADDR=192.0.2.1 MASTER_PORT=29500: 192.0.2.1 is not an address of this host",
        ),
        (
            "--np 2 --nnodes 2 --node-rank 1",
            &[("MASTER_ADDR", "node1")],
            "MASTER_ADDR is set but MASTER_PORT is not",
        ),
        (
            "--np 2 --nnodes 2 --node_rank 1 --master 127.0.0.1:1 --world-size 4",
            &[],
            "--nnodes gives each rank its --rank, --world-size and --local-rank (node rank × \
             --np + local rank, --nnodes × --np, local rank): leave them out",
        ),
        (
            "--np 600 --nnodes 2 --node-rank 1 --master 127.0.0.1:1",
            &[],
            "--np 600: give 1..512 ranks per node: the world, --nnodes 2 × --np, is at most 1024",
        ),
        (
            "--np 2 --node-rank 1",
            &[],
            "--node-rank needs --nnodes N, the number of nodes",
        ),
        (
            "--nnodes 2 --node-rank 1 -e 64",
            &[],
            "--nnodes and --node-rank go with --np N, the ranks that each node's launcher starts \
             (torchrun's --nproc-per-node)",
        ),
        (
            // The sweep and the root are checked against the whole world, --nnodes × --np.
            "--np 2 --nnodes 2 --node-rank 1 --master 127.0.0.1:1 -r 4",
            &[],
            "-r 4: the root must be a rank of the 4 (0..3)",
        ),
    ];
    for (line, env, reason) in cases {
        let args: Vec<&str> = line.split(' ').collect();
        is_refusal(&run_in_env(&args, env), ALL_REDUCE, &args, reason);
    }
}

#[test]
fn a_json_path_that_cannot_be_written_fails_before_the_run() {
    let started = Instant::now();
    refused(
        ALL_REDUCE,
        &["-e", "64", "--json", "/nonexistent/x.json"],
        "--json /nonexistent/x.json: cannot write this file: No such file or directory (os error 2); nothing was run",
    );
    refused(
        ALL_REDUCE,
        &["--np", "2", "--json", "/nonexistent/x.json"],
        "--json /nonexistent/x.json: cannot write this file",
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn the_json_document_has_a_version_and_the_tool_one_too() {
    let dir = std::env::temp_dir().join(format!("vl-coll-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("coll.json");
    let out = run(
        ALL_REDUCE,
        &[
            "-e",
            "64",
            "-n",
            "2",
            "-w",
            "1",
            "--json",
            path.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(doc["rows"].as_array().unwrap().len(), 4);
    let _ = std::fs::remove_dir_all(&dir);
    let v = run(ALL_REDUCE, &["-V"]);
    assert_eq!(v.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&v.stdout),
        format!("vl_all_reduce_perf {}\n", env!("CARGO_PKG_VERSION"))
    );
}

/// `| head -1`: the reader takes the first line and goes; the tool ends at once, quietly, 0.
/// The 1000 rows are more than a pipe holds, so the tool meets the closed pipe whatever the
/// timing.
#[test]
fn a_closed_stdout_ends_the_sweep_quietly() {
    for bin in [ALL_REDUCE, SENDRECV] {
        for np in [None, Some("1")] {
            let mut cmd = Command::new(bin);
            cmd.args(["-b", "4", "-e", "4000", "-i", "4", "-n", "1", "-w", "0"]);
            if let Some(n) = np {
                cmd.args(["--np", n]);
            }
            let mut child = cmd
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut first = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut first)
                .unwrap();
            assert!(first.starts_with("# vl_"), "{first}");
            // The reader is dropped: the pipe is closed.
            let started = Instant::now();
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{bin} {np:?}: {err}");
            assert!(err.is_empty(), "{bin} {np:?}: {err}");
            assert!(started.elapsed() < Duration::from_secs(30));
        }
    }
}

#[test]
fn an_nccl_tests_command_line_runs_as_it_is_and_gpu_settings_are_refused_saying_why() {
    // nccl-tests' flags as job scripts give them: -d is the data type, -t/-g threads and GPUs.
    let line = "-t 1 -g 1 -b 8 -e 64 -f 2 -n 3 -w 1 -c 1 -d int32 -m 1 -a 3 -N 1 -C 1 -p 0 -z 0 \
                -y 0 -G 0 -S 0 -R 0 -M 0 -I 0 -T 5";
    let out = run(SENDRECV, &line.split(' ').collect::<Vec<_>>());
    let (stdout, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{err}");
    let rows: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 4, "8 to 64 bytes: {stdout}");
    assert!(
        rows.iter()
            .all(|r| r.split_whitespace().nth(2) == Some("int32")),
        "{stdout}"
    );
    // What this tool cannot be is refused with the reason, before anything runs.
    for (flag, value, reason) in [
        (
            "-g",
            "2",
            "only 1 is offered: there are no GPUs here: each rank drives one RDMA device",
        ),
        (
            "-t",
            "4",
            "each rank is one process with one thread; for more ranks give --np N",
        ),
        (
            "-a",
            "1",
            "the time column is the slowest rank's (nccl-tests' -a 3)",
        ),
        ("-G", "10", "there are none here: leave it out"),
        ("-m", "x", "only 1 is offered"),
        ("-J", "out.json", "give --json FILE"),
    ] {
        refused(SENDRECV, &["-e", "64", flag, value], reason);
    }
    // A device given as -d used to mean: now it is told where devices go.
    refused(
        ALL_REDUCE,
        &["-d", "rxe0"],
        "unknown data type 'rxe0': use float, double, int32, int64, uint8, int8, uint32, uint64, half \
         or bfloat16 (-d is nccl-tests' \
         data type; RDMA devices go in --ib-dev)",
    );
}

/// One rank of each new tool (no NIC): every type checked, 0 wrong, the nccl-tests columns, the
/// --csv file with one line per row, and the --json document that vl_jsoncheck's schema reads.
#[test]
fn the_new_tools_run_one_rank_checked_with_csv_and_json() {
    // A directory of its own: the tests of this file run at once, and this one removes it.
    let dir = std::env::temp_dir().join(format!("vl-coll-cli-new-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for bin in NEW_TOOLS {
        for t in ["float", "int8", "uint32", "uint64", "half", "bfloat16"] {
            let csv = dir.join("rows.csv");
            let csv = csv.to_str().unwrap();
            let out = run(
                bin,
                &["-b", "8", "-e", "4K", "-f", "8", "-d", t, "--csv", csv],
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{bin} -d {t}: {stdout}{err}");
            assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
            let rows: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('#')).collect();
            assert_eq!(rows.len(), 4, "{stdout}");
            assert!(
                rows.iter().all(|r| r.contains(&format!(" {t} "))),
                "{stdout}"
            );
            let csv = std::fs::read_to_string(csv).unwrap();
            assert_eq!(csv.lines().count(), 5, "{csv}");
            assert!(
                csv.starts_with("size_bytes,count,type,redop,root,oop_time_us,"),
                "{csv}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sweeps_run_every_type_and_operator_in_nccl_tests_order() {
    // -d all -o all: each type, and for each its four operators, every size; 0 wrong.
    let out = run(
        ALL_REDUCE,
        &[
            "-b", "8", "-e", "64", "-f", "8", "-d", "all", "-o", "all", "-n", "1", "-w", "0",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("# Out of bounds values : 0 OK"), "{stdout}");
    let rows: Vec<(String, String)> = stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[2].to_string(), f[3].to_string())
        })
        .collect();
    assert_eq!(rows.len(), 10 * 5 * 2, "{stdout}");
    assert_eq!(rows[0], ("float".into(), "sum".into()));
    assert_eq!(rows[2], ("float".into(), "prod".into()));
    assert_eq!(rows[8], ("float".into(), "avg".into()));
    assert_eq!(rows[10], ("double".into(), "sum".into()));
    assert_eq!(rows[99], ("bfloat16".into(), "avg".into()));
    // A collective that does not reduce sweeps the types only.
    let out = run(
        NEW_TOOLS[2],
        &["-e", "64", "-d", "all", "-o", "all", "-n", "1"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let rows = stdout.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(rows, 10 * 4, "{stdout}");
}

#[test]
fn a_sweeps_documents_and_narrow_checked_sums_are_refused() {
    refused(
        ALL_REDUCE,
        &["-e", "64", "-d", "all", "--json", "/tmp/never-written.json"],
        "--json holds one type and one operator: with -d all or -o all, run once per type",
    );
    refused(
        NEW_TOOLS[1],
        &["-e", "64", "-d", "bfloat16", "--np", "9"],
        "-d bfloat16 -c 1 with 9 ranks: bfloat16 holds every integer only up to 256",
    );
}
