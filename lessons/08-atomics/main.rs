//! # Lesson 08 — atomics: fetch-and-add and compare-and-swap on a remote word
//!
//! An RDMA atomic is a read-modify-write of one 8-byte word in the peer's memory, executed by
//! the peer's NIC as one indivisible step, with the old value sent back to us:
//!
//! - `IBV_WR_ATOMIC_FETCH_AND_ADD`: word += add; we get the value before the add.
//! - `IBV_WR_ATOMIC_CMP_AND_SWP`: if word == compare { word = swap }; we get the value before,
//!   and the swap happened exactly when that value equals `compare`.
//!
//! No other atomic — from this QP or any other — can slip between the read and the write, so
//! several clients can count on one word without a lock. The server exposes the word (an MR
//! registered with `REMOTE_ATOMIC`, 8-byte aligned) and waits for `--clients K`; each client
//! does `-n` fetch-and-adds of 1 and `-n` increments by a compare-and-swap loop, and reports
//! every old value it got. The server then checks the word and that every value from the
//! initial one to the final one was handed out exactly once.
//!
//! The byte order of the old value the requester's NIC writes back is the device's (host order
//! on rxe and on upstream mlx5; big-endian, as on the wire, where a device delivers the reply
//! unconverted). So each client first learns it: a FETCH_AND_ADD of 0 on a second word that
//! holds a known value whose bytes all differ, then every old value — those the CAS loop
//! compares — is read in the order learned.
//!
//! `--show-errors` (client) sends one fetch-and-add to a misaligned address, and
//! `--no-atomic-access` (server) leaves `REMOTE_ATOMIC` out of the word's MR (or with `=qp`,
//! out of the QP's access flags): both show what the NIC answers.
//!
//! ```text
//! server:   lesson08_atomics -d rxe0 --clients 2
//! clients:  lesson08_atomics -d rxe1 -n 100 192.168.77.1   (twice, at the same time)
//! ```

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::{Parser, ValueEnum};
use verbs_lab::diag::PortCounters;
use verbs_lab::oob::{Listener, OobConn};
use verbs_lab::verbs::{
    AccessFlags, Cq, Mr, Payload, Qp, RemoteBuf, SendOp, SendWr, VerbsError, WcOpcode,
};
use verbs_lab_lessons::{
    check_range, connect_qp, create_rc_qp, exchange_endpoints, exchange_params, lesson_main, meet,
    open_device, outln, peer_rts_barrier, poll_one_explained, recv_params, send_params, CommonArgs,
    Device, Narrator, Role, Terms,
};

const PROGRAM: &str = "lesson08_atomics";
/// The server's MR: the word at offset 0, and room after it so that a misaligned address is
/// still inside the MR (the error is then about alignment, not bounds).
const MR_LEN: usize = 4096;
const WORD_OFF: usize = 0;
/// The probe word, right after the counter: it holds [`PROBE_VALUE`] and nothing ever changes
/// it. A client's first atomic is a FETCH_AND_ADD of 0 on it, to learn in which byte order its
/// device writes the old value back ([`ResultOrder`]).
const PROBE_OFF: usize = 8;
/// A value whose eight bytes all differ, so that host order and swapped order cannot be confused.
const PROBE_VALUE: u64 = 0x0102_0304_0506_0708;
/// What the server advertises: the counter (bytes 0..8) and the probe word (8..16).
const ADVERTISED: usize = 16;
const MAX_ITERS: u32 = 10_000;
const MAX_CLIENTS: u32 = 16;

/// Where `--no-atomic-access` leaves `REMOTE_ATOMIC` out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum NoAtomic {
    /// The word's memory region (`ibv_reg_mr` access).
    Mr,
    /// The QP (`qp_access_flags` at INIT).
    Qp,
}

