//! The flags that start a rank and give it its place and device, written once for every tool
//! started like the collectives (the nine `vl_*_perf` and `vl_fabric_check`): each flattens
//! [`LaunchArgs`] into its own clap `Args`, so the tools take the same flags with the same help
//! and the same checks ([`LaunchArgs::node_plan`], [`LaunchArgs::rank_info`]). What a tool does
//! with its ranks (timeouts of its own, its QP settings) stays in its own flags.

use super::{check_master, NodeRanks};
use crate::env::{self, Launcher, RankFlags, RankInfo};
use verbs_lab::cli::MAX_WAIT_SECS;

/// How ranks are started, meet and find their device.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchArgs {
    /// RDMA devices, comma-separated; local ranks take them round-robin (default: the first
    /// device).
    #[arg(long = "ib-dev", value_name = "DEV,...", value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Port of the devices.
    #[arg(long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// GID index (default: the first RoCE v2 IPv4 GID).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u32>,
    /// Start N ranks on this machine (child processes); with --nnodes, N on each node
    /// (torchrun's --nproc-per-node).
    #[arg(
        long = "np",
        visible_alias = "nproc-per-node",
        alias = "nproc_per_node"
    )]
    pub np: Option<u32>,
    /// Nodes of the job, each running this launcher with the same --np and --master and its
    /// own --node-rank (torchrun's --nnodes; not its elastic MIN:MAX).
    #[arg(long = "nnodes", value_name = "N", value_parser = nnodes)]
    pub nnodes: Option<u32>,
    /// This node's number, 0..N-1 with --nnodes N; node 0 must run on the host of --master,
    /// where rank 0 listens.
    #[arg(long = "node-rank", alias = "node_rank", value_name = "K")]
    pub node_rank: Option<u32>,
    /// This process's rank (with --world-size and --master).
    #[arg(long)]
    pub rank: Option<u32>,
    /// The number of ranks (with --rank and --master).
    #[arg(long = "world-size")]
    pub world_size: Option<u32>,
    /// Rank among the ranks on this host (picks the device and CPU; default: the launcher's, else
    /// counted at the rendezvous from the ranks' host names). DeepSpeed passes --local_rank=N.
    #[arg(long = "local-rank", alias = "local_rank")]
    pub local_rank: Option<u32>,
    /// Rank 0's rendezvous address HOST:PORT (else MASTER_ADDR/MASTER_PORT).
    #[arg(long)]
    pub master: Option<String>,
    /// Set by --np for its ranks: the base name of the launcher's message queues.
    #[arg(long = "vl-coll-queues", hide = true)]
    pub local_queues: Option<String>,
    /// Seconds the rendezvous may take (1 to a day).
    #[arg(long = "bootstrap-timeout", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_SECS))]
    pub bootstrap_timeout: u64,
}

/// `--nnodes N`. torchrun's elastic form, `MIN:MAX` nodes, is refused by name: the world here
/// is fixed when the ranks meet.
fn nnodes(s: &str) -> Result<u32, String> {
    if s.contains(':') {
        return Err(format!(
            "torchrun's elastic --nnodes MIN:MAX is not offered: the world is fixed at --nnodes \
             × --np ranks when they meet; give one number of nodes, e.g. --nnodes {}",
            s.rsplit(':').next().unwrap_or_default()
        ));
    }
    s.parse::<u32>()
        .map_err(|_| "not a whole number; give the number of nodes (digits only, e.g. 2)".into())
}

impl LaunchArgs {
    /// The flags that place a rank, for [`env::from_env`].
    pub fn rank_flags(&self) -> RankFlags {
        RankFlags {
            rank: self.rank,
            world_size: self.world_size,
            local_rank: self.local_rank,
            master: self.master.clone(),
        }
    }

