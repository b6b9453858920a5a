//! Reading the RDMA parts of sysfs: GID attributes, netdevs, NUMA nodes, local CPUs, and the
//! ports' counters ([`PortCounters`]: a snapshot, and what changed between two).
//!
//! The root honours `SYSFS_PATH`, the same variable libibverbs uses, so a test can point both
//! at a fake tree.

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The sysfs root: `$SYSFS_PATH` if set and non-empty, else `/sys`.
pub fn root() -> PathBuf {
    match std::env::var_os("SYSFS_PATH") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from("/sys"),
    }
}

/// `/sys/class/infiniband/<dev>`.
pub fn device_dir(dev: &str) -> PathBuf {
    root().join("class/infiniband").join(dev)
}

fn read_trimmed(path: PathBuf) -> Option<String> {
    let s = fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The GID type string of a GID index ("RoCE v2", "IB/RoCE v1"), if sysfs has it.
pub fn gid_type(dev: &str, port: u8, index: u32) -> Option<String> {
    read_trimmed(device_dir(dev).join(format!("ports/{port}/gid_attrs/types/{index}")))
}

/// The network device behind a GID index (RoCE only), if sysfs has it.
pub fn gid_netdev(dev: &str, port: u8, index: u32) -> Option<String> {
    read_trimmed(device_dir(dev).join(format!("ports/{port}/gid_attrs/ndevs/{index}")))
}

/// The NUMA node of the device's PCI function; `None` when unknown (-1, or a virtual device).
pub fn numa_node(dev: &str) -> Option<u32> {
    let s = read_trimmed(device_dir(dev).join("device/numa_node"))?;
    s.parse::<i64>().ok().filter(|n| *n >= 0).map(|n| n as u32)
}

/// The CPU list local to the device (`device/local_cpulist`, e.g. "0-3,8-11").
pub fn local_cpulist(dev: &str) -> Option<String> {
    read_trimmed(device_dir(dev).join("device/local_cpulist"))
}

/// The netdevs of a device's port, from `ports/N/gid_attrs/ndevs/*` (first non-empty wins).
pub fn port_netdev(dev: &str, port: u8) -> Option<String> {
    let dir = device_dir(dev).join(format!("ports/{port}/gid_attrs/ndevs"));
    let mut entries: Vec<_> = fs::read_dir(dir).ok()?.flatten().collect();
    entries.sort_by_key(|e| {
        e.file_name()
            .to_string_lossy()
            .parse::<u32>()
            .unwrap_or(u32::MAX)
    });
    entries.into_iter().find_map(|e| read_trimmed(e.path()))
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
    /// Reads every counter of `dev` port `port` now (none when sysfs has no such directory; a
    /// file the driver cannot read right now, EINVAL on some, is left out). A few dozen sysfs
    /// reads: keep it out of timed loops.
    pub fn snapshot(dev: &str, port: u8) -> PortCounters {
        let port_dir = device_dir(dev).join(format!("ports/{port}"));
        let mut values = Vec::new();
        let mut lifespan = None;
        for dir in ["counters", "hw_counters"] {
            let Ok(entries) = fs::read_dir(port_dir.join(dir)) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(v) = read_trimmed(e.path()).and_then(|s| s.parse::<u64>().ok()) else {
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
            dev: dev.to_string(),
            port,
            at: Instant::now(),
            lifespan,
            values,
        }
    }

    /// A snapshot of the same port from values read elsewhere (names as in
    /// [`PortCounters::values`]), taken now.
    pub fn from_values(dev: &str, port: u8, values: Vec<(String, u64)>) -> PortCounters {
        let mut values = values;
        values.sort();
        PortCounters {
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
        PortCounters::snapshot(&self.dev, self.port)
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
        // SAFETY of the test: env is process-global; this is the only test touching SYSFS_PATH.
        std::env::set_var("SYSFS_PATH", &dir);
        assert_eq!(gid_type("rxe9", 1, 1).as_deref(), Some("RoCE v2"));
        assert_eq!(gid_netdev("rxe9", 1, 1).as_deref(), Some("veth0"));
        assert_eq!(gid_netdev("rxe9", 1, 0), None);
        assert_eq!(port_netdev("rxe9", 1).as_deref(), Some("veth0"));
        fs::write(port.join("hw_counters/lifespan"), "40\n").unwrap();
        let c = PortCounters::snapshot("rxe9", 1);
        assert_eq!(c.get("sent_pkts"), Some(1609));
        // lifespan is the cache's setting, not a counter; reading again waits it out.
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
        assert_eq!(numa_node("rxe9"), None);
        std::env::remove_var("SYSFS_PATH");
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
