//! Every binary of this package writes its man page and bash/zsh/fish completions when run
//! with VERBS_LAB_GENERATE=DIR (what scripts/install does), and each file names one of its flags.

use std::path::Path;

#[test]
fn every_binary_documents_itself() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-lessons");
    verbs_lab::cli::check_every_generated(
        &scratch,
        &[
            (env!("CARGO_BIN_EXE_lesson01_devices"), "--ib-dev"),
            (env!("CARGO_BIN_EXE_lesson02_resources"), "--max-send-wr"),
            (env!("CARGO_BIN_EXE_lesson03_connect"), "--gid-idx"),
            (env!("CARGO_BIN_EXE_lesson04_send_recv"), "--show-rnr"),
            (env!("CARGO_BIN_EXE_lesson05_rdma_write"), "--bad-rkey"),
            (env!("CARGO_BIN_EXE_lesson06_rdma_read"), "--outstanding"),
            (env!("CARGO_BIN_EXE_lesson07_events"), "--show-race"),
            (env!("CARGO_BIN_EXE_lesson08_atomics"), "--no-atomic-access"),
            (env!("CARGO_BIN_EXE_lesson09_affinity"), "--cpus"),
            (env!("CARGO_BIN_EXE_lesson10_mqueue"), "--kill-worker"),
            (env!("CARGO_BIN_EXE_lesson11_ud"), "--show-loss"),
            (
                env!("CARGO_BIN_EXE_lesson12_srq_events"),
                "--show-port-down",
            ),
            (env!("CARGO_BIN_EXE_lesson13_rdma_cm"), "--count"),
            (env!("CARGO_BIN_EXE_lesson14_tuning"), "--pp-iters"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Every lesson's command is named by `verbs_lab_lessons::lesson_command`, whatever its struct
/// says: `--version` prints the lesson's own name (not the package's) and the version.
#[test]
fn every_lesson_names_itself_in_its_version() {
    for exe in [
        env!("CARGO_BIN_EXE_lesson01_devices"),
        env!("CARGO_BIN_EXE_lesson02_resources"),
        env!("CARGO_BIN_EXE_lesson03_connect"),
        env!("CARGO_BIN_EXE_lesson04_send_recv"),
        env!("CARGO_BIN_EXE_lesson05_rdma_write"),
        env!("CARGO_BIN_EXE_lesson06_rdma_read"),
        env!("CARGO_BIN_EXE_lesson07_events"),
        env!("CARGO_BIN_EXE_lesson08_atomics"),
        env!("CARGO_BIN_EXE_lesson09_affinity"),
        env!("CARGO_BIN_EXE_lesson10_mqueue"),
        env!("CARGO_BIN_EXE_lesson11_ud"),
        env!("CARGO_BIN_EXE_lesson12_srq_events"),
        env!("CARGO_BIN_EXE_lesson13_rdma_cm"),
        env!("CARGO_BIN_EXE_lesson14_tuning"),
        env!("CARGO_BIN_EXE_lesson15_ring_allreduce"),
        env!("CARGO_BIN_EXE_lesson16_many_hosts"),
        env!("CARGO_BIN_EXE_lesson17_fabric"),
    ] {
        let o = std::process::Command::new(exe)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{exe} runs: {e}"));
        let name = Path::new(exe).file_name().unwrap().to_string_lossy();
        assert!(o.status.success(), "{name} --version: {}", o.status);
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            format!("{name} {}\n", env!("CARGO_PKG_VERSION"))
        );
    }
}
