//! `lesson01_devices` without RDMA devices: the student is told there is none, why, and how to
//! get one, whether the kernel lacks RDMA (NULL list, ENOSYS — this host) or has no device
//! registered (an empty list, faked with an empty `class/infiniband_verbs` under `SYSFS_PATH`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_lesson01_devices");

/// A sysfs tree in which libibverbs finds RDMA support but no device; removed on drop.
struct EmptySysfs(PathBuf);

impl EmptySysfs {
    fn new(tag: &str) -> EmptySysfs {
        let dir = std::env::temp_dir().join(format!("vl-empty-sysfs-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("class/infiniband_verbs")).unwrap();
        EmptySysfs(dir)
    }
}

impl Drop for EmptySysfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run(args: &[&str], sysfs: Option<&Path>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args).env_remove("SYSFS_PATH");
    if let Some(p) = sysfs {
        cmd.env("SYSFS_PATH", p);
    }
    cmd.output().expect("lesson01_devices runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_no_device(o: &Output, why: &str) {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "exit status; stderr: {err}");
    assert!(err.starts_with("lesson01_devices: error: "), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("no RDMA devices"), "{err}");
    assert!(err.contains(why), "expected '{why}' in: {err}");
    assert!(err.contains("scripts/softroce-vm"), "{err}");
    assert!(err.contains("scripts/softroce-up"), "{err}");
}

#[test]
fn kernel_without_rdma_is_reported_with_the_way_out() {
    if Path::new("/sys/class/infiniband").exists() {
        verbs_lab::eprintln_whole!("skipped: this machine has /sys/class/infiniband");
        return;
    }
    let o = run(&[], None);
    assert_no_device(
        &o,
        "ibv_get_device_list returned NULL: Function not implemented",
    );
    // The narration got as far as naming the first verb, and no further.
    let out = text(&o.stdout);
    assert!(out.contains("[1] List the RDMA devices"), "{out}");
    assert!(out.contains("ibv_get_device_list(&num)"), "{out}");
    assert!(!out.contains("[2]"), "{out}");

    // --quiet: no narration at all, the same error.
    let o = run(&["--quiet"], None);
    assert_no_device(
        &o,
        "ibv_get_device_list returned NULL: Function not implemented",
    );
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
}

#[test]
fn empty_device_list_is_reported_with_the_way_out() {
    let sysfs = EmptySysfs::new("lesson01");
    for args in [&[][..], &["--quiet"], &["-d", "rxe0", "-i", "1"]] {
        let o = run(args, Some(&sysfs.0));
        assert_no_device(&o, "the device list is empty");
        assert!(!text(&o.stderr).contains("NULL"), "{}", text(&o.stderr));
    }
}

#[test]
fn bad_flags_exit_2() {
    for args in [&["-i", "0"][..], &["--bogus"]] {
        let o = run(args, None);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
    }
}
