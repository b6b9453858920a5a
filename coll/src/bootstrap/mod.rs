//! The rendezvous: every rank sends rank 0 its endpoint record, rank 0 checks them and sends
//! everyone the table — what NCCL's bootstrap does inside `ncclCommInitRank`. Where to meet plays
//! NCCL's unique id (the bootstrap root's address, made by one rank and handed to all before
//! they start): the master address, or a local launcher's queue names. It is written once
//! ([`rendezvous`]) against a [`link::Link`], one rank's end of a star around rank 0, carried by
//! TCP (rank 0 listens on the master address, the others connect: ranks on any host) or by the
//! POSIX message queues of a local launcher (`--np`: ranks on this machine).
//! The links stay open afterwards as the [`Star`]: small control messages (gathers, barriers)
//! and, above all, liveness — a rank that dies closes its socket (or its launcher says so on
//! every queue), and rank 0 tells every other rank who is gone.
//!
//! Every wait is bounded. A connection to the master port that is not a rank of this job (it
//! closes at once, sends no frame or half of one, trickles, is a `vl_*` client, or speaks another
//! protocol version, which is told so) is logged in one line and ignored; the rendezvous goes
//! on ([`link::TcpLink`]'s door). Rank 0 refuses, by name, a rank that
//! was started with another world size, whose number is taken or out of range, whose terms
//! (the caller's options that every rank must share, e.g. a benchmark's sizes and data type)
//! differ from rank 0's, or whose GID is of the other family than rank 0's (IPv4-mapped against
//! IPv6: the two cannot address each other, and the QP connect would fail later with EINVAL);
//! every rank it has heard from is told why. A rank that never arrives is named by number when
//! the deadline passes.

use std::fmt;
use std::time::{Duration, Instant};

use super::mqlink::MqLinks;
use verbs_lab::verbs::{Gid, RemoteBuf};

pub mod link;
pub mod place;
mod record;
mod star;

use link::{Joined, Link, TcpLink};
pub use place::{places, Place};
pub use record::{admit, differing_term};
use record::{check_gids, decode_reply, encode_refusal, encode_table, same_rank};
use star::gone;
pub use star::{Star, ANSWER_BOUND, VERDICT_BOUND};

/// Version of the bootstrap records and control messages; ranks must agree. A change of their
/// layout takes the next number, so that ranks of two builds are refused by version, not
/// misread. 2: the record ends with its terms. 3: the record carries the host's hash and the
/// launcher's local rank, and the rendezvous has a second round ([`Star::complete`]).
/// 4: the star carries the verdict on a silent rank (reports, pings, answers: [`Star::verdict`]).
pub const PROTOCOL_VERSION: u16 = 4;
const MAGIC: &[u8; 4] = b"VLCB";
/// A record's device before the rank has opened one.
pub const NO_DEVICE: &str = "-";
/// The largest control message accepted.
const MAX_MSG: usize = 1 << 20;

