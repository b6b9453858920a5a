//! The flags of the collective benchmarks (nccl-tests' names where they have one) and the sizes
//! of the rows they ask for.

use crate::comm::MAX_CHANNELS;
use crate::launch::LaunchArgs;
use crate::{Algo, Coll, DataType, RedOp};
use clap::Parser;

/// The one size parser (`8`, `64K`, `1M`) and the longest wait, from the library.
use verbs_lab::cli::{parse_size, MAX_WAIT_SECS};

#[derive(Parser, Debug, Clone)]
#[command(
    version,
    about = "Collective bandwidth over RDMA verbs, in the layout of nccl-tests",
    after_help = "Ranks: --np N starts N on this machine, coordinated over POSIX message queues \
                  (/dev/mqueue/vl-coll-PID-r*, removed at the end). Across nodes, torchrun's way: on \
                  each of M nodes run --np N --nnodes M --node-rank K (0..M-1) --master HOST:PORT (else \
                  MASTER_ADDR/MASTER_PORT), the same master everywhere; node K starts ranks K*N..K*N+N-1 \
                  of M*N, local ranks 0..N-1, meeting over TCP. Node 0 must run on HOST, where rank 0 \
                  listens (it refuses another host's address); one launcher per host. --nproc-per-node \
                  is --np and --node_rank --node-rank; torchrun's elastic --nnodes MIN:MAX is refused. \
                  Otherwise the rank comes from --rank/--world-size/--master, \
                  torchrun or DeepSpeed (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; DeepSpeed's \
                  CROSS_RANK, CROSS_SIZE, LOCAL_SIZE must agree with them), Open MPI \
                  (OMPI_COMM_WORLD_*), MPICH (PMI_RANK, PMI_SIZE) or Slurm (SLURM_PROCID, SLURM_NTASKS), \
                  the first present in that order; flags override the environment. Two launchers whose \
                  variables disagree on the rank, world size or local rank are refused (exit 2), except \
                  Slurm's under mpirun/mpiexec and the outer launcher's under torchrun (TORCHELASTIC_RUN_ID) \
                  or DeepSpeed's per-node launcher (CROSS_RANK).\nSizes: -e up to 2G (each rank registers an input and an output buffer of -e bytes, \
                  plus the slots); at most 1000 rows; -i a multiple of the element size.\n\
                  A closed stdout (| head) ends the sweep quietly with status 0, unless --json or --min-busbw still need the \
                  rest of it, which then runs without printing.\n\
                  SIGINT or SIGTERM ends a rank at once by the signal (the shell reports 130 or 143); --np's launcher first \
                  removes its message queues, and its ranks end with it.\n\
                  Exit status: 0 ok, 1 run failed or wrong values, 2 usage, 3 --min-busbw missed."
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
    #[arg(short = 'n', long = "iters", default_value_t = 20, value_parser = iters())]
    pub iters: u32,
    /// Warm-up iterations per size.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: u32,
    /// Check every element of one more collective against the exact expected value (0 or 1).
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: u8,
    /// Reduction: sum, prod, min, max, avg, or all (each in turn, as nccl-tests).
    #[arg(short = 'o', long = "op", default_value = "sum", value_parser = redop)]
    pub ops: Sweep<RedOp>,
    /// Element type: float, double, int32, int64, uint8, int8, uint32, uint64, half, bfloat16,
    /// or all (each in turn, as nccl-tests).
    #[arg(short = 'd', long = "datatype", default_value = "float", value_parser = datatype)]
    pub dtypes: Sweep<DataType>,
    /// The type of the rows being run: one of `dtypes` ([`Args::each`]).
    #[arg(skip = DataType::F32)]
    pub dtype: DataType,
    /// The operator of the rows being run: one of `ops`.
    #[arg(skip = RedOp::Sum)]
    pub op: RedOp,
    /// Root rank (broadcast, reduce, gather, scatter); a rank of the world for every collective,
    /// as nccl-tests takes it.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// How the ranks start, meet and find their devices (the collectives' launch flags, shared
    /// with vl_fabric_check).
    #[command(flatten)]
    pub launch: LaunchArgs,
    /// QP ack timeout exponent: 4.096 µs × 2^N.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 20,
          value_parser = verbs_lab::cli::qp_timeout())]
    pub ack_timeout: u8,
    /// Seconds without progress before a rank reports its silent neighbour (1 to a day); rank 0's
    /// verdict then names the rank that is gone — a rank that exits is named at once, one that
    /// went without a word (its host lost power, it was stopped) within this timeout + 3 s as a
    /// rule, + 10 s at most.
    #[arg(short = 'T', long = "timeout", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=MAX_WAIT_SECS))]
    pub peer_timeout: u64,
    /// Bytes per receive slot (pipeline piece).
    #[arg(long = "slot-size", default_value = "128K", value_parser = parse_size::<usize>)]
    pub slot_bytes: usize,
    /// Receive slots per link (pieces in flight). The completion queue holds about 6 x slots
    /// per channel: past the device's max_cqe the run is refused before it starts.
    #[arg(long = "slots", default_value_t = 8)]
    pub nslots: usize,
    /// QPs per ring neighbour, 1 to 16: each message is split over K channels, each its own QP
    /// (a RoCE v2 flow with its own UDP source port, which an ECMP fabric's hash may put on its
    /// own path) and its own --slots. Else NCCL_MIN_NCHANNELS x NCCL_IB_QPS_PER_CONNECTION
    /// (NCCL opens that many QPs to each ring neighbour; either unset counts 1), else 1.
    /// Every collective on the ring uses them; recursive doubling (--algo rd) keeps one, and
    /// so does the direct all-to-all per rank it writes to.
    #[arg(long = "channels", value_name = "K",
          value_parser = clap::value_parser!(u64).range(1..=MAX_CHANNELS as u64))]
    pub channels: Option<u64>,
    /// Write every size, every rank, as JSON to FILE (rank 0).
    #[arg(long)]
    pub json: Option<String>,
    /// Write the table's rows as CSV to FILE (rank 0): one line per size, the out-of-place
    /// and in-place columns side by side.
    #[arg(long)]
    pub csv: Option<String>,
    /// Write the rows, the footer's average and the gate's verdict to FILE (rank 0) in the text
    /// format Prometheus and node_exporter's textfile collector read.
    #[arg(long)]
    pub openmetrics: Option<String>,
    /// Fail with exit status 3 when the average bus bandwidth is below this (GB/s, above 0).
    /// Without it, nccl-tests' NCCL_TESTS_MIN_BW=GBS is honoured as nccl-tests does: the run
    /// fails when the average is below 90 % of it. Either way the footer says OK or FAILED.
    #[arg(long = "min-busbw", value_parser = vl_perftest::output::gates::parse_min_busbw)]
    pub min_busbw: Option<f64>,
    /// Every rank prints its own rows too.
    #[arg(long = "all-ranks")]
    pub all_ranks: bool,
    /// Print to stderr where rank 0's time went in each size's timed loop (posting, applying,
    /// polling, idle); with --all-ranks, every rank's.
    #[arg(long)]
    pub profile: bool,
    /// All-reduce's algorithm: ring, rd (recursive doubling, log2 n steps: faster for small
    /// messages) or auto (by size and world, the alpha-beta model's crossover; the default);
    /// else VL_ALGO, else NCCL_ALGO (Ring, Tree: here rd). All-to-all's: direct (each block
    /// straight to its owner over a QP to every rank, at once), ring (relayed around the ring)
    /// or auto (direct from 3 ranks on; the default). The other tools have only the ring.
    #[arg(long = "algo", value_name = "ALGO", value_parser = |s: &str| s.parse::<Algo>())]
    pub algo: Option<Algo>,
    #[command(flatten)]
    pub nccl_only: NcclOnly,
}

