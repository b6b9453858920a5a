//! # Lesson 15 — the capstone: a ring all-reduce over RDMA
//!
//! Data-parallel training ends every step with an all-reduce: every GPU holds a gradient, every
//! GPU needs their sum. NCCL does it on a ring, and so does this lesson — on the verbs of the
//! lessons before it, in `vl_coll`:
//!
//! 1. **Who am I?** Launchers hand each process its rank, the world size and rank 0's address
//!    (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` under torchrun). `--np N` plays the
//!    launcher on one machine: it starts N copies of this program. The master address is what
//!    NCCL's unique id carries: one rank makes the id (its bootstrap root's address) and the
//!    program hands it to every rank before `ncclCommInitRank`; here the launcher did that.
//! 2. **Bootstrap.** Every rank creates two RC QPs (one per neighbour) and registers receive
//!    slots; rank 0 listens at the master address, collects every rank's endpoint record and
//!    sends everyone the table — the gathering NCCL's bootstrap does inside `ncclCommInitRank`.
//!    Each rank connects its QPs (INIT → RTR → RTS, lesson 03).
//! 3. **The vector.** Rank r holds `count` small integers; the goal is their sum on every rank.
//! 4. **Reduce-scatter**, n−1 steps: at step s rank r sends chunk (r−1−s) mod n to its right
//!    neighbour with an RDMA WRITE WITH IMMEDIATE (lessons 05 and 04) into a slot the neighbour
//!    advertised, and adds the chunk (r−2−s) mod n arriving from its left into its own copy. After
//!    the last step rank r owns chunk r, fully summed.
//! 5. **All-gather**, n−1 more steps: the summed chunks travel once around the ring, copied
//!    instead of added.
//! 6. **The check** against the sum computed directly, and the bytes each rank sent:
//!    2(n−1)/n of the vector — the reason the ring is bandwidth-optimal.
//!
//! Rank 0 prints everything: the others send it what they saw (over the bootstrap's TCP
//! connections), so the narration comes out in order.
//!
//! ```text
//! lesson15_ring_allreduce --np 3 -d rxe0,rxe1          # 3 ranks, a vector of 7 elements
//! lesson15_ring_allreduce --np 4 -d rxe0,rxe1 --count 10
//! ```

#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::ffi::OsString;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use verbs_lab::wire::{Reader, WireError, Writer};
use verbs_lab_lessons::{outln, parse_args, until_stdout_closes, usage_error, Narrator};
use vl_coll::kernels::{load_value, store_value};
use vl_coll::schedule::{chunk, ring_offset, Action};
use vl_coll::{env, launch, Comm, CommOpts, DataType, RankFlags, RedOp};

#[derive(Parser, Debug)]
#[command(about = "Lesson 15: a ring all-reduce over RDMA, every step shown")]
struct Args {
    /// Start N ranks on this machine (3 or 4 make a good lesson).
    #[arg(long)]
    np: Option<u32>,
    /// This process's rank, when you launch each rank yourself (with --world-size and --master).
    #[arg(long)]
    rank: Option<u32>,
    /// The number of ranks (with --rank and --master).
    #[arg(long = "world-size")]
    world_size: Option<u32>,
    /// Rank among the ranks on this host (picks the device; default: counted at the rendezvous
    /// from the ranks' host names).
    #[arg(long = "local-rank")]
    local_rank: Option<u32>,
    /// Rank 0's address HOST:PORT (else MASTER_ADDR/MASTER_PORT).
    #[arg(long)]
    master: Option<String>,
    /// RDMA devices, comma-separated; local ranks take them round-robin.
    #[arg(short = 'd', long = "ib-dev", value_delimiter = ',')]
    devices: Vec<String>,
    /// Elements in the vector, 1 to 4096 (default 2 × ranks + 1: the chunks are not all the
    /// same size).
    #[arg(long, value_parser = count())]
    count: Option<usize>,
    /// Print nothing but errors and the verdict.
    #[arg(short, long)]
    quiet: bool,
}

/// The longest vector: the lesson prints every element of every rank at every step, and each
/// rank sends rank 0 its log of 2(n−1) vectors in one bootstrap message of at most 1 MiB, which
/// 4096 elements of 8 bytes keep to at 16 ranks (--np's most).
const MAX_COUNT: u64 = 4096;

fn count() -> verbs_lab::cli::WholeRange<usize> {
    verbs_lab::cli::WholeRange::new(
        1..=MAX_COUNT,
        "the lesson prints every element at every step, and each rank's log of them must fit \
         one 1 MiB bootstrap message (10 elements read best; vl_all_reduce_perf measures large \
         vectors)",
    )
}

