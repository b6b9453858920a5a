//! [`Comm::init`]: a rank's device, QPs and slots, the rendezvous, the connections.

use super::channels::LaneKind;
use super::*;
use crate::bootstrap::{place, Place, Via, NO_DEVICE};

impl Comm {
    /// Builds the communicator: the rendezvous' first round with rank 0 tells this rank its
    /// local rank (its launcher's, or its place among the ranks of its host); then it pins
    /// itself, opens the device of that local rank, creates the QPs and slots, sends its
    /// endpoints in the second round, connects the QPs to both neighbours and waits for every
    /// rank.
    pub fn init(info: RankInfo, opts: &CommOpts) -> Result<Comm> {
        check_opts(opts)?;
        let mut record = own_record(&info, opts);
        if info.world_size == 1 {
            return single(info, record, opts);
        }
        let master = master_of(&info, opts)?;
        let mut star = rendezvous(&record, opts, master)?;
        let local = settle(&mut record, star.place(), opts).and_then(|local| {
            star.complete(record.clone())?;
            Ok(local)
        });
        let local = match local {
            Ok(l) => l,
            Err(e) => {
                star.abort(&e);
                return Err(e);
            }
        };
        let n = info.world_size as usize;
        let r = info.rank as usize;
        let t = star.table().to_vec();
        let (lrec, rrec) = (
            &t[schedule::ring_offset(r, n, -1)],
            &t[schedule::ring_offset(r, n, 1)],
        );
        let up = check_slots(rrec, opts)
            .and_then(|_| local.connect(&record, lrec, rrec))
            .and_then(|_| {
                let (pair, port) = (&local.pair, &local.port);
                super::channels::connect_more(&mut star, pair, port, (&record, lrec, rrec))
            });
        let peer_slots = match up {
            Ok(more) => std::iter::once(rrec.slots).chain(more).collect(),
            Err(e) => {
                star.abort(&e);
                return Err(e);
            }
        };
        // Nobody writes before every QP is ready to receive.
        star.barrier()?;
        Ok(local.into_comm(info, star, peer_slots, opts))
    }
}

/// Once this rank knows its `place`: pins it ([`CommOpts::pin`]), opens the device of its
/// local rank with the PD, CQ, QPs and slots, and fills in `record`'s CPU and endpoints.
fn settle(record: &mut RankRecord, place: Place, opts: &CommOpts) -> Result<Local> {
    let dev = pick_device(&opts.devices, place.local_rank);
    if let Some(cpu) = opts.pin.cpu(dev, place.local_rank) {
        affinity::pin_current_thread(cpu).map_err(CollError::Failed)?;
        record.cpu = Some(cpu as u32);
    }
    let local = Local::open(dev, opts)?;
    local.describe(record, opts)?;
    Ok(local)
}

/// Sizes the communicator cannot work with.
fn check_opts(opts: &CommOpts) -> Result<()> {
    super::channels::check(opts.channels)?;
    if opts.max_bytes == 0 || opts.slot_bytes < 8 || opts.nslots == 0 {
        return Err(CollError::Usage(format!(
            "buffers of {} bytes, slots of {} bytes, {} slots: each must be at least 1 \
             (slots at least 8 bytes)",
            opts.max_bytes, opts.slot_bytes, opts.nslots
        )));
    }
    Ok(())
}

/// Registered memory is pinned and counts against RLIMIT_MEMLOCK, unless the process may lock
/// any amount (`CAP_IPC_LOCK`, which root has): a run whose `bytes` cannot fit is refused before
/// registering, naming the limit and what to change, rather than failing in `ibv_reg_mr`.
pub(super) fn check_memlock(bytes: usize) -> Result<()> {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let Ok((soft, _)) = getrlimit(Resource::RLIMIT_MEMLOCK) else {
        return Ok(());
    };
    if soft == RLIM_INFINITY || bytes as u64 <= soft || may_lock_any_amount() {
        return Ok(());
    }
    Err(CollError::Usage(format!(
        "the buffers to register are {bytes} bytes (input and output of -e bytes each, plus \
         --slots x --slot-size per channel), more than the locked-memory limit of {} KiB (ulimit -l): give \
         a smaller -e or fewer or smaller slots, or raise the limit (`ulimit -l unlimited`, or \
         memlock in /etc/security/limits.conf)",
        soft / 1024
    )))
}

