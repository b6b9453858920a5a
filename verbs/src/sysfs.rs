//! Reading the RDMA parts of sysfs: GID attributes, netdevs, NUMA nodes, local CPUs, and the
//! ports' counters ([`PortCounters`]: a snapshot, and what changed between two).
//!
//! The machine's root honours `SYSFS_PATH`, the same variable libibverbs uses, so that a run
//! can point both at a fake tree; within one process, a [`Sysfs`] reads under any root.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The sysfs root: `$SYSFS_PATH` if set and non-empty, else `/sys`.
pub fn root() -> PathBuf {
    match std::env::var_os("SYSFS_PATH") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("/sys"),
    }
}

/// The RDMA parts of one sysfs tree: the machine's ([`Sysfs::system`], under [`root`]) or any
/// other ([`Sysfs::at`]: a test's fake tree, without setting a process-wide variable). The free
/// functions of this module read the machine's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    /// The tree under `root`.
    pub fn at(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into() }
    }

    /// The machine's tree, under [`root`].
    pub fn system() -> Sysfs {
        Sysfs::at(root())
    }

    /// `<root>/class/infiniband/<dev>`.
    pub fn device_dir(&self, dev: &str) -> PathBuf {
        self.root.join("class/infiniband").join(dev)
    }

    /// The GID type string of a GID index ("RoCE v2", "IB/RoCE v1"), if sysfs has it.
    pub fn gid_type(&self, dev: &str, port: u8, index: u32) -> Option<String> {
        let path = format!("ports/{port}/gid_attrs/types/{index}");
        read_nonempty(&self.device_dir(dev).join(path))
    }

    /// The network device behind a GID index (RoCE only), if sysfs has it.
    pub fn gid_netdev(&self, dev: &str, port: u8, index: u32) -> Option<String> {
        let path = format!("ports/{port}/gid_attrs/ndevs/{index}");
        read_nonempty(&self.device_dir(dev).join(path))
    }

    /// The text of the device's `device/NAME` (its PCI function's attribute), trimmed; empty
    /// when the file is; `None` when there is no such file.
    pub fn device_attr(&self, dev: &str, name: &str) -> Option<String> {
        read_text(&self.device_dir(dev).join("device").join(name))
    }

    /// The NUMA node of the device's PCI function; `None` when unknown (-1, or a virtual device).
    pub fn numa_node(&self, dev: &str) -> Option<u32> {
        let s = self.device_attr(dev, "numa_node")?;
        s.parse::<i64>().ok().filter(|n| *n >= 0).map(|n| n as u32)
    }

    /// The CPU list local to the device (`device/local_cpulist`, e.g. "0-3,8-11").
    pub fn local_cpulist(&self, dev: &str) -> Option<String> {
        self.device_attr(dev, "local_cpulist")
            .filter(|s| !s.is_empty())
    }

    /// The CPU list of NUMA node `node` (`devices/system/node/nodeN/cpulist`), trimmed.
    pub fn node_cpulist(&self, node: u32) -> Option<String> {
        read_text(
            &self
                .root
                .join(format!("devices/system/node/node{node}/cpulist")),
        )
    }

    /// The netdevs of a device's port, from `ports/N/gid_attrs/ndevs/*` (first non-empty wins).
    pub fn port_netdev(&self, dev: &str, port: u8) -> Option<String> {
        let dir = self
            .device_dir(dev)
            .join(format!("ports/{port}/gid_attrs/ndevs"));
        let mut entries: Vec<_> = fs::read_dir(dir).ok()?.flatten().collect();
        entries.sort_by_key(|e| {
            e.file_name()
                .to_string_lossy()
                .parse::<u32>()
                .unwrap_or(u32::MAX)
        });
        entries.into_iter().find_map(|e| read_nonempty(&e.path()))
    }

    /// Every counter of `dev` port `port` now (see [`PortCounters`]; none when sysfs has no
    /// such directory; a file the driver cannot read right now, EINVAL on some, is left out).
    /// A few dozen sysfs reads: keep it out of timed loops.
    pub fn port_counters(&self, dev: &str, port: u8) -> PortCounters {
        let port_dir = self.device_dir(dev).join(format!("ports/{port}"));
        let mut values = Vec::new();
        let mut lifespan = None;
        for dir in ["counters", "hw_counters"] {
            let Ok(entries) = fs::read_dir(port_dir.join(dir)) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(v) = read_text(&e.path()).and_then(|s| s.parse::<u64>().ok()) else {
                    continue;
                };
                if dir == "hw_counters" && name == "lifespan" {
                    lifespan = Some(Duration::from_millis(v.min(MAX_LIFESPAN_MS)));
                } else {
                    values.push((format!("{dir}/{name}"), v));
                }
            }
        }
        values.sort();
        PortCounters {
            sys: self.clone(),
            dev: dev.to_string(),
            port,
            at: Instant::now(),
            lifespan,
            values,
        }
    }
}

