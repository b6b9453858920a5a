//! # Lesson 05 — RDMA Write: putting bytes into the peer's memory
//!
//! A SEND (lesson 04) needs the receiver to post a buffer and the data lands wherever that
//! buffer is. An RDMA WRITE is *one-sided*: the writer names the destination itself — an
//! address and the rkey of a memory region the target registered with `REMOTE_WRITE` and
//! advertised — and the target's NIC places the bytes there without its CPU doing anything.
//!
//! That raises the question this lesson answers: **how does the target know the data arrived?**
//!
//! - `--notify imm`: the writer uses `IBV_WR_RDMA_WRITE_WITH_IMM`. The data still goes where the
//!   writer said, but the write also consumes a receive the target posted, and the target's CQ
//!   gets an `IBV_WC_RECV_RDMA_WITH_IMM` completion carrying 32 bits of immediate data.
//! - `--notify flag`: the writer posts two plain writes, the payload and then an 8-byte flag
//!   word; an RC QP executes the writes of one QP in order, so when the target's CPU sees the new
//!   flag value (spinning on a volatile read) the payload before it has landed too. No receive,
//!   no completion on the target: the cheapest notification, and the one that hears nothing
//!   when things go wrong.
//!
//! The server is the target: it registers a buffer, advertises (address, rkey, length) and
//! checks every write byte for byte. The client is the writer. See README.md beside this file.
//!
//! ```text
//! server:  lesson05_rdma_write -d rxe0 [--notify imm|flag]
//! client:  lesson05_rdma_write -d rxe1 -s 4096 -n 5 --notify imm 192.168.77.1
//! ```

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use clap::{Parser, ValueEnum};
use verbs_lab::cli::SizeRange;
use verbs_lab::verbs::{
    AccessFlags, Mr, Payload, Qp, QpState, RecvWr, RemoteBuf, SendOp, SendWr, WcOpcode,
};
use verbs_lab_lessons::{
    check_range, connect_qp, create_rc_qp, exchange_endpoints, first_mismatch, lesson_main, meet,
    open_device, outln, pattern, peer_rts_barrier, same_as_client, say_mr, CommonArgs, Device,
    Narrator, PeerInfo, Side, Terms,
};

const PROGRAM: &str = "lesson05_rdma_write";
/// The largest write (`-s`). Each side registers this much plus the flag word.
const MAX_SIZE: usize = 1 << 20;
/// The flag word sits right after the payload area, 8-byte aligned (the buffer is page aligned).
const FLAG_OFF: usize = MAX_SIZE;
const FLAG_LEN: usize = 8;
const BUF_LEN: usize = MAX_SIZE + FLAG_LEN;
const MAX_ITERS: u32 = 100_000;

/// How the target learns that a write arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Notify {
    /// RDMA_WRITE_WITH_IMM: the write consumes a receive; the target polls its CQ.
    Imm,
    /// Payload write, then a flag-word write; the target spins on the flag in memory.
    Flag,
}

/// Where `--no-write-access` leaves `REMOTE_WRITE` out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum NoWrite {
    /// The target buffer's memory region (`ibv_reg_mr` access).
    Mr,
    /// The QP (`qp_access_flags` at INIT).
    Qp,
}

impl NoWrite {
    /// What the server says when it leaves REMOTE_WRITE out.
    fn consequence(self) -> String {
        let (flag, place) = match self {
            NoWrite::Mr => ("mr", "target buffer's MR"),
            NoWrite::Qp => ("qp", "QP's access flags"),
        };
        format!(
            "--no-write-access={flag}: REMOTE_WRITE is missing from the {place}; the client's \
             writes will be refused"
        )
    }
}

