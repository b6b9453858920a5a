//! The checks and resolutions [`Config::new`](super::Config::new) runs, one per concern:
//! transport, sizes, run mode, queues, tool options, output, QoS and warm-up.

use super::*;

/// `-c`: which tools run over which transport.
pub(super) fn check_transport(tool: Tool, p: &Params) -> Result<(), String> {
    let name = tool.name();
    let is = |k: TestKind| tool.kind == k;
    if p.conn == QpType::Ud && !is(TestKind::Send) {
        return Err(format!(
            "-c UD: only the send tools run over UD (unreliable datagrams carry sends \
             only); {name} needs RC{}",
            if is(TestKind::Write) { " or UC" } else { "" }
        ));
    }
    if p.conn == QpType::Uc && (is(TestKind::Read) || is(TestKind::Atomic)) {
        return Err(format!(
            "-c UC: UC carries sends and RDMA writes only; {name} needs RC"
        ));
    }
    Ok(())
}

/// `-s` / `-a`: the message sizes (atomics: always 8 bytes).
pub(super) fn resolve_sizes(tool: Tool, p: &Params) -> Result<Sizes, String> {
    if tool.kind == TestKind::Atomic {
        return match p.size {
            // Atomics have one size: -a is accepted (scripts pass it to every tool) and runs 8.
            Some(8) | None => Ok(Sizes::Single(8)),
            Some(s) => Err(format!(
                "-s {s}: atomic operations work on 8-byte words; use -s 8 or leave -s out"
            )),
        };
    }
    if p.all {
        if let Some(s) = p.size {
            return Err(format!(
                "-a sweeps the sizes 2..{SWEEP_MAX} itself; leave out -s {s} (or drop -a)"
            ));
        }
        let max = if p.conn == QpType::Ud {
            UD_MAX_MSG
        } else {
            SWEEP_MAX
        };
        return Ok(Sizes::Sweep { max });
    }
    let default = if tool.metric == Metric::Lat { 2 } else { 65536 };
    if p.size.is_none() && p.conn == QpType::Ud && default > UD_MAX_MSG {
        // perftest's "Max msg size in UD is MTU": the default does not fit one packet, so the
        // run uses the path MTU (the connection prints a note once it is known).
        return Ok(Sizes::PathMtu);
    }
    let s = p.size.unwrap_or(default);
    if s == 0 {
        return Err("-s 0: a message must hold at least 1 byte (perftest's smallest is 1)".into());
    }
    if s > MAX_SIZE {
        return Err(format!(
            "-s {s}: larger than {MAX_SIZE} bytes, the largest message an SGE describes"
        ));
    }
    if p.conn == QpType::Ud && s > UD_MAX_MSG {
        return Err(format!(
            "-s {s}: a UD message must fit one packet (at most the path MTU, {UD_MAX_MSG} \
             bytes at most); leave -s out to use the path MTU, or use -c RC for larger messages"
        ));
    }
    Ok(Sizes::Single(s))
}

/// `-n` / `-D`: how long each size runs.
pub(super) fn resolve_mode(tool: Tool, p: &Params) -> Result<RunMode, String> {
    let mode = match (p.iters, p.duration) {
        (Some(_), Some(_)) => {
            return Err("-n and -D both given: run either N iterations or SECS seconds".into())
        }
        (Some(0), None) => return Err("-n 0: at least one iteration is needed".into()),
        (Some(n), None) if n >= 1 << 40 => {
            return Err(format!("-n {n}: more than 2^40 iterations per QP"))
        }
        (Some(n), None) => RunMode::Iters(n),
        (None, Some(0)) => return Err("-D 0: the duration must be at least 1 second".into()),
        (None, Some(d)) if d > MAX_DURATION_SECS => {
            return Err(format!(
                "-D {d}: longer than a day ({MAX_DURATION_SECS} s); split the run"
            ))
        }
        (None, Some(d)) => RunMode::Duration(Duration::from_secs(d)),
        (None, None) => RunMode::Iters(if tool == Tool::new(TestKind::Write, Metric::Bw) {
            5000
        } else {
            1000
        }),
    };
    if p.all && matches!(mode, RunMode::Duration(_)) && tool.kind != TestKind::Atomic {
        return Err(
            "-a with -D: a sweep runs a number of iterations per size; use -n with -a".into(),
        );
    }
    Ok(mode)
}

