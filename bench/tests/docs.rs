//! Every binary of this package writes its man page and bash/zsh/fish completions when run
//! with VERBS_LAB_GENERATE=DIR (what scripts/install does), and each file names one of its flags.

use std::path::Path;

#[test]
fn every_binary_documents_itself() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-bench");
    verbs_lab::cli::check_every_generated(
        &scratch,
        &[
            (env!("CARGO_BIN_EXE_vl_jsoncheck"), "--sizes"),
            (env!("CARGO_BIN_EXE_vl_benchchart"), "--version"),
            (env!("CARGO_BIN_EXE_vl_benchstat"), "--version"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}