impl Notify {
    fn name(self) -> &'static str {
        match self {
            Notify::Imm => "imm",
            Notify::Flag => "flag",
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    about = "Lesson 05: one-sided RDMA Write into the buffer the peer advertised, checked byte \
             for byte on the target",
    after_help = "Server (the target):  lesson05_rdma_write -d rxe0\n\
                  Client (the writer):  lesson05_rdma_write -d rxe1 -s 4096 -n 5 --notify flag 192.168.77.1\n\
                  The client's -s/-n/--notify are used by both sides; a server given different ones refuses."
)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Bytes per write, 1 to 1M (suffixes K, M, G) [default: 4096]
    #[arg(short = 's', long = "size", value_parser = SizeRange::new(1..=MAX_SIZE))]
    size: Option<usize>,
    /// Writes to make, each with its own byte pattern, each checked [default: 5]
    #[arg(short = 'n', long = "iters")]
    iters: Option<u32>,
    /// How the target learns a write arrived [default: imm]
    #[arg(long = "notify", value_enum)]
    notify: Option<Notify>,
    /// Client: put a wrong rkey in the writes, to watch the target's NIC refuse them
    #[arg(long = "bad-rkey")]
    bad_rkey: bool,
    /// Server: leave REMOTE_WRITE out of the buffer's MR (or, with =qp, out of the QP) to see
    /// the client's writes refused
    #[arg(long = "no-write-access", value_enum, num_args = 0..=1, require_equals = true, default_missing_value = "mr")]
    no_write_access: Option<NoWrite>,
}

/// What both sides agree to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Test {
    size: usize,
    iters: u32,
    notify: Notify,
}

impl Test {
    /// What this side tells the peer: the client its test, both sides their active MTU.
    fn offer(&self, server: bool, dev: &Device) -> Terms {
        let test = Terms::new()
            .with("size", self.size)
            .with("iters", self.iters)
            .with("notify", self.notify.name());
        let mine = if server { Terms::new() } else { test };
        mine.with("mtu", dev.active_mtu())
    }
}

/// `N writes of S bytes, --notify HOW`, as the narration says it.
impl std::fmt::Display for Test {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (iters, size, notify) = (self.iters, self.size, self.notify.name());
        write!(f, "{iters} writes of {size} bytes, --notify {notify}")
    }
}

/// Refuses nonsense before any verbs call: this needs no device.
fn check_flags(args: &Args) -> Result<Test> {
    args.common.check()?;
    let test = Test {
        size: args.size.unwrap_or(4096),
        iters: args.iters.unwrap_or(5),
        notify: args.notify.unwrap_or(Notify::Imm),
    };
    check_range("-n", test.iters, 1..=MAX_ITERS, "writes")?;
    if args.bad_rkey && args.common.role().is_server() {
        bail!("--bad-rkey is a client flag: the writer is the one that names the rkey");
    }
    if args.no_write_access.is_some() && !args.common.role().is_server() {
        bail!("--no-write-access is a server flag: the target decides what it allows");
    }
    Ok(test)
}

/// The server takes the client's test, but refuses if it was told something else explicitly.
fn adopt(args: &Args, theirs: &Terms) -> Result<Test> {
    let notify = match theirs.raw("notify") {
        Some("imm") => Notify::Imm,
        Some("flag") => Notify::Flag,
        other => bail!("the client asked for an unknown notification {other:?}"),
    };
    let t = Test {
        size: theirs.get("size")?,
        iters: theirs.get("iters")?,
        notify,
    };
    ensure!(
        (1..=MAX_SIZE).contains(&t.size) && (1..=MAX_ITERS).contains(&t.iters),
        "the client asked for {} writes of {} bytes: outside what this lesson allows",
        t.iters,
        t.size
    );
    same_as_client("-s", args.size, t.size)?;
    same_as_client("-n", args.iters, t.iters)?;
    same_as_client("--notify", args.notify.map(Notify::name), t.notify.name())?;
    Ok(t)
}