/// What one rank tells the others: where it runs and how to reach its QPs and slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankRecord {
    pub rank: u32,
    pub world_size: u32,
    pub version: u16,
    /// Its host name, as the header shows it.
    pub host: String,
    /// Which host it runs on: a hash of the host name and the kernel's boot id
    /// ([`place::host_hash`]). Ranks with the same hash count each other for their local ranks.
    pub host_hash: u64,
    pub pid: u32,
    /// The local rank its launcher gave (`LOCAL_RANK`, `--local-rank`, ...), if any: then it is
    /// the rank's local rank; without one, the rank's place among the ranks of its host
    /// ([`place::places`]).
    pub local_rank: Option<u32>,
    /// Its RDMA device; `-` before it has one (the first round of the rendezvous).
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
    /// "rank 2 (host guest, pid 123, rxe0)"; "rank 2 (host guest, pid 123)" before it has a
    /// device.
    pub fn who(&self) -> String {
        if self.device == NO_DEVICE {
            return format!("rank {} (host {}, pid {})", self.rank, self.host, self.pid);
        }
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
        err: verbs_lab::verbs::VerbsError,
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
/// What carries the rendezvous and the star.
#[derive(Debug, Clone, Copy)]
pub enum Via<'a> {
    /// TCP to rank 0's bootstrap listener at (host, port): ranks on any host.
    Tcp((&'a str, u16)),
    /// The POSIX message queues a local launcher (`--np`) made under this base name (see
    /// [`super::mqlink`]): ranks on this machine.
    Queues(&'a str),
}

impl Via<'_> {
    /// This rank's end of the star (rank 0 listens, the others connect or open their queues),
    /// trying for at most `timeout`.
    fn link(self, rank: u32, world: u32, timeout: Duration) -> Result<Box<dyn Link>> {
        Ok(match self {
            Via::Tcp(master) if rank == 0 => Box::new(TcpLink::listen(master, world)?),
            Via::Tcp(master) => Box::new(TcpLink::connect(master, rank, world, timeout)?),
            Via::Queues(base) => {
                Box::new(MqLinks::open(base, rank, world).map_err(CollError::Bootstrap)?)
            }
        })
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

/// Runs the rendezvous for `mine` over `via`: rank 0 takes every other rank's record, checks it
/// ([`admit`]) and the local ranks of the whole table ([`place::check_places`]), and sends
/// everyone the table, or tells every rank it heard from why not. Waits at most `timeout` in
/// all. The links stay open as the [`Star`]; [`Star::place`] tells this rank its local rank.
///
/// `mine` may carry its endpoints already (then the table is complete), or only who and where
/// the rank is (device [`NO_DEVICE`], GID zero): the rank then opens its device at its local
/// rank and sends the whole record in a second round, [`Star::complete`].
pub fn rendezvous(mine: RankRecord, via: Via<'_>, timeout: Duration) -> Result<Star> {
    let (rank, world) = (mine.rank, mine.world_size);
    let mut link = via.link(rank, world, timeout)?;
    let table = if rank == 0 {
        let table = gather_records(link.as_mut(), mine, timeout)?;
        let blob = encode_table(&table);
        for r in 1..world {
            link.send(r, &blob, "the endpoint table", timeout)
                .map_err(|e| gone(&table, r, e))?;
        }
        link.all_in();
        table
    } else {
        join(link.as_mut(), &mine, timeout)?
    };
    Ok(Star::new(rank, link, table, timeout))
}

/// Rank 0: every rank's record, each admitted as it comes; a rank refused, or missing at the
/// deadline, ends the rendezvous for all, each rank heard from told why.
fn gather_records(
    link: &mut dyn Link,
    mine: RankRecord,
    timeout: Duration,
) -> Result<Vec<RankRecord>> {
    let world = mine.world_size;
    let mut table: Vec<Option<RankRecord>> = vec![None; world as usize];
    table[0] = Some(mine);
    let start = Instant::now();
    let refuse = |link: &mut dyn Link, why: String| {
        link.refuse(&encode_refusal(&why));
        CollError::Bootstrap(why)
    };
    while table.iter().any(Option::is_none) {
        let left = timeout.saturating_sub(start.elapsed());
        let rec = match link.next_record(left) {
            Joined::Record(r) => r,
            Joined::Timeout => {
                let why = link.never_came(&missing(&table), world, timeout);
                return Err(refuse(link, why));
            }
            Joined::Refuse(why) => return Err(refuse(link, why)),
        };
        if let Err(why) = admit(&table, world, &rec) {
            return Err(refuse(link, why));
        }
        link.keep(rec.rank);
        let r = rec.rank as usize;
        table[r] = Some(rec);
    }
    let table: Vec<RankRecord> = table.into_iter().map(|r| r.expect("all in")).collect();
    if let Err(why) = place::check_places(&table) {
        return Err(refuse(link, why));
    }
    Ok(table)
}

/// A rank other than 0: sends its record and gets the table, or rank 0's refusal.
fn join(link: &mut dyn Link, mine: &RankRecord, timeout: Duration) -> Result<Vec<RankRecord>> {
    link.send(0, &mine.encode(), "our endpoint record", timeout)
        .map_err(CollError::Bootstrap)?;
    // Rank 0 may wait its whole window for the last rank after we arrived: wait longer.
    let reply = link
        .reply(timeout * 2 + Duration::from_secs(5))
        .map_err(CollError::Bootstrap)?;
    let table = decode_reply(&reply).map_err(CollError::Bootstrap)?;
    if table.len() != mine.world_size as usize || table[mine.rank as usize] != *mine {
        return Err(CollError::Bootstrap(format!(
            "rank 0's table ({} ranks) does not hold our record as we sent it",
            table.len()
        )));
    }
    Ok(table)
}
