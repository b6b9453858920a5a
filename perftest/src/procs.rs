//! `--procs N`: a bandwidth test run by N worker processes, started together and summed.
//!
//! The tool's process becomes a *coordinator*: it creates its message queues
//! (`verbs_lab::mq`, POSIX message queues), re-executes itself N times with the hidden flags
//! `--vl-worker I --vl-queue NAME`, and never opens a device. Worker I is an ordinary run of the
//! engine ([`run_tool`]) with three differences: its TCP port is the base port + I, it pins
//! itself to its own CPU ([`worker_cpu`]: NIC-local first, else one allowed CPU per process),
//! and once its QPs are connected to its peer worker it reports `Hello` (pid, CPU) and `Ready`
//! and waits for the coordinator's `Go`. The coordinator sends `Go` to all once all are Ready;
//! each worker then does the engine's own barrier with its peer and measures. Both sides must
//! give the same N: the number of processes is one of the parameters each worker pair compares
//! in its HELLO, so a mismatch is refused by the server's parameter check.
//!
//! Results come back as [`WorkerReport`]s — the worker's pid, its run header (with its CPU) and
//! its rows — in a small strict versioned encoding ([`WorkerReport::encode`]), cut into chunks
//! that fit a `Msg::Result` ([`chunks`], [`Assembler`]). The coordinator reports each process
//! and their sum ([`aggregate`]: bandwidths and message rates add up, the elapsed time is the
//! longest) in every output format; the gates check the sum.
//!
//! Faults: a worker that exits before it has sent everything, sends an `Error`, or stays silent
//! past a deadline is named (index, pid, CPU); the coordinator then stops the others (`Abort`,
//! then SIGKILL) and fails. Deadlines: `--wait` + 30 s to get every worker Ready; in duration
//! mode `-D` + `--wait` + 30 s after Go; once one worker has finished, the others get the longer
//! of `--wait` and the time it took; a worker seen stopped (SIGSTOP) for `--wait` is stalled.
//! (A lone worker of an iteration-mode run that hangs while running is left to the engine's own
//! completion and peer timeouts.) The queues are removed on every exit path: by their owner's
//! drop, and on SIGINT/SIGTERM/SIGHUP by [`mq::install_cleanup_on_signals`]. A worker whose
//! coordinator dies exits within 100 ms (it watches its parent), so its peer fails at once too.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context as _, Result};
use nix::sys::signal::Signal;
use nix::unistd::{getppid, Pid};
use verbs_lab::affinity::{self, CpuChoice, CpuList};
use verbs_lab::mq::{self, Msg, Queue};

use crate::output::{OutputArgs, Reporter};
use crate::params::{Config, Params, RunMode, Tool, WorkerOf, MAX_PROCS};
use crate::result::{BwRow, Metric, ProcessResult, Rows, RunInfo, RunResult, TestKind};
use crate::run::{run_tool, RowSink};

// ---------------------------------------------------------------------------------------------
// Parameters and CPUs

/// Checks `--procs` and the hidden worker flags; returns this process's TCP port (the base
/// port + the worker index) and which worker it is, if one.
pub fn check_params(tool: Tool, p: &Params) -> Result<(u16, Option<WorkerOf>), String> {
    let Some(n) = p.procs else {
        if p.worker.is_some() {
            return Err("--vl-worker is internal to --procs runs and needs --procs".into());
        }
        return Ok((p.port, None));
    };
    if tool.metric == Metric::Lat {
        return Err(format!(
            "--procs {n}: {} measures latency with one ping-pong; several processes are for the \
             bandwidth tools (e.g. vl_{}_bw --procs {n})",
            tool.name(),
            tool.kind.short()
        ));
    }
    if n == 0 {
        return Err("--procs 0: at least one process is needed".into());
    }
    if n > MAX_PROCS {
        return Err(format!("--procs {n}: at most {MAX_PROCS} processes"));
    }
    let last = u32::from(p.port) + n - 1;
    if last > u32::from(u16::MAX) {
        return Err(format!(
            "--procs {n} with -p {}: the processes use TCP ports {}..{last}, beyond 65535; \
             lower -p",
            p.port, p.port
        ));
    }
    let worker = match (p.worker, &p.worker_queue) {
        (None, None) => None,
        (Some(index), Some(queue)) if index < n => Some(WorkerOf {
            index,
            queue: queue.clone(),
        }),
        (Some(index), Some(_)) => {
            return Err(format!(
                "--vl-worker {index}: workers are numbered 0..{} for --procs {n}",
                n - 1
            ))
        }
        _ => return Err("--vl-worker and --vl-queue go together (internal to --procs)".into()),
    };
    // In range: index < n and p.port + n - 1 <= 65535.
    let port = p.port + worker.as_ref().map_or(0, |w| w.index as u16);
    Ok((port, worker))
}

