//! Every binary of this package writes its man page and bash/zsh/fish completions when run
//! with VERBS_LAB_GENERATE=DIR (what scripts/install does), and each file names one of its flags.

use std::path::Path;

#[test]
fn every_binary_documents_itself() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-perftest");
    verbs_lab::cli::check_every_generated(
        &scratch,
        &[
            (env!("CARGO_BIN_EXE_vl_write_bw"), "--plot"),
            (env!("CARGO_BIN_EXE_vl_read_bw"), "--outs"),
            (env!("CARGO_BIN_EXE_vl_send_bw"), "--bidirectional"),
            (env!("CARGO_BIN_EXE_vl_atomic_bw"), "--atomic_type"),
            (env!("CARGO_BIN_EXE_vl_write_lat"), "--max-lat"),
            (env!("CARGO_BIN_EXE_vl_read_lat"), "--gid-index"),
            (env!("CARGO_BIN_EXE_vl_send_lat"), "--inline_size"),
            (env!("CARGO_BIN_EXE_vl_atomic_lat"), "--duration"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}