fn run(args: &Args, asked: Test) -> Result<()> {
    let role = args.common.role();
    let n = args.common.narrator();
    let server = role.is_server();

    n.step(1, "Open the device (lesson 01)");
    let dev = open_device(&args.common, &n)?;

    n.step(2, "Register the buffer the writes touch (ibv_reg_mr)");
    let pd = dev.ctx.alloc_pd().context("ibv_alloc_pd")?;
    // The target's NIC writes into its memory on the writer's behalf: REMOTE_WRITE, which the
    // verbs spec only allows together with LOCAL_WRITE. The writer's NIC only *reads* its own
    // buffer to send it, and local reads need no flag at all.
    // --no-write-access=mr leaves REMOTE_WRITE out.
    let mr_access = match (server, args.no_write_access) {
        (false, _) => AccessFlags::EMPTY,
        (true, Some(NoWrite::Mr)) => AccessFlags::LOCAL_WRITE,
        (true, _) => AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    };
    let mr = pd
        .reg_mr(BUF_LEN, mr_access)
        .context("ibv_reg_mr (the write buffer)")?;
    say_mr(&n, &mr, mr_access);
    n.say(format!(
        "layout: bytes 0..{MAX_SIZE} payload, {FLAG_OFF}..{BUF_LEN} the flag word (--notify flag)"
    ));
    if let Some(w) = args.no_write_access {
        outln!("{}", w.consequence());
    }

    n.step(3, "Create the CQ and the RC QP (lesson 02)");
    let cq = dev.ctx.create_cq(32, None).context("ibv_create_cq")?;
    let qp = create_rc_qp(&pd, &cq, 16, 16)?;
    n.say(format!(
        "CQ of {} entries; RC QP {:#x}",
        cq.capacity(),
        qp.qpn()
    ));

    n.step(
        4,
        "Agree on the test; exchange endpoints and the target buffer (lesson 03)",
    );
    let (mut conn, theirs) = meet(&args.common, &asked.offer(server, &dev), &n)?;
    let test = if server { adopt(args, &theirs)? } else { asked };
    // Only the target exposes memory: its address, rkey and length are what the writer needs.
    let buf = if server {
        mr.remote(0..BUF_LEN)?
    } else {
        RemoteBuf::default()
    };
    let (ep, peer) = exchange_endpoints(&mut conn, &role, &dev, args.common.ib_port, &qp, buf, &n)?;

    n.step(5, "Connect the QP: INIT -> RTR -> RTS (lesson 03)");
    // The QP, too, must let the peer write: qp_access_flags at INIT. The MR's flags alone are
    // not enough — both are checked for every incoming write. --no-write-access=qp leaves it out.
    let access = if server && args.no_write_access != Some(NoWrite::Qp) {
        AccessFlags::REMOTE_WRITE
    } else {
        AccessFlags::EMPTY
    };
    let opts = connect_qp(&args.common, &dev, &qp, &ep, &peer, &theirs, access)?;
    n.say(format!(
        "QP {:#x} -> peer QP {:#x}: RTS, path MTU {}, qp_access_flags {}",
        qp.qpn(),
        peer.ep.qpn,
        opts.path_mtu,
        opts.access
    ));
    if server && test.notify == Notify::Imm {
        // The first receive goes in before the barrier releases the writer. A WRITE_WITH_IMM
        // that found none would wait out RNR retries; one the QP refuses (exercise 2,
        // --no-write-access=qp) moves it to the error state, which flushes only receives
        // already posted, so a receive posted after that would never complete.
        post_imm_recv(&qp, &n, 0)?;
    }
    peer_rts_barrier(&mut conn)?;

    let who = if server { "target" } else { "writer" };
    n.step(6, &format!("Be the {who}: {test}"));
    let side = Side::new(&mr, &qp, &cq, &mut conn, args.common.wait(), &n);
    if server {
        target(side, &test)
    } else {
        writer(side, &test, &peer, args.bad_rkey)
    }
}

/// The client: fill the local buffer with this iteration's pattern, write it into the target's
/// buffer, tell the target (immediate data or flag word), wait until the target checked it.
fn writer(s: Side, t: &Test, peer: &PeerInfo, bad_rkey: bool) -> Result<()> {
    let mut target = peer.buf;
    ensure!(
        target.len as usize >= t.size + FLAG_LEN,
        "the server advertised {} bytes: too small for -s {} plus the {FLAG_LEN}-byte flag word",
        target.len,
        t.size
    );
    if bad_rkey {
        target.rkey ^= 0x5a5a_0000;
        s.n.say(format!(
            "--bad-rkey: using rkey {:#x} instead of the advertised {:#x}",
            target.rkey, peer.buf.rkey
        ));
    }
    let mut total = Duration::ZERO;
    for i in 0..t.iters {
        // The NIC reads the buffer when it executes the request, not when we post it: the bytes
        // must be in place before ibv_post_send and left alone until the completion.
        s.mr.write(0, &pattern(i as u64, t.size))?;
        let t0 = Instant::now();
        post_write(&s, t, i, target)?;
        let what = format!("the completion of iteration {i}'s RDMA WRITE");
        let wc =
            s.cq.poll_one(s.wait, &what)
                .with_context(|| format!("iteration {i}: RDMA WRITE to rkey {:#x}", target.rkey))?;
        let took = t0.elapsed();
        total += took;
        ensure!(
            wc.opcode() == WcOpcode::RDMA_WRITE,
            "iteration {i}: expected an RDMA_WRITE completion, got {}",
            wc.opcode()
        );
        // An RC write completes only when the target's NIC acknowledged it: the bytes are in
        // the target's memory. The target's CPU may not have looked yet — that is its business.
        s.n.say(format!(
            "iteration {i}: ibv_poll_cq -> {} {} (wr_id {}) after {} µs",
            wc.opcode(),
            wc.status().name(),
            wc.wr_id(),
            took.as_micros()
        ));
        s.conn
            .barrier(&format!("the server's check of iteration {i}"))
            .with_context(|| format!("iteration {i}: waiting for the server to check the bytes"))?;
        outln!(
            "iteration {i}: wrote {} bytes of pattern({i}); the server verified them",
            t.size
        );
    }
    outln!(
        "all {} writes of {} bytes completed and verified by the server (--notify {}); \
         mean post-to-completion {} µs",
        t.iters,
        t.size,
        t.notify.name(),
        total.as_micros() / t.iters as u128
    );
    Ok(())
}

