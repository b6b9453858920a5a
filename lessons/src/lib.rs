//! What every lesson shares: the command line, narration, opening a device, and the exchange of
//! endpoints with the peer. What a lesson *teaches* stays in its own `main.rs`; this file holds
//! only what earlier lessons already taught.

#![forbid(unsafe_code)]

use std::fmt;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use verbs_lab::connect::Endpoint;
use verbs_lab::diag::{device_report, PortCounters};
use verbs_lab::oob::{self, OobConn, OobError};
use verbs_lab::verbs::{
    Context, Cq, DeviceList, Gid, GidChoice, Mr, Pd, PortAttr, Qp, QpCaps, QpInitAttr, QpType,
    RemoteBuf, VerbsError, WorkCompletion,
};

/// The flags every two-sided lesson takes, perftest-style: the server is started without a
/// host, the client with the server's host.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// Server to connect to; without it this process is the server.
    pub host: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// RDMA device to use (default: the first one).
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Port of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// GID index (default: chosen automatically, the same way on both sides).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<u32>,
    /// QP ack timeout exponent: 4.096 µs × 2^N before a retransmit.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 18)]
    pub qp_timeout: u8,
    /// Seconds to wait for the peer at any one step before giving up.
    #[arg(long = "wait", default_value_t = 30)]
    pub wait_secs: u64,
    /// No narration: print only results.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
}

impl CommonArgs {
    pub fn role(&self) -> Role {
        match &self.host {
            Some(h) => Role::Client(h.clone()),
            None => Role::Server,
        }
    }
    pub fn wait(&self) -> Duration {
        Duration::from_secs(self.wait_secs)
    }
    pub fn narrator(&self) -> Narrator {
        Narrator { quiet: self.quiet }
    }
}

/// The devices of the lessons that hold both ends in one process (09, 14): a QP on `--dev-a`
/// (the client, which sends) connected to a QP on `--dev-b` (the server), both on port `-i`
/// with GID index `-g`.
#[derive(Args, Debug, Clone)]
pub struct DevicePairArgs {
    /// Device of the client (sending) QP (default: the first device)
    #[arg(long = "dev-a")]
    pub dev_a: Option<String>,
    /// Device of the server (receiving) QP (default: the second device, or the first again if
    /// there is one)
    #[arg(long = "dev-b")]
    pub dev_b: Option<String>,
    /// Port of both devices
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// GID index on both devices (default: chosen automatically)
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<u32>,
}

impl DevicePairArgs {
    /// The two devices' names: `--dev-a` or the first device, `--dev-b` or the second (the
    /// first again when there is only one). With no device at all, says how to get one and
    /// how to run `program` where there is one.
    pub fn names(&self, program: &str) -> Result<(String, String)> {
        let names = DeviceList::new().context("listing RDMA devices")?.names();
        let a = match &self.dev_a {
            Some(d) => d.clone(),
            None => names.first().cloned().ok_or_else(|| {
                anyhow::anyhow!(
                    "no RDMA device: get one with scripts/softroce-up (a kernel with rdma_rxe) \
                     or run in the guest: scripts/softroce-vm run -- {program}"
                )
            })?,
        };
        let b = match &self.dev_b {
            Some(d) => d.clone(),
            None => names.get(1).cloned().unwrap_or_else(|| a.clone()),
        };
        Ok((a, b))
    }
}

/// Which side of the exchange this process is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Server,
    Client(String),
}

impl Role {
    pub fn is_server(&self) -> bool {
        *self == Role::Server
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Server => f.write_str("server"),
            Role::Client(h) => write!(f, "client of {h}"),
        }
    }
}

/// Prints what the program does, step by step, unless `--quiet`.
#[derive(Debug, Clone, Copy)]
pub struct Narrator {
    pub quiet: bool,
}

impl Narrator {
    /// A numbered step heading: `[3] Register memory`.
    pub fn step(&self, n: u32, title: &str) {
        if !self.quiet {
            println!("\n[{n}] {title}");
        }
    }
    /// One line of narration under a step.
    pub fn say(&self, msg: impl fmt::Display) {
        if !self.quiet {
            println!("    {msg}");
        }
    }
}

/// The device a lesson uses, opened, with its port and chosen GID.
pub struct Device {
    pub ctx: Context,
    pub port: PortAttr,
    pub gid: GidChoice,
}

