//! The ranks after the rendezvous: rank 0 hands every live rank its flows of a round and takes
//! back their numbers, over the links the collectives' rendezvous made
//! ([`crate::bootstrap`]). Unlike the collectives' star, which ends the job when a
//! rank goes, this keeps going: a rank whose link closes, or that has not answered when its
//! round's bound passes, is named gone with the round and the reason, and the later rounds
//! leave it out.
//!
//! Messages: rank 0 → rank: `F` + the rank's flows (possibly none), `E` + the exit status;
//! rank → rank 0: `O` + its client flows' outcomes.

use std::time::{Duration, Instant};

use crate::bootstrap::link::{Got, Link};
use crate::RankRecord;
use verbs_lab::wire::Reader;

use super::args::Args;
use super::flows::{
    decode_flows, decode_outcomes, encode_flows, encode_outcomes, run_flows, Flow, Outcome,
};

const FLOWS: u8 = b'F';
const END: u8 = b'E';
const OUTCOMES: u8 = b'O';

/// A control message's send bound.
const SEND_BOUND: Duration = Duration::from_secs(10);
/// How long rank 0 waits, after a rank's partner reported that their test failed, before it
/// names a rank that has not answered gone: `--wait` (a live rank may be a server waiting for
/// the client that gave up) plus this margin (the tools' peer timeout and slack). A live rank
/// skips its later tests with a failed peer, so it answers within that.
pub const AFTER_PARTNER_MARGIN: Duration = Duration::from_secs(20);
/// How often rank 0 looks at each link it waits on.
const LOOK: Duration = Duration::from_millis(5);

/// Rank 0's view of the job.
pub struct World {
    link: Box<dyn Link>,
    pub table: Vec<RankRecord>,
    /// Per rank: why it is gone, and in which round (`None`: alive).
    pub gone: Vec<Option<String>>,
}

/// One round's outcomes, by flow id (`None`: nobody reported it).
pub type RoundOutcomes = Vec<Option<Result<f64, String>>>;

impl World {
    pub fn new(link: Box<dyn Link>, table: Vec<RankRecord>) -> World {
        let gone = vec![None; table.len()];
        World { link, table, gone }
    }

    pub fn alive(&self, r: usize) -> bool {
        self.gone[r].is_none()
    }

    fn mark_gone(&mut self, r: u32, round: &str, why: &str) {
        let slot = &mut self.gone[r as usize];
        if slot.is_none() {
            *slot = Some(format!("gone in {round}: {why}"));
        }
    }

