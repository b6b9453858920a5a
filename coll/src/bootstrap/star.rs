//! The [`Star`]: the links between rank 0 and every other rank, kept after the rendezvous for
//! small control messages (gathers, broadcasts, barriers) and liveness — whatever carries them
//! ([`super::link`]).
//!
//! **Who is gone.** A rank that exits closes its link, and rank 0 names it to every rank at once.
//! A host that loses power sends nothing at all, and in a ring every rank downstream of a dead
//! one goes silent in a cascade: a rank whose neighbour has been silent for the peer timeout
//! cannot tell a dead neighbour from one that waits, like itself, for a dead rank further up.
//! So it does not conclude alone ([`Star::verdict`]): it reports the silent rank to rank 0 and
//! waits a bounded verdict. Rank 0 pings the suspect over its link; a live rank's star answers
//! (any message from it counts: a rank that reports is alive), and rank 0 tells the reporter
//! "alive, waiting on someone else"; a suspect that does not answer within [`ANSWER_BOUND`] is
//! named gone to every rank. A reporter that hears nothing from rank 0 within [`VERDICT_BOUND`]
//! names rank 0: its host is the one that went. None of this costs a message while the job
//! runs: it begins only when a peer timeout has passed.

use std::collections::VecDeque;
use std::thread;
use std::time::{Duration, Instant};

use super::link::{Alone, Got, Link};
use super::{
    check_gids, decode_reply, encode_refusal, encode_table, places, same_rank, CollError, Place,
    RankRecord, Result,
};
use verbs_lab::wire::{Reader, Width, Writer};

/// Control messages on the star.
const ABORT: u8 = b'A';
const DATA: u8 = b'D';
/// A rank to rank 0: "rank X has been silent for the peer timeout" (u32 X, text: how).
const SUSPECT: u8 = b'S';
/// Rank 0 to a suspect: answer if you are alive; the answer, [`PONG`], carries nothing.
const PING: u8 = b'P';
const PONG: u8 = b'O';
/// Rank 0 to a reporter: "rank X answered: it is alive, waiting on someone else" (u32 X).
const ALIVE: u8 = b'L';

/// How long rank 0 gives a suspect to answer its ping before it names it gone. A live rank's
/// star is looked at every few tens of milliseconds while it waits on the NIC.
pub const ANSWER_BOUND: Duration = Duration::from_secs(3);
/// How long a rank that reported a silent neighbour waits for rank 0's verdict before it names
/// rank 0 itself; once more when rank 0 says the neighbour is alive (the rank that really went
/// may be reported a little later by its own neighbour). A failure without a FIN is therefore
/// named within the peer timeout + [`ANSWER_BOUND`] as a rule, + 2 × [`VERDICT_BOUND`] at most.
pub const VERDICT_BOUND: Duration = Duration::from_secs(5);
/// A best-effort control message (an abort, a ping, a verdict) may take this long to send.
const SEND_BOUND: Duration = Duration::from_millis(500);
/// Rank 0, blocked on one rank's link (a gather), looks at the others this often.
const TEND_EVERY: Duration = Duration::from_millis(100);

