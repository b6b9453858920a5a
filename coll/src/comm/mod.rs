//! The communicator: this rank's place in the ring, its RC QPs (one to each neighbour per
//! channel), its registered buffers, and the engine that runs a [`Plan`] on them.
//!
//! **Data path.** Every rank registers `nslots` receive slots of `slot_bytes` each and tells its
//! left neighbour where they are (in the bootstrap table). Message number m from the left lands in
//! slot m mod `nslots`, written by an `IBV_WR_RDMA_WRITE_WITH_IMM` whose immediate is m: the
//! write puts the bytes in place without our CPU, the immediate consumes one of our posted
//! receives and tells us that slot m is full. We reduce (or copy) it into the destination, then
//! give the slot back with a *credit* — a zero-byte `IBV_WR_SEND_WITH_IMM` to the left. A sender
//! starts with `nslots` credits and spends one per message, so it can never overwrite a slot the
//! receiver has not consumed. No payload byte goes over TCP; TCP (the [`Star`]) carries only the
//! bootstrap, small control messages and liveness.
//!
//! **Channels** ([`CommOpts::channels`], `channels`): the ring can have K channels, each its own
//! QP to the left and to the right and its own slots, credits and message numbers; every chunk
//! is split over them ([`schedule::plan_channel`]) and one loop drives all K plans. Each QP is a
//! RoCE v2 flow with its own UDP source port, so an ECMP fabric's hash may put each channel on
//! another path (NCCL's channels and `NCCL_IB_QPS_PER_CONNECTION`). All channels share one CQ:
//! a work request's id carries its channel.
//!
//! **Recursive doubling** ([`crate::algo`]) runs each of its steps as a plan on a pair of
//! links of the same kind to its partner of the step, made the first time an all-reduce picks
//! it (`partners`): every rank then exchanges the QP numbers and slots of its partner links
//! through the star, connects them and waits for all; the ring's links are never touched.
//! **All-to-all's direct exchange** makes its links the same way, at its first run: a lane per
//! distance d = 1..n−1, from the rank d to the left and to the rank d to the right (`mesh`),
//! all driven by one job.
//!
//! **Safety of the buffers.** The destination buffer is registered for local access only: only
//! our own NIC reads it (for our writes), and the plan orders every overwrite of a range after the
//! completion of every send reading it. Between collectives nothing is posted on it, so
//! [`Comm::write_input`] and [`Comm::read_output`] copy in and out of it. The slots, which the
//! left neighbour writes, are read only between a message's completion and its credit — the
//! window in which the protocol forbids the neighbour to touch them — and never handed out.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::algo::{self, Algo};
use crate::bootstrap::{self, CollError, RankRecord, Result, Star, PROTOCOL_VERSION};
use crate::env::{pick_device, RankInfo};
use crate::kernels::{self, DataType, RedOp};
use crate::schedule::{self, chunk, Action, Coll, Plan, RecvMsg};
use verbs_lab::affinity;
use verbs_lab::connect::{self, ConnectOpts, Endpoint};
use verbs_lab::verbs::{
    AccessFlags, CompChannel, Context, Cq, DeviceList, Gid, Mr, Payload, Pd, PortState, Qp, QpCaps,
    QpInitAttr, QpType, RecvWr, RemoteBuf, SendOp, SendWr, VerbsError, WorkCompletion,
};

mod channels;
mod init;
pub use channels::MAX_CHANNELS;
pub use init::own_record;
use init::{Pair, PortCfg};
mod mesh;
mod partners;
mod pump;

