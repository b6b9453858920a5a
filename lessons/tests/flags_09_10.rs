//! Lessons 09 and 10 on the host. Lesson 10 needs no RDMA, so it runs end to end here: the tour
//! of the calls, the coordinator and its worker processes, a worker that dies, a worker that
//! stalls, Ctrl-C — and after each, no queue is left (checked by name: `mq_open` must fail with
//! ENOENT, since /dev/mqueue is not mounted on this host). Lesson 09 teaches its affinity steps
//! before it needs a device, then says there is none; its bad flags are refused up front.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::mqueue::{mq_close, mq_open, MQ_OFlag};
use nix::sys::signal::{kill, signal, SigHandler, Signal};
use nix::sys::stat::Mode;
use nix::unistd::Pid;

mod common;
use common::{run_bounded, text, wait_bounded};

const L09: &str = env!("CARGO_BIN_EXE_lesson09_affinity");
const L10: &str = env!("CARGO_BIN_EXE_lesson10_mqueue");

/// The queue names a lesson 10 run of process `pid` with `k` workers creates.
fn names(pid: u32, k: u32) -> Vec<String> {
    let base = format!("/vl10-{pid}");
    let mut v = vec![
        format!("{base}-tour"),
        format!("{base}-limit"),
        base.clone(),
    ];
    v.extend((0..k).map(|w| format!("{base}-w{w}")));
    v
}

fn assert_no_queue_left(pid: u32, k: u32) {
    for name in names(pid, k) {
        match mq_open(name.as_str(), MQ_OFlag::O_RDONLY, Mode::empty(), None) {
            Err(Errno::ENOENT) => {}
            Ok(q) => {
                let _ = mq_close(q);
                let _ = nix::mqueue::mq_unlink(name.as_str());
                panic!("queue {name} was left behind (removed now)");
            }
            Err(e) => panic!("mq_open({name}): {e}"),
        }
    }
}

/// The coordinator's pid, from "queues removed: /vl10-PID ..." or a queue name in the output.
fn coordinator_pid(out: &str) -> u32 {
    let at = out.find("/vl10-").expect("a queue name in the output") + 6;
    out[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|s| s.parse().ok())
        .expect("a pid after /vl10-")
}

/// "worker 1: pid 1234" lines of step 10.
fn worker_pids(out: &str) -> Vec<u32> {
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("worker "))
        .filter_map(|l| l.split_once(": pid "))
        .filter_map(|(_, p)| p.trim().parse().ok())
        .collect()
}