/// The period of perftest's `--run_infinitely` when `-D` is not given (`DEF_DURATION`).
pub const INFINITE_PERIOD_SECS: u64 = 5;

/// `--run_infinitely`: one size, a row every `-D` seconds (5 by default), no margins.
pub(super) fn check_run_infinitely(
    tool: Tool,
    p: &Params,
) -> Result<(RunMode, Option<Duration>), String> {
    let why = if tool.metric == Metric::Lat {
        Some(format!(
            "it is an option of perftest's bandwidth tools, and {} measures latency",
            tool.name()
        ))
    } else if p.iters.is_some() {
        Some("it runs periods of -D seconds; leave out -n".to_string())
    } else if p.all {
        Some("it runs one size; leave out -a".to_string())
    } else if p.margin.is_some() {
        Some("every period is measured whole; leave out -f".to_string())
    } else if p.procs.is_some() {
        Some("not with --procs".to_string())
    } else {
        None
    };
    if let Some(why) = why {
        return Err(format!("--run_infinitely: {why}"));
    }
    let d = p.duration.unwrap_or(INFINITE_PERIOD_SECS);
    if d == 0 || d > MAX_DURATION_SECS {
        return Err(format!(
            "-D {d}: the period must be 1..={MAX_DURATION_SECS} seconds"
        ));
    }
    Ok((RunMode::Duration(Duration::from_secs(d)), None))
}

/// `-f/--margin`: perftest's margins of a `-D` run, a quarter of the duration by default (in
/// whole seconds); the duration must exceed both margins.
pub(super) fn resolve_margin(
    tool: Tool,
    p: &Params,
    mode: RunMode,
) -> Result<Option<Duration>, String> {
    let d = match mode {
        RunMode::Duration(d) => d.as_secs(),
        RunMode::Iters(_) => {
            return match p.margin {
                Some(f) => Err(format!(
                    "-f {f}: margins cut the ends of a -D run; add -D SECS (or leave -f out)"
                )),
                None => Ok(None),
            }
        }
    };
    if tool.metric == Metric::Lat {
        return match p.margin {
            Some(f) => Err(format!(
                "-f {f}: --margin is refused by the latency tools: they measure the whole -D \
                 duration (use a bandwidth tool for margins)"
            )),
            None => Ok(None),
        };
    }
    let f = p.margin.unwrap_or(d / 4);
    if d <= 2 * f {
        return Err(format!(
            "-f {f}: the two margins ({} s) leave nothing of -D {d} to measure; lower -f or \
             raise -D",
            2 * f
        ));
    }
    Ok((f > 0).then(|| Duration::from_secs(f)))
}