impl Device {
    /// The MTU this side offers its peer: the port's active MTU, or 1024 when the port does not
    /// say (lesson 03 takes the smaller of both sides' as the path MTU).
    pub fn active_mtu(&self) -> verbs_lab::verbs::Mtu {
        self.port
            .active_mtu
            .unwrap_or(verbs_lab::verbs::Mtu::Mtu1024)
    }
}

/// Opens the device named by `-d` (or the first), queries the port and chooses the GID, as
/// lesson 01 taught. Narrates what it found.
pub fn open_device(args: &CommonArgs, n: &Narrator) -> Result<Device> {
    open_named_device(args.ib_dev.as_deref(), args.ib_port, args.gid_idx, n)
}

/// [`open_device`] for the lessons that hold both ends in one process (09, 14) and so name two
/// devices: `dev` (or the first), its port `ib_port`, which must be ACTIVE, and the GID `-g`
/// names or the automatic choice. Narrates what it found.
pub fn open_named_device(
    dev: Option<&str>,
    ib_port: u8,
    gid_idx: Option<u32>,
    n: &Narrator,
) -> Result<Device> {
    let ctx = DeviceList::open(dev).context("opening the RDMA device")?;
    let port = ctx
        .query_port(ib_port)
        .with_context(|| format!("ibv_query_port on {} port {}", ctx.name(), ib_port))?;
    if port.state != verbs_lab::verbs::PortState::ACTIVE {
        bail!(
            "{} port {} is {}, not ACTIVE: check the link (rdma link show) before running",
            ctx.name(),
            ib_port,
            port.state
        );
    }
    let gid = ctx.choose_gid(ib_port, gid_idx).context("choosing a GID")?;
    n.say(format!(
        "opened {} port {} ({}, active MTU {}, {})",
        ctx.name(),
        ib_port,
        port.state,
        port.active_mtu.map_or("?".into(), |m| m.to_string()),
        port.link_layer
    ));
    n.say(format!("using {gid}"));
    Ok(Device { ctx, port, gid })
}

/// Opens the out-of-band TCP connection: the server waits for a client, the client connects.
pub fn oob_connect(args: &CommonArgs, n: &Narrator) -> Result<OobConn> {
    let conn = match args.role() {
        Role::Server => {
            n.say(format!(
                "waiting up to {} s for a client on TCP port {}",
                args.wait_secs, args.port
            ));
            oob::accept(args.port, args.wait())
        }
        Role::Client(host) => {
            n.say(format!("connecting to {host}:{}", args.port));
            oob::connect(&host, args.port, args.wait())
        }
    }
    .context("out-of-band connection")?;
    n.say(format!("out-of-band TCP connection with {}", conn.peer()));
    Ok(conn)
}

/// What a lesson peer tells the other: its QP endpoint and, for one-sided lessons, the buffer
/// it exposes (address, rkey, length; zeros when it exposes none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerInfo {
    pub ep: Endpoint,
    pub buf: RemoteBuf,
}

/// Fixed-width text form: `LLLL:QQQQQQ:PPPPPP:G×32:RRRRRRRR:AAAAAAAAAAAAAAAA:NNNNNNNN` (hex),
/// easy to read in a packet capture and to parse strictly.
const PEER_INFO_LEN: usize = 4 + 1 + 6 + 1 + 6 + 1 + 32 + 1 + 8 + 1 + 16 + 1 + 8;

impl PeerInfo {
    pub fn encode(&self) -> String {
        format!(
            "{:04x}:{:06x}:{:06x}:{}:{:08x}:{:016x}:{:08x}",
            self.ep.lid,
            self.ep.qpn,
            self.ep.psn,
            self.ep.gid.to_hex(),
            self.buf.rkey,
            self.buf.addr,
            self.buf.len
        )
    }