/// True while `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn lesson10_end_to_end() {
    let (o, took) = run_bounded(L10, &["-k", "3", "--pin"], Duration::from_secs(60));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "exit {}: {out}{err}", o.status);
    for want in [
        "mq_open(\"/vl10-",
        "again with O_EXCL: EEXIST",
        "mq_getattr: mq_curmsgs 4 of mq_maxmsg 4",
        "mq_receive with a 64-byte buffer: EMSGSIZE",
        "received in priority order: high(9) high again(9) mid(5) low(1)",
        "mq_timedreceive timed out after",
        "nonblocking mq_receive on an empty queue: EAGAIN at once",
        "the fifth mq_send on the full queue: EAGAIN",
        "after mq_unlink: mq_open gives ENOENT",
        "pinned to CPU",
        "all 3 results verified against the closed form",
        "(mq_open of each name: ENOENT)",
    ] {
        assert!(out.contains(want), "expected '{want}' in:\n{out}{err}");
    }
    // The timeout is bounded and honest: about 300 ms.
    let ms: f64 = out
        .split("mq_timedreceive timed out after ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .expect("a number of ms");
    assert!((290.0..2000.0).contains(&ms), "timed out after {ms} ms");
    // The kernel's default limits (msg_max 10, msgsize_max 8192): the refusal names them. A host
    // with other limits, or root holding CAP_SYS_RESOURCE, goes through the same path with
    // other numbers (the child that drops root).
    if std::fs::read_to_string("/proc/sys/fs/mqueue/msg_max").is_ok_and(|s| s.trim() == "10") {
        assert!(
            out.contains("limit refused: mq_maxmsg 11 = msg_max + 1: EINVAL"),
            "{out}"
        );
        assert!(out.contains("limit refused: mq_msgsize 8193 = msgsize_max + 1: EINVAL"));
        assert!(
            out.contains(
                "refused maxmsg=11 msgsize=128 (EINVAL): /proc/sys/fs/mqueue/msg_max is 10"
            ),
            "{out}"
        );
    }
    // Every worker's table row says "yes".
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().count() == 9 && l.starts_with(char::is_numeric))
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(rows
        .iter()
        .all(|r| r.split_whitespace().nth(7) == Some("yes")));
    assert_no_queue_left(coordinator_pid(&out), 3);
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn lesson10_names_a_dead_worker_in_bounded_time_and_leaves_nothing() {
    // --wait 30: the failure must come from noticing the death, not from the wait running out.
    let (o, took) = run_bounded(
        L10,
        &["--no-tour", "--kill-worker", "1", "--wait", "30"],
        Duration::from_secs(60),
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let pids = worker_pids(&out);
    assert_eq!(pids.len(), 2, "{out}");
    let want = format!(
        "lesson10_mqueue: error: worker 1 (pid {}) was killed by SIGKILL before sending its \
         Result and Done",
        pids[1]
    );
    assert!(err.contains(&want), "expected '{want}' in:\n{err}");
    assert!(err.contains("--kill-worker 1: sending SIGKILL to myself"));
    assert!(out.contains("(mq_open of each name: ENOENT)"), "{out}");
    assert_no_queue_left(coordinator_pid(&out), 2);
    assert!(pids.iter().all(|p| !alive(*p)), "a worker outlived the run");
}

#[test]
fn lesson10_reports_a_silent_worker_when_the_wait_runs_out() {
    let (o, took) = run_bounded(
        L10,
        &["--no-tour", "-q", "--stall-worker", "0", "--wait", "2"],
        Duration::from_secs(60),
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        err.contains("sent no Result and Done within 2 s (--wait); still running but silent"),
        "{err}"
    );
    assert!(err.contains("worker 0 (pid "), "{err}");
    // The stalled worker took the Abort and said so.
    assert!(err.contains("stalled, then aborted"), "{err}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert_no_queue_left(coordinator_pid(&out), 2);
}

#[test]
fn lesson10_ctrl_c_removes_the_queues() {
    let mut cmd = Command::new(L10);
    // A test run started with SIGINT ignored (under nohup, or as `cmd &` in a script) hands
    // that on to the lesson, which then rightly ignores Ctrl-C as a background job should.
    // The child gets the default action back, as it would have in a terminal.
    // SAFETY: between fork and exec only `sigaction`, which is async-signal-safe, runs.
    unsafe {
        cmd.pre_exec(|| {
            signal(Signal::SIGINT, SigHandler::SigDfl)
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd
        .args(["--no-tour", "--stall-worker", "0", "--wait", "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (err_rx, _) = {
        let (tx, rx) = mpsc::channel();
        let mut stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = stderr.read_to_end(&mut v);
            let _ = tx.send(v);
        });
        (rx, ())
    };
    // Read stdout until the coordinator waits for results, then press "Ctrl-C".
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    let t0 = Instant::now();
    while !seen.contains("[13] Collect Result and Done") {
        let line = lines
            .next()
            .expect("output before step 13")
            .expect("readable stdout");
        seen.push_str(&line);
        seen.push('\n');
        assert!(t0.elapsed() < Duration::from_secs(30), "no step 13: {seen}");
    }
    let workers = worker_pids(&seen);
    kill(Pid::from_raw(pid as i32), Signal::SIGINT).unwrap();
    let st = wait_bounded(&mut child, Duration::from_secs(10));
    let err = text(&err_rx.recv().unwrap());
    assert_eq!(st.signal(), Some(Signal::SIGINT as i32), "{st}: {err}");
    assert!(
        err.contains(
            "lesson10_mqueue: interrupted (SIGINT): removed 3 message queues this process \
             created; exiting"
        ),
        "{err}"
    );
    assert_no_queue_left(pid, 2);
    // The kernel tells the stalled worker that its coordinator is gone (PR_SET_PDEATHSIG).
    let t0 = Instant::now();
    while workers.iter().any(|p| alive(*p)) {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "workers {workers:?} outlived their coordinator"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn lesson10_refuses_bad_flags_before_doing_anything() {
    for (args, why) in [
        (
            vec!["-k", "0"],
            "-k 0: give 1 to 8 workers (each costs a queue",
        ),
        (
            vec!["-k", "9"],
            "-k 9: give 1 to 8 workers (each costs a queue",
        ),
        (
            vec!["--kill-worker", "2"],
            "--kill-worker 2: workers are numbered 0 to 1 (-k 2)",
        ),
        (
            vec!["-n", "0"],
            "-n 0: give 1 to 1000000000 numbers for each worker to sum",
        ),
        (vec!["--wait", "0"], "--wait 0"),
        // Once a panic: "overflow when adding duration to instant".
        (
            vec!["--wait", "18446744073709551615", "-k", "1", "-n", "10"],
            "--wait 18446744073709551615: longer than a day; give 1 to 86400 seconds",
        ),
    ] {
        let o = Command::new(L10).args(&args).output().unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: expected '{why}' in {err}");
        assert!(o.stdout.is_empty(), "{args:?}: a step ran");
    }
}

#[test]
fn lesson09_teaches_affinity_then_says_there_is_no_device() {
    // This host has no RDMA: steps 1 and 2 need none, step 3 finds no device.
    let (o, _) = run_bounded(L09, &[], Duration::from_secs(30));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        out.contains("sched_getaffinity(0) -> cpu_set_t of 1024 slots"),
        "{out}"
    );
    assert!(out.contains("core_affinity::get_core_ids() = ["), "{out}");
    assert!(out.contains("unchanged by the threads' pins"), "{out}");
    let allowed = verbs_lab::affinity::allowed_cpus().unwrap();
    let (first, last) = (allowed.cpus()[0], allowed.cpus()[allowed.len().min(2) - 1]);
    let want = format!(
        "thread masks: pinned thread {last}, its child {last} (inherited), core_affinity thread \
         {first}; main thread and process still {allowed}"
    );
    assert!(out.contains(&want), "expected '{want}' in {out}");
    assert!(err.contains("RDMA") && err.contains("softroce"), "{err}");
}

#[test]
fn lesson09_refuses_bad_flags_before_doing_anything() {
    for (args, why) in [
        (vec!["-n", "0"], "-n 0: give 1 to 1000000 round trips"),
        (vec!["-u", "32"], "-u 32"),
        (vec!["--cpus", "0"], "is not two CPUs 'A,B'"),
        (
            vec!["--cpus", "0,999"],
            "--cpus: CPU 999 is not among the CPUs this process may use",
        ),
    ] {
        let o = Command::new(L09).args(&args).output().unwrap();
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: expected '{why}' in {err}");
        assert!(o.stdout.is_empty(), "{args:?}: a step ran");
    }
}

/// Runs `bin` with its stdout on a pipe, reads lines until one contains `until`, then closes
/// the pipe (`| head`); returns the lesson's pid, how it ended and its stderr.
fn close_stdout_after(bin: &str, until: &str) -> (u32, std::process::ExitStatus, String) {
    let mut child = Command::new(bin)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while !lines
        .next()
        .expect("the line awaited")
        .unwrap()
        .contains(until)
    {}
    drop(lines);
    let status = wait_bounded(&mut child, Duration::from_secs(20));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (child.id(), status, err)
}

#[test]
fn lessons_end_quietly_when_stdout_is_closed() {
    // Lesson 09 closed inside step 2, whose threads wait for the main thread: it used to
    // panic there (exit 101) and then wait forever for them (`lesson09_affinity | head -3`).
    for until in ["[1]", "main thread: tid"] {
        let (_, status, err) = close_stdout_after(L09, until);
        assert_eq!(status.code(), Some(0), "closed after {until:?}: {err}");
        assert!(err.is_empty(), "closed after {until:?}: {err}");
    }
    // Lesson 10 closed during its tour: it removes its queues on the way out.
    let (pid, status, err) = close_stdout_after(L10, "[2] mq_open");
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
    assert_no_queue_left(pid, 2);
}