impl NoAtomic {
    /// What the server says when it leaves REMOTE_ATOMIC out.
    fn consequence(self) -> String {
        let (flag, place) = match self {
            NoAtomic::Mr => ("mr", "word's MR"),
            NoAtomic::Qp => ("qp", "QP's access flags"),
        };
        format!(
            "--no-atomic-access={flag}: REMOTE_ATOMIC is missing from the {place}; the clients' \
             atomics will be refused"
        )
    }
}

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 08: remote fetch-and-add and compare-and-swap on one 8-byte word, from \
             several clients at once",
    after_help = "Server:   lesson08_atomics -d rxe0 --clients 2\n\
                  Clients:  lesson08_atomics -d rxe1 -n 100 192.168.77.1   (two of them, concurrently)\n\
                  Errors:   lesson08_atomics -d rxe1 --show-errors 192.168.77.1\n\
                  \x20         lesson08_atomics -d rxe0 --no-atomic-access   (then an ordinary client)"
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Client: fetch-and-adds of 1, then as many compare-and-swap increments [default: 100]
    #[arg(short = 'n', long = "iters")]
    iters: Option<u32>,
    /// Server: clients to wait for; all start together and hammer the same word
    #[arg(long = "clients", default_value_t = 1)]
    clients: u32,
    /// Server: the word's initial value
    #[arg(long = "initial", default_value_t = 1000)]
    initial: u64,
    /// Server: leave REMOTE_ATOMIC out of the word's MR (or, with =qp, out of the QP) to see
    /// the clients' atomics refused
    #[arg(long = "no-atomic-access", value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "mr")]
    no_atomic_access: Option<NoAtomic>,
    /// Client: instead of counting, send one fetch-and-add to a misaligned address (word + 4)
    #[arg(long = "show-errors")]
    show_errors: bool,
}

/// Refuses nonsense before any verbs call: this needs no device.
fn check_flags(args: &Args) -> Result<()> {
    args.common.check()?;
    let server = args.common.role().is_server();
    if let Some(n) = args.iters {
        if server {
            bail!("-n is a client flag: each client chooses how many atomics it sends");
        }
        check_range("-n", n, 1..=MAX_ITERS, "of each atomic")?;
    }
    check_range("--clients", args.clients, 1..=MAX_CLIENTS, "clients")?;
    if !server && (args.clients != 1 || args.no_atomic_access.is_some() || args.initial != 1000) {
        bail!("--clients, --initial and --no-atomic-access are server flags");
    }
    if server && args.show_errors {
        bail!("--show-errors is a client flag: the client sends the faulty atomic");
    }
    if args.initial > u64::MAX / 2 {
        bail!(
            "--initial {}: leave room to count up (at most {})",
            args.initial,
            u64::MAX / 2
        );
    }
    Ok(())
}

fn atomic_cap_name(cap: u32) -> &'static str {
    match cap {
        0 => "IBV_ATOMIC_NONE",
        1 => "IBV_ATOMIC_HCA (atomic between QPs of this device)",
        2 => "IBV_ATOMIC_GLOB (atomic also against the CPU)",
        _ => "unknown",
    }
}

fn run(args: &Args) -> Result<()> {
    let n = args.common.narrator();

    n.step(1, "Open the device (lesson 01) and check it can do atomics");
    let dev = open_device(&args.common, &n)?;
    let attr = dev.ctx.query_device().context("ibv_query_device")?;
    n.say(format!(
        "ibv_query_device: atomic_cap {}, max_qp_rd_atom {} (atomics count against the \
         read/atomic depth of lesson 06)",
        atomic_cap_name(attr.atomic_cap),
        attr.max_qp_rd_atom
    ));
    if attr.atomic_cap == 0 {
        bail!(
            "{} reports atomic_cap IBV_ATOMIC_NONE: it cannot execute RDMA atomics",
            dev.ctx.name()
        );
    }
    match args.common.role() {
        Role::Server => server(args, &dev, &n),
        Role::Client(_) => client(args, &dev, &n),
    }
}

/// One connected client, as the server sees it.
struct Session {
    conn: OobConn,
    _qp: Qp,
    label: String,
}