    pub fn decode(s: &[u8]) -> std::result::Result<PeerInfo, String> {
        if s.len() != PEER_INFO_LEN {
            return Err(format!("expected {PEER_INFO_LEN} bytes, got {}", s.len()));
        }
        let s = std::str::from_utf8(s).map_err(|_| "not ASCII text".to_string())?;
        let f: Vec<&str> = s.split(':').collect();
        let widths = [4, 6, 6, 32, 8, 16, 8];
        if f.len() != widths.len() || f.iter().zip(widths).any(|(x, w)| x.len() != w) {
            return Err(format!(
                "'{s}' does not have the LID:QPN:PSN:GID:RKEY:ADDR:LEN layout"
            ));
        }
        let hex = |x: &str, name: &str| {
            u64::from_str_radix(x, 16).map_err(|_| format!("{name} '{x}' is not hexadecimal"))
        };
        Ok(PeerInfo {
            ep: Endpoint {
                lid: hex(f[0], "LID")? as u16,
                qpn: hex(f[1], "QPN")? as u32,
                psn: hex(f[2], "PSN")? as u32,
                gid: Gid::from_hex(f[3])
                    .ok_or_else(|| format!("GID '{}' is not 32 hex digits", f[3]))?,
            },
            buf: RemoteBuf {
                rkey: hex(f[4], "rkey")? as u32,
                addr: hex(f[5], "address")?,
                len: hex(f[6], "length")? as u32,
            },
        })
    }
}

/// Swaps [`PeerInfo`] with the peer: the client sends first, the server answers (the order
/// ibv_rc_pingpong uses). Returns the peer's.
pub fn exchange(
    conn: &mut OobConn,
    role: &Role,
    mine: &PeerInfo,
    n: &Narrator,
) -> Result<PeerInfo> {
    let text = mine.encode();
    n.say(format!("sending    {text}"));
    let theirs = if role.is_server() {
        let t = recv_info(conn)?;
        conn.send_msg(text.as_bytes(), "our endpoint")
            .context("sending our endpoint")?;
        t
    } else {
        conn.send_msg(text.as_bytes(), "our endpoint")
            .context("sending our endpoint")?;
        recv_info(conn)?
    };
    n.say(format!("received   {}", theirs.encode()));
    Ok(theirs)
}

fn recv_info(conn: &mut OobConn) -> Result<PeerInfo> {
    let raw = conn.recv_msg(256, "the peer's endpoint (QPN, PSN, GID, rkey)")?;
    PeerInfo::decode(&raw).map_err(|detail| {
        OobError::Malformed {
            what: "endpoint record".into(),
            detail,
        }
        .into()
    })
}

/// Lesson 03's endpoint exchange in one call: our endpoint (LID, QPN, a random PSN, our GID) and
/// the buffer we expose (`RemoteBuf::default()` for none) go to the peer, whose come back
/// ([`exchange`], narrated). Returns ours and theirs.
pub fn exchange_endpoints(
    conn: &mut OobConn,
    role: &Role,
    dev: &Device,
    ib_port: u8,
    qp: &Qp,
    buf: RemoteBuf,
    n: &Narrator,
) -> Result<(Endpoint, PeerInfo)> {
    let ep = verbs_lab::connect::local_endpoint(
        &dev.ctx,
        ib_port,
        qp,
        &dev.gid,
        verbs_lab::connect::random_psn(),
    )
    .context("reading our endpoint")?;
    let peer = exchange(conn, role, &PeerInfo { ep, buf }, n)?;
    Ok((ep, peer))
}

/// A byte pattern both sides can compute: a message's bytes depend on its iteration number, so
/// a stale or misplaced message is caught, not just a missing one.
pub fn pattern(iteration: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u64)
                .wrapping_mul(131)
                .wrapping_add(iteration.wrapping_mul(7)) as u8
        })
        .collect()
}

/// The first offset where `got` differs from `want`, if any.
pub fn first_mismatch(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .or((got.len() != want.len()).then(|| got.len().min(want.len())))
}

/// Prints an error chain the way every tool of the project does (`verbs_lab::cli::failed`) and
/// returns the exit code 1.
pub fn report_error(program: &str, e: &anyhow::Error) -> std::process::ExitCode {
    verbs_lab::cli::failed(program, e)
}

/// Size of `ibv_rc_pingpong`'s endpoint record on the wire: the text
/// `LLLL:QQQQQQ:PPPPPP:GGGG…` (LID, QPN, PSN in hex, then the GID as 32 hex digits in byte
/// order) in a fixed buffer of `sizeof "0000:000000:000000:00000000000000000000000000000000"`
/// bytes, the terminating NUL included.
pub const RC_PINGPONG_RECORD_LEN: usize = 52;

/// What the `ibv_rc_pingpong` client sends last, NUL included (`sizeof "done"`).
pub const RC_PINGPONG_DONE: &[u8; 5] = b"done\0";