/// Posts iteration `i`'s write of the first `t.size` bytes of our buffer into the start of
/// `target`, with its notification: the immediate data `i`, or the flag word `i + 1` written
/// into the last 8 bytes of `target` right after the payload.
fn post_write(s: &Side, t: &Test, i: u32, target: RemoteBuf) -> Result<()> {
    // Both ranges are inside what the server advertised (the writer checked), so `slice`
    // succeeds.
    let payload_at = target
        .slice(0, t.size as u32)
        .expect("checked by the writer");
    let data = s.mr.sge(0..t.size)?;
    match t.notify {
        Notify::Imm => {
            s.n.say(format!(
                "iteration {i}: ibv_post_send IBV_WR_RDMA_WRITE_WITH_IMM: {} bytes from lkey {:#x} \
                 -> remote addr {:#x} rkey {:#x}, imm_data {i}",
                t.size, data.lkey(), payload_at.addr, payload_at.rkey
            ));
            s.qp.post_send(&[SendWr::new(
                i as u64,
                SendOp::WriteWithImm(payload_at, i),
                Payload::Sges(&[data]),
            )])
            .with_context(|| format!("iteration {i}: posting the RDMA WRITE_WITH_IMM"))
        }
        Notify::Flag => {
            let flag_at = target
                .slice(target.len - FLAG_LEN as u32, FLAG_LEN as u32)
                .expect("checked by the writer");
            // The flag value is the iteration + 1, so 0 (the buffer's initial state) never
            // counts as "arrived".
            s.mr.write(FLAG_OFF, &(i as u64 + 1).to_ne_bytes())?;
            let flag = s.mr.sge(FLAG_OFF..BUF_LEN)?;
            s.n.say(format!(
                "iteration {i}: ibv_post_send [IBV_WR_RDMA_WRITE {} bytes -> {:#x} (unsignaled), \
                 IBV_WR_RDMA_WRITE flag={} -> {:#x} (signaled)], rkey {:#x}",
                t.size,
                payload_at.addr,
                i + 1,
                flag_at.addr,
                flag_at.rkey
            ));
            // One post, two requests: the payload first, the flag second. Only the second
            // asks for a completion; an RC QP completes requests in order, so its
            // completion means both are done (an error completes the first anyway).
            s.qp.post_send(&[
                SendWr::new(
                    2 * i as u64,
                    SendOp::Write(payload_at),
                    Payload::Sges(&[data]),
                )
                .signaled(false),
                SendWr::new(
                    2 * i as u64 + 1,
                    SendOp::Write(flag_at),
                    Payload::Sges(&[flag]),
                ),
            ])
            .with_context(|| format!("iteration {i}: posting the payload and flag writes"))
        }
    }
}

/// The server: wait for each write the chosen way, then check every byte.
fn target(s: Side, t: &Test) -> Result<()> {
    // With --notify imm, iteration 0's receive was posted before the writer was released.
    for i in 0..t.iters {
        let t0 = Instant::now();
        let how = match t.notify {
            Notify::Imm => wait_for_imm(&s, t, i)?,
            Notify::Flag => wait_for_flag(s.mr, s.qp, i, s.wait)?,
        };
        s.n.say(format!(
            "iteration {i}: {how}, {} µs after we started waiting",
            t0.elapsed().as_micros()
        ));
        let want = pattern(i as u64, t.size);
        let got = s.mr.to_vec(0..t.size)?;
        if let Some(off) = first_mismatch(&got, &want) {
            bail!(
                "iteration {i}: byte {off} of the written data is {:#04x}, expected {:#04x} \
                 (pattern({i}))",
                got[off],
                want[off]
            );
        }
        outln!(
            "iteration {i}: verified {} bytes == pattern({i}) (--notify {})",
            t.size,
            t.notify.name()
        );
        if t.notify == Notify::Imm && i + 1 < t.iters {
            post_imm_recv(s.qp, s.n, i + 1)?;
        }
        s.conn
            .barrier(&format!("the client after our check of iteration {i}"))
            .with_context(|| format!("iteration {i}: telling the client the bytes are good"))?;
    }
    outln!(
        "all {} writes of {} bytes verified on the target (--notify {})",
        t.iters,
        t.size,
        t.notify.name()
    );
    Ok(())
}

