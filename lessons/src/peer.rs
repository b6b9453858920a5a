//! Meeting the peer out of band (lesson 03): the TCP connection, the endpoint record each side
//! sends ([`PeerInfo`]), and the barrier after connecting.

use anyhow::{Context as _, Result};
use verbs_lab::connect::Endpoint;
use verbs_lab::oob::{self, OobConn, OobError};
use verbs_lab::verbs::{Gid, Qp, RemoteBuf};

use crate::{exchange_params, CommonArgs, Device, Narrator, Role, Terms};

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
            oob::connect_noting(&host, args.port, args.wait(), |why| {
                n.say(format!("{why} (--wait)"))
            })
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

/// The start every two-sided lesson from 05 on shares: the out-of-band connection
/// ([`oob_connect`]), then our test parameters `mine` swapped with the peer's
/// ([`exchange_params`], narrated). `mine` carries `mtu=` ([`Device::active_mtu`]) for
/// [`connect_qp`](crate::connect_qp). Returns the connection and the peer's parameters.
pub fn meet(args: &CommonArgs, mine: &Terms, n: &Narrator) -> Result<(OobConn, Terms)> {
    let mut conn = oob_connect(args, n)?;
    let theirs = exchange_params(&mut conn, &args.role(), mine, n)?;
    Ok((conn, theirs))
}

/// The barrier after connecting (lesson 03): neither side posts a request before the peer's QP
/// has reached RTS, or its first packets could reach a QP not yet able to take them, and be
/// dropped.
pub fn peer_rts_barrier(conn: &mut OobConn) -> Result<()> {
    conn.barrier("the peer's QP to reach RTS")
        .context("synchronising after connecting")
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
}