fn server(args: &Args, dev: &Device, n: &Narrator) -> Result<()> {
    n.step(2, "Register the word (ibv_reg_mr)");
    let pd = dev.ctx.alloc_pd().context("ibv_alloc_pd")?;
    // The NIC reads and writes the word on the clients' behalf: REMOTE_ATOMIC, which (like
    // REMOTE_WRITE) needs LOCAL_WRITE. --no-atomic-access=mr leaves it out.
    let mut mr_access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    if args.no_atomic_access != Some(NoAtomic::Mr) {
        mr_access |= AccessFlags::REMOTE_ATOMIC;
    }
    let mr = pd
        .reg_mr(MR_LEN, mr_access)
        .context("ibv_reg_mr (the word)")?;
    mr.write(WORD_OFF, &args.initial.to_ne_bytes())?;
    // The probe word: a host-order integer like the counter; FETCH_AND_ADD of 0 leaves it be.
    mr.write(PROBE_OFF, &PROBE_VALUE.to_ne_bytes())?;
    let word = mr.remote(WORD_OFF..WORD_OFF + ADVERTISED)?;
    n.say(format!(
        "ibv_reg_mr: {MR_LEN} bytes, access {mr_access}, rkey {:#x}; the word is at {:#x} \
         ({}-byte aligned), initial value {}; the probe word at +{PROBE_OFF} holds {PROBE_VALUE:#018x}",
        mr.rkey(),
        word.addr,
        1u64 << word.addr.trailing_zeros().min(12),
        args.initial
    ));
    // The QPs, too, must allow atomics: qp_access_flags at INIT. --no-atomic-access=qp leaves
    // REMOTE_ATOMIC out there.
    let mut qp_access = AccessFlags::REMOTE_READ;
    if args.no_atomic_access != Some(NoAtomic::Qp) {
        qp_access |= AccessFlags::REMOTE_ATOMIC;
    }
    if let Some(w) = args.no_atomic_access {
        outln!("{}", w.consequence());
    }

    n.step(
        3,
        "Create one CQ; then, per client, a QP, connected (lessons 02-03)",
    );
    // The server posts nothing: atomics are executed by its NIC and complete only at the client.
    let cq = dev.ctx.create_cq(16, None).context("ibv_create_cq")?;
    // One listening socket for all clients: they may connect at the same moment, and each waits
    // in its backlog until we get to it.
    let listener = Listener::bind(args.common.port).context("out-of-band listener")?;
    n.say(format!(
        "listening on TCP port {} for {} client(s), up to {} s each",
        listener.port(),
        args.clients,
        args.common.wait_secs
    ));
    let offer = Offer {
        word,
        qp_access,
        params: Terms::new()
            .with("mtu", dev.active_mtu())
            .with("initial", args.initial)
            .with("clients", args.clients),
    };
    let mut sessions = Vec::new();
    for k in 1..=args.clients {
        let qp = create_rc_qp(&pd, &cq, 16, 1)?;
        sessions.push(accept_client(&listener, k, args, dev, qp, &offer, n)?);
    }

    n.step(4, "Start every client at once, then wait for their reports");
    for s in &mut sessions {
        s.conn
            .barrier("the start signal")
            .with_context(|| format!("starting {}", s.label))?;
    }
    let t0 = Instant::now();
    let reports = collect_reports(&mut sessions, args.common.wait())?;

    n.step(5, "Check the word");
    // Every client is done and said so: no atomic is in flight any more.
    let final_value = mr.read_u64_volatile(WORD_OFF);
    n.say(format!(
        "all reports in after {} ms",
        t0.elapsed().as_millis()
    ));
    let probe = mr.read_u64_volatile(PROBE_OFF);
    ensure!(
        probe == PROBE_VALUE,
        "the probe word changed from {PROBE_VALUE:#018x} to {probe:#018x}: only fetch-and-adds \
         of 0 were sent to it"
    );
    n.say(format!(
        "the probe word still holds {PROBE_VALUE:#018x}: a fetch-and-add of 0 reads, and changes \
         nothing"
    ));
    check_word(args, final_value, reports)
}

/// What the server gives every client: the word, what its QPs let a client do with it, and
/// the parameters it announces (its MTU, the word's initial value, how many clients).
struct Offer {
    word: RemoteBuf,
    qp_access: AccessFlags,
    params: Terms,
}

/// Accepts client `k` on `listener` and connects `qp` to it, as lesson 03 taught: parameters
/// and endpoints (with the word) swapped, INIT -> RTR -> RTS, the barrier after RTS.
fn accept_client(
    listener: &Listener,
    k: u32,
    args: &Args,
    dev: &Device,
    qp: Qp,
    offer: &Offer,
    n: &Narrator,
) -> Result<Session> {
    let label = format!("client {k}/{}", args.clients);
    let mut conn = listener
        .accept(args.common.wait())
        .with_context(|| format!("out-of-band connection of {label}"))?;
    n.say(format!(
        "-- {label}: out-of-band TCP connection with {}",
        conn.peer()
    ));
    let theirs = exchange_params(&mut conn, &Role::Server, &offer.params, n)?;
    let ib_port = args.common.ib_port;
    let (ep, peer) =
        exchange_endpoints(&mut conn, &Role::Server, dev, ib_port, &qp, offer.word, n)?;
    connect_qp(&args.common, dev, &qp, &ep, &peer, &theirs, offer.qp_access)
        .with_context(|| format!("connecting {label}"))?;
    n.say(format!(
        "QP {:#x} <-> {label}'s QP {:#x}: RTS, qp_access_flags {}",
        qp.qpn(),
        peer.ep.qpn,
        offer.qp_access
    ));
    peer_rts_barrier(&mut conn)?;
    Ok(Session {
        conn,
        _qp: qp,
        label,
    })
}

