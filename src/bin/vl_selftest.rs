//! vl_selftest — prove that RDMA works between two local devices (or one device and itself).
//!
//! Connects an RC QP on device A to one on device B inside one process and checks, byte for
//! byte, a SEND, an RDMA WRITE, an RDMA READ, both atomics and a list of WRITEs converted once
//! and posted twice (a `SendList`, the benchmarks' hot path); then checks that a wrong rkey
//! fails the way the verbs spec says (`IBV_WC_REM_ACCESS_ERR`). Exit status 0 only when every
//! check passed.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, ensure, Context as _, Result};
use clap::Parser;
use verbs_lab::cli::SizeRange;
use verbs_lab::connect::{bring_up, local_endpoint, path_mtu, random_psn, ConnectOpts, Endpoint};
use verbs_lab::verbs::{
    AccessFlags, ActivePort, Cq, DeviceList, GidChoice, Mr, Mtu, Payload, Pd, Qp, QpCaps,
    QpInitAttr, QpType, RecvWr, RemoteBuf, SendOp, SendWr, WcOpcode, WcStatus,
};

#[derive(Parser, Debug)]
#[command(
    name = "vl_selftest",
    version,
    about = "Check that RDMA works between two local devices, byte for byte",
    after_help = "Exit codes:\n  0  every check passed\n  1  a check or a verbs call failed (the \
                  message names it)\n  2  bad command line"
)]
struct Args {
    /// Device of side A (default: the first device).
    #[arg(long = "dev-a", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    dev_a: Option<String>,
    /// Device of side B (default: the second device, or the first again if there is one).
    #[arg(long = "dev-b", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    dev_b: Option<String>,
    /// Port number on both devices.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1,
          value_parser = verbs_lab::cli::ib_port())]
    port: u8,
    /// GID index on both devices (default: chosen automatically).
    #[arg(short = 'x', long = "gid-index")]
    gid_index: Option<u32>,
    /// QP ack timeout exponent (4.096 µs × 2^N); large values suit slow emulation.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 18,
          value_parser = verbs_lab::cli::qp_timeout())]
    timeout: u8,
    /// Message size of the data checks, 1 to 8K (suffixes K, M, G): half the buffer.
    #[arg(short = 's', long = "size", default_value_t = 4000,
          value_parser = SizeRange::new(1..=BUF / 2))]
    size: usize,
    /// Seconds to wait for any one completion.
    #[arg(long = "wait", default_value_t = 30, value_parser = verbs_lab::cli::WaitSecs)]
    wait_secs: u64,
}

const BUF: usize = 16 * 1024;
const ATOMIC_OFF: usize = BUF - 8;

/// One side: its resources, in the order they must be created.
struct Side {
    name: String,
    gid: GidChoice,
    /// The port's active MTU (`None`: the port does not say).
    mtu: Option<Mtu>,
    _pd: Pd,
    mr: Mr,
    cq: Cq,
    qp: Qp,
    ep: Endpoint,
}

fn open_side(name: &str, port: u8, gid_index: Option<u32>) -> Result<Side> {
    let ActivePort {
        ctx,
        port: attr,
        gid,
    } = DeviceList::open_port(Some(name), port, gid_index)
        .with_context(|| format!("opening {name}"))?;
    let pd = ctx.alloc_pd().context("ibv_alloc_pd")?;
    let mr = pd
        .reg_mr(BUF, AccessFlags::ALL_REMOTE)
        .context("ibv_reg_mr")?;
    let cq = ctx.create_cq(64, None).context("ibv_create_cq")?;
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            qp_type: QpType::Rc,
            caps,
            sq_sig_all: false,
        })
        .context("ibv_create_qp")?;
    let ep = local_endpoint(&ctx, port, &qp, &gid, random_psn())?;
    Ok(Side {
        name: name.to_string(),
        gid,
        mtu: attr.active_mtu,
        _pd: pd,
        mr,
        cq,
        qp,
        ep,
    })
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn check(label: &str, ok: bool, detail: String) -> Result<()> {
    if ok {
        verbs_lab::outln!("ok    {label}: {detail}");
        Ok(())
    } else {
        verbs_lab::outln!("FAIL  {label}: {detail}");
        bail!("{label} failed: {detail}")
    }
}

fn first_mismatch(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or((a.len() != b.len()).then_some(a.len().min(b.len())))
}

