//! Asynchronous events (`ibv_get_async_event(3)`, `ibv_ack_async_event(3)`): what the device
//! reports outside any completion — a port going down or up, a QP or CQ in a fatal error, an
//! SRQ whose receives ran low. Every context has one event queue, read through its `async_fd`.
//!
//! [`Context::get_async_event`] waits (bounded) for one event, copies what it names, and
//! acknowledges it before returning, so no event is ever left unacknowledged (an object with
//! an unacked event cannot be destroyed: `ibv_destroy_qp` and friends would wait for ever).

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rdma_sys::{ibv_ack_async_event, ibv_async_event, ibv_get_async_event};

use super::context::Context;
use super::error::{Result, VerbsError};
use super::fd::{set_nonblocking, wait_readable};

/// The kind of an asynchronous event (`enum ibv_event_type`), kept as its number so that a
/// kind this build does not know is reported rather than misread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEventKind(pub u32);

impl AsyncEventKind {
    pub const CQ_ERR: AsyncEventKind = AsyncEventKind(0);
    pub const QP_FATAL: AsyncEventKind = AsyncEventKind(1);
    pub const QP_REQ_ERR: AsyncEventKind = AsyncEventKind(2);
    pub const QP_ACCESS_ERR: AsyncEventKind = AsyncEventKind(3);
    pub const COMM_EST: AsyncEventKind = AsyncEventKind(4);
    pub const SQ_DRAINED: AsyncEventKind = AsyncEventKind(5);
    pub const PATH_MIG: AsyncEventKind = AsyncEventKind(6);
    pub const PATH_MIG_ERR: AsyncEventKind = AsyncEventKind(7);
    pub const DEVICE_FATAL: AsyncEventKind = AsyncEventKind(8);
    pub const PORT_ACTIVE: AsyncEventKind = AsyncEventKind(9);
    pub const PORT_ERR: AsyncEventKind = AsyncEventKind(10);
    pub const LID_CHANGE: AsyncEventKind = AsyncEventKind(11);
    pub const PKEY_CHANGE: AsyncEventKind = AsyncEventKind(12);
    pub const SM_CHANGE: AsyncEventKind = AsyncEventKind(13);
    pub const SRQ_ERR: AsyncEventKind = AsyncEventKind(14);
    pub const SRQ_LIMIT_REACHED: AsyncEventKind = AsyncEventKind(15);
    pub const QP_LAST_WQE_REACHED: AsyncEventKind = AsyncEventKind(16);
    pub const CLIENT_REREGISTER: AsyncEventKind = AsyncEventKind(17);
    pub const GID_CHANGE: AsyncEventKind = AsyncEventKind(18);
    pub const WQ_FATAL: AsyncEventKind = AsyncEventKind(19);

    const NAMES: [&'static str; 20] = [
        "IBV_EVENT_CQ_ERR",
        "IBV_EVENT_QP_FATAL",
        "IBV_EVENT_QP_REQ_ERR",
        "IBV_EVENT_QP_ACCESS_ERR",
        "IBV_EVENT_COMM_EST",
        "IBV_EVENT_SQ_DRAINED",
        "IBV_EVENT_PATH_MIG",
        "IBV_EVENT_PATH_MIG_ERR",
        "IBV_EVENT_DEVICE_FATAL",
        "IBV_EVENT_PORT_ACTIVE",
        "IBV_EVENT_PORT_ERR",
        "IBV_EVENT_LID_CHANGE",
        "IBV_EVENT_PKEY_CHANGE",
        "IBV_EVENT_SM_CHANGE",
        "IBV_EVENT_SRQ_ERR",
        "IBV_EVENT_SRQ_LIMIT_REACHED",
        "IBV_EVENT_QP_LAST_WQE_REACHED",
        "IBV_EVENT_CLIENT_REREGISTER",
        "IBV_EVENT_GID_CHANGE",
        "IBV_EVENT_WQ_FATAL",
    ];

