//! # Lesson 17 — the fabric: flows, spines, polarization, incast
//!
//! Lesson 16's ring crossed the fabric between the hosts. This lesson looks at that fabric from
//! the switches: the cluster's leaf-spine (`scripts/softroce-vm cluster`: node1 and node2 on
//! leaf1, node3 and node4 on leaf2, two spines), read with the switches' own counters
//! (`ssh fabric vl-fabric counters`), while `vl_write_bw` runs between the nodes over ssh. It
//! runs on node1 and drives the others:
//!
//! 1. **The fabric**: the leaves' ECMP route to the other leaf, over both spines, and the hash
//!    that picks one (`fib_multipath_hash_policy=1`: source and destination address and port).
//! 2. **One QP is one flow**: its packets all carry one UDP source port (rxe derives it from the
//!    QP number), so they all take one spine.
//! 3. **Many QPs spread**: 16 QPs, 16 source ports, both spines.
//! 4. **Polarization**: with each leaf1-spine cable slowed to `--rate`, two QPs (node1→node3)
//!    that hash onto the same spine share one cable and halve each other; on different spines
//!    each has a cable. Rounds with fresh QPs (fresh source ports) until both cases were seen.
//! 5. **Incast**: node2, node3 and node4 write to node1 at once, through node1's one cable
//!    (slowed to `--rate`): the switch's queue toward node1 fills, drops, and RC retransmits.
//! 6. **PFC, ECN, DCQCN**: what a RoCE NIC has to keep such a fabric lossless and fair, and
//!    what rxe has of it — read from its counters and its packets' ECN field.
//!
//! ```text
//! lesson17_fabric                 # on node1 of a 4-node leaf-spine cluster
//! lesson17_fabric --rounds 2 -q   # at most two polarization rounds, results only
//! ```

#![forbid(unsafe_code)]

use std::process::{Child, Command, ExitCode, Stdio};
use std::thread;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use verbs_lab_lessons::{outln, parse_args, until_stdout_closes, Narrator};

#[derive(Parser, Debug)]
#[command(about = "Lesson 17: the leaf-spine fabric — flows, spines, polarization, incast")]
struct Args {
    /// Polarization rounds (step 4) at most, each with two fresh QPs, 1 to 12; the step ends
    /// once it has seen both QPs on one spine and on two.
    #[arg(long, default_value_t = 8, value_parser = rounds())]
    rounds: u32,
    /// The slowed cables' rate in Mbit/s (steps 4 and 5), 2 to 100.
    #[arg(long, default_value_t = 10, value_parser = rate())]
    rate: u32,
    /// Print nothing but the results.
    #[arg(short, long)]
    quiet: bool,
}

fn rounds() -> verbs_lab::cli::WholeRange<u32> {
    verbs_lab::cli::WholeRange::new(1..=12, "each round takes a few seconds")
}

fn rate() -> verbs_lab::cli::WholeRange<u32> {
    verbs_lab::cli::WholeRange::new(
        2..=100,
        "slow enough that the cable, not the emulated CPUs, limits a flow",
    )
}

/// The options of every vl_write_bw here: rxe0, 64 KiB writes, a 4.3 s ACK timeout (`-u 20`):
/// a slowed cable's queue holds up to 1000 packets of 4 KiB, 3.3 s at 10 Mbit/s, and a shorter
/// timeout would retransmit what is only waiting in it.
const WRITE_BW: &str = "vl_write_bw -d rxe0 -u 20 -s 65536";
/// The ports of the flows' out-of-band connections.
const PORT: u16 = 18700;

fn main() -> ExitCode {
    let args: Args = parse_args("lesson17_fabric");
    until_stdout_closes(|| match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => verbs_lab_lessons::report_error("lesson17_fabric", &e),
    })
}

