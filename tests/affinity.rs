//! Host tests of `verbs_lab::affinity`: the CPU-list parser, the NIC-local choice from a fake
//! sysfs tree, and pinning on this machine.

use std::fs;
use std::path::PathBuf;

use verbs_lab::affinity::{
    allowed_cpus, choose_cpu_in, pin_current_thread, CpuChoice, CpuList, MAX_CPUS,
};

fn list(s: &str) -> CpuList {
    s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

#[test]
fn parses_good_lists() {
    assert_eq!(list("0-3,8,10-11").cpus(), &[0, 1, 2, 3, 8, 10, 11]);
    assert_eq!(list("7").cpus(), &[7]);
    assert_eq!(
        list("0-3,8-11\n").cpus(),
        &[0, 1, 2, 3, 8, 9, 10, 11],
        "sysfs newline"
    );
    assert_eq!(list(" 5 , 1-2 ").cpus(), &[1, 2, 5], "spaces, unsorted");
    assert_eq!(list("3,3,1-3,2").cpus(), &[1, 2, 3], "deduplicated");
    assert_eq!(list("4-4").cpus(), &[4]);
    assert_eq!(list(&format!("0-{}", MAX_CPUS - 1)).len(), MAX_CPUS);
    let l = list("0-3,8,10-11");
    assert!(l.contains(8) && !l.contains(9));
    // Display gives the compact form back, and it parses to the same list.
    for s in ["0-3,8,10-11", "1", "0-1", "0,2,4", "5-9,100"] {
        assert_eq!(list(s).to_string(), s);
    }
    assert_eq!(list("3,2,1,0,9").to_string(), "0-3,9");
}

#[test]
fn refuses_bad_lists_and_says_why() {
    let err = |s: &str| s.parse::<CpuList>().expect_err(s);
    assert!(err("3-1").contains("backwards"), "{}", err("3-1"));
    assert!(err("").contains("empty"));
    assert!(err("  \n").contains("empty"));
    assert!(err("a").contains("'a'"), "{}", err("a"));
    assert!(err("1,,2").contains("not a CPU number"));
    assert!(err("1-").contains("not a CPU number"));
    assert!(err("-1").contains("not a CPU number"));
    assert!(err("1-2-3").contains("not a CPU number"));
    assert!(
        err("0-4000000000").contains("4096"),
        "{}",
        err("0-4000000000")
    );
    assert!(err(&MAX_CPUS.to_string()).contains("beyond"));
    assert!(err("99999999999999999999999").contains("not a CPU number"));
}

/// A fake sysfs tree under the temp directory, removed on drop.
struct FakeSysfs(PathBuf);

impl FakeSysfs {
    fn new(name: &str) -> FakeSysfs {
        let dir = std::env::temp_dir().join(format!("vl-affinity-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("class/infiniband/mlx5_0/device")).unwrap();
        FakeSysfs(dir)
    }
    fn write(&self, rel: &str, text: &str) -> &Self {
        let p = self.0.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
        self
    }
}

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

const DEV: &str = "class/infiniband/mlx5_0/device";

#[test]
fn nic_local_from_local_cpulist() {
    let fs = FakeSysfs::new("local");
    fs.write(&format!("{DEV}/local_cpulist"), "4-7\n")
        .write(&format!("{DEV}/numa_node"), "0\n")
        .write("devices/system/node/node0/cpulist", "0-3\n");
    let all = list("0-15");
    let c = choose_cpu_in(&fs.0, "mlx5_0", None, &all, 0).unwrap();
    match &c {
        CpuChoice::Pin { cpu: 4, why } => {
            assert!(
                why.contains("NIC-local") && why.contains("local_cpulist 4-7"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.clone().into_option().map(|(c, _)| c), Some(4));
    // The index picks the n-th candidate (one process per core with --procs).
    let third = choose_cpu_in(&fs.0, "mlx5_0", None, &all, 2).unwrap();
    assert_eq!(third.into_option().unwrap().0, 6);
    // More processes than local cores: wrap around, and say the core is shared.
    let fifth = choose_cpu_in(&fs.0, "mlx5_0", None, &all, 4).unwrap();
    let (cpu, why) = fifth.into_option().unwrap();
    assert_eq!(cpu, 4);
    assert!(why.contains("shared"), "{why}");
}

#[test]
fn nic_local_from_numa_node() {
    let fs = FakeSysfs::new("numa");
    fs.write(&format!("{DEV}/numa_node"), "1\n")
        .write("devices/system/node/node0/cpulist", "0-3\n")
        .write("devices/system/node/node1/cpulist", "8-11\n");
    let c = choose_cpu_in(&fs.0, "mlx5_0", None, &list("0-15"), 0).unwrap();
    match c {
        CpuChoice::Pin { cpu: 8, why } => {
            assert!(why.contains("NUMA node 1") && why.contains("8-11"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_locality_means_no_pinning_with_a_reason() {
    let fs = FakeSysfs::new("none");
    // rxe: numa_node -1, no local_cpulist.
    fs.write(&format!("{DEV}/numa_node"), "-1\n");
    let c = choose_cpu_in(&fs.0, "mlx5_0", None, &list("0-3"), 0).unwrap();
    match &c {
        CpuChoice::DontPin { why } => {
            assert!(
                why.contains("mlx5_0") && why.contains("numa_node -1"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.clone().into_option(), None);
    assert!(!c.why().is_empty());
    // No device directory at all.
    let c = choose_cpu_in(&fs.0, "rxe7", None, &list("0-3"), 0).unwrap();
    assert!(
        matches!(&c, CpuChoice::DontPin { why } if why.contains("rxe7")),
        "{c:?}"
    );
}

#[test]
fn nic_local_is_intersected_with_the_allowed_cpus() {
    let fs = FakeSysfs::new("allowed");
    fs.write(&format!("{DEV}/local_cpulist"), "0-7\n");
    // taskset -c 6-9: only 6 and 7 are both local and allowed.
    let c = choose_cpu_in(&fs.0, "mlx5_0", None, &list("6-9"), 0).unwrap();
    let (cpu, why) = c.into_option().unwrap();
    assert_eq!(cpu, 6);
    assert!(why.contains("allowed 6-7"), "{why}");
    let c = choose_cpu_in(&fs.0, "mlx5_0", None, &list("6-9"), 1).unwrap();
    assert_eq!(c.into_option().unwrap().0, 7);
    // Local CPUs all outside the allowed set: don't pin, and name both sets.
    let c = choose_cpu_in(&fs.0, "mlx5_0", None, &list("12-15"), 0).unwrap();
    match c {
        CpuChoice::DontPin { why } => {
            assert!(why.contains("0-7") && why.contains("12-15"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_requested_list_wins_over_sysfs() {
    let fs = FakeSysfs::new("requested");
    fs.write(&format!("{DEV}/local_cpulist"), "0-3\n");
    let req = list("10-11");
    let c = choose_cpu_in(&fs.0, "mlx5_0", Some(&req), &list("0-15"), 0).unwrap();
    let (cpu, why) = c.into_option().unwrap();
    assert_eq!(cpu, 10);
    assert!(why.contains("requested") && why.contains("10-11"), "{why}");
    // The first *allowed* CPU of the request.
    let c = choose_cpu_in(&fs.0, "mlx5_0", Some(&list("2-5")), &list("4-15"), 0).unwrap();
    assert_eq!(c.into_option().unwrap().0, 4);
    // None of it allowed: an error naming both lists.
    let e = choose_cpu_in(&fs.0, "mlx5_0", Some(&req), &list("0-3"), 0).unwrap_err();
    assert!(e.contains("10-11") && e.contains("0-3"), "{e}");
}

#[test]
fn pins_to_an_allowed_cpu_and_explains_a_refusal() {
    let allowed = allowed_cpus().expect("sched_getaffinity");
    assert!(!allowed.is_empty());
    let cpu = *allowed.cpus().last().unwrap();
    // Pin this test's thread only; other tests run on their own threads.
    std::thread::spawn(move || {
        pin_current_thread(cpu).unwrap();
        assert_eq!(allowed_cpus().unwrap().cpus(), &[cpu]);
        assert_eq!(nix::sched::sched_getcpu().unwrap(), cpu);
    })
    .join()
    .unwrap();

    // A CPU the mask cannot even name, then one that is (almost surely) not allowed.
    let e = pin_current_thread(1 << 20).unwrap_err();
    assert!(
        e.contains("CPU 1048576") && e.contains("allowed CPUs are"),
        "{e}"
    );
    let outside = (0..1024).find(|c| !allowed.contains(*c)).unwrap();
    let e = std::thread::spawn(move || pin_current_thread(outside).unwrap_err())
        .join()
        .unwrap();
    assert!(
        e.contains(&format!("CPU {outside}")) && e.contains(&allowed.to_string()),
        "{e}"
    );
}