    /// The verbs name, e.g. `IBV_EVENT_PORT_ERR`.
    pub fn name(self) -> String {
        Self::NAMES
            .get(self.0 as usize)
            .map_or_else(|| format!("IBV_EVENT_{}", self.0), |n| (*n).to_string())
    }

    /// What the event's element is (which union member `ibv_get_async_event` filled).
    fn element(self) -> Element {
        match self.0 {
            0 => Element::Cq,
            1..=7 | 16 => Element::Qp,
            14 | 15 => Element::Srq,
            9..=13 | 17 | 18 => Element::Port,
            19 => Element::Wq,
            _ => Element::Device,
        }
    }
}

crate::display_by_name!(AsyncEventKind);

#[derive(Clone, Copy)]
enum Element {
    Cq,
    Qp,
    Srq,
    Wq,
    Port,
    Device,
}

/// One asynchronous event, copied out of `struct ibv_async_event` (and already acknowledged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    pub kind: AsyncEventKind,
    /// The port, for port events (`PORT_ACTIVE`, `PORT_ERR`, `GID_CHANGE`, …).
    pub port_num: Option<u8>,
    /// The QP number, for QP events (`QP_FATAL`, `COMM_EST`, `QP_LAST_WQE_REACHED`, …).
    pub qp_num: Option<u32>,
    /// The SRQ, for SRQ events: compare with [`super::Srq::id`].
    pub srq: Option<usize>,
    /// The CQ, for `CQ_ERR`: an opaque identity.
    pub cq: Option<usize>,
}

impl std::fmt::Display for AsyncEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.kind)?;
        if let Some(p) = self.port_num {
            write!(f, " on port {p}")?;
        }
        if let Some(q) = self.qp_num {
            write!(f, " on QP {q:#x}")?;
        }
        if self.srq.is_some() {
            write!(f, " on an SRQ")?;
        }
        if self.cq.is_some() {
            write!(f, " on a CQ")?;
        }
        Ok(())
    }
}

impl Context {
    /// The sysfs directory of the device's user-verbs character device (`ibv_device::dev_path`,
    /// e.g. `/sys/class/infiniband_verbs/uverbs1`).
    pub fn uverbs_sysfs_path(&self) -> PathBuf {
        // SAFETY: the context is open, so its device is; `dev_path` is a NUL-terminated array
        // inside it (libibverbs fills it at discovery), copied before the borrow ends.
        let path = unsafe { CStr::from_ptr((*(*self.inner.ptr).device).dev_path.as_ptr()) };
        PathBuf::from(path.to_string_lossy().into_owned())
    }

    /// Whether the kernel has begun to remove the device (`rdma link delete`, its driver
    /// unloading): it deletes the user-verbs character device first, so its sysfs directory
    /// ([`Context::uverbs_sysfs_path`]) is gone. A driver that can detach its user contexts
    /// then reports `IBV_EVENT_DEVICE_FATAL`; one that cannot (rxe) sends nothing and the
    /// removal waits until every process has closed the device — a program that watches for
    /// this ends its work instead of holding the removal up. Meaningful only where the node
    /// was there when the device was opened (sysfs mounted): compare with that first look.
    pub fn being_removed(&self) -> bool {
        let p = self.uverbs_sysfs_path();
        !p.as_os_str().is_empty() && !p.exists()
    }

    /// The file descriptor of the context's async event queue (`ibv_context::async_fd`).
    pub fn async_fd(&self) -> i32 {
        // SAFETY: the context is open for as long as `self` lives.
        unsafe { (*self.inner.ptr).async_fd }
    }

