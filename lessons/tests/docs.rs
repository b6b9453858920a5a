//! Every binary of this package writes its man page and bash/zsh/fish completions when run
//! with VERBS_LAB_GENERATE=DIR (what scripts/install does), and each file names one of its flags.

use std::path::Path;

#[test]
fn every_binary_documents_itself() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-lessons");
    for (exe, flag) in [
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
    ] {
        verbs_lab::cli::check_generated(Path::new(exe), &scratch, flag)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
