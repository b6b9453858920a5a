//! The registry of names this process created, their removal on SIGINT/SIGTERM/SIGHUP, and
//! the removal of queues that a coordinator killed outright (SIGKILL) left behind.

use std::fs;
use std::sync::{Mutex, MutexGuard};

use nix::mqueue::mq_unlink;
use nix::sys::signal::Signal;

use super::limits::{status_mask, MqError, Result};

static REGISTRY: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn registry() -> MutexGuard<'static, Vec<String>> {
    // A panic while holding the lock leaves a usable Vec: keep going.
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers a queue name created outside [`Queue::create`](super::Queue::create) (e.g. with a raw `mq_open` in a
/// lesson), so [`unlink_all_registered`] and the signal cleanup remove it too.
pub fn register_for_cleanup(name: &str) {
    let mut r = registry();
    if !r.iter().any(|n| n == name) {
        r.push(name.to_string());
    }
}

/// Forgets a registered name (after the caller unlinked it).
pub fn forget_registered(name: &str) {
    registry().retain(|n| n != name);
}

/// The names this process created and has not removed yet.
pub fn registered_names() -> Vec<String> {
    registry().clone()
}

/// Removes (`mq_unlink`) every registered name and forgets them; returns how many were still
/// there. Open descriptors stay usable; the names disappear at once.
pub fn unlink_all_registered() -> usize {
    let mut r = registry();
    let n = r
        .iter()
        .filter(|name| mq_unlink(name.as_str()).is_ok())
        .count();
    r.clear();
    n
}

/// The signals [`install_cleanup_on_signals`] handles.
pub const CLEANUP_SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// On SIGINT, SIGTERM or SIGHUP: remove every registered queue, then die of that signal (the
/// shell sees 130 for Ctrl-C, as without the cleanup).
///
/// **Call it first in `main`, before any thread starts.** It works without a signal handler,
/// on the process's signal thread ([`crate::signals::on_thread`]), which it starts when no one
/// did: the three signals are blocked in the calling thread (`pthread_sigmask(2)`), which every
/// thread created afterwards inherits, and read there from a `signalfd(2)`. (A thread started
/// *before* this call keeps its mask; a signal delivered to it would kill the process without
/// cleanup.) After the cleanup the thread unblocks the signal for itself and raises it: the
/// default action ends the process, so a parent sees "killed by SIGINT". Child processes
/// started with `std::process::Command` get an empty signal mask (the standard library resets
/// it), so workers still die of Ctrl-C normally. A program that handles these signals itself
/// (perftest's tools stop their run and tell the peer) registers with the signal thread after
/// this, and removes the queues on its own way out.
///
/// A signal the process inherited as ignored (`SIG_IGN`, e.g. SIGINT in a shell's background
/// job) is left alone. Idempotent: later calls do nothing more.
pub fn install_cleanup_on_signals() -> Result<()> {
    // A signal this process inherited as ignored (a shell's background job ignores SIGINT) stays
    // ignored: Linux queues even an ignored signal while it is blocked, so taking it with
    // sigwait would change what the parent asked for.
    let ignored = ignored_signals();
    let wanted: Vec<Signal> = CLEANUP_SIGNALS
        .into_iter()
        .filter(|&s| ignored & (1u64 << (s as i32 - 1)) == 0)
        .collect();
    if wanted.is_empty() {
        return Ok(()); // every one of them is ignored: nothing to take
    }
    let taken = crate::signals::install(&wanted).map_err(|e| {
        MqError::Invalid(format!(
            "cannot start the signal thread: {e} (the signals stay as they were)"
        ))
    })?;
    // The programs that remove their queues on a signal block where they cannot look for it
    // (waiting for children, several threads): they take signals on the signal thread.
    crate::signals::on_thread().map_err(|e| {
        MqError::Invalid(format!(
            "cannot start the signal thread: {e} (the signals stay as they were)"
        ))
    })?;
    let ours: Vec<Signal> = wanted.into_iter().filter(|s| taken.contains(s)).collect();
    crate::signals::on(&ours, |sig| {
        let n = unlink_all_registered();
        crate::eprintln_whole!("{}", removed_on_signal(sig, n));
        crate::signals::die_of(sig)
    });
    Ok(())
}

/// The line a process prints when `sig` stopped it after it removed the `n` queues it created:
/// `vl_write_bw: interrupted (SIGINT): removed 3 message queues this process created; exiting`.
pub fn removed_on_signal(sig: Signal, n: usize) -> String {
    format!(
        "{}: {}: removed {n} message queue{} this process created; exiting",
        crate::stderr::program_name(),
        stopped_by(sig),
        if n == 1 { "" } else { "s" }
    )
}

/// How a person would say that `sig` stopped the program, with its name.
fn stopped_by(sig: Signal) -> String {
    match sig {
        Signal::SIGINT => "interrupted (SIGINT)".into(),
        Signal::SIGTERM => "terminated (SIGTERM)".into(),
        Signal::SIGHUP => "hung up (SIGHUP)".into(),
        other => format!("stopped by {other}"),
    }
}

/// The `SigIgn` mask of `/proc/self/status`: bit N-1 set when signal N is ignored.
fn ignored_signals() -> u64 {
    status_mask("SigIgn").unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Queues of a coordinator that is gone

/// In a worker: when `sig` arrives — the signal the worker asked to get when its coordinator
/// dies (`PR_SET_PDEATHSIG`, see `verbs_lab::workers`) — remove the coordinator's queues
/// `names` (pid `owner`; none for a worker that talks to it otherwise), say so, and die of
/// `sig`. A coordinator killed outright (SIGKILL)
/// cannot remove its queues; its workers, told by the kernel, do it for it. The line starts
/// with `who` ("vl_write_bw worker 1") and does not name `sig`, an internal arrangement.
///
/// Like [`install_cleanup_on_signals`], it takes `sig` on the process's one signal thread
/// ([`crate::signals`]), started here if no one did: **call it before any other thread starts.**
pub fn remove_on_signal(sig: Signal, who: String, owner: u32, names: Vec<String>) -> Result<()> {
    crate::signals::install(&[sig])
        .and_then(|_| crate::signals::on_thread())
        .map_err(|e| MqError::Invalid(format!("cannot start the signal thread: {e}")))?;
    crate::signals::on(&[sig], move |got| {
        let n = names
            .iter()
            .filter(|name| mq_unlink(name.as_str()).is_ok())
            .count();
        let gone = format!("{who}: the coordinator (pid {owner}) is gone");
        let total = names.len();
        let s = if total == 1 { "" } else { "s" };
        match total {
            0 => crate::eprintln_whole!("{gone}; exiting"),
            _ if n == total => {
                crate::eprintln_whole!("{gone}; removed its {n} message queue{s}; exiting")
            }
            _ => crate::eprintln_whole!(
                "{gone}; removed {n} of its {total} message queue{s} (the rest were \
                 already gone); exiting"
            ),
        }
        crate::signals::die_of(got)
    });
    Ok(())
}

/// Where the mqueue file system is mounted (`/dev/mqueue` on most systems), from
/// `/proc/mounts`; `None` when it is not mounted (then queues cannot be listed).
pub fn mount_point() -> Option<std::path::PathBuf> {
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "mqueue").then(|| dir.into())
    })
}

