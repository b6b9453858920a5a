//! Least privilege, asserted for every role: each side registers each region, and sets its QPs'
//! access flags, with only what its traffic needs — the peer's one remote operation on the
//! destination slots when the peer initiates it, LOCAL_WRITE where this side's NIC writes,
//! nothing else. (That the tools run with exactly these rights is proved by the guest
//! scenarios: a missing right fails their traffic with IBV_WC_REM_ACCESS_ERR.)

use verbs_lab::verbs::AccessFlags;
use vl_perftest::conn::{rights, Rights};
use vl_perftest::measure::result::{Metric, TestKind};
use vl_perftest::params::{Config, Params, Tool};

fn config(tool: Tool, args: &str) -> Config {
    let argv = std::iter::once(tool.name()).chain(args.split_whitespace().map(String::from));
    let p = Params::try_parse_for(tool, argv).unwrap();
    Config::new(tool, &p).unwrap_or_else(|e| panic!("{} {args}: {e}", tool.name()))
}

const NONE: AccessFlags = AccessFlags::EMPTY;
const LW: AccessFlags = AccessFlags::LOCAL_WRITE;
const RW: AccessFlags = AccessFlags::REMOTE_WRITE;
const RR: AccessFlags = AccessFlags::REMOTE_READ;
const RA: AccessFlags = AccessFlags::REMOTE_ATOMIC;

fn r(src: AccessFlags, dst: AccessFlags, qp: AccessFlags) -> Rights {
    Rights { src, dst, qp }
}

fn or(a: AccessFlags, b: AccessFlags) -> AccessFlags {
    a | b
}

#[test]
fn every_role_gets_only_what_its_traffic_needs() {
    use Metric::{Bw, Lat};
    use TestKind::{Atomic, Read, Send, Write};
    // (tool, extra args, server's rights, client's rights)
    let table: Vec<(Tool, &str, Rights, Rights)> = vec![
        // The client writes into the server's destination; -b: both do.
        (
            Tool::new(Write, Bw),
            "",
            r(NONE, or(LW, RW), RW),
            r(NONE, NONE, NONE),
        ),
        (
            Tool::new(Write, Bw),
            "-b",
            r(NONE, or(LW, RW), RW),
            r(NONE, or(LW, RW), RW),
        ),
        // Ping-pong: both sides write into each other.
        (
            Tool::new(Write, Lat),
            "",
            r(NONE, or(LW, RW), RW),
            r(NONE, or(LW, RW), RW),
        ),
        // The client reads the server's destination into its own source slots.
        (Tool::new(Read, Bw), "", r(NONE, RR, RR), r(LW, NONE, NONE)),
        (Tool::new(Read, Bw), "-b", r(LW, RR, RR), r(LW, RR, RR)),
        (Tool::new(Read, Lat), "", r(NONE, RR, RR), r(LW, NONE, NONE)),
        // Sends: receive buffers need LOCAL_WRITE, nobody needs a remote right.
        (
            Tool::new(Send, Bw),
            "",
            r(NONE, LW, NONE),
            r(NONE, LW, NONE),
        ),
        (
            Tool::new(Send, Bw),
            "-b",
            r(NONE, LW, NONE),
            r(NONE, LW, NONE),
        ),
        (
            Tool::new(Send, Lat),
            "",
            r(NONE, LW, NONE),
            r(NONE, LW, NONE),
        ),
        // Atomics: the server's word takes the client's atomics; the old values land locally.
        (
            Tool::new(Atomic, Bw),
            "",
            r(NONE, or(LW, RA), RA),
            r(LW, NONE, NONE),
        ),
        (
            Tool::new(Atomic, Lat),
            "",
            r(NONE, or(LW, RA), RA),
            r(LW, NONE, NONE),
        ),
    ];
    for (tool, extra, server, client) in table {
        let s = rights(&config(tool, extra));
        let c = rights(&config(tool, &format!("{extra} 192.168.77.1")));
        assert_eq!(s, server, "{} {extra} (server)", tool.name());
        assert_eq!(c, client, "{} {extra} (client)", tool.name());
        for (side, x) in [("server", s), ("client", c)] {
            // ibv_reg_mr(3): remote write and atomics need LOCAL_WRITE.
            for m in [x.src, x.dst] {
                if m.contains(RW) || m.contains(RA) {
                    assert!(m.contains(LW), "{} {extra} {side}: {m}", tool.name());
                }
            }
            // The source slots are never exposed to the peer.
            assert!(
                !x.src.contains(RW) && !x.src.contains(RR) && !x.src.contains(RA),
                "{} {extra} {side}: source {}",
                tool.name(),
                x.src
            );
            // A QP grants at most one remote operation.
            assert!(
                [NONE, RW, RR, RA].contains(&x.qp),
                "{} {extra} {side}: QP {}",
                tool.name(),
                x.qp
            );
        }
    }
}