fn run(args: &Args) -> Result<()> {
    let say = Narrator { quiet: args.quiet };
    let topo = sh("fabric", "vl-fabric topology").context(
        "asking the fabric guest: run this lesson on node1 of `scripts/softroce-vm cluster`",
    )?;
    if topo.trim() != "leaf-spine" {
        bail!(
            "this fabric is {}: start the cluster with --topology leaf-spine",
            topo.trim()
        );
    }
    // Every cable as it was, whatever happens below.
    let _restore = Restore;

    // [1] The fabric and its ECMP route.
    say.step(
        1,
        "The fabric: two leaves, two spines, an ECMP route over both",
    );
    let route = sh(
        "fabric",
        "/usr/sbin/ip netns exec leaf1 /usr/sbin/ip route show 192.168.82.0/24",
    )?;
    for l in route.lines() {
        say.say(format!("leaf1: {}", l.trim()));
    }
    let policy = sh(
        "fabric",
        "/usr/sbin/ip netns exec leaf1 cat /proc/sys/net/ipv4/fib_multipath_hash_policy",
    )?;
    say.say(format!(
        "fib_multipath_hash_policy = {} (1: the hash takes addresses, protocol and ports: RoCE \
         v2's UDP source port picks the spine)",
        policy.trim()
    ));

    // [2] One QP: one flow, one spine.
    say.step(2, "One QP, node1 → node3: one UDP source port, one spine");
    let (bw, spread, _) = measured(&[("node1", "node3", "-q 1 -n 100")])?;
    say.say(format!("{}; {:.2} MiB/s", spread.describe(), bw[0]));
    let one = spread.share();

    // [3] Sixteen QPs: sixteen flows, both spines.
    say.step(
        3,
        "Sixteen QPs, node1 → node3: sixteen source ports, both spines",
    );
    let (bw, spread, _) = measured(&[("node1", "node3", "-q 16 -n 16")])?;
    say.say(format!("{}; {:.2} MiB/s", spread.describe(), bw[0]));
    let many = spread.share();

    // [4] Polarization: two flows, one spine or two.
    let cable = f64::from(args.rate) * 1e6 / 8.0 / (1u64 << 20) as f64;
    say.step(
        4,
        &format!(
            "Polarization: leaf1's cables to both spines slowed to {} Mbit/s ({cable:.2} MiB/s); \
             two QPs node1 → node3, fresh ones each round",
            args.rate
        ),
    );
    for l in ["leaf1-spine1", "leaf1-spine2"] {
        sh(
            "fabric",
            &format!("vl-fabric netem {l} rate {}mbit", args.rate),
        )?;
    }
    let (mut same, mut apart) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        // Two QPs of one process: two flows that start and end together.
        let (bw, spread, _) = measured(&[("node1", "node3", "-q 2 -n 40 -t 8")])?;
        let one_spine = spread.share() > 0.9 || spread.share() < 0.1;
        say.say(format!(
            "round {round}: {} → {}: the two QPs together {:.2} MiB/s",
            spread.describe(),
            if one_spine {
                "both on one spine, one cable shared"
            } else {
                "one on each spine, a cable each"
            },
            bw[0]
        ));
        if one_spine {
            same.push(bw[0]);
        } else {
            apart.push(bw[0]);
        }
        if !same.is_empty() && !apart.is_empty() {
            break;
        }
    }
    if let (Some(s), Some(a)) = (same.first(), apart.first()) {
        // About half: the shared cable was the limit. Far from half: something else was too
        // (the emulated CPUs, a cable not slowed enough).
        let meaning = if (0.4..=0.65).contains(&(s / a)) {
            "each QP half of what the fabric had for it"
        } else {
            "not half: something besides the cables limited them"
        };
        say.say(format!(
            "on one spine the two QPs together got {s:.2} MiB/s, {:.0}% of the {a:.2} that two \
             spines gave them: {meaning}",
            100.0 * s / a
        ));
    }
    for l in ["leaf1-spine1", "leaf1-spine2"] {
        sh("fabric", &format!("vl-fabric netem {l} clear"))?;
    }

    // [5] Incast: three senders, one receiver, one cable.
    say.step(
        5,
        &format!(
            "Incast: node2, node3 and node4 write to node1 at once; node1's cable slowed to {} \
             Mbit/s ({cable:.2} MiB/s)",
            args.rate
        ),
    );
    sh(
        "fabric",
        &format!("vl-fabric netem node1 rate {}mbit", args.rate),
    )?;
    let retries = |n: &str| rxe_counter(n, "completer_retry_err");
    let before: Vec<u64> = ["node2", "node3", "node4"]
        .iter()
        .map(|n| retries(n))
        .collect::<Result<_>>()?;
    let drops_before = qdisc_drops()?;
    let (bw, _, wall) = measured(&[
        ("node2", "node1", "-q 1 -n 40 -t 128"),
        ("node3", "node1", "-q 1 -n 40 -t 128"),
        ("node4", "node1", "-q 1 -n 40 -t 128"),
    ])?;
    let drops = qdisc_drops()? - drops_before;
    let after: Vec<u64> = ["node2", "node3", "node4"]
        .iter()
        .map(|n| retries(n))
        .collect::<Result<_>>()?;
    sh("fabric", "vl-fabric netem node1 clear")?;
    // 3 × 40 writes of 64 KiB; the wall clock includes starting the processes, so this is a
    // lower bound of the cable's rate while they ran.
    let sum = 3.0 * 40.0 * 65536.0 / (1u64 << 20) as f64 / wall.as_secs_f64();
    // Each sender's rate is over its own run; the three overlap only as far as their starts
    // (over ssh) allow.
    let third = bw.iter().all(|b| (0.25..=0.42).contains(&(b / cable)));
    say.say(format!(
        "each sender by its own clock: node2 {:.2}, node3 {:.2}, node4 {:.2} MiB/s — {}",
        bw[0],
        bw[1],
        bw[2],
        if third {
            "about a third of the cable each while all three ran"
        } else {
            "not a third each: they did not all run at once the whole time (their starts differ)"
        }
    ));
    say.say(format!(
        "all 7.5 MiB arrived in {:.1} s from the first start to the last end: {sum:.2} MiB/s, \
         no more than the one cable's {cable:.2}",
        wall.as_secs_f64()
    ));
    say.say(format!(
        "leaf1's queue toward node1 dropped {drops} packets; the senders' rxe retransmitted \
         (completer_retry_err) {}, {}, {} times",
        after[0] - before[0],
        after[1] - before[1],
        after[2] - before[2]
    ));

    // [6] PFC, ECN, DCQCN: what rxe has of them.
    say.step(6, "PFC, ECN and DCQCN: what rxe has of them");
    let counters = sh("node1", "ls /sys/class/infiniband/rxe0/ports/1/hw_counters")?;
    let names: Vec<&str> = counters.split_whitespace().collect();
    say.say(format!("rxe0's counters: {}", names.join(" ")));
    let congestion: Vec<&&str> = names
        .iter()
        .filter(|n| n.contains("cnp") || n.contains("ecn"))
        .collect();
    say.say(format!(
        "counters of ECN marks or CNPs: {}",
        if congestion.is_empty() {
            "none (an mlx5 port has np_ecn_marked_roce_packets, np_cnp_sent, rp_cnp_handled)"
                .to_string()
        } else {
            format!("{congestion:?}")
        }
    ));
    let ecn = sh(
        "node1",
        "ls /sys/class/net/eth0/ecn 2>/dev/null || echo absent",
    )?;
    say.say(format!(
        "/sys/class/net/eth0/ecn (mlx5's DCQCN switches: roce_np, roce_rp): {}",
        ecn.trim()
    ));
    // Are rxe's packets ECN-capable? netem's `ecn` marks an ECN-capable packet CE where it
    // would drop it, and drops one that is not: if node1 still sees packets missing, they were
    // dropped, so they were Not-ECT.
    sh(
        "fabric",
        "/usr/sbin/ip netns exec leaf1 /usr/sbin/tc qdisc replace dev node1 root netem loss 2% ecn",
    )?;
    let gaps = |n: &str| rxe_counter(n, "out_of_seq_request");
    let (g0, r0) = (gaps("node1")?, retries("node2")?);
    measured(&[("node2", "node1", "-q 1 -n 40")])?;
    let (g1, r1) = (gaps("node1")?, retries("node2")?);
    sh("fabric", "vl-fabric netem node1 clear")?;
    let verdict = if g1 > g0 || r1 > r0 {
        "the packets were dropped, not marked: rxe sends them Not-ECT"
    } else {
        "no packet went missing: they were marked CE (ECN-capable), or the loss missed them all"
    };
    say.say(format!(
        "node1's cable with `netem loss 2% ecn` (CE-mark what is ECN-capable, drop the rest), \
         40 writes node2 → node1: node1 saw {} packets out of sequence, node2 retransmitted \
         {} times — {verdict}",
        g1 - g0,
        r1 - r0
    ));
    say.say(
        "so: every loss above was recovered by retransmission alone — no pause frame held the \
         senders back (no PFC), no CE mark reached a receiver, no CNP went back, no rate was cut \
         (no DCQCN)",
    );

    outln!(
        "\nfabric: 1 QP spine1 share {one:.2}; 16 QPs spine1 share {many:.2}; polarization \
         rounds: {} on one spine (together {}), {} apart (together {}) MiB/s; incast {sum:.2} \
         MiB/s through a {cable:.2} MiB/s cable, {drops} drops",
        same.len(),
        list(&same),
        apart.len(),
        list(&apart)
    );
    Ok(())
}

