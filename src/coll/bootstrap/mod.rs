//! The rendezvous: rank 0 listens on the master address, every other rank connects and sends its
//! endpoint record, rank 0 checks them and sends everyone the table — the part of NCCL's
//! bootstrap that its unique id stands for. The TCP connections stay open afterwards as a star
//! around rank 0 ([`Star`]): small control messages (gathers, barriers) and, above all, liveness —
//! a rank that dies closes its socket, rank 0 sees it and tells every other rank who is gone.
//!
//! Every wait is bounded. Rank 0 refuses, by name, a rank that speaks another protocol version,
//! was started with another world size, whose number is taken or out of range, whose terms
//! (the caller's options that every rank must share, e.g. a benchmark's sizes and data type)
//! differ from rank 0's, or whose GID is of the other family than rank 0's (IPv4-mapped against
//! IPv6: the two cannot address each other, and the QP connect would fail later with EINVAL);
//! every rank it has heard from is told why. A rank that never arrives is named by number when
//! the deadline passes.

use std::fmt;
use std::time::{Duration, Instant};

use super::mqlink::{Incoming, MqLinks};
use crate::oob::{self, Listener, OobConn, OobError};
use crate::verbs::{Gid, RemoteBuf};
use crate::wire::{Reader, Width, Writer};

mod record;

pub use record::{admit, differing_term};
use record::{decode_reply, encode_refusal, encode_table};

/// Version of the bootstrap records and control messages; ranks must agree. A change of their
/// layout takes the next number, so that ranks of two builds are refused by version, not
/// misread. 2: the record ends with its terms.
pub const PROTOCOL_VERSION: u16 = 2;
const MAGIC: &[u8; 4] = b"VLCB";
/// The largest control message accepted.
const MAX_MSG: usize = 1 << 20;

/// What one rank tells the others: where it runs and how to reach its QPs and slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankRecord {
    pub rank: u32,
    pub world_size: u32,
    pub version: u16,
    pub host: String,
    pub pid: u32,
    pub device: String,
    /// The CPU it pinned itself to, if any.
    pub cpu: Option<u32>,
    pub lid: u16,
    /// The GID it sends from ([`Gid::ZERO`] before it has a device, e.g. in a world of one).
    pub gid: Gid,
    /// Active MTU of its port, in bytes.
    pub mtu: u32,
    /// The QP facing its left neighbour (receives data, sends credits) and its first PSN.
    pub left_qpn: u32,
    pub left_psn: u32,
    /// The QP facing its right neighbour (sends data, receives credits).
    pub right_qpn: u32,
    pub right_psn: u32,
    /// Its receive slots: where its left neighbour writes.
    pub slots: RemoteBuf,
    pub slot_bytes: u32,
    pub nslots: u32,
    /// The caller's terms: (option, value) pairs every rank must share, in the caller's order
    /// ([`super::CommOpts::terms`]); rank 0 refuses a rank whose terms differ from its own.
    pub terms: Vec<(String, String)>,
}

impl RankRecord {
    /// "rank 2 (host guest, pid 123, rxe0)".
    pub fn who(&self) -> String {
        format!(
            "rank {} (host {}, pid {}, {})",
            self.rank, self.host, self.pid, self.device
        )
    }
}

/// Why the job cannot go on.
#[derive(Debug)]
pub enum CollError {
    /// Bad input from the caller (a usage error).
    Usage(String),
    /// The rendezvous failed.
    Bootstrap(String),
    /// A rank died, closed its connection or stopped answering.
    RankGone {
        rank: u32,
        who: String,
        detail: String,
    },
    /// A verbs call or completion failed.
    Verbs {
        what: String,
        err: crate::verbs::VerbsError,
    },
    /// Anything else that went wrong while running.
    Failed(String),
}

