//! `-c 1`: exact test data into every rank's buffers, then every element of the result counted
//! against the value it must hold.

use crate::kernels::{self, count_wrong, fill_input, input_value};
use crate::{Coll, Comm, DataType, RedOp};

use super::Args;

/// The exact value every element should hold after a checked run, and who contributes what.
fn owner(comm: &Comm, count: usize, i: usize) -> usize {
    (0..comm.world_size())
        .find(|&r| comm.chunk_of(count, r).contains(&i))
        .unwrap_or(0)
}

/// Writes the checked inputs (and poisons the output where the collective must overwrite it).
pub(super) fn prepare_check(
    comm: &mut Comm,
    coll: Coll,
    args: &Args,
    count: usize,
    in_place: bool,
) {
    let (t, op, rank) = (args.dtype, args.op, comm.rank());
    let s = t.size();
    let bytes = count * s;
    // values(rank, op, first element, elements): a rank's checked input.
    let values = |r: usize, op: RedOp, first: usize, n: usize| {
        let mut v = vec![0u8; n * s];
        fill_input(t, op, r, first, &mut v);
        v
    };
    let put = |comm: &mut Comm, to_output: bool, offset: usize, v: &[u8]| {
        if to_output {
            comm.write_output(offset, v)
        } else {
            comm.write_input(offset, v)
        }
    };
    match coll {
        Coll::AllReduce | Coll::ReduceScatter => {
            put(comm, in_place, 0, &values(rank, op, 0, count));
        }
        Coll::AllGather => {
            let c = comm.chunk_of(count, rank);
            comm.write_output(0, &vec![0xee; bytes]);
            let v = values(rank, RedOp::Sum, c.start, c.len());
            put(comm, in_place, if in_place { c.start * s } else { 0 }, &v);
        }
        Coll::Broadcast { root } => {
            comm.write_output(0, &vec![0xee; bytes]);
            if rank == root {
                put(comm, in_place, 0, &values(root, RedOp::Sum, 0, count));
            }
        }
        Coll::SendRecv => {
            comm.write_output(0, &vec![0xee; bytes]);
            comm.write_input(0, &values(rank, RedOp::Sum, 0, count));
        }
        Coll::Reduce { .. } => {
            comm.write_output(0, &vec![0xee; bytes]);
            put(comm, in_place, 0, &values(rank, op, 0, count));
        }
        Coll::Gather { .. } => {
            let b = comm.block_of(count, rank);
            comm.write_output(0, &vec![0xee; bytes]);
            let v = values(rank, RedOp::Sum, b.start, b.len());
            put(comm, in_place, if in_place { b.start * s } else { 0 }, &v);
        }
        Coll::Scatter { root } => {
            comm.write_output(0, &vec![0xee; bytes]);
            if rank == root {
                put(comm, in_place, 0, &values(root, RedOp::Sum, 0, count));
            }
        }
        Coll::AllToAll => {
            comm.write_output(0, &vec![0xee; bytes]);
            put(comm, in_place, 0, &values(rank, RedOp::Sum, 0, count));
        }
    }
}

/// Elements of the output that differ from the exact expected value.
pub(super) fn count_check(comm: &Comm, coll: Coll, args: &Args, count: usize) -> u64 {
    let (t, op, n, rank) = (args.dtype, args.op, comm.world_size(), comm.rank());
    let s = t.size();
    let out = comm.read_output(0..count * s);
    match coll {
        Coll::AllReduce => count_wrong(t, 0, &out[..count * s], |i| {
            kernels::expected_value(t, op, n, i)
        }),
        Coll::ReduceScatter => {
            let c = comm.chunk_of(count, rank);
            count_wrong(t, c.start, &out[c.start * s..c.end * s], |i| {
                kernels::expected_value(t, op, n, i)
            })
        }
        Coll::AllGather => count_wrong(t, 0, &out[..count * s], |i| {
            wrap_sum(t, input_value(RedOp::Sum, owner(comm, count, i), i))
        }),
        Coll::Broadcast { root } => count_wrong(t, 0, &out[..count * s], |i| {
            wrap_sum(t, input_value(RedOp::Sum, root, i))
        }),
        Coll::SendRecv => {
            let left = crate::schedule::ring_offset(rank, n, -1);
            count_wrong(t, 0, &out[..count * s], |i| {
                wrap_sum(t, input_value(RedOp::Sum, left, i))
            })
        }
        // The root's whole output; the other ranks' hold partial results, not checked.
        Coll::Reduce { root } if rank == root => count_wrong(t, 0, &out[..count * s], |i| {
            kernels::expected_value(t, op, n, i)
        }),
        Coll::Reduce { .. } => 0,
        // Block j of the root's output is rank j's block.
        Coll::Gather { root } if rank == root => {
            let b = count / n;
            count_wrong(t, 0, &out[..b * n * s], |i| {
                wrap_sum(t, input_value(RedOp::Sum, i / b, i))
            })
        }
        Coll::Gather { .. } => 0,
        Coll::Scatter { root } => {
            let b = comm.block_of(count, rank);
            count_wrong(t, b.start, &out[b.start * s..b.end * s], |i| {
                wrap_sum(t, input_value(RedOp::Sum, root, i))
            })
        }
        // Block j of our output is block `rank` of rank j's input.
        Coll::AllToAll => {
            let b = count / n;
            count_wrong(t, 0, &out[..b * n * s], |i| {
                wrap_sum(t, input_value(RedOp::Sum, i / b, rank * b + i % b))
            })
        }
    }
}

/// One rank's input value as stored in `t` (what a plain copy must deliver).
fn wrap_sum(t: DataType, v: i64) -> i64 {
    kernels::expected_value_of(t, v)
}
