//! `--serve --concurrent N`: a bandwidth server that serves up to N clients at once — incast,
//! many senders and one receiver — each with its own QPs and its own result row, and the sum
//! of those that ran together. (`--serve` alone, one client after another, is
//! [`crate::entry`]'s loop.)
//!
//! The main thread owns the listening port for the server's whole life and only accepts: each
//! connection gets a thread of its own (`serve_one`) that reads its HELLO (a stranger is
//! logged in one line and dropped, as without `--concurrent`), refuses it by name when its
//! parameters differ or when N clients are already running ("busy"), and otherwise runs a whole
//! run of the tool for it ([`crate::run::run_for_client`]): its own device context, PD, CQ,
//! memory and QPs, the usual checks and bounds. A client that fails, misbehaves or is killed
//! ends its own run only: its thread logs it and the others go on. The device's events are
//! told apart: a QP or CQ of one run in error fails that run (see [`crate::events`], which
//! records events per run); the port going down or the device failing ends the server, exit 1.
//!
//! Each completed client's report prints on stdout at once, whole, under a line
//! `# client I from ADDR:PORT`. When no accepted client is left running, the clients that ran
//! together since the server was last idle (a *wave*) get one `#total` row per size when two or
//! more of them completed ([`incast_sum`]): the total bytes they moved over the time at least
//! one of them was measuring (the union of their measurement intervals, on this machine's
//! clock). SIGINT or SIGTERM stop every run (each peer is told), and the server prints its
//! summary and exits 0.

use std::net::SocketAddr;
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use verbs_lab::fail::Fail;
use verbs_lab::oob::{Listener, OobConn, OobError};
use verbs_lab::workers::monotonic_ns_of;

use crate::conn::listen::{server_hello, Greeting, HELLO_WAIT};
use crate::engine::Pacer;
use crate::entry::Served;
use crate::measure::result::{BwRow, Metric, Rows, Span};
use crate::output::{OutputArgs, Reporter};
use crate::params::{Config, Params, Tool};
use crate::proto::Channel;
use crate::report::BwUnit;
use crate::run::{our_hello, run_for_client, NoSink};
use crate::signals::Control;

/// `--concurrent N` beside the other options: it needs `--serve`, a bandwidth tool, and a run
/// that each client ends by itself with one rdma_cm port per run.
pub fn check_concurrent(tool: Tool, p: &Params) -> Result<(), String> {
    let n = p.concurrent;
    if n == 1 {
        return Ok(());
    }
    if !p.serve {
        return Err(format!(
            "--concurrent {n} is an option of --serve (the server serves up to {n} clients at \
             once): give --serve too, on the server only"
        ));
    }
    if tool.metric == Metric::Lat {
        return Err(format!(
            "--concurrent {n} with {}: clients served at once would time each other's traffic \
             in every round trip; serve them one after another (--serve without --concurrent)",
            tool.name()
        ));
    }
    if p.rdma_cm {
        return Err(format!(
            "--concurrent {n} with -R: each run's rdma_cm listener takes port -p + 1, so only \
             one client at a time could connect; leave out -R or --concurrent"
        ));
    }
    if p.run_infinitely {
        return Err(format!(
            "--concurrent {n} with --run_infinitely: a run that never ends has no row to add \
             up; serve timed runs (-n or -D)"
        ));
    }
    Ok(())
}

/// How often the accepting thread looks at the signals and at the runs that ended.
const TICK: Duration = Duration::from_millis(200);

/// Connections whose HELLO is still being read, beyond the N clients: more are closed at once
/// (a port scan must not pile up threads).
const MAX_GREETING: usize = 16;

