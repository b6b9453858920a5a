//! Only the verbs crate (`verbs/`, `vl_verbs`) holds `unsafe`. Every other library and binary of
//! the workspace says `#![forbid(unsafe_code)]` at its root, so the compiler refuses any `unsafe`
//! below it; this test refuses a root without the attribute, so the rule cannot fade by omission.
//! Lesson 01 is the one exception, by design: it shows the raw rdma-sys calls once.
//!
//! The roots are those `cargo metadata` lists (libraries, binaries, examples, benches): a new
//! tool or lesson is checked as soon as its manifest names it. Integration tests (`tests/*.rs`)
//! are test code and are not checked.

#![forbid(unsafe_code)]

use std::path::Path;
use std::process::Command;

/// The package whose crate may hold `unsafe`.
const VERBS_PACKAGE: &str = "verbs-lab-verbs";

/// Roots outside it that may use `unsafe`, from the workspace root, and why. Each says
/// `#![allow(unsafe_code)]` instead.
const EXCEPTIONS: &[(&str, &str)] = &[(
    "lessons/01-devices/main.rs",
    "lesson 01 shows the raw rdma-sys calls once, on purpose (its README says why)",
)];

const FORBID: &str = "#![forbid(unsafe_code)]";
const ALLOW: &str = "#![allow(unsafe_code)]";

#[test]
fn every_crate_but_the_verbs_layer_forbids_unsafe_code() {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = Path::new(meta["workspace_root"].as_str().unwrap());

    let (mut checked, mut missing, mut excepted) = (Vec::new(), Vec::new(), Vec::new());
    let mut verbs_seen = false;
    for pkg in meta["packages"].as_array().unwrap() {
        let package = pkg["name"].as_str().unwrap();
        if package == VERBS_PACKAGE {
            verbs_seen = true;
            continue;
        }
        for target in pkg["targets"].as_array().unwrap() {
            let is_root = target["kind"].as_array().unwrap().iter().any(|k| {
                matches!(
                    k.as_str(),
                    Some("lib" | "rlib" | "bin" | "example" | "bench" | "proc-macro")
                )
            });
            if !is_root {
                continue;
            }
            let src = Path::new(target["src_path"].as_str().unwrap());
            let rel = src.strip_prefix(root).unwrap_or(src).display().to_string();
            let text = std::fs::read_to_string(src).unwrap_or_else(|e| panic!("{rel}: {e}"));
            match EXCEPTIONS.iter().find(|(path, _)| *path == rel) {
                Some(_) => {
                    assert!(
                        root_attribute(&text, ALLOW) && !root_attribute(&text, FORBID),
                        "{rel} is an exception: it says {ALLOW} (and not {FORBID})"
                    );
                    excepted.push(rel);
                }
                None if root_attribute(&text, FORBID) => checked.push(rel),
                None => missing.push(format!("{rel} ({package})")),
            }
        }
    }
    assert!(
        verbs_seen,
        "no package {VERBS_PACKAGE} in the workspace: update this test"
    );
    assert!(
        missing.is_empty(),
        "only {VERBS_PACKAGE} may hold unsafe code; these crate roots lack {FORBID} \
         (put it after the crate's //! doc comment):\n  {}",
        missing.join("\n  ")
    );
    for (path, why) in EXCEPTIONS {
        assert!(
            excepted.iter().any(|e| e == path),
            "the exception {path} ({why}) is no crate root any more: remove it"
        );
    }
    // The lib and bins of verbs-lab, perftest's lib and tools, the lessons' lib and lessons.
    assert!(
        checked.len() > 30,
        "only {} roots found: {checked:?}",
        checked.len()
    );
}

/// Whether `attr` stands on a line of its own among the crate's leading inner attributes (before
/// its first item; comments and blank lines between them are skipped).
fn root_attribute(text: &str, attr: &str) -> bool {
    text.lines()
        .map(str::trim)
        .take_while(|l| l.is_empty() || l.starts_with("//") || l.starts_with("#!["))
        .any(|l| l == attr)
}

#[test]
fn an_attribute_counts_only_at_the_root() {
    let ok = "//! A tool.\n\n#![forbid(unsafe_code)]\n\nuse std::io;\n";
    assert!(root_attribute(ok, FORBID));
    let commented = "//! A tool.\n// #![forbid(unsafe_code)]\nfn main() {}\n";
    assert!(!root_attribute(commented, FORBID));
    let late = "//! A tool.\nuse std::io;\n#![forbid(unsafe_code)]\n";
    assert!(!root_attribute(late, FORBID));
}
