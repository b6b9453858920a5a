//! Where a benchmark runs: CPU lists, the CPUs near a NIC, and pinning.
//!
//! A benchmark thread that migrates between cores, or runs on the far socket from the NIC, measures
//! the scheduler and the interconnect as much as the RDMA path. perftest leaves pinning to
//! `taskset`; the `vl_*` tools pin themselves to a NIC-local core unless told otherwise, and
//! say which core and why in their header.
//!
//! CPU lists use the kernel's notation (`cpuset(7)`, sysfs `local_cpulist`): `0-3,8,10-11`.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

use crate::sysfs::Sysfs;

/// The highest CPU count a list may name: CPU numbers run from 0 to `MAX_CPUS - 1`. Bounds the
/// memory a typo such as `0-4000000000` could cost.
pub const MAX_CPUS: usize = 4096;

/// A set of CPU numbers, sorted and without duplicates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// A list from any CPU numbers (sorted and deduplicated here).
    pub fn from_cpus(cpus: impl IntoIterator<Item = usize>) -> CpuList {
        let mut v: Vec<usize> = cpus.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        CpuList(v)
    }

    /// The CPUs, ascending.
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    pub fn contains(&self, cpu: usize) -> bool {
        self.0.binary_search(&cpu).is_ok()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The CPUs in both lists.
    pub fn intersect(&self, other: &CpuList) -> CpuList {
        CpuList(
            self.0
                .iter()
                .copied()
                .filter(|c| other.contains(*c))
                .collect(),
        )
    }
}

/// Parses the kernel's list notation: comma-separated CPU numbers and inclusive ranges
/// (`0-3,8,10-11`); surrounding whitespace (a sysfs file's newline) is ignored.
impl FromStr for CpuList {
    type Err = String;

    fn from_str(s: &str) -> Result<CpuList, String> {
        let text = s.trim();
        if text.is_empty() {
            return Err("empty CPU list (expected e.g. 0-3,8,10-11)".into());
        }
        let cpu = |t: &str| -> Result<usize, String> {
            let t = t.trim();
            let n: usize = t.parse().map_err(|_| {
                format!(
                    "'{t}' in CPU list '{text}' is not a CPU number (expected e.g. 0-3,8,10-11)"
                )
            })?;
            if n >= MAX_CPUS {
                return Err(format!(
                    "CPU {n} in CPU list '{text}' is beyond the {MAX_CPUS} CPUs this tool handles"
                ));
            }
            Ok(n)
        };
        let mut cpus = Vec::new();
        for item in text.split(',') {
            match item.split_once('-') {
                Some((a, b)) => {
                    let (lo, hi) = (cpu(a)?, cpu(b)?);
                    if lo > hi {
                        return Err(format!(
                            "range '{}' in CPU list '{text}' runs backwards (write {hi}-{lo})",
                            item.trim()
                        ));
                    }
                    cpus.extend(lo..=hi);
                }
                None => cpus.push(cpu(item)?),
            }
        }
        Ok(CpuList::from_cpus(cpus))
    }
}

/// The compact kernel notation: runs of two or more consecutive CPUs become ranges.
impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first = true;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

/// The CPUs this process may run on (`sched_getaffinity(2)`): what `taskset`, cgroups (cpusets)
/// or a container left us.
pub fn allowed_cpus() -> nix::Result<CpuList> {
    let set = sched_getaffinity(Pid::from_raw(0))?;
    Ok(CpuList::from_cpus(
        (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)),
    ))
}

/// Pins the calling thread to one CPU (`sched_setaffinity(2)` on thread 0 = the caller).
///
/// The error names the CPU and the CPUs that are allowed, so the user can pick another.
pub fn pin_current_thread(cpu: usize) -> Result<(), String> {
    let allowed = || match allowed_cpus() {
        Ok(list) if !list.is_empty() => format!("the allowed CPUs are {list}"),
        Ok(_) => "no CPU is allowed".to_string(),
        Err(e) => format!("the allowed CPUs are unknown ({e})"),
    };
    let mut set = CpuSet::new();
    set.set(cpu).map_err(|_| {
        format!(
            "cannot pin to CPU {cpu}: beyond the {} CPUs the affinity mask can name; {}",
            CpuSet::count(),
            allowed()
        )
    })?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| {
        format!(
            "cannot pin to CPU {cpu}: sched_setaffinity failed: {} — {} (taskset or the \
             cgroup cpuset limits this process)",
            e.desc(),
            allowed()
        )
    })
}

/// Where a benchmark process should run, and why (the why is printed in the header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuChoice {
    /// Pin to this CPU.
    Pin { cpu: usize, why: String },
    /// Leave the scheduler free.
    DontPin { why: String },
}

impl CpuChoice {
    /// The form [`choose_cpu`] returns (and `RunInfo::cpu` holds): the CPU and why, or `None`.
    pub fn into_option(self) -> Option<(usize, String)> {
        match self {
            CpuChoice::Pin { cpu, why } => Some((cpu, why)),
            CpuChoice::DontPin { .. } => None,
        }
    }

    /// Why this choice was made (pinned or not).
    pub fn why(&self) -> &str {
        match self {
            CpuChoice::Pin { why, .. } | CpuChoice::DontPin { why } => why,
        }
    }
}

