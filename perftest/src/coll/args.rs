//! The flags of the collective benchmarks (nccl-tests' names where they have one) and the sizes
//! of the rows they ask for.

use clap::Parser;
use verbs_lab::coll::{DataType, RedOp};

/// The one size parser (`8`, `64K`, `1M`) and the longest wait, from the library.
use verbs_lab::cli::{parse_size, MAX_WAIT_SECS};

#[derive(Parser, Debug, Clone)]
#[command(
    about = "Collective bandwidth over RDMA verbs, in the layout of nccl-tests",
    after_help = "Ranks: --np N starts N on this machine, coordinated over POSIX message queues \
                  (/dev/mqueue/vl-coll-PID-r*, removed at the end); otherwise the rank comes from --rank/--world-size/--master, \
                  torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), Open MPI \
                  (OMPI_COMM_WORLD_*), MPICH (PMI_RANK, PMI_SIZE) or Slurm (SLURM_PROCID, SLURM_NTASKS), \
                  first match wins.\nExit status: 0 ok, 1 run failed or wrong values, 2 usage, 3 --min-busbw missed."
)]
pub struct Args {
    /// Smallest message, bytes (K, M, G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = parse_size::<usize>)]
    pub min_bytes: usize,
    /// Largest message, bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "1M", value_parser = parse_size::<usize>)]
    pub max_bytes: usize,
    /// Multiply the size by this factor from one row to the next.
    #[arg(short = 'f', long = "stepfactor")]
    pub step_factor: Option<u64>,
    /// Add this many bytes from one row to the next (instead of -f).
    #[arg(short = 'i', long = "stepbytes", value_parser = parse_size::<usize>)]
    pub step_bytes: Option<usize>,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: u32,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: u32,
    /// Check every element of one more collective against the exact expected value (0 or 1).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u8,
    /// Reduction: sum, prod, min, max.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: RedOp,
    /// Element type: float, double, int32, int64, uint8 (nccl-tests' -d; -d is the device here).
    #[arg(short = 't', long = "datatype", default_value = "float")]
    pub dtype: DataType,
    /// Root rank (broadcast).
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// RDMA devices, comma-separated; local ranks take them round-robin.
    #[arg(short = 'd', long = "ib-dev", value_delimiter = ',')]
    pub devices: Vec<String>,
    /// Port of the devices.
    #[arg(long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// GID index (default: the first RoCE v2 IPv4 GID).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u32>,
    /// QP ack timeout exponent: 4.096 µs × 2^N.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 20)]
    pub ack_timeout: u8,
    /// Start N ranks on this machine (child processes).
    #[arg(long = "np")]
    pub np: Option<u32>,
    /// This process's rank (with --world-size and --master).
    #[arg(long)]
    pub rank: Option<u32>,
    /// The number of ranks (with --rank and --master)
    #[arg(long = "world-size")]
    pub world_size: Option<u32>,
    /// Rank among the ranks on this host (picks the device and CPU).
    #[arg(long = "local-rank")]
    pub local_rank: Option<u32>,
    /// Rank 0's rendezvous address HOST:PORT (else MASTER_ADDR/MASTER_PORT).
    #[arg(long)]
    pub master: Option<String>,
    /// Set by --np for its ranks: the base name of the launcher's message queues.
    #[arg(long = "vl-coll-queues", hide = true)]
    pub local_queues: Option<String>,
    /// Seconds without progress before a neighbour is declared gone (1 to a day).
    #[arg(long = "timeout", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_SECS))]
    pub peer_timeout: u64,
    /// Seconds the rendezvous may take (1 to a day).
    #[arg(long = "bootstrap-timeout", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_SECS))]
    pub bootstrap_timeout: u64,
    /// Bytes per receive slot (pipeline piece).
    #[arg(long = "slot-size", default_value = "128K", value_parser = parse_size::<usize>)]
    pub slot_bytes: usize,
    /// Receive slots per link (pieces in flight).
    #[arg(long = "slots", default_value_t = 8)]
    pub nslots: usize,
    /// Write every size, every rank, as JSON to FILE (rank 0).
    #[arg(long)]
    pub json: Option<String>,
    /// Fail with exit status 3 when the average bus bandwidth is below this (GB/s).
    #[arg(long = "min-busbw")]
    pub min_busbw: Option<f64>,
    /// Every rank prints its own rows too.
    #[arg(long = "all-ranks")]
    pub all_ranks: bool,
    /// Print to stderr where rank 0's time went in each size's timed loop (posting, applying,
    /// polling, idle); with --all-ranks, every rank's.
    #[arg(long)]
    pub profile: bool,
}

/// The sizes of the rows: from `min` to `max` by `factor` (or by `step` bytes), each rounded
/// down to whole elements (at least one).
pub fn sizes(
    min: usize,
    max: usize,
    factor: Option<u64>,
    step: Option<usize>,
    elem: usize,
) -> Result<Vec<usize>, String> {
    if min == 0 || max < min {
        return Err(format!(
            "-b {min} -e {max}: sizes must satisfy 0 < minbytes <= maxbytes"
        ));
    }
    if factor.is_some() && step.is_some() {
        return Err("give -f (factor) or -i (increment), not both".into());
    }
    let mut v = Vec::new();
    let mut s = min;
    loop {
        v.push((s / elem).max(1) * elem);
        let next = match (factor, step) {
            (_, Some(0)) | (Some(0 | 1), _) => {
                return Err("-f must be at least 2 and -i at least 1".into())
            }
            (_, Some(i)) => s + i,
            (f, None) => s.saturating_mul(f.unwrap_or(2) as usize),
        };
        if next > max || v.len() > 10_000 {
            break;
        }
        s = next;
    }
    v.dedup();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_b_e_f_i() {
        assert_eq!(sizes(8, 64, None, None, 4).unwrap(), [8, 16, 32, 64]);
        assert_eq!(sizes(8, 100, Some(4), None, 4).unwrap(), [8, 32]);
        assert_eq!(sizes(10, 30, None, Some(10), 4).unwrap(), [8, 20, 28]);
        assert_eq!(sizes(1, 2, None, None, 8).unwrap(), [8]);
        assert!(sizes(0, 8, None, None, 4).is_err());
        assert!(sizes(16, 8, None, None, 4)
            .unwrap_err()
            .contains("minbytes <= maxbytes"));
        assert!(sizes(8, 16, Some(2), Some(4), 4)
            .unwrap_err()
            .contains("not both"));
        assert!(sizes(8, 16, Some(1), None, 4).is_err());
    }
}
