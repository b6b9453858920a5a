//! Every tool that reads our JSON documents refuses a key given twice in one object, at the top
//! and three levels down, with the exit status and the message its `--help` documents
//! (`verbs_lab::json::from_str_strict`, the one strict reader).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `exe` with `args` and checks that it exits 1 with `want` (and nothing else) on stderr.
fn refused(exe: &str, args: &[&Path], want: String) {
    let out = Command::new(exe)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {exe}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end(), want);
}

fn write(name: &str, text: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("strict-json");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The documented exit status of a document that is not strict JSON: 1, "a key given twice".
fn documents_exit_1_for_a_duplicate(exe: &str) {
    let out = Command::new(exe).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("Exit codes: 0 ")
            && help.contains(" 1 ")
            && help.contains("a key given twice in one object"),
        "{exe} --help does not document the exit status of a duplicate key:\n{help}"
    );
}

#[test]
fn vl_jsoncheck_refuses_a_key_given_twice() {
    let exe = env!("CARGO_BIN_EXE_vl_jsoncheck");
    documents_exit_1_for_a_duplicate(exe);
    let top = write(
        "top.json",
        r#"{"tool":"t","version":"v","tool":"u","run":{},"results":[]}"#,
    );
    refused(
        exe,
        &[&top],
        format!(
            "vl_jsoncheck: {}: invalid JSON: duplicate key \"tool\" in the top-level object at line 1 column 32",
            top.display()
        )
    );
    let deep = write(
        "deep.json",
        "{\"tool\":\"t\",\"version\":\"v\",\"results\":[],\n\"run\":{\"a\":{\"b\":{\"c\":1,\"c\":2}}}}",
    );
    refused(
        exe,
        &[&deep],
        format!(
            "vl_jsoncheck: {}: invalid JSON: duplicate key \"c\" in run.a.b at line 2 column 26",
            deep.display()
        ),
    );
}

#[test]
fn vl_benchchart_refuses_a_key_given_twice() {
    let exe = env!("CARGO_BIN_EXE_vl_benchchart");
    documents_exit_1_for_a_duplicate(exe);
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("strict-json-charts");
    let top = write("bench-top.json", r#"{"rows":[],"rows":[]}"#);
    refused(
        exe,
        &[&top, &out],
        format!(
            "vl_benchchart: error: {}: not valid JSON: duplicate key \"rows\" in the top-level object at line 1 column 17",
            top.display()
        )
    );
    let deep = write(
        "bench-deep.json",
        r#"{"rows":[{"cost":{"ours":{"client_cpu_s":1,"client_cpu_s":2}}}]}"#,
    );
    refused(
        exe,
        &[&deep, &out],
        format!(
            "vl_benchchart: error: {}: not valid JSON: duplicate key \"client_cpu_s\" in rows[0].cost.ours at line 1 column 57",
            deep.display()
        )
    );
    assert!(
        !out.exists(),
        "vl_benchchart made {} for a refused report",
        out.display()
    );
}