/// The CPU of worker `index` on device `dev`: [`affinity::cpu_choice`] (the `--cpu` list, else
/// the NIC-local CPUs); when that does not pin (a virtual NIC such as rxe has no locality), the
/// `index`-th CPU this process may use, so the workers still get a core each.
pub fn worker_cpu(
    dev: &str,
    requested: Option<&CpuList>,
    index: u32,
) -> Result<Option<(usize, String)>, String> {
    let choice = affinity::cpu_choice(dev, requested, index as usize)?;
    let allowed =
        affinity::allowed_cpus().map_err(|e| format!("cannot read the CPU affinity: {e}"))?;
    Ok(pick_worker_cpu(choice, &allowed, index))
}

/// [`worker_cpu`] without the machine: the choice made, the allowed CPUs, the index.
pub fn pick_worker_cpu(
    choice: CpuChoice,
    allowed: &CpuList,
    index: u32,
) -> Option<(usize, String)> {
    match choice {
        CpuChoice::Pin { cpu, why } => Some((cpu, why)),
        CpuChoice::DontPin { why } if !allowed.is_empty() => {
            let n = allowed.len();
            let i = index as usize;
            let shared = if i >= n {
                format!(", shared: process {i} wraps around {n} CPUs")
            } else {
                String::new()
            };
            Some((
                allowed.cpus()[i % n],
                format!("one per process among the allowed CPUs {allowed}{shared}; {why}"),
            ))
        }
        CpuChoice::DontPin { .. } => None,
    }
}

// ---------------------------------------------------------------------------------------------
// The result payload

/// The first bytes of an encoded [`WorkerReport`].
pub const REPORT_MAGIC: [u8; 4] = *b"VLPR";
/// The encoding version this build writes and the only one it reads.
pub const REPORT_VERSION: u8 = 1;
/// Bytes of one encoded [`BwRow`].
const ROW_LEN: usize = 48;

/// What a worker sends back: its pid, its run's header (with the CPU it ran on) and its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerReport {
    pub pid: u32,
    pub info: RunInfo,
    pub rows: Vec<BwRow>,
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn bool(&mut self, v: bool) {
        self.0.push(v.into());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.u64(v.to_bits());
    }
    fn str(&mut self, s: &str) -> Result<(), String> {
        let n = u16::try_from(s.len())
            .map_err(|_| format!("a text of {} bytes is over 65535", s.len()))?;
        self.0.extend_from_slice(&n.to_be_bytes());
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
    fn strs(&mut self, v: &[String]) -> Result<(), String> {
        self.u32(v.len() as u32);
        v.iter().try_for_each(|s| self.str(s))
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        let Some(end) = end else {
            return Err(format!(
                "truncated: {what} needs {n} bytes at offset {}, {} left",
                self.at,
                self.b.len() - self.at
            ));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }
    fn bool(&mut self, what: &str) -> Result<bool, String> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(format!("{what}: {v} is not a boolean (0 or 1)")),
        }
    }
    fn u32(&mut self, what: &str) -> Result<u32, String> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes(b.try_into().expect("4 bytes")))
    }
    fn u64(&mut self, what: &str) -> Result<u64, String> {
        let b = self.take(8, what)?;
        Ok(u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }
    fn f64(&mut self, what: &str) -> Result<f64, String> {
        self.u64(what).map(f64::from_bits)
    }
    fn str(&mut self, what: &str) -> Result<String, String> {
        let b = self.take(2, what)?;
        let n = u16::from_be_bytes([b[0], b[1]]) as usize;
        let t = self.take(n, what)?;
        String::from_utf8(t.to_vec()).map_err(|_| format!("{what}: not UTF-8"))
    }
    fn strs(&mut self, what: &str) -> Result<Vec<String>, String> {
        let n = self.u32(what)? as usize;
        // Each string costs at least its 2-byte length: refuse a count the bytes cannot hold.
        if n > (self.b.len() - self.at) / 2 {
            return Err(format!("{what}: a count of {n} exceeds the bytes left"));
        }
        (0..n).map(|_| self.str(what)).collect()
    }
    fn tag(&mut self, what: &str) -> Result<bool, String> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(format!("{what}: option tag {v} is neither 0 nor 1")),
        }
    }
}

fn test_code(t: TestKind) -> u8 {
    match t {
        TestKind::Write => 1,
        TestKind::Read => 2,
        TestKind::Send => 3,
        TestKind::Atomic => 4,
    }
}