/// `-q`, `-t`, `-r`, `-Q`, `-l`: the queues, with the tool's default depths, fitted to a
/// counted run's iterations; and where each value came from when it is not what was typed.
pub(super) fn resolve_queues(
    tool: Tool,
    p: &Params,
    sizes: Sizes,
    mode: RunMode,
    notes: &mut Vec<String>,
) -> Result<(QueueShape, QueueOrigins), String> {
    let lat = tool.metric == Metric::Lat;
    if p.qps == 0 {
        return Err("-q 0: at least one QP is needed".into());
    }
    if p.qps > MAX_QPS {
        return Err(format!("-q {}: at most {MAX_QPS} QPs", p.qps));
    }
    if lat && p.qps > 1 {
        return Err(format!(
            "-q {}: a latency test runs on one QP (ping-pong); use a bandwidth tool for \
             several QPs",
            p.qps
        ));
    }
    let tx_default = if lat { 1 } else { 128 };
    let tx_depth = p.tx_depth.unwrap_or(tx_default);
    if tx_depth == 0 || tx_depth > MAX_DEPTH {
        return Err(format!(
            "-t {tx_depth}: the tx depth must be 1..={MAX_DEPTH}"
        ));
    }
    // The send tools, and the write tools with --write_with_imm (a receive per write), post
    // receives.
    let receives =
        tool.kind == TestKind::Send || (tool.kind == TestKind::Write && p.write_with_imm);
    let rx_default = if receives { 512 } else { 1 };
    let rx_depth = p.rx_depth.unwrap_or(rx_default);
    if rx_depth == 0 || rx_depth > MAX_DEPTH {
        return Err(format!(
            "-r {rx_depth}: the rx depth must be 1..={MAX_DEPTH}"
        ));
    }
    if p.post_list == 0 {
        return Err("-l 0: a post list holds at least 1 work request".into());
    }
    if lat && p.post_list > 1 {
        return Err(format!(
            "-l {}: a latency test posts one request at a time; post lists are for the \
             bandwidth tools",
            p.post_list
        ));
    }
    if p.post_list > tx_depth {
        return Err(format!(
            "-l {} is larger than the tx depth {tx_depth}: a post list must fit the send \
             queue (raise -t)",
            p.post_list
        ));
    }
    if u64::from(p.qps) * u64::from(tx_depth + rx_depth) > u64::from(MAX_DEPTH) {
        return Err(format!(
            "-q {} x (tx depth {tx_depth} + rx depth {rx_depth}) completions exceed the \
             {MAX_DEPTH} a completion queue may hold; lower -q, -t or -r",
            p.qps
        ));
    }
    let (cq_mod, cq_origin) = resolve_cq_mod(tool, p, sizes, tx_depth, notes)?;
    let queues = QueueShape {
        tx_depth,
        rx_depth,
        cq_mod,
        post_list: p.post_list,
        recv_post_list: p.recv_post_list,
    }
    .fitted_to(mode, receives);
    check_recv_post_list(tool, p, &queues)?;
    let depth_origin = |flag: &str, typed: Option<u32>, default: u32, used: u32| match typed {
        Some(t) if t == used => None,
        Some(t) => Some(format!("{flag} {t} capped to -n")),
        None if used == default => Some("default".to_string()),
        None => Some(format!("default {default} capped to -n")),
    };
    let origins = QueueOrigins {
        tx_depth: depth_origin("-t", p.tx_depth, tx_default, queues.tx_depth),
        rx_depth: depth_origin("-r", p.rx_depth, rx_default, queues.rx_depth),
        cq_mod: cq_origin,
    };
    Ok((queues, origins))
}

/// Messages above this many bytes are signaled one by one unless `-Q` is given (perftest's
/// `MSG_SIZE_CQ_MOD_LIMIT`: with rare signals, a large message's bandwidth is computed from
/// too few completions).
pub const CQ_MOD_SIZE_LIMIT: u64 = 8192;

/// `-Q` as perftest resolves it (`force_dependecies`), in its order: 100 unless given; 1 for one
/// size over [`CQ_MOD_SIZE_LIMIT`] on RC/UC without `-e` unless given (a note when a given one
/// stays above 1); capped by the tx depth; with a post list (bandwidth tools), the post list
/// unless given (a note), else it must divide the post list. Also says where the value came
/// from when it is not the `-Q` typed (see [`QueueOrigins`]).
fn resolve_cq_mod(
    tool: Tool,
    p: &Params,
    sizes: Sizes,
    tx_depth: u32,
    notes: &mut Vec<String>,
) -> Result<(u32, Option<String>), String> {
    if p.cq_mod == Some(0) {
        return Err("-Q 0: CQ moderation must be at least 1 (1 = every request signaled)".into());
    }
    let mut cq_mod = p.cq_mod.unwrap_or(100);
    let mut origin = p.cq_mod.is_none().then(|| "default".to_string());
    if let Sizes::Single(size) = sizes {
        if size > CQ_MOD_SIZE_LIMIT && p.conn != QpType::Ud && !p.events {
            match p.cq_mod {
                None => {
                    cq_mod = 1;
                    origin = Some("follows from -s".into());
                }
                // The note names the moderation the run uses: -Q above -t is capped to it.
                Some(q) if q.min(tx_depth) > 1 => notes.push(format!(
                    "-Q {q}{} with messages over {CQ_MOD_SIZE_LIMIT} bytes: so few completions \
                     can make the bandwidth inaccurate (perftest warns too; without -Q every \
                     request is signaled)",
                    if q > tx_depth {
                        format!(", capped to the tx depth {tx_depth},")
                    } else {
                        String::new()
                    }
                )),
                Some(_) => {}
            }
        }
    }
    if cq_mod > tx_depth {
        origin = Some(match p.cq_mod {
            Some(q) => format!("-Q {q} capped to -t"),
            None => format!("default {cq_mod} capped to -t"),
        });
        cq_mod = tx_depth;
    }
    if p.post_list > 1 && tool.metric == Metric::Bw {
        match p.cq_mod {
            None => {
                cq_mod = p.post_list;
                origin = Some("follows from -l".into());
                notes.push(format!(
                    "-l {}: CQ moderation is the post list's size, as in perftest (give -Q to \
                     choose it)",
                    p.post_list
                ));
            }
            Some(q) if p.post_list % q != 0 => {
                return Err(format!(
                    "-l {} -Q {q}: the post list must be a multiple of the CQ moderation (one \
                     signaled request per {q}, as perftest requires)",
                    p.post_list
                ))
            }
            Some(_) => {}
        }
    }
    Ok((cq_mod, origin))
}