/// Whether this process has `CAP_IPC_LOCK` (bit 14 of `CapEff` in /proc/self/status).
fn may_lock_any_amount() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// This rank's bootstrap record before it has a device: who and where it is, with `opts`'
/// terms (lesson 16 meets its launcher's world with one).
pub fn own_record(info: &RankInfo, opts: &CommOpts) -> RankRecord {
    let (host, host_hash) = place::this_host();
    RankRecord {
        rank: info.rank,
        world_size: info.world_size,
        version: PROTOCOL_VERSION,
        host,
        host_hash,
        pid: std::process::id(),
        local_rank: info.local_rank,
        device: NO_DEVICE.into(),
        cpu: None,
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
        terms: super::channels::with_term(&opts.terms, opts.channels),
    }
}

/// A world of one rank: no ring, buffers on the heap. A device named by `-d` (or a GID index
/// asked for) is still opened and its port checked, as a rank of a larger world would, so a
/// typo fails here too; the record then names it.
fn single(info: RankInfo, mut record: RankRecord, opts: &CommOpts) -> Result<Comm> {
    let local_rank = info.local_rank.unwrap_or(0);
    let dev = pick_device(&opts.devices, local_rank);
    if let Some(cpu) = opts.pin.cpu(dev, local_rank) {
        affinity::pin_current_thread(cpu).map_err(CollError::Failed)?;
        record.cpu = Some(cpu as u32);
    }
    if !opts.devices.is_empty() || opts.gid_index.is_some() {
        let active = DeviceList::open_port(dev, opts.ib_port, opts.gid_index)
            .map_err(verbs("opening the RDMA device, its port and GID"))?;
        record.device = active.ctx.name().to_string();
    }
    let bytes = 2 * opts.max_bytes;
    let mut heap = Vec::new();
    heap.try_reserve_exact(bytes).map_err(|e| {
        CollError::Failed(format!(
            "cannot allocate the {bytes}-byte input and output buffers: {e}"
        ))
    })?;
    heap.resize(bytes, 0);
    Ok(Comm {
        info,
        star: Star::single(record),
        ring: None,
        partners: None,
        mesh: None,
        link_cfg: None,
        algo: opts.algo,
        mem: Memory::Heap(heap),
        max_bytes: opts.max_bytes,
        scratch: false,
        peer_timeout: opts.peer_timeout,
        broken: false,
        tracer: None,
        phases: Phases::default(),
        _pd: None,
    })
}

/// Rank 0's TCP address, or `None` when the launcher's message queues carry the rendezvous.
fn master_of(info: &RankInfo, opts: &CommOpts) -> Result<Option<(String, u16)>> {
    match (&opts.local_queues, &info.master) {
        (Some(_), _) => Ok(None),
        (None, Some(m)) => Ok(Some(m.clone())),
        (None, None) => Err(CollError::Usage(
            "no master address for the rendezvous".into(),
        )),
    }
}

/// Runs the rendezvous over the launcher's queues or TCP to rank 0: the star and the table.
fn rendezvous(record: &RankRecord, opts: &CommOpts, master: Option<(String, u16)>) -> Result<Star> {
    let via = match (&opts.local_queues, &master) {
        (Some(base), _) => Via::Queues(base),
        (None, Some(m)) => Via::Tcp((&m.0, m.1)),
        (None, None) => unreachable!("checked by master_of"),
    };
    bootstrap::rendezvous(record.clone(), via, opts.bootstrap_timeout)
}

/// Our writes land in the right neighbour's slots: they must be the size we send.
fn check_slots(rrec: &RankRecord, opts: &CommOpts) -> Result<()> {
    if rrec.slot_bytes as usize != opts.slot_bytes || rrec.nslots as usize != opts.nslots {
        return Err(CollError::Bootstrap(format!(
            "{} has {} slots of {} bytes, we have {} of {}: give every rank the same slot \
             options",
            rrec.who(),
            rrec.nslots,
            rrec.slot_bytes,
            opts.nslots,
            opts.slot_bytes
        )));
    }
    Ok(())
}

/// This rank's verbs objects, opened before the rendezvous and connected after it.
///
/// Fields drop in order, children before parents (each child also holds its parent alive).
struct Local {
    pair: Pair,
    data: Mr,
    pd: Pd,
    ctx: Context,
    port: PortCfg,
}

/// The verbs objects of a pair of links: per channel a QP from a peer (`left`: its data arrives,
/// our credits leave), a QP to a peer (`right`) and the slots the peer writes; one CQ and
/// completion channel for all. The ring's pair goes to two neighbours; a recursive-doubling
/// partner's both go to the partner (one channel); the direct all-to-all's lane d−1 to the ranks
/// d to the left and d to the right.
pub(super) struct Pair {
    pub(super) lanes: Vec<LaneQps>,
    pub(super) cq: Cq,
    pub(super) channel: CompChannel,
    pub(super) sq_depth: usize,
}

