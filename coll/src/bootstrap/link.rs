//! The [`Link`]: one rank's end of the star around rank 0, whatever carries it — TCP
//! connections to rank 0 ([`TcpLink`], ranks on any host) or the launcher's POSIX message queues
//! ([`MqLinks`], the ranks of one `--np` run). The rendezvous ([`super::rendezvous`]) and the
//! [`super::Star`] are written once against it; a link only moves whole messages and says, in
//! its own words, how a peer arrived, went or stayed silent.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{encode_refusal, CollError, RankRecord, MAX_MSG, PROTOCOL_VERSION};
use crate::mqlink::{Incoming, MqLinks};
use verbs_lab::oob::{self, Listener, OobConn, OobError};

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

/// How long a connection to the master port has to deliver its whole endpoint record: a rank
/// sends it as soon as it has connected. A connection that does not (a port scan, a health
/// check, a client of another tool, a slow trickle) is a stranger: logged and closed.
pub const RECORD_WAIT: Duration = Duration::from_secs(10);
/// Connections to the master port read at once; one more is a stranger, closed at once.
pub const MAX_READING: usize = 256;
/// How long rank 0, its world complete, lets the connections still being read finish before
/// it logs them as they are.
const CLOSE_GRACE: Duration = Duration::from_millis(200);
/// How often the thread that accepts on the master port looks whether it should stop.
const DOOR_TICK: Duration = Duration::from_millis(50);

/// The star over TCP: rank 0 listens on the master port and keeps a connection per rank; every
/// other rank connects to it.
pub struct TcpLink {
    rank: u32,
    world: u32,
    master: (String, u16),
    /// Rank 0: index = rank (`None` for itself and ranks not in yet). Others: `[Some(rank 0)]`.
    conns: Vec<Option<OobConn>>,
    /// Rank 0 during the rendezvous: the master port's door, the connection just read, and
    /// those refused.
    door: Option<Door>,
    pending: Option<OobConn>,
    strays: Vec<OobConn>,
    /// Rank 0: the strangers ignored so far (address and why), for the message of a rendezvous
    /// that ends without every rank.
    ignored: Vec<String>,
}

/// What a connection to the master port turned out to be.
enum Arrival {
    /// A record of our protocol version, decoded: a rank (which [`super::admit`] may still
    /// refuse by name: another world size, a taken number, other terms).
    Record(OobConn, Box<RankRecord>),
    /// Not a rank of this job: from where, and why, in a few words.
    Stranger(SocketAddr, String),
    /// The master port itself failed (accept(2)).
    Failed(String),
}

