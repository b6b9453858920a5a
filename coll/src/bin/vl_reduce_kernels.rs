//! vl_reduce_kernels — how fast one core reduces: each type × operator of the collectives'
//! kernels (`vl_coll::kernels::reduce`, `dst = dst op src`) over buffers larger than the caches,
//! beside what the same core moves with the kernels' access pattern and the cheapest operation
//! (`dst ^= src` over 64-bit words: reads 2 S, writes S, as every kernel does), on the host: no
//! device. That pass is the ceiling: a kernel near 100 % of it (`of xor`) is bound by memory,
//! one far below by its arithmetic. A plain copy of S bytes is printed beside it.
//!
//! ```text
//! vl_reduce_kernels                     # every type and operator, 64 MiB buffers, 5 rounds
//! vl_reduce_kernels -d float -o sum -s 256M -r 9
//! ```
//! Exit status 0 (also when stdout is closed early: `| head` ends the run quietly), 1 when stdout
//! cannot be written, 2 for a bad command line. Times are the median of the rounds, each round one
//! pass over the buffers after one untimed pass (pages touched, caches in their steady state).

#![forbid(unsafe_code)]

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use verbs_lab::cli::parse_size;
use vl_coll::kernels::{reduce, DataType, RedOp};

/// Bytes reduced per second per core by each kernel, beside one core's memory pass (xor) and copy.
#[derive(Parser)]
#[command(
    name = "vl_reduce_kernels",
    version,
    after_help = "A closed stdout (| head) ends the run quietly.\n\
                  Exit codes:\n  0  measured (or stdout closed)\n  1  stdout could not be \
                  written (> /dev/full)\n  2  bad command line, nothing measured"
)]
struct Args {
    /// Bytes of each of the two buffers (K/M/G suffixes), larger than the last-level cache to
    /// measure memory, smaller to measure the cache.
    #[arg(short = 's', long = "size", value_name = "BYTES", default_value = "64M",
          value_parser = parse_size::<u64>)]
    size: u64,

    /// Timed passes per kernel; the median is printed (1 to 1000).
    #[arg(short = 'r', long = "rounds", value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    rounds: u32,

    /// Element type (nccl-tests' names), or `all`.
    #[arg(
        short = 'd',
        long = "datatype",
        value_name = "TYPE",
        default_value = "all"
    )]
    datatype: String,

    /// Reduction operator, or `all`.
    #[arg(short = 'o', long = "op", value_name = "OP", default_value = "all")]
    op: String,
}

/// The largest buffer: two of them must fit a laptop's memory.
const MAX_SIZE: u64 = 4 << 30;

/// The median of `rounds` timed passes of `pass`, in seconds, after one untimed pass.
fn median_secs(rounds: u32, mut pass: impl FnMut()) -> f64 {
    pass();
    let mut secs: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            pass();
            t.elapsed().as_secs_f64()
        })
        .collect();
    secs.sort_by(f64::total_cmp);
    secs[secs.len() / 2]
}

/// `dst ^= src`, 64-bit word by word: the kernels' memory traffic with the cheapest operation.
fn xor_words(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.chunks_exact_mut(8).zip(src.chunks_exact(8)) {
        let x =
            u64::from_ne_bytes(d.try_into().unwrap()) ^ u64::from_ne_bytes(s.try_into().unwrap());
        d.copy_from_slice(&x.to_ne_bytes());
    }
}

/// Every value of a `name_table!` enum for `all`, else the one named.
fn chosen<T: std::str::FromStr<Err = String> + Copy>(
    arg: &str,
    all: &[T],
) -> Result<Vec<T>, String> {
    match arg {
        "all" => Ok(all.to_vec()),
        one => one.parse().map(|v| vec![v]),
    }
}

fn main() -> ExitCode {
    let args: Args = verbs_lab::cli::parse();
    verbs_lab::stdout::until_stdout_closes(|| run(&args))
}

fn run(args: &Args) -> ExitCode {
    let name = "vl_reduce_kernels";
    let usage = |e: String| -> ExitCode {
        verbs_lab::eprintln_whole!("{name}: error: {e}");
        ExitCode::from(2)
    };
    let types = match chosen(&args.datatype, &DataType::ALL) {
        Ok(t) => t,
        Err(e) => return usage(format!("-d {}: {e}, or all", args.datatype)),
    };
    let ops = match chosen(&args.op, &RedOp::ALL) {
        Ok(o) => o,
        Err(e) => return usage(format!("-o {}: {e}, or all", args.op)),
    };
    if args.size > MAX_SIZE || args.size < 8 {
        return usage(format!(
            "-s {}: give 8 bytes to {} GiB per buffer",
            args.size,
            MAX_SIZE >> 30
        ));
    }
    // A whole number of the widest elements, so every type sees the same bytes.
    let size = (args.size as usize) & !7;
    let src: Vec<u8> = (0..size).map(|i| (i % 7 + 1) as u8).collect();
    let mut dst = vec![1u8; size];
    let gb = |secs: f64| size as f64 / secs / 1e9;
    let copy = gb(median_secs(args.rounds, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    }));
    let xor = gb(median_secs(args.rounds, || {
        xor_words(black_box(&mut dst), black_box(&src));
    }));
    verbs_lab::outln!(
        "# {} bytes per buffer, median of {} round(s), one thread",
        size,
        args.rounds
    );
    verbs_lab::outln!(
        "# xor (dst ^= src, 64-bit words: the kernels' reads and writes): {} GB/s; \
         copy (dst = src): {} GB/s",
        gbps(xor),
        gbps(copy)
    );
    verbs_lab::outln!("{:>9} {:>5} {:>12} {:>9}", "type", "op", "GB/s", "of xor");
    for &t in &types {
        for &o in &ops {
            let secs = median_secs(args.rounds, || {
                // The operands stay as they are between passes except for the sum's and the
                // product's growth, which changes no instruction the kernel runs.
                reduce(t, o, black_box(&mut dst), black_box(&src)).expect("equal whole buffers");
            });
            let rate = gb(secs);
            verbs_lab::outln!(
                "{:>9} {:>5} {:>12} {:>8.0}%",
                t.name(),
                o.name(),
                gbps(rate),
                100.0 * rate / xor
            );
        }
    }
    ExitCode::SUCCESS
}

/// A rate in GB/s, two decimals from 1 GB/s up and three significant digits below, so that a
/// slow kernel (a debug build, an emulated CPU) reads 0.00412 and not 0.00.
fn gbps(v: f64) -> String {
    if v >= 1.0 || v <= 0.0 || !v.is_finite() {
        format!("{v:.2}")
    } else {
        let decimals = ((-v.log10()).ceil() as usize + 2).min(12);
        format!("{v:.decimals$}")
    }
}
