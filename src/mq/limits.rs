//! The kernel's limits on message queues, and errors that name the limit that refused.

use std::fmt;
use std::fs;
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::resource::{getrlimit, Resource};

use super::msg::{CodecError, MQ_PRIO_MAX};

/// The directory of the message-queue limits (`mq_overview(7)`, "/proc interfaces").
pub const PROC_DIR: &str = "/proc/sys/fs/mqueue";

/// The limits that decide whether `mq_open` may create a queue; `None` where unreadable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limits {
    /// Largest `mq_maxmsg` an unprivileged (no `CAP_SYS_RESOURCE`) process may ask for.
    pub msg_max: Option<u64>,
    /// Largest `mq_msgsize` likewise.
    pub msgsize_max: Option<u64>,
    /// Queues that may exist in this IPC namespace (beyond it: ENOSPC).
    pub queues_max: Option<u64>,
    /// `mq_maxmsg` of a queue created without attributes.
    pub msg_default: Option<u64>,
    /// `mq_msgsize` of a queue created without attributes.
    pub msgsize_default: Option<u64>,
    /// `RLIMIT_MSGQUEUE` (`ulimit -q`): bytes of queues one user may own (beyond it: EMFILE).
    pub rlimit_bytes: Option<u64>,
}

impl Limits {
    /// Reads [`PROC_DIR`] and `getrlimit(RLIMIT_MSGQUEUE)`.
    pub fn read() -> Limits {
        Limits::read_from(Path::new(PROC_DIR))
    }

    /// As [`Limits::read`], with the five files read from `dir` (for tests).
    pub fn read_from(dir: &Path) -> Limits {
        let read = |f: &str| {
            fs::read_to_string(dir.join(f))
                .ok()
                .and_then(|s| s.trim().parse().ok())
        };
        Limits {
            msg_max: read("msg_max"),
            msgsize_max: read("msgsize_max"),
            queues_max: read("queues_max"),
            msg_default: read("msg_default"),
            msgsize_default: read("msgsize_default"),
            rlimit_bytes: getrlimit(Resource::RLIMIT_MSGQUEUE)
                .ok()
                .map(|(soft, _)| soft),
        }
    }
}