impl WorkerReport {
    /// The wire form (big-endian): magic `VLPR`, version, pid, the rows (count, then bytes,
    /// iterations, peak, average, message rate as IEEE-754 bits, elapsed ns), then every field
    /// of the header in declaration order (texts as a 16-bit length and UTF-8, options as a
    /// 0/1 tag and the value). Fails only on a text longer than 65535 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let mut w = Writer(Vec::with_capacity(512 + self.rows.len() * ROW_LEN));
        w.0.extend_from_slice(&REPORT_MAGIC);
        w.u8(REPORT_VERSION);
        w.u32(self.pid);
        w.u32(self.rows.len() as u32);
        for r in &self.rows {
            w.u64(r.bytes);
            w.u64(r.iterations);
            w.f64(r.peak_bps);
            w.f64(r.avg_bps);
            w.f64(r.msg_rate_mpps);
            w.u64(u64::try_from(r.elapsed.as_nanos()).unwrap_or(u64::MAX));
        }
        let i = &self.info;
        w.str(&i.tool)?;
        w.str(&i.version)?;
        w.u8(test_code(i.test));
        w.u8(match i.metric {
            Metric::Bw => 1,
            Metric::Lat => 2,
        });
        w.str(&i.role)?;
        w.str(&i.conn_type)?;
        w.str(&i.device)?;
        w.u8(i.ib_port);
        w.str(&i.link_layer)?;
        w.u32(i.gid_index);
        w.str(&i.gid)?;
        w.str(&i.remote_gid)?;
        for v in [
            i.mtu,
            i.qps,
            i.tx_depth,
            i.rx_depth,
            i.post_list,
            i.cq_moderation,
            i.max_inline,
            i.outstanding_reads,
        ] {
            w.u32(v);
        }
        w.bool(i.atomic_type.is_some());
        if let Some(a) = &i.atomic_type {
            w.str(a)?;
        }
        w.bool(i.bidirectional);
        w.bool(i.use_events);
        w.bool(i.duration.is_some());
        if let Some(d) = i.duration {
            w.u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        }
        w.u64(i.iterations);
        w.u64(i.warmup_iterations);
        w.bool(i.cpu.is_some());
        if let Some((cpu, why)) = &i.cpu {
            w.u32(u32::try_from(*cpu).map_err(|_| format!("CPU {cpu} is out of range"))?);
            w.str(why)?;
        }
        w.bool(i.report_gbits);
        w.u8(i.qp_timeout);
        w.strs(&i.local_endpoints)?;
        w.strs(&i.remote_endpoints)?;
        Ok(w.0)
    }

    /// Parses exactly one encoded report: a wrong magic or version, a truncation, trailing
    /// bytes, a bad tag or boolean, or text that is not UTF-8 is refused with the reason.
    pub fn decode(b: &[u8]) -> Result<WorkerReport, String> {
        let mut r = Reader { b, at: 0 };
        let magic = r.take(4, "the magic")?;
        if magic != REPORT_MAGIC {
            return Err(format!(
                "bad magic {magic:02x?} (expected \"VLPR\"): not a worker report"
            ));
        }
        let version = r.u8("the version")?;
        if version != REPORT_VERSION {
            return Err(format!(
                "report version {version} is not understood by this build (it reads version \
                 {REPORT_VERSION}): are the workers the same build as the coordinator?"
            ));
        }
        let pid = r.u32("the pid")?;
        let nrows = r.u32("the row count")? as usize;
        if nrows > (b.len() - r.at) / ROW_LEN {
            return Err(format!(
                "truncated: {nrows} rows announced, the bytes left hold fewer"
            ));
        }
        let mut rows = Vec::with_capacity(nrows);
        for _ in 0..nrows {
            rows.push(BwRow {
                bytes: r.u64("a row's bytes")?,
                iterations: r.u64("a row's iterations")?,
                peak_bps: r.f64("a row's peak")?,
                avg_bps: r.f64("a row's average")?,
                msg_rate_mpps: r.f64("a row's message rate")?,
                elapsed: Duration::from_nanos(r.u64("a row's elapsed time")?),
            });
        }
        let tool = r.str("tool")?;
        let version = r.str("version")?;
        let test = match r.u8("test")? {
            1 => TestKind::Write,
            2 => TestKind::Read,
            3 => TestKind::Send,
            4 => TestKind::Atomic,
            v => return Err(format!("test: unknown code {v}")),
        };
        let metric = match r.u8("metric")? {
            1 => Metric::Bw,
            2 => Metric::Lat,
            v => return Err(format!("metric: unknown code {v}")),
        };
        let role = r.str("role")?;
        let conn_type = r.str("connection type")?;
        let device = r.str("device")?;
        let ib_port = r.u8("ib port")?;
        let link_layer = r.str("link layer")?;
        let gid_index = r.u32("GID index")?;
        let gid = r.str("GID")?;
        let remote_gid = r.str("remote GID")?;
        let mut n = [0u32; 8];
        for v in n.iter_mut() {
            *v = r.u32("a queue setting")?;
        }
        let atomic_type = if r.tag("atomic type")? {
            Some(r.str("atomic type")?)
        } else {
            None
        };
        let bidirectional = r.bool("bidirectional")?;
        let use_events = r.bool("events")?;
        let duration = if r.tag("duration")? {
            Some(Duration::from_nanos(r.u64("duration")?))
        } else {
            None
        };
        let iterations = r.u64("iterations")?;
        let warmup_iterations = r.u64("warm-up iterations")?;
        let cpu = if r.tag("cpu")? {
            Some((r.u32("cpu")? as usize, r.str("cpu reason")?))
        } else {
            None
        };
        let report_gbits = r.bool("report_gbits")?;
        let qp_timeout = r.u8("qp timeout")?;
        let local_endpoints = r.strs("local endpoints")?;
        let remote_endpoints = r.strs("remote endpoints")?;
        if r.at != b.len() {
            return Err(format!(
                "{} bytes after the end of the report",
                b.len() - r.at
            ));
        }
        Ok(WorkerReport {
            pid,
            rows,
            info: RunInfo {
                tool,
                version,
                test,
                metric,
                role,
                conn_type,
                device,
                ib_port,
                link_layer,
                gid_index,
                gid,
                remote_gid,
                mtu: n[0],
                qps: n[1],
                tx_depth: n[2],
                rx_depth: n[3],
                post_list: n[4],
                cq_moderation: n[5],
                max_inline: n[6],
                outstanding_reads: n[7],
                atomic_type,
                bidirectional,
                use_events,
                duration,
                iterations,
                warmup_iterations,
                cpu,
                report_gbits,
                qp_timeout,
                local_endpoints,
                remote_endpoints,
            },
        })
    }
}