/// What a rank saw after one message from its left: the step, the chunk, and its vector.
struct Seen {
    step: u32,
    chunk: u32,
    reduced: bool,
    vector: Vec<i64>,
}

fn main() -> ExitCode {
    let args: Args = parse_args("lesson15_ring_allreduce");
    if let Some(np) = args.np {
        // The ranks --np starts get --rank and the rest, and their launcher's pid.
        let a_rank_of_np = std::env::var_os(verbs_lab::workers::COORDINATOR_ENV).is_some();
        if !a_rank_of_np {
            // Step 1, the launcher's half: start the ranks and wait for them.
            if !(2..=16).contains(&np) {
                verbs_lab::eprintln_whole!(
                    "lesson15_ring_allreduce: error: --np {np}: give 2..16 ranks (3 or 4 read best)"
                );
                return ExitCode::from(2);
            }
            if args.rank.is_some()
                || args.world_size.is_some()
                || args.local_rank.is_some()
                || args.master.is_some()
            {
                verbs_lab::eprintln_whole!(
                    "lesson15_ring_allreduce: error: --np starts its own ranks: leave out \
                     --rank, --world-size, --local-rank and --master (they are for launching \
                     each rank yourself, without --np)"
                );
                return ExitCode::from(2);
            }
            let own: Vec<OsString> = std::env::args_os().skip(1).collect();
            let run = launch::LocalRun {
                tool: "lesson15_ring_allreduce",
                grace: Duration::from_secs(40),
                queues: false,
                owes_the_end: false,
            };
            let ranks = launch::run_local(np, &own, &run);
            return launch::Outcome::exit(ranks, "lesson15_ring_allreduce");
        }
        if let Err(e) = launch::child_setup(None) {
            verbs_lab::eprintln_whole!("lesson15_ring_allreduce: error: {e}");
            return ExitCode::from(2);
        }
    }
    // [1] Who am I? Flags first, then torchrun, Open MPI, MPICH, Slurm; two launchers whose
    // variables disagree are refused. A rank that cannot tell, or a world of one, is a bad
    // command line: refused before any verbs call.
    let flags = RankFlags {
        rank: args.rank,
        world_size: args.world_size,
        local_rank: args.local_rank,
        master: args.master.clone(),
    };
    let info = match env::from_env(&flags) {
        Ok(info) if info.world_size >= 2 => info,
        Ok(_) => usage_error::<Args>(
            "lesson15_ring_allreduce",
            &anyhow::anyhow!(
                "a ring needs at least 2 ranks: run with --np 3 (or under a launcher)"
            ),
        ),
        Err(e) => usage_error::<Args>("lesson15_ring_allreduce", &anyhow::Error::msg(e)),
    };
    until_stdout_closes(|| match run(&args, info) {
        Ok(()) => ExitCode::SUCCESS,
        // Rank 0 left at a closed `| head`: our failure is its echo, and --np ends quietly.
        Err(_) if launch::output_unread() => ExitCode::FAILURE,
        Err(e) => verbs_lab_lessons::report_error("lesson15_ring_allreduce", &e),
    })
}

