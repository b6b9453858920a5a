//! The communicator: this rank's place in the ring, its two RC QPs (one to each neighbour), its
//! registered buffers, and the engine that runs a [`Plan`] on them.
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
//! **Safety of the buffers.** The destination buffer is registered for local access only: only
//! our own NIC reads it (for our writes), and the plan orders every overwrite of a range after the
//! completion of every send reading it. Between collectives nothing is posted on it, so
//! [`Comm::write_input`] and [`Comm::read_output`] copy in and out of it. The slots, which the
//! left neighbour writes, are read only between a message's completion and its credit — the
//! window in which the protocol forbids the neighbour to touch them — and never handed out.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::affinity;
use crate::coll::bootstrap::{self, CollError, RankRecord, Result, Star, PROTOCOL_VERSION};
use crate::coll::env::{pick_device, RankInfo};
use crate::coll::kernels::{self, DataType, RedOp};
use crate::coll::schedule::{self, chunk, Action, Coll, Plan, RecvMsg};
use crate::connect::{self, ConnectOpts, Endpoint};
use crate::verbs::{
    AccessFlags, CompChannel, Context, Cq, DeviceList, Gid, Mr, Payload, Pd, Qp, QpCaps,
    QpInitAttr, QpType, RecvWr, RemoteBuf, SendOp, SendWr, VerbsError, WorkCompletion,
};

/// How to build a communicator.
#[derive(Debug, Clone)]
pub struct CommOpts {
    /// Devices to spread local ranks over (`-d rxe0,rxe1`); empty: the first device.
    pub devices: Vec<String>,
    pub ib_port: u8,
    pub gid_index: Option<u32>,
    /// The largest message (bytes) any collective will be given.
    pub max_bytes: usize,
    /// Bytes per receive slot: the pipeline's piece size.
    pub slot_bytes: usize,
    /// Receive slots (= credits, = pieces in flight per link).
    pub nslots: usize,
    /// How long the rendezvous may take.
    pub bootstrap_timeout: Duration,
    /// How long a rank waits without any progress before it declares its neighbour gone.
    pub peer_timeout: Duration,
    /// QP ack timeout exponent (`-u`): 4.096 µs × 2^n.
    pub ack_timeout: u8,
    /// CPU to pin this rank's thread to.
    pub cpu: Option<usize>,
    /// A local run (`--np`): the base name of the launcher's message queues, which then carry
    /// the rendezvous and the star instead of TCP (see [`super::mqlink`]).
    pub local_queues: Option<String>,
}

