//! The [`Link`]: one rank's end of the star around rank 0, whatever carries it — TCP
//! connections to rank 0 ([`TcpLink`], ranks on any host) or the launcher's POSIX message queues
//! ([`MqLinks`], the ranks of one `--np` run). The rendezvous ([`super::rendezvous`]) and the
//! [`super::Star`] are written once against it; a link only moves whole messages and says, in
//! its own words, how a peer arrived, went or stayed silent.

use std::time::Duration;

use super::{CollError, RankRecord, MAX_MSG};
use crate::coll::mqlink::{Incoming, MqLinks};
use crate::oob::{self, Listener, OobConn, OobError};

/// What [`Link::recv`] or [`Link::poll`] found.
#[derive(Debug)]
pub enum Got {
    /// A whole message from rank `from`.
    Message { from: u32, bytes: Vec<u8> },
    /// Rank `rank` is gone; `detail` says how this link saw it. `relay`: only this rank saw it
    /// (a closed socket), so the star tells the others; `false` when every rank was told (the
    /// launcher's notice on every queue).
    Gone {
        rank: u32,
        detail: String,
        relay: bool,
    },
    /// Nothing from `peer` within the wait.
    Silent { peer: u32 },
}

/// What rank 0's [`Link::next_record`] found.
#[derive(Debug)]
pub enum Joined {
    /// A rank's record, decoded (its version checked).
    Record(RankRecord),
    /// No record within the wait.
    Timeout,
    /// The job cannot go on: why, for rank 0 to tell every rank.
    Refuse(String),
}

/// One rank's end of the star: rank 0 reaches every rank, every other rank reaches rank 0.
/// Peers are named by rank. Errors are the link's own words (a socket's or a queue's).
pub trait Link: Send {
    /// Rank 0, during the rendezvous: the next record a rank sent, waiting at most `wait`.
    fn next_record(&mut self, wait: Duration) -> Joined;
    /// Rank 0: the rank whose record [`Link::next_record`] just gave was admitted as `rank`
    /// (a TCP link keeps its connection for the star).
    fn keep(&mut self, rank: u32);
    /// Rank 0: sends `refusal` to every rank it has heard from (and, where the link can, to
    /// those still on their way), best effort.
    fn refuse(&mut self, refusal: &[u8]);
    /// Rank 0: every rank is in; nobody else may join (a TCP link stops listening).
    fn all_in(&mut self) {}
    /// Rank 0: why the rendezvous ended at its deadline with `missing` ("rank 2") of `world`
    /// not in, after `within`.
    fn never_came(&self, missing: &str, world: u32, within: Duration) -> String;
    /// A rank other than 0, during the rendezvous: rank 0's reply (the table or its refusal),
    /// waiting at most `wait`.
    fn reply(&mut self, wait: Duration) -> Result<Vec<u8>, String>;
    /// Sends one whole message to `peer` within `timeout`; `what` names it in an error.
    fn send(
        &mut self,
        peer: u32,
        bytes: &[u8],
        what: &str,
        timeout: Duration,
    ) -> Result<(), String>;
    /// Waits at most `wait` for a message from `peer`. A link whose peers share one queue may
    /// give a message from another rank meanwhile, or the notice that another rank is gone.
    fn recv(&mut self, peer: u32, what: &str, wait: Duration) -> Result<Got, String>;
    /// Without waiting: a message or notice already here, if any (a whole message whose first
    /// bytes are here may take up to `timeout` to come).
    fn poll(&mut self, timeout: Duration) -> Result<Option<Got>, String>;
}

// ---------------------------------------------------------------------------------------------
// TCP

/// The star over TCP: rank 0 listens on the master port and keeps a connection per rank; every
/// other rank connects to it.
pub struct TcpLink {
    rank: u32,
    world: u32,
    master: (String, u16),
    /// Rank 0: index = rank (`None` for itself and ranks not in yet). Others: `[Some(rank 0)]`.
    conns: Vec<Option<OobConn>>,
    /// Rank 0 during the rendezvous: the listener, the connection just read, and those refused.
    listener: Option<Listener>,
    pending: Option<OobConn>,
    strays: Vec<OobConn>,
}

impl TcpLink {
    /// Rank 0's end: listens on the master port (`master.1`) for `world - 1` ranks.
    pub fn listen(master: (&str, u16), world: u32) -> Result<TcpLink, CollError> {
        let listener = Listener::bind(master.1).map_err(|e| cannot_listen(master.1, e))?;
        Ok(TcpLink {
            rank: 0,
            world,
            master: (master.0.to_string(), master.1),
            conns: (0..world).map(|_| None).collect(),
            listener: Some(listener),
            pending: None,
            strays: Vec::new(),
        })
    }