/// Rank 0's master port during the rendezvous: a thread accepts every connection and hands it
/// to a thread of its own, which reads its record within [`RECORD_WAIT`]; what each turned out
/// to be comes over a channel. So a connection that is not a rank, however slowly it trickles,
/// holds up nothing but its own thread. Dropping the door stops the accepting (within
/// [`DOOR_TICK`]) and closes the port; readers still at work end within their bound.
struct Door {
    arrivals: mpsc::Receiver<Arrival>,
    /// The connections being read (their readers remove them when done).
    reading: Reading,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

/// The addresses of the connections whose first message is being read.
type Reading = Arc<Mutex<Vec<SocketAddr>>>;

fn reading_list(r: &Reading) -> std::sync::MutexGuard<'_, Vec<SocketAddr>> {
    // A reader that panicked leaves the list as it was: still a list of addresses.
    r.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Door {
    fn open(listener: Listener) -> std::io::Result<Door> {
        let (tx, arrivals) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let reading: Reading = Arc::default();
        let (stopped, in_flight) = (stop.clone(), reading.clone());
        let acceptor = std::thread::Builder::new()
            .name("master-port".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    let c = match listener.accept_conn(DOOR_TICK, RECORD_WAIT) {
                        Ok(c) => c,
                        Err(OobError::Timeout { .. }) => continue,
                        Err(e) => {
                            let _ = tx.send(Arrival::Failed(e.to_string()));
                            return;
                        }
                    };
                    let peer = c.peer();
                    {
                        let mut list = reading_list(&in_flight);
                        if list.len() >= MAX_READING {
                            let why = format!("{MAX_READING} connections are being read already");
                            let _ = tx.send(Arrival::Stranger(peer, why));
                            continue;
                        }
                        list.push(peer);
                    }
                    let (tx, done) = (tx.clone(), in_flight.clone());
                    let read = std::thread::Builder::new()
                        .name("master-port-read".into())
                        .spawn(move || {
                            let _ = tx.send(read_arrival(c));
                            reading_list(&done).retain(|p| *p != peer);
                        });
                    if read.is_err() {
                        reading_list(&in_flight).retain(|p| *p != peer);
                    }
                }
            })?;
        Ok(Door {
            arrivals,
            reading,
            stop,
            acceptor: Some(acceptor),
        })
    }

    /// Closes the door once the world is complete, and says what became of every connection
    /// not yet logged: strangers that arrived after the last rank, and connections still being
    /// read (a trickle), as one line each through `ignore`.
    fn close(mut self, mut ignore: impl FnMut(SocketAddr, &str)) {
        self.stop_accepting();
        // Readers that have their answer already get a moment to say it.
        let start = std::time::Instant::now();
        loop {
            while let Ok(a) = self.arrivals.try_recv() {
                if let Arrival::Stranger(peer, why) = a {
                    ignore(peer, &why);
                }
            }
            if reading_list(&self.reading).is_empty() || start.elapsed() >= CLOSE_GRACE {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        for peer in reading_list(&self.reading).iter() {
            ignore(
                *peer,
                "no whole endpoint record yet when the world was complete",
            );
        }
    }

    fn stop_accepting(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        self.stop_accepting();
    }
}

/// Reads what a new connection to the master port opens with, within [`RECORD_WAIT`]: a rank's
/// record, or why it is a stranger. A record of another protocol version is a stranger too (a
/// process of another build): it is told so, best effort, and the rendezvous goes on.
fn read_arrival(mut c: OobConn) -> Arrival {
    let peer = c.peer();
    let m = match c.recv_msg(MAX_MSG, "an endpoint record") {
        Ok(m) => m,
        Err(e) => return Arrival::Stranger(peer, stranger_why(&e)),
    };
    match RankRecord::peek_version(&m) {
        Ok(PROTOCOL_VERSION) => {}
        Ok(v) => {
            let why = format!(
                "a rank of bootstrap protocol version {v}, this build speaks version {PROTOCOL_VERSION}: run the same verbs-lab build on every rank"
            );
            // Its whole record was read: closing now sends a FIN after the refusal, no reset.
            let _ = c.send_msg(&encode_refusal(&why), "the refusal");
            return Arrival::Stranger(peer, why);
        }
        // perftest's protocol: a type byte 1 (HELLO), then its magic.
        Err(_) if m.get(1..5) == Some(b"VLPT") => {
            return Arrival::Stranger(
                peer,
                "a vl_* benchmark's client (its HELLO), not a rank".into(),
            )
        }
        Err(_) => {
            return Arrival::Stranger(peer, "its first message is not an endpoint record".into())
        }
    }
    match RankRecord::decode(&m) {
        Ok(r) => Arrival::Record(c, Box::new(r)),
        Err(e) => Arrival::Stranger(peer, e),
    }
}

/// Why a connection that sent no whole record is a stranger.
fn stranger_why(e: &OobError) -> String {
    match e {
        OobError::Closed { got: 0, .. } => "it closed the connection without a word".into(),
        OobError::Closed { got, .. } => {
            format!("it sent {got} byte(s), then closed the connection")
        }
        OobError::Timeout { .. } => format!(
            "no whole endpoint record within {} s",
            RECORD_WAIT.as_secs()
        ),
        OobError::TooLong { .. } => {
            "its opening bytes are not a verbs-lab frame (another protocol?)".into()
        }
        e => e.to_string(),
    }
}

impl TcpLink {
    /// Rank 0's end: listens on the master port (`master.1`) for `world - 1` ranks.
    pub fn listen(master: (&str, u16), world: u32) -> Result<TcpLink, CollError> {
        let listener = Listener::bind(master.1).map_err(|e| cannot_listen(master.1, e))?;
        let door = Door::open(listener).map_err(|e| {
            CollError::Bootstrap(format!(
                "rank 0 cannot start the thread that accepts ranks on the master port: {e}"
            ))
        })?;
        Ok(TcpLink {
            rank: 0,
            world,
            master: (master.0.to_string(), master.1),
            conns: (0..world).map(|_| None).collect(),
            door: Some(door),
            pending: None,
            strays: Vec::new(),
            ignored: Vec::new(),
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
            door: None,
            pending: None,
            strays: Vec::new(),
            ignored: Vec::new(),
        })
    }

    /// Rank 0: a connection to the master port that is not a rank of this job, logged in one
    /// line and dropped; the rendezvous goes on.
    fn ignore(&mut self, peer: SocketAddr, why: &str) {
        verbs_lab::eprintln_whole!(
            "{}: rank 0 ignored a connection from {peer} to the master port {}: {why}",
            verbs_lab::stderr::program_name(),
            self.master.1
        );
        self.ignored.push(format!("{peer}: {why}"));
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
        let deadline = std::time::Instant::now() + wait;
        loop {
            let door = self.door.as_ref().expect("rank 0 listens");
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match door.arrivals.recv_timeout(left) {
                Ok(Arrival::Record(c, r)) => {
                    self.pending = Some(c);
                    return Joined::Record(*r);
                }
                Ok(Arrival::Stranger(peer, why)) => self.ignore(peer, &why),
                Ok(Arrival::Failed(e)) => return Joined::Refuse(e),
                Err(mpsc::RecvTimeoutError::Timeout) => return Joined::Timeout,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Joined::Refuse("the thread that accepts ranks ended".into())
                }
            }
        }
    }

    fn keep(&mut self, rank: u32) {
        self.conns[rank as usize] = self.pending.take();
    }

    fn refuse(&mut self, refusal: &[u8]) {
        self.strays.extend(self.pending.take());
        // Ranks whose records have come meanwhile are told too, rather than finding the
        // connection closed (their record read: closing a socket with unread bytes would reset
        // it and lose the refusal). Those that come later find no rank 0.
        if let Some(door) = self.door.take() {
            while self.strays.len() <= self.world as usize {
                match door.arrivals.recv_timeout(Duration::from_millis(250)) {
                    Ok(Arrival::Record(c, _)) => self.strays.push(c),
                    Ok(_) => {}
                    Err(_) => break,
                }
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
        if let Some(door) = self.door.take() {
            let mut late = Vec::new();
            door.close(|peer, why| late.push((peer, why.to_string())));
            for (peer, why) in late {
                self.ignore(peer, &why);
            }
        }
        self.strays.clear();
    }

    fn never_came(&self, missing: &str, world: u32, within: Duration) -> String {
        let mut why = format!(
            "{missing} of {world} never reached the master at {}:{} within {:.0} s (host \
             unknown: never connected) — started, with the same master address?",
            self.master.0,
            self.master.1,
            within.as_secs_f64()
        );
        if let Some(last) = self.ignored.last() {
            why.push_str(&format!(
                " ({} connection(s) that were not ranks of this job were ignored; the last: \
                 {last})",
                self.ignored.len()
            ));
        }
        why
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