/// What the clients reported: every old value their increments got, how many increments that
/// makes, and the statuses of the clients whose atomics were refused.
struct Reports {
    olds: Vec<u64>,
    added: u64,
    refused: Vec<String>,
}

/// Waits (up to `wait` each) for every client's report and gathers them.
fn collect_reports(sessions: &mut [Session], wait: Duration) -> Result<Reports> {
    let mut olds: Vec<u64> = Vec::new();
    let mut added: u64 = 0;
    let mut refused = Vec::new();
    for s in sessions {
        s.conn.set_timeout(wait)?;
        let r = recv_params(&mut s.conn, &format!("the report of {}", s.label))
            .with_context(|| format!("waiting for {} to finish", s.label))?;
        if let Some(status) = r.raw("error") {
            outln!("{}: its atomics failed with {status}", s.label);
            refused.push(status.to_string());
            continue;
        }
        if let Some(status) = r.raw("demo") {
            outln!(
                "{}: error demonstration: its misaligned atomic ended with {status}",
                s.label
            );
            continue;
        }
        let a: u64 = r.get("added")?;
        let list = r.raw("olds").unwrap_or("");
        let mine: Vec<u64> = if list.is_empty() {
            Vec::new()
        } else {
            list.split(',')
                .map(|v| v.parse::<u64>())
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| anyhow::anyhow!("{}'s old values: {e}", s.label))?
        };
        ensure!(
            mine.len() as u64 == a,
            "{} reports {a} increments but {} old values",
            s.label,
            mine.len()
        );
        outln!(
            "{}: done: {} fetch-and-adds + {} compare-and-swap increments ({} CAS retries)",
            s.label,
            r.raw("fetch_adds").unwrap_or("?"),
            r.raw("cas").unwrap_or("?"),
            r.raw("cas_retries").unwrap_or("?")
        );
        added += a;
        olds.extend(mine);
    }
    Ok(Reports {
        olds,
        added,
        refused,
    })
}

/// The proof: the word grew by exactly the increments reported, and every value from the
/// initial one to the final one was handed out exactly once (with `--no-atomic-access`: the
/// word did not change, and the clients were refused).
fn check_word(args: &Args, final_value: u64, r: Reports) -> Result<()> {
    let Reports {
        mut olds,
        added,
        refused,
    } = r;
    let expected = args.initial + added;
    if args.no_atomic_access.is_some() {
        ensure!(
            final_value == args.initial && added == 0,
            "--no-atomic-access, yet the word changed from {} to {final_value}",
            args.initial
        );
        ensure!(
            !refused.is_empty(),
            "--no-atomic-access, but no client reported a refused atomic"
        );
        outln!(
            "final value {final_value} == initial {}: no atomic reached the word (refused with {})",
            args.initial,
            refused.join(", ")
        );
        return Ok(());
    }
    ensure!(
        refused.is_empty(),
        "{} client(s) failed: {}",
        refused.len(),
        refused.join(", ")
    );
    ensure!(
        final_value == expected,
        "final value {final_value} != initial {} + {added} increments = {expected}: an update was lost",
        args.initial
    );
    outln!(
        "final value {final_value} == initial {} + {added} increments from {} client(s): correct",
        args.initial,
        args.clients
    );
    // Each increment saw a different old value, and together they cover initial..final: no two
    // atomics ever read the same word value, i.e. none slipped between another's read and write.
    olds.sort_unstable();
    let want: Vec<u64> = (args.initial..final_value).collect();
    ensure!(
        olds == want,
        "the old values returned are not exactly {}..{final_value} once each (first difference \
         at position {:?})",
        args.initial,
        olds.iter().zip(&want).position(|(a, b)| a != b)
    );
    if added > 0 {
        outln!(
            "every value from {} to {} was returned exactly once: no two atomics saw the same \
             word",
            args.initial,
            final_value - 1
        );
    }
    Ok(())
}

