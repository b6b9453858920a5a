//! Every binary of this package writes its man page and bash/zsh/fish completions when run
//! with VERBS_LAB_GENERATE=DIR (what scripts/install does), and each file names one of its flags.

use std::path::Path;

#[test]
fn every_binary_documents_itself() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-coll");
    verbs_lab::cli::check_every_generated(
        &scratch,
        &[
            (env!("CARGO_BIN_EXE_vl_fabric_check"), "--tolerance"),
            (env!("CARGO_BIN_EXE_vl_all_reduce_perf"), "--algo"),
            (env!("CARGO_BIN_EXE_vl_all_gather_perf"), "--iters"),
            (env!("CARGO_BIN_EXE_vl_reduce_scatter_perf"), "--op"),
            (env!("CARGO_BIN_EXE_vl_broadcast_perf"), "--root"),
            (env!("CARGO_BIN_EXE_vl_reduce_perf"), "--root"),
            (env!("CARGO_BIN_EXE_vl_alltoall_perf"), "--datatype"),
            (env!("CARGO_BIN_EXE_vl_gather_perf"), "--root"),
            (env!("CARGO_BIN_EXE_vl_scatter_perf"), "--root"),
            (env!("CARGO_BIN_EXE_vl_sendrecv_perf"), "--check"),
            (env!("CARGO_BIN_EXE_vl_reduce_kernels"), "--rounds"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}
