//! Every binary of this package writes its man page and bash/zsh/fish completions when run
//! with VERBS_LAB_GENERATE=DIR (what scripts/install does), and each file names one of its flags.

use std::path::Path;

#[test]
fn every_binary_documents_itself() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("docs-root");
    verbs_lab::cli::check_every_generated(
        &scratch,
        &[
            (env!("CARGO_BIN_EXE_vl_devinfo"), "--ib-dev"),
            (env!("CARGO_BIN_EXE_vl_selftest"), "--dev-b"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
}