fn run(args: &Args, info: env::RankInfo) -> Result<()> {
    let n = info.world_size as usize;
    let me = info.rank as usize;
    let say = Narrator {
        quiet: args.quiet || me != 0,
    };
    say.step(1, "Who am I? (what the launcher says)");
    say.say(format!(
        "rank {me} of {n}, {}, from {}",
        info.local_rank.map_or(
            "local rank counted at the rendezvous from the host names".into(),
            |l| format!("local rank {l}")
        ),
        info.launcher
    ));
    if let Some((h, p)) = &info.master {
        say.say(format!("rank 0 listens for the others at {h}:{p}"));
    }

    // [2] Bootstrap: QPs, slots, the endpoint table from rank 0, QPs connected to both sides.
    let count = args.count.unwrap_or(2 * n + 1);
    let t = DataType::I64;
    let bytes = count * t.size();
    let opts = CommOpts {
        devices: args.devices.clone(),
        max_bytes: bytes.max(8),
        // One slot holds a whole chunk here, so every chunk is one message: easy to follow.
        slot_bytes: bytes.max(8),
        nslots: 4,
        // What every rank must agree on: rank 0 compares it at the bootstrap and refuses a rank
        // started with another --count, naming both values (ranks with different vectors would
        // wait for pieces that never come). The type and the operator are fixed here.
        terms: vec![("--count".into(), count.to_string())],
        ..Default::default()
    };
    let mut comm = Comm::init(info, &opts).context("building the communicator")?;
    say.step(
        2,
        "Bootstrap: rank 0 collected every endpoint and sent this table",
    );
    // One line per rank; every column as wide as its widest cell, so that GIDs of either family
    // and QPNs of any size stay aligned.
    let header = [
        "rank",
        "host",
        "pid",
        "device",
        "GID",
        "left QPN",
        "right QPN",
        "slots (addr, rkey)",
    ];
    let rows: Vec<[String; 8]> = comm
        .table()
        .iter()
        .map(|r| {
            [
                r.rank.to_string(),
                r.host.to_string(),
                r.pid.to_string(),
                r.device.to_string(),
                r.gid.to_string(),
                format!("{:#08x}", r.left_qpn),
                format!("{:#08x}", r.right_qpn),
                format!("{:#x}, {:#x}", r.slots.addr, r.slots.rkey),
            ]
        })
        .collect();
    for line in aligned(&header, &rows) {
        say.say(line);
    }
    say.step(
        3,
        "The ring: each rank's right QP is connected to its right neighbour's left QP",
    );
    for r in comm.table() {
        let right = &comm.table()[ring_offset(r.rank as usize, n, 1)];
        say.say(format!(
            "rank {} QPN {:#08x}  ──RDMA WRITE WITH IMM──▶  rank {} QPN {:#08x}   (credits flow back)",
            r.rank, r.right_qpn, right.rank, right.left_qpn
        ));
    }

    // [4] The vector: rank r's element i is 10·(r+1) + i, so the sum is easy to check by eye.
    let value = |r: usize, i: usize| 10 * (r as i64 + 1) + i as i64;
    for i in 0..count {
        let mut b = [0u8; 8];
        store_value(t, value(me, i), &mut b);
        comm.write_output(i * 8, &b);
    }
    let chunks: Vec<String> = (0..n)
        .map(|c| {
            let r = chunk(count, n, c);
            format!("chunk {c} = elements {}..{}", r.start, r.end)
        })
        .collect();
    say.step(
        4,
        &format!(
            "The vectors: {count} elements in {n} chunks ({})",
            chunks.join(", ")
        ),
    );
    let inputs = gather_vector(&mut comm, count)?;
    if let Some(all) = &inputs {
        for (r, v) in all.iter().enumerate() {
            say.say(format!("rank {r}: {}", show(v, count, n)));
        }
    }

    // [5] The all-reduce, with every message recorded as it is applied.
    let seen: Rc<RefCell<Vec<Seen>>> = Rc::default();
    let log = seen.clone();
    comm.set_tracer(Some(Box::new(move |e| {
        log.borrow_mut().push(Seen {
            step: e.msg.piece.step as u32,
            chunk: e.msg.piece.chunk as u32,
            reduced: e.msg.action == Action::Reduce,
            vector: e
                .buffer
                .chunks_exact(8)
                .map(|b| load_value(DataType::I64, b).unwrap_or(i64::MIN))
                .collect(),
        });
    })));
    comm.all_reduce(t, RedOp::Sum, count, true)
        .context("the all-reduce")?;
    comm.set_tracer(None);
    let mut w = Writer::new();
    for s in seen.borrow().iter() {
        w.u32(s.step);
        w.u32(s.chunk);
        w.bool(s.reduced);
        for v in &s.vector {
            w.u64(*v as u64);
        }
    }
    let logs = comm.star().gather(&w.into_bytes())?;
    if let Some(logs) = logs {
        let parsed = logs
            .iter()
            .map(|b| parse_log(b, count))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(anyhow::Error::msg)?;
        // Each rank's vector as the narration goes: its input, then after each message.
        let mut now: Vec<Vec<i64>> = match &inputs {
            Some(all) => all.clone(),
            None => vec![Vec::new(); n],
        };
        for phase in [true, false] {
            say.step(
                if phase { 5 } else { 6 },
                if phase {
                    "Reduce-scatter: send a chunk right, add the one from the left"
                } else {
                    "All-gather: pass the summed chunks around, copying"
                },
            );
            for step in 0..n - 1 {
                say.say(format!("step {step}:"));
                for (r, log) in parsed.iter().enumerate() {
                    let left = ring_offset(r, n, -1);
                    // The schedule: what rank r sends right and receives from the left in this
                    // step (reduce-scatter: r−1−s and r−2−s; all-gather: r−s and r−1−s).
                    let (sent, got) = if phase {
                        (
                            ring_offset(r, n, -1 - step as isize),
                            ring_offset(r, n, -2 - step as isize),
                        )
                    } else {
                        (
                            ring_offset(r, n, -(step as isize)),
                            ring_offset(r, n, -1 - step as isize),
                        )
                    };
                    let empty = |c: usize| chunk(count, n, c).is_empty();
                    let send = if empty(sent) {
                        format!("sent nothing (chunk {sent} is empty)")
                    } else {
                        format!("sent chunk {sent} right")
                    };
                    // What arrived: the message the tracer saw, if any — an empty chunk travels
                    // in no message, and the vector stays as it was.
                    let arrived = log.iter().find(|s| {
                        s.reduced == phase
                            && s.step as usize == step + if phase { 0 } else { n - 1 }
                    });
                    let recv = match arrived {
                        Some(s) => {
                            now[r] = s.vector.clone();
                            format!(
                                "{} chunk {} from rank {left}",
                                if phase { "added" } else { "stored" },
                                s.chunk
                            )
                        }
                        None if empty(got) => {
                            format!("nothing from rank {left} (chunk {got} is empty)")
                        }
                        None => bail!("rank {r} received no chunk {got} in step {step}"),
                    };
                    say.say(format!(
                        "  rank {r}: {send}; {recv} → {}",
                        show(&now[r], count, n)
                    ));
                }
            }
            if phase {
                say.say("now rank r holds chunk r fully summed");
            }
        }
    }

    // [7] The check, on every rank; the verdict from rank 0.
    let want: Vec<i64> = (0..count)
        .map(|i| (0..n).map(|r| value(r, i)).sum())
        .collect();
    let got: Vec<i64> = comm
        .read_output(0..bytes)
        .chunks_exact(8)
        .map(|b| load_value(t, b).unwrap_or(i64::MIN))
        .collect();
    let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count() as u64;
    let all = comm.star().gather(&wrong.to_be_bytes())?;
    let total = match &all {
        Some(all) => all
            .iter()
            .map(|b| Reader::new(b).u64("a count").unwrap_or(u64::MAX))
            .sum::<u64>(),
        None => 0,
    };
    let verdict = comm.star().broadcast(&total.to_be_bytes())?;
    let total = u64::from_be_bytes(
        verdict
            .try_into()
            .map_err(|_| anyhow::anyhow!("a bad verdict"))?,
    );
    say.step(7, "The check");
    say.say(format!("expected on every rank: {}", show(&want, count, n)));
    let sent = 2 * (n - 1) * bytes / n;
    say.say(format!(
        "each rank sent about 2(n−1)/n × {bytes} B = {sent} B over RDMA, whatever n is: the ring \
         is bandwidth-optimal"
    ));
    comm.finish()?;
    if total != 0 {
        bail!("{total} elements are wrong over all ranks");
    }
    if me == 0 {
        outln!("\nall-reduce over {n} ranks: every element of every rank is right");
    }
    Ok(())
}