/// One channel's QPs and slots, before they are connected.
pub(super) struct LaneQps {
    pub(super) left: Qp,
    pub(super) right: Qp,
    pub(super) slots: Mr,
}

/// What connecting one more QP of this rank needs (kept for the links made after the ring's).
#[derive(Clone)]
pub(super) struct PortCfg {
    pub(super) attr: verbs_lab::verbs::PortAttr,
    pub(super) gid: verbs_lab::verbs::GidEntry,
    pub(super) ib_port: u8,
    pub(super) ack_timeout: u8,
    pub(super) slot_bytes: usize,
    pub(super) nslots: usize,
}

impl Pair {
    /// The CQ with its channel and, for each of `lanes` channels, one QP per direction and the
    /// receive slots, on `pd`; queues deeper than the device grants are refused first, naming
    /// what fits ([`super::channels::check_depths`]).
    pub(super) fn open(
        ctx: &Context,
        pd: &Pd,
        slot_bytes: usize,
        nslots: usize,
        (lanes, kind): (usize, LaneKind),
    ) -> Result<Pair> {
        let attr = ctx.query_device().map_err(verbs("ibv_query_device"))?;
        let limits = (attr.max_cqe, attr.max_qp_wr);
        super::channels::check_depths(ctx.name(), (lanes, nslots, kind), limits)?;
        let depths = super::channels::Depths::of(nslots, lanes);
        let sq_depth = depths.sq;
        let channel = ctx
            .create_comp_channel()
            .map_err(verbs("ibv_create_comp_channel"))?;
        let cq = ctx
            .create_cq(depths.cqe as u32, Some(&channel))
            .map_err(verbs("ibv_create_cq"))?;
        let caps = QpCaps {
            max_send_wr: sq_depth as u32,
            max_recv_wr: depths.rq as u32,
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
            .map_err(verbs(format!("creating the QP to the {side} peer")))
        };
        let lanes = (0..lanes)
            .map(|_| {
                let left = qp("left")?;
                let right = qp("right")?;
                let slots = pd
                    .reg_mr(
                        nslots * slot_bytes,
                        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                    )
                    .map_err(verbs("registering the receive slots"))?;
                Ok(LaneQps { left, right, slots })
            })
            .collect::<Result<_>>()?;
        Ok(Pair {
            lanes,
            cq,
            channel,
            sq_depth,
        })
    }

    /// Brings channel `lane`'s `left` up to the peer's QP `from` (QPN, PSN) and its `right` to
    /// the peer's QP `to`, then posts every receive: receives need a QP past RESET, and every
    /// one must be posted before the barrier after which the peers may write. `me` has our LID
    /// and GID; `psns` our first PSNs (left, right).
    pub(super) fn connect(
        &self,
        lane: usize,
        cfg: &PortCfg,
        me: &RankRecord,
        psns: (u32, u32),
        from: (&RankRecord, u32, u32),
        to: (&RankRecord, u32, u32),
    ) -> Result<()> {
        let l = &self.lanes[lane];
        connect_qp(&l.left, cfg, me, psns.0, from)?;
        connect_qp(&l.right, cfg, me, psns.1, to)?;
        post_recvs(&l.left, wr_id(WR_RECV_DATA, lane), cfg.nslots)?;
        post_recvs(&l.right, wr_id(WR_RECV_CREDIT, lane), cfg.nslots)
    }

    /// The link state over this pair, channel k writing into `peer_slots[k]`.
    pub(super) fn into_ring(self, ctx: Context, cfg: &PortCfg, peer_slots: Vec<RemoteBuf>) -> Ring {
        assert_eq!(peer_slots.len(), self.lanes.len(), "peer slots per channel");
        Ring {
            ctx,
            port: cfg.ib_port,
            channel: self.channel,
            cq: self.cq,
            lanes: self
                .lanes
                .into_iter()
                .zip(peer_slots)
                .map(|(l, peer_slots)| Lane {
                    left: l.left,
                    right: l.right,
                    slots: l.slots,
                    peer_slots,
                    tx_seq: 0,
                    rx_seq: 0,
                    credits: cfg.nslots,
                    arrived: VecDeque::new(),
                    sq_right: 0,
                    sq_left: 0,
                })
                .collect(),
            slot_bytes: cfg.slot_bytes,
            nslots: cfg.nslots,
            sq_depth: self.sq_depth,
        }
    }
}