    /// The end of rank `rank` (not 0): connected to rank 0 at `master`, trying for `timeout`.
    pub fn connect(
        master: (&str, u16),
        rank: u32,
        world: u32,
        timeout: Duration,
    ) -> Result<TcpLink, CollError> {
        let c = oob::connect(master.0, master.1, timeout).map_err(|e| {
            // Rank 0 stops listening once its world is complete: a rank started twice (or a
            // rank of a world that already ran) finds nobody there, though rank 0 may be fine.
            let late = match e {
                OobError::Timeout { .. } => format!(
                    "; if rank 0 is running, its world may already be complete without us: was \
                     another process started as rank {rank}?"
                ),
                _ => String::new(),
            };
            CollError::Bootstrap(format!("rank {rank} cannot reach rank 0: {e}{late}"))
        })?;
        Ok(TcpLink {
            rank,
            world,
            master: (master.0.to_string(), master.1),
            conns: vec![Some(c)],
            listener: None,
            pending: None,
            strays: Vec::new(),
        })
    }

    fn conn(&mut self, peer: u32) -> Result<&mut OobConn, String> {
        let idx = if self.rank == 0 { peer as usize } else { 0 };
        let rank = self.rank;
        self.conns
            .get_mut(idx)
            .and_then(Option::as_mut)
            .ok_or_else(|| format!("rank {rank} has no connection to rank {peer}"))
    }
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

impl Link for TcpLink {
    fn next_record(&mut self, wait: Duration) -> Joined {
        let listener = self.listener.as_ref().expect("rank 0 listens");
        let mut c = match listener.accept(wait.max(Duration::from_millis(1))) {
            Ok(c) => c,
            Err(OobError::Timeout { .. }) => return Joined::Timeout,
            Err(e) => return Joined::Refuse(e.to_string()),
        };
        let peer = c.peer();
        let got = c
            .recv_msg(MAX_MSG, "an endpoint record")
            .map_err(|e| format!("from {peer}: {e}"))
            .and_then(|m| {
                RankRecord::decode(&m).map_err(|e| format!("the process at {peer} sent {e}"))
            });
        self.pending = Some(c);
        match got {
            Ok(r) => Joined::Record(r),
            Err(why) => Joined::Refuse(why),
        }
    }

    fn keep(&mut self, rank: u32) {
        self.conns[rank as usize] = self.pending.take();
    }

    fn refuse(&mut self, refusal: &[u8]) {
        self.strays.extend(self.pending.take());
        // Ranks waiting in the listen queue are told too, rather than finding the connection
        // closed (their record read first: closing a socket with unread bytes would reset it
        // and lose the refusal). Those that come later find no rank 0.
        if let Some(listener) = &self.listener {
            while self.strays.len() <= self.world as usize {
                let Ok(mut c) = listener.accept(Duration::from_millis(250)) else {
                    break;
                };
                let _ = c.recv_msg(MAX_MSG, "an endpoint record");
                self.strays.push(c);
            }
        }
        for c in self
            .conns
            .iter_mut()
            .flatten()
            .chain(self.strays.iter_mut())
        {
            let _ = c.send_msg(refusal, "the refusal");
        }
    }

    fn all_in(&mut self) {
        self.listener = None;
        self.strays.clear();
    }

    fn never_came(&self, missing: &str, world: u32, within: Duration) -> String {
        format!(
            "{missing} of {world} never reached the master at {}:{} within {:.0} s (host \
             unknown: never connected) — started, with the same master address?",
            self.master.0,
            self.master.1,
            within.as_secs_f64()
        )
    }

    fn reply(&mut self, wait: Duration) -> Result<Vec<u8>, String> {
        let c = self.conn(0)?;
        c.set_timeout(wait).map_err(|e| e.to_string())?;
        c.recv_msg(MAX_MSG, "the endpoint table from rank 0")
            .map_err(|e| e.to_string())
    }

    fn send(
        &mut self,
        peer: u32,
        bytes: &[u8],
        what: &str,
        timeout: Duration,
    ) -> Result<(), String> {
        let c = self.conn(peer)?;
        c.set_timeout(timeout).map_err(|e| e.to_string())?;
        c.send_msg(bytes, what).map_err(|e| e.to_string())
    }

    fn recv(&mut self, peer: u32, what: &str, wait: Duration) -> Result<Got, String> {
        let c = self.conn(peer)?;
        c.set_timeout(wait.max(Duration::from_millis(1)))
            .map_err(|e| e.to_string())?;
        match c.recv_msg(MAX_MSG, what) {
            Ok(bytes) => Ok(Got::Message { from: peer, bytes }),
            Err(OobError::Closed { .. }) => Ok(Got::Gone {
                rank: peer,
                detail: "its connection to rank 0 closed: the process exited or was killed".into(),
                relay: true,
            }),
            Err(OobError::Timeout { .. }) => Ok(Got::Silent { peer }),
            Err(e) => Err(format!("from rank {peer}: {e}")),
        }
    }

