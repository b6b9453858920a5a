//! The bootstrap star of a local run (`--np N`) over POSIX message queues (`verbs_lab::mq`).
//!
//! The launcher creates one queue per rank, `{base}-r{I}` with `base` = `/vl-coll-{PID}`
//! ([`QUEUES`]), and owns them: they are removed when it ends, on SIGINT/SIGTERM/SIGHUP,
//! by its ranks when it is killed outright (`PR_SET_PDEATHSIG`), or by the next launcher (the
//! queues of a pid that no longer exists). Rank 0 reads its queue and writes the others'; every
//! other rank reads its own and writes rank 0's — the same star as over TCP, with the same
//! messages: the star's byte strings travel as [`WorkerMsg::Result`] frames from their rank, cut to
//! fit a queue message (a first byte says whether more of the string follows).
//!
//! A queue cannot tell that its writer died, so the launcher does: when a rank exits badly it
//! sends every other rank a [`WorkerMsg::Error`] naming that rank and how it ended, and the star
//! turns it into the error that names the rank ([`Incoming::Gone`]).

use std::time::{Duration, Instant};

use verbs_lab::mq::{MqError, Queue, QueueFamily, WorkerMsg, MAX_RESULT};

/// The queues of local runs: `/vl-coll-{launcher pid}-r{rank}` (the base names the run only).
pub const QUEUES: QueueFamily = QueueFamily {
    prefix: "/vl-coll-",
    tag: "r",
    base_is_queue: false,
};

/// Messages each rank's queue holds before a writer waits.
pub const QUEUE_DEPTH: usize = 8;

/// What arrived on a rank's queue.
#[derive(Debug)]
pub enum Incoming {
    /// A whole byte string from rank `from`.
    Frame { from: u32, bytes: Vec<u8> },
    /// The launcher reports that rank `rank` ended (`detail`: how).
    Gone { rank: u32, detail: String },
}

/// One rank's end of the star: its own queue and the queues it writes.
pub struct MqLinks {
    rank: u32,
    world: u32,
    own: Queue,
    /// Rank 0: index = rank (`None` for itself). Others: `[Some(rank 0's queue)]`.
    to: Vec<Option<Queue>>,
    /// Parts of a string received so far, per sending rank.
    partial: Vec<Vec<u8>>,
}

impl MqLinks {
    /// Opens the queues of `rank` in a run of `world` under `base` (the launcher made them).
    pub fn open(base: &str, rank: u32, world: u32) -> Result<MqLinks, String> {
        let open = |r: u32| {
            Queue::open(&QUEUES.member(base, r)).map_err(|e| {
                format!("rank {rank}: the launcher's queue of rank {r} cannot be opened: {e}")
            })
        };
        let own = open(rank)?;
        let to = if rank == 0 {
            (0..world)
                .map(|r| if r == 0 { Ok(None) } else { open(r).map(Some) })
                .collect::<Result<Vec<_>, _>>()?
        } else {
            vec![Some(open(0)?)]
        };
        Ok(MqLinks {
            rank,
            world,
            own,
            to,
            partial: vec![Vec::new(); world as usize],
        })
    }

    /// The number of ranks in the run.
    pub fn world(&self) -> u32 {
        self.world
    }

    /// Sends `bytes` to `peer` (rank 0, or from rank 0 any rank), waiting at most `timeout` for
    /// room in its queue.
    pub fn send(&mut self, peer: u32, bytes: &[u8], timeout: Duration) -> Result<(), String> {
        let idx = if self.rank == 0 { peer as usize } else { 0 };
        let q = self
            .to
            .get(idx)
            .and_then(Option::as_ref)
            .ok_or_else(|| format!("rank {} has no queue to rank {peer}", self.rank))?;
        let deadline = verbs_lab::fdwait::deadline_after(timeout);
        let mut pieces = bytes.chunks(MAX_RESULT - 1).peekable();
        if bytes.is_empty() {
            return send_piece(q, self.rank, &[], true, timeout);
        }
        while let Some(p) = pieces.next() {
            let left = deadline.saturating_duration_since(Instant::now());
            send_piece(q, self.rank, p, pieces.peek().is_none(), left)?;
        }
        Ok(())
    }

    /// The next whole string or notice, waiting at most `timeout`; `Ok(None)` when none came.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Incoming>, String> {
        let deadline = verbs_lab::fdwait::deadline_after(timeout);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = match self.own.recv_timeout(left) {
                Ok(m) => m,
                Err(MqError::Timeout { .. }) => return Ok(None),
                Err(e) => return Err(e.to_string()),
            };
            if let Some(got) = self.take(msg)? {
                return Ok(Some(got));
            }
        }
    }

    /// As [`MqLinks::recv`] without waiting.
    pub fn try_recv(&mut self) -> Result<Option<Incoming>, String> {
        loop {
            let msg = match self.own.try_recv() {
                Ok((m, _)) => m,
                Err(MqError::WouldBlock { .. }) => return Ok(None),
                Err(e) => return Err(e.to_string()),
            };
            if let Some(got) = self.take(msg)? {
                return Ok(Some(got));
            }
        }
    }

    /// Adds one queue message to what has arrived; a whole string or a notice comes out.
    fn take(&mut self, msg: WorkerMsg) -> Result<Option<Incoming>, String> {
        match msg {
            WorkerMsg::Result { worker, payload } => {
                let expected = worker < self.world && worker != self.rank;
                let (Some((&last, piece)), true) = (payload.split_first(), expected) else {
                    return Err(format!(
                        "rank {}'s queue holds a malformed frame from rank {worker}",
                        self.rank
                    ));
                };
                let buf = &mut self.partial[worker as usize];
                buf.extend_from_slice(piece);
                Ok((last == 1).then(|| Incoming::Frame {
                    from: worker,
                    bytes: std::mem::take(buf),
                }))
            }
            WorkerMsg::Error { worker, message } => Ok(Some(Incoming::Gone {
                rank: worker,
                detail: message,
            })),
            other => Err(format!(
                "rank {}'s queue holds an unexpected {} message",
                self.rank,
                other.kind()
            )),
        }
    }
}

fn send_piece(
    q: &Queue,
    from: u32,
    piece: &[u8],
    last: bool,
    timeout: Duration,
) -> Result<(), String> {
    let mut payload = Vec::with_capacity(piece.len() + 1);
    payload.push(u8::from(last));
    payload.extend_from_slice(piece);
    q.send_timeout(
        &WorkerMsg::Result {
            worker: from,
            payload,
        },
        0,
        timeout.max(Duration::from_millis(1)),
    )
    .map_err(|e| e.to_string())
}

/// The launcher's notice that `rank` ended (`detail`: how), for the other ranks' queues.
pub fn gone_notice(rank: u32, detail: &str) -> WorkerMsg {
    WorkerMsg::error(rank, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let base = QUEUES.base(4242);
        assert_eq!(base, "/vl-coll-4242");
        assert_eq!(QUEUES.owner_of(&base), Some(4242));
        assert_eq!(QUEUES.owner_of("/vl-procs-1"), None);
        assert_eq!(
            QUEUES.all(&base, 2),
            vec!["/vl-coll-4242-r0", "/vl-coll-4242-r1"]
        );
    }
}
