//! A rank's place on its host — its local rank and how many ranks share the host — learned from
//! the rendezvous' table as NCCL learns it: every record carries a hash of its host's identity,
//! and the ranks with the same hash count each other in rank order. A local rank that the
//! launcher gave (`LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_RANK`, `SLURM_LOCALID`, `--local-rank`)
//! is the rank's own and stays so; rank 0 refuses a table in which two ranks of one host would
//! have the same local rank (they would pin one CPU and take one device).
//!
//! The host's identity is its host name and the kernel's boot id
//! (`/proc/sys/kernel/random/boot_id`), as in NCCL's `getHostHash`: containers on one machine
//! with host names of their own are hosts of their own, and two machines that share a host name
//! (clones that all say `debian`) are told apart by their boot ids.

use std::collections::BTreeSet;

use super::RankRecord;

/// Where a rank runs among the ranks of its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Its index among the ranks on its host: picks its device and CPU.
    pub local_rank: u32,
    /// How many ranks of the job run on its host.
    pub local_size: u32,
    /// How many hosts the job spans.
    pub hosts: u32,
    /// Whether the launcher gave the local rank (`false`: counted from the host hashes).
    pub given: bool,
}

/// FNV-1a, 64 bits: the same on every build and machine (std's hasher promises neither).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The hash that identifies a host: of its name and its kernel's boot id.
pub fn host_hash(host_name: &str, boot_id: &str) -> u64 {
    fnv1a(format!("{}\n{}", host_name.trim(), boot_id.trim()).as_bytes())
}

/// This machine's host name (`/proc/sys/kernel/hostname`, `localhost` if unreadable) and its
/// [`host_hash`].
pub fn this_host() -> (String, u64) {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
    };
    let name = read("/proc/sys/kernel/hostname").unwrap_or_else(|| "localhost".into());
    let boot = read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hash = host_hash(&name, &boot);
    (name, hash)
}

/// Every rank's place, index = rank: its launcher's local rank if it gave one, else its index
/// among the ranks with its host hash, in rank order.
pub fn places(table: &[RankRecord]) -> Vec<Place> {
    let hosts = table
        .iter()
        .map(|r| r.host_hash)
        .collect::<BTreeSet<_>>()
        .len() as u32;
    table
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let same = |o: &&RankRecord| o.host_hash == r.host_hash;
            let counted = table[..i].iter().filter(same).count() as u32;
            Place {
                local_rank: r.local_rank.unwrap_or(counted),
                local_size: table.iter().filter(same).count() as u32,
                hosts,
                given: r.local_rank.is_some(),
            }
        })
        .collect()
}

/// Rank 0's check of the whole table: two ranks on one host with the same local rank are
/// refused, naming both and where each local rank came from.
pub fn check_places(table: &[RankRecord]) -> Result<(), String> {
    let p = places(table);
    for (b, rb) in table.iter().enumerate() {
        let twin = table[..b]
            .iter()
            .enumerate()
            .find(|(a, ra)| ra.host_hash == rb.host_hash && p[*a].local_rank == p[b].local_rank);
        if let Some((a, ra)) = twin {
            let how = |r: &RankRecord, pl: &Place| {
                let from = if pl.given {
                    "given by its launcher"
                } else {
                    "counted from the host names"
                };
                format!("rank {}'s {from}", r.rank)
            };
            return Err(format!(
                "{} and {} run on one host with the same local rank {} ({}, {}): both would \
                 pin themselves to one CPU and take one device — give every rank of a host its \
                 own local rank (LOCAL_RANK, --local-rank; --nnodes: one launcher per host), or \
                 give none and let the rendezvous count the ranks of each host",
                ra.who(),
                rb.who(),
                p[b].local_rank,
                how(ra, &p[a]),
                how(rb, &p[b]),
            ));
        }
    }
    Ok(())
}