/// "1.10 1.12" or "-".
fn list(v: &[f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every slowed cable back to full speed (on the way out, also after an error).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        for l in ["leaf1-spine1", "leaf1-spine2", "node1"] {
            let _ = sh("fabric", &format!("vl-fabric netem {l} clear"));
        }
    }
}

/// Runs `cmd` on `node` (ssh; node1 itself through sh) and returns its output; a non-zero exit
/// is an error that shows what it printed.
fn sh(node: &str, cmd: &str) -> Result<String> {
    let out = spawn(node, cmd)?
        .wait_with_output()
        .with_context(|| format!("waiting for `{cmd}` on {node}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "`{cmd}` on {node} failed ({}): {}{}",
            out.status,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(text)
}

fn spawn(node: &str, cmd: &str) -> Result<Child> {
    let this = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let mut c = if this.trim() == node {
        let mut c = Command::new("sh");
        c.args(["-c", cmd]);
        c
    } else {
        let mut c = Command::new("ssh");
        c.args([node, cmd]);
        c
    };
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting `{cmd}` on {node}"))
}

/// Packets the spines sent toward leaf2 — the data of node1's writes to node3, not the ACKs
/// coming back: (spine1, spine2).
fn spines() -> Result<(u64, u64)> {
    let out = sh("fabric", "vl-fabric counters spine1:leaf2 spine2:leaf2")?;
    let (mut a, mut b) = (0, 0);
    for l in out.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let tx: u64 = f
            .get(3)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("a counters line: {l}"))?;
        match f[0] {
            "spine1" => a += tx,
            _ => b += tx,
        }
    }
    Ok((a, b))
}

