//! The [`Star`]: the links between rank 0 and every other rank, kept after the rendezvous for
//! small control messages (gathers, broadcasts, barriers) and liveness — whatever carries them
//! ([`super::link`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::link::{Alone, Got, Link};
use super::{
    check_gids, decode_reply, encode_refusal, encode_table, places, same_rank, CollError, Place,
    RankRecord, Result,
};
use crate::wire::{Reader, Width, Writer};

/// Control messages on the star.
const ABORT: u8 = b'A';
const DATA: u8 = b'D';

/// The links between rank 0 and every other rank, kept open after the rendezvous.
pub struct Star {
    rank: u32,
    link: Box<dyn Link>,
    /// DATA messages that arrived while the star looked for something else (a rank that
    /// finished a collective early and sent its part of the next gather), per peer rank.
    early: Vec<VecDeque<Vec<u8>>>,
    table: Vec<RankRecord>,
    timeout: Duration,
    /// The first rank this side found or was told is gone, and why. Every later check names it
    /// again: the ranks that end *because* we told them close their sockets too, and must not
    /// be taken for the cause.
    first_gone: Option<(u32, String)>,
}

pub(super) fn gone(t: &[RankRecord], rank: u32, detail: String) -> CollError {
    CollError::RankGone {
        rank,
        who: t
            .get(rank as usize)
            .map_or(format!("rank {rank}"), RankRecord::who),
        detail,
    }
}

impl Star {
    /// The star of `rank` over `link`, once the rendezvous gave `table`.
    pub(super) fn new(
        rank: u32,
        link: Box<dyn Link>,
        table: Vec<RankRecord>,
        timeout: Duration,
    ) -> Star {
        Star {
            rank,
            link,
            early: vec![VecDeque::new(); table.len()],
            table,
            timeout,
            first_gone: None,
        }
    }

    /// A star of one: world size 1.
    pub fn single(mine: RankRecord) -> Star {
        Star::new(0, Box::new(Alone), vec![mine], Duration::from_secs(1))
    }

    pub fn table(&self) -> &[RankRecord] {
        &self.table
    }

    /// This rank's place among the ranks of its host (see [`super::place`]).
    pub fn place(&self) -> Place {
        places(&self.table)[self.rank as usize]
    }

    /// The rendezvous' second round: every rank sends rank 0 its record again, now with its
    /// device, GID and endpoints (`mine`: the record of the first round, filled in); rank 0
    /// checks the GIDs of the whole table and sends everyone the table, or its refusal, naming
    /// the rank (the same words as [`super::admit`]'s). Bounded by the star's timeout; the
    /// others wait longer, for rank 0 may wait that long for the last rank.
    pub fn complete(&mut self, mine: RankRecord) -> Result<()> {
        if !same_rank(&self.table[self.rank as usize], &mine) {
            return Err(CollError::Bootstrap(format!(
                "the second round's record of rank {} is not the first round's",
                self.rank
            )));
        }
        if self.rank != 0 {
            self.send_to(0, &mine.encode(), "our endpoint record")?;
            let t = self.timeout;
            self.timeout = t * 2 + Duration::from_secs(5);
            let reply = self.recv_from(0, "the endpoint table from rank 0");
            self.timeout = t;
            let table = decode_reply(&reply?).map_err(CollError::Bootstrap)?;
            if table.len() != self.table.len() || table[self.rank as usize] != mine {
                return Err(CollError::Bootstrap(format!(
                    "rank 0's table ({} ranks) does not hold our record as we sent it",
                    table.len()
                )));
            }
            self.table = table;
            return Ok(());
        }
        let mut table = vec![mine];
        for r in 1..self.table.len() as u32 {
            let m = self.recv_from(r, "an endpoint record")?;
            let rec = RankRecord::decode(&m)
                .map_err(|e| format!("rank {r}'s second record: {e}"))
                .and_then(|rec| match same_rank(&self.table[r as usize], &rec) {
                    true => Ok(rec),
                    false => Err(format!("rank {r}'s second record is not its first")),
                });
            match rec {
                Ok(rec) => table.push(rec),
                Err(why) => return Err(self.refuse(why)),
            }
        }
        if let Err(why) = check_gids(&table) {
            return Err(self.refuse(why));
        }
        let blob = encode_table(&table);
        self.table = table;
        for r in 1..self.table.len() as u32 {
            self.send_to(r, &blob, "the endpoint table")?;
        }
        Ok(())
    }