impl Default for CommOpts {
    fn default() -> Self {
        CommOpts {
            devices: Vec::new(),
            ib_port: 1,
            gid_index: None,
            max_bytes: 1 << 20,
            slot_bytes: 128 << 10,
            nslots: 8,
            bootstrap_timeout: Duration::from_secs(60),
            peer_timeout: Duration::from_secs(30),
            ack_timeout: 20,
            cpu: None,
            local_queues: None,
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

const WR_DATA: u64 = 1;
const WR_CREDIT: u64 = 2;
const WR_RECV_DATA: u64 = 3;
const WR_RECV_CREDIT: u64 = 4;

/// The ring's verbs objects and the state that persists between collectives.
struct Ring {
    ctx: Context,
    /// Idle ranks sleep on it instead of spinning (see `pump`).
    channel: CompChannel,
    cq: Cq,
    left: Qp,
    right: Qp,
    slots: Mr,
    /// The right neighbour's slots: where our writes go.
    peer_slots: RemoteBuf,
    slot_bytes: usize,
    nslots: usize,
    sq_depth: usize,
    /// Messages sent to the right / received from the left since the ring was built.
    tx_seq: u64,
    rx_seq: u64,
    credits: usize,
    /// Messages from the left that have arrived (immediate, length) and wait to be applied.
    arrived: VecDeque<(u32, u32)>,
    sq_right: usize,
    sq_left: usize,
}

/// The memory the collectives work on: `[input | output]`, each `max_bytes`.
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

/// A communicator: see the module documentation.
pub struct Comm {
    info: RankInfo,
    star: Star,
    ring: Option<Ring>,
    mem: Memory,
    max_bytes: usize,
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

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

impl Comm {
    /// Builds the communicator: opens this rank's device, creates the QPs and slots, runs the
    /// rendezvous with rank 0, connects the QPs to both neighbours and waits for every rank.
    pub fn init(info: RankInfo, opts: &CommOpts) -> Result<Comm> {
        if opts.max_bytes == 0 || opts.slot_bytes < 8 || opts.nslots == 0 {
            return Err(CollError::Usage(format!(
                "buffers of {} bytes, slots of {} bytes, {} slots: each must be at least 1 \
                 (slots at least 8 bytes)",
                opts.max_bytes, opts.slot_bytes, opts.nslots
            )));
        }
        if let Some(cpu) = opts.cpu {
            affinity::pin_current_thread(cpu).map_err(CollError::Failed)?;
        }
        let mut record = RankRecord {
            rank: info.rank,
            world_size: info.world_size,
            version: PROTOCOL_VERSION,
            host: hostname(),
            pid: std::process::id(),
            device: "-".into(),
            cpu: opts.cpu.map(|c| c as u32),
            lid: 0,
            gid: Gid::ZERO,
            mtu: 0,
            left_qpn: 0,
            left_psn: 0,
            right_qpn: 0,
            right_psn: 0,
            slots: RemoteBuf::default(),
            slot_bytes: 0,
            nslots: 0,
        };
        if info.world_size == 1 {
            return Ok(Comm {
                info,
                star: Star::single(record),
                ring: None,
                mem: Memory::Heap(vec![0; 2 * opts.max_bytes]),
                max_bytes: opts.max_bytes,
                peer_timeout: opts.peer_timeout,
                broken: false,
                tracer: None,
                phases: Phases::default(),
                _pd: None,
            });
        }
        let master = match (&opts.local_queues, &info.master) {
            (Some(_), _) => None,
            (None, Some(m)) => Some(m.clone()),
            (None, None) => {
                return Err(CollError::Usage(
                    "no master address for the rendezvous".into(),
                ))
            }
        };

        // The device of this local rank, its port and GID.
        let dev = pick_device(&opts.devices, info.local_rank);
        let ctx = DeviceList::open(dev).map_err(verbs("opening the RDMA device"))?;
        let port = ctx.query_port(opts.ib_port).map_err(verbs(format!(
            "querying port {} of {}",
            opts.ib_port,
            ctx.name()
        )))?;
        let gid = ctx
            .choose_gid(opts.ib_port, opts.gid_index)
            .map_err(verbs("choosing the GID"))?;
        let pd = ctx.alloc_pd().map_err(verbs("ibv_alloc_pd"))?;
        let sq_depth = 2 * opts.nslots + 16;
        let channel = ctx
            .create_comp_channel()
            .map_err(verbs("ibv_create_comp_channel"))?;
        let cq = ctx
            .create_cq((2 * sq_depth + 2 * opts.nslots + 8) as u32, Some(&channel))
            .map_err(verbs("ibv_create_cq"))?;
        let caps = QpCaps {
            max_send_wr: sq_depth as u32,
            max_recv_wr: opts.nslots as u32 + 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = |side: &str| {
            pd.create_qp(&QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                qp_type: QpType::Rc,
                caps,
                sq_sig_all: false,
            })
            .map_err(verbs(format!("creating the QP to the {side} neighbour")))
        };
        let left = qp("left")?;
        let right = qp("right")?;
        let slot_bytes = opts.slot_bytes;
        let slots = pd
            .reg_mr(
                opts.nslots * slot_bytes,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            )
            .map_err(verbs("registering the receive slots"))?;
        let data = pd
            .reg_mr(2 * opts.max_bytes, AccessFlags::LOCAL_WRITE)
            .map_err(verbs("registering the data buffer"))?;

        record.device = ctx.name().to_string();
        record.lid = port.lid;
        record.gid = gid.entry.gid;
        record.mtu = port.active_mtu.map_or(1024, |m| m.bytes());
        record.left_qpn = left.qpn();
        record.left_psn = connect::random_psn();
        record.right_qpn = right.qpn();
        record.right_psn = connect::random_psn();
        record.slots = slots.remote(0..slots.len()).map_err(verbs("the slots"))?;
        record.slot_bytes = slot_bytes as u32;
        record.nslots = opts.nslots as u32;

        let mut star = match (&opts.local_queues, &master) {
            (Some(base), _) => {
                bootstrap::rendezvous_mq(record.clone(), base, opts.bootstrap_timeout)?
            }
            (None, Some(m)) => {
                bootstrap::rendezvous(record.clone(), (&m.0, m.1), opts.bootstrap_timeout)?
            }
            (None, None) => unreachable!("checked above"),
        };
        let n = info.world_size as usize;
        let r = info.rank as usize;
        let t = star.table().to_vec();
        let (lrec, rrec) = (
            &t[schedule::ring_offset(r, n, -1)],
            &t[schedule::ring_offset(r, n, 1)],
        );
        if rrec.slot_bytes as usize != slot_bytes || rrec.nslots as usize != opts.nslots {
            let e = CollError::Bootstrap(format!(
                "{} has {} slots of {} bytes, we have {} of {}: give every rank the same slot \
                 options",
                rrec.who(),
                rrec.nslots,
                rrec.slot_bytes,
                opts.nslots,
                slot_bytes
            ));
            star.abort(&e);
            return Err(e);
        }
        let connect_to = |qp: &Qp, my_psn: u32, peer: &RankRecord, peer_qpn: u32, peer_psn| {
            let mtu = record.mtu.min(peer.mtu);
            let o = ConnectOpts {
                port_num: opts.ib_port,
                sgid_index: gid.entry.index as u8,
                path_mtu: crate::verbs::Mtu::from_bytes(mtu).unwrap_or(crate::verbs::Mtu::Mtu1024),
                access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                timeout: opts.ack_timeout,
                ..Default::default()
            };
            let local = Endpoint {
                lid: record.lid,
                qpn: qp.qpn(),
                psn: my_psn,
                gid: record.gid,
            };
            let remote = Endpoint {
                lid: peer.lid,
                qpn: peer_qpn,
                psn: peer_psn,
                gid: peer.gid,
            };
            connect::bring_up(qp, &local, &remote, &o)
                .map_err(verbs(format!("connecting to {}", peer.who())))
        };
        let up = connect_to(&left, record.left_psn, lrec, lrec.right_qpn, lrec.right_psn)
            .and_then(|_| connect_to(&right, record.right_psn, rrec, rrec.left_qpn, rrec.left_psn));
        // Receives need a QP past RESET; every one is posted before the barrier, after which the
        // neighbours may write.
        let up = up
            .and_then(|_| post_recvs(&left, WR_RECV_DATA, opts.nslots))
            .and_then(|_| post_recvs(&right, WR_RECV_CREDIT, opts.nslots));
        if let Err(e) = up {
            star.abort(&e);
            return Err(e);
        }
        // Nobody writes before every QP is ready to receive.
        star.barrier()?;
        let peer_slots = rrec.slots;
        Ok(Comm {
            info,
            star,
            ring: Some(Ring {
                ctx,
                channel,
                cq,
                left,
                right,
                slots,
                peer_slots,
                slot_bytes,
                nslots: opts.nslots,
                sq_depth,
                tx_seq: 0,
                rx_seq: 0,
                credits: opts.nslots,
                arrived: VecDeque::new(),
                sq_right: 0,
                sq_left: 0,
            }),
            mem: Memory::Registered(data),
            max_bytes: opts.max_bytes,
            peer_timeout: opts.peer_timeout,
            broken: false,
            tracer: None,
            phases: Phases::default(),
            _pd: Some(pd),
        })
    }

    pub fn rank(&self) -> usize {
        self.info.rank as usize
    }
    pub fn world_size(&self) -> usize {
        self.info.world_size as usize
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
    /// QPNs of the QPs to the left and right neighbour.
    pub fn qpns(&self) -> Option<(u32, u32)> {
        self.ring.as_ref().map(|r| (r.left.qpn(), r.right.qpn()))
    }
    /// Observes every message applied (narration); `None` stops.
    pub fn set_tracer(&mut self, t: Option<Tracer>) {
        self.tracer = t;
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

    fn check(&self, count: usize, dtype: DataType, in_bytes: usize) -> Result<usize> {
        if self.broken {
            return Err(CollError::Failed(
                "an earlier collective failed: the communicator can no longer be used".into(),
            ));
        }
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
        let bytes = self.check(count, dtype, 0)?;
        if !in_place {
            self.copy_in(0..bytes, 0);
        }
        self.run_coll(Coll::AllReduce, dtype, op, count)
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
        let bytes = self.check(count, dtype, 0)?;
        if !in_place {
            self.copy_in(0..bytes, 0);
        }
        self.run_coll(Coll::ReduceScatter, dtype, op, count)
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
        let bytes = self.check(count, dtype, 0)?;
        if root >= self.world_size() {
            return Err(CollError::Usage(format!(
                "root {root} is not a rank of a world of {}",
                self.world_size()
            )));
        }
        if !in_place && self.rank() == root {
            self.copy_in(0..bytes, 0);
        }
        self.run_coll(Coll::Broadcast { root }, dtype, RedOp::Sum, count)
    }

    /// Sends `count` elements of the input to the right neighbour and receives the left
    /// neighbour's into the output (out of place only).
    pub fn sendrecv(&mut self, dtype: DataType, count: usize) -> Result<()> {
        let bytes = self.check(count, dtype, 0)?;
        if self.world_size() == 1 {
            self.copy_in(0..bytes, 0);
            return Ok(());
        }
        let plan = self.plan(Coll::SendRecv, dtype, count)?;
        self.execute(Coll::SendRecv, &plan, 0, self.max_bytes, dtype, RedOp::Sum)
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

    fn plan(&self, coll: Coll, dtype: DataType, count: usize) -> Result<Plan> {
        let slot = self.ring.as_ref().map_or(usize::MAX, |r| r.slot_bytes);
        schedule::plan(
            coll,
            self.rank(),
            self.world_size(),
            count,
            dtype.size(),
            slot,
        )
        .map_err(CollError::Usage)
    }

    fn run_coll(&mut self, coll: Coll, dtype: DataType, op: RedOp, count: usize) -> Result<()> {
        if self.world_size() == 1 {
            return Ok(());
        }
        let plan = self.plan(coll, dtype, count)?;
        let m = self.max_bytes;
        self.execute(coll, &plan, m, m, dtype, op)
    }

    /// Runs `plan`: sends read `src_off + range`, receives land at `dst_off + range`.
    fn execute(
        &mut self,
        coll: Coll,
        plan: &Plan,
        src_off: usize,
        dst_off: usize,
        dtype: DataType,
        op: RedOp,
    ) -> Result<()> {
        let r = self.pump(coll, plan, src_off, dst_off, dtype, op);
        if let Err(e) = &r {
            self.broken = true;
            // Rank 0 may already know better who is gone (a closed socket): ask it briefly.
            let deadline = Instant::now() + Duration::from_secs(2);
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

    #[allow(clippy::too_many_arguments)]
    fn pump(
        &mut self,
        coll: Coll,
        plan: &Plan,
        src_off: usize,
        dst_off: usize,
        dtype: DataType,
        op: RedOp,
    ) -> Result<()> {
        let left_who = self.neighbour(-1).who();
        let right_who = self.neighbour(1).who();
        let left_rank = self.neighbour(-1).rank;
        let right_rank = self.neighbour(1).rank;
        let peer_timeout = self.peer_timeout;
        let Comm {
            ring,
            mem,
            star,
            tracer,
            phases,
            ..
        } = self;
        phases.collectives += 1;
        let ring = ring
            .as_mut()
            .expect("a ring when the world has more than one rank");
        let Memory::Registered(data) = mem else {
            unreachable!("a ring has registered memory")
        };
        let (nsend, nrecv) = (plan.sends.len(), plan.recvs.len());
        let (mut posted, mut completed, mut processed) = (0usize, 0usize, 0usize);
        let mut wcs = WorkCompletion::array::<32>();
        let mut last_progress = Instant::now();
        let mut last_check = Instant::now();
        let mut spins = 0u32;
        let mut armed = false;
        let mut t = Instant::now();
        // lap(slot): charge the time since the last lap to `slot`.
        let lap = |t: &mut Instant, slot: &mut Duration| {
            let now = Instant::now();
            *slot += now - *t;
            *t = now;
        };
        while processed < nrecv || completed < nsend {
            let mut progress = false;
            // 1. Post what the credits and the dependencies allow.
            while posted < nsend && ring.credits > 0 && ring.sq_right < ring.sq_depth {
                let m = &plan.sends[posted];
                if m.after_recv.is_some_and(|r| r >= processed) {
                    break;
                }
                let slot = (ring.tx_seq % ring.nslots as u64) as u32;
                let len = m.range.len() as u32;
                let remote = ring
                    .peer_slots
                    .slice(slot * ring.slot_bytes as u32, len)
                    .ok_or_else(|| {
                        CollError::Failed(format!("a piece of {len} bytes does not fit a slot"))
                    })?;
                let sge = data
                    .sge(src_off + m.range.start..src_off + m.range.end)
                    .map_err(verbs("the source of a write"))?;
                let sges = [sge];
                let wr = SendWr::new(
                    WR_DATA,
                    SendOp::WriteWithImm(remote, ring.tx_seq as u32),
                    Payload::Sges(&sges),
                );
                ring.right.post_send(&[wr]).map_err(verbs(format!(
                    "posting the RDMA WRITE WITH IMM to {right_who}"
                )))?;
                ring.tx_seq += 1;
                ring.credits -= 1;
                ring.sq_right += 1;
                posted += 1;
                phases.writes += 1;
                progress = true;
            }
            lap(&mut t, &mut phases.post);
            // 2. Apply what has arrived, in order, and hand the slots back.
            while processed < nrecv && ring.sq_left < ring.sq_depth {
                let Some(&(imm, len)) = ring.arrived.front() else {
                    break;
                };
                let m = &plan.recvs[processed];
                if m.after_send.is_some_and(|s| s >= completed) {
                    break;
                }
                ring.arrived.pop_front();
                if imm != ring.rx_seq as u32 || len as usize != m.range.len() {
                    return Err(CollError::Failed(format!(
                        "{left_who} sent message {imm} of {len} bytes where message {} of {} \
                         bytes was due: do all ranks run the same collectives with the same \
                         sizes?",
                        ring.rx_seq as u32,
                        m.range.len()
                    )));
                }
                let at = (ring.rx_seq % ring.nslots as u64) as usize * ring.slot_bytes;
                let src = ring
                    .slots
                    .to_vec(at..at + len as usize)
                    .map_err(verbs("reading a slot"))?;
                let out = dst_off + m.range.start;
                match m.action {
                    Action::Reduce => {
                        let mut dst = data
                            .to_vec(out..dst_off + m.range.end)
                            .map_err(verbs("reading the destination"))?;
                        kernels::reduce(dtype, op, &mut dst, &src).map_err(CollError::Failed)?;
                        data.write(out, &dst)
                            .map_err(verbs("writing the destination"))?;
                    }
                    Action::Copy => data
                        .write(out, &src)
                        .map_err(verbs("writing the destination"))?,
                }
                ring.rx_seq += 1;
                processed += 1;
                phases.applied_bytes += u64::from(len);
                let credit = SendWr::new(
                    WR_CREDIT,
                    SendOp::SendWithImm(ring.rx_seq as u32),
                    Payload::None,
                );
                ring.left
                    .post_send(&[credit])
                    .map_err(verbs(format!("posting a credit to {left_who}")))?;
                ring.sq_left += 1;
                progress = true;
                if let Some(t) = tracer.as_mut() {
                    t(&TraceEvent {
                        coll,
                        msg: m,
                        buffer: &data
                            .to_vec(dst_off..dst_off + self_len(plan))
                            .map_err(verbs("reading the destination"))?,
                    });
                }
            }
            lap(&mut t, &mut phases.apply);
            // 3. Reap completions.
            let n = ring.cq.poll(&mut wcs).map_err(verbs("ibv_poll_cq"))?;
            for wc in &wcs[..n] {
                if !wc.is_success() {
                    let (who, rank) = if wc.qp_num() == ring.left.qpn() {
                        (&left_who, left_rank)
                    } else {
                        (&right_who, right_rank)
                    };
                    let err = wc.ok().expect_err("a failed completion");
                    return Err(CollError::RankGone {
                        rank,
                        who: who.clone(),
                        detail: format!("a work request on the QP to it failed: {err}"),
                    });
                }
                match wc.wr_id() {
                    WR_DATA => {
                        completed += 1;
                        ring.sq_right -= 1;
                    }
                    WR_CREDIT => ring.sq_left -= 1,
                    WR_RECV_DATA => {
                        let imm = wc.imm_data().ok_or_else(|| {
                            CollError::Failed(format!("{left_who} sent data without an immediate"))
                        })?;
                        ring.arrived.push_back((imm, wc.byte_len()));
                        post_recvs(&ring.left, WR_RECV_DATA, 1)?;
                    }
                    WR_RECV_CREDIT => {
                        ring.credits += 1;
                        post_recvs(&ring.right, WR_RECV_CREDIT, 1)?;
                    }
                    other => return Err(CollError::Failed(format!("unknown completion {other}"))),
                }
            }
            lap(&mut t, &mut phases.poll);
            // 4. Bounded waits: no progress for the peer timeout is a gone neighbour; the star
            // says at once when a rank died.
            if n > 0 || progress {
                last_progress = Instant::now();
                armed = false;
                spins = 0;
                continue;
            }
            spins = spins.wrapping_add(1);
            // Nothing to do: after a short spin, sleep until the CQ has a completion. A spinning
            // rank would hold a CPU that another rank, or SoftRoCE's kernel work, needs — with
            // 4 ranks on 2 cores every hop of the ring would wait for a scheduler time slice.
            // Arm, poll once more (a completion may have come before the arming), then wait.
            if spins >= SPINS_BEFORE_SLEEP {
                if !armed {
                    ring.cq
                        .req_notify(false)
                        .map_err(verbs("ibv_req_notify_cq"))?;
                    armed = true;
                    continue;
                }
                phases.sleeps += 1;
                let slept = ring.channel.wait(&ring.cq, SLEEP_SLICE);
                lap(&mut t, &mut phases.idle);
                match slept {
                    Ok(()) | Err(VerbsError::Timeout { .. }) => {}
                    Err(e) => return Err(verbs("waiting for a completion event")(e)),
                }
                armed = false;
                let now = Instant::now();
                if now.duration_since(last_check) >= Duration::from_millis(20) {
                    last_check = now;
                    star.check_alive()?;
                }
                if now.duration_since(last_progress) >= peer_timeout {
                    let (rank, who, waiting) = if processed < nrecv && ring.arrived.is_empty() {
                        (left_rank, left_who.clone(), "data")
                    } else {
                        (right_rank, right_who.clone(), "credits or acknowledgements")
                    };
                    return Err(CollError::RankGone {
                        rank,
                        who,
                        detail: format!(
                            "no {waiting} from it for {:.0} s (the peer timeout)",
                            peer_timeout.as_secs_f64()
                        ),
                    });
                }
                continue;
            }
            std::hint::spin_loop();
            lap(&mut t, &mut phases.idle);
        }
        Ok(())
    }
}

/// The extent of the destination a plan touches (for tracing).
fn self_len(plan: &Plan) -> usize {
    plan.recvs
        .iter()
        .map(|m| m.range.end)
        .chain(plan.sends.iter().map(|m| m.range.end))
        .max()
        .unwrap_or(0)
}

fn post_recvs(qp: &Qp, wr_id: u64, n: usize) -> Result<()> {
    let wrs: Vec<RecvWr<'_>> = (0..n).map(|_| RecvWr { wr_id, sges: &[] }).collect();
    qp.post_recv(&wrs).map_err(verbs("ibv_post_recv"))
}