fn read_text(path: &Path) -> Option<String> {
    Some(fs::read_to_string(path).ok()?.trim().to_string())
}

fn read_nonempty(path: &Path) -> Option<String> {
    read_text(path).filter(|s| !s.is_empty())
}

/// [`Sysfs::device_dir`] of the machine's tree.
pub fn device_dir(dev: &str) -> PathBuf {
    Sysfs::system().device_dir(dev)
}

/// [`Sysfs::gid_type`] of the machine's tree.
pub fn gid_type(dev: &str, port: u8, index: u32) -> Option<String> {
    Sysfs::system().gid_type(dev, port, index)
}

/// [`Sysfs::gid_netdev`] of the machine's tree.
pub fn gid_netdev(dev: &str, port: u8, index: u32) -> Option<String> {
    Sysfs::system().gid_netdev(dev, port, index)
}

/// [`Sysfs::numa_node`] of the machine's tree.
pub fn numa_node(dev: &str) -> Option<u32> {
    Sysfs::system().numa_node(dev)
}

/// [`Sysfs::local_cpulist`] of the machine's tree.
pub fn local_cpulist(dev: &str) -> Option<String> {
    Sysfs::system().local_cpulist(dev)
}

/// Every counter of a port at one moment: the files of `ports/N/counters/` and
/// `ports/N/hw_counters/` (rxe has only the latter), named with their directory as perftest's
/// `-W` spells them (`hw_counters/rcvd_pkts`), sorted by name.
///
/// The kernel serves `hw_counters` from a cache that it refreshes at most every `lifespan` ms
/// (`hw_counters/lifespan`, 10 by default, a setting rather than a counter: left out of the
/// values): a read within that time of the last refresh — by any process — returns the old
/// values. [`PortCounters::read_again`] waits that out, so what it reads includes everything the
/// port counted before it was called.
#[derive(Debug, Clone)]
pub struct PortCounters {
    sys: Sysfs,
    dev: String,
    port: u8,
    at: Instant,
    /// The hw_counters cache's lifespan; `None` when the port has no `hw_counters/lifespan`.
    lifespan: Option<Duration>,
    values: Vec<(String, u64)>,
}

/// The longest `lifespan` the kernel accepts (it refuses 10 s and more): bounds the wait.
const MAX_LIFESPAN_MS: u64 = 10_000;

impl PortCounters {
    /// Reads every counter of `dev` port `port` of the machine now: [`Sysfs::port_counters`].
    pub fn snapshot(dev: &str, port: u8) -> PortCounters {
        Sysfs::system().port_counters(dev, port)
    }

    /// A snapshot of the machine's `dev` port `port` from values read elsewhere (names as in
    /// [`PortCounters::values`]), taken now.
    pub fn from_values(dev: &str, port: u8, values: Vec<(String, u64)>) -> PortCounters {
        let mut values = values;
        values.sort();
        PortCounters {
            sys: Sysfs::system(),
            dev: dev.to_string(),
            port,
            at: Instant::now(),
            lifespan: None,
            values,
        }
    }

    /// A new snapshot of the same port that includes everything counted before this call: when
    /// the port has a `hw_counters` cache, it first waits its `lifespan` and one more 10 ms (a
    /// jiffy at the slowest kernel tick), so the kernel refreshes the values for this read.
    pub fn read_again(&self) -> PortCounters {
        if let Some(life) = self.lifespan {
            std::thread::sleep(life + Duration::from_millis(10));
        }
        self.sys.port_counters(&self.dev, self.port)
    }

    /// The device's name.
    pub fn dev(&self) -> &str {
        &self.dev
    }

    /// The port's number.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// When the values were read.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// The counters, `(dir/name, value)`, sorted by name.
    pub fn values(&self) -> &[(String, u64)] {
        &self.values
    }

    /// The value of `name`: `counters/X` or `hw_counters/X` exactly, or a bare `X` in either
    /// (`counters/` first).
    pub fn get(&self, name: &str) -> Option<u64> {
        let find = |f: &dyn Fn(&str) -> bool| self.values.iter().find(|(k, _)| f(k));
        find(&|k| k == name)
            .or_else(|| find(&|k| k.rsplit('/').next() == Some(name)))
            .map(|(_, v)| *v)
    }

