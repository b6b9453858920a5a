//! `vl_reduce_kernels` as its `--help` promises it: the two header lines (the buffers, then the
//! memory pass `xor` and the copy beside it), the column line and one row per type × operator
//! in the kernels' order, each a positive rate and its share of the xor pass; a bad command line
//! refused with status 2 naming what is accepted, nothing measured; a closed stdout (`| head`)
//! ends the run quietly with 0, an unwritable one with 1. Tiny buffers and one round: what is
//! checked is the table, not the speeds.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Output, Stdio};

use vl_coll::kernels::{DataType, RedOp};

const BIN: &str = env!("CARGO_BIN_EXE_vl_reduce_kernels");

fn run(args: &[&str]) -> Output {
    run_to(args, Stdio::piped())
}

/// The tool run with `args`, its stdout going to `stdout`.
fn run_to(args: &[&str], stdout: Stdio) -> Output {
    Command::new(BIN)
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("{BIN} starts: {e}"))
}

/// A positive, finite number of GB/s.
fn rate(text: &str, what: &str) -> f64 {
    let v: f64 = text
        .parse()
        .unwrap_or_else(|e| panic!("{what}: '{text}' is not a number: {e}"));
    assert!(
        v.is_finite() && v > 0.0,
        "{what}: {v} is not a positive rate"
    );
    v
}

/// The rate in `line` between `after` and " GB/s".
fn rate_after(line: &str, after: &str) -> f64 {
    let at = line
        .find(after)
        .unwrap_or_else(|| panic!("no '{after}' in '{line}'"));
    let rest = &line[at + after.len()..];
    let end = rest
        .find(" GB/s")
        .unwrap_or_else(|| panic!("no GB/s in '{line}'"));
    rate(&rest[..end], after)
}

/// The table of a successful run: the xor pass's rate, and each row's (type, op, GB/s, % of
/// xor), after checking the header lines for `bytes` per buffer and `rounds`.
fn table(out: &Output, bytes: usize, rounds: u32) -> (f64, Vec<(String, String, f64, f64)>) {
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(
            format!("# {bytes} bytes per buffer, median of {rounds} round(s), one thread").as_str()
        )
    );
    let pass = lines.next().expect("the memory-pass line");
    assert!(
        pass.starts_with("# xor (dst ^= src, 64-bit words: the kernels' reads and writes): "),
        "{pass}"
    );
    let xor = rate_after(pass, "reads and writes): ");
    rate_after(pass, "copy (dst = src): ");
    let columns: Vec<&str> = lines
        .next()
        .expect("the column line")
        .split_whitespace()
        .collect();
    assert_eq!(columns, ["type", "op", "GB/s", "of", "xor"]);
    let rows = lines
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "'{l}'");
            let share: f64 = f[3]
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("'{l}': no % of xor"));
            assert!(share.is_finite() && share >= 0.0, "'{l}'");
            (f[0].to_string(), f[1].to_string(), rate(f[2], l), share)
        })
        .collect();
    (xor, rows)
}

#[test]
fn every_type_and_operator_has_a_row_beside_the_memory_pass() {
    let (xor, rows) = table(&run(&["-s", "64K", "-r", "1"]), 65536, 1);
    let want: Vec<(String, String)> = DataType::ALL
        .iter()
        .flat_map(|t| {
            RedOp::ALL
                .iter()
                .map(|o| (t.name().to_string(), o.name().to_string()))
        })
        .collect();
    let got: Vec<(String, String)> = rows.iter().map(|r| (r.0.clone(), r.1.clone())).collect();
    assert_eq!(
        got, want,
        "one row per type x operator, in the kernels' order"
    );
    for (t, o, gbs, share) in &rows {
        // The share is the row's rate over the xor line's: from the rates as printed (two
        // decimals each), within their rounding and the share's (a whole percent).
        let expect = 100.0 * gbs / xor;
        assert!(
            (share - expect).abs() <= 0.51 + (0.5 + 0.005 * expect) / xor,
            "{t} {o}: {gbs} GB/s is {expect:.1} % of {xor}, printed {share} %"
        );
    }
}

#[test]
fn one_type_and_operator_and_a_size_rounded_to_whole_words() {
    let (_, rows) = table(
        &run(&["-d", "bfloat16", "-o", "max", "-s", "4100", "-r", "3"]),
        4096,
        3,
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].0.as_str(), rows[0].1.as_str()),
        ("bfloat16", "max")
    );
    // -d all with one operator: a row per type.
    let (_, rows) = table(&run(&["-o", "avg", "-s", "8", "-r", "1"]), 8, 1);
    assert_eq!(rows.len(), DataType::ALL.len());
    assert!(rows.iter().all(|r| r.1 == "avg"));
}

/// `args` are refused: status 2, one `vl_reduce_kernels: error: ` line first with `reason`,
/// nothing on stdout.
fn refused(args: &[&str], reason: &str) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(
        err.starts_with("vl_reduce_kernels: error: "),
        "{args:?}: {err}"
    );
    assert!(err.contains(reason), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}: something was measured");
}

#[test]
fn a_bad_command_line_is_refused_naming_what_is_accepted() {
    refused(
        &["-d", "x"],
        "-d x: unknown data type 'x': use float, double, int32, int64, uint8, int8, uint32, \
         uint64, half or bfloat16, or all",
    );
    refused(
        &["-o", "x"],
        "-o x: unknown reduction 'x': use sum, prod, min, max or avg, or all",
    );
    for s in ["4", "0", "5G"] {
        refused(&["-s", s], "give 8 bytes to 4 GiB per buffer");
    }
    refused(&["-s", "lots"], "'lots' is not a size in bytes");
    refused(&["-r", "0"], "--rounds 0: give 1 to 1000");
    refused(&["-r", "1001"], "--rounds 1001: give 1 to 1000");
    refused(&["--threads", "2"], "unexpected argument '--threads'");
}

/// `| head -n 2`: the reader takes the two header lines and goes; the tool ends quietly with 0.
#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    // Deterministic: the pipe has no reader before the tool writes its first line.
    let (read, write) = nix::unistd::pipe().expect("a pipe");
    drop(read);
    let out = run_to(&["-s", "64K", "-r", "1"], Stdio::from(write));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");

    // As a shell pipeline runs it: a real `head -n 2` reading the tool's stdout.
    let mut tool = Command::new(BIN)
        .args(["-s", "1M", "-r", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let head = Command::new("head")
        .args(["-n", "2"])
        .stdin(Stdio::from(tool.stdout.take().unwrap()))
        .output()
        .expect("head runs");
    let mut err = String::new();
    tool.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = tool.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
    let shown: Vec<String> = BufReader::new(&head.stdout[..])
        .lines()
        .map(Result::unwrap)
        .collect();
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(shown[1].starts_with("# xor "), "{shown:?}");
}

#[test]
fn an_unwritable_stdout_is_status_1_saying_why() {
    let full = std::fs::File::options().write(true).open("/dev/full");
    let out = run_to(&["-d", "float", "-s", "8", "-r", "1"], full.unwrap().into());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("vl_reduce_kernels: error: cannot write to stdout: "),
        "{err}"
    );
}