fn run(args: &Args) -> Result<()> {
    let (a, b) = connect_sides(args)?;
    let wait = Duration::from_secs(args.wait_secs);
    let n = args.size;
    check_send(&a, &b, n, wait)?;
    let remote = check_write(&a, &b, n, wait)?;
    check_read(&a, &b, n, wait, remote)?;
    check_atomics(&a, &b, wait)?;
    check_send_list(&a, &b, wait)?;
    check_byte_writes(&b)?;
    check_wrong_rkey(&a, &b, n, wait, remote)?;
    verbs_lab::outln!("all checks passed between {} and {}", a.name, b.name);
    Ok(())
}

/// Opens both sides (`--dev-a`, `--dev-b`, else the first two devices, or the first twice) and
/// connects A's QP to B's: A initiates every operation, only B's QP lets its peer in.
fn connect_sides(args: &Args) -> Result<(Side, Side)> {
    let names = DeviceList::new()?.names();
    if names.is_empty() {
        return Err(verbs_lab::verbs::VerbsError::NoDevices.into());
    }
    let a_name = args.dev_a.clone().unwrap_or_else(|| names[0].clone());
    let b_name = args
        .dev_b
        .clone()
        .unwrap_or_else(|| names.get(1).unwrap_or(&names[0]).clone());
    let a = open_side(&a_name, args.port, args.gid_index)?;
    let b = open_side(&b_name, args.port, args.gid_index)?;
    verbs_lab::outln!("A: {} {}", a.name, a.gid);
    verbs_lab::outln!("B: {} {}", b.name, b.gid);
    let mtu = path_mtu(&[a.mtu, b.mtu]);
    // A initiates every operation; only B's QP lets its peer write, read and run atomics.
    let opts = |s: &Side, access: AccessFlags| -> Result<ConnectOpts> {
        Ok(ConnectOpts {
            timeout: args.timeout,
            access,
            ..ConnectOpts::for_gid(args.port, &s.gid.entry, mtu)?
        })
    };
    let remote = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    bring_up(&a.qp, &a.ep, &b.ep, &opts(&a, AccessFlags::EMPTY)?)
        .context("connecting A's QP to B")?;
    bring_up(&b.qp, &b.ep, &a.ep, &opts(&b, remote)?).context("connecting B's QP to A")?;
    verbs_lab::outln!("connected: A {} <-> B {} (path MTU {mtu})", a.ep, b.ep);

    Ok((a, b))
}

/// SEND A -> B: B posts a receive first, then A sends; B holds the bytes sent.
fn check_send(a: &Side, b: &Side, n: usize, wait: Duration) -> Result<()> {
    let msg = pattern(1, n);
    a.mr.write(0, &msg)?;
    let rsge = b.mr.sge(0..n)?;
    b.qp.post_recv(&[RecvWr {
        wr_id: 100,
        sges: &[rsge],
    }])?;
    let ssge = a.mr.sge(0..n)?;
    a.qp.post_send(&[SendWr::new(1, SendOp::Send, Payload::Sges(&[ssge]))])?;
    let wc = a.cq.poll_one(wait, "A's SEND completion")?;
    ensure!(
        wc.opcode() == WcOpcode::SEND,
        "A: expected a SEND completion, got {}",
        wc.opcode()
    );
    let wc = b.cq.poll_one(wait, "B's receive completion")?;
    check(
        "SEND",
        wc.opcode() == WcOpcode::RECV && wc.byte_len() as usize == n,
        format!("B received {} bytes (expected {n})", wc.byte_len()),
    )?;
    let mm = first_mismatch(&b.mr.to_vec(0..n)?, &msg);
    check(
        "SEND bytes",
        mm.is_none(),
        format!("{n} bytes {} -> {}, first mismatch {mm:?}", a.name, b.name),
    )?;
    Ok(())
}

