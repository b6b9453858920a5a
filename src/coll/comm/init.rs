//! [`Comm::init`]: a rank's device, QPs and slots, the rendezvous, the connections.

use super::*;

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
}
