//! Recursive doubling on the communicator: the links to the partners, made once, and the steps
//! run on them ([`crate::algo`]).
//!
//! **Connecting the partners** is collective: the first all-reduce that picks recursive doubling
//! runs it on every rank at once (the choice depends only on the size and the world, which all
//! ranks share). Each rank opens one [`Pair`] per partner, sends rank 0 its partner list — per
//! partner, big-endian: partner rank, left QPN, left PSN, right QPN, right PSN (u32 each), slot
//! address u64, slot rkey and length (u32 each), after a u32 count — rank 0 broadcasts every
//! rank's list (u32 length + bytes each), each rank brings its left QP up to its partner's right
//! one and its right QP to the partner's left, and a barrier waits for every receive posted. The
//! LID, GID and MTU come from the bootstrap table. The ring's channels after the first go round
//! the same way ([`exchange_lists`], the channel's index in the partner's place).

use std::collections::HashMap;

use super::*;
use verbs_lab::wire::{Reader, Width, WireError, Writer};

/// What a rank tells its partner of one pair of links to it (or its neighbours of one channel).
#[derive(Debug, Clone, Copy)]
pub(super) struct PairInfo {
    /// The partner's rank, or the channel's index.
    pub(super) partner: u32,
    pub(super) left_qpn: u32,
    pub(super) left_psn: u32,
    pub(super) right_qpn: u32,
    pub(super) right_psn: u32,
    pub(super) slots: RemoteBuf,
}

impl PairInfo {
    fn write(&self, w: &mut Writer) {
        let words = [self.left_qpn, self.left_psn, self.right_qpn, self.right_psn];
        w.u32(self.partner);
        words.into_iter().for_each(|v| w.u32(v));
        w.u64(self.slots.addr);
        w.u32(self.slots.rkey);
        w.u32(self.slots.len);
    }

    fn read(r: &mut Reader<'_>) -> std::result::Result<PairInfo, WireError> {
        let mut v = [0u32; 5];
        let names = ["partner", "left QPN", "left PSN", "right QPN", "right PSN"];
        for (x, what) in v.iter_mut().zip(names) {
            *x = r.u32(what)?;
        }
        let [partner, left_qpn, left_psn, right_qpn, right_psn] = v;
        let addr = r.u64("slot address")?;
        let (rkey, len) = (r.u32("slot rkey")?, r.u32("slot length")?);
        Ok(PairInfo {
            partner,
            left_qpn,
            left_psn,
            right_qpn,
            right_psn,
            slots: RemoteBuf { addr, rkey, len },
        })
    }
}

/// One rank's partner list, as sent to rank 0.
fn encode(list: &[PairInfo]) -> Vec<u8> {
    let mut w = Writer::new();
    w.count(list.len()).expect("a few partners");
    for p in list {
        p.write(&mut w);
    }
    w.into_bytes()
}

fn decode(b: &[u8]) -> std::result::Result<Vec<PairInfo>, WireError> {
    let mut r = Reader::new(b);
    // A partner is 32 bytes.
    let n = r.count("partner count", 32)?;
    let list = (0..n)
        .map(|_| PairInfo::read(&mut r))
        .collect::<std::result::Result<_, _>>()?;
    r.finish()?;
    Ok(list)
}

impl Comm {
    /// All-reduce by recursive doubling of the output's first `count` elements: the links to
    /// the partners first (once), then each step on the link to its partner.
    pub(super) fn run_rd(&mut self, dtype: DataType, op: RedOp, count: usize) -> Result<()> {
        if self.world_size() == 1 {
            return Ok(());
        }
        self.links_for(Algo::Rd)?;
        let slot = self.ring.as_ref().map_or(usize::MAX, |r| r.slot_bytes);
        let steps = algo::rd_steps(self.rank(), self.world_size(), count, dtype.size(), slot)
            .map_err(CollError::Usage)?;
        let m = self.max_bytes;
        self.phases.collectives += 1;
        for st in &steps {
            self.execute_on(
                Job {
                    coll: Coll::AllReduce,
                    plans: std::slice::from_ref(&st.plan),
                    src_off: m,
                    dst_off: m,
                    dtype,
                    op,
                },
                Links::Partner(st.partner),
            )?;
        }
        Ok(())
    }