    /// The context's async event queue as a borrowed descriptor, for a thread that sleeps in
    /// one `poll(2)` on it and on other descriptors (e.g. one its owner uses to stop it), then
    /// takes the event with [`Context::get_async_event`] and a zero timeout.
    pub fn async_event_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: async_fd stays open while the context is, and the borrow cannot outlive it.
        unsafe { BorrowedFd::borrow_raw(self.async_fd()) }
    }

    /// Waits at most `timeout` for the next asynchronous event of this device
    /// (`poll(2)` on `async_fd`, then `ibv_get_async_event(3)`), copies it, acknowledges it
    /// (`ibv_ack_async_event(3)`) and returns it; `Ok(None)` if none came in time.
    ///
    /// The first call makes `async_fd` non-blocking (as `ibv_get_async_event(3)` describes), so
    /// an event taken meanwhile by another thread cannot turn the call into an endless wait.
    /// Several threads may call this; each event goes to one of them.
    pub fn get_async_event(&self, timeout: Duration) -> Result<Option<AsyncEvent>> {
        // SAFETY: async_fd stays open while the context is.
        let fd = unsafe { BorrowedFd::borrow_raw(self.async_fd()) };
        set_nonblocking(fd, "fcntl(async_fd, O_NONBLOCK)")?;
        let deadline = crate::fdwait::deadline_after(timeout);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if !wait_readable(fd, left, "poll(async_fd)")? {
                return Ok(None);
            }
            let mut ev = MaybeUninit::<ibv_async_event>::zeroed();
            // SAFETY: the context is open; `ev` is a valid out-pointer; the fd is non-blocking,
            // so this returns at once.
            let ret = unsafe { ibv_get_async_event(self.inner.ptr, ev.as_mut_ptr()) };
            if ret != 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock {
                    // Another thread took it; wait again until the deadline.
                    if Instant::now() >= deadline {
                        return Ok(None);
                    }
                    continue;
                }
                return Err(VerbsError::last("ibv_get_async_event"));
            }
            let p = ev.as_mut_ptr();
            // SAFETY: the call filled the struct. The event type is read as its raw number, not
            // as the bindgen enum, so an unknown kind cannot be an invalid enum value.
            let kind =
                AsyncEventKind(unsafe { std::ptr::addr_of!((*p).event_type).cast::<u32>().read() });
            // SAFETY: the union was zeroed and filled by the call; which member is valid
            // follows from the kind (ibv_get_async_event(3)), and each read below reads that one.
            let element = unsafe { &(*p).element };
            let mut out = AsyncEvent {
                kind,
                port_num: None,
                qp_num: None,
                srq: None,
                cq: None,
            };
            match kind.element() {
                // SAFETY: for port events the union holds the port number.
                Element::Port => out.port_num = Some(unsafe { element.port_num } as u8),
                Element::Qp => {
                    // SAFETY: for QP events the union holds the QP, which stays valid until
                    // the event is acked below (ibv_destroy_qp waits for that).
                    let qp = unsafe { element.qp };
                    if !qp.is_null() {
                        // SAFETY: as above.
                        out.qp_num = Some(unsafe { (*qp).qp_num });
                    }
                }
                // SAFETY: for SRQ events the union holds the SRQ; only its address is kept.
                Element::Srq => out.srq = Some(unsafe { element.srq } as usize),
                // SAFETY: for CQ events the union holds the CQ; only its address is kept.
                Element::Cq => out.cq = Some(unsafe { element.cq } as usize),
                Element::Wq | Element::Device => {}
            }
            // SAFETY: the event was taken above and is acked exactly once; nothing read from
            // it is used afterwards except the copies in `out`.
            unsafe { ibv_ack_async_event(p) };
            return Ok(Some(out));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_verbs_names_and_unknown_ones_a_number() {
        assert_eq!(AsyncEventKind::PORT_ERR.name(), "IBV_EVENT_PORT_ERR");
        assert_eq!(
            AsyncEventKind::SRQ_LIMIT_REACHED.name(),
            "IBV_EVENT_SRQ_LIMIT_REACHED"
        );
        assert_eq!(AsyncEventKind(42).name(), "IBV_EVENT_42");
    }

    #[test]
    fn display_names_the_element() {
        let e = AsyncEvent {
            kind: AsyncEventKind::PORT_ACTIVE,
            port_num: Some(1),
            qp_num: None,
            srq: None,
            cq: None,
        };
        assert_eq!(e.to_string(), "IBV_EVENT_PORT_ACTIVE on port 1");
    }
}