/// Encodes an endpoint the way `ibv_rc_pingpong` does (`"%04x:%06x:%06x:%s"` plus the NUL).
pub fn encode_rc_pingpong(ep: &Endpoint) -> [u8; RC_PINGPONG_RECORD_LEN] {
    let text = format!(
        "{:04x}:{:06x}:{:06x}:{}",
        ep.lid,
        ep.qpn & 0xff_ffff,
        ep.psn & 0xff_ffff,
        ep.gid.to_hex()
    );
    let mut rec = [0u8; RC_PINGPONG_RECORD_LEN];
    rec[..text.len()].copy_from_slice(text.as_bytes());
    rec
}

/// Decodes an `ibv_rc_pingpong` endpoint record (the text up to the first NUL).
pub fn decode_rc_pingpong(rec: &[u8]) -> std::result::Result<Endpoint, String> {
    let end = rec.iter().position(|&b| b == 0).unwrap_or(rec.len());
    let text = std::str::from_utf8(&rec[..end]).map_err(|_| "not ASCII text".to_string())?;
    let f: Vec<&str> = text.split(':').collect();
    if f.len() != 4 || f[..3].iter().any(|x| x.is_empty() || x.len() > 8) {
        return Err(format!("'{text}' does not have the LID:QPN:PSN:GID layout"));
    }
    let hex = |x: &str, name: &str| {
        u32::from_str_radix(x, 16).map_err(|_| format!("{name} '{x}' is not hexadecimal"))
    };
    let lid = hex(f[0], "LID")?;
    let lid = u16::try_from(lid).map_err(|_| format!("LID {lid:#x} does not fit 16 bits"))?;
    Ok(Endpoint {
        lid,
        qpn: hex(f[1], "QPN")? & 0xff_ffff,
        psn: hex(f[2], "PSN")? & 0xff_ffff,
        gid: Gid::from_hex(f[3]).ok_or_else(|| format!("GID '{}' is not 32 hex digits", f[3]))?,
    })
}

/// The handshake of `ibv_rc_pingpong` and its siblings (`ibv_ud_pingpong`, and
/// `ibv_srq_pingpong` with 256 records), taught in lesson 04: the client writes its records, the
/// server reads them, connects, replies with its own, and reads the client's `"done"`; the client
/// connects after the exchange. `connect` gets the peer's records (as many bytes as `mine`) at
/// the point where the C programs connect, and its result is returned.
pub fn rc_pingpong_handshake<T>(
    conn: &mut OobConn,
    server: bool,
    mine: &[u8],
    connect: impl FnOnce(&[u8]) -> Result<T>,
) -> Result<T> {
    let mut theirs = vec![0u8; mine.len()];
    if server {
        conn.recv_raw(&mut theirs, "the client's endpoint record")
            .context("the handshake")?;
        let t = connect(&theirs)?;
        conn.send_raw(mine, "our endpoint record")
            .context("the handshake")?;
        let mut done = [0u8; RC_PINGPONG_DONE.len()];
        conn.recv_raw(&mut done, "the client's \"done\"")
            .context("the handshake")?;
        if &done != RC_PINGPONG_DONE {
            bail!(
                "handshake: expected \"done\", got {:?}",
                String::from_utf8_lossy(&done)
            );
        }
        Ok(t)
    } else {
        conn.send_raw(mine, "our endpoint record")
            .context("the handshake")?;
        conn.recv_raw(&mut theirs, "the server's endpoint record")
            .context("the handshake")?;
        conn.send_raw(RC_PINGPONG_DONE, "\"done\"")
            .context("the handshake")?;
        connect(&theirs)
    }
}

/// The two summary lines of the rdma-core ping-pong examples, so that scripts parse ours and
/// theirs alike: `N bytes in X seconds = Y Mbit/sec` (N = size × iters × 2) and
/// `N iters in X seconds = Z usec/iter`.
pub fn print_pingpong_summary(size: u64, iters: u64, elapsed: Duration) {
    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = size * iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / iters as f64
    );
}

/// The ping-pong lessons' (04, 11) own summary line after the C examples' two: the round trip
/// of `size` bytes in µs as avg, min, median, max. Prints nothing and returns false when there
/// is no sample (only the client, which starts every exchange, measures round trips).
pub fn print_round_trips(size: usize, rtts_us: &[f64]) -> bool {
    let Some(s) = Summary::of(rtts_us) else {
        return false;
    };
    println!(
        "round trip of {size} bytes (usec): avg {:.1}  min {:.1}  median {:.1}  max {:.1}  ({} samples)",
        s.avg, s.min, s.median, s.max, s.count
    );
    true
}