/// The server: the port, the board the runs report to, and their threads.
pub fn serve_concurrent(cfg: &Config, control: &Control, out: &OutputArgs) -> ExitCode {
    let name = cfg.tool.name();
    // The server's own faults first, as a single run meets them before it listens: the
    // device, its port and GID (each run opens its own context later), then the TCP port.
    if let Err(e) = crate::conn::device::open_device(cfg) {
        return Fail::from(e).exit(&name);
    }
    let listener = match Listener::bind_on(cfg.peer.bind, cfg.peer.port)
        .with_context(|| format!("listening for clients on TCP port {}", cfg.peer.port))
    {
        Ok(l) => l,
        Err(e) => return Fail::from(e).exit(&name),
    };
    Reporter::new(out).waiting_banner();
    let board = Arc::new(Mutex::new(Board::default()));
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    loop {
        let summary = lock(&board).served.summary();
        control.set_serve_summary(summary);
        threads.retain(|t| !t.is_finished());
        if let Some(i) = control.received() {
            // Every run was woken and tells its peer; wait for them, then the summary.
            threads.into_iter().for_each(|t| drop(t.join()));
            let b = lock(&board);
            verbs_lab::eprintln_whole!("{name}: --serve: {i}: {}", b.served.summary());
            return ExitCode::SUCCESS;
        }
        let fatal = lock(&board).server_fatal.clone();
        if let Some(why) = fatal {
            verbs_lab::eprintln_whole!(
                "{name}: --serve: {why}; ending the server after the runs under way"
            );
            threads.into_iter().for_each(|t| drop(t.join()));
            let b = lock(&board);
            verbs_lab::eprintln_whole!("{name}: --serve: {}", b.served.summary());
            return Fail::failed(why).exit(&name);
        }
        let conn = match listener.accept_conn(TICK, HELLO_WAIT) {
            Ok(c) => c,
            Err(OobError::Timeout { .. }) => continue,
            Err(e) => {
                // (Out of descriptors, say: the clients running go on; try again shortly.)
                verbs_lab::eprintln_whole!("{name}: --serve: accepting a connection: {e}");
                std::thread::sleep(TICK);
                continue;
            }
        };
        if threads.len() >= cfg.concurrent as usize + MAX_GREETING {
            verbs_lab::eprintln_whole!(
                "{name}: closed a connection from {} at once: {} connections are open already",
                conn.peer(),
                threads.len()
            );
            continue;
        }
        let (cfg, out, board) = (cfg.clone(), out.clone(), Arc::clone(&board));
        let control = control.clone();
        match std::thread::Builder::new()
            .name("client".into())
            .spawn(move || serve_one(&cfg, &control, conn, &out, &board))
        {
            Ok(t) => threads.push(t),
            Err(e) => verbs_lab::eprintln_whole!(
                "{name}: --serve: cannot start a thread for a client ({e}); its connection is \
                 closed"
            ),
        }
    }
}

fn lock(board: &Mutex<Board>) -> MutexGuard<'_, Board> {
    // A thread that panicked while holding the board left it usable (counters only).
    board.lock().unwrap_or_else(|p| p.into_inner())
}

/// What the runs of a concurrent server tell each other: counts, the running clients, the
/// wave of clients that ran together so far.
#[derive(Default)]
struct Board {
    /// Clients numbered so far (accepted or refused), 1, 2, ...
    numbered: u32,
    served: Served,
    /// Accepted clients whose run has not ended.
    running: u32,
    wave: Wave,
    /// A fault of the device or its port: the server ends.
    server_fatal: Option<String>,
}

/// The clients that ran since the server was last idle.
#[derive(Default)]
struct Wave {
    /// Client numbers, in the order accepted.
    clients: Vec<u32>,
    /// Completed clients' rows and measurement intervals.
    done: Vec<ClientRows>,
}

/// One completed client's rows, and when each was measured on this machine's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientRows {
    pub rows: Vec<BwRow>,
    pub spans: Vec<Span>,
}

/// Records when each size was measured (no barrier: the clients of an incast run each at
/// their own pace).
#[derive(Default)]
struct Intervals(Vec<Span>);

impl Pacer for Intervals {
    fn before_measure(&mut self, _: u64, _: &mut dyn FnMut() -> Result<()>) -> Result<Option<u64>> {
        Ok(None)
    }
    fn measured(&mut self, _: u64, start: Instant, end: Instant) {
        self.0.push(Span {
            start_ns: monotonic_ns_of(start),
            end_ns: monotonic_ns_of(end),
        });
    }
}