/// Options that belong to some tools only: `-b`, `-o`, `-A`, `-I`, `-e`, `-u`, `--validate`.
pub(super) fn check_tool_options(tool: Tool, p: &Params) -> Result<(), String> {
    let name = tool.name();
    let lat = tool.metric == Metric::Lat;
    let is = |k: TestKind| tool.kind == k;
    if p.bidirectional && lat {
        return Err(
            "-b: bidirectional runs are for the bandwidth tools; a latency test is a \
             ping-pong already"
                .into(),
        );
    }
    if p.send_with_imm && !is(TestKind::Send) {
        return Err(format!(
            "--send_with_imm changes the opcode of a Send; {name} sends none (perftest: \
             send_lat and send_bw only)"
        ));
    }
    if p.write_with_imm && !is(TestKind::Write) {
        return Err(format!(
            "--write_with_imm changes the opcode of an RDMA Write; {name} writes none \
             (perftest: write_lat and write_bw only)"
        ));
    }
    if p.use_srq && !is(TestKind::Send) {
        return Err(format!(
            "--use-srq shares the receive queue of the QPs; {name} posts no receives (perftest: \
             the send tools only)"
        ));
    }
    if p.reversed && lat {
        return Err(format!(
            "--reversed turns a bandwidth test round (the server sends); {name} is a latency \
             test, which has no one-way direction to reverse"
        ));
    }
    if p.reversed && p.procs.is_some() {
        return Err(
            "--reversed: not with --procs (each worker's client sends); run the processes \
             without it, started the other way round"
                .into(),
        );
    }
    if p.outstanding.is_some() && !(is(TestKind::Read) || is(TestKind::Atomic)) {
        return Err(format!(
            "-o limits outstanding RDMA reads and atomics; {name} has none"
        ));
    }
    if let Some(o) = p.outstanding {
        if o == 0 || o > 255 {
            return Err(format!("-o {o}: outstanding reads/atomics must be 1..=255"));
        }
    }
    if p.atomic_type.is_some() && !is(TestKind::Atomic) {
        return Err(format!("-A chooses the atomic operation; {name} runs none"));
    }
    if let Some(i) = p.inline_size {
        if is(TestKind::Read) || is(TestKind::Atomic) {
            return Err(format!(
                "-I: {name} sends no payload from this side (reads and atomics carry none), \
                 so there is nothing to inline"
            ));
        }
        if i > MAX_INLINE {
            return Err(format!("-I {i}: at most {MAX_INLINE} bytes"));
        }
    }
    if p.events && tool == Tool::new(TestKind::Write, Metric::Lat) {
        return Err(
            "-e: vl_write_lat sees the peer's write by polling memory (no completion is \
             generated for it), so there is no event to wait for"
                .into(),
        );
    }
    if p.validate && is(TestKind::Atomic) {
        return Err(
            "--validate checks payloads of write, read and send; atomics carry none".into(),
        );
    }
    Ok(())
}

/// perftest's output options: `-w`/`-y` and `--output=bandwidth|message_rate` belong to the
/// bandwidth tools, `--output=latency` to the latency tools (perftest refuses the others too).
/// `-H`/`-U` keep every sample (8 bytes each): at most this many iterations (128 MiB).
pub const MAX_KEPT_SAMPLES: u64 = 1 << 24;

/// The longest `--recv_post_list`: the receives of one `ibv_post_recv` call are built on the
/// stack.
pub const MAX_RECV_POST_LIST: u32 = crate::engine::MAX_RECV_PER_CALL as u32;