/// Rank 0 gets every rank's vector.
fn gather_vector(comm: &mut Comm, count: usize) -> Result<Option<Vec<Vec<i64>>>> {
    let mine = comm.read_output(0..count * 8);
    let all = comm.star().gather(&mine)?;
    Ok(all.map(|all| {
        all.iter()
            .map(|b| {
                b.chunks_exact(8)
                    .map(|c| load_value(DataType::I64, c).unwrap_or(i64::MIN))
                    .collect()
            })
            .collect()
    }))
}

fn parse_log(b: &[u8], count: usize) -> std::result::Result<Vec<Seen>, String> {
    let mut r = Reader::new(b);
    let mut v = Vec::new();
    while r.remaining() > 0 {
        v.push(read_seen(&mut r, count).map_err(|e| format!("a rank's log: {e}"))?);
    }
    Ok(v)
}

/// One step of a rank's log: the step, the chunk, whether it reduced, the vector after it.
fn read_seen(r: &mut Reader<'_>, count: usize) -> std::result::Result<Seen, WireError> {
    Ok(Seen {
        step: r.u32("step")?,
        chunk: r.u32("chunk")?,
        reduced: r.bool("reduced")?,
        vector: (0..count)
            .map(|_| r.u64("element").map(|x| x as i64))
            .collect::<std::result::Result<Vec<_>, _>>()?,
    })
}

/// `header` and `rows` as lines of columns padded to their widest cell; the first and third
/// columns (rank, pid) are numbers and align right.
fn aligned(header: &[&str; 8], rows: &[[String; 8]]) -> Vec<String> {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&width)
            .enumerate()
            .map(|(i, (c, &w))| match i {
                0 | 2 => format!("{c:>w$}"),
                _ => format!("{c:<w$}"),
            })
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    std::iter::once(line(header.to_vec()))
        .chain(
            rows.iter()
                .map(|r| line(r.iter().map(String::as_str).collect())),
        )
        .collect()
}

/// `[11 12 13 | 14 15 | 16 17]`: the vector with its chunks marked.
fn show(v: &[i64], count: usize, n: usize) -> String {
    let parts: Vec<String> = (0..n)
        .map(|c| {
            v[chunk(count, n, c)]
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    format!("[{}]", parts.join(" | "))
}