/// Rank 0: a rank reported silent and pinged, not yet heard from.
struct Suspect {
    pinged: Instant,
    /// Who reported it, and in what words the first one did.
    reporters: Vec<u32>,
    detail: String,
}

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
    /// Rank 0: the ranks it pinged because another reported them silent (index = rank).
    suspects: Vec<Option<Suspect>>,
    /// The last rank that rank 0 said is alive, in answer to our report.
    told_alive: Option<u32>,
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
            suspects: table.iter().map(|_| None).collect(),
            table,
            timeout,
            first_gone: None,
            told_alive: None,
        }
    }

    /// A star of one: world size 1.
    pub fn single(mine: RankRecord) -> Star {
        Star::new(0, Box::new(Alone), vec![mine], Duration::from_secs(1))
    }

    pub fn table(&self) -> &[RankRecord] {
        &self.table
    }

    /// Ends the star and hands over its link and table, for a tool that goes on talking to the
    /// ranks in its own words after the rendezvous and outlives a rank that is gone, where the
    /// star ends the whole job (`vl_fabric_check`, which names the host and checks the rest).
    pub fn into_parts(self) -> (Box<dyn Link>, Vec<RankRecord>) {
        (self.link, self.table)
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
        self.judge()
    }

    /// What the link found while we waited for `peer` (`None`: while we only looked): a
    /// message from `peer` is returned; one from another rank is kept for later; a rank gone
    /// or silent is the error that names it.
    fn take(&mut self, got: Got, peer: Option<u32>) -> Result<Option<Vec<u8>>> {
        match got {
            Got::Message { from, bytes } => {
                if self.rank == 0 {
                    self.heard_from(from);
                }
                let Some(m) = self.interpret(from, bytes)? else {
                    return Ok(None);
                };
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
        // Rank 0 looks at the other links now and then: a report of a silent rank may need its
        // verdict meanwhile (see the module's documentation).
        let deadline = verbs_lab::fdwait::deadline_after(self.timeout);
        loop {
            if let Some(m) = self.early[peer as usize].pop_front() {
                return Ok(m);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = if self.rank == 0 {
                left.min(TEND_EVERY)
            } else {
                left
            };
            match self
                .link
                .recv(peer, what, wait)
                .map_err(CollError::Failed)?
            {
                Got::Silent { .. } if Instant::now() < deadline => {
                    if self.rank == 0 {
                        self.check_alive()?;
                    }
                }
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

    /// A message from `peer`: DATA gives its bytes, ABORT the error naming the rank gone; the
    /// messages of a verdict (see the module's documentation) are handled here and give `None`.
    fn interpret(&mut self, peer: u32, m: Vec<u8>) -> Result<Option<Vec<u8>>> {
        let malformed =
            || CollError::Failed(format!("rank {peer} sent a malformed control message"));
        match m.first() {
            Some(&DATA) => Ok(Some(m[1..].to_vec())),
            Some(&PING) if self.rank != 0 => {
                let _ = self
                    .link
                    .send(0, &[PONG], "an answer to a ping", SEND_BOUND);
                Ok(None)
            }
            Some(&PONG) if self.rank == 0 => Ok(None),
            Some(&SUSPECT) if self.rank == 0 => {
                let mut r = Reader::new(&m[1..]);
                let (Ok(x), Ok(detail)) = (r.u32("rank"), r.text(Width::U32, "detail", MAX_WORDS))
                else {
                    return Err(malformed());
                };
                if x as usize >= self.table.len() {
                    return Err(malformed());
                }
                let detail = detail.to_string();
                self.suspect(x, peer, detail);
                Ok(None)
            }
            Some(&ALIVE) if self.rank != 0 => {
                let x = Reader::new(&m[1..]).u32("rank").map_err(|_| malformed())?;
                self.told_alive = Some(x);
                Ok(None)
            }
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
            _ => Err(malformed()),
        }
    }

    /// `peer`'s abort names this rank: it gave up waiting for us (its timeout ran out while we
    /// were elsewhere, e.g. in a collective it never called). We are not gone, and an error
    /// saying so would name ourselves: say what happened instead.
    fn blamed(&self, peer: u32, detail: &str) -> CollError {
        let who = |r: u32| self.who(r);
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
            let _ = self.link.send(r, &p, "an abort message", SEND_BOUND);
        }
    }

    /// This rank has had nothing from its ring neighbour `peer` for the peer timeout (`detail`
    /// says what it waited for, e.g. "no data from it for 20 s (the peer timeout)"). Whether
    /// `peer` is gone or waits, like us, on a rank gone further up the ring, only rank 0 can
    /// tell: this reports `peer` to it and waits for its verdict, answering rank 0's pings
    /// meanwhile, and gives the error to end with — the rank rank 0 names gone (every rank
    /// names the same one), rank 0 itself when it gives no verdict within [`VERDICT_BOUND`]
    /// (its host is the one that went), or, when `peer` is alive and nobody is found gone, that
    /// the ranks wait on each other. Rank 0 judges its own reports the same way.
    pub fn verdict(&mut self, peer: u32, detail: &str) -> CollError {
        if let Err(e) = self.check_alive() {
            return e;
        }
        self.told_alive = None;
        if self.rank == 0 {
            self.suspect(peer, 0, detail.to_string());
        } else {
            let mut p = Writer::new();
            p.u8(SUSPECT);
            p.u32(peer);
            p.text(Width::U32, clip(detail)).expect("clipped");
            if let Err(e) = self.link.send(0, &p.into_bytes(), "our report", SEND_BOUND) {
                let e = gone(
                    &self.table,
                    0,
                    format!(
                        "we could not report to it that {} was silent ({detail}): {e}",
                        self.who(peer)
                    ),
                );
                self.first_gone.get_or_insert((0, detail.to_string()));
                return e;
            }
        }
        let mut deadline = Instant::now() + VERDICT_BOUND;
        let mut alive = false;
        loop {
            if let Err(e) = self.check_alive() {
                return e;
            }
            if self.told_alive.take() == Some(peer) && !alive {
                alive = true;
                deadline = Instant::now() + VERDICT_BOUND;
            }
            if Instant::now() >= deadline {
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let bound = VERDICT_BOUND.as_secs();
        if alive {
            return CollError::Failed(format!(
                "{detail}, said of {}; yet it is alive (it answered rank 0), and no rank was \
                 found gone within {bound} s: the ranks wait on each other — check that every \
                 rank runs the same collectives with the same options",
                self.who(peer)
            ));
        }
        let detail = if peer == 0 {
            format!("{detail}, and no answer on the star within {bound} s either")
        } else {
            format!(
                "it gave no verdict within {bound} s on our report that {} was silent \
                 ({detail}): its star connection is silent too",
                self.who(peer)
            )
        };
        self.first_gone.get_or_insert((0, detail.clone()));
        gone(&self.table, 0, detail)
    }

    /// "rank 2 (host h, pid 1, rxe0)".
    fn who(&self, rank: u32) -> String {
        self.table
            .get(rank as usize)
            .map_or(format!("rank {rank}"), RankRecord::who)
    }

    /// Rank 0: `reporter` says `x` has been silent (in its words, `detail`). Pings `x`, unless
    /// it is pinged already or is rank 0 itself, which is alive since it judges.
    fn suspect(&mut self, x: u32, reporter: u32, detail: String) {
        if self.first_gone.is_some() {
            return; // every rank has been told, or is being told, who is gone
        }
        if x == 0 {
            self.tell_alive(0, reporter);
            return;
        }
        if let Some(s) = &mut self.suspects[x as usize] {
            s.reporters.push(reporter);
            return;
        }
        // A failed send leaves the suspect unanswered: the deadline names it.
        let _ = self.link.send(x, &[PING], "a ping", SEND_BOUND);
        self.suspects[x as usize] = Some(Suspect {
            pinged: Instant::now(),
            reporters: vec![reporter],
            detail,
        });
    }

    /// Rank 0 heard from rank `from`: if it was a suspect, its reporters learn it is alive.
    fn heard_from(&mut self, from: u32) {
        let Some(s) = self.suspects.get_mut(from as usize).and_then(Option::take) else {
            return;
        };
        for r in s.reporters {
            self.tell_alive(from, r);
        }
    }

    /// Rank 0 tells `reporter` that `x` is alive (itself, when it reported).
    fn tell_alive(&mut self, x: u32, reporter: u32) {
        if reporter == 0 {
            self.told_alive = Some(x);
            return;
        }
        let mut p = Writer::new();
        p.u8(ALIVE);
        p.u32(x);
        let _ = self
            .link
            .send(reporter, &p.into_bytes(), "a verdict", SEND_BOUND);
    }

    /// Rank 0: a suspect that has not answered its ping within [`ANSWER_BOUND`] is gone; every
    /// rank is told.
    fn judge(&mut self) -> Result<()> {
        let late = self.suspects.iter().enumerate().find_map(|(x, s)| {
            s.as_ref()
                .filter(|s| s.pinged.elapsed() >= ANSWER_BOUND)
                .map(|s| (x as u32, s.reporters[0], s.detail.clone()))
        });
        let Some((x, reporter, detail)) = late else {
            return Ok(());
        };
        self.suspects[x as usize] = None;
        let secs = ANSWER_BOUND.as_secs();
        let detail = if reporter == 0 {
            format!("{detail}, and it did not answer our ping within {secs} s")
        } else {
            format!(
                "{detail}, reported rank {reporter}, and it did not answer rank 0's ping within \
                 {secs} s"
            )
        };
        let e = gone(&self.table, x, detail);
        self.abort(&e);
        Err(e)
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

/// The longest report words sent: a report is one short line.
const MAX_WORDS: usize = 4096;

/// `s`, cut to [`MAX_WORDS`] bytes at a character boundary.
fn clip(s: &str) -> &str {
    let mut end = s.len().min(MAX_WORDS);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