/// `--recv_post_list N`: a bandwidth option (perftest: "Receive post list is supported in BW
/// tests only"); with `-n`, the iterations a multiple of N (perftest's rule); for the send tools
/// (and the write tools with `--write_with_imm`), a list that fits the receive queue.
fn check_recv_post_list(tool: Tool, p: &Params, queues: &QueueShape) -> Result<(), String> {
    let n = p.recv_post_list;
    if n == 0 || n > MAX_RECV_POST_LIST {
        return Err(format!(
            "--recv_post_list {n}: a receive post list holds 1..={MAX_RECV_POST_LIST} receives"
        ));
    }
    if n == 1 {
        return Ok(());
    }
    if tool.metric == Metric::Lat {
        return Err(format!(
            "--recv_post_list {n}: a latency test posts one receive per round; receive post \
             lists are for the bandwidth tools"
        ));
    }
    if let Some(iters) = p.iters.filter(|i| i % u64::from(n) != 0) {
        return Err(format!(
            "--recv_post_list {n}: the iterations (-n {iters}) must be a multiple of it, as \
             perftest requires"
        ));
    }
    let receives =
        tool.kind == TestKind::Send || (tool.kind == TestKind::Write && p.write_with_imm);
    if receives && n > queues.rx_depth {
        return Err(format!(
            "--recv_post_list {n} is larger than the rx depth {}: a list must fit the receive \
             queue (raise -r)",
            queues.rx_depth
        ));
    }
    Ok(())
}

pub(super) fn check_output_options(tool: Tool, p: &Params) -> Result<(), String> {
    let name = tool.name();
    let o = &p.output;
    if tool.metric == Metric::Lat {
        if let Some(w) = o.limit_bw {
            return Err(format!(
                "-w {w}: --limit_bw is a bandwidth floor, and {name} measures latency \
                 (use --max-lat KEY=USEC)"
            ));
        }
        if let Some(y) = o.limit_msgrate {
            return Err(format!(
                "-y {y}: --limit_msgrate is a message-rate floor, and {name} measures latency \
                 (use --max-lat KEY=USEC)"
            ));
        }
    }
    let samples = [
        (o.report_histogram, "-H/--report-histogram"),
        (o.report_unsorted, "-U/--report-unsorted"),
        (o.report_cycles, "-C/--report-cycles"),
    ];
    for (given, flag) in samples {
        if given && tool.metric == Metric::Bw {
            return Err(format!(
                "{flag} is an option of perftest's latency tools; {name} measures bandwidth"
            ));
        }
    }
    if o.report_histogram || o.report_unsorted {
        if o.format == crate::params::OutputFormat::Table {
            return Err(
                "-H/-U print every sample in perftest's text layout; leave out --format table"
                    .into(),
            );
        }
        if let Some(n) = p.iters.filter(|&n| n > MAX_KEPT_SAMPLES) {
            return Err(format!(
                "-H/-U keep every sample in memory: at most {MAX_KEPT_SAMPLES} iterations \
                 (-n {n})"
            ));
        }
    }
    if o.report_both {
        if tool.metric == Metric::Lat {
            return Err(format!(
                "--report-both splits a bidirectional bandwidth row by direction; {name} \
                 measures latency"
            ));
        }
        if p.procs.is_some() {
            return Err(
                "--report-both: not with --procs (each process's rows are shown beside the \
                 totals already)"
                    .into(),
            );
        }
    }
    if o.cpu_util {
        if p.duration.is_none() && !p.run_infinitely {
            return Err(
                "--cpu_util measures the CPUs during a -D run (perftest reports it in duration \
                 mode only); add -D SECS"
                    .into(),
            );
        }
        if p.procs.is_some() {
            return Err("--cpu_util: not with --procs (each worker shares the CPUs)".into());
        }
    }
    if o.verbosity.is_some() && o.format == crate::params::OutputFormat::Table {
        return Err("--output=UNITS prints bare numbers; leave out --format table".into());
    }
    match (o.verbosity, tool.metric) {
        (Some(Verbosity::Latency), Metric::Bw) => Err(format!(
            "--output=latency: {name} measures bandwidth; use --output=bandwidth or \
             --output=message_rate"
        )),
        (Some(v @ (Verbosity::Bandwidth | Verbosity::MessageRate)), Metric::Lat) => Err(format!(
            "--output={}: {name} measures latency; use --output=latency",
            v.name()
        )),
        _ => Ok(()),
    }
}