/// Bytes of a chunk's header: its index and the number of chunks (u16 each, big-endian).
pub const CHUNK_HEADER: usize = 4;
/// Bytes of report a chunk carries at most: a chunk fills one `Msg::Result`.
pub const CHUNK_DATA: usize = mq::MAX_RESULT - CHUNK_HEADER;

/// Cuts an encoded report into `Msg::Result` payloads: `index, count` then up to
/// [`CHUNK_DATA`] bytes; at least one chunk. Fails beyond 65535 chunks (~470 MB).
pub fn chunks(blob: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let parts: Vec<&[u8]> = if blob.is_empty() {
        vec![blob]
    } else {
        blob.chunks(CHUNK_DATA).collect()
    };
    let count = u16::try_from(parts.len())
        .map_err(|_| format!("a report of {} bytes needs too many chunks", blob.len()))?;
    Ok(parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut c = Vec::with_capacity(CHUNK_HEADER + p.len());
            c.extend_from_slice(&(i as u16).to_be_bytes());
            c.extend_from_slice(&count.to_be_bytes());
            c.extend_from_slice(p);
            c
        })
        .collect())
}

/// Puts chunks back together, strictly in order.
#[derive(Debug, Default)]
pub struct Assembler {
    data: Vec<u8>,
    next: u16,
    count: Option<u16>,
}

impl Assembler {
    /// Takes the next chunk; returns the whole report once the last chunk arrived. A chunk out
    /// of order, a changed count, an empty middle chunk or a chunk after the last is refused.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Option<Vec<u8>>, String> {
        if chunk.len() < CHUNK_HEADER {
            return Err(format!(
                "a result chunk of {} bytes is shorter than its header",
                chunk.len()
            ));
        }
        let index = u16::from_be_bytes([chunk[0], chunk[1]]);
        let count = u16::from_be_bytes([chunk[2], chunk[3]]);
        if count == 0 {
            return Err("a result chunk announces 0 chunks".into());
        }
        match self.count {
            Some(c) if self.next >= c => {
                return Err(format!("result chunk {index} after the last of {c}"))
            }
            Some(c) if c != count => {
                return Err(format!(
                    "result chunk {index} announces {count} chunks, earlier ones {c}"
                ))
            }
            _ => {}
        }
        if index != self.next {
            return Err(format!(
                "result chunk {index} arrived, expected chunk {}",
                self.next
            ));
        }
        let data = &chunk[CHUNK_HEADER..];
        if index + 1 < count && data.len() != CHUNK_DATA {
            return Err(format!(
                "result chunk {index} of {count} carries {} bytes, not {CHUNK_DATA}",
                data.len()
            ));
        }
        self.count = Some(count);
        self.next += 1;
        self.data.extend_from_slice(data);
        Ok((self.next == count).then(|| std::mem::take(&mut self.data)))
    }
}

// ---------------------------------------------------------------------------------------------
// The sum

