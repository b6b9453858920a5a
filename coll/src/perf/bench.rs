//! One size, one placement: the warm-up, the timed loop, `--profile`'s line, and the checked run.

use std::time::Instant;

use crate::{Coll, CollError, Comm, Phases};

use super::check::{count_check, prepare_check};
use super::{failed, Args, Fail};

/// Runs one collective of `count` elements as the tool's `coll` with the flags' type and op.
pub(super) fn call(
    comm: &mut Comm,
    coll: Coll,
    args: &Args,
    count: usize,
    in_place: bool,
) -> Result<(), CollError> {
    match coll {
        Coll::AllReduce => comm.all_reduce(args.dtype, args.op, count, in_place),
        Coll::ReduceScatter => comm.reduce_scatter(args.dtype, args.op, count, in_place),
        Coll::AllGather => comm.all_gather(args.dtype, count, in_place),
        Coll::Broadcast { root } => comm.broadcast(args.dtype, count, root, in_place),
        Coll::SendRecv => comm.sendrecv(args.dtype, count),
        Coll::AllToAll => comm.all_to_all(args.dtype, count, in_place),
        Coll::Reduce { root } => comm.reduce(args.dtype, args.op, count, root, in_place),
        Coll::Gather { root } => comm.gather(args.dtype, count, root, in_place),
        Coll::Scatter { root } => comm.scatter(args.dtype, count, root, in_place),
    }
}

/// Warm-up, the timed loop (average µs per collective), and with `-c 1` one checked run. The
/// links the algorithm needs beyond the ring are made before either ([`Comm::prepare`]), so
/// that even `-w 0` times the collective alone.
pub(super) fn bench_one(
    comm: &mut Comm,
    coll: Coll,
    args: &Args,
    count: usize,
    in_place: bool,
) -> Result<(f64, Option<u64>), Fail> {
    comm.prepare(coll, count * args.dtype.size())
        .map_err(failed)?;
    for _ in 0..args.warmup {
        call(comm, coll, args, count, in_place).map_err(failed)?;
    }
    comm.barrier().map_err(failed)?;
    comm.take_phases();
    let t0 = Instant::now();
    for _ in 0..args.iters {
        call(comm, coll, args, count, in_place).map_err(failed)?;
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(args.iters);
    if args.profile && (comm.rank() == 0 || args.all_ranks) {
        verbs_lab::eprintln_whole!(
            "{}",
            profile_line(
                comm.rank(),
                count * args.dtype.size(),
                in_place,
                us,
                &comm.take_phases()
            )
        );
    }
    let wrong = if args.check == 1 {
        prepare_check(comm, coll, args, count, in_place);
        call(comm, coll, args, count, in_place).map_err(failed)?;
        Some(count_check(comm, coll, args, count))
    } else {
        None
    };
    Ok((us, wrong))
}

/// One `--profile` line: per collective, where the time went, in ms.
fn profile_line(rank: usize, bytes: usize, in_place: bool, us: f64, p: &Phases) -> String {
    let n = p.collectives.max(1) as f64;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3 / n;
    format!(
        "# profile rank {rank} {bytes} B {}: {:.2} ms per collective = post {:.2} + apply {:.2} \
         ({:.0} B) + poll {:.2} + idle {:.2} ms; {:.1} writes, {:.1} sleeps",
        if in_place { "in-place" } else { "out-of-place" },
        us / 1e3,
        ms(p.post),
        ms(p.apply),
        p.applied_bytes as f64 / n,
        ms(p.poll),
        ms(p.idle),
        p.writes as f64 / n,
        p.sleeps as f64 / n
    )
}
