//! Typed errors of the safe verbs layer.
//!
//! Every failed verb becomes a [`VerbsError`] that names the verb, the errno and — where we know
//! one — what a person should do about it. Binaries wrap these in `anyhow` with the step that was
//! running; the library never prints.

use std::fmt;
use std::time::Duration;

use nix::errno::Errno;

use super::attrs::PortState;
use super::wc::WcStatus;

/// The result type of the safe verbs layer.
pub type Result<T> = std::result::Result<T, VerbsError>;

/// What went wrong in a verbs call, with enough context to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerbsError {
    /// `ibv_get_device_list` returned NULL: the kernel has no RDMA support (usually `ENOSYS`).
    NoRdmaSupport { errno: Errno },
    /// The device list was empty: RDMA is there but no device is registered.
    NoDevices,
    /// A device named on the command line does not exist.
    DeviceNotFound {
        name: String,
        available: Vec<String>,
    },
    /// A verb returned an error.
    Call {
        verb: &'static str,
        errno: Errno,
        hint: Option<String>,
    },
    /// A work request completed with an error status. Only these fields of a failed
    /// completion are defined (`ibv_poll_cq(3)`): its opcode is not, so it is not kept.
    Completion {
        status: WcStatus,
        wr_id: u64,
        vendor_err: u32,
        qp_num: u32,
    },
    /// A port a tool was about to use is not ACTIVE (its link is down, or it is still
    /// initializing): nothing sent on it would arrive.
    PortNotActive {
        device: String,
        port: u8,
        state: PortState,
    },
    /// A wait (for a completion or an event) ran out of time.
    Timeout { what: String, after: Duration },
    /// An argument was refused before any verb was called.
    InvalidArgument(String),
}

impl VerbsError {
    /// Whether the command line asked for what this machine does not have — a device by
    /// name, a port, a GID index ([`VerbsError::DeviceNotFound`],
    /// [`VerbsError::InvalidArgument`]): a usage error (exit 2), not a run that failed.
    pub fn is_bad_argument(&self) -> bool {
        matches!(
            self,
            VerbsError::DeviceNotFound { .. } | VerbsError::InvalidArgument(_)
        )
    }

    /// Builds a [`VerbsError::Call`] from an errno value and adds the hint we know for it.
    pub fn call(verb: &'static str, errno: Errno) -> Self {
        VerbsError::Call {
            verb,
            errno,
            hint: hint_for(verb, errno),
        }
    }

    /// Builds a [`VerbsError::Call`] from the thread's current `errno`.
    pub fn last(verb: &'static str) -> Self {
        let errno = Errno::last();
        // Some providers return NULL without setting errno; say so rather than print "Success".
        let errno = if errno == Errno::UnknownErrno {
            Errno::EIO
        } else {
            errno
        };
        Self::call(verb, errno)
    }

    /// `Ok` for a zero return, else the thread's `errno` as [`VerbsError::last`] (the
    /// librdmacm convention: -1 and `errno`).
    pub(crate) fn check_last(verb: &'static str, ret: i32) -> Result<()> {
        if ret != 0 {
            return Err(Self::last(verb));
        }
        Ok(())
    }

    /// `Ok` for a zero return, else [`VerbsError::from_ret`] (the libibverbs convention: the
    /// errno returned).
    pub(crate) fn check_ret(verb: &'static str, ret: i32) -> Result<()> {
        if ret != 0 {
            return Err(Self::from_ret(verb, ret));
        }
        Ok(())
    }

    /// Builds a [`VerbsError::Call`] from a verb's non-zero return value. Verbs such as
    /// `ibv_post_send` return the errno directly; a few return -1 and set `errno`.
    pub fn from_ret(verb: &'static str, ret: i32) -> Self {
        if ret < 0 {
            Self::last(verb)
        } else {
            Self::call(verb, Errno::from_raw(ret))
        }
    }