/// Minimum, median, maximum and mean of a set of samples (e.g. round trips in µs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub min: f64,
    pub median: f64,
    pub max: f64,
    pub avg: f64,
}

impl Summary {
    /// `None` for an empty set. NaNs sort last.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            count: n,
            min: v[0],
            median,
            max: v[n - 1],
            avg: v.iter().sum::<f64>() / n as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_info_round_trips_and_rejects_garbage() {
        let p = PeerInfo {
            ep: Endpoint {
                lid: 0,
                qpn: 0x11,
                psn: 0xabcdef,
                gid: "::ffff:192.168.77.1".parse().unwrap(),
            },
            buf: RemoteBuf {
                addr: 0x7f00_1234_5000,
                rkey: 0x1234,
                len: 4096,
            },
        };
        let s = p.encode();
        assert_eq!(s.len(), PEER_INFO_LEN);
        assert_eq!(PeerInfo::decode(s.as_bytes()).unwrap(), p);
        assert!(PeerInfo::decode(b"short").unwrap_err().contains("expected"));
        let bad = s.replace(':', ";");
        assert!(PeerInfo::decode(bad.as_bytes())
            .unwrap_err()
            .contains("layout"));
        let mut bad = s.clone().into_bytes();
        bad[0] = b'z';
        assert!(PeerInfo::decode(&bad).unwrap_err().contains("LID"));
    }

    #[test]
    fn patterns_depend_on_iteration() {
        assert_ne!(pattern(1, 64), pattern(2, 64));
        assert_eq!(first_mismatch(&pattern(1, 8), &pattern(1, 8)), None);
        assert_eq!(first_mismatch(b"abc", b"abd"), Some(2));
        assert_eq!(first_mismatch(b"ab", b"abc"), Some(2));
    }

    #[test]
    fn rc_pingpong_record_matches_the_c_layout() {
        let ep = Endpoint {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: "::ffff:192.168.77.1".parse().unwrap(),
        };
        let rec = encode_rc_pingpong(&ep);
        assert_eq!(rec.len(), RC_PINGPONG_RECORD_LEN);
        assert_eq!(
            &rec[..51],
            b"0000:000011:abcdef:00000000000000000000ffffc0a84d01"
        );
        assert_eq!(rec[51], 0);
        assert_eq!(decode_rc_pingpong(&rec).unwrap(), ep);
        assert!(decode_rc_pingpong(b"0000:11:22\0")
            .unwrap_err()
            .contains("layout"));
        assert!(
            decode_rc_pingpong(b"0000:zz:22:00000000000000000000ffffc0a84d01\0")
                .unwrap_err()
                .contains("QPN")
        );
        assert_eq!(RC_PINGPONG_DONE.len(), 5);
    }

    #[test]
    fn summary_of_samples() {
        let s = Summary::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.min, s.median, s.max, s.avg), (1.0, 2.5, 10.0, 4.0));
        assert_eq!(Summary::of(&[5.0]).unwrap().median, 5.0);
        assert!(Summary::of(&[]).is_none());
    }
}

// ---------------------------------------------------------------------------------------------
// Shared by lessons 05–08 (RDMA Write, RDMA Read, events, atomics): checking the common flags
// before any verbs call, agreeing on test parameters, and lesson 03's connection attributes.

impl CommonArgs {
    /// Refuses common flags that cannot work, before any verbs call (so it needs no device).
    pub fn check(&self) -> Result<()> {
        check_device_flags(self.ib_port, self.gid_idx, self.qp_timeout, self.wait_secs)
    }
}

/// Refuses device flags that cannot work (`-i`, `-g`, `-u`, `--wait`), before any verbs call:
/// [`CommonArgs::check`] and the one-process lessons that take these flags without `-d`/`-p`.
pub fn check_device_flags(
    ib_port: u8,
    gid_idx: Option<u32>,
    qp_timeout: u8,
    wait_secs: u64,
) -> Result<()> {
    if let Some(g) = gid_idx {
        if g > 255 {
            bail!(
                "-g {g}: unusable GID index: the source GID index of an address vector is \
                 8 bits (0..=255); `lesson01_devices` lists the populated ones"
            );
        }
    }
    if ib_port == 0 {
        bail!("-i 0: ports are numbered from 1");
    }
    if qp_timeout > 31 {
        bail!("-u {qp_timeout}: the QP ack timeout is a 5-bit exponent (0..=31; 18 ≈ 1.1 s)");
    }
    if wait_secs == 0 {
        bail!("--wait 0: every wait needs at least 1 s, or nothing could ever arrive");
    }
    Ok(())
}