    /// Rank 0 in the second round: tells every rank why the job cannot go on.
    fn refuse(&mut self, why: String) -> CollError {
        let refusal = encode_refusal(&why);
        for r in 1..self.table.len() as u32 {
            let _ = self.send_to(r, &refusal, "the refusal");
        }
        CollError::Bootstrap(why)
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes how long control messages may take (e.g. longer than a slow collective).
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// Looks at the links without blocking: `Err` names a rank that is gone (its socket closed,
    /// the launcher saw it end, or rank 0 relayed that it is). Call it now and then while
    /// waiting on the NIC. Once a rank is known gone, every call names that rank, not one that
    /// ended after it.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some((rank, detail)) = &self.first_gone {
            return Err(gone(&self.table, *rank, detail.clone()));
        }
        while let Some(got) = self.link.poll(self.timeout).map_err(CollError::Failed)? {
            self.take(got, None)?;
        }
        Ok(())
    }

    /// What the link found while we waited for `peer` (`None`: while we only looked): a
    /// message from `peer` is returned; one from another rank is kept for later; a rank gone
    /// or silent is the error that names it.
    fn take(&mut self, got: Got, peer: Option<u32>) -> Result<Option<Vec<u8>>> {
        match got {
            Got::Message { from, bytes } => {
                let m = self.interpret(from, bytes)?;
                if Some(from) == peer {
                    return Ok(Some(m));
                }
                self.early[from as usize].push_back(m);
                Ok(None)
            }
            Got::Gone {
                rank,
                detail,
                relay,
            } => {
                let e = gone(&self.table, rank, detail);
                if relay {
                    self.abort(&e);
                }
                Err(e)
            }
            Got::Silent { peer } => {
                let e = self.silent(peer, "a control message");
                self.abort(&e);
                Err(e)
            }
        }
    }

    fn silent(&self, peer: u32, what: &str) -> CollError {
        gone(
            &self.table,
            peer,
            format!(
                "silent for {:.0} s while we waited for {what}",
                self.timeout.as_secs_f64()
            ),
        )
    }

    /// Receives one DATA message from `peer` (a rank on the star); an ABORT, a closed link or
    /// the launcher's notice becomes the error that names the rank that is gone.
    fn recv_from(&mut self, peer: u32, what: &str) -> Result<Vec<u8>> {
        if let Some(m) = self.early[peer as usize].pop_front() {
            return Ok(m);
        }
        // Messages from other ranks that arrive meanwhile are kept for later (an abort from any
        // of them ends the wait).
        let deadline = crate::fdwait::deadline_after(self.timeout);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .link
                .recv(peer, what, left)
                .map_err(CollError::Failed)?
            {
                Got::Silent { .. } if Instant::now() < deadline => {}
                Got::Silent { .. } => {
                    let e = self.silent(peer, what);
                    self.abort(&e);
                    return Err(e);
                }
                got => {
                    if let Some(m) = self.take(got, Some(peer))? {
                        return Ok(m);
                    }
                }
            }
        }
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
        let peers: Vec<u32> = if self.rank == 0 {
            (1..self.table.len() as u32)
                .filter(|&r| r != rank)
                .collect()
        } else {
            vec![0]
        };
        for r in peers {
            let _ = self
                .link
                .send(r, &p, "an abort message", Duration::from_millis(500));
        }
    }

    fn send_to(&mut self, peer: u32, data: &[u8], what: &str) -> Result<()> {
        let mut m = Vec::with_capacity(data.len() + 1);
        m.push(DATA);
        m.extend_from_slice(data);
        self.link
            .send(peer, &m, what, self.timeout)
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