/// `-S`, `--tclass`, `--flow_label` and `-R` with its options; returns `-R`'s settings.
pub(super) fn check_qos(tool: Tool, p: &Params, port: u16) -> Result<Option<RdmaCm>, String> {
    if p.qos.sl > 15 {
        return Err(format!(
            "-S {}: the service level is 4 bits (0..=15)",
            p.qos.sl
        ));
    }
    if !p.rdma_cm {
        return Ok(None);
    }
    let name = tool.name();
    if p.conn != QpType::Rc {
        return Err(format!(
            "-R with -c {}: {name} connects RC QPs through rdma_cm only (perftest refuses UC \
             with rdma_cm; UD through rdma_cm is not supported yet); use -c RC or leave out -R",
            p.conn
        ));
    }
    if p.procs.is_some() {
        return Err(
            "-R with --procs: not supported yet (each worker would need its own rdma_cm port); \
             leave out one of them"
                .into(),
        );
    }
    if port == u16::MAX {
        return Err(format!(
            "-p {port} with -R: the rdma_cm listener uses port -p + 1; choose a lower -p"
        ));
    }
    if p.bind_source_ip.is_some() && p.host.is_none() {
        return Err(
            "--bind_source_ip is for the client (the side with a host); the server listens on \
             --bind"
                .into(),
        );
    }
    // 6 by default, as every QP of ours (rxe never counts 7 down: see README).
    let retry_count = p.retry_count.unwrap_or(verbs_lab::connect::RETRY_CNT);
    if retry_count > 7 {
        return Err(format!(
            "--retry_count {retry_count}: the transport retry count is 3 bits (0..=7)"
        ));
    }
    Ok(Some(RdmaCm {
        port: port + 1,
        tos: p.tos,
        source_ip: p.bind_source_ip,
        retry_count,
    }))
}

/// Checks `--procs` and the hidden worker flags; returns this process's TCP port (the base
/// port + the worker index) and which worker it is, if one.
pub(super) fn check_procs(tool: Tool, p: &Params) -> Result<(u16, Option<WorkerOf>), String> {
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
            tool.kind.name()
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
    if p.procs_start_us > 1_000_000 {
        return Err(format!(
            "--procs-start {}: at most 1000000 microseconds (1 s) ahead",
            p.procs_start_us
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

/// `--warmup N` (by default [`Warmup::Auto`], scaled by size) and perftest's
/// `--perform_warm_up`.
pub(super) fn resolve_warmup(p: &Params) -> Result<Warmup, String> {
    let Some(warmup) = p.warmup else {
        return Ok(Warmup::Auto);
    };
    if warmup >= 1 << 40 {
        return Err(format!(
            "--warmup {warmup}: more than 2^40 warm-up iterations"
        ));
    }
    if p.perform_warm_up && warmup == 0 {
        return Err("--perform_warm_up with --warmup 0: choose one".into());
    }
    Ok(Warmup::Iters(warmup))
}

/// `--serve`: a server's option, one client at a time, its rows on stdout (a report file would
/// be overwritten by every client).
pub(super) fn check_serve(p: &Params) -> Result<(), String> {
    if !p.serve {
        return Ok(());
    }
    if p.host.is_some() {
        return Err(
            "--serve is for the server (the side without a host): it serves one client \
                    after another"
                .into(),
        );
    }
    if p.procs.is_some() {
        return Err(
            "--serve with --procs: a --procs run pairs its workers once; serve one \
                    client at a time without --procs"
                .into(),
        );
    }
    let o = &p.output;
    let file = [
        ("--json", o.json.is_some()),
        ("--csv", o.csv.is_some()),
        ("--out_json", o.out_json || o.out_json_file.is_some()),
        ("--plot", o.plot.is_some()),
    ]
    .into_iter()
    .find(|(_, given)| *given);
    if let Some((flag, _)) = file {
        return Err(format!(
            "--serve with {flag}: every client's run would overwrite the file; leave it out \
             (each run's rows print on stdout) or give it to the clients"
        ));
    }
    Ok(())
}