/// Chooses the CPU for benchmark process number `index` (0 for a single process) on device `dev`:
///
/// 1. `requested` (a `--cpu` list): its `index`-th CPU among those this process may use; an
///    error if none of them is allowed;
/// 2. else the NIC-local CPUs from sysfs (`device/local_cpulist`, or `device/numa_node` →
///    `devices/system/node/nodeN/cpulist`) that this process may use;
/// 3. else `None`: no pinning ([`cpu_choice`] also says why).
///
/// With more processes than candidate CPUs, `index` wraps around and the reason says the CPU is
/// shared. Reads sysfs under [`crate::sysfs::root`] (`SYSFS_PATH`).
pub fn choose_cpu(
    dev: &str,
    requested: Option<&CpuList>,
    index: usize,
) -> Result<Option<(usize, String)>, String> {
    cpu_choice(dev, requested, index).map(CpuChoice::into_option)
}

/// [`choose_cpu`], keeping the reason when it decides not to pin.
pub fn cpu_choice(
    dev: &str,
    requested: Option<&CpuList>,
    index: usize,
) -> Result<CpuChoice, String> {
    let allowed =
        allowed_cpus().map_err(|e| format!("cannot read this process's CPU affinity: {e}"))?;
    choose_cpu_in(&crate::sysfs::root(), dev, requested, &allowed, index)
}

/// [`cpu_choice`] with the sysfs root and the allowed CPUs given explicitly (for tests: no
/// environment variables, no dependence on the machine).
pub fn choose_cpu_in(
    sysfs_root: &Path,
    dev: &str,
    requested: Option<&CpuList>,
    allowed: &CpuList,
    index: usize,
) -> Result<CpuChoice, String> {
    if let Some(req) = requested {
        let usable = req.intersect(allowed);
        if usable.is_empty() {
            return Err(format!(
                "none of the requested CPUs {req} may be used by this process (allowed: {})",
                show(allowed)
            ));
        }
        let why = format!("requested CPU list {req}");
        let narrowed = format!(", of which {usable} allowed");
        return Ok(pin(req, &usable, index, why, &narrowed));
    }

    let (local, source) = match nic_local_cpus(sysfs_root, dev) {
        Ok(found) => found,
        Err(why) => return Ok(CpuChoice::DontPin { why }),
    };
    let usable = local.intersect(allowed);
    if usable.is_empty() {
        return Ok(CpuChoice::DontPin {
            why: format!(
                "the NIC-local CPUs of {dev} ({source}: {local}) are outside the allowed CPUs {}",
                show(allowed)
            ),
        });
    }
    let why = format!("NIC-local: {dev} {source} {local}");
    let narrowed = format!(", allowed {usable}");
    Ok(pin(&local, &usable, index, why, &narrowed))
}

/// Pins to the `index`-th of the `usable` CPUs (those of `candidates` this process may use);
/// `why` says where the candidates came from, `narrowed` is added when fewer are usable.
fn pin(
    candidates: &CpuList,
    usable: &CpuList,
    index: usize,
    mut why: String,
    narrowed: &str,
) -> CpuChoice {
    let (cpu, shared) = pick(usable, index);
    if usable.len() < candidates.len() {
        why.push_str(narrowed);
    }
    why.push_str(&shared);
    CpuChoice::Pin { cpu, why }
}

fn show(list: &CpuList) -> String {
    if list.is_empty() {
        "none".into()
    } else {
        list.to_string()
    }
}

/// The `index`-th candidate, wrapping around; the second value notes a shared CPU.
fn pick(candidates: &CpuList, index: usize) -> (usize, String) {
    let n = candidates.len();
    let cpu = candidates.cpus()[index % n];
    let note = if index >= n {
        format!(" (shared: process {index} wraps around {n} CPUs)")
    } else {
        String::new()
    };
    (cpu, note)
}

/// The CPUs local to `dev` and where that came from, or why they are unknown.
fn nic_local_cpus(root: &Path, dev: &str) -> Result<(CpuList, String), String> {
    let sys = Sysfs::at(root);
    let local_note = match sys.device_attr(dev, "local_cpulist") {
        Some(text) if !text.is_empty() => match text.parse::<CpuList>() {
            Ok(list) => return Ok((list, "local_cpulist".into())),
            Err(e) => format!("local_cpulist unreadable ({e})"),
        },
        Some(_) => "local_cpulist empty".into(),
        None => "no local_cpulist".into(),
    };

    let numa_note = match sys.device_attr(dev, "numa_node").map(|s| s.parse::<i64>()) {
        Some(Ok(node)) if node >= 0 => {
            let cpulist = u32::try_from(node).ok().and_then(|n| sys.node_cpulist(n));
            match cpulist.map(|s| s.parse::<CpuList>()) {
                Some(Ok(list)) => return Ok((list, format!("NUMA node {node} CPUs"))),
                Some(Err(e)) => format!("NUMA node {node} cpulist unreadable ({e})"),
                None => format!("NUMA node {node} has no cpulist"),
            }
        }
        Some(Ok(_)) => "numa_node -1".into(),
        Some(Err(_)) => "numa_node unreadable".into(),
        None => "no numa_node".into(),
    };

    Err(format!(
        "sysfs gives no NIC-local CPUs for {dev} ({local_note}, {numa_note}; a \
         virtual device such as rxe has no NUMA locality)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_compact() {
        let l = CpuList::from_cpus([11, 0, 1, 2, 3, 8, 10, 3]);
        assert_eq!(l.to_string(), "0-3,8,10-11");
        assert_eq!(CpuList::default().to_string(), "");
        assert_eq!(CpuList::from_cpus([5]).to_string(), "5");
    }

    #[test]
    fn pick_wraps_and_says_so() {
        let l = CpuList::from_cpus([2, 3]);
        assert_eq!(pick(&l, 1), (3, String::new()));
        let (cpu, note) = pick(&l, 2);
        assert_eq!(cpu, 2);
        assert!(note.contains("shared"), "{note}");
    }
}