/// Test parameters one side announces to the other, as `key=value` words on one line
/// (`size=4096 iters=5 notify=imm mtu=4096`): readable in a packet capture, strict to parse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Terms(Vec<(String, String)>);

impl Terms {
    pub fn new() -> Terms {
        Terms::default()
    }

    /// Adds `key=value`. Keys and values are single words (no space, no `=`).
    pub fn with(mut self, key: &str, value: impl fmt::Display) -> Terms {
        let value = value.to_string();
        assert!(
            !key.is_empty() && !key.contains([' ', '=']) && !value.contains([' ', '=']),
            "parameter '{key}={value}' must be two single words"
        );
        self.0.push((key.to_string(), value));
        self
    }

    /// The raw value of `key`, if present.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`, parsed; an error names the key when it is missing or malformed.
    pub fn get<T: std::str::FromStr>(&self, key: &str) -> Result<T>
    where
        T::Err: fmt::Display,
    {
        let raw = self
            .raw(key)
            .ok_or_else(|| anyhow::anyhow!("the peer's parameters lack '{key}' ({self})"))?;
        raw.parse()
            .map_err(|e| anyhow::anyhow!("the peer's parameter {key}={raw} is invalid: {e}"))
    }

    pub fn encode(&self) -> String {
        self.to_string()
    }

    pub fn decode(s: &[u8]) -> std::result::Result<Terms, String> {
        let s = std::str::from_utf8(s).map_err(|_| "not UTF-8 text".to_string())?;
        let mut p = Terms::new();
        for word in s.split_whitespace() {
            let (k, v) = word
                .split_once('=')
                .filter(|(k, v)| !k.is_empty() && !v.contains('='))
                .ok_or_else(|| format!("'{word}' is not key=value"))?;
            p.0.push((k.to_string(), v.to_string()));
        }
        Ok(p)
    }
}

impl fmt::Display for Terms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// Sends one [`Terms`] message; `what` names it in errors.
pub fn send_params(conn: &mut OobConn, p: &Terms, what: &str) -> Result<()> {
    conn.send_msg(p.encode().as_bytes(), what)
        .with_context(|| format!("sending {what}"))
}

/// Receives one [`Terms`] message (at most 1 MiB); `what` names it in errors.
pub fn recv_params(conn: &mut OobConn, what: &str) -> Result<Terms> {
    let raw = conn.recv_msg(1 << 20, what)?;
    Terms::decode(&raw).map_err(|detail| {
        OobError::Malformed {
            what: what.into(),
            detail,
        }
        .into()
    })
}

/// Swaps [`Terms`] with the peer, the client first (as [`exchange`] does), narrating both.
pub fn exchange_params(
    conn: &mut OobConn,
    role: &Role,
    mine: &Terms,
    n: &Narrator,
) -> Result<Terms> {
    n.say(format!("our parameters:   {mine}"));
    let theirs = if role.is_server() {
        let t = recv_params(conn, "the client's test parameters")?;
        send_params(conn, mine, "our parameters")?;
        t
    } else {
        send_params(conn, mine, "our parameters")?;
        recv_params(conn, "the server's parameters")?
    };
    n.say(format!("their parameters: {theirs}"));
    Ok(theirs)
}

/// Lesson 02's RC QP as the lessons from 03 on use it: both queues on `cq`, one SGE per
/// request, no inline data, every request signaled only if it says so (`sq_sig_all` off).
pub fn create_rc_qp(pd: &Pd, cq: &Cq, max_send_wr: u32, max_recv_wr: u32) -> Result<Qp> {
    create_rc_qp_inline(pd, cq, max_send_wr, max_recv_wr, 0)
}

/// [`create_rc_qp`] asking for room for `max_inline_data` bytes of inline data in each send
/// request (lesson 14; the device may grant more, `qp.caps()` says what it granted).
pub fn create_rc_qp_inline(
    pd: &Pd,
    cq: &Cq,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_inline_data: u32,
) -> Result<Qp> {
    pd.create_qp(&QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        qp_type: QpType::Rc,
        caps: QpCaps {
            max_send_wr,
            max_recv_wr,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data,
        },
        sq_sig_all: false,
    })
    .context("ibv_create_qp")
}