/// RDMA WRITE A -> B at offset BUF/2 of B's buffer; returns that region of B.
fn check_write(a: &Side, b: &Side, n: usize, wait: Duration) -> Result<RemoteBuf> {
    let wdata = pattern(77, n); // check_read expects it back
    a.mr.write(0, &wdata)?;
    let remote = b.mr.remote(BUF / 2..BUF / 2 + n)?;
    let ssge = a.mr.sge(0..n)?;
    a.qp.post_send(&[SendWr::new(
        2,
        SendOp::Write(remote),
        Payload::Sges(&[ssge]),
    )])?;
    a.cq.poll_one(wait, "A's RDMA WRITE completion")?;
    // An RC write completes only after the responder acknowledged it: the bytes are in B's memory.
    let got = b.mr.to_vec(BUF / 2..BUF / 2 + n)?;
    let mm = first_mismatch(&got, &wdata);
    check(
        "RDMA WRITE",
        mm.is_none(),
        format!(
            "{n} bytes into {}'s buffer at rkey {:#x}, first mismatch {mm:?}",
            b.name, remote.rkey
        ),
    )?;
    Ok(remote)
}

/// RDMA READ: A reads B's region (written by [`check_write`]) back into A's buffer at offset
/// BUF/2.
fn check_read(a: &Side, b: &Side, n: usize, wait: Duration, remote: RemoteBuf) -> Result<()> {
    let wdata = pattern(77, n); // what check_write wrote there
    a.mr.fill(BUF / 2..BUF / 2 + n, 0)?;
    let dsge = a.mr.sge(BUF / 2..BUF / 2 + n)?;
    a.qp.post_send(&[SendWr::new(3, SendOp::Read(remote), Payload::Sges(&[dsge]))])?;
    let wc = a.cq.poll_one(wait, "A's RDMA READ completion")?;
    ensure!(
        wc.opcode() == WcOpcode::RDMA_READ,
        "expected RDMA_READ completion, got {}",
        wc.opcode()
    );
    let mm = first_mismatch(&a.mr.to_vec(BUF / 2..BUF / 2 + n)?, &wdata);
    check(
        "RDMA READ",
        mm.is_none(),
        format!("{n} bytes read back from {}, first mismatch {mm:?}", b.name),
    )?;
    Ok(())
}

/// Atomics on B's last 8-byte word: fetch-and-add 5 three times, then compare-and-swap.
fn check_atomics(a: &Side, b: &Side, wait: Duration) -> Result<()> {
    b.mr.write(ATOMIC_OFF, &100u64.to_ne_bytes())?;
    let word = b.mr.remote(ATOMIC_OFF..BUF)?;
    let old_sge = a.mr.sge(0..8)?;
    let mut olds = Vec::new();
    for i in 0..3 {
        a.qp.post_send(&[SendWr::new(
            10 + i,
            SendOp::FetchAdd {
                remote: word,
                add: 5,
            },
            Payload::Sges(&[old_sge]),
        )])?;
        a.cq.poll_one(wait, "A's FETCH_ADD completion")?;
        olds.push(a.mr.read_u64_volatile(0));
    }
    let now = b.mr.read_u64_volatile(ATOMIC_OFF);
    check(
        "FETCH_AND_ADD",
        olds == [100, 105, 110] && now == 115,
        format!("old values {olds:?}, final {now} (expected [100, 105, 110], 115)"),
    )?;
    a.qp.post_send(&[SendWr::new(
        20,
        SendOp::CompareSwap {
            remote: word,
            compare: 115,
            swap: 7,
        },
        Payload::Sges(&[old_sge]),
    )])?;
    a.cq.poll_one(wait, "A's CMP_AND_SWP completion")?;
    let old = a.mr.read_u64_volatile(0);
    let now = b.mr.read_u64_volatile(ATOMIC_OFF);
    check(
        "CMP_AND_SWP",
        old == 115 && now == 7,
        format!("old {old}, final {now} (expected 115, 7)"),
    )?;
    Ok(())
}

/// `Mr::write_byte` (a latency loop's poll byte) changes its one byte and none beside it, at
/// every offset of a word and across the word boundaries, and refuses a byte past the end.
fn check_byte_writes(s: &Side) -> Result<()> {
    const AT: usize = BUF / 8;
    const N: usize = 24;
    let mut want = pattern(5, N);
    s.mr.write(AT, &want)?;
    for (i, b) in want.iter_mut().enumerate() {
        *b = !*b ^ (i as u8);
        s.mr.write_byte(AT + i, *b)?;
    }
    let got = s.mr.to_vec(AT..AT + N)?;
    let mm = first_mismatch(&got, &want);
    check(
        "byte writes",
        mm.is_none(),
        format!(
            "{N} bytes of {}'s buffer one at a time, first mismatch {mm:?}",
            s.name
        ),
    )?;
    let past = s.mr.write_byte(s.mr.len(), 1);
    check(
        "byte write refusal",
        past.as_ref()
            .is_err_and(|e| e.to_string().contains("outside the registered buffer")),
        format!("a byte at offset {} (the length): {past:?}", s.mr.len()),
    )
}