impl fmt::Display for CollError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CollError::Usage(s) => write!(f, "{s}"),
            CollError::Bootstrap(s) => write!(f, "bootstrap failed: {s}"),
            CollError::RankGone { who, detail, .. } => write!(f, "{who} is gone: {detail}"),
            CollError::Verbs { what, err } => write!(f, "{what}: {err}"),
            CollError::Failed(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for CollError {}

pub type Result<T> = std::result::Result<T, CollError>;
// ---------------------------------------------------------------------------------------------
// The star around rank 0

/// Control messages on the star.
const ABORT: u8 = b'A';
const DATA: u8 = b'D';

/// The TCP connections between rank 0 and every other rank, kept open after the rendezvous.
pub struct Star {
    rank: u32,
    /// Rank 0: a connection per rank (index = rank; `None` for itself). Others: `[Some(rank 0)]`.
    conns: Vec<Option<OobConn>>,
    /// DATA messages that arrived while [`Star::check_alive`] looked (a rank that finished a
    /// collective early and sent its part of the next gather), per connection.
    early: Vec<std::collections::VecDeque<Vec<u8>>>,
    table: Vec<RankRecord>,
    timeout: Duration,
    /// A local run (`--np`): the star runs over the launcher's message queues instead of `conns`.
    mq: Option<MqLinks>,
    /// The first rank this side found or was told is gone, and why. Every later check names it
    /// again: the ranks that end *because* we told them close their sockets too, and must not
    /// be taken for the cause.
    first_gone: Option<(u32, String)>,
}

fn gone(t: &[RankRecord], rank: u32, detail: String) -> CollError {
    CollError::RankGone {
        rank,
        who: t
            .get(rank as usize)
            .map_or(format!("rank {rank}"), RankRecord::who),
        detail,
    }
}

/// "rank 2" / "ranks 1, 3": the ranks not yet in `table`.
fn missing(table: &[Option<RankRecord>]) -> String {
    let m: Vec<String> = table
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_none())
        .map(|(i, _)| i.to_string())
        .collect();
    let noun = if m.len() == 1 { "rank" } else { "ranks" };
    format!("{noun} {}", m.join(", "))
}

/// Rank 0 could not listen on the master port. The listener's own hint names the perftest
/// tools' `-p`; the collectives choose the port with `--master HOST:PORT` or `MASTER_PORT`.
fn cannot_listen(port: u16, e: OobError) -> CollError {
    CollError::Bootstrap(match e {
        OobError::Io { err, .. } => format!(
            "rank 0 cannot listen on TCP port {port}, the rendezvous port: {err} (another job's \
             rank 0 on this port, or two ranks started with RANK=0? choose another port with \
             --master HOST:PORT or MASTER_PORT)"
        ),
        e => e.to_string(),
    })
}