/// True if this process holds `CAP_SYS_RESOURCE` in its effective set (bit 24 of `CapEff` in
/// `/proc/self/status`): then `msg_max` and `msgsize_max` do not bind it, only the kernel's
/// hard ceilings (65536 messages, 16 MiB) do. Root on a VM usually has it; root in a container
/// usually not.
pub fn has_cap_sys_resource() -> bool {
    const CAP_SYS_RESOURCE: u32 = 24;
    status_mask("CapEff").is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

/// The hexadecimal mask of `/proc/self/status` line `key` (`CapEff`, `SigIgn`, ...), or `None`
/// where it cannot be read.
pub(super) fn status_mask(key: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

/// Shows a limit, or "unknown".
fn show(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".into(), |v| v.to_string())
}

/// The bytes a queue costs against `RLIMIT_MSGQUEUE`, as Linux counts them (`ipc/mqueue.c`):
/// the messages' space plus one message header (48 bytes on 64-bit) per message and one
/// priority-tree node (48 bytes) per message up to 32768.
pub fn queue_bytes(maxmsg: usize, msgsize: usize) -> u64 {
    let (m, s) = (maxmsg as u64, msgsize as u64);
    m * s + m * 48 + m.min(u64::from(MQ_PRIO_MAX)) * 48
}

// ---------------------------------------------------------------------------------------------
// Errors

/// What went wrong with a queue; the text says what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MqError {
    /// A call failed.
    Call {
        /// The function: "mq_open", "mq_send", ...
        call: &'static str,
        /// The queue's name.
        name: String,
        errno: Errno,
        /// The whole explanation (what refused, and what to do).
        message: String,
    },
    /// Nothing arrived, or no room appeared, within the wait.
    Timeout {
        name: String,
        /// What was awaited: "a message", "room for a message".
        what: &'static str,
        after: Duration,
    },
    /// A nonblocking attempt ([`Queue::try_recv`](super::Queue::try_recv), [`Queue::try_send`](super::Queue::try_send)) found the queue empty
    /// or full.
    WouldBlock { name: String, what: &'static str },
    /// A message that could not be encoded, or received bytes that are not a message.
    Codec { name: String, err: CodecError },
    /// An argument refused before any call: the name's syntax, a size, a priority.
    Invalid(String),
}

impl MqError {
    /// The errno of a failed call.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            MqError::Call { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// True for [`MqError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, MqError::Timeout { .. })
    }
}

impl fmt::Display for MqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MqError::Call { message, .. } => f.write_str(message),
            MqError::Timeout { name, what, after } => {
                write!(f, "{name}: no {what} within {:.1} s", after.as_secs_f64())
            }
            MqError::WouldBlock { name, what } => write!(f, "{name}: {what}"),
            MqError::Codec { name, err } => write!(f, "{name}: {err}"),
            MqError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for MqError {}

/// The result of this module's calls: [`MqError`] unless said otherwise.
pub type Result<T, E = MqError> = std::result::Result<T, E>;

/// The errno's name and text, e.g. "EINVAL, Invalid argument".
fn errno_text(e: Errno) -> String {
    format!("{e:?}, {}", e.desc())
}

/// The error of a failed `mq_open(O_CREAT | O_EXCL)`: which limit refused, and what to do.
pub(crate) fn create_error(name: &str, maxmsg: usize, msgsize: usize, e: Errno) -> MqError {
    let l = Limits::read();
    let head = format!("mq_open({name}) refused maxmsg={maxmsg} msgsize={msgsize}");
    let message = match e {
        Errno::EINVAL => {
            let mut over = Vec::new();
            if l.msg_max.is_some_and(|m| maxmsg as u64 > m) {
                over.push(format!("maxmsg {maxmsg} is above msg_max"));
            }
            if l.msgsize_max.is_some_and(|m| msgsize as u64 > m) {
                over.push(format!("msgsize {msgsize} is above msgsize_max"));
            }
            let over = if over.is_empty() {
                String::new()
            } else {
                format!(" — {}", over.join(", "))
            };
            if has_cap_sys_resource() {
                format!(
                    "{head} (EINVAL): this process holds CAP_SYS_RESOURCE, so only the kernel's \
                     hard ceilings bind it (65536 messages, 16 MiB per message); \
                     {PROC_DIR}/msg_max is {} and msgsize_max is {} for everyone else",
                    show(l.msg_max),
                    show(l.msgsize_max)
                )
            } else {
                format!(
                    "{head} (EINVAL): {PROC_DIR}/msg_max is {} and msgsize_max is {} (root \
                     without CAP_SYS_RESOURCE is bound too){over}; ask for less, or raise the \
                     limit with sysctl fs.mqueue.msg_max=N / fs.mqueue.msgsize_max=N",
                    show(l.msg_max),
                    show(l.msgsize_max)
                )
            }
        }
        Errno::EMFILE => format!(
            "{head} (EMFILE): the per-user RLIMIT_MSGQUEUE (ulimit -q, {} bytes) is exhausted — \
             this queue counts {} bytes against it, and queues of this user that were never \
             unlinked count too — or the process ran out of file descriptors (ulimit -n); remove \
             stale queues (mount -t mqueue none /dev/mqueue; ls /dev/mqueue) or ask for smaller \
             queues",
            show(l.rlimit_bytes),
            queue_bytes(maxmsg, msgsize)
        ),
        Errno::ENOSPC => format!(
            "{head} (ENOSPC): {PROC_DIR}/queues_max ({}) queues already exist in this IPC \
             namespace; remove stale ones (ls /dev/mqueue once mounted) or raise \
             fs.mqueue.queues_max",
            show(l.queues_max)
        ),
        Errno::EEXIST => format!(
            "{head} (EEXIST): a queue of that name exists: a previous run crashed? remove \
             /dev/mqueue{name} (mount -t mqueue none /dev/mqueue first if needed) or pick \
             another name"
        ),
        Errno::EACCES => format!(
            "{head} (EACCES): permission denied — the name may contain a second '/' (only the \
             leading one is allowed), or the caller may not create queues here"
        ),
        Errno::ENAMETOOLONG => format!("{head} (ENAMETOOLONG): the name is longer than 255 bytes"),
        Errno::ENOMEM | Errno::ENFILE => format!(
            "{head} ({}): the system is out of memory or file descriptors",
            errno_text(e)
        ),
        other => format!("{head}: {}", errno_text(other)),
    };
    MqError::Call {
        call: "mq_open",
        name: name.into(),
        errno: e,
        message,
    }
}

/// The error of a failed `mq_open` of an existing queue.
pub(crate) fn open_error(name: &str, e: Errno) -> MqError {
    let message = match e {
        Errno::ENOENT => format!(
            "mq_open({name}) (ENOENT): no queue of that name — its creator has not created it \
             yet, or has already removed it (mq_unlink) or exited"
        ),
        Errno::EACCES => format!(
            "mq_open({name}) (EACCES): the queue's permissions deny this user (queues are \
             created mode 0600: owner only), or the name has a second '/'"
        ),
        other => format!("mq_open({name}): {}", errno_text(other)),
    };
    MqError::Call {
        call: "mq_open",
        name: name.into(),
        errno: e,
        message,
    }
}

pub(crate) fn call_error(call: &'static str, name: &str, e: Errno, hint: &str) -> MqError {
    let hint = if hint.is_empty() {
        String::new()
    } else {
        format!(" — {hint}")
    };
    MqError::Call {
        call,
        name: name.into(),
        errno: e,
        message: format!("{call}({name}): {}{hint}", errno_text(e)),
    }
}

/// Checks a queue name (`mq_overview(7)`): a leading '/', then 1 to 254 bytes with no other
/// '/' and no NUL.
pub fn check_name(name: &str) -> Result<()> {
    let rest = name.strip_prefix('/').ok_or_else(|| {
        MqError::Invalid(format!(
            "queue name '{name}' must start with '/' (e.g. /vl-demo)"
        ))
    })?;
    if rest.is_empty() || rest.len() > 254 {
        return Err(MqError::Invalid(format!(
            "queue name '{name}': 1 to 254 bytes must follow the '/'"
        )));
    }
    if rest.contains('/') || rest.contains('\0') {
        return Err(MqError::Invalid(format!(
            "queue name '{name}': no '/' (beyond the leading one) or NUL allowed"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_errors_name_the_limit() {
        let e = create_error("/q", 10, 8192, Errno::EMFILE).to_string();
        assert!(e.contains("RLIMIT_MSGQUEUE (ulimit -q, "), "{e}");
        assert!(
            e.contains(&format!("counts {} bytes", queue_bytes(10, 8192))),
            "{e}"
        );
        let e = create_error("/q", 1, 1, Errno::ENOSPC).to_string();
        assert!(e.contains("/proc/sys/fs/mqueue/queues_max ("), "{e}");
        let e = create_error("/q", 1, 1, Errno::EACCES).to_string();
        assert!(e.contains("second '/'"), "{e}");
    }

    #[test]
    fn queue_bytes_matches_the_measured_budget() {
        // Nine 10×8192 queues fit 819200 bytes, the tenth does not (measured here).
        let q = queue_bytes(10, 8192);
        assert!(9 * q <= 819_200 && 10 * q > 819_200, "{q}");
    }
}