/// One QP of ours to the peer's QP `peer_qpn` (first PSN `peer_psn`), at the path MTU of our
/// port and the peer's.
fn connect_qp(
    qp: &Qp,
    cfg: &PortCfg,
    me: &RankRecord,
    my_psn: u32,
    (peer, peer_qpn, peer_psn): (&RankRecord, u32, u32),
) -> Result<()> {
    let mtu = connect::path_mtu(&[
        cfg.attr.active_mtu,
        verbs_lab::verbs::Mtu::from_bytes(peer.mtu),
    ]);
    let o = ConnectOpts {
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        timeout: cfg.ack_timeout,
        ..ConnectOpts::for_gid(cfg.ib_port, &cfg.gid, mtu)
            .map_err(verbs(format!("connecting to {}", peer.who())))?
    };
    let local = Endpoint {
        lid: me.lid,
        qpn: qp.qpn(),
        psn: my_psn,
        gid: me.gid,
    };
    let remote = Endpoint {
        lid: peer.lid,
        qpn: peer_qpn,
        psn: peer_psn,
        gid: peer.gid,
    };
    connect::bring_up(qp, &local, &remote, &o)
        .map_err(verbs(format!("connecting to {}", peer.who())))
}

impl Local {
    /// The device `dev` (`None`: the first), its port and GID; the PD, the CQ with its channel,
    /// one QP to each neighbour, the receive slots and the data buffer.
    fn open(dev: Option<&str>, opts: &CommOpts) -> Result<Local> {
        // An ACTIVE port, or this rank fails here, saying so, not later at the QP connect.
        let verbs_lab::verbs::ActivePort { ctx, port, gid } =
            DeviceList::open_port(dev, opts.ib_port, opts.gid_index)
                .map_err(verbs("opening the RDMA device, its port and GID"))?;
        let pd = ctx.alloc_pd().map_err(verbs("ibv_alloc_pd"))?;
        check_memlock(opts.channels * opts.nslots * opts.slot_bytes + opts.data_bytes())?;
        let lanes = (opts.channels, LaneKind::Channel);
        let pair = Pair::open(&ctx, &pd, opts.slot_bytes, opts.nslots, lanes)?;
        let data = pd
            .reg_mr(opts.data_bytes(), AccessFlags::LOCAL_WRITE)
            .map_err(verbs("registering the data buffer"))?;
        let port = PortCfg {
            attr: port,
            gid: gid.entry,
            ib_port: opts.ib_port,
            ack_timeout: opts.ack_timeout,
            slot_bytes: opts.slot_bytes,
            nslots: opts.nslots,
        };
        Ok(Local {
            pair,
            data,
            pd,
            ctx,
            port,
        })
    }

    /// Fills in what the neighbours need: device, LID, GID, MTU, QPNs, first PSNs, the slots.
    fn describe(&self, record: &mut RankRecord, opts: &CommOpts) -> Result<()> {
        record.device = self.ctx.name().to_string();
        record.lid = self.port.attr.lid;
        record.gid = self.port.gid.gid;
        record.mtu = connect::port_mtu(self.port.attr.active_mtu).bytes();
        // Channel 0's; the others' go round after the rendezvous (`channels`).
        let lane = &self.pair.lanes[0];
        record.left_qpn = lane.left.qpn();
        record.left_psn = connect::random_psn();
        record.right_qpn = lane.right.qpn();
        record.right_psn = connect::random_psn();
        record.slots = lane
            .slots
            .remote(0..lane.slots.len())
            .map_err(verbs("the slots"))?;
        record.slot_bytes = opts.slot_bytes as u32;
        record.nslots = opts.nslots as u32;
        Ok(())
    }

    /// Brings channel 0's left QP up to the left neighbour's right QP and its right QP to the
    /// right neighbour's left QP, then posts every receive ([`Pair::connect`]).
    fn connect(&self, record: &RankRecord, lrec: &RankRecord, rrec: &RankRecord) -> Result<()> {
        self.pair.connect(
            0,
            &self.port,
            record,
            (record.left_psn, record.right_psn),
            (lrec, lrec.right_qpn, lrec.right_psn),
            (rrec, rrec.left_qpn, rrec.left_psn),
        )
    }

    /// The communicator over the connected ring.
    fn into_comm(
        self,
        info: RankInfo,
        star: Star,
        peer_slots: Vec<RemoteBuf>,
        opts: &CommOpts,
    ) -> Comm {
        Comm {
            info,
            star,
            ring: Some(self.pair.into_ring(self.ctx, &self.port, peer_slots)),
            partners: None,
            mesh: None,
            link_cfg: Some((self.pd.clone(), self.port)),
            algo: opts.algo,
            mem: Memory::Registered(self.data),
            max_bytes: opts.max_bytes,
            scratch: opts.scratch,
            peer_timeout: opts.peer_timeout,
            broken: false,
            tracer: None,
            phases: Phases::default(),
            _pd: Some(self.pd),
        }
    }
}