/// A server takes the client's test, but refuses a flag it was given explicitly with another
/// value (`ours`) than the client's: "the client uses -s 8192 but this server was started with
/// -s 4096: give both the same, or none to the server".
pub fn same_as_client<T: PartialEq + fmt::Display>(
    flag: &str,
    ours: Option<T>,
    client: T,
) -> Result<()> {
    if let Some(o) = ours.filter(|o| *o != client) {
        bail!(
            "the client uses {flag} {client} but this server was started with {flag} {o}: give \
             both the same, or none to the server"
        );
    }
    Ok(())
}

/// The connection attributes of lesson 03 for this side: our port and GID index, the `-u`
/// timeout, and a path MTU no larger than our active MTU nor the peer's (when it told us).
pub fn connect_opts(
    args: &CommonArgs,
    dev: &Device,
    peer_mtu: Option<verbs_lab::verbs::Mtu>,
) -> verbs_lab::connect::ConnectOpts {
    let ours = dev.active_mtu();
    verbs_lab::connect::ConnectOpts {
        port_num: args.ib_port,
        sgid_index: dev.gid.entry.index as u8,
        path_mtu: peer_mtu.map_or(ours, |p| p.min(ours)),
        timeout: args.qp_timeout,
        // 6, not 7: on rxe a retry count of 7 never runs out (see RETRY_CNT).
        retry_cnt: verbs_lab::connect::RETRY_CNT,
        ..Default::default()
    }
}

/// The start every two-sided lesson from 05 on shares: the out-of-band connection
/// ([`oob_connect`]), then our test parameters `mine` swapped with the peer's
/// ([`exchange_params`], narrated). `mine` carries `mtu=` ([`Device::active_mtu`]) for
/// [`connect_qp`]. Returns the connection and the peer's parameters.
pub fn meet(args: &CommonArgs, mine: &Terms, n: &Narrator) -> Result<(OobConn, Terms)> {
    let mut conn = oob_connect(args, n)?;
    let theirs = exchange_params(&mut conn, &args.role(), mine, n)?;
    Ok((conn, theirs))
}

/// Lesson 03's bring-up, INIT -> RTR -> RTS (`bring_up`), with [`connect_opts`]: the path MTU
/// no larger than ours nor the peer's `mtu=` in `theirs`, and `access` as the QP's
/// `qp_access_flags` — what the peer may do to our memory through this QP. Returns the
/// attributes it used, for the lesson to narrate.
pub fn connect_qp(
    args: &CommonArgs,
    dev: &Device,
    qp: &Qp,
    ep: &Endpoint,
    peer: &PeerInfo,
    theirs: &Terms,
    access: verbs_lab::verbs::AccessFlags,
) -> Result<verbs_lab::connect::ConnectOpts> {
    let mut opts = connect_opts(args, dev, Some(theirs.get("mtu")?));
    opts.access = access;
    verbs_lab::connect::bring_up(qp, ep, &peer.ep, &opts).context("connecting the QP")?;
    Ok(opts)
}

/// The barrier after connecting (lesson 03): neither side posts a request before the peer's QP
/// has reached RTS, or its first packets could reach a QP not yet able to take them, and be
/// dropped.
pub fn peer_rts_barrier(conn: &mut OobConn) -> Result<()> {
    conn.barrier("the peer's QP to reach RTS")
        .context("synchronising after connecting")
}

/// Narrates a memory region the way lessons 05 and 06 do after `pd.reg_mr(len, access)`:
/// `ibv_reg_mr: LEN bytes at ADDR, access FLAGS: lkey K, rkey R`.
pub fn say_mr(n: &Narrator, mr: &Mr, access: verbs_lab::verbs::AccessFlags) {
    n.say(format!(
        "ibv_reg_mr: {} bytes at {:#x}, access {access}: lkey {:#x}, rkey {:#x}",
        mr.len(),
        mr.addr(),
        mr.lkey(),
        mr.rkey()
    ));
}

/// What one side of lessons 05 and 06 works with once connected: its buffer, QP and CQ, the
/// out-of-band connection to the peer, the `--wait` bound of every wait, and the narrator.
pub struct Side<'a> {
    pub mr: &'a Mr,
    pub qp: &'a Qp,
    pub cq: &'a Cq,
    pub conn: &'a mut OobConn,
    pub wait: Duration,
    pub n: &'a Narrator,
}

