//! What every lesson shares: the command line, narration, opening a device, and the exchange of
//! endpoints with the peer. What a lesson *teaches* stays in its own `main.rs`; this file holds
//! only what earlier lessons already taught.

use std::fmt;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use verbs_lab::connect::Endpoint;
use verbs_lab::oob::{self, OobConn, OobError};
use verbs_lab::verbs::{Context, DeviceList, Gid, GidChoice, PortAttr, RemoteBuf};

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

/// Opens the device named by `-d` (or the first), queries the port and chooses the GID, as
/// lesson 01 taught. Narrates what it found.
pub fn open_device(args: &CommonArgs, n: &Narrator) -> Result<Device> {
    let ctx = DeviceList::open(args.ib_dev.as_deref()).context("opening the RDMA device")?;
    let port = ctx
        .query_port(args.ib_port)
        .with_context(|| format!("ibv_query_port on {} port {}", ctx.name(), args.ib_port))?;
    if port.state != verbs_lab::verbs::PortState::ACTIVE {
        bail!(
            "{} port {} is {}, not ACTIVE: check the link (rdma link show) before running",
            ctx.name(),
            args.ib_port,
            port.state
        );
    }
    let gid = ctx
        .choose_gid(args.ib_port, args.gid_idx)
        .context("choosing a GID")?;
    n.say(format!(
        "opened {} port {} ({}, active MTU {}, {})",
        ctx.name(),
        args.ib_port,
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

/// Prints an error chain the way every lesson does and returns the exit code 1.
pub fn report_error(program: &str, e: &anyhow::Error) -> std::process::ExitCode {
    eprintln!("{program}: error: {e:#}");
    std::process::ExitCode::FAILURE
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
}