/// How to build a communicator.
#[derive(Debug, Clone)]
pub struct CommOpts {
    /// Devices to spread local ranks over (`-d rxe0,rxe1`); empty: the first device.
    pub devices: Vec<String>,
    pub ib_port: u8,
    pub gid_index: Option<u32>,
    /// The largest message (bytes) any collective will be given.
    pub max_bytes: usize,
    /// Reserve the scratch area all-to-all needs on a ring (2 × `max_bytes` more registered
    /// memory); without it [`Comm::all_to_all`] is refused.
    pub scratch: bool,
    /// Bytes per receive slot: the pipeline's piece size.
    pub slot_bytes: usize,
    /// Receive slots (= credits, = pieces in flight per link).
    pub nslots: usize,
    /// QPs per ring neighbour, 1..=[`MAX_CHANNELS`]: each message is split over them, each
    /// channel with its own `nslots` slots. Every rank must be given the same (a term of the
    /// rendezvous). Recursive doubling's partner links keep one.
    pub channels: usize,
    /// How long the rendezvous may take.
    pub bootstrap_timeout: Duration,
    /// How long a rank waits without any progress before it declares its neighbour gone.
    pub peer_timeout: Duration,
    /// QP ack timeout exponent (`-u`): 4.096 µs × 2^n.
    pub ack_timeout: u8,
    /// The algorithm of all-reduce and all-to-all ([`Algo::Auto`]: all-reduce's by size and
    /// world, all-to-all's direct from three ranks; the default here is the ring, the tools'
    /// is auto). Every rank must be given the same: the choice decides who talks to whom, and
    /// a rank that differs leaves the others waiting for it until the peer timeout.
    pub algo: Algo,
    /// Where to pin this rank's thread, once it knows its local rank.
    pub pin: Pinning,

    /// A local run (`--np`): the base name of the launcher's message queues, which then carry
    /// the rendezvous and the star instead of TCP (see [`super::mqlink`]).
    pub local_queues: Option<String>,
    /// What every rank must share beyond the slots, as (option, value) text pairs, e.g.
    /// `("-e", "1048576")`: the rendezvous refuses the job when a rank's differ from rank 0's,
    /// naming the first differing option with both values. The communicator does not read
    /// them; the caller chooses what must agree (sizes, data type, loop counts...).
    pub terms: Vec<(String, String)>,
}

impl CommOpts {
    /// Bytes of the data buffer: input and output, and the scratch if asked for.
    fn data_bytes(&self) -> usize {
        (2 + 2 * usize::from(self.scratch)) * self.max_bytes
    }
}

impl Default for CommOpts {
    fn default() -> Self {
        CommOpts {
            devices: Vec::new(),
            ib_port: 1,
            gid_index: None,
            max_bytes: 1 << 20,
            scratch: false,
            slot_bytes: 128 << 10,
            nslots: 8,
            channels: 1,
            bootstrap_timeout: Duration::from_secs(60),
            peer_timeout: Duration::from_secs(30),
            ack_timeout: 20,
            algo: Algo::Ring,
            pin: Pinning::None,
            local_queues: None,
            terms: Vec::new(),
        }
    }
}

/// Where a rank pins its thread. The choice waits for the rendezvous' first round, which tells
/// the rank its local rank when its launcher did not.
#[derive(Debug, Clone, Copy, Default)]
pub enum Pinning {
    /// Leave the scheduler free.
    #[default]
    None,
    /// This CPU.
    Cpu(usize),
    /// The CPU this function chooses for the rank's device (from `-d`; `None`: the first
    /// device) and its local rank; it returns `None` to leave the rank unpinned.
    ByLocalRank(fn(Option<&str>, u32) -> Option<usize>),
}

impl Pinning {
    /// The CPU for local rank `local_rank` on device `dev`, if any.
    pub fn cpu(self, dev: Option<&str>, local_rank: u32) -> Option<usize> {
        match self {
            Pinning::None => None,
            Pinning::Cpu(c) => Some(c),
            Pinning::ByLocalRank(choose) => choose(dev, local_rank),
        }
    }
}

/// A message from the left has been reduced or copied into the destination: for narration.
pub struct TraceEvent<'a> {
    pub coll: Coll,
    pub msg: &'a RecvMsg,
    /// The whole destination buffer after the message was applied.
    pub buffer: &'a [u8],
}