    /// How much `name` (as [`PortCounters::get`]) rose from this snapshot to `later`; `None`
    /// when either lacks it. A counter that went down (reset) rose by 0.
    pub fn increase(&self, later: &PortCounters, name: &str) -> Option<u64> {
        Some(later.get(name)?.saturating_sub(self.get(name)?))
    }

    /// [`PortCounters::increase`] of every counter in both snapshots, by name, zeros included.
    pub fn changes_to(&self, later: &PortCounters) -> Vec<(String, u64)> {
        later
            .values
            .iter()
            .filter_map(|(k, _)| Some((k.clone(), self.increase(later, k)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_fake_tree() {
        let dir = std::env::temp_dir().join(format!("vl-sysfs-{}", std::process::id()));
        let port = dir.join("class/infiniband/rxe9/ports/1");
        fs::create_dir_all(port.join("gid_attrs/types")).unwrap();
        fs::create_dir_all(port.join("gid_attrs/ndevs")).unwrap();
        fs::create_dir_all(port.join("hw_counters")).unwrap();
        fs::create_dir_all(dir.join("class/infiniband/rxe9/device")).unwrap();
        fs::write(port.join("gid_attrs/types/1"), "RoCE v2\n").unwrap();
        fs::write(port.join("gid_attrs/ndevs/1"), "veth0\n").unwrap();
        fs::write(port.join("gid_attrs/ndevs/0"), "\n").unwrap();
        fs::write(port.join("hw_counters/sent_pkts"), "1609\n").unwrap();
        fs::write(dir.join("class/infiniband/rxe9/device/numa_node"), "-1\n").unwrap();
        fs::write(dir.join("class/infiniband/rxe9/device/local_cpulist"), "\n").unwrap();
        fs::create_dir_all(dir.join("devices/system/node/node1")).unwrap();
        fs::write(dir.join("devices/system/node/node1/cpulist"), "4-7\n").unwrap();
        // A tree of its own, not the machine's: no process-wide SYSFS_PATH.
        let sys = Sysfs::at(&dir);
        assert_eq!(sys.gid_type("rxe9", 1, 1).as_deref(), Some("RoCE v2"));
        assert_eq!(sys.gid_netdev("rxe9", 1, 1).as_deref(), Some("veth0"));
        assert_eq!(sys.gid_netdev("rxe9", 1, 0), None);
        assert_eq!(sys.port_netdev("rxe9", 1).as_deref(), Some("veth0"));
        assert_eq!(sys.numa_node("rxe9"), None);
        assert_eq!(sys.device_attr("rxe9", "numa_node").as_deref(), Some("-1"));
        assert_eq!(sys.local_cpulist("rxe9"), None, "an empty list is none");
        assert_eq!(
            sys.device_attr("rxe9", "local_cpulist").as_deref(),
            Some("")
        );
        assert_eq!(sys.node_cpulist(1).as_deref(), Some("4-7"));
        assert_eq!(sys.node_cpulist(0), None);

        fs::write(port.join("hw_counters/lifespan"), "40\n").unwrap();
        let c = sys.port_counters("rxe9", 1);
        assert_eq!(c.get("sent_pkts"), Some(1609));
        // lifespan is the cache's setting, not a counter; reading again (the same tree) waits
        // it out.
        assert_eq!(c.values(), [("hw_counters/sent_pkts".to_string(), 1609)]);
        fs::write(port.join("hw_counters/sent_pkts"), "1700\n").unwrap();
        let t = Instant::now();
        let later = c.read_again();
        assert!(
            t.elapsed() >= Duration::from_millis(50),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(c.changes_to(&later), [("hw_counters/sent_pkts".into(), 91)]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn changes_by_name_never_below_zero() {
        let v = |pairs: &[(&str, u64)]| pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let a = PortCounters::from_values("rxe0", 1, v(&[("hw_counters/b", 9), ("counters/a", 5)]));
        let b = PortCounters::from_values("rxe0", 1, v(&[("counters/a", 7), ("hw_counters/b", 2)]));
        assert_eq!(
            a.changes_to(&b),
            [
                ("counters/a".to_string(), 2),
                ("hw_counters/b".to_string(), 0)
            ]
        );
        assert_eq!(a.increase(&b, "a"), Some(2), "a bare name");
        assert_eq!(a.increase(&b, "c"), None);
    }
}