    /// The errno of a failed call, if this is one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            VerbsError::Call { errno, .. } | VerbsError::NoRdmaSupport { errno } => Some(*errno),
            _ => None,
        }
    }

    /// The work-completion status, if this error is a failed completion.
    pub fn wc_status(&self) -> Option<WcStatus> {
        match self {
            VerbsError::Completion { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// How to get an RDMA device on a machine without one; shared by every "no device" message.
pub const HOW_TO_GET_A_DEVICE: &str = "to get one: on a kernel with the rdma_rxe module run \
`scripts/softroce-up` (SoftRoCE on a netdev), or on any machine run `scripts/softroce-vm shell` \
(a QEMU guest with two SoftRoCE devices)";

fn memlock_hint() -> String {
    use nix::sys::resource::{getrlimit, Resource};
    let limit = match getrlimit(Resource::RLIMIT_MEMLOCK) {
        Ok((soft, _)) if soft == nix::sys::resource::RLIM_INFINITY => "unlimited".to_string(),
        Ok((soft, _)) => format!("{} KiB", soft / 1024),
        Err(_) => "unknown".to_string(),
    };
    format!(
        "registered memory is pinned and counts against the locked-memory limit, which is \
         {limit} (ulimit -l); raise it (`ulimit -l unlimited`, or memlock in \
         /etc/security/limits.conf) or run as root"
    )
}

/// What we know to say about an errno from a given verb.
fn hint_for(verb: &str, errno: Errno) -> Option<String> {
    let hint = match (verb, errno) {
        ("ibv_reg_mr", Errno::ENOMEM) | ("ibv_reg_mr", Errno::EAGAIN) => memlock_hint(),
        ("ibv_reg_mr", Errno::EINVAL) => {
            "the buffer or the access flags are invalid: REMOTE_WRITE and REMOTE_ATOMIC also \
             need LOCAL_WRITE"
                .into()
        }
        ("ibv_create_cq" | "ibv_create_qp", Errno::ENOMEM) => {
            "out of resources: ask for fewer entries (see max_cqe / max_qp_wr in vl_devinfo) or \
             raise the locked-memory limit (ulimit -l)"
                .into()
        }
        ("ibv_create_qp", Errno::EINVAL) => {
            "a requested capability exceeds what the device grants: compare max_send_wr, \
             max_recv_wr, max_sge and max_inline_data with vl_devinfo"
                .into()
        }
        ("ibv_modify_qp(RTR)", Errno::EINVAL) => {
            "the path attributes were refused: check the remote QPN, the path MTU (not above the \
             port's active MTU) and the GID index (vl_devinfo lists the GID table)"
                .into()
        }
        ("ibv_modify_qp(RTR)", Errno::ETIMEDOUT | Errno::ENETUNREACH | Errno::EHOSTUNREACH) => {
            "the remote GID is not reachable from this port: with two SoftRoCE devices in one \
             network namespace set net.ipv4.conf.*.accept_local=1 and rp_filter=0"
                .into()
        }
        ("ibv_post_send", Errno::ENOMEM) | ("ibv_post_recv", Errno::ENOMEM) => {
            "the work queue is full: poll completions before posting more, or create the QP \
             with a deeper queue"
                .into()
        }
        ("ibv_post_send", Errno::EINVAL) => {
            "the work request was refused: an inline payload larger than the QP's \
             max_inline_data, too many SGEs, an opcode the QP type does not support, or an \
             atomic whose remote address is not 8-byte aligned"
                .into()
        }
        ("ibv_destroy_cq", Errno::EBUSY) => {
            "the CQ is still used by a QP: destroy the QP first".into()
        }
        ("ibv_get_device_list", Errno::ENOSYS) => {
            format!("this kernel has no RDMA support; {HOW_TO_GET_A_DEVICE}")
        }
        ("ibv_open_device", Errno::EACCES | Errno::EPERM) => {
            "no permission to open /dev/infiniband/uverbs*: run as root or join the rdma group"
                .into()
        }
        (_, Errno::EPERM | Errno::EACCES) => "permission denied: run as root".into(),
        _ => return None,
    };
    Some(hint)
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::NoRdmaSupport { errno } => write!(
                f,
                "no RDMA devices: ibv_get_device_list failed: {} ({:?}); this kernel has no RDMA \
                 support or no RDMA driver is loaded; {HOW_TO_GET_A_DEVICE}",
                errno.desc(),
                errno
            ),
            VerbsError::NoDevices => {
                write!(
                    f,
                    "no RDMA devices found (the device list is empty); {HOW_TO_GET_A_DEVICE}"
                )
            }
            VerbsError::DeviceNotFound { name, available } => {
                write!(f, "RDMA device '{name}' not found; ")?;
                if available.is_empty() {
                    write!(f, "there are no devices; {HOW_TO_GET_A_DEVICE}")
                } else {
                    write!(f, "available: {}", available.join(", "))
                }
            }
            VerbsError::Call { verb, errno, hint } => {
                write!(f, "{verb} failed: {} ({errno:?})", errno.desc())?;
                if let Some(hint) = hint {
                    write!(f, " — {hint}")?;
                }
                Ok(())
            }
            VerbsError::Completion {
                status,
                wr_id,
                vendor_err,
                qp_num,
            } => {
                write!(
                    f,
                    "work request {wr_id} on QP {qp_num:#x} completed with {status} \
                     (vendor error {vendor_err:#x})"
                )?;
                if let Some(hint) = status.hint() {
                    write!(f, " — {hint}")?;
                }
                Ok(())
            }
            VerbsError::PortNotActive {
                device,
                port,
                state,
            } => write!(
                f,
                "{device} port {port} is {state}, not ACTIVE: check the link (rdma link show; for \
                 SoftRoCE the netdev must be up)"
            ),
            VerbsError::Timeout { what, after } => {
                write!(
                    f,
                    "timed out after {:.1} s waiting for {what}",
                    after.as_secs_f64()
                )
            }
            VerbsError::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
        }
    }
}

impl std::error::Error for VerbsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_error_names_verb_errno_and_hint() {
        let e = VerbsError::call("ibv_reg_mr", Errno::ENOMEM);
        let s = e.to_string();
        assert!(
            s.starts_with("ibv_reg_mr failed: Out of memory (ENOMEM)"),
            "{s}"
        );
        assert!(s.contains("ulimit -l"), "{s}");
        assert_eq!(e.errno(), Some(Errno::ENOMEM));
    }

    #[test]
    fn from_ret_uses_positive_return_as_errno() {
        let e = VerbsError::from_ret("ibv_post_send", 12);
        assert_eq!(e.errno(), Some(Errno::ENOMEM));
        assert!(e.to_string().contains("work queue is full"));
    }

    #[test]
    fn no_device_messages_say_how_to_get_one() {
        for e in [
            VerbsError::NoRdmaSupport {
                errno: Errno::ENOSYS,
            },
            VerbsError::NoDevices,
            VerbsError::DeviceNotFound {
                name: "mlx5_0".into(),
                available: vec![],
            },
        ] {
            let s = e.to_string();
            assert!(s.contains("scripts/softroce-vm"), "{s}");
            assert!(s.contains("scripts/softroce-up"), "{s}");
        }
        let s = VerbsError::DeviceNotFound {
            name: "x".into(),
            available: vec!["rxe0".into()],
        }
        .to_string();
        assert!(s.contains("available: rxe0"), "{s}");
    }

    #[test]
    fn completion_error_names_the_status() {
        let e = VerbsError::Completion {
            status: WcStatus::REM_ACCESS_ERR,
            wr_id: 7,
            vendor_err: 0,
            qp_num: 0x11,
        };
        let s = e.to_string();
        assert!(s.contains("IBV_WC_REM_ACCESS_ERR"), "{s}");
        assert!(s.contains("rkey"), "{s}");
    }

    #[test]
    fn port_not_active_says_what_to_check() {
        let s = VerbsError::PortNotActive {
            device: "rxe1".into(),
            port: 1,
            state: PortState::DOWN,
        }
        .to_string();
        assert!(s.starts_with("rxe1 port 1 is DOWN, not ACTIVE"), "{s}");
        assert!(s.contains("rdma link show"), "{s}");
    }
}
