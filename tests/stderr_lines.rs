//! `eprintln_whole!` from several processes that share one stderr: every line arrives whole.
//!
//! This is the shape of a `--procs` run or a collective, where the workers of one coordinator
//! write into one log. With `eprintln!`, whose pieces are separate `write(2)`s, the lines of
//! two workers interleaved in a CI run (guest scenario 58).

use std::fs::File;
use std::io::Read;
use std::process::{Command, Stdio};

/// Set in the children: which one they are.
const CHILD: &str = "VL_STDERR_LINES_CHILD";
const CHILDREN: usize = 4;
const LINES: usize = 2000;

#[test]
fn lines_of_processes_sharing_stderr_arrive_whole() {
    if let Ok(id) = std::env::var(CHILD) {
        // Several arguments, so that eprintln! would have written many pieces per line.
        for i in 0..LINES {
            verbs_lab::eprintln_whole!("child {id}: line {i} of {LINES}: {}", "x".repeat(i % 97));
        }
        return;
    }
    let dir = std::env::temp_dir().join(format!("vl-stderr-lines-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("stderr.log");
    let log = File::create(&path).unwrap();
    let children: Vec<_> = (0..CHILDREN)
        .map(|id| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "lines_of_processes_sharing_stderr_arrive_whole"])
                .env(CHILD, id.to_string())
                .stdout(Stdio::null())
                // One open file for all, as a shell's `2>log` gives a coordinator's workers.
                .stderr(log.try_clone().unwrap())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let mut text = String::new();
    File::open(&path)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let mut seen = vec![0usize; CHILDREN];
    for line in text.lines() {
        let whole = (|| {
            let rest = line.strip_prefix("child ")?;
            let (id, rest) = rest.split_once(": line ")?;
            let (i, rest) = rest.split_once(&format!(" of {LINES}: "))?;
            let (id, i): (usize, usize) = (id.parse().ok()?, i.parse().ok()?);
            (id < CHILDREN && rest == "x".repeat(i % 97)).then_some(id)
        })();
        match whole {
            Some(id) => seen[id] += 1,
            None => panic!("a line arrived in pieces: {line:?}"),
        }
    }
    assert_eq!(seen, vec![LINES; CHILDREN], "lines per child");
}