/// What a client did.
struct Done {
    fetch_adds: u32,
    cas: u32,
    cas_retries: u64,
    olds: Vec<u64>,
}

fn client(args: &Args, dev: &Device, n: &Narrator) -> Result<()> {
    let wait = args.common.wait();
    let iters = args.iters.unwrap_or(100);
    n.step(
        2,
        "Register the 8 bytes where the old values land (ibv_reg_mr)",
    );
    let pd = dev.ctx.alloc_pd().context("ibv_alloc_pd")?;
    // Our NIC writes the returned old value into this buffer: LOCAL_WRITE.
    let mr = pd
        .reg_mr(8, AccessFlags::LOCAL_WRITE)
        .context("ibv_reg_mr (the result buffer)")?;
    n.say(format!(
        "ibv_reg_mr: 8 bytes at {:#x}, LOCAL_WRITE, lkey {:#x}",
        mr.addr(),
        mr.lkey()
    ));

    n.step(3, "Create the CQ and the RC QP; connect (lessons 02-03)");
    let cq = dev.ctx.create_cq(16, None).context("ibv_create_cq")?;
    let qp = create_rc_qp(&pd, &cq, 16, 1)?;
    let mine = Terms::new()
        .with("mtu", dev.active_mtu())
        .with("iters", iters)
        .with("show_errors", args.show_errors as u8);
    let (mut conn, theirs) = meet(&args.common, &mine, n)?;
    let initial: u64 = theirs.get("initial")?;
    // The client exposes no memory: the buffer it advertises is empty.
    let (role, no_buf) = (args.common.role(), RemoteBuf::default());
    let (ep, peer) =
        exchange_endpoints(&mut conn, &role, dev, args.common.ib_port, &qp, no_buf, n)?;
    let advertised = peer.buf;
    ensure!(
        advertised.len as usize >= ADVERTISED && advertised.addr % 8 == 0,
        "the server advertised {} bytes at {:#x}: this lesson needs {ADVERTISED}, 8-byte aligned \
         (the word, then the probe word)",
        advertised.len,
        advertised.addr
    );
    let word = advertised.slice(WORD_OFF as u32, 8).expect("checked above");
    let probe = advertised
        .slice(PROBE_OFF as u32, 8)
        .expect("checked above");
    // The server's NIC never touches our memory: no qp_access_flags.
    let access = AccessFlags::EMPTY;
    connect_qp(&args.common, dev, &qp, &ep, &peer, &theirs, access)?;
    n.say(format!(
        "QP {:#x} -> server QP {:#x}: RTS; the word: addr {:#x}, rkey {:#x}, initial value {initial}",
        qp.qpn(),
        peer.ep.qpn,
        word.addr,
        word.rkey
    ));
    peer_rts_barrier(&mut conn)?;
    n.say("waiting for the server's start signal (it waits for all its clients)");
    conn.set_timeout(wait)?;
    conn.barrier("the server's start signal")?;

    // The port's counters as the atomics start: if a completion never comes, the error says
    // how they moved (retransmissions? answers?) and the QP's state — not just "timed out".
    let mut atomics = Atomics {
        qp: &qp,
        cq: &cq,
        mr: &mr,
        word,
        what: "the word",
        order: ResultOrder::Host,
        wait,
        counters: PortCounters::snapshot(dev.ctx.name(), args.common.ib_port),
    };
    n.step(
        4,
        "Learn the byte order of atomic results: a fetch-and-add of 0 on the probe word",
    );
    atomics.order = match learn_order(&atomics, probe, n) {
        Ok(order) => order,
        Err(e) => return report(&mut conn, Err(e), Duration::ZERO),
    };
    if args.show_errors {
        n.step(
            5,
            "Error demonstration: a fetch-and-add at a misaligned address",
        );
        return show_misaligned(&atomics, &mut conn, n);
    }

    n.step(
        5,
        &format!("{iters} fetch-and-adds of 1, then {iters} compare-and-swap increments"),
    );
    let t0 = Instant::now();
    let done = hammer(&atomics, iters, initial, n);
    report(&mut conn, done, t0.elapsed())
}