/// The queues named `{prefix}{pid}` or `{prefix}{pid}-…` among `names` (the entries of the
/// mqueue mount, without the leading '/') whose process `pid` is not `alive`: left by a
/// coordinator killed outright. Returned as queue names (with the '/'), grouped by pid.
pub fn orphans_among(
    names: &[String],
    prefix: &str,
    alive: impl Fn(u32) -> bool,
) -> Vec<(u32, Vec<String>)> {
    let bare = prefix.trim_start_matches('/');
    let mut found: Vec<(u32, Vec<String>)> = Vec::new();
    for n in names {
        let Some((pid, _)) = n.strip_prefix(bare).and_then(split_owner) else {
            continue;
        };
        if alive(pid) {
            continue;
        }
        let name = format!("/{n}");
        match found.iter_mut().find(|(p, _)| *p == pid) {
            Some((_, v)) => v.push(name),
            None => found.push((pid, vec![name])),
        }
    }
    for (_, v) in &mut found {
        v.sort();
    }
    found.sort();
    found
}

/// The owner's pid at the start of `rest` (a queue name after its family's prefix) and what
/// follows it: nothing, or `-…`. `None` unless the pid is plain decimal without a leading 0.
pub(crate) fn split_owner(rest: &str) -> Option<(u32, &str)> {
    let digits = rest.split('-').next().unwrap_or("");
    let ok = digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
    let pid = digits.parse().ok().filter(|_| ok)?;
    Some((pid, &rest[digits.len()..]))
}

/// Removes the queues that coordinators killed outright left behind: those named
/// `{prefix}{pid}…` (see [`orphans_among`]) whose process no longer exists. Returns what was
/// removed, by pid; nothing when the mqueue file system is not mounted (no way to list).
pub fn remove_orphans(prefix: &str) -> Vec<(u32, Vec<String>)> {
    let Some(dir) = mount_point() else {
        return Vec::new();
    };
    let names: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    let mut found = orphans_among(&names, prefix, alive);
    for (_, v) in &mut found {
        v.retain(|name| mq_unlink(name.as_str()).is_ok());
    }
    found.retain(|(_, v)| !v.is_empty());
    found
}