    /// Runs one round of `flows` (every flow between live ranks): each live rank gets its own,
    /// rank 0 runs its part, then waits for every other live rank's outcomes — at most
    /// `--round-timeout`, and at most [`AFTER_PARTNER_MARGIN`] after the partner of a silent rank
    /// reported a failure. `round` names the round in a gone rank's reason.
    pub fn round(&mut self, args: &Args, flows: &[Flow], round: &str) -> RoundOutcomes {
        let n = self.table.len();
        let start = Instant::now();
        let mine = |r: u32| -> Vec<Flow> {
            flows
                .iter()
                .filter(|f| f.src == r || f.dst == r)
                .copied()
                .collect()
        };
        let mut pending = Vec::new();
        for r in 1..n as u32 {
            if !self.alive(r as usize) {
                continue;
            }
            let mut m = vec![FLOWS];
            m.extend(encode_flows(&mine(r)));
            match self.link.send(r, &m, "a round's flows", SEND_BOUND) {
                Ok(()) => pending.push(r),
                Err(e) => self.mark_gone(r, round, &format!("sending it its flows failed: {e}")),
            }
        }
        let mut out: RoundOutcomes = vec![None; flows.len()];
        let record = |out: &mut RoundOutcomes, got: Vec<Outcome>| {
            for (id, r) in got {
                // A server's failure does not undo its client's number.
                match out.get_mut(id as usize) {
                    Some(Some(Ok(_))) | None => {}
                    Some(slot) => *slot = Some(r),
                }
            }
        };
        let own = run_flows(args, &self.table, 0, &mine(0));
        record(&mut out, own);
        let bound = Duration::from_secs(args.round_timeout);
        let after_partner = Duration::from_secs(args.wait) + AFTER_PARTNER_MARGIN;
        // When a rank's partner reported that a flow between them failed.
        let mut trouble: Vec<Option<Instant>> = vec![None; n];
        let note_trouble = |out: &RoundOutcomes, trouble: &mut Vec<Option<Instant>>| {
            for (f, o) in flows.iter().zip(out) {
                if let Some(Err(_)) = o {
                    for r in [f.src, f.dst] {
                        trouble[r as usize].get_or_insert_with(Instant::now);
                    }
                }
            }
        };
        note_trouble(&out, &mut trouble);
        while !pending.is_empty() {
            let mut still = Vec::new();
            for &r in &pending {
                match self.link.recv(r, "a round's outcomes", LOOK) {
                    Ok(Got::Message { bytes, .. }) => match parse_outcomes(&bytes) {
                        Ok(got) => record(&mut out, got),
                        Err(e) => self.mark_gone(r, round, &format!("it sent {e}")),
                    },
                    Ok(Got::Gone { detail, .. }) => self.mark_gone(r, round, &detail),
                    Ok(Got::Silent { .. }) => still.push(r),
                    Err(e) => self.mark_gone(r, round, &e),
                }
            }
            note_trouble(&out, &mut trouble);
            pending.clear();
            for r in still {
                let late = start.elapsed() >= bound;
                let after = trouble[r as usize].is_some_and(|t| t.elapsed() >= after_partner);
                if late || after {
                    let why = if late {
                        format!("no answer within --round-timeout {} s", args.round_timeout)
                    } else {
                        format!(
                            "no answer {} s (--wait + {} s) after a test with it failed",
                            after_partner.as_secs(),
                            AFTER_PARTNER_MARGIN.as_secs()
                        )
                    };
                    self.mark_gone(r, round, &why);
                } else {
                    pending.push(r);
                }
            }
        }
        out
    }

    /// Tells every live rank the exit status (best effort).
    pub fn end(&mut self, code: u8) {
        for r in 1..self.table.len() as u32 {
            if self.alive(r as usize) {
                let _ = self
                    .link
                    .send(r, &[END, code], "the exit status", SEND_BOUND);
            }
        }
    }
}

fn parse_outcomes(b: &[u8]) -> Result<Vec<Outcome>, String> {
    match b.split_first() {
        Some((&OUTCOMES, rest)) => {
            decode_outcomes(&mut Reader::new(rest)).map_err(|e| format!("garbled outcomes: {e}"))
        }
        _ => Err("a message that is no round's outcomes".into()),
    }
}

/// A rank other than 0: runs the flows rank 0 sends, round after round, and returns the exit
/// status rank 0 sends at the end. Waits for rank 0 at most twice `--round-timeout` (plus a
/// minute) between two messages; rank 0 gone or silent is the error.
pub fn follow(
    args: &Args,
    mut link: Box<dyn Link>,
    table: &[RankRecord],
    me: u32,
) -> Result<u8, String> {
    let wait = Duration::from_secs(2 * args.round_timeout + 60);
    let rank0 = table[0].who();
    loop {
        let m = match link.recv(0, "rank 0's next round", wait)? {
            Got::Message { bytes, .. } => bytes,
            Got::Gone { detail, .. } => return Err(format!("{rank0} is gone: {detail}")),
            Got::Silent { .. } => {
                return Err(format!(
                    "{rank0} sent nothing for {} s (2 x --round-timeout + 60 s)",
                    wait.as_secs()
                ))
            }
        };
        match m.split_first() {
            Some((&FLOWS, rest)) => {
                let flows = decode_flows(&mut Reader::new(rest))
                    .map_err(|e| format!("rank 0's flows are garbled: {e}"))?;
                let got = run_flows(args, table, me, &flows);
                let mut reply = vec![OUTCOMES];
                reply.extend(encode_outcomes(&got));
                link.send(0, &reply, "our outcomes", SEND_BOUND)
                    .map_err(|e| format!("sending rank 0 our outcomes: {e}"))?;
            }
            Some((&END, [code])) => return Ok(*code),
            _ => return Err("rank 0 sent a message of no known kind".into()),
        }
    }
}
