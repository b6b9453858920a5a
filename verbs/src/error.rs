//! Typed errors of the safe verbs layer.
//!
//! Every failed verb becomes a [`VerbsError`] that names the verb, the errno and — where we know
//! one — what a person should do about it. Binaries wrap these in `anyhow` with the step that was
//! running; the library never prints.
//!
//! Where that advice sends a person to a program (the one that lists a device's limits, the way
//! to get a device), the program built on this layer names its own ([`set_advice`]): this crate
//! knows the verbs, not the tools around them.

use std::fmt;
use std::sync::OnceLock;
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

/// The programs the errors' advice sends a person to. A program built on this layer names its own
/// once, when it starts ([`set_advice`]); one that does not gets rdma-core's ([`Advice::RDMA_CORE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advice {
    /// The program that lists a device's limits (`max_cqe`, `max_qp_wr`, `max_inline_data`, …)
    /// and its GID table.
    pub devinfo: &'static str,
    /// How to get an RDMA device on a machine without one, after "no RDMA devices …; ".
    pub get_a_device: &'static str,
    /// Somewhere else to run when this machine has no connection manager, after "… on a kernel
    /// with RDMA, or use ", if the program has one.
    pub elsewhere: Option<&'static str>,
}

impl Advice {
    /// What rdma-core itself offers: `ibv_devinfo -v`, and creating a SoftRoCE device by hand.
    pub const RDMA_CORE: Advice = Advice {
        devinfo: "ibv_devinfo -v",
        get_a_device: "to get one: load the driver of an RDMA NIC, or on a kernel with the \
                       rdma_rxe module create a SoftRoCE device on a netdev \
                       (rdma link add rxe0 type rxe netdev NETDEV)",
        elsewhere: None,
    };
}

static ADVICE: OnceLock<Advice> = OnceLock::new();

/// Names the programs this process's errors send a person to. The first call wins (a program
/// makes it once, as it starts); returns whether this call was it.
pub fn set_advice(advice: Advice) -> bool {
    ADVICE.set(advice).is_ok()
}

/// The programs this process's errors send a person to: [`set_advice`]'s, else
/// [`Advice::RDMA_CORE`].
pub fn advice() -> &'static Advice {
    ADVICE.get().unwrap_or(&Advice::RDMA_CORE)
}

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
        ("ibv_create_cq" | "ibv_create_qp", Errno::ENOMEM) => format!(
            "out of resources: ask for fewer entries (see max_cqe / max_qp_wr in {}) or raise \
             the locked-memory limit (ulimit -l)",
            advice().devinfo
        ),
        ("ibv_create_qp", Errno::EINVAL) => format!(
            "a requested capability exceeds what the device grants: compare max_send_wr, \
             max_recv_wr, max_sge and max_inline_data with {}",
            advice().devinfo
        ),
        ("ibv_modify_qp(RTR)", Errno::EINVAL) => format!(
            "the path attributes were refused: check the remote QPN, the path MTU (not above the \
             port's active MTU) and the GID index ({} lists the GID table)",
            advice().devinfo
        ),
        ("ibv_modify_qp(RTR)", Errno::ETIMEDOUT | Errno::ENETUNREACH | Errno::EHOSTUNREACH) => {
            "the remote GID is not reachable from this port: with two SoftRoCE devices in one \
             network namespace set net.ipv4.conf.*.accept_local=1 and rp_filter=0"
                .into()
        }
        ("ibv_post_send", Errno::ENOMEM) => {
            "the work queue is full: poll completions before posting more, or create the QP \
             with a deeper queue (mlx5 also says ENOMEM for an inline payload larger than the \
             QP's max_inline_data)"
                .into()
        }
        ("ibv_post_recv", Errno::ENOMEM) => {
            "the work queue is full: poll completions before posting more, or create the QP \
             with a deeper queue"
                .into()
        }
        ("ibv_post_send", Errno::EINVAL) => {
            "the work request was refused: an inline payload larger than the QP's \
             max_inline_data (rxe; mlx5 says ENOMEM), too many SGEs, an opcode the QP type does not support, or an \
             atomic whose remote address is not 8-byte aligned"
                .into()
        }
        ("ibv_destroy_cq", Errno::EBUSY) => {
            "the CQ is still used by a QP: destroy the QP first".into()
        }
        ("ibv_get_device_list", Errno::ENOSYS) => {
            format!("this kernel has no RDMA support; {}", advice().get_a_device)
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
                 support or no RDMA driver is loaded; {}",
                errno.desc(),
                errno,
                advice().get_a_device
            ),
            VerbsError::NoDevices => {
                write!(
                    f,
                    "no RDMA devices found (the device list is empty); {}",
                    advice().get_a_device
                )
            }
            VerbsError::DeviceNotFound { name, available } => {
                write!(f, "RDMA device '{name}' not found; ")?;
                if available.is_empty() {
                    write!(f, "there are no devices; {}", advice().get_a_device)
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

    /// Without a program's advice (no test here sets one), the errors send a person to
    /// rdma-core's tools.
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
            assert!(s.ends_with(Advice::RDMA_CORE.get_a_device), "{s}");
            assert!(
                s.contains("rdma link add rxe0 type rxe netdev NETDEV"),
                "{s}"
            );
        }
        let s = VerbsError::call("ibv_create_qp", Errno::EINVAL).to_string();
        assert!(
            s.ends_with("max_sge and max_inline_data with ibv_devinfo -v"),
            "{s}"
        );
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