/// Runs the rendezvous for `mine` (rank, world and endpoints filled in) with rank 0 at `master`.
/// Rank 0 listens; the others connect. Waits at most `timeout` in all.
pub fn rendezvous(mine: RankRecord, master: (&str, u16), timeout: Duration) -> Result<Star> {
    let world = mine.world_size;
    if mine.rank == 0 {
        let listener = Listener::bind(master.1).map_err(|e| cannot_listen(master.1, e))?;
        let mut table: Vec<Option<RankRecord>> = vec![None; world as usize];
        let mut conns: Vec<Option<OobConn>> = (0..world).map(|_| None).collect();
        table[0] = Some(mine);
        let start = Instant::now();
        let mut strays: Vec<OobConn> = Vec::new();
        let refuse = |conns: &mut Vec<Option<OobConn>>, strays: &mut Vec<OobConn>, why: &str| {
            // Ranks waiting in the listen queue are told too, rather than finding the
            // connection closed (their record read first: closing a socket with unread bytes
            // would reset it and lose the refusal). Those that come later find no rank 0.
            while strays.len() <= world as usize {
                let Ok(mut c) = listener.accept(Duration::from_millis(250)) else {
                    break;
                };
                let _ = c.recv_msg(MAX_MSG, "an endpoint record");
                strays.push(c);
            }
            let refusal = encode_refusal(why);
            for c in conns.iter_mut().flatten().chain(strays.iter_mut()) {
                let _ = c.send_msg(&refusal, "the refusal");
            }
            CollError::Bootstrap(why.to_string())
        };
        while table.iter().any(Option::is_none) {
            let left = timeout.saturating_sub(start.elapsed());
            let mut c = match listener.accept(left.max(Duration::from_millis(1))) {
                Ok(c) => c,
                Err(OobError::Timeout { .. }) => {
                    let why = format!(
                        "{} of {world} never reached the master at {}:{} within {:.0} s \
                         (host unknown: never connected) — started, with the same master \
                         address?",
                        missing(&table),
                        master.0,
                        master.1,
                        timeout.as_secs_f64()
                    );
                    return Err(refuse(&mut conns, &mut strays, &why));
                }
                Err(e) => return Err(refuse(&mut conns, &mut strays, &e.to_string())),
            };
            let peer = c.peer();
            let msg = c
                .recv_msg(MAX_MSG, "an endpoint record")
                .map_err(|e| format!("from {peer}: {e}"));
            let rec = msg.and_then(|m| {
                RankRecord::decode(&m).map_err(|e| format!("the process at {peer} sent {e}"))
            });
            let rec = match rec {
                Ok(r) => r,
                Err(why) => {
                    strays.push(c);
                    return Err(refuse(&mut conns, &mut strays, &why));
                }
            };
            if let Err(why) = admit(&table, world, &rec) {
                strays.push(c);
                return Err(refuse(&mut conns, &mut strays, &why));
            }
            let r = rec.rank as usize;
            table[r] = Some(rec);
            conns[r] = Some(c);
        }
        let table: Vec<RankRecord> = table.into_iter().map(|r| r.expect("all in")).collect();
        let blob = encode_table(&table);
        for (r, c) in conns.iter_mut().enumerate() {
            if let Some(c) = c {
                c.send_msg(&blob, "the endpoint table")
                    .map_err(|e| gone(&table, r as u32, e.to_string()))?;
            }
        }
        Ok(Star {
            rank: 0,
            early: vec![Default::default(); conns.len()],
            conns,
            table,
            timeout,
            mq: None,
            first_gone: None,
        })
    } else {
        let mut c = oob::connect(master.0, master.1, timeout).map_err(|e| {
            // Rank 0 stops listening once its world is complete: a rank started twice (or a
            // rank of a world that already ran) finds nobody there, though rank 0 may be fine.
            let late = match e {
                OobError::Timeout { .. } => format!(
                    "; if rank 0 is running, its world may already be complete without us: was \
                     another process started as rank {}?",
                    mine.rank
                ),
                _ => String::new(),
            };
            CollError::Bootstrap(format!("rank {} cannot reach rank 0: {e}{late}", mine.rank))
        })?;
        // Rank 0 may wait its whole window for the last rank after we arrived: wait longer.
        c.set_timeout(timeout * 2 + Duration::from_secs(5))
            .map_err(|e| CollError::Bootstrap(e.to_string()))?;
        c.send_msg(&mine.encode(), "our endpoint record")
            .map_err(|e| CollError::Bootstrap(e.to_string()))?;
        let reply = c
            .recv_msg(MAX_MSG, "the endpoint table from rank 0")
            .map_err(|e| CollError::Bootstrap(e.to_string()))?;
        let table = decode_reply(&reply).map_err(CollError::Bootstrap)?;
        if table.len() != world as usize || table[mine.rank as usize] != mine {
            return Err(CollError::Bootstrap(format!(
                "rank 0's table ({} ranks) does not hold our record as we sent it",
                table.len()
            )));
        }
        Ok(Star {
            rank: mine.rank,
            conns: vec![Some(c)],
            early: vec![Default::default()],
            table,
            timeout,
            mq: None,
            first_gone: None,
        })
    }
}