/// One connection, on its own thread: its HELLO, then its run, then its report.
fn serve_one(
    cfg: &Config,
    control: &Control,
    conn: OobConn,
    out: &OutputArgs,
    board: &Mutex<Board>,
) {
    let name = cfg.tool.name();
    let peer: SocketAddr = conn.peer();
    // A signal wakes this connection for as long as its thread lives, report included (the run
    // watches its socket only while it runs): the server then waits for the thread before its
    // summary, rather than exiting at once between the run's end and its report.
    let held = conn.as_fd().try_clone_to_owned();
    let _signals = held
        .as_ref()
        .ok()
        .map(|fd| control.watch_socket(fd.as_raw_fd()));
    let mut ch = Channel::new(conn, "client");
    let (mut index, mut admitted) = (0, false);
    // Numbered once its HELLO is one of ours; let in while fewer than N run.
    let admit = || {
        let mut b = lock(board);
        b.numbered += 1;
        index = b.numbered;
        if b.running >= cfg.concurrent {
            return Err(format!(
                "the server is busy with {} clients (--concurrent {}); start this client again \
                 when one has ended",
                b.running, cfg.concurrent
            ));
        }
        b.running += 1;
        b.wave.clients.push(index);
        admitted = true;
        Ok(())
    };
    let hello = match server_hello(&our_hello(cfg), &mut ch, admit) {
        Ok(Greeting::Accepted(h)) => h,
        Ok(Greeting::Stray(why)) => {
            verbs_lab::eprintln_whole!("{name}: ignored a connection from {peer}: {why}");
            return;
        }
        Err(e) => {
            let mut b = lock(board);
            if index == 0 {
                b.numbered += 1;
                index = b.numbered;
            }
            b.served.failed += 1;
            control.set_serve_summary(b.served.summary());
            verbs_lab::eprintln_whole!("{name}: --serve: client {index} ({peer}): {e:#}");
            if admitted {
                // Let in, then the ACCEPT could not be sent: its run ends here.
                b.running -= 1;
                end_of_run(&mut b, cfg, control);
            }
            return;
        }
    };
    verbs_lab::eprintln_whole!("{name}: --serve: client {index} from {peer}: running");
    let mut spans = Intervals::default();
    // A bug that panics in one client's run (its resources unwound) fails that client alone;
    // its slot is given back like any other.
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_for_client(cfg, control, (ch, hello), &mut NoSink, Some(&mut spans))
    }))
    .unwrap_or_else(|_| Err(anyhow::anyhow!("its run panicked (the message is above)")));
    let mut b = lock(board);
    b.running -= 1;
    match run {
        Ok(result) => {
            b.served.completed += 1;
            // The whole report at once, under the board's lock: the reports do not interleave.
            stdout(&format!("# client {index} from {peer}\n"));
            if let Err(e) = Reporter::new(out).finish(&result) {
                verbs_lab::eprintln_whole!("{name}: --serve: client {index}'s report: {e:#}");
            }
            if let Rows::Bw(rows) = result.rows {
                b.wave.done.push(ClientRows {
                    rows,
                    spans: spans.0,
                });
            }
            verbs_lab::eprintln_whole!("{name}: --serve: client {index} ({peer}) completed");
        }
        Err(e) => {
            b.served.failed += 1;
            match crate::events::in_chain(&e).filter(|ev| ev.ends_server()) {
                Some(ev) => drop(b.server_fatal.get_or_insert(ev.to_string())),
                None if control.received().is_some() => {}
                None => verbs_lab::eprintln_whole!(
                    "{name}: --serve: client {index} ({peer}) failed: {e:#}; the other clients \
                     go on"
                ),
            }
        }
    }
    end_of_run(&mut b, cfg, control);
}

/// After a run ended: when none is left running, the wave's `#total` rows, and a new wave.
fn end_of_run(b: &mut Board, cfg: &Config, control: &Control) {
    control.set_serve_summary(b.served.summary());
    if b.running == 0 {
        let wave = std::mem::take(&mut b.wave);
        stdout(&wave_report(&wave, BwUnit::new(cfg.report_gbits)));
    }
}