    /// Makes the links `algo` runs on beyond the ring — recursive doubling's partners, the
    /// direct all-to-all's mesh — unless they are made (or the world has one rank). A failure
    /// breaks the communicator and is told to every rank. Collective, like the collectives.
    pub(super) fn links_for(&mut self, algo: Algo) -> Result<()> {
        if self.world_size() == 1 {
            return Ok(());
        }
        let up = match algo {
            Algo::Rd if self.partners.is_none() => self.connect_partners(),
            Algo::Direct if self.mesh.is_none() => self.connect_mesh(),
            _ => return Ok(()),
        };
        if let Err(e) = up {
            self.broken = true;
            self.star.abort(&e);
            return Err(e);
        }
        Ok(())
    }

    /// Opens, describes, exchanges and connects one pair of links per partner (see the module
    /// documentation); every rank calls it at the same collective.
    fn connect_partners(&mut self) -> Result<()> {
        let (rank, n) = (self.rank(), self.world_size());
        let (ctx, pd, cfg) = self.link_base();
        let partners = algo::rd_partners(rank, n);
        let mut pairs = Vec::new();
        let mut mine = Vec::new();
        for &p in &partners {
            let one = (1, super::channels::LaneKind::Channel);
            let pair = Pair::open(&ctx, &pd, cfg.slot_bytes, cfg.nslots, one)?;
            mine.push(PairInfo::of(&pair.lanes[0], p)?);
            pairs.push(pair);
        }
        let lists = exchange_lists(&mut self.star, &mine, "partner lists")?;
        let table = self.star.table().to_vec();
        let mut links = HashMap::new();
        for ((pair, me), &p) in pairs.into_iter().zip(&mine).zip(&partners) {
            let theirs = lists[p]
                .iter()
                .find(|i| i.partner as usize == rank)
                .ok_or_else(|| {
                    CollError::Bootstrap(format!(
                        "{} has no link to rank {rank} in its recursive-doubling partners: do \
                         all ranks run the same build and world?",
                        table[p].who()
                    ))
                })?;
            pair.connect(
                0,
                &cfg,
                &table[rank],
                (me.left_psn, me.right_psn),
                (&table[p], theirs.right_qpn, theirs.right_psn),
                (&table[p], theirs.left_qpn, theirs.left_psn),
            )?;
            links.insert(p, pair.into_ring(ctx.clone(), &cfg, vec![theirs.slots]));
        }
        // Nobody writes before every partner's QPs are ready to receive.
        self.star.barrier()?;
        self.partners = Some(links);
        Ok(())
    }
}

impl Comm {
    /// What links made after the ring's are made with: the ring's device context, the PD and
    /// the port's facts.
    pub(super) fn link_base(&self) -> (Context, Pd, PortCfg) {
        let (pd, cfg) = self
            .link_cfg
            .clone()
            .expect("a port to connect from when the world has more than one rank");
        let ring = self
            .ring
            .as_ref()
            .expect("a ring when the world has more than one rank");
        (ring.ctx.clone(), pd, cfg)
    }
}

impl PairInfo {
    /// What the peers need of `lane`, keyed by `partner` (a rank, or a channel), with fresh
    /// first PSNs.
    pub(super) fn of(lane: &init::LaneQps, partner: usize) -> Result<PairInfo> {
        Ok(PairInfo {
            partner: partner as u32,
            left_qpn: lane.left.qpn(),
            left_psn: connect::random_psn(),
            right_qpn: lane.right.qpn(),
            right_psn: connect::random_psn(),
            slots: lane
                .slots
                .remote(0..lane.slots.len())
                .map_err(verbs("the slots"))?,
        })
    }
}

/// Every rank's list (`what`, for the errors), through rank 0 over the star (index = rank).
pub(super) fn exchange_lists(
    star: &mut Star,
    mine: &[PairInfo],
    what: &str,
) -> Result<Vec<Vec<PairInfo>>> {
    let world = star.table().len();
    let gathered = star.gather(&encode(mine))?;
    let all = match gathered {
        Some(all) => {
            let mut w = Writer::new();
            w.count(all.len()).expect("a world fits");
            for b in &all {
                w.blob(Width::U32, b).expect("a partner list fits 4 GiB");
            }
            star.broadcast(&w.into_bytes())?
        }
        None => star.broadcast(&[])?,
    };
    let garbled =
        |e: WireError| CollError::Bootstrap(format!("the {what} from rank 0 are garbled: {e}"));
    let mut r = Reader::new(&all);
    let n = r.count("ranks", 4).map_err(garbled)?;
    let lists = (0..n)
        .map(|_| {
            let b = r.blob(Width::U32, "a partner list", usize::MAX)?;
            decode(b)
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(garbled)?;
    r.finish().map_err(garbled)?;
    if lists.len() != world {
        return Err(CollError::Bootstrap(format!(
            "rank 0 sent {} {what} for a world of {world}",
            lists.len(),
        )));
    }
    Ok(lists)
}