/// Where a rank's time went inside the collectives since the last [`Comm::take_phases`]: the
/// profile behind `--profile` of the vl_*_perf tools (issue 10's "why is it slow").
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    /// Collectives run.
    pub collectives: u64,
    /// Building and posting the RDMA WRITEs (step 1 of the engine's loop).
    pub post: Duration,
    /// Copying arrived pieces out of the slots and reducing them into the destination, and
    /// posting the credits (step 2).
    pub apply: Duration,
    /// `ibv_poll_cq` and re-posting receives (step 3).
    pub poll: Duration,
    /// Asleep on the completion channel, or spinning with nothing to do.
    pub idle: Duration,
    /// Bytes copied or reduced out of the slots.
    pub applied_bytes: u64,
    /// Pieces sent (RDMA WRITE WITH IMM) and times the rank went to sleep.
    pub writes: u64,
    pub sleeps: u64,
}

/// The observer of [`TraceEvent`]s (lesson 15 prints the vector after every step).
pub type Tracer = Box<dyn FnMut(&TraceEvent<'_>)>;

/// Empty polls before an idle rank goes to sleep on the completion channel.
const SPINS_BEFORE_SLEEP: u32 = 64;
/// The longest sleep: the star (liveness) and the peer timeout are looked at between sleeps.
const SLEEP_SLICE: Duration = Duration::from_millis(10);

/// Work request kinds: the low byte of a work request's id; the bytes above it are its channel
/// ([`wr_id`]).
const WR_DATA: u64 = 1;
const WR_CREDIT: u64 = 2;
const WR_RECV_DATA: u64 = 3;
const WR_RECV_CREDIT: u64 = 4;

/// The id of a work request of `kind` on channel `lane`.
fn wr_id(kind: u64, lane: usize) -> u64 {
    (lane as u64) << 8 | kind
}

/// A work request id's kind and channel.
fn wr_kind(id: u64) -> (u64, usize) {
    (id & 0xff, (id >> 8) as usize)
}

/// Lanes of pairs of links — data from the left, data to the right — with their verbs objects
/// and the state that persists between collectives: the ring's (to both neighbours, one
/// [`Lane`] per channel), a recursive-doubling partner's (both to the partner, one lane), or
/// the direct all-to-all's (lane d−1 from the rank d to the left, to the rank d to the right).
struct Ring {
    ctx: Context,
    /// The port of `ctx` the QPs use: looked at when a work request fails.
    port: u8,
    /// Idle ranks sleep on it instead of spinning (see `pump`).
    channel: CompChannel,
    /// Every lane's completions.
    cq: Cq,
    lanes: Vec<Lane>,
    slot_bytes: usize,
    nslots: usize,
    sq_depth: usize,
}

/// One channel of a [`Ring`]: its QPs, slots and flow control.
struct Lane {
    left: Qp,
    right: Qp,
    slots: Mr,
    /// The right neighbour's slots of this channel: where our writes go.
    peer_slots: RemoteBuf,
    /// Messages sent to the right / received from the left on this channel since it was built.
    tx_seq: u64,
    rx_seq: u64,
    credits: usize,
    /// Messages from the left that have arrived (immediate, length) and wait to be applied.
    arrived: VecDeque<(u32, u32)>,
    sq_right: usize,
    sq_left: usize,
}

/// The memory the collectives work on: `[input | output]`, each `max_bytes`, then all-to-all's
/// scratch (2 × `max_bytes`) when [`CommOpts::scratch`] asked for it.
enum Memory {
    Registered(Mr),
    /// World size 1 needs no NIC.
    Heap(Vec<u8>),
}

impl Memory {
    /// A copy of `range` (an MR is only reached through copies).
    fn read(&self, range: std::ops::Range<usize>) -> Vec<u8> {
        match self {
            Memory::Registered(m) => m.to_vec(range).expect("a range inside the buffers"),
            Memory::Heap(v) => v[range].to_vec(),
        }
    }
    fn write(&mut self, offset: usize, src: &[u8]) {
        match self {
            Memory::Registered(m) => m.write(offset, src).expect("a range inside the buffers"),
            Memory::Heap(v) => v[offset..offset + src.len()].copy_from_slice(src),
        }
    }
}

impl Ring {
    /// When our own port is no longer ACTIVE (the link went down, the netdev was removed): what
    /// to say of it. A work request that fails then is this side's failure, not the peer's.
    fn port_down(&self) -> Option<String> {
        let name = self.ctx.name();
        match self.ctx.query_port(self.port) {
            Ok(p) if p.state == PortState::ACTIVE => None,
            Ok(p) => Some(format!(
                "port {} of {name} is {}, not ACTIVE: this rank's link went down; check the \
                 link (`ip link`, `rdma link`) and run again",
                self.port, p.state
            )),
            Err(e) => Some(format!(
                "port {} of {name} can no longer be queried ({e}): the device went away",
                self.port
            )),
        }
    }

    /// [`Ring::port_down`] after a work request failed: the port's state may lag the link by a
    /// moment, so it is asked again for up to [`PORT_SETTLE`] before the failure is put on the
    /// peer. The kernel stops a netdev's transmit queue before rxe hears that it went down, and
    /// a veth whose peer went down loses its carrier through the link-watch work queue, later
    /// still: a request that met the dead link in between fails while the port reads ACTIVE.
    fn port_down_settled(&self) -> Option<String> {
        let deadline = Instant::now() + PORT_SETTLE;
        loop {
            let down = self.port_down();
            if down.is_some() || Instant::now() >= deadline {
                return down;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How long a failed work request waits for its port's state to catch up with the link (see
/// [`Ring::port_down_settled`]); only failures pay it.
const PORT_SETTLE: Duration = Duration::from_millis(1500);

/// Which links a [`Job`] runs on, and so who each lane's peers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Links {
    /// The ring: every channel from the left neighbour, to the right one.
    Ring,
    /// The pair of links to a recursive-doubling partner (this rank), both ways.
    Partner(usize),
    /// The direct all-to-all's: lane i from the rank i+1 places to the left, to the rank i+1
    /// places to the right.
    Mesh,
}

/// One collective on the ring: its plans (one per channel), where its sends read
/// (`src_off + range`) and its receives land (`dst_off + range`), and how arrivals are reduced.
struct Job<'p> {
    coll: Coll,
    plans: &'p [Plan],
    src_off: usize,
    dst_off: usize,
    dtype: DataType,
    op: RedOp,
}

/// A communicator: see the module documentation.
pub struct Comm {
    info: RankInfo,
    star: Star,
    ring: Option<Ring>,
    /// The links to the recursive-doubling partners, by rank, once an all-reduce used it.
    partners: Option<std::collections::HashMap<usize, Ring>>,
    /// The direct all-to-all's links, one lane per distance, once an all-to-all used it.
    mesh: Option<Ring>,
    /// The PD and the port's facts, for the links made after the ring's.
    link_cfg: Option<(Pd, PortCfg)>,
    algo: Algo,
    mem: Memory,
    max_bytes: usize,
    /// Whether `mem` has all-to-all's scratch.
    scratch: bool,
    peer_timeout: Duration,
    /// Set once a collective failed: the ring's state is unknown, later calls are refused.
    broken: bool,
    tracer: Option<Tracer>,
    phases: Phases,
    _pd: Option<Pd>,
}

fn verbs(what: impl Into<String>) -> impl FnOnce(VerbsError) -> CollError {
    let what = what.into();
    move |err| CollError::Verbs { what, err }
}

impl Comm {
    pub fn rank(&self) -> usize {
        self.info.rank as usize
    }
    pub fn world_size(&self) -> usize {
        self.info.world_size as usize
    }
    /// This rank's place among the ranks of its host: its local rank (its launcher's, or
    /// counted at the rendezvous), how many share its host, how many hosts.
    pub fn place(&self) -> crate::bootstrap::Place {
        self.star.place()
    }

    pub fn info(&self) -> &RankInfo {
        &self.info
    }
    /// Every rank's record, as rank 0 sent it.
    pub fn table(&self) -> &[RankRecord] {
        self.star.table()
    }
    /// The largest message, in bytes.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }
    /// The device this rank uses (`None` for a single rank, which needs none).
    pub fn device(&self) -> Option<&str> {
        self.ring.as_ref().map(|r| r.ctx.name())
    }
    /// QPNs of the QPs to the left and right neighbour (channel 0's).
    pub fn qpns(&self) -> Option<(u32, u32)> {
        self.ring
            .as_ref()
            .map(|r| (r.lanes[0].left.qpn(), r.lanes[0].right.qpn()))
    }
    /// The ring's channels: QPs per neighbour (1 for a single rank, which has no ring).
    pub fn channels(&self) -> usize {
        self.ring.as_ref().map_or(1, |r| r.lanes.len())
    }
    /// Observes every message applied (narration); `None` stops.
    pub fn set_tracer(&mut self, t: Option<Tracer>) {
        self.tracer = t;
    }
    /// The algorithm of all-reduce and all-to-all ([`CommOpts::algo`]; every rank must use the
    /// same).
    pub fn set_algo(&mut self, algo: Algo) {
        self.algo = algo;
    }
    /// The algorithm `coll` on `bytes` per rank runs: [`Algo::resolve`] for all-reduce,
    /// [`Algo::resolve_alltoall`] for all-to-all, the ring for every other collective.
    pub fn algo_for(&self, coll: Coll, bytes: usize) -> Algo {
        match coll {
            Coll::AllReduce => self.algo.resolve(self.world_size(), bytes),
            Coll::AllToAll => self.algo.resolve_alltoall(self.world_size()),
            _ => Algo::Ring,
        }
    }
    /// Makes now the links that `coll` on `bytes` per rank will run on beyond the ring
    /// (recursive doubling's partners, the direct all-to-all's mesh), which its first run
    /// would otherwise make: a timed loop then measures the collective alone. Every rank must
    /// call it with the same collective and size, as the collective itself; a second call does
    /// nothing.
    pub fn prepare(&mut self, coll: Coll, bytes: usize) -> Result<()> {
        self.usable()?;
        let algo = self.algo_for(coll, bytes);
        self.links_for(algo)
    }

    /// Where the time went since the last call (and starts counting afresh).
    pub fn take_phases(&mut self) -> Phases {
        std::mem::take(&mut self.phases)
    }
    /// The star of TCP connections around rank 0 (gathers, barriers for tools).
    pub fn star(&mut self) -> &mut Star {
        &mut self.star
    }

    /// Writes `src` into the input buffer at `offset` (out-of-place collectives read it).
    pub fn write_input(&mut self, offset: usize, src: &[u8]) {
        assert!(
            offset + src.len() <= self.max_bytes,
            "outside the input buffer"
        );
        self.mem.write(offset, src);
    }
    /// A copy of `range` of the input buffer.
    pub fn read_input(&self, range: std::ops::Range<usize>) -> Vec<u8> {
        assert!(range.end <= self.max_bytes, "outside the input buffer");
        self.mem.read(range)
    }
    /// Writes `src` into the output buffer at `offset` (in-place collectives work on it alone).
    pub fn write_output(&mut self, offset: usize, src: &[u8]) {
        assert!(
            offset + src.len() <= self.max_bytes,
            "outside the output buffer"
        );
        self.mem.write(self.max_bytes + offset, src);
    }
    /// A copy of `range` of the output buffer.
    pub fn read_output(&self, range: std::ops::Range<usize>) -> Vec<u8> {
        assert!(range.end <= self.max_bytes, "outside the output buffer");
        let m = self.max_bytes;
        self.mem.read(m + range.start..m + range.end)
    }

    /// Refuses a communicator that an earlier failure broke.
    fn usable(&self) -> Result<()> {
        if self.broken {
            return Err(CollError::Failed(
                "an earlier collective failed: the communicator can no longer be used".into(),
            ));
        }
        Ok(())
    }

    fn check(&self, count: usize, dtype: DataType, in_bytes: usize) -> Result<usize> {
        self.usable()?;
        let bytes = count
            .checked_mul(dtype.size())
            .filter(|b| *b <= self.max_bytes && in_bytes <= self.max_bytes)
            .ok_or_else(|| {
                CollError::Usage(format!(
                    "{count} elements of {dtype} do not fit the communicator's buffers of {} \
                     bytes",
                    self.max_bytes
                ))
            })?;
        Ok(bytes)
    }

    /// The element range of rank `r`'s chunk of `count` elements.
    pub fn chunk_of(&self, count: usize, r: usize) -> std::ops::Range<usize> {
        chunk(count, self.world_size(), r)
    }

    /// Sum (or prod/min/max) of every rank's `count` elements; the result on every rank in the
    /// output. In place: the output is the input too; otherwise the input is copied to the output
    /// first.
    pub fn all_reduce(
        &mut self,
        dtype: DataType,
        op: RedOp,
        count: usize,
        in_place: bool,
    ) -> Result<()> {
        self.reduction(Coll::AllReduce, dtype, op, count, in_place)
    }

    /// Rank r ends with chunk r ([`Comm::chunk_of`]) of the reduction, at its place in the
    /// output (the rest of the output holds partial sums).
    pub fn reduce_scatter(
        &mut self,
        dtype: DataType,
        op: RedOp,
        count: usize,
        in_place: bool,
    ) -> Result<()> {
        self.reduction(Coll::ReduceScatter, dtype, op, count, in_place)
    }

    /// All-reduce and reduce-scatter: out of place, the input is first copied to the output,
    /// where the ring reduces.
    fn reduction(
        &mut self,
        coll: Coll,
        dtype: DataType,
        op: RedOp,
        count: usize,
        in_place: bool,
    ) -> Result<()> {
        let bytes = self.check(count, dtype, 0)?;
        if !in_place {
            self.copy_in(0..bytes, 0);
        }
        if self.algo_for(coll, bytes) == Algo::Rd {
            self.run_rd(dtype, op, count)?;
        } else {
            self.run_coll(coll, dtype, op, count)?;
        }
        if op == RedOp::Avg {
            // The ring summed; the average is that sum over the ranks, where the result is.
            let n = self.world_size();
            let result = match coll {
                Coll::ReduceScatter => self.chunk_of(count, self.rank()),
                Coll::Reduce { root } if root != self.rank() => 0..0,
                _ => 0..count,
            };
            let s = dtype.size();
            let at = result.start * s..result.end * s;
            let mut sum = self.read_output(at.clone());
            kernels::divide(dtype, &mut sum, n);
            self.write_output(at.start, &sum);
        }
        Ok(())
    }

    /// Every rank's chunk r ends on every rank. Rank r's contribution is chunk r of the output
    /// (in place) or the first elements of its input (out of place).
    pub fn all_gather(&mut self, dtype: DataType, count: usize, in_place: bool) -> Result<()> {
        self.check(count, dtype, 0)?;
        if !in_place {
            let c = self.chunk_of(count, self.rank());
            let s = dtype.size();
            self.copy_in(0..c.len() * s, c.start * s);
        }
        self.run_coll(Coll::AllGather, dtype, RedOp::Sum, count)
    }

    /// Root's `count` elements to every rank's output (the root's from its input when out of
    /// place).
    pub fn broadcast(
        &mut self,
        dtype: DataType,
        count: usize,
        root: usize,
        in_place: bool,
    ) -> Result<()> {
        self.rooted_spread(Coll::Broadcast { root }, dtype, count, in_place)
    }

    /// Broadcast and scatter: out of place, the root's input is first copied to its output,
    /// which the ring reads.
    fn rooted_spread(
        &mut self,
        coll: Coll,
        dtype: DataType,
        count: usize,
        in_place: bool,
    ) -> Result<()> {
        let bytes = self.check(count, dtype, 0)?;
        let root = coll.root().expect("a rooted collective");
        self.check_root(root)?;
        if !in_place && self.rank() == root {
            self.copy_in(0..bytes, 0);
        }
        self.run_coll(coll, dtype, RedOp::Sum, count)
    }

    /// Sum (or prod/min/max) of every rank's `count` elements into the root's output (the other
    /// ranks' outputs hold partial results). In place: the output is the input too.
    pub fn reduce(
        &mut self,
        dtype: DataType,
        op: RedOp,
        count: usize,
        root: usize,
        in_place: bool,
    ) -> Result<()> {
        self.check_root(root)?;
        self.reduction(Coll::Reduce { root }, dtype, op, count, in_place)
    }

    /// Block r ([`Comm::block_of`]) of every rank r ends at its place in the root's output.
    /// Rank r's block is block r of its output (in place) or the first elements of its input
    /// (out of place); elements past the last block take no part.
    pub fn gather(
        &mut self,
        dtype: DataType,
        count: usize,
        root: usize,
        in_place: bool,
    ) -> Result<()> {
        self.check(count, dtype, 0)?;
        self.check_root(root)?;
        if !in_place {
            let b = self.block_of(count, self.rank());
            let s = dtype.size();
            self.copy_in(0..b.len() * s, b.start * s);
        }
        self.run_coll(Coll::Gather { root }, dtype, RedOp::Sum, count)
    }

    /// The root's block r ends at its place in rank r's output. The root's blocks are its input
    /// (out of place) or its output (in place).
    pub fn scatter(
        &mut self,
        dtype: DataType,
        count: usize,
        root: usize,
        in_place: bool,
    ) -> Result<()> {
        self.rooted_spread(Coll::Scatter { root }, dtype, count, in_place)
    }

    /// Block j of rank i's input ends as block i of rank j's output, blocks of `count / n`
    /// elements. In place, the output's blocks are sent from a copy in the input buffer. The
    /// direct exchange ([`Algo::Direct`], or [`Algo::Auto`] from three ranks) writes each block to
    /// its owner over links to every rank, made by the first all-to-all (every rank calls it at
    /// the same time); the ring relays them, which needs [`CommOpts::scratch`] for the blocks in
    /// transit (see [`schedule`]).
    pub fn all_to_all(&mut self, dtype: DataType, count: usize, in_place: bool) -> Result<()> {
        let bytes = self.check(count, dtype, 0)?;
        let (n, rank, s, m) = (self.world_size(), self.rank(), dtype.size(), self.max_bytes);
        let direct = self.algo_for(Coll::AllToAll, bytes) == Algo::Direct;
        if n > 2 && !direct && !self.scratch {
            return Err(CollError::Usage(
                "all-to-all on the ring needs the communicator's scratch area \
                 (CommOpts::scratch)"
                    .into(),
            ));
        }
        if in_place {
            let out = self.mem.read(m..m + bytes);
            self.mem.write(0, &out);
        }
        // Our own block stays here.
        let b = self.block_of(count, rank);
        self.copy_in(b.start * s..b.end * s, b.start * s);
        if n == 1 {
            return Ok(());
        }
        let (plans, via) = if direct {
            (self.direct_plans(dtype, count)?, Links::Mesh)
        } else {
            (self.plans(Coll::AllToAll, dtype, count, m)?, Links::Ring)
        };
        self.execute_on(
            Job {
                coll: Coll::AllToAll,
                plans: &plans,
                src_off: 0,
                dst_off: 0,
                dtype,
                op: RedOp::Sum,
            },
            via,
        )
    }

    /// The element range of block `j` of `count` elements (gather, scatter, all-to-all).
    pub fn block_of(&self, count: usize, j: usize) -> std::ops::Range<usize> {
        schedule::block(count, self.world_size(), j)
    }

    fn check_root(&self, root: usize) -> Result<()> {
        if root >= self.world_size() {
            return Err(CollError::Usage(format!(
                "root {root} is not a rank of a world of {}",
                self.world_size()
            )));
        }
        Ok(())
    }

    /// Sends `count` elements of the input to the right neighbour and receives the left
    /// neighbour's into the output (out of place only).
    pub fn sendrecv(&mut self, dtype: DataType, count: usize) -> Result<()> {
        let bytes = self.check(count, dtype, 0)?;
        if self.world_size() == 1 {
            self.copy_in(0..bytes, 0);
            return Ok(());
        }
        let plans = self.plans(Coll::SendRecv, dtype, count, bytes)?;
        self.execute(Job {
            coll: Coll::SendRecv,
            plans: &plans,
            src_off: 0,
            dst_off: self.max_bytes,
            dtype,
            op: RedOp::Sum,
        })
    }

    /// Every rank waits for all (over TCP).
    pub fn barrier(&mut self) -> Result<()> {
        self.star.barrier()
    }

    /// Ends the job cleanly: a last barrier, so that no rank tears its QPs down while a
    /// neighbour still talks to them.
    pub fn finish(mut self) -> Result<()> {
        self.star.barrier()
    }

    fn copy_in(&mut self, from: std::ops::Range<usize>, to: usize) {
        let m = self.max_bytes;
        let bytes = self.mem.read(from);
        self.mem.write(m + to, &bytes);
    }

    /// The plan of each channel of the ring for `coll` on `count` elements (all-to-all's
    /// regions `stride` bytes apart, see [`schedule::plan_in`]).
    fn plans(&self, coll: Coll, dtype: DataType, count: usize, stride: usize) -> Result<Vec<Plan>> {
        let ring = self.ring.as_ref();
        let slot = ring.map_or(usize::MAX, |r| r.slot_bytes);
        let of = self.channels();
        (0..of)
            .map(|index| {
                let ch = schedule::Channel { index, of };
                let (rank, n, s) = (self.rank(), self.world_size(), dtype.size());
                schedule::plan_channel(coll, rank, n, count, s, slot, stride, ch)
                    .map_err(CollError::Usage)
            })
            .collect()
    }

    fn run_coll(&mut self, coll: Coll, dtype: DataType, op: RedOp, count: usize) -> Result<()> {
        if self.world_size() == 1 {
            return Ok(());
        }
        let plans = self.plans(coll, dtype, count, count * dtype.size())?;
        let m = self.max_bytes;
        self.execute(Job {
            coll,
            plans: &plans,
            src_off: m,
            dst_off: m,
            dtype,
            op,
        })
    }

    /// Runs a job on the ring; a failure breaks the communicator and is told to every rank.
    fn execute(&mut self, job: Job<'_>) -> Result<()> {
        self.execute_on(job, Links::Ring)
    }

    /// Runs a job on the links `via`; a failure breaks the communicator and is told to every
    /// rank.
    fn execute_on(&mut self, job: Job<'_>, via: Links) -> Result<()> {
        let r = self.pump(job, via);
        if let Err(e) = &r {
            self.broken = true;
            // Rank 0 may already know better who is gone (a closed socket): ask it briefly —
            // unless our own link is down, when we are the cause and it can only blame us.
            let ours = self.ring.as_ref().and_then(Ring::port_down).is_some();
            let deadline = Instant::now() + Duration::from_secs(if ours { 0 } else { 2 });
            while Instant::now() < deadline {
                if let Err(better @ CollError::RankGone { .. }) = self.star.check_alive() {
                    return Err(better);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            self.star.abort(e);
        }
        r
    }

    fn neighbour(&self, k: isize) -> &RankRecord {
        let n = self.world_size();
        &self.star.table()[schedule::ring_offset(self.rank(), n, k)]
    }
}

/// The extent of the destination the plans touch (for tracing).
fn self_len(plans: &[Plan]) -> usize {
    plans
        .iter()
        .flat_map(|p| {
            p.recvs
                .iter()
                .map(|m| m.piece.range.end)
                .chain(p.sends.iter().map(|m| m.piece.range.end))
        })
        .max()
        .unwrap_or(0)
}

fn post_recvs(qp: &Qp, wr_id: u64, n: usize) -> Result<()> {
    let wrs: Vec<RecvWr<'_>> = (0..n).map(|_| RecvWr { wr_id, sges: &[] }).collect();
    qp.post_recv(&wrs).map_err(verbs("ibv_post_recv"))
}
