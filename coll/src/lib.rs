//! What runs across a world of ranks, launched the way clusters launch jobs (mpirun, Slurm,
//! torchrun): the collectives over verbs (the library below, and [`perf`], the engine of the
//! nccl-tests-style `vl_*_perf` tools) and [`fabric`], the engine of `vl_fabric_check`, which
//! stands on the same bootstrap and launcher.
//!
//! The library:
//!
//! - [`env`](mod@env): rank, world size and rendezvous address from flags or a launcher's environment
//!   (torchrun, DeepSpeed, Open MPI, MPICH, Slurm);
//! - [`bootstrap`]: rank 0's rendezvous (the endpoint table) and the TCP star kept for control
//!   and liveness;
//! - [`schedule`]: the schedules — which piece goes where, and what waits for what — on the
//!   ring, and all-to-all's direct exchange;
//! - [`algo`]: recursive doubling, the latency-bound all-reduce beside the ring, and the
//!   choice between the two by the α–β model (`--algo`, `VL_ALGO`, `NCCL_ALGO`); all-to-all's
//!   choice between the ring and the direct exchange;
//! - [`kernels`]: element types, reduction operators and the tight reduction loops;
//! - [`comm`]: the communicator — RC QPs to both neighbours (and, once an algorithm needs them,
//!   to recursive-doubling partners or to every rank), receive slots with credits, and the
//!   engine that runs a schedule with RDMA WRITE WITH IMM;
//! - [`launch`]: `--np N`, N ranks on this machine as child processes; with `--nnodes`, one
//!   launcher per node, torchrun's way.

#![forbid(unsafe_code)]

pub mod algo;
pub mod bootstrap;
pub mod comm;
pub mod env;
pub mod fabric;
pub mod kernels;
pub mod launch;
pub mod mqlink;
pub mod perf;
pub mod schedule;

pub use algo::Algo;
pub use bootstrap::{CollError, Place, RankRecord};
pub use comm::{Comm, CommOpts, Phases, Pinning};
pub use env::{RankFlags, RankInfo};
pub use kernels::{DataType, RedOp};
pub use schedule::Coll;
