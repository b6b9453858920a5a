//! A flow: one test between two hosts — a bandwidth run in one direction or a latency
//! ping-pong — run by the vl_* tools' own engine ([`vl_perftest::run::run_tool`], the same code as a
//! lone `vl_write_bw`), so the check measures what the tools measure and brings the QPs up the
//! one way they all do. The client connects over TCP to the server's host name at the flow's
//! port; the client's numbers are the flow's.
//!
//! Rank 0 hands each rank the flows it takes part in; a rank runs them step by step, the flows
//! of one step at once (one thread each), and reports its client flows' numbers.

use crate::RankRecord;
use verbs_lab::wire::{Reader, Width, WireError, Writer};

use super::args::{Args, Op};
use vl_perftest::measure::result::{Metric, Rows, TestKind};
use vl_perftest::params::{Config, Params, Tool};
use vl_perftest::run::{run_tool, NoSink};
use vl_perftest::signals::Control;

/// What a flow measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bandwidth from `src` to `dst`, MiB/s.
    Bw,
    /// Latency between `src` (the client) and `dst`, µs (t_typical).
    Lat,
}

/// One test of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Its index in the round (rank 0's list).
    pub id: u32,
    pub kind: Kind,
    pub src: u32,
    pub dst: u32,
    /// The flows of a rank run step by step; those of one step at once.
    pub step: u32,
    /// The server's TCP port.
    pub port: u16,
}

impl Flow {
    /// The rank that connects and measures: the sender of a write or send, the reader of a
    /// read (it pulls `src`'s bytes), the ping-pong's first side.
    pub fn client(&self, op: Op) -> u32 {
        match (self.kind, op) {
            (Kind::Bw, Op::Read) => self.dst,
            _ => self.src,
        }
    }

    /// The other end of the flow from `me`.
    pub fn peer_of(&self, me: u32) -> u32 {
        if self.src == me {
            self.dst
        } else {
            self.src
        }
    }

    pub fn server(&self, op: Op) -> u32 {
        if self.client(op) == self.src {
            self.dst
        } else {
            self.src
        }
    }