/// Tells the server what we did — every old value we got — or, when an atomic failed, how it
/// failed, so that the server does not wait in vain.
fn report(conn: &mut OobConn, done: Result<Done>, took: Duration) -> Result<()> {
    let done = match done {
        Ok(done) => done,
        Err(e) => {
            let failed = Terms::new().with("error", outcome_word(&e));
            let _ = send_params(conn, &failed, "our report");
            return Err(e);
        }
    };
    let olds = done
        .olds
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let report = Terms::new()
        .with("added", done.olds.len())
        .with("fetch_adds", done.fetch_adds)
        .with("cas", done.cas)
        .with("cas_retries", done.cas_retries)
        .with("olds", olds);
    send_params(conn, &report, "our report")?;
    outln!(
        "client: {} fetch-and-adds, {} compare-and-swap increments ({} retries: another \
         client changed the word between our read and our swap) in {} ms; reported to \
         the server",
        done.fetch_adds,
        done.cas,
        done.cas_retries,
        took.as_millis()
    );
    Ok(())
}

/// In which byte order the requester's device writes the old value of an atomic into the
/// result buffer. The operands of a work request (`compare_add`, `swap`) are host-order
/// integers on every device; only this returned value differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResultOrder {
    /// As a host-order `u64` (rxe; upstream mlx5, which reports `IBV_ATOMIC_NONE` — and refuses
    /// atomics — when its firmware cannot answer in host order).
    Host,
    /// Byte-swapped: the wire's big-endian order on a little-endian host (MLNX_OFED's
    /// `IBV_EXP_ATOMIC_HCA_REPLY_BE` devices).
    Swapped,
}

impl ResultOrder {
    /// The old value the NIC wrote as `bytes`, as a number.
    fn decode(self, bytes: [u8; 8]) -> u64 {
        match self {
            ResultOrder::Host => u64::from_ne_bytes(bytes),
            ResultOrder::Swapped => u64::from_ne_bytes(bytes).swap_bytes(),
        }
    }
    /// What the narration calls it.
    fn describe(self) -> &'static str {
        match (self, cfg!(target_endian = "little")) {
            (ResultOrder::Host, true) => "host order (little-endian here)",
            (ResultOrder::Host, false) => "host order (big-endian here)",
            (ResultOrder::Swapped, true) => {
                "swapped: big-endian, as on the wire, on this little-endian host"
            }
            (ResultOrder::Swapped, false) => "swapped: little-endian, on this big-endian host",
        }
    }
}

/// What every atomic needs: the QP, its CQ, the 8-byte result buffer, the remote word (and what
/// to call it in errors), the byte order results come in, and, for a wait that expires, the
/// port's counters when the atomics began.
struct Atomics<'a> {
    qp: &'a Qp,
    cq: &'a Cq,
    mr: &'a Mr,
    word: RemoteBuf,
    what: &'a str,
    order: ResultOrder,
    wait: Duration,
    counters: PortCounters,
}

impl Atomics<'_> {
    /// Posts one atomic, waits for its completion and returns the 8 bytes the NIC wrote into
    /// our result buffer, as they are.
    fn run_raw(&self, op: SendOp, wr_id: u64) -> Result<[u8; 8]> {
        let result = self.mr.sge(0..8)?;
        self.qp
            .post_send(&[SendWr::new(wr_id, op, Payload::Sges(&[result]))])
            .with_context(|| format!("posting {}", op.name()))?;
        let what = format!("the completion of {}", op.name());
        let wc = poll_one_explained(self.cq, self.qp, &self.counters, self.wait, &what)
            .with_context(|| format!("{} on {} at {:#x}", op.name(), self.what, self.word.addr))?;
        let want = match op {
            SendOp::FetchAdd { .. } => WcOpcode::FETCH_ADD,
            _ => WcOpcode::COMP_SWAP,
        };
        ensure!(
            wc.opcode() == want,
            "expected a {want} completion, got {}",
            wc.opcode()
        );
        Ok(self.mr.read_u64_volatile(0).to_ne_bytes())
    }

    /// Posts one atomic, waits for its completion and returns the old value, read in the byte
    /// order learned at start-up ([`learn_order`]).
    fn run(&self, op: SendOp, wr_id: u64) -> Result<u64> {
        Ok(self.order.decode(self.run_raw(op, wr_id)?))
    }
}