/// `-d`: nccl-tests' data type. A device name given the old way (`-d rxe0`) is told where
/// devices go now.
/// One value of `-d` / `-o`, or nccl-tests' `all`: each in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep<T> {
    One(T),
    All,
}

impl<T: Copy> Sweep<T> {
    /// The values to run, in order; `all`: every one of `every`.
    pub fn each(self, every: &[T]) -> Vec<T> {
        match self {
            Sweep::One(t) => vec![t],
            Sweep::All => every.to_vec(),
        }
    }
    /// As given on the command line.
    pub fn spelling(self, name: impl Fn(T) -> &'static str) -> &'static str {
        match self {
            Sweep::One(t) => name(t),
            Sweep::All => "all",
        }
    }
}

impl Args {
    /// The (type, operator) pairs of the run, in nccl-tests' order (each type, and for each
    /// its operators; one operator, unused, where the collective does not reduce).
    pub fn each(&self, reduces: bool) -> Vec<(DataType, RedOp)> {
        let ops = if reduces {
            self.ops.each(&RedOp::ALL)
        } else {
            vec![self.ops.each(&RedOp::ALL)[0]]
        };
        self.dtypes
            .each(&DataType::ALL)
            .into_iter()
            .flat_map(|t| ops.iter().map(move |&o| (t, o)))
            .collect()
    }
    /// These flags for the rows of type `t` and operator `op`.
    pub fn with(&self, (t, op): (DataType, RedOp)) -> Args {
        Args {
            dtype: t,
            op,
            ..self.clone()
        }
    }
    /// The flags as parsed, with the first type and operator of the sweeps as the current ones.
    pub fn resolved(self) -> Args {
        let first = self.each(true)[0];
        self.with(first)
    }
    /// Whether `-d all` or `-o all` was given.
    pub fn sweeps(&self) -> bool {
        self.dtypes == Sweep::All || self.ops == Sweep::All
    }
}

fn datatype(s: &str) -> Result<Sweep<DataType>, String> {
    if s == "all" {
        return Ok(Sweep::All);
    }
    s.parse::<DataType>()
        .map(Sweep::One)
        .map_err(|e| format!("{e} (-d is nccl-tests' data type; RDMA devices go in --ib-dev)"))
}

/// `-o`: one of the operators, or `all`.
fn redop(s: &str) -> Result<Sweep<RedOp>, String> {
    if s == "all" {
        return Ok(Sweep::All);
    }
    s.parse::<RedOp>().map(Sweep::One)
}

/// nccl-tests' flags for GPUs, threads and NCCL itself ([`NCCL_ONLY`]). So that an nccl-tests
/// command line runs as it is, each is accepted with the value that describes what this tool
/// does (a rank is one process on one RDMA device, timed on the CPU) and refused, saying why,
/// otherwise; nothing else reads them. Two of nccl-tests' letters mean something else here, as
/// in perftest: `-x` the GID index (nccl-tests' CTA policy) and `-u` the QP timeout
/// (nccl-tests' unaligned buffers).
#[derive(Debug, Clone, Default)]
pub struct NcclOnly;

/// nccl-tests' flag letter and name, the values offered here (none: refused whatever it is),
/// its help line, and why no other value can be.
type NcclFlag = (
    char,
    &'static str,
    &'static [i64],
    &'static str,
    &'static str,
);

const GPU: &str = "it sets how nccl-tests drives its GPUs, and there are none here: leave it out";

/// The flags of [`NcclOnly`], in nccl-tests' order.
pub const NCCL_ONLY: [NcclFlag; 15] = [
    (
        't',
        "nthreads",
        &[1],
        "Threads per process: 1 (more ranks: --np N, or your launcher)",
        "each rank is one process with one thread; for more ranks give --np N, or start them \
      with mpirun, torchrun or srun",
    ),
    (
        'g',
        "ngpus",
        &[1],
        "GPUs per thread: 1 (no GPU: a rank drives one RDMA device)",
        "there are no GPUs here: each rank drives one RDMA device (--ib-dev)",
    ),
    (
        'm',
        "agg_iters",
        &[1],
        "Collectives per timed iteration: 1",
        "each timed iteration is one collective; raise -n for more of them",
    ),
    (
        'N',
        "run_cycles",
        &[1],
        "Sweeps: 1",
        "the sweep runs once; run the tool again for another",
    ),
    ('p', "parallel_init", &[0], "Parallel GPU init: 0", GPU),
    ('z', "blocking", &[0], "Blocking collectives: 0", GPU),
    ('y', "stream_null", &[0], "CUDA null stream: 0", GPU),
    ('G', "cudagraph", &[0], "CUDA graph launches: 0", GPU),
    (
        'C',
        "report_cputime",
        &[0, 1],
        "CPU time: 0 or 1 (the time is the CPU's clock either way)",
        GPU,
    ),
    ('S', "report_timestamps", &[0], "Timestamps: 0", GPU),
    (
        'a',
        "average",
        &[3],
        "The time shown: 3, the slowest rank's",
        "the time column is the slowest rank's (nccl-tests' -a 3): a collective ends when its \
      last rank does, and --all-ranks shows every rank's own",
    ),
    (
        'R',
        "local_register",
        &[0],
        "NCCL buffer registration: 0 (the NIC's is always done)",
        "the buffers are always registered with the NIC (ibv_reg_mr) before the sweep",
    ),
    ('M', "memory", &[0], "GPU memory report: 0", GPU),
    (
        'I',
        "per_iter_timing",
        &[0],
        "Per-iteration CUDA timing: 0",
        GPU,
    ),
    (
        'J',
        "output_file",
        &[],
        "nccl-tests' JSON file: give --json FILE (this tool's layout)",
        "nccl-tests' JSON layout is not written here: give --json FILE for this tool's \
      (vl_jsoncheck checks it)",
    ),
];

impl clap::Args for NcclOnly {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let cmd = cmd.next_help_heading(
            "nccl-tests' GPU and NCCL flags (accepted with the value that fits a CPU rank)",
        );
        NCCL_ONLY
            .iter()
            .fold(cmd, |cmd, &(short, long, offered, help, why)| {
                let value_name = match offered {
                    [] => "FILE",
                    [0] => "0",
                    [1] => "1",
                    [3] => "3",
                    [0, 1] => "0|1",
                    _ => "N",
                };
                cmd.arg(
                    clap::Arg::new(long)
                        .short(short)
                        .long(long)
                        .value_name(value_name)
                        .help(help)
                        .value_parser(only(offered, why)),
                )
            })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for NcclOnly {
    fn from_arg_matches(_: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(NcclOnly)
    }

    fn update_from_arg_matches(&mut self, _: &clap::ArgMatches) -> Result<(), clap::Error> {
        Ok(())
    }
}

/// A parser that takes only `offered` (whole numbers, as nccl-tests' `strtol`), saying `why`
/// any other value cannot be.
fn only(
    offered: &'static [i64],
    why: &'static str,
) -> impl Fn(&str) -> Result<i64, String> + Clone + Send + Sync + 'static {
    move |s: &str| match s.trim().parse::<i64>() {
        Ok(v) if offered.contains(&v) => Ok(v),
        _ if offered.is_empty() => Err(why.to_string()),
        _ => {
            let values: Vec<String> = offered.iter().map(i64::to_string).collect();
            Err(format!("only {} is offered: {why}", values.join(" or ")))
        }
    }
}

/// `-n`: at least one timed collective per size (the average divides by it), up to `u32`.
fn iters() -> verbs_lab::cli::WholeRange<u32> {
    verbs_lab::cli::WholeRange::new(
        1..=u32::MAX as u64,
        "the timed collectives per size; the row is their average",
    )
}

/// The largest `-e`: each rank registers an input and an output buffer of this size, and a
/// registered region's length must fit the 32 bits of an SGE, as `vl_*`'s `-s`.
pub const MAX_BYTES: usize = 1 << 31;
/// The most rows a sweep may have.
pub const MAX_ROWS: usize = 1000;

/// The sizes of the rows: from `min` to `max` by `factor` (or by `step` bytes), each rounded
/// down to whole elements (at least one). Refused: a range outside `1..=MAX_BYTES`, a step that
/// is not whole elements, and a sweep of more than [`MAX_ROWS`] rows (the message says how many
/// it would be and what to give instead).
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
    if max > MAX_BYTES {
        return Err(format!(
            "-e {max}: larger than {MAX_BYTES} bytes; each rank registers an input and an \
             output buffer of -e bytes (2 x -e of pinned memory), and a registered region's \
             length must fit an SGE's 32 bits"
        ));
    }
    match (factor, step) {
        (Some(_), Some(_)) => return Err("give -f (factor) or -i (increment), not both".into()),
        (_, Some(0)) | (Some(0 | 1), _) => {
            return Err("-f must be at least 2 and -i at least 1".into())
        }
        (_, Some(i)) if i % elem != 0 => {
            return Err(format!(
                "-i {i}: not a whole number of {elem}-byte elements; give a multiple of {elem}"
            ))
        }
        _ => {}
    }
    let next = |s: usize| match step {
        Some(i) => s.saturating_add(i),
        None => s.saturating_mul(factor.unwrap_or(2) as usize),
    };
    let mut v = Vec::new();
    let mut s = min;
    while s <= max && v.len() <= MAX_ROWS {
        v.push((s / elem).max(1) * elem);
        s = next(s);
    }
    if v.len() > MAX_ROWS {
        // Only -i gets there: -f 2 from 1 byte to MAX_BYTES is 32 rows.
        let i = step.unwrap_or(1);
        let wider = (max - min).div_ceil(MAX_ROWS - 1).next_multiple_of(elem);
        return Err(format!(
            "-b {min} -e {max} -i {i} is {} rows, more than the {MAX_ROWS} a sweep may have: \
             give -i {wider} or more, -f 2, or a narrower -b/-e",
            (max - min) / i + 1
        ));
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
        assert_eq!(sizes(10, 30, None, Some(8), 4).unwrap(), [8, 16, 24]);
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

    #[test]
    fn a_sweep_too_large_or_too_long_is_refused_saying_what_to_give() {
        let e = sizes(8, 16 << 30, None, None, 4).unwrap_err();
        assert!(
            e.starts_with("-e 17179869184: larger than 2147483648 bytes"),
            "{e}"
        );
        assert_eq!(sizes(8, MAX_BYTES, None, None, 4).unwrap().len(), 29);
        let e = sizes(8, 1 << 30, None, Some(1), 4).unwrap_err();
        assert_eq!(
            e,
            "-i 1: not a whole number of 4-byte elements; give a multiple of 4"
        );
        let e = sizes(8, 1 << 30, None, Some(4), 4).unwrap_err();
        assert_eq!(
            e,
            "-b 8 -e 1073741824 -i 4 is 268435455 rows, more than the 1000 a sweep may have: \
             give -i 1074820 or more, -f 2, or a narrower -b/-e"
        );
        assert_eq!(
            sizes(8, 1 << 30, None, Some(1074820), 4).unwrap().len(),
            999
        );
        assert_eq!(sizes(4, 4 * 1000, None, Some(4), 4).unwrap().len(), 1000);
        assert!(sizes(4, 4 * 1001, None, Some(4), 4).is_err());
    }
}

/// The floor of the average bus bandwidth, and where it came from (for the gate's message).
#[derive(Debug, Clone, PartialEq)]
pub struct BusbwGate {
    /// GB/s: the run fails below it.
    pub floor: f64,
    /// `--min-busbw 5`, or `90 % of NCCL_TESTS_MIN_BW=5`.
    pub source: String,
}

/// nccl-tests' name for its gate (an environment variable), which fails a run whose average
/// bus bandwidth is below 90 % of it.
pub const NCCL_MIN_BW_ENV: &str = "NCCL_TESTS_MIN_BW";

impl Args {
    /// The gate of the run: `--min-busbw`, else `NCCL_TESTS_MIN_BW` (`NCCL_MIN_BW_ENV`) from
    /// `env` (nccl-tests' rule: 90 % of it), else none. A variable that is not a positive
    /// bandwidth is refused, as a bad `--min-busbw` is (nccl-tests' `atof` would read it as 0,
    /// a gate that never fails).
    pub fn busbw_gate(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<BusbwGate>, String> {
        if let Some(m) = self.min_busbw {
            return Ok(Some(BusbwGate {
                floor: m,
                source: format!("--min-busbw {m}"),
            }));
        }
        let Some(v) = env(NCCL_MIN_BW_ENV) else {
            return Ok(None);
        };
        let gbs = vl_perftest::output::gates::parse_min_busbw(&v).map_err(|e| {
            format!("{NCCL_MIN_BW_ENV}={v:?}: {e}; set it to a number of GB/s, or unset it")
        })?;
        Ok(Some(BusbwGate {
            floor: 0.9 * gbs,
            source: format!("90 % of {NCCL_MIN_BW_ENV}={v}"),
        }))
    }

    /// The algorithm: for all-reduce `--algo`, else `VL_ALGO`, else `NCCL_ALGO` where it
    /// means one of ours ([`Algo::from_nccl`]), else auto; for all-to-all `--algo`, else auto.
    /// A bad value is refused, naming where it came from; so is an algorithm the tool does not
    /// have (the variables are ignored by the other tools: they may be set for the whole job,
    /// and they name all-reduce's algorithms).
    pub fn algo_for(
        &self,
        coll: Coll,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Algo, String> {
        let not_ours = |a: Algo, whose: &str| {
            format!(
                "--algo {}: {} does not have it; {} is {whose}'s",
                a.name(),
                coll.name(),
                a.name()
            )
        };
        match (coll, self.algo) {
            (Coll::AllToAll, Some(Algo::Rd)) => return Err(not_ours(Algo::Rd, "all_reduce")),
            (Coll::AllToAll, a) => return Ok(a.unwrap_or(Algo::Auto)),
            (Coll::AllReduce, Some(Algo::Direct)) => {
                return Err(not_ours(Algo::Direct, "alltoall"))
            }
            (Coll::AllReduce, _) => {}
            (_, Some(a @ (Algo::Rd | Algo::Direct))) => {
                let whose = if a == Algo::Rd {
                    "all_reduce"
                } else {
                    "alltoall"
                };
                return Err(format!(
                    "--algo {}: {} has only the ring; {} is {whose}'s",
                    a.name(),
                    coll.name(),
                    a.name()
                ));
            }
            (_, _) => return Ok(Algo::Ring),
        }
        if let Some(a) = self.algo {
            return Ok(a);
        }
        if let Some(v) = env(ALGO_ENV) {
            return match v.parse::<Algo>() {
                Ok(Algo::Direct) => Err(format!(
                    "{ALGO_ENV}={v:?}: direct is alltoall's; give ring, rd or auto here, or \
                     unset it (the default is auto)"
                )),
                Ok(a) => Ok(a),
                Err(e) => Err(format!(
                    "{ALGO_ENV}={v:?}: {e}; or unset it (the default is auto)"
                )),
            };
        }
        match env(NCCL_ALGO_ENV) {
            Some(v) => Algo::from_nccl(&v),
            None => Ok(Algo::Auto),
        }
    }
}

/// The variables that choose the all-reduce algorithm when `--algo` does not.
pub const ALGO_ENV: &str = "VL_ALGO";
pub const NCCL_ALGO_ENV: &str = "NCCL_ALGO";

/// NCCL's variables whose product is the QPs to each ring neighbour when `--channels` is not
/// given: the channels (rings) and the QPs of each connection.
pub const NCCL_CHANNELS_ENV: &str = "NCCL_MIN_NCHANNELS";
pub const NCCL_QPS_ENV: &str = "NCCL_IB_QPS_PER_CONNECTION";

impl Args {
    /// The channels (QPs per ring neighbour) and where they came from: `--channels`, else
    /// `NCCL_MIN_NCHANNELS` × `NCCL_IB_QPS_PER_CONNECTION` from `env` (either unset counts 1),
    /// else 1. A variable that is not a whole number from 1, or a product above
    /// [`MAX_CHANNELS`], is refused, naming the variables.
    pub fn channels_for(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(usize, String), String> {
        if let Some(k) = self.channels {
            return Ok((k as usize, "--channels".into()));
        }
        let mut k = 1usize;
        let mut from = Vec::new();
        for name in [NCCL_CHANNELS_ENV, NCCL_QPS_ENV] {
            let Some(v) = env(name) else { continue };
            let n = v.trim().parse::<usize>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                format!("{name}={v:?}: not a whole number from 1; set it to 1..{MAX_CHANNELS}, or unset it")
            })?;
            k = k.saturating_mul(n);
            from.push(format!("{name}={n}"));
        }
        if k > MAX_CHANNELS {
            return Err(format!(
                "{}: {k} QPs per ring neighbour, more than the {MAX_CHANNELS} offered; lower \
                 them, or give --channels",
                from.join(" x ")
            ));
        }
        Ok((
            k,
            if from.is_empty() {
                "default".into()
            } else {
                from.join(" x ")
            },
        ))
    }
}