    fn encode(&self, w: &mut Writer) {
        w.u32(self.id);
        w.u8(match self.kind {
            Kind::Bw => 0,
            Kind::Lat => 1,
        });
        w.u32(self.src);
        w.u32(self.dst);
        w.u32(self.step);
        w.u16(self.port);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Flow, WireError> {
        Ok(Flow {
            id: r.u32("flow id")?,
            kind: match r.u8("flow kind")? {
                0 => Kind::Bw,
                1 => Kind::Lat,
                k => return Err(WireError::invalid("flow kind", format!("{k} is no kind"))),
            },
            src: r.u32("flow source")?,
            dst: r.u32("flow destination")?,
            step: r.u32("flow step")?,
            port: r.u16("flow port")?,
        })
    }
}

/// The bytes of a flow in a list.
const FLOW_BYTES: usize = 19;

pub fn encode_flows(flows: &[Flow]) -> Vec<u8> {
    let mut w = Writer::new();
    w.count(flows.len()).expect("a round's flows fit a u32");
    for f in flows {
        f.encode(&mut w);
    }
    w.into_bytes()
}

pub fn decode_flows(r: &mut Reader<'_>) -> Result<Vec<Flow>, WireError> {
    let n = r.count("flows", FLOW_BYTES)?;
    (0..n).map(|_| Flow::decode(r)).collect()
}

/// A client flow's outcome: its number, or why there is none.
pub type Outcome = (u32, Result<f64, String>);

pub fn encode_outcomes(out: &[Outcome]) -> Vec<u8> {
    let mut w = Writer::new();
    w.count(out.len()).expect("fits");
    for (id, r) in out {
        w.u32(*id);
        match r {
            Ok(x) => {
                w.u8(0);
                w.f64(*x);
            }
            Err(e) => {
                w.u8(1);
                w.text(Width::U32, verbs_lab::wire::clip(e, 4096))
                    .expect("clipped");
            }
        }
    }
    w.into_bytes()
}

pub fn decode_outcomes(r: &mut Reader<'_>) -> Result<Vec<Outcome>, WireError> {
    let n = r.count("outcomes", 5)?;
    (0..n)
        .map(|_| {
            let id = r.u32("outcome id")?;
            Ok(match r.u8("outcome tag")? {
                0 => (id, Ok(r.f64("outcome value")?)),
                _ => (
                    id,
                    Err(r.text(Width::U32, "outcome error", 4096)?.to_string()),
                ),
            })
        })
        .collect()
}

/// Runs this rank's `flows` (it is client or server of each), step by step, the flows of a
/// step at once; returns the outcome of each flow it is the client of, and the failures of
/// those it serves (a client that measured wins over its server's failure at rank 0). Once a
/// test with a peer failed, this rank's later flows with that peer are skipped, failed: they
/// would wait for the peer's bounds one by one.
pub fn run_flows(args: &Args, table: &[RankRecord], me: u32, flows: &[Flow]) -> Vec<Outcome> {
    let mut steps: Vec<u32> = flows.iter().map(|f| f.step).collect();
    steps.sort_unstable();
    steps.dedup();
    let mut out: Vec<Outcome> = Vec::new();
    let mut failed_with: Vec<u32> = Vec::new();
    for step in steps {
        let (skip, now): (Vec<&Flow>, Vec<&Flow>) = flows
            .iter()
            .filter(|f| f.step == step)
            .partition(|f| failed_with.contains(&f.peer_of(me)));
        for f in skip {
            let e = format!(
                "skipped: an earlier test of {} with {} failed",
                table[me as usize].host,
                table[f.peer_of(me) as usize].host
            );
            out.push((f.id, Err(e)));
        }
        let results: Vec<(&Flow, Result<f64, String>)> = std::thread::scope(|s| {
            let handles: Vec<_> = now
                .iter()
                .map(|f| (*f, s.spawn(move || run_one(args, table, me, f))))
                .collect();
            handles
                .into_iter()
                .map(|(f, h)| {
                    let r = h
                        .join()
                        .unwrap_or_else(|_| Err("the test's thread panicked".into()));
                    (f, r)
                })
                .collect()
        });
        for (f, r) in results {
            if r.is_err() {
                failed_with.push(f.peer_of(me));
            }
            if f.client(args.test) == me || r.is_err() {
                out.push((f.id, r));
            }
        }
    }
    out
}

/// One flow on this rank, as its client or its server: the client's number (a server's is
/// none of the check's: 0), or the failure.
fn run_one(args: &Args, table: &[RankRecord], me: u32, f: &Flow) -> Result<f64, String> {
    let client = f.client(args.test) == me;
    let peer = f.peer_of(me);
    let host = peer_address(&table[me as usize], &table[peer as usize]);
    let result = config(args, f, client.then_some(host.as_str()))
        .and_then(|cfg| {
            // The check's signals are the launcher's (a rank dies of them, its queues removed):
            // no signal reaches the flow's run, so its control is one that none is sent to.
            let unsignalled = Control::default();
            run_tool(&cfg, &unsignalled, &mut NoSink).map_err(|e| format!("{e:#}"))
        })
        .and_then(|r| match (client, r.rows) {
            (false, _) => Ok(0.0),
            (true, Rows::Bw(rows)) => rows
                .first()
                .map(|r| vl_perftest::measure::result::to_mib_per_sec(r.avg_bps))
                .ok_or_else(|| "the bandwidth test gave no row".to_string()),
            (true, Rows::Lat(rows)) => rows
                .first()
                .map(|r| r.stats.median_us)
                .filter(|x| x.is_finite())
                .ok_or_else(|| "the latency test gave no time".to_string()),
        });
    let who = |r: u32| format!("{} (rank {r})", table[r as usize].host);
    let role = if client { "client" } else { "server" };
    result.map_err(|e| format!("{} ({role}) with {}: {e}", who(me), who(peer)))
}

/// Where to reach `peer`'s pair tests: its host name, or the loopback address when it is on
/// this host (ranks of `--np`).
fn peer_address(me: &RankRecord, peer: &RankRecord) -> String {
    if me.host_hash == peer.host_hash {
        "127.0.0.1".into()
    } else {
        peer.host.clone()
    }
}

/// The tools' configuration of flow `f`: a client of `host` or its server.
pub fn config(args: &Args, f: &Flow, host: Option<&str>) -> Result<Config, String> {
    let kind = match args.test {
        Op::Write => TestKind::Write,
        Op::Read => TestKind::Read,
        Op::Send => TestKind::Send,
    };
    let metric = match f.kind {
        Kind::Bw => Metric::Bw,
        Kind::Lat => Metric::Lat,
    };
    let tool = Tool::new(kind, metric);
    let mut argv: Vec<String> = vec![tool.name()];
    let mut add = |flag: &str, v: String| {
        argv.push(flag.into());
        argv.push(v);
    };
    add("-p", f.port.to_string());
    add("--wait", args.wait.to_string());
    match f.kind {
        Kind::Bw => {
            add("-s", args.size.to_string());
            add("-n", args.iters.to_string());
            add("-q", args.qps.to_string());
        }
        Kind::Lat => add("-n", args.lat_iters.to_string()),
    }
    if let Some(d) = &args.device {
        add("-d", d.clone());
    }
    add("-i", args.launch.ib_port.to_string());
    if let Some(x) = args.launch.gid_index {
        add("-x", x.to_string());
    }
    if let Some(u) = args.qp_timeout {
        add("-u", u.to_string());
    }
    argv.extend(host.map(String::from));
    let p = Params::try_parse_for(tool, &argv).map_err(|e| {
        format!(
            "the pair test's options ({}): {}",
            argv.join(" "),
            e.to_string().lines().next().unwrap_or("")
        )
    })?;
    Config::new(tool, &p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn flows_and_outcomes_cross_the_wire_intact() {
        let flows = vec![
            Flow {
                id: 0,
                kind: Kind::Bw,
                src: 3,
                dst: 1,
                step: 0,
                port: 18515,
            },
            Flow {
                id: 7,
                kind: Kind::Lat,
                src: 1,
                dst: 3,
                step: 2,
                port: 18516,
            },
        ];
        let b = encode_flows(&flows);
        assert_eq!(b.len(), 4 + 2 * FLOW_BYTES);
        assert_eq!(decode_flows(&mut Reader::new(&b)).unwrap(), flows);
        let out = vec![(0, Ok(5.25)), (7, Err("peer gone".to_string()))];
        let b = encode_outcomes(&out);
        assert_eq!(decode_outcomes(&mut Reader::new(&b)).unwrap(), out);
        // A count the bytes cannot hold is refused before anything is allocated.
        assert!(decode_flows(&mut Reader::new(&[0, 0, 0, 9])).is_err());
    }

    #[test]
    fn the_reader_of_a_read_is_its_client_and_a_flows_options_are_the_tools() {
        let f = Flow {
            id: 0,
            kind: Kind::Bw,
            src: 2,
            dst: 5,
            step: 0,
            port: 18600,
        };
        assert_eq!((f.client(Op::Write), f.server(Op::Write)), (2, 5));
        assert_eq!((f.client(Op::Read), f.server(Op::Read)), (5, 2));
        let args =
            Args::try_parse_from("vl_fabric_check -s 4K -n 50 -d rxe0 -u 14 --wait 9".split(' '))
                .unwrap();
        let cfg = config(&args, &f, Some("node3")).unwrap();
        assert_eq!(cfg.peer.host.as_deref(), Some("node3"));
        assert_eq!(cfg.peer.port, 18600);
        assert_eq!(cfg.sizes.max(), 4096);
        assert!(!cfg.is_server());
        let server = config(&args, &f, None).unwrap();
        assert!(server.is_server());
    }
}