/// Learns in which byte order the device writes atomic results, the way portable code does it
/// once at start-up: a FETCH_AND_ADD of 0 on the probe word, which holds [`PROBE_VALUE`] (all
/// eight bytes different), then which reading of the returned bytes gives that value.
fn learn_order(a: &Atomics, probe: RemoteBuf, n: &Narrator) -> Result<ResultOrder> {
    let on_probe = Atomics {
        word: probe,
        what: "the probe word",
        counters: a.counters.clone(),
        ..*a
    };
    n.say(format!(
        "ibv_post_send IBV_WR_ATOMIC_FETCH_AND_ADD: remote {:#x} (the probe word) rkey {:#x}, \
         add 0 -> the old value {PROBE_VALUE:#018x}, in the device's byte order",
        probe.addr, probe.rkey
    ));
    let bytes = on_probe.run_raw(
        SendOp::FetchAdd {
            remote: probe,
            add: 0,
        },
        0,
    )?;
    let order = [ResultOrder::Host, ResultOrder::Swapped]
        .into_iter()
        .find(|o| o.decode(bytes) == PROBE_VALUE)
        .with_context(|| {
            format!(
                "the fetch-and-add of 0 on the probe word returned bytes {bytes:02x?}: neither \
                 host order nor swapped reads {PROBE_VALUE:#018x}"
            )
        })?;
    outln!(
        "atomic result bytes {bytes:02x?} for the probe word {PROBE_VALUE:#018x}: {} — every \
         old value below is read in this order",
        order.describe()
    );
    Ok(order)
}

/// The client's work: `iters` fetch-and-adds of 1, then `iters` compare-and-swap increments,
/// every old value kept for the server's check.
fn hammer(a: &Atomics, iters: u32, initial: u64, n: &Narrator) -> Result<Done> {
    let mut done = Done {
        fetch_adds: 0,
        cas: 0,
        cas_retries: 0,
        olds: Vec::with_capacity(2 * iters as usize),
    };
    fetch_adds(a, iters, initial, n, &mut done)?;
    cas_increments(a, iters, initial, n, &mut done)?;
    Ok(done)
}

/// `iters` IBV_WR_ATOMIC_FETCH_AND_ADD of 1 on the word.
fn fetch_adds(a: &Atomics, iters: u32, initial: u64, n: &Narrator, done: &mut Done) -> Result<()> {
    for i in 0..iters {
        let old = a.run(
            SendOp::FetchAdd {
                remote: a.word,
                add: 1,
            },
            i as u64,
        )?;
        if i == 0 {
            n.say(format!(
                "ibv_post_send IBV_WR_ATOMIC_FETCH_AND_ADD: remote {:#x} rkey {:#x}, add 1 -> \
                 FETCH_ADD completion, old value {old} (written to lkey {:#x})",
                a.word.addr,
                a.word.rkey,
                a.mr.lkey()
            ));
            // The word only grows from `initial`: a smaller value means the order learned from
            // the probe word does not hold for this word.
            ensure!(
                old >= initial,
                "the first fetch-and-add returned {old}, below the initial value {initial}"
            );
        }
        done.olds.push(old);
        done.fetch_adds += 1;
    }
    n.say(format!(
        "{} fetch-and-adds: old values {}..={}{}",
        iters,
        done.olds.first().copied().unwrap_or(initial),
        done.olds.last().copied().unwrap_or(initial),
        if done.olds.windows(2).all(|w| w[1] == w[0] + 1) {
            " consecutive: nobody else touched the word meanwhile"
        } else {
            " with gaps: another client's atomics came in between"
        }
    ));
    Ok(())
}

/// `iters` increments by IBV_WR_ATOMIC_CMP_AND_SWP: guess the current value; if the swap
/// fails, the returned old value is the current one — guess again with it. Comparing the
/// returned value with the guess needs it in host order: `Atomics::run` reads it in the order
/// learned from the probe word, so on a device that answered big-endian the loop still ends.
fn cas_increments(
    a: &Atomics,
    iters: u32,
    initial: u64,
    n: &Narrator,
    done: &mut Done,
) -> Result<()> {
    let mut guess = done.olds.last().map_or(initial, |v| v + 1);
    for i in 0..iters {
        loop {
            let old = a.run(
                SendOp::CompareSwap {
                    remote: a.word,
                    compare: guess,
                    swap: guess + 1,
                },
                (iters + i) as u64,
            )?;
            if i == 0 && done.cas_retries == 0 {
                n.say(format!(
                    "ibv_post_send IBV_WR_ATOMIC_CMP_AND_SWP: compare {guess}, swap {} -> old \
                     value {old}: {}",
                    guess + 1,
                    if old == guess {
                        "swapped"
                    } else {
                        "not swapped, retry with it"
                    }
                ));
            }
            if old == guess {
                done.olds.push(old);
                guess += 1;
                break;
            }
            done.cas_retries += 1;
            guess = old;
        }
        done.cas += 1;
    }
    Ok(())
}

