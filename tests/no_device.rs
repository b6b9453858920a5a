//! `vl_devinfo` on a machine without RDMA devices: it must fail, say so, and say how to get one.
//!
//! Two ways to have no device: a kernel without RDMA (`ibv_get_device_list` returns NULL with
//! ENOSYS — this host), and an RDMA-capable kernel with no device registered (a non-NULL empty
//! list — faked by pointing libibverbs' `SYSFS_PATH` at a tree with an empty
//! `class/infiniband_verbs`, which works on any machine).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_vl_devinfo");

/// A sysfs tree in which libibverbs finds RDMA support but no device; removed on drop.
struct EmptySysfs(PathBuf);

impl EmptySysfs {
    fn new(tag: &str) -> EmptySysfs {
        let dir = std::env::temp_dir().join(format!("vl-empty-sysfs-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("class/infiniband_verbs")).unwrap();
        EmptySysfs(dir)
    }
    fn path(&self) -> &Path {
        &self.0
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
    cmd.output().expect("vl_devinfo runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a clean "no device" failure: exit status 1, nothing on stdout, one error line that
/// says there is no device, why, and how to get one.
fn assert_no_device(o: &Output, why: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "exit status; stderr: {err}");
    assert!(
        o.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(err.starts_with("vl_devinfo: error: "), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("no RDMA devices"), "{err}");
    assert!(err.contains(why), "expected '{why}' in: {err}");
    assert!(err.contains("scripts/softroce-vm"), "{err}");
    assert!(err.contains("scripts/softroce-up"), "{err}");
}

fn host_has_rdma() -> bool {
    Path::new("/sys/class/infiniband").exists()
}

#[test]
fn kernel_without_rdma_is_reported_with_the_way_out() {
    if host_has_rdma() {
        verbs_lab::eprintln_whole!("skipped: this machine has /sys/class/infiniband");
        return;
    }
    for args in [&[][..], &["--json"], &["-v", "-i", "1"]] {
        let o = run(args, None);
        assert_no_device(
            &o,
            "ibv_get_device_list failed: Function not implemented (ENOSYS)",
        );
    }
}

#[test]
fn empty_device_list_is_reported_with_the_way_out() {
    let sysfs = EmptySysfs::new("devinfo");
    for args in [&[][..], &["--json"], &["-d", "rxe0"]] {
        let o = run(args, Some(sysfs.path()));
        assert_no_device(&o, "the device list is empty");
        // Not the NULL-list message: the kernel does support RDMA here.
        assert!(!stderr(&o).contains("ENOSYS"), "{}", stderr(&o));
    }
}

#[test]
fn bad_flags_exit_2() {
    for args in [&["-i", "0"][..], &["--ib-port", "x"], &["--no-such-flag"]] {
        let o = run(args, None);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).starts_with("vl_devinfo: error: "),
            "{}",
            stderr(&o)
        );
        assert!(stderr(&o).contains("--help"), "{}", stderr(&o));
    }
}

#[test]
fn help_names_the_flags() {
    let o = run(&["--help"], None);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for flag in ["--ib-dev", "--ib-port", "--verbose", "--json"] {
        assert!(out.contains(flag), "{flag} missing from: {out}");
    }
}