    fn poll(&mut self, timeout: Duration) -> Result<Option<Got>, String> {
        for idx in 0..self.conns.len() {
            let Some(c) = self.conns[idx].as_ref() else {
                continue;
            };
            let peer = if self.rank == 0 { idx as u32 } else { 0 };
            let ready = c
                .poll_readable(Duration::ZERO)
                .map_err(|e| format!("watching the connection of rank {peer}: {e}"))?;
            if ready {
                return self.recv(peer, "a control message", timeout).map(Some);
            }
        }
        Ok(None)
    }
}

// ---------------------------------------------------------------------------------------------
// POSIX message queues

/// How a rank that ended before the rendezvous is named (the launcher's notice).
fn ended_early(rank: u32, detail: &str) -> String {
    format!("rank {rank} ended before the rendezvous: {detail}")
}

/// A queue's arrival as the star sees it (`None`: nothing from `peer` in time).
fn got(incoming: Option<Incoming>, peer: u32) -> Got {
    match incoming {
        None => Got::Silent { peer },
        Some(Incoming::Frame { from, bytes }) => Got::Message { from, bytes },
        Some(Incoming::Gone { rank, detail }) => Got::Gone {
            rank,
            detail: format!("the launcher saw it end: {detail}"),
            relay: false,
        },
    }
}

impl Link for MqLinks {
    fn next_record(&mut self, wait: Duration) -> Joined {
        match MqLinks::recv(self, wait) {
            Err(e) => Joined::Refuse(e),
            Ok(None) => Joined::Timeout,
            Ok(Some(Incoming::Gone { rank, detail })) => Joined::Refuse(ended_early(rank, &detail)),
            Ok(Some(Incoming::Frame { from, bytes })) => match RankRecord::decode(&bytes) {
                Ok(r) if r.rank == from => Joined::Record(r),
                Ok(r) => Joined::Refuse(format!("rank {from} sent the record of rank {}", r.rank)),
                Err(e) => Joined::Refuse(format!("rank {from}'s queue message: {e}")),
            },
        }
    }

    fn keep(&mut self, _rank: u32) {}

    fn refuse(&mut self, refusal: &[u8]) {
        for r in 1..self.world() {
            let _ = MqLinks::send(self, r, refusal, Duration::from_millis(500));
        }
    }

    fn never_came(&self, missing: &str, world: u32, within: Duration) -> String {
        format!(
            "{missing} of {world} sent no endpoint record within {:.0} s",
            within.as_secs_f64()
        )
    }

    fn reply(&mut self, wait: Duration) -> Result<Vec<u8>, String> {
        match MqLinks::recv(self, wait)? {
            Some(Incoming::Frame { bytes, .. }) => Ok(bytes),
            Some(Incoming::Gone { rank, detail }) => Err(ended_early(rank, &detail)),
            None => Err(format!(
                "no endpoint table from rank 0 within {:.0} s",
                wait.as_secs_f64()
            )),
        }
    }

    fn send(
        &mut self,
        peer: u32,
        bytes: &[u8],
        what: &str,
        timeout: Duration,
    ) -> Result<(), String> {
        MqLinks::send(self, peer, bytes, timeout).map_err(|e| format!("sending {what}: {e}"))
    }

    fn recv(&mut self, peer: u32, _what: &str, wait: Duration) -> Result<Got, String> {
        let got_now = MqLinks::recv(self, wait.max(Duration::from_millis(1)))?;
        Ok(got(got_now, peer))
    }

    fn poll(&mut self, _timeout: Duration) -> Result<Option<Got>, String> {
        Ok(self.try_recv()?.map(|g| got(Some(g), 0)))
    }
}

/// The star of a world of one: nobody to reach.
pub struct Alone;

impl Link for Alone {
    fn next_record(&mut self, _wait: Duration) -> Joined {
        Joined::Timeout
    }
    fn keep(&mut self, _rank: u32) {}
    fn refuse(&mut self, _refusal: &[u8]) {}
    fn never_came(&self, missing: &str, world: u32, _within: Duration) -> String {
        format!("{missing} of {world} cannot join a world of one")
    }
    fn reply(&mut self, _wait: Duration) -> Result<Vec<u8>, String> {
        Err("a world of one has no rank 0 to hear from".into())
    }
    fn send(&mut self, peer: u32, _: &[u8], _: &str, _: Duration) -> Result<(), String> {
        Err(format!("a world of one has no rank {peer}"))
    }
    fn recv(&mut self, peer: u32, _what: &str, _wait: Duration) -> Result<Got, String> {
        Ok(Got::Silent { peer })
    }
    fn poll(&mut self, _timeout: Duration) -> Result<Option<Got>, String> {
        Ok(None)
    }
}