/// What the spines carried during a measurement.
struct Spread {
    spine1: u64,
    spine2: u64,
}

impl Spread {
    fn share(&self) -> f64 {
        self.spine1 as f64 / (self.spine1 + self.spine2).max(1) as f64
    }

    fn describe(&self) -> String {
        format!(
            "spine1 {} packets, spine2 {} ({:.0}% on spine1)",
            self.spine1,
            self.spine2,
            100.0 * self.share()
        )
    }
}

/// Runs the flows (client node, server node, options) at once, each a vl_write_bw server on
/// its server node and a client on its client node, and returns each client's average MiB/s,
/// what the spines carried toward leaf2 meanwhile, and the wall-clock time from starting the
/// first server to the last client's end.
fn measured(flows: &[(&str, &str, &str)]) -> Result<(Vec<f64>, Spread, Duration)> {
    let before = spines()?;
    let start = std::time::Instant::now();
    let mut servers = Vec::new();
    for (i, (_, server, opts)) in flows.iter().enumerate() {
        let port = PORT + i as u16;
        servers.push(spawn(server, &format!("exec {WRITE_BW} {opts} -p {port}"))?);
    }
    // The clients wait up to 60 s for their servers to listen.
    let clients: Vec<Child> = flows
        .iter()
        .enumerate()
        .map(|(i, (client, server, opts))| {
            let port = PORT + i as u16;
            spawn(
                client,
                &format!("exec {WRITE_BW} {opts} -p {port} --wait 60 {server}"),
            )
        })
        .collect::<Result<_>>()?;
    let mut bw = Vec::new();
    for (c, (client, server, _)) in clients.into_iter().zip(flows) {
        let out = c.wait_with_output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            bail!(
                "vl_write_bw {client} → {server} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        bw.push(average_mib(&text).with_context(|| {
            format!("no result line in vl_write_bw's output {client} → {server}: {text}")
        })?);
    }
    let wall = start.elapsed();
    for s in servers {
        let out = s.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "a vl_write_bw server failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    // Let the counters settle: the last ACKs cross after the client's result.
    thread::sleep(Duration::from_millis(200));
    let after = spines()?;
    Ok((
        bw,
        Spread {
            spine1: after.0 - before.0,
            spine2: after.1 - before.1,
        },
        wall,
    ))
}

/// The average bandwidth, MiB/s, of vl_write_bw's result line (`#bytes #iterations BW peak BW
/// average MsgRate`).
fn average_mib(text: &str) -> Option<f64> {
    text.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 5 && f[0].parse::<u64>().is_ok())
            .then(|| f[3].parse::<f64>().ok())
            .flatten()
    })
}

/// One of rxe0's hardware counters on `node`.
fn rxe_counter(node: &str, name: &str) -> Result<u64> {
    let v = sh(
        node,
        &format!("cat /sys/class/infiniband/rxe0/ports/1/hw_counters/{name}"),
    )?;
    v.trim()
        .parse()
        .with_context(|| format!("{name} on {node}: {v:?}"))
}

/// Packets leaf1's queue toward node1 dropped so far (tc -s qdisc).
fn qdisc_drops() -> Result<u64> {
    let out = sh(
        "fabric",
        "/usr/sbin/ip netns exec leaf1 /usr/sbin/tc -s qdisc show dev node1",
    )?;
    Ok(out
        .split_whitespace()
        .skip_while(|w| *w != "dropped")
        .nth(1)
        .and_then(|v| v.trim_end_matches(',').parse().ok())
        .unwrap_or(0))
}