/// The rendezvous of a local run (`--np`) over the launcher's message queues under `base` (see
/// [`super::mqlink`]): the same exchange as [`rendezvous`], the same checks and bounds.
pub fn rendezvous_mq(mine: RankRecord, base: &str, timeout: Duration) -> Result<Star> {
    let (world, rank) = (mine.world_size, mine.rank);
    let mut links = MqLinks::open(base, rank, world).map_err(CollError::Bootstrap)?;
    let start = Instant::now();
    let gone_early =
        |rank: u32, detail: String| format!("rank {rank} ended before the rendezvous: {detail}");
    let table = if mine.rank == 0 {
        let mut table: Vec<Option<RankRecord>> = vec![None; world as usize];
        table[0] = Some(mine);
        let refuse = |links: &mut MqLinks, why: &str| {
            let refusal = encode_refusal(why);
            for r in 1..world {
                let _ = links.send(r, &refusal, Duration::from_millis(500));
            }
            CollError::Bootstrap(why.to_string())
        };
        while table.iter().any(Option::is_none) {
            let left = timeout.saturating_sub(start.elapsed());
            match links.recv(left).map_err(CollError::Bootstrap)? {
                None => {
                    let why = format!(
                        "{} of {world} sent no endpoint record within {:.0} s",
                        missing(&table),
                        timeout.as_secs_f64()
                    );
                    return Err(refuse(&mut links, &why));
                }
                Some(Incoming::Gone { rank, detail }) => {
                    return Err(refuse(&mut links, &gone_early(rank, detail)));
                }
                Some(Incoming::Frame { from, bytes }) => {
                    let rec = RankRecord::decode(&bytes)
                        .map_err(|e| format!("rank {from}'s queue message: {e}"));
                    let rec = match rec {
                        Ok(r) if r.rank == from => r,
                        Ok(r) => {
                            let why = format!("rank {from} sent the record of rank {}", r.rank);
                            return Err(refuse(&mut links, &why));
                        }
                        Err(why) => return Err(refuse(&mut links, &why)),
                    };
                    if let Err(why) = admit(&table, world, &rec) {
                        return Err(refuse(&mut links, &why));
                    }
                    let r = rec.rank as usize;
                    table[r] = Some(rec);
                }
            }
        }
        let table: Vec<RankRecord> = table.into_iter().map(|r| r.expect("all in")).collect();
        let blob = encode_table(&table);
        for r in 1..world {
            links
                .send(r, &blob, timeout)
                .map_err(|e| gone(&table, r, format!("sending the endpoint table failed: {e}")))?;
        }
        table
    } else {
        links
            .send(0, &mine.encode(), timeout)
            .map_err(|e| CollError::Bootstrap(format!("sending our endpoint record: {e}")))?;
        // Rank 0 may wait its whole window for the last rank after we arrived: wait longer.
        let wait = timeout * 2 + Duration::from_secs(5);
        let table = match links.recv(wait).map_err(CollError::Bootstrap)? {
            Some(Incoming::Frame { bytes, .. }) => {
                decode_reply(&bytes).map_err(CollError::Bootstrap)?
            }
            Some(Incoming::Gone { rank, detail }) => {
                return Err(CollError::Bootstrap(gone_early(rank, detail)))
            }
            None => {
                return Err(CollError::Bootstrap(format!(
                    "no endpoint table from rank 0 within {:.0} s",
                    wait.as_secs_f64()
                )))
            }
        };
        if table.len() != world as usize || table[mine.rank as usize] != mine {
            return Err(CollError::Bootstrap(format!(
                "rank 0's table ({} ranks) does not hold our record as we sent it",
                table.len()
            )));
        }
        table
    };
    let ends = if rank == 0 { world as usize } else { 1 };
    Ok(Star {
        rank,
        conns: (0..ends).map(|_| None).collect(),
        early: vec![Default::default(); ends],
        table,
        timeout,
        mq: Some(links),
        first_gone: None,
    })
}

impl Star {
    /// A star of one: world size 1.
    pub fn single(mine: RankRecord) -> Star {
        Star {
            rank: 0,
            conns: vec![None],
            early: vec![Default::default()],
            table: vec![mine],
            timeout: Duration::from_secs(1),
            mq: None,
            first_gone: None,
        }
    }