/// A [`verbs_lab::verbs::SendList`] of three RDMA WRITEs, converted once: pointed at three
/// slots of A and of B and posted whole (one signaled, the last), then its first request pointed
/// at a fourth slot and posted alone; B holds each slot's bytes. Then what a list refuses: a
/// remote buffer for a SEND, an inline payload beyond the QP's `max_inline_data`.
fn check_send_list(a: &Side, b: &Side, wait: Duration) -> Result<()> {
    const M: usize = 64;
    const AT: usize = BUF / 4;
    let data = pattern(9, 4 * M);
    a.mr.write(0, &data)?;
    b.mr.fill(AT..AT + 4 * M, 0)?;
    let region = b.mr.remote(AT..AT + 4 * M)?;
    let slot = |k: usize| -> Result<RemoteBuf> {
        region
            .slice((k * M) as u32, M as u32)
            .context("a slot of B's region")
    };
    let first = [a.mr.sge(0..M)?];
    let wr = SendWr::new(0, SendOp::Write(slot(0)?), Payload::Sges(&first));
    let mut list = a.qp.send_list(&[wr; 3], None)?;
    for k in 0..3 {
        list.retarget(k, a.mr.sge(k * M..(k + 1) * M)?, Some(slot(k)?))?;
        list.set(k, 40 + k as u64, k == 2);
    }
    list.post(3)?;
    let wc =
        a.cq.poll_one(wait, "A's last listed RDMA WRITE completion")?;
    ensure!(
        wc.wr_id() == 42,
        "expected the completion of request 42, got {}",
        wc.wr_id()
    );
    list.retarget(0, a.mr.sge(3 * M..4 * M)?, Some(slot(3)?))?;
    list.set(0, 50, true);
    list.post(1)?;
    let wc = a.cq.poll_one(wait, "A's re-posted RDMA WRITE completion")?;
    ensure!(
        wc.wr_id() == 50,
        "expected the completion of request 50, got {}",
        wc.wr_id()
    );
    let mm = first_mismatch(&b.mr.to_vec(AT..AT + 4 * M)?, &data);
    check(
        "send list",
        mm.is_none(),
        format!(
            "3 + 1 WRITEs of {M} bytes from one list into 4 slots of {}, first mismatch {mm:?}",
            b.name
        ),
    )?;
    let send = SendWr::new(0, SendOp::Send, Payload::Sges(&first));
    let no_remote =
        a.qp.send_list(&[send], None)?
            .retarget(0, first[0], Some(slot(0)?));
    let inline = a.qp.send_list(&[wr], Some(&a.mr)).err();
    check(
        "send list refusals",
        no_remote.is_err() && inline.is_some(),
        format!(
            "a SEND's remote: {}; {M} bytes inline on a QP granting 0: {}",
            no_remote
                .err()
                .map_or("accepted (!)".into(), |e| e.to_string()),
            inline.map_or("accepted (!)".into(), |e| e.to_string())
        ),
    )?;
    Ok(())
}

/// A wrong rkey must fail with IBV_WC_REM_ACCESS_ERR and leave B's memory untouched.
fn check_wrong_rkey(a: &Side, b: &Side, n: usize, wait: Duration, remote: RemoteBuf) -> Result<()> {
    let before = b.mr.to_vec(0..BUF)?;
    let mut bad = remote;
    bad.rkey ^= 0x5a5a_0000;
    let ssge = a.mr.sge(0..n)?;
    a.qp.post_send(&[SendWr::new(30, SendOp::Write(bad), Payload::Sges(&[ssge]))])?;
    let err =
        a.cq.poll_one(wait, "A's (failing) RDMA WRITE completion")
            .err();
    let status = err.as_ref().and_then(|e| e.wc_status());
    check(
        "wrong rkey",
        status == Some(WcStatus::REM_ACCESS_ERR) && b.mr.to_vec(0..BUF)? == before,
        format!(
            "completion: {}",
            err.map_or("success (!)".to_string(), |e| e.to_string())
        ),
    )?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Args = verbs_lab::cli::parse();
    verbs_lab::stdout::until_stdout_closes(|| verbs_lab::cli::exit_code("vl_selftest", run(&args)))
}