/// The totals of the processes, size by size: bandwidth (average and peak) and message rate
/// add up, the elapsed time is the longest. Iterations are per QP, as on every row: their mean
/// over the processes (in iteration mode every process's count). The peak sum is an upper
/// bound: the processes' peaks need not coincide. Every process must have measured the same
/// sizes.
pub fn aggregate(procs: &[ProcessResult]) -> Result<Vec<BwRow>, String> {
    let Some(first) = procs.first() else {
        return Ok(Vec::new());
    };
    for p in procs {
        if p.rows.len() != first.rows.len() {
            return Err(format!(
                "process {} measured {} sizes, process {} {}",
                p.process,
                p.rows.len(),
                first.process,
                first.rows.len()
            ));
        }
    }
    let n = procs.len() as u64;
    (0..first.rows.len())
        .map(|j| {
            let bytes = first.rows[j].bytes;
            let mut total = BwRow {
                bytes,
                iterations: 0,
                peak_bps: 0.0,
                avg_bps: 0.0,
                msg_rate_mpps: 0.0,
                elapsed: Duration::ZERO,
            };
            for p in procs {
                let r = &p.rows[j];
                if r.bytes != bytes {
                    return Err(format!(
                        "row {j}: process {} measured {} bytes, process {} {bytes}",
                        p.process, r.bytes, first.process
                    ));
                }
                total.iterations += r.iterations;
                total.peak_bps += r.peak_bps;
                total.avg_bps += r.avg_bps;
                total.msg_rate_mpps += r.msg_rate_mpps;
                total.elapsed = total.elapsed.max(r.elapsed);
            }
            total.iterations /= n;
            Ok(total)
        })
        .collect()
}

/// The header of the totals: the first process's, with the QPs of all (their count summed,
/// their endpoints listed in process order) and no single CPU (each process has its own).
pub fn aggregate_info(infos: &[&RunInfo]) -> Option<RunInfo> {
    let mut total = (*infos.first()?).clone();
    total.qps = infos.iter().map(|i| i.qps).sum();
    total.local_endpoints = infos
        .iter()
        .flat_map(|i| i.local_endpoints.clone())
        .collect();
    total.remote_endpoints = infos
        .iter()
        .flat_map(|i| i.remote_endpoints.clone())
        .collect();
    total.cpu = None;
    Some(total)
}

// ---------------------------------------------------------------------------------------------
// The worker

/// The queue of worker `w` of the coordinator whose queue is `base`.
fn worker_queue(base: &str, w: u32) -> String {
    format!("{base}-w{w}")
}

/// How long past `--wait` a worker may take to connect and set up before it is declared stuck.
const SETUP_SLACK: Duration = Duration::from_secs(30);

/// A worker process (`--vl-worker I --vl-queue NAME`): runs the engine, reports Ready when
/// connected, waits for Go, sends its report and Done. A failure is sent to the coordinator as
/// an `Error` (printed there); the exit status is 1.
pub fn worker_main(cfg: &Config) -> ExitCode {
    let w = cfg
        .worker
        .as_ref()
        .expect("worker_main runs with --vl-worker");
    let name = cfg.tool.name();
    let coord = match Queue::open(&w.queue) {
        Ok(q) => q,
        Err(e) => {
            eprintln!(
                "{name} worker {}: error: the coordinator's queue: {e}",
                w.index
            );
            return ExitCode::FAILURE;
        }
    };
    match worker(cfg, w, &coord) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Err(qe) = coord.send(&Msg::error(w.index, format!("{e:#}")), 1) {
                eprintln!(
                    "{name} worker {}: error: {e:#} (and the coordinator could not be told: {qe})",
                    w.index
                );
            }
            ExitCode::FAILURE
        }
    }
}

fn worker(cfg: &Config, w: &WorkerOf, coord: &Queue) -> Result<()> {
    let inbox = Queue::open(&worker_queue(&w.queue, w.index)).context("opening our queue")?;
    // A coordinator killed by a signal cannot stop us: notice that we were re-parented and
    // exit, so that our peer sees the connection close and fails at once too.
    let parent = getppid();
    let index = w.index;
    std::thread::Builder::new()
        .name("vl-procs-parent".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(100));
            if getppid() != parent {
                eprintln!("worker {index}: the coordinator (pid {parent}) is gone; exiting");
                std::process::exit(1);
            }
        })
        .context("starting the thread that watches the coordinator")?;
    let mut sink = WorkerSink {
        index: w.index,
        coord,
        inbox: &inbox,
        wait: cfg.wait + SETUP_SLACK,
        parent,
    };
    let result = run_tool(cfg, &mut sink)?;
    let rows = match result.rows {
        Rows::Bw(rows) => rows,
        Rows::Lat(_) => bail!("a latency run in a --procs worker"),
    };
    let report = WorkerReport {
        pid: std::process::id(),
        info: result.info,
        rows,
    };
    let blob = report.encode().map_err(anyhow::Error::msg)?;
    for payload in chunks(&blob).map_err(anyhow::Error::msg)? {
        coord
            .send(
                &Msg::Result {
                    worker: w.index,
                    payload,
                },
                0,
            )
            .context("sending the results")?;
    }
    coord
        .send(&Msg::Done { worker: w.index }, 0)
        .context("sending Done")?;
    Ok(())
}