impl<'a> Side<'a> {
    pub fn new(
        mr: &'a Mr,
        qp: &'a Qp,
        cq: &'a Cq,
        conn: &'a mut OobConn,
        wait: Duration,
        n: &'a Narrator,
    ) -> Side<'a> {
        Side {
            mr,
            qp,
            cq,
            conn,
            wait,
            n,
        }
    }
}

/// Waits up to `wait` for one completion on `cq` and checks its status (`Cq::poll_one`). When
/// the wait expires, the error also says what the device says: `qp`'s state and the counters
/// of our port that moved since `since` (`verbs_lab::diag`), so that "timed out" is never the
/// whole story.
pub fn poll_one_explained(
    cq: &Cq,
    qp: &Qp,
    since: &PortCounters,
    wait: Duration,
    what: &str,
) -> Result<WorkCompletion> {
    match cq.poll_one(wait, what) {
        Err(e @ VerbsError::Timeout { .. }) => {
            Err(anyhow::anyhow!("{e}; {}", device_report(Some(qp), since)))
        }
        r => Ok(r?),
    }
}

/// Parses a size with an optional binary suffix: `4096`, `64K`, `1M` (for `-s`).
pub fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1usize << 10),
        Some((i, 'm' | 'M')) => (&t[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|v| v.checked_mul(mult))
        .ok_or_else(|| format!("'{s}' is not a size (bytes, or with K/M/G: 4096, 64K, 1M)"))
}

#[cfg(test)]
mod lessons_05_08_tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn a_server_flag_must_match_the_client_or_be_absent() {
        assert!(same_as_client("-s", None, 4096).is_ok());
        assert!(same_as_client("-s", Some(4096), 4096).is_ok());
        let e = same_as_client("-s", Some(4096), 8192)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "the client uses -s 8192 but this server was started with -s 4096: give both the \
             same, or none to the server"
        );
    }

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        c: CommonArgs,
    }

    #[test]
    fn params_round_trip_and_name_bad_keys() {
        let p = Terms::new().with("size", 4096).with("notify", "imm");
        assert_eq!(p.encode(), "size=4096 notify=imm");
        let q = Terms::decode(p.encode().as_bytes()).unwrap();
        assert_eq!(q, p);
        assert_eq!(q.get::<usize>("size").unwrap(), 4096);
        assert!(q
            .get::<u32>("iters")
            .unwrap_err()
            .to_string()
            .contains("'iters'"));
        assert!(q
            .get::<u32>("notify")
            .unwrap_err()
            .to_string()
            .contains("notify=imm"));
        assert!(Terms::decode(b"size").unwrap_err().contains("key=value"));
        assert!(Terms::decode(b"a=b=c").is_err());
    }

    #[test]
    fn common_flags_are_checked_without_a_device() {
        let ok = T::parse_from(["x", "-g", "1"]);
        assert!(ok.c.check().is_ok());
        let e = T::parse_from(["x", "-g", "300"]).c.check().unwrap_err();
        assert!(e.to_string().contains("GID index"), "{e}");
        assert!(T::parse_from(["x", "-u", "32"]).c.check().is_err());
        assert!(T::parse_from(["x", "--wait", "0"]).c.check().is_err());
        assert!(T::parse_from(["x", "-i", "0"]).c.check().is_err());
    }

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert!(parse_size("x").is_err());
        assert!(parse_size("-1").is_err());
    }
}

/// The `main` of every lesson but 10, 13 and 15 (which start workers or choose a role
/// first): parse the flags (`verbs_lab::cli::parse`), refuse what `check`
/// refuses before any verbs call (a usage error, exit 2, [`usage_error`]), then `run` with what
/// `check` returned; an error from `run` is reported by [`report_error`] (exit 1).
pub fn lesson_main<A: clap::Parser, T>(
    program: &str,
    check: impl FnOnce(&A) -> Result<T>,
    run: impl FnOnce(&A, T) -> Result<()>,
) -> std::process::ExitCode {
    let args: A = verbs_lab::cli::parse();
    let checked = check(&args).unwrap_or_else(|e| usage_error::<A>(&e));
    match run(&args, checked) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => report_error(program, &e),
    }
}

/// Ends the program the way clap ends it for a bad flag — `error: MESSAGE`, the usage line,
/// exit status 2 — for refusals found after parsing but before any verbs call.
pub fn usage_error<P: clap::CommandFactory>(e: &anyhow::Error) -> ! {
    P::command()
        .error(clap::error::ErrorKind::ValueValidation, format!("{e:#}"))
        .exit()
}