    pub fn table(&self) -> &[RankRecord] {
        &self.table
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes how long control messages may take (e.g. longer than a slow collective).
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// Looks at the connections without blocking: `Err` names a rank that is gone (its socket
    /// closed or rank 0 relayed that it is). Call it now and then while waiting on the NIC.
    /// Once a rank is known gone, every call names that rank, not one that ended after it.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some((rank, detail)) = &self.first_gone {
            return Err(gone(&self.table, *rank, detail.clone()));
        }
        if self.mq.is_some() {
            while let Some(got) = self.mq_poll(Duration::ZERO)? {
                let (idx, m) = got;
                let peer = if self.rank == 0 { idx as u32 } else { 0 };
                let m = self.interpret(peer, m)?;
                self.early[idx].push_back(m);
            }
            return Ok(());
        }
        for r in 0..self.conns.len() {
            let Some(c) = self.conns[r].as_mut() else {
                continue;
            };
            let ready = c.poll_readable(Duration::ZERO).map_err(|e| {
                CollError::Failed(format!("watching the connection of rank {r}: {e}"))
            })?;
            if ready {
                let peer = if self.rank == 0 { r as u32 } else { 0 };
                let m = self.recv_wire(peer, "a control message")?;
                self.early[r].push_back(m);
            }
        }
        Ok(())
    }

    /// A local run: the next whole string on our queue within `wait` (`None`: none came), as
    /// (index into `early`, bytes); the launcher's notice that a rank ended is the error that
    /// names it.
    fn mq_poll(&mut self, wait: Duration) -> Result<Option<(usize, Vec<u8>)>> {
        let links = self.mq.as_mut().expect("a local run");
        let got = if wait.is_zero() {
            links.try_recv()
        } else {
            links.recv(wait)
        };
        match got.map_err(CollError::Failed)? {
            None => Ok(None),
            Some(Incoming::Frame { from, bytes }) => {
                let idx = if self.rank == 0 { from as usize } else { 0 };
                Ok(Some((idx, bytes)))
            }
            Some(Incoming::Gone { rank, detail }) => Err(gone(
                &self.table,
                rank,
                format!("the launcher saw it end: {detail}"),
            )),
        }
    }

    /// Receives one DATA message from `peer` (a rank on the star); an ABORT or a closed socket
    /// becomes the error that names the rank that is gone.
    fn recv_from(&mut self, peer: u32, what: &str) -> Result<Vec<u8>> {
        let idx = if self.rank == 0 { peer as usize } else { 0 };
        if let Some(m) = self.early[idx].pop_front() {
            return Ok(m);
        }
        self.recv_wire(peer, what)
    }

    /// [`Star::recv_from`] without the messages kept aside.
    fn recv_wire(&mut self, peer: u32, what: &str) -> Result<Vec<u8>> {
        let idx = if self.rank == 0 { peer as usize } else { 0 };
        let timeout = self.timeout;
        let silent = |t: &[RankRecord], after: Duration| {
            gone(
                t,
                peer,
                format!(
                    "silent for {:.0} s while we waited for {what}",
                    after.as_secs_f64()
                ),
            )
        };
        if self.mq.is_some() {
            // Strings from other ranks that arrive meanwhile are kept for later (an abort from
            // any of them ends the wait).
            let deadline = crate::fdwait::deadline_after(timeout);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match self.mq_poll(left.max(Duration::from_millis(1)))? {
                    Some((i, m)) if i == idx => return self.interpret(peer, m),
                    Some((i, m)) => {
                        let from = if self.rank == 0 { i as u32 } else { 0 };
                        let m = self.interpret(from, m)?;
                        self.early[i].push_back(m);
                    }
                    None if Instant::now() >= deadline => {
                        let e = silent(&self.table, timeout);
                        self.abort(&e);
                        return Err(e);
                    }
                    None => {}
                }
            }
        }
        let c = self.conns[idx].as_mut().expect("a connection to that rank");
        c.set_timeout(timeout)
            .map_err(|e| CollError::Failed(e.to_string()))?;
        let m = match c.recv_msg(MAX_MSG, what) {
            Ok(m) => m,
            Err(OobError::Closed { .. }) => {
                let e = gone(
                    &self.table,
                    peer,
                    "its connection to rank 0 closed: the process exited or was killed".into(),
                );
                self.abort(&e);
                return Err(e);
            }
            Err(OobError::Timeout { after, .. }) => {
                let e = silent(&self.table, after);
                self.abort(&e);
                return Err(e);
            }
            Err(e) => return Err(CollError::Failed(format!("from rank {peer}: {e}"))),
        };
        self.interpret(peer, m)
    }

    /// A message from `peer`: DATA gives its bytes, ABORT the error naming the rank gone.
    fn interpret(&mut self, peer: u32, m: Vec<u8>) -> Result<Vec<u8>> {
        match m.first() {
            Some(&DATA) => Ok(m[1..].to_vec()),
            Some(&ABORT) => {
                let mut r = Reader::new(&m[1..]);
                let (rank, detail) = (r.u32("rank"), r.text(Width::U32, "detail", usize::MAX));
                let (Ok(rank), Ok(detail)) = (rank, detail) else {
                    return Err(CollError::Failed("a malformed abort message".into()));
                };
                let detail = detail.to_string();
                let e = if rank == self.rank {
                    self.blamed(peer, &detail)
                } else {
                    gone(&self.table, rank, detail.clone())
                };
                if self.rank == 0 {
                    self.abort(&e);
                } else if rank != self.rank {
                    self.first_gone.get_or_insert((rank, detail));
                }
                Err(e)
            }
            _ => Err(CollError::Failed(format!(
                "rank {peer} sent a malformed control message"
            ))),
        }
    }

    /// `peer`'s abort names this rank: it gave up waiting for us (its timeout ran out while we
    /// were elsewhere, e.g. in a collective it never called). We are not gone, and an error
    /// saying so would name ourselves: say what happened instead.
    fn blamed(&self, peer: u32, detail: &str) -> CollError {
        let who = |r: u32| {
            self.table
                .get(r as usize)
                .map_or(format!("rank {r}"), RankRecord::who)
        };
        CollError::Failed(format!(
            "{} gave up waiting for {}, which is still running (it says: {detail}); the two were \
             not at the same step of the job — check that every rank was given the same options",
            who(peer),
            who(self.rank)
        ))
    }

    /// Tells the others that the job is over because of `e` (best effort: rank 0 relays to every
    /// rank, the others tell rank 0). Does nothing for errors that name no rank.
    pub fn abort(&mut self, e: &CollError) {
        let (rank, detail) = match e {
            CollError::RankGone { rank, detail, .. } => (*rank, detail.clone()),
            other => (self.rank, format!("it failed: {other}")),
        };
        if rank != self.rank {
            self.first_gone.get_or_insert((rank, detail.clone()));
        }
        let mut p = Writer::new();
        p.u8(ABORT);
        p.u32(rank);
        p.text(Width::U32, &detail).expect("a reason fits 4 GiB");
        let p = p.into_bytes();
        if let Some(links) = self.mq.as_mut() {
            let peers: Vec<u32> = if self.rank == 0 {
                (1..self.table.len() as u32)
                    .filter(|&r| r != rank)
                    .collect()
            } else {
                vec![0]
            };
            for r in peers {
                let _ = links.send(r, &p, Duration::from_millis(500));
            }
            return;
        }
        for (i, c) in self.conns.iter_mut().enumerate() {
            if let Some(c) = c {
                if self.rank != 0 || i as u32 != rank {
                    let _ = c.set_timeout(Duration::from_millis(500));
                    let _ = c.send_msg(&p, "an abort message");
                }
            }
        }
    }

    fn send_to(&mut self, peer: u32, data: &[u8], what: &str) -> Result<()> {
        let idx = if self.rank == 0 { peer as usize } else { 0 };
        let mut m = Vec::with_capacity(data.len() + 1);
        m.push(DATA);
        m.extend_from_slice(data);
        if let Some(links) = self.mq.as_mut() {
            return links
                .send(peer, &m, self.timeout)
                .map_err(|e| gone(&self.table, peer, format!("sending {what} failed: {e}")));
        }
        let c = self.conns[idx].as_mut().expect("a connection to that rank");
        c.send_msg(&m, what)
            .map_err(|e| gone(&self.table, peer, format!("sending {what} failed: {e}")))
    }

    /// Rank 0 gets every rank's `data` (index = rank); the others get `None`.
    pub fn gather(&mut self, data: &[u8]) -> Result<Option<Vec<Vec<u8>>>> {
        if self.rank != 0 {
            self.send_to(0, data, "a gathered value")?;
            return Ok(None);
        }
        let mut all = vec![data.to_vec()];
        for r in 1..self.table.len() as u32 {
            all.push(self.recv_from(r, "a gathered value")?);
        }
        Ok(Some(all))
    }

    /// Every rank gets rank 0's `data`.
    pub fn broadcast(&mut self, data: &[u8]) -> Result<Vec<u8>> {
        if self.rank != 0 {
            return self.recv_from(0, "a broadcast from rank 0");
        }
        for r in 1..self.table.len() as u32 {
            self.send_to(r, data, "a broadcast")?;
        }
        Ok(data.to_vec())
    }

    /// Every rank waits until all have arrived.
    pub fn barrier(&mut self) -> Result<()> {
        self.gather(&[])?;
        self.broadcast(&[])?;
        Ok(())
    }
}