/// Writes `text` to stdout; a closed stdout (`| head`) is not the clients' business: the runs
/// go on (print! would panic on it).
fn stdout(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// The `#total` block of a wave in which two or more clients completed (nothing otherwise).
fn wave_report(wave: &Wave, unit: BwUnit) -> String {
    if wave.done.len() < 2 {
        return String::new();
    }
    let list = |v: &[u32]| {
        v.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = format!(
        "# clients {} ran together; {} completed\n",
        list(&wave.clients),
        wave.done.len()
    );
    for s in incast_sum(&wave.done) {
        out.push_str(&sum_line(&s, unit));
    }
    out
}

/// One size's sum over the clients that completed it.
#[derive(Debug, Clone, PartialEq)]
pub struct IncastSum {
    /// The sum as a row: `#iterations` and bytes of all the clients, the average over
    /// [`IncastSum::busy`], the peak the sum of their peaks (an upper bound: their best windows
    /// need not coincide).
    pub row: BwRow,
    pub clients: usize,
    /// Bytes the clients moved at this size.
    pub bytes: u64,
    /// How long at least one of them was measuring: the union of their intervals.
    pub busy: Duration,
    /// How long all of them measured at once (zero if some interval ends before another
    /// starts).
    pub all_at_once: Duration,
    /// The plain sum of their own averages, bytes per second (overstates the total when the
    /// intervals do not coincide).
    pub sum_of_averages: f64,
}

/// Size by size (the first client's order), the sum over the clients that measured it:
/// total bytes over the union of their measurement intervals (see [`IncastSum`]). A client's
/// bytes are its row's messages (rate × its own interval, exact for a one-way test) times
/// the size.
pub fn incast_sum(clients: &[ClientRows]) -> Vec<IncastSum> {
    let Some(first) = clients.first() else {
        return Vec::new();
    };
    first
        .rows
        .iter()
        .map(|r| r.bytes)
        .map(|size| {
            // Each client's row of this size, with its interval.
            let of_size: Vec<(&BwRow, Option<&Span>)> = clients
                .iter()
                .filter_map(|c| {
                    let j = c.rows.iter().position(|r| r.bytes == size)?;
                    Some((&c.rows[j], c.spans.get(j)))
                })
                .collect();
            let spans: Vec<Span> = of_size.iter().filter_map(|(_, s)| s.copied()).collect();
            let messages = of_size
                .iter()
                .map(|(r, _)| crate::measure::aggregate::row_messages(r))
                .fold(0u64, u64::saturating_add);
            let peaks: f64 = of_size.iter().map(|(r, _)| r.peak_bps).sum();
            let busy = union_len(&spans);
            let bytes = messages.saturating_mul(size);
            let secs = busy.as_secs_f64().max(1e-9);
            let avg_bps = bytes as f64 / secs;
            IncastSum {
                row: BwRow {
                    bytes: size,
                    iterations: of_size.iter().map(|(r, _)| r.iterations).sum(),
                    peak_bps: if peaks > 0.0 { peaks.max(avg_bps) } else { 0.0 },
                    avg_bps,
                    msg_rate_mpps: messages as f64 / secs / 1e6,
                    elapsed: busy,
                },
                clients: spans.len(),
                bytes,
                busy,
                all_at_once: common_len(&spans),
                sum_of_averages: of_size.iter().map(|(r, _)| r.avg_bps).sum(),
            }
        })
        .collect()
}

/// The length of the union of `spans` (time covered by at least one).
pub fn union_len(spans: &[Span]) -> Duration {
    let mut v: Vec<Span> = spans.iter().copied().filter(|s| !s.is_empty()).collect();
    v.sort_by_key(|s| s.start_ns);
    let mut total = 0u64;
    let mut cur: Option<Span> = None;
    for s in v {
        match &mut cur {
            Some(c) if s.start_ns <= c.end_ns => c.end_ns = c.end_ns.max(s.end_ns),
            _ => {
                if let Some(c) = cur.replace(s) {
                    total += c.end_ns - c.start_ns;
                }
            }
        }
    }
    if let Some(c) = cur {
        total += c.end_ns - c.start_ns;
    }
    Duration::from_nanos(total)
}

/// How long all of `spans` ran at once.
pub fn common_len(spans: &[Span]) -> Duration {
    let start = spans.iter().map(|s| s.start_ns).max().unwrap_or(0);
    let end = spans.iter().map(|s| s.end_ns).min().unwrap_or(0);
    Duration::from_nanos(end.saturating_sub(start))
}

/// `#total` glued to the row, then what it adds up and over which time.
pub fn sum_line(s: &IncastSum, unit: BwUnit) -> String {
    let r = crate::report::text::bw_row(&s.row, unit);
    format!(
        "#total{}\t{} clients, {} bytes over the {:.3} ms in which at least one measured (all at \
         once for {:.3} ms); the sum of their own averages {:.2} {}\n",
        r.trim_end_matches('\n'),
        s.clients,
        s.bytes,
        s.busy.as_secs_f64() * 1e3,
        s.all_at_once.as_secs_f64() * 1e3,
        unit.convert(s.sum_of_averages),
        unit.label()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(a: u64, b: u64) -> Span {
        Span {
            start_ns: a,
            end_ns: b,
        }
    }

    fn row(bytes: u64, iterations: u64, secs: f64) -> BwRow {
        BwRow {
            bytes,
            iterations,
            peak_bps: 0.0,
            avg_bps: (bytes * iterations) as f64 / secs,
            msg_rate_mpps: iterations as f64 / secs / 1e6,
            elapsed: Duration::from_secs_f64(secs),
        }
    }

    #[test]
    fn the_union_counts_covered_time_once() {
        assert_eq!(union_len(&[]), Duration::ZERO);
        assert_eq!(union_len(&[span(0, 10)]), Duration::from_nanos(10));
        // Overlapping, nested and disjoint intervals.
        let v = [span(0, 10), span(5, 15), span(6, 7), span(20, 30)];
        assert_eq!(union_len(&v), Duration::from_nanos(25));
        assert_eq!(common_len(&v), Duration::ZERO);
        assert_eq!(
            common_len(&[span(0, 10), span(5, 15)]),
            Duration::from_nanos(5)
        );
    }

    #[test]
    fn the_sum_is_all_bytes_over_the_time_any_client_measured() {
        // Two clients of 1000 x 64 KiB, each 1 s; the second starts 0.5 s after the first:
        // 2000 messages over 1.5 s, not the 2 x 65.5 MB/s their own averages add up to.
        let s = 1_000_000_000u64;
        let clients = [
            ClientRows {
                rows: vec![row(65536, 1000, 1.0)],
                spans: vec![span(s, 2 * s)],
            },
            ClientRows {
                rows: vec![row(65536, 1000, 1.0)],
                spans: vec![span(s + s / 2, 2 * s + s / 2)],
            },
        ];
        let sums = incast_sum(&clients);
        assert_eq!(sums.len(), 1);
        let t = &sums[0];
        assert_eq!(t.clients, 2);
        assert_eq!(t.row.iterations, 2000);
        assert_eq!(t.bytes, 2000 * 65536);
        assert_eq!(t.busy, Duration::from_millis(1500));
        assert_eq!(t.all_at_once, Duration::from_millis(500));
        assert!((t.row.avg_bps - 2000.0 * 65536.0 / 1.5).abs() < 1.0);
        assert!((t.sum_of_averages - 2.0 * 65536.0 * 1000.0).abs() < 1.0);
        let line = sum_line(t, BwUnit::new(false));
        assert!(line.starts_with("#total 65536      2000"), "{line}");
        assert!(
            line.contains("2 clients, 131072000 bytes over the 1500.000 ms"),
            "{line}"
        );
    }

    #[test]
    fn a_wave_with_one_completed_client_has_no_sum() {
        let one = Wave {
            clients: vec![4, 5],
            done: vec![ClientRows {
                rows: vec![row(4096, 10, 1.0)],
                spans: vec![span(0, 10)],
            }],
        };
        assert_eq!(wave_report(&one, BwUnit::new(false)), "");
    }
}