/// The worker's hook into the run: Hello and Ready once connected, then wait for Go.
struct WorkerSink<'a> {
    index: u32,
    coord: &'a Queue,
    inbox: &'a Queue,
    wait: Duration,
    parent: Pid,
}

impl RowSink for WorkerSink<'_> {
    fn header(&mut self, _: &RunInfo) {}
    fn bw_row(&mut self, _: &RunInfo, _: &BwRow) {}
    fn lat_row(&mut self, _: &RunInfo, _: &crate::result::LatRow) {}

    fn connected(&mut self, info: &RunInfo) -> Result<()> {
        let hello = Msg::Hello {
            worker: self.index,
            pid: std::process::id(),
            cpu: info.cpu.as_ref().map(|(c, _)| *c as u32),
        };
        self.coord.send(&hello, 0).context("sending Hello")?;
        self.coord
            .send(&Msg::Ready { worker: self.index }, 0)
            .context("sending Ready")?;
        let deadline = Instant::now() + self.wait;
        loop {
            match self.inbox.recv_timeout(Duration::from_millis(100)) {
                Ok(Msg::Go { .. }) => return Ok(()),
                Ok(Msg::Abort { reason }) => bail!("aborted by the coordinator: {reason}"),
                Ok(other) => bail!("expected Go from the coordinator, got {other}"),
                Err(e) if e.is_timeout() => {}
                Err(e) => return Err(e).context("waiting for Go"),
            }
            if getppid() != self.parent {
                bail!("the coordinator (pid {}) is gone", self.parent);
            }
            if Instant::now() >= deadline {
                bail!(
                    "no Go from the coordinator within {} s (--wait + {} s)",
                    self.wait.as_secs(),
                    SETUP_SLACK.as_secs()
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The coordinator

/// One worker as the coordinator sees it.
struct Worker {
    id: u32,
    child: Child,
    inbox: Queue,
    cpu: Option<u32>,
    hello: bool,
    ready: bool,
    chunks: Assembler,
    report: Option<WorkerReport>,
    done: bool,
    exit: Option<ExitStatus>,
    /// Since when the process has been seen stopped (SIGSTOP, a debugger).
    stopped_since: Option<Instant>,
}

impl Worker {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// "worker 1 (pid 4242, CPU 1)".
    fn who(&self) -> String {
        let cpu = self
            .cpu
            .map_or_else(|| "CPU not chosen yet".to_string(), |c| format!("CPU {c}"));
        format!("worker {} (pid {}, {cpu})", self.id, self.pid())
    }

    fn finished(&self, phase: Phase) -> bool {
        match phase {
            Phase::Ready => self.hello && self.ready,
            Phase::Results => self.report.is_some() && self.done,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Ready,
    Results,
}

impl Phase {
    fn awaited(self) -> &'static str {
        match self {
            Phase::Ready => "Ready",
            Phase::Results => "results",
        }
    }
}

/// The workers of a run; whatever is still running when this is dropped is killed and reaped,
/// so no exit path of the coordinator leaves a worker behind.
struct Workers(Vec<Worker>);

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.0 {
            if w.exit.is_none() && !matches!(w.child.try_wait(), Ok(Some(_))) {
                let _ = w.child.kill();
                let _ = w.child.wait();
            }
        }
    }
}

/// The coordinator of `--procs N`: starts the workers, runs the barrier, collects and reports.
/// Exit codes as [`crate::run::main`].
pub fn coordinator_main(cfg: &Config, out: &OutputArgs) -> ExitCode {
    let name = cfg.tool.name();
    if let Err(e) = mq::install_cleanup_on_signals() {
        eprintln!("{name}: error: {e}");
        return ExitCode::FAILURE;
    }
    match coordinate(cfg) {
        Ok((total, procs)) => match Reporter::new(out).finish_procs(&total, &procs) {
            Ok(outcome) => outcome.exit_code(),
            Err(e) => {
                eprintln!("{name}: error: {e:#}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("{name}: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn coordinate(cfg: &Config) -> Result<(RunResult, Vec<ProcessResult>)> {
    let n = cfg.procs.context("coordinate() needs --procs")?;
    let base = format!("/vl-procs-{}", std::process::id());
    // The inbox carries every message, a full Result included; 10 is the default msg_max.
    let inbox = Queue::create(&base, 10, mq::MAX_MSG_LEN)
        .context("creating the coordinator's message queue (--procs)")?;
    // The workers run the very image this process runs: /proc/self/exe names our own inode
    // even if a rebuild has replaced (or is writing) the file at our path meanwhile.
    let exe = match std::path::Path::new("/proc/self/exe") {
        p if p.exists() => p.to_path_buf(),
        _ => std::env::current_exe().context("finding this program's path")?,
    };
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut ws = Workers(Vec::new());
    for i in 0..n {
        // A worker's inbox carries Go and Abort only: 2 small messages.
        let q = Queue::create(&worker_queue(&base, i), 2, mq::HEADER_LEN + mq::MAX_TEXT)
            .with_context(|| format!("creating worker {i}'s message queue (--procs)"))?;
        let child = Command::new(&exe)
            .args(&args)
            .args(["--vl-worker", &i.to_string(), "--vl-queue", &base])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting worker {i} ({})", exe.display()))?;
        ws.0.push(Worker {
            id: i,
            child,
            inbox: q,
            cpu: None,
            hello: false,
            ready: false,
            chunks: Assembler::default(),
            report: None,
            done: false,
            exit: None,
            stopped_since: None,
        });
    }
    let outcome = conduct(cfg, &inbox, &mut ws.0);
    if let Err(e) = &outcome {
        stop(&mut ws.0, &format!("{e:#}"), &cfg.tool.name());
    }
    let procs = outcome?;
    drop(ws);
    drop(inbox);
    let reports: Vec<&WorkerReport> = procs.iter().map(|(_, r)| r).collect();
    let infos: Vec<&RunInfo> = reports.iter().map(|r| &r.info).collect();
    let info = aggregate_info(&infos).context("no worker reported")?;
    let procs: Vec<ProcessResult> = procs
        .into_iter()
        .map(|(id, r)| ProcessResult {
            process: id,
            pid: r.pid,
            cpu: r.info.cpu,
            rows: r.rows,
        })
        .collect();
    let rows = aggregate(&procs).map_err(anyhow::Error::msg)?;
    Ok((
        RunResult {
            info,
            rows: Rows::Bw(rows),
        },
        procs,
    ))
}

/// Ready from all, Go to all, results from all; then every worker must exit 0.
fn conduct(cfg: &Config, inbox: &Queue, ws: &mut [Worker]) -> Result<Vec<(u32, WorkerReport)>> {
    let setup = Instant::now() + cfg.wait + SETUP_SLACK;
    collect(inbox, ws, Phase::Ready, |_| setup, cfg.wait + SETUP_SLACK)?;
    let go = Instant::now();
    for w in ws.iter() {
        w.inbox
            .send(&Msg::Go { start_at_ns: 0 }, 0)
            .with_context(|| format!("sending Go to {}", w.who()))?;
    }
    // In duration mode the run's length is known; otherwise once one worker has finished,
    // the others get the longer of --wait and the time it took.
    let bound = match cfg.mode {
        RunMode::Duration(d) => Some(go + d + cfg.wait + SETUP_SLACK),
        RunMode::Iters(_) => None,
    };
    let mut first_done: Option<Instant> = None;
    let wait = cfg.wait;
    collect(
        inbox,
        ws,
        Phase::Results,
        |ws: &[Worker]| {
            if first_done.is_none() && ws.iter().any(|w| w.finished(Phase::Results)) {
                first_done = Some(Instant::now());
            }
            let straggle = first_done.map(|t| t + wait.max(t - go));
            match (bound, straggle) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => Instant::now() + Duration::from_secs(3600),
            }
        },
        wait,
    )?;
    for w in ws.iter_mut() {
        let st = wait_exit(&mut w.child, Duration::from_secs(10))
            .with_context(|| format!("{} sent its results but did not exit", w.who()))?;
        w.exit = Some(st);
        ensure!(
            st.success(),
            "{} sent its results but then {}",
            w.who(),
            describe(st)
        );
    }
    Ok(ws
        .iter_mut()
        .map(|w| {
            (
                w.id,
                w.report.take().expect("collect() waited for every report"),
            )
        })
        .collect())
}

/// Receives until every worker finished `phase`. Whenever the queue has been empty for 100 ms,
/// looks at the processes: one that exited without finishing is named. `deadline` is asked
/// again on every turn (it may move as workers finish); `wait` is what the message quotes.
fn collect(
    inbox: &Queue,
    ws: &mut [Worker],
    phase: Phase,
    mut deadline: impl FnMut(&[Worker]) -> Instant,
    wait: Duration,
) -> Result<()> {
    let started = Instant::now();
    while !ws.iter().all(|w| w.finished(phase)) {
        match inbox.recv_timeout(Duration::from_millis(100)) {
            Ok(msg) => handle(msg, ws, phase)?,
            Err(e) if e.is_timeout() => {
                for i in 0..ws.len() {
                    if ws[i].finished(phase) {
                        continue;
                    }
                    if let Some(st) = ws[i].child.try_wait().context("waitpid")? {
                        ws[i].exit = Some(st);
                        // What it sent before exiting is in the queue now: take it first.
                        while let Ok((msg, _)) = inbox.try_recv() {
                            handle(msg, ws, phase)?;
                        }
                        let w = &ws[i];
                        if !w.finished(phase) {
                            bail!(
                                "{} {} before sending its {}",
                                w.who(),
                                describe(st),
                                phase.awaited()
                            );
                        }
                    } else if is_stopped(ws[i].pid()) {
                        let since = *ws[i].stopped_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= wait {
                            bail!(
                                "{} has been stopped (SIGSTOP or a debugger) for {} s (--wait) \
                                 without sending its {}: stalled",
                                ws[i].who(),
                                wait.as_secs(),
                                phase.awaited()
                            );
                        }
                    } else {
                        ws[i].stopped_since = None;
                    }
                }
            }
            Err(e) => return Err(e).context("receiving from the workers"),
        }
        if Instant::now() >= deadline(ws) {
            let late: Vec<String> = ws
                .iter()
                .filter(|w| !w.finished(phase))
                .map(Worker::who)
                .collect();
            bail!(
                "{} sent no {} within {:.0} s (--wait {} s); still running but silent: stalled?",
                late.join(", "),
                phase.awaited(),
                started.elapsed().as_secs_f64(),
                wait.as_secs()
            );
        }
    }
    Ok(())
}

fn handle(msg: Msg, ws: &mut [Worker], phase: Phase) -> Result<()> {
    let from = msg.sender();
    let Some(w) = ws.iter_mut().find(|w| w.id == from) else {
        bail!("a message from unknown sender {from}: {msg}");
    };
    match msg {
        Msg::Error { message, .. } => bail!("{} failed: {message}", w.who()),
        Msg::Hello { pid, cpu, .. } if phase == Phase::Ready && !w.hello => {
            ensure!(
                pid == w.pid(),
                "worker {from} says pid {pid}, but we started pid {}",
                w.pid()
            );
            w.cpu = cpu;
            w.hello = true;
        }
        Msg::Ready { .. } if phase == Phase::Ready && w.hello && !w.ready => w.ready = true,
        Msg::Result { payload, .. } if phase == Phase::Results && w.report.is_none() => {
            let who = w.who();
            let blob = w
                .chunks
                .push(&payload)
                .map_err(|e| anyhow!("{who}'s results: {e}"))?;
            if let Some(blob) = blob {
                let r = WorkerReport::decode(&blob).map_err(|e| anyhow!("{who}'s results: {e}"))?;
                ensure!(r.pid == w.pid(), "{who}'s results name pid {}", r.pid);
                w.report = Some(r);
            }
        }
        Msg::Done { .. } if phase == Phase::Results && w.report.is_some() => w.done = true,
        other => bail!("unexpected while waiting for {}: {other}", phase.awaited()),
    }
    Ok(())
}

/// Stops the workers after a failure: Abort to each one still running (it is read by a worker
/// waiting for Go), a moment to exit, then SIGKILL. Says what happened to each on stderr.
fn stop(ws: &mut [Worker], reason: &str, name: &str) {
    let live: Vec<usize> = (0..ws.len())
        .filter(|&i| ws[i].exit.is_none() && !matches!(ws[i].child.try_wait(), Ok(Some(_))))
        .collect();
    for &i in &live {
        let reason: String = reason.chars().take(500).collect();
        let _ = ws[i].inbox.try_send(&Msg::Abort { reason }, 10);
    }
    let deadline = Instant::now() + Duration::from_millis(500);
    for &i in &live {
        let left = deadline.saturating_duration_since(Instant::now());
        let w = &mut ws[i];
        let how = match wait_exit(&mut w.child, left) {
            Ok(st) => {
                w.exit = Some(st);
                describe(st)
            }
            Err(_) => {
                let _ = w.child.kill();
                match w.child.wait() {
                    Ok(st) => {
                        w.exit = Some(st);
                        format!("stopped: {}", describe(st))
                    }
                    Err(e) => format!("could not be reaped: {e}"),
                }
            }
        };
        eprintln!("{name}: note: {} {how}", w.who());
    }
}

/// True if process `pid` is stopped (state `T` or `t` in `/proc/PID/stat`).
fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let (_, rest) = s.rsplit_once(") ")?;
            rest.chars().next()
        })
        .is_some_and(|state| state == 'T' || state == 't')
}

/// Waits up to `wait` for the child to exit.
fn wait_exit(child: &mut Child, wait: Duration) -> Result<ExitStatus> {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(st) = child.try_wait().context("waitpid")? {
            return Ok(st);
        }
        if Instant::now() >= deadline {
            bail!("still running {:.1} s later", wait.as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// "exited with status 3", "was killed by SIGKILL".
pub fn describe(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => match Signal::try_from(s) {
            Ok(sig) => format!("was killed by {sig}"),
            Err(_) => format!("was killed by signal {s}"),
        },
        _ => format!("ended ({st})"),
    }
}
