//! Reading the RDMA parts of sysfs: GID attributes, netdevs, NUMA nodes and local CPUs.
//!
//! The root honours `SYSFS_PATH`, the same variable libibverbs uses, so a test can point both
//! at a fake tree.

use std::fs;
use std::path::PathBuf;

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

/// A counter of a port: `counters/NAME` or, for providers such as rxe, `hw_counters/NAME`.
pub fn port_counter(dev: &str, port: u8, name: &str) -> Option<u64> {
    let port_dir = device_dir(dev).join(format!("ports/{port}"));
    ["counters", "hw_counters"]
        .iter()
        .find_map(|d| read_trimmed(port_dir.join(d).join(name)))
        .and_then(|s| s.parse().ok())
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
        assert_eq!(port_counter("rxe9", 1, "sent_pkts"), Some(1609));
        assert_eq!(numa_node("rxe9"), None);
        std::env::remove_var("SYSFS_PATH");
        fs::remove_dir_all(&dir).unwrap();
    }
}