    /// What `--np np` asks of this launcher: its share of the job, and whether its ranks meet
    /// others over TCP at a master (`--nnodes`, torchrun's way) rather than on this machine
    /// alone. Refused, saying what to give: the flags for launching each rank yourself,
    /// `--node-rank` without `--nnodes` or the reverse, a node rank or world out of range, no
    /// master, and a master that cannot work from this node ([`check_master`]). `env`: the
    /// process's environment (`MASTER_ADDR`, `MASTER_PORT`).
    pub fn node_plan(
        &self,
        np: u32,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(NodeRanks, bool), String> {
        let yourself =
            self.rank.is_some() || self.world_size.is_some() || self.local_rank.is_some();
        let Some(nnodes) = self.nnodes else {
            if self.node_rank.is_some() {
                return Err(
                    "--node-rank needs --nnodes N, the number of nodes (each runs one launcher \
                     with the same --np and --master and its own --node-rank)"
                        .into(),
                );
            }
            if yourself || self.master.is_some() {
                return Err(
                    "--np starts its own ranks: leave out --rank, --world-size, --local-rank and \
                     --master (they are for launching each rank yourself, without --np); for \
                     ranks on several nodes add --nnodes N and --node-rank K, with --master"
                        .into(),
                );
            }
            return NodeRanks::new(np, 1, 0).map(|node| (node, false));
        };
        if yourself {
            return Err(
                "--nnodes gives each rank its --rank, --world-size and --local-rank (node rank × \
                 --np + local rank, --nnodes × --np, local rank): leave them out"
                    .into(),
            );
        }
        let node_rank = match self.node_rank {
            Some(k) => k,
            // One node (or none, which NodeRanks::new refuses): node 0.
            None if nnodes <= 1 => 0,
            None => {
                return Err(format!(
                    "--nnodes {nnodes} needs --node-rank K, this node's number (0..{}): start \
                     one launcher on each node, each with its own K, node 0 on the host of \
                     --master",
                    nnodes - 1
                ))
            }
        };
        let node = NodeRanks::new(np, nnodes, node_rank)?;
        let Some((host, port)) = env::master_address(self.master.as_deref(), env)? else {
            return match nnodes {
                // One node and no master: the whole job here, as --np alone.
                1 => Ok((node, false)),
                _ => Err(format!(
                    "--nnodes {nnodes} needs rank 0's address: give --master HOST:PORT (node 0's \
                     host, where rank 0 listens), or set MASTER_ADDR and MASTER_PORT, the same \
                     on every node"
                )),
            };
        };
        let given = match &self.master {
            Some(m) => format!("--master {m}"),
            None => format!("MASTER_ADDR={host} MASTER_PORT={port}"),
        };
        check_master(&node, (&host, port), &given)?;
        Ok((node, true))
    }

    /// This rank's place: from `--np`'s flags (its message queues stand for `--master`), else
    /// from the flags or the launcher's environment; the world must be `--np`'s (times
    /// `--nnodes`). Refused: `--nnodes`/`--node-rank` without `--np`, `--vl-coll-queues` given
    /// by hand, a world that is not `--np`'s, and whatever [`env::from_env`] refuses.
    pub fn rank_info(&self) -> Result<RankInfo, String> {
        if self.np.is_none() && (self.nnodes.is_some() || self.node_rank.is_some()) {
            return Err(
                "--nnodes and --node-rank go with --np N, the ranks that each node's launcher \
                 starts (torchrun's --nproc-per-node)"
                    .into(),
            );
        }
        let mut info = match (&self.local_queues, self.rank, self.world_size) {
            // A rank of --np: the launcher set every flag; the queues stand for --master.
            (Some(_), Some(rank), Some(world_size)) => RankInfo {
                rank,
                world_size,
                local_rank: Some(self.local_rank.unwrap_or(rank)),
                launcher: Launcher::LocalQueues,
                master: None,
            },
            (Some(_), _, _) => return Err("--vl-coll-queues is set by --np, not by hand".into()),
            _ => env::from_env(&self.rank_flags())?,
        };
        if let Some(np) = self.np {
            // A rank that --np started: its launcher gave it the world, --np's on each node.
            let world = np.saturating_mul(self.nnodes.unwrap_or(1));
            if info.world_size != world {
                return Err(format!(
                    "--np {np} on {} node(s) but a world size of {}",
                    self.nnodes.unwrap_or(1),
                    info.world_size
                ));
            }
            if self.nnodes.is_some() && self.local_queues.is_none() {
                info.launcher = Launcher::Nodes;
            }
        }
        Ok(info)
    }

    /// The device of local rank `local`: of `--ib-dev`, round-robin (`None`: the first device).
    pub fn device(&self, local: u32) -> Option<&str> {
        env::pick_device(&self.devices, local)
    }
}