/// Posts the receive iteration `i`'s WRITE_WITH_IMM consumes. It writes nothing into it: no SGE
/// is needed.
fn post_imm_recv(qp: &Qp, n: &Narrator, i: u32) -> Result<()> {
    qp.post_recv(&[RecvWr {
        wr_id: i as u64,
        sges: &[],
    }])
    .with_context(|| format!("posting the receive for iteration {i}"))?;
    n.say(format!(
        "iteration {i}: ibv_post_recv (wr_id {i}, no SGE) ready for the WRITE_WITH_IMM"
    ));
    Ok(())
}

/// Waits for iteration `i`'s WRITE_WITH_IMM: the receive completion it consumed, which must
/// carry the immediate data `i` and say how many bytes the write placed. Returns what it saw,
/// for the narration.
fn wait_for_imm(s: &Side, t: &Test, i: u32) -> Result<String> {
    let what = format!("the client's WRITE_WITH_IMM of iteration {i} (a receive completion)");
    let wc =
        s.cq.poll_one(s.wait, &what)
            .with_context(|| format!("iteration {i}: waiting for the client's write"))?;
    ensure!(
        wc.opcode() == WcOpcode::RECV_RDMA_WITH_IMM,
        "iteration {i}: expected RECV_RDMA_WITH_IMM, got {}",
        wc.opcode()
    );
    ensure!(
        wc.imm_data() == Some(i),
        "iteration {i}: immediate data {:?}, expected {i}",
        wc.imm_data()
    );
    ensure!(
        wc.byte_len() as usize == t.size,
        "iteration {i}: the completion says {} bytes were written, expected {}",
        wc.byte_len(),
        t.size
    );
    Ok(format!(
        "ibv_poll_cq -> {} (wr_id {}), imm_data {}, byte_len {}",
        wc.opcode(),
        wc.wr_id(),
        i,
        wc.byte_len()
    ))
}

/// Spins on the flag word until it reads `i + 1`. Memory alone never reports an error, so the
/// loop also looks at the clock (give up after `wait`) and, every 10 ms, at the QP's state: a
/// failed write (e.g. a wrong rkey) moves our QP to ERR without a single byte changing.
fn wait_for_flag(mr: &Mr, qp: &Qp, i: u32, wait: Duration) -> Result<String> {
    let want = i as u64 + 1;
    let start = Instant::now();
    let mut last_state_check = start;
    let mut polls: u64 = 0;
    loop {
        // A volatile read: the compiler must load the word from memory every time, since the
        // NIC, not this program, changes it.
        if mr.read_u64_volatile(FLAG_OFF) == want {
            break;
        }
        polls += 1;
        if polls % 1024 == 0 {
            let now = Instant::now();
            if now - start >= wait {
                bail!(
                    "iteration {i}: timed out after {} s waiting for the flag word to become \
                     {want} (it is {}): no write arrived — is the client still running?",
                    wait.as_secs(),
                    mr.read_u64_volatile(FLAG_OFF)
                );
            }
            if now - last_state_check >= Duration::from_millis(10) {
                last_state_check = now;
                let state = qp.state().context("ibv_query_qp")?;
                if state == QpState::Err {
                    bail!(
                        "iteration {i}: our QP went to the error state while we spun on the \
                         flag word: the client's write failed (a wrong rkey or address?) — its \
                         error message names the status"
                    );
                }
            }
        }
        std::hint::spin_loop();
    }
    // Acquire fence: no read of the payload may be moved before the read that saw the flag.
    fence(Ordering::Acquire);
    Ok(format!("flag word == {want} after {polls} volatile reads"))
}

fn main() -> ExitCode {
    lesson_main(PROGRAM, check_flags, run)
}
