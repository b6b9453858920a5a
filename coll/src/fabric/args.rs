//! The flags of `vl_fabric_check`.

use crate::launch::LaunchArgs;
use clap::{Parser, ValueEnum};
use verbs_lab::cli::{parse_size, MAX_WAIT_SECS};

use super::verdict::Reference;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "vl_fabric_check",
    version,
    mut_arg("devices", |a| a.short('d')),
    mut_arg("ib_port", |a| a.short('i')),
    about = "Test every pair of hosts (RDMA bandwidth both ways and latency) and name what is slow",
    after_help = "One rank per host (per NIC with several: --ib-dev DEV,... and the local ranks take them \
                  round-robin). Ranks: --np N starts N on this machine (for a try-out), and with \
                  --nnodes M --node-rank K --master HOST:PORT N on each of M hosts (torchrun's way, \
                  one launcher per host); on a cluster start one per host with mpirun \
                  (OMPI_COMM_WORLD_*), MPICH (PMI_RANK, PMI_SIZE), srun (SLURM_PROCID, SLURM_NTASKS), \
                  torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or \
                  --rank/--world-size/--master HOST:PORT; rank 0 plans and reports. Each pair's \
                  tests are the vl_* tools' own runs (vl_write_bw both ways, vl_write_lat), client \
                  to server over TCP at the server's host name, port --port + k.\n\
                  Modes: pairs (a round-robin tournament: n-1 rounds for n even, n for n odd, every \
                  pair once, the pairs of a round at once; slow pairs re-tested), incast (each host \
                  in turn receives from all the others at once), all-to-all (every host sends to \
                  every other at once).\n\
                  Rules (pairs): a pair is slow when a direction's bandwidth < --tolerance x the best \
                  direction (--reference best; or the median direction, --reference median; or --expect), its latency > --lat-factor x the lowest, or its test \
                  failed; slow pairs are re-tested, each alone, and reported when slow both times; a \
                  host is suspect when more than half of its pairs are slow and more than \
                  half of the hosts are not. See docs/fabric-check.md.\n\
                  Exit status: 0 nothing suspect, 1 the check failed, 2 usage, 3 something is \
                  suspect (a slow pair, a suspect host, a host gone, a pair not measured)."
)]
pub struct Args {
    /// What to run: every pair in rounds, incast into each host, or all-to-all at once.
    #[arg(long, value_enum, default_value_t = Mode::Pairs)]
    pub mode: Mode,
    /// The RDMA operation of the bandwidth and latency tests.
    #[arg(long, value_enum, default_value_t = Op::Write)]
    pub test: Op,
    /// Bandwidth message size, bytes (K, M suffixes).
    #[arg(short = 's', long = "size", default_value = "64K", value_parser = parse_size::<u64>)]
    pub size: u64,
    /// Bandwidth messages per direction.
    #[arg(short = 'n', long = "iters", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(5..=100_000_000))]
    pub iters: u64,
    /// QPs of each bandwidth test (the tools' -q; -n counts the messages of all of them). One QP
    /// is one flow and, on an ECMP fabric (leaf-spine), one path: with 1 a pair tests the one
    /// path its hash picks and a slow spine link hides from the pairs that missed it; give 8 or
    /// more to spread every pair over the paths.
    #[arg(long = "qps", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub qps: u32,
    /// Latency round trips per pair (of 2-byte messages).
    #[arg(long = "lat-iters", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(5..=100_000_000))]
    pub lat_iters: u64,
    /// Slow below this share of the reference bandwidth (0 < T <= 1).
    #[arg(long, default_value_t = 0.7, value_parser = share)]
    pub tolerance: f64,
    /// The measured reference bandwidth: the best direction, or the median one (for fabrics
    /// whose runs scatter widely, e.g. emulated hosts).
    #[arg(long, value_enum, default_value_t = Reference::Best)]
    pub reference: Reference,
    /// The reference bandwidth, GB/s (10^9 bytes/s), instead of a measured one.
    #[arg(long, value_name = "GB/S", value_parser = positive)]
    pub expect: Option<f64>,
    /// Slow above this multiple of the lowest latency (at least 1).
    #[arg(long = "lat-factor", default_value_t = 3.0, value_parser = at_least_one)]
    pub lat_factor: f64,
    /// Report slow pairs without measuring them again.
    #[arg(long = "no-retest")]
    pub no_retest: bool,
    /// QP ack timeout exponent (4.096 us x 2^N).
    #[arg(short = 'u', long = "qp-timeout")]
    pub qp_timeout: Option<u8>,
    /// First TCP port of the pair tests (a host serving k tests at once uses PORT..PORT+k-1).
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Seconds a pair test waits for its peer to connect or accept.
    #[arg(long = "wait", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_SECS))]
    pub wait: u64,
    /// Seconds a round may take before rank 0 names the ranks that have not answered.
    #[arg(long = "round-timeout", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_SECS))]
    pub round_timeout: u64,
    /// Write every measurement as JSON to FILE (rank 0).
    #[arg(long)]
    pub json: Option<String>,
    /// Draw the matrices as an SVG heatmap to FILE (rank 0).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<String>,
    /// How the ranks start, meet and find their devices: the collectives' launch flags (with
    /// -d for --ib-dev and -i for --ib-port, as the vl_* tools spell them).
    #[command(flatten)]
    pub launch: LaunchArgs,
    /// This rank's device: of --ib-dev, the one its local rank picks (set after the
    /// rendezvous; `None`: the tools' default, the first device).
    #[arg(skip)]
    pub device: Option<String>,
}

/// How the hosts are exercised.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pairs,
    Incast,
    #[value(name = "all-to-all")]
    AllToAll,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Pairs => "pairs",
            Mode::Incast => "incast",
            Mode::AllToAll => "all-to-all",
        }
    }
}

/// The RDMA operation tested.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Write,
    Read,
    Send,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
            Op::Send => "send",
        }
    }
}

fn number(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("`{s}` is not a number"))
}

fn share(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if x > 0.0 && x <= 1.0 {
        Ok(x)
    } else {
        Err(format!("{x} is not a share: give 0 < T <= 1 (0.7: 70 %)"))
    }
}

fn positive(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if x > 0.0 {
        Ok(x)
    } else {
        Err(format!("{x}: give a bandwidth above 0"))
    }
}

fn at_least_one(s: &str) -> Result<f64, String> {
    let x = number(s)?;
    if x >= 1.0 {
        Ok(x)
    } else {
        Err(format!("{x}: give a factor of at least 1"))
    }
}