/// Sends one fetch-and-add to word + 4 — inside the server's MR, but not 8-byte aligned — and
/// shows who refuses it: the local provider at `ibv_post_send` (rxe does), or the remote NIC
/// with an error completion (which moves the QP to ERR).
fn show_misaligned(a: &Atomics, conn: &mut OobConn, n: &Narrator) -> Result<()> {
    let bad = RemoteBuf {
        addr: a.word.addr + 4,
        ..a.word
    };
    n.say(format!(
        "ibv_post_send IBV_WR_ATOMIC_FETCH_AND_ADD at {:#x} (word + 4, inside the MR, not \
         8-byte aligned), rkey {:#x}",
        bad.addr, bad.rkey
    ));
    let misaligned = Atomics {
        word: bad,
        counters: a.counters.clone(),
        ..*a
    };
    let op = SendOp::FetchAdd {
        remote: bad,
        add: 1,
    };
    let e = match misaligned.run(op, 0) {
        Ok(old) => {
            let _ = send_params(conn, &Terms::new().with("demo", "no-error"), "our report");
            bail!(
                "the misaligned fetch-and-add succeeded (old value {old}): this NIC does not \
                 check alignment"
            )
        }
        Err(e) => e,
    };
    let outcome = outcome_word(&e);
    outln!("misaligned fetch-and-add at word + 4 -> {outcome}");
    outln!("    {e:#}");
    if wc_status_name(&e).is_some() {
        send_params(conn, &Terms::new().with("demo", &outcome), "our report")?;
        outln!(
            "the remote NIC refused it; our QP is now in the error state (every later request \
             is flushed)"
        );
        return Ok(());
    }
    // Refused before it left: nothing reached the wire, and the QP is still usable. Prove it
    // with an aligned compare-and-swap whose compare value cannot match — an atomic *read*.
    // Only then report: the server closes its QP once it has our report, and an atomic sent
    // to a QP that is gone is never answered (rxe would retransmit it with no end in sight).
    let probe = a.run(
        SendOp::CompareSwap {
            remote: a.word,
            compare: u64::MAX,
            swap: 0,
        },
        1,
    );
    send_params(conn, &Terms::new().with("demo", &outcome), "our report")?;
    let probe = probe?;
    outln!(
        "the request never left this host: the QP still works — an aligned compare-and-swap \
         (compare {}, never equal) read the word: {probe}",
        u64::MAX
    );
    Ok(())
}

/// One word for how an operation failed: the completion status (`IBV_WC_REM_ACCESS_ERR`), or
/// the refusing verb and errno (`ibv_post_send:EINVAL`).
fn outcome_word(e: &anyhow::Error) -> String {
    if let Some(status) = wc_status_name(e) {
        return status;
    }
    match e.chain().find_map(|c| c.downcast_ref::<VerbsError>()) {
        Some(VerbsError::Call { verb, errno, .. }) => format!("{verb}:{errno:?}"),
        _ => "local-error".into(),
    }
}

/// The work-completion status in an error chain, by name (e.g. `IBV_WC_REM_ACCESS_ERR`).
fn wc_status_name(e: &anyhow::Error) -> Option<String> {
    e.chain()
        .find_map(|c| c.downcast_ref::<VerbsError>())
        .and_then(|v| v.wc_status())
        .map(|s| s.name())
}

fn main() -> ExitCode {
    lesson_main(PROGRAM, check_flags, |args: &Args, ()| run(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_value_tells_the_two_orders_apart() {
        // What a host-order device writes, and what a big-endian reply looks like in memory.
        let host = PROBE_VALUE.to_ne_bytes();
        let wire = PROBE_VALUE.to_be_bytes();
        assert_eq!(ResultOrder::Host.decode(host), PROBE_VALUE);
        assert_ne!(ResultOrder::Swapped.decode(host), PROBE_VALUE);
        let wire_order = if cfg!(target_endian = "little") {
            ResultOrder::Swapped
        } else {
            ResultOrder::Host
        };
        assert_eq!(wire_order.decode(wire), PROBE_VALUE);
        // The CAS loop compares decoded values: 1101 sent back big-endian still reads 1101.
        assert_eq!(wire_order.decode(1101u64.to_be_bytes()), 1101);
    }
}
