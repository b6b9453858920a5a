//! The device's asynchronous events while a `vl_*` tool runs: a port that goes down, a QP or
//! CQ in a fatal error, a device that fails or is being removed.
//!
//! Without this, such a fault is noticed only through its consequences — completions that fail
//! after every retry (seconds to minutes with a long `-u`), or a peer that falls silent. [`watch`]
//! makes the run look, on its own thread, at the context's event queue
//! ([`Context::get_async_event`], which acknowledges each event at once) and at the kernel's
//! announcement of the removal of the device's user-verbs node ([`removal_of`]; rxe sends no
//! event then, and `rdma link delete` would wait for the run to end): a loop that spins looks as
//! it looks at its peer ([`RunFault::check`], at most every [`LOOK_AT_MOST`]); a wait on the
//! peer waits on the event queue's and the announcements' descriptors too and looks when one is
//! ready ([`verbs_lab::signals::look_while_waiting`]); a server waiting for its client, and a
//! client for its server, look between their waits (`crate::conn::listen`, `crate::run`). No
//! thread of its own: a second thread would cost every post of the run (see
//! [`verbs_lab::signals`]). An event that ends the run
//! ([`ends_run`]) is recorded for the run that started the watch ([`RunFault`], its own: a
//! `--serve --concurrent` server runs several at once), and that run's out-of-band socket is
//! woken through the tool's run control ([`crate::signals::Control::wake_reader_of`]), so a
//! wait on the peer returns at once. The run's error path then sends the peer an ERROR naming the
//! event (before the QPs are torn down) and the tool exits 1 with the event as its error: "port
//! 1 of rxe1 went down (IBV_EVENT_PORT_ERR) …".

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use verbs_lab::signals::Looking;
use verbs_lab::verbs::{AsyncEvent, AsyncEventKind, Context};

use crate::signals::Control;

/// How often a wait reads sysfs for the device's removal where it cannot hear the kernel
/// announce it (see [`watch`]).
pub const SLICE: Duration = Duration::from_millis(100);
/// A spinning loop looks at its device's queues at most this often: every fifth of its looks at
/// a waiting peer (10 ms), and each of those of a bandwidth loop whose completions flow
/// (100 ms; half of it, so that timers set a few microseconds apart never skip one).
pub const LOOK_AT_MOST: Duration = Duration::from_millis(50);

/// The first event that ended one run, and what the run looks at to find it ([`watch`]); read
/// by the run ([`EventWatch::fault`]). Each run has its own — a `--serve --concurrent` server
/// runs several at once, and one client's QP in error must not stop the others.
#[derive(Clone, Default)]
pub struct RunFault(Arc<Watched>);

#[derive(Default)]
struct Watched {
    fault: Mutex<Option<DeviceEvent>>,
    /// The device's queues, while the [`EventWatch`] lives.
    source: Mutex<Option<Source>>,
}

impl std::fmt::Debug for RunFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RunFault").field(&self.fatal()).finish()
    }
}

impl RunFault {
    /// The event that ended the run, if one came.
    pub fn fatal(&self) -> Option<DeviceEvent> {
        self.0.fault.lock().ok().and_then(|f| f.clone())
    }

    /// Looks at the device's queues now, whenever they were looked at last, and returns the
    /// event that ended the run, if one came: what a run that failed asks before it names its
    /// error, so that its own port going down is named rather than the peer's report of its own.
    pub fn fatal_now(&self) -> Option<DeviceEvent> {
        self.look_now();
        self.fatal()
    }

    /// Looks at the device's queues (without waiting; at most every [`LOOK_AT_MOST`]), then fails
    /// with the event that ended the run, once one came: loops call it as they look at the
    /// peer (through [`crate::proto::Channel::check_stop`]).
    pub fn check(&self) -> Result<(), DeviceEvent> {
        let _ = self.look();
        match self.fatal() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Takes what the device's queues hold, without waiting; records an event that ends the
    /// run. Quiet while no [`EventWatch`] lives, or after its queue failed. Returns whether
    /// there is still something to look at.
    fn look(&self) -> bool {
        let Ok(mut source) = self.0.source.lock() else {
            return false;
        };
        let Some(src) = source.as_mut() else {
            return false;
        };
        let found = src.take();
        if let Some(Err(())) = found {
            *source = None; // the queue failed and was named once; the completions tell the rest
            return false;
        }
        let (control, run) = (src.control.clone(), src.run);
        drop(source);
        if let Some(Ok(ev)) = found {
            self.record(&control, run, ev);
        }
        true
    }

    /// [`RunFault::look`] whenever it was looked last: a wait woken by the queues' descriptors.
    fn look_now(&self) -> bool {
        if let Ok(mut source) = self.0.source.lock() {
            if let Some(src) = source.as_mut() {
                src.next_look = Instant::now();
            }
        }
        self.look()
    }

    /// Records `ev` (the run's first only) and wakes the blocked reads of the run on thread
    /// `run` (its socket, as watched by the tool's `control`).
    fn record(&self, control: &Control, run: ThreadId, ev: DeviceEvent) {
        if let Ok(mut f) = self.0.fault.lock() {
            if f.is_some() {
                return;
            }
            *f = Some(ev);
        }
        control.wake_reader_of(run);
    }
}

/// What a run looks at for its device's events (see [`watch`]).
struct Source {
    ctx: Context,
    port: u8,
    device: String,
    /// The device's user-verbs node (`uverbs1`), whose removal the kernel announces.
    node: String,
    /// Whether the node was there (no sysfs in a container: nothing can go away).
    removable: bool,
    /// The kernel's announcements, where they can be heard.
    uevents: Option<OwnedFd>,
    /// When the queues are looked at next by a spinning loop ([`LOOK_AT_MOST`]).
    next_look: Instant,
    control: Control,
    run: ThreadId,
}

impl Source {
    /// The first event that ends the run among what waits now (`Err` once the queue itself
    /// failed, said on stderr); nothing before [`Source::next_look`].
    fn take(&mut self) -> Option<Result<DeviceEvent, ()>> {
        let now = Instant::now();
        if now < self.next_look {
            return None;
        }
        self.next_look = now + LOOK_AT_MOST;
        let removed = || {
            Some(Ok(DeviceEvent {
                device: self.device.clone(),
                cause: Cause::Removed,
            }))
        };
        let mut fds = vec![PollFd::new(self.ctx.async_event_fd(), PollFlags::POLLIN)];
        if let Some(u) = &self.uevents {
            fds.push(PollFd::new(u.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                verbs_lab::eprintln_whole!(
                    "warning: cannot look at the asynchronous events of {}: {e}",
                    self.device
                );
                return Some(Err(()));
            }
        }
        let woke = |i: usize| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        let (queue, news) = (woke(0), woke(1));
        drop(fds);
        if news {
            let (hit, lost) = drain_removals(self.uevents.as_ref(), &self.node);
            // Announcements were lost: sysfs says whether ours was among them.
            if hit || (lost && self.removable && self.ctx.being_removed()) {
                return removed();
            }
        }
        if self.removable && self.uevents.is_none() && self.ctx.being_removed() {
            return removed();
        }
        if !queue {
            return None;
        }
        match self.ctx.get_async_event(Duration::ZERO) {
            Ok(Some(ev)) if ends_run(&ev, self.port) => Some(Ok(DeviceEvent {
                device: self.device.clone(),
                cause: Cause::Event(ev),
            })),
            Ok(_) => None,
            Err(e) => {
                // The queue itself failed (a device removed under us): say so once, the run
                // goes on and meets the fault through its completions.
                verbs_lab::eprintln_whole!(
                    "warning: cannot read the asynchronous events of {}: {e}",
                    self.device
                );
                Some(Err(()))
            }
        }
    }
}

/// The device event among `e`'s causes, if a device event ended the run that failed with `e`
/// (the run's error path makes the event its error, see [`crate::run`]).
pub fn in_chain(e: &anyhow::Error) -> Option<&DeviceEvent> {
    e.chain().find_map(|c| c.downcast_ref::<DeviceEvent>())
}

/// What the device did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// An asynchronous event.
    Event(AsyncEvent),
    /// The kernel began to remove the device ([`Context::being_removed`]): a driver that
    /// cannot detach user contexts (rxe) sends no event, and the removal waits for us.
    Removed,
}

/// An asynchronous event of a device (or its removal), as the run's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceEvent {
    /// The device's name (`rxe1`).
    pub device: String,
    pub cause: Cause,
}

impl std::fmt::Display for DeviceEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dev = &self.device;
        let e = match &self.cause {
            Cause::Event(e) => e,
            Cause::Removed => {
                return write!(
                    f,
                    "{dev} is being removed (rdma link delete, or its driver unloading): the \
                     run stops so that the kernel can finish"
                )
            }
        };
        let kind = e.kind;
        let qp = || {
            e.qp_num
                .map_or_else(|| "a QP".to_string(), |q| format!("QP {q:#x}"))
        };
        match kind {
            AsyncEventKind::PORT_ERR => write!(
                f,
                "port {} of {dev} went down ({kind}): check the link (ip link; rdma link show)",
                e.port_num.unwrap_or(0)
            ),
            AsyncEventKind::DEVICE_FATAL => write!(
                f,
                "{dev} failed ({kind}): the device must be reset or re-created before it can \
                 run again"
            ),
            AsyncEventKind::QP_FATAL => write!(
                f,
                "{} on {dev} hit an error the device could not report in a completion ({kind})",
                qp()
            ),
            AsyncEventKind::QP_REQ_ERR => write!(
                f,
                "{} on {dev} received a request that breaks the transport's rules ({kind}): \
                 the peer sent an invalid request",
                qp()
            ),
            AsyncEventKind::QP_ACCESS_ERR => write!(
                f,
                "{} on {dev} received a request that its access rights do not allow ({kind})",
                qp()
            ),
            AsyncEventKind::PATH_MIG_ERR => {
                write!(f, "{} on {dev} could not migrate its path ({kind})", qp())
            }
            AsyncEventKind::CQ_ERR => write!(
                f,
                "a completion queue of {dev} failed, most likely it overran ({kind})"
            ),
            AsyncEventKind::SRQ_ERR => {
                write!(f, "a shared receive queue of {dev} failed ({kind})")
            }
            _ => write!(f, "{dev} reported {e}"),
        }
    }
}

impl std::error::Error for DeviceEvent {}

impl DeviceEvent {
    /// Whether the event is the device's or its port's (down, failed, being removed) rather
    /// than one run's object's (a QP or CQ in error): a `--serve --concurrent` server ends on
    /// the former, and counts the latter as its client's failure.
    pub fn ends_server(&self) -> bool {
        match &self.cause {
            Cause::Removed => true,
            Cause::Event(e) => matches!(
                e.kind,
                AsyncEventKind::PORT_ERR | AsyncEventKind::DEVICE_FATAL
            ),
        }
    }
}

/// Whether `ev` ends a run on `port`: a fatal error of the device or of one of the run's
/// objects, or `port` going down. Informational events (a port coming up, COMM_EST, an SRQ
/// limit, a LID or GID change, another port) do not.
pub fn ends_run(ev: &AsyncEvent, port: u8) -> bool {
    match ev.kind {
        AsyncEventKind::PORT_ERR => ev.port_num.map_or(true, |p| p == port),
        AsyncEventKind::CQ_ERR
        | AsyncEventKind::QP_FATAL
        | AsyncEventKind::QP_REQ_ERR
        | AsyncEventKind::QP_ACCESS_ERR
        | AsyncEventKind::PATH_MIG_ERR
        | AsyncEventKind::DEVICE_FATAL
        | AsyncEventKind::SRQ_ERR
        | AsyncEventKind::WQ_FATAL => true,
        _ => false,
    }
}

/// Makes the run on this thread look at `ctx`'s asynchronous events until the returned guard
/// is dropped; events that end a run on `port` ([`ends_run`]) stop it (see the module's text).
///
/// The run looks at three things without waiting on them: the context's event queue, the
/// kernel's device announcements (a `NETLINK_KOBJECT_UEVENT` socket: removing a device
/// announces its user-verbs node, see [`removal_of`]) and, where the announcements cannot be
/// heard (no netlink in a container), sysfs. A spinning loop looks through [`RunFault::check`],
/// at most every [`LOOK_AT_MOST`]. The thread's waits ([`verbs_lab::signals::look_while_waiting`])
/// wait on duplicates of the queue's and the socket's descriptors and look when one is ready,
/// and every [`SLICE`] only where sysfs must be read: a waiting server that a clock woke takes
/// that time from a client sharing its CPU (docs/benchmarks-deterministic.md, "Looks").
pub fn watch(ctx: &Context, port: u8, control: &Control) -> std::io::Result<EventWatch> {
    let removable = !ctx.being_removed();
    let node = ctx
        .uverbs_sysfs_path()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let uevents = match removable {
        true => uevent_socket().ok(),
        false => None,
    };
    let fault = RunFault::default();
    if let Ok(mut s) = fault.0.source.lock() {
        *s = Some(Source {
            ctx: ctx.clone(),
            port,
            device: ctx.name().to_string(),
            node,
            removable,
            uevents,
            next_look: Instant::now(),
            control: control.clone(),
            run: std::thread::current().id(),
        });
    }
    let mut every = None;
    let mut fds = Vec::new();
    if let Ok(source) = fault.0.source.lock() {
        if let Some(src) = source.as_ref() {
            let dups = std::iter::once(src.ctx.async_event_fd().try_clone_to_owned())
                .chain(src.uevents.as_ref().map(|u| u.try_clone()))
                .collect::<std::io::Result<Vec<OwnedFd>>>();
            match dups {
                Ok(d) => fds = d,
                // No descriptor to spare: look on the clock instead.
                Err(_) => every = Some(SLICE),
            }
            if src.removable && src.uevents.is_none() {
                every = Some(SLICE);
            }
        }
    }
    let looked = fault.clone();
    let looking = verbs_lab::signals::look_while_waiting(verbs_lab::signals::Watch {
        fds,
        every,
        look: Rc::new(move || looked.look_now()),
    });
    Ok(EventWatch {
        fault,
        _looking: looking,
    })
}

/// A socket that hears the kernel's device announcements (uevents), non-blocking.
fn uevent_socket() -> nix::Result<OwnedFd> {
    use nix::sys::socket::{
        bind, socket, AddressFamily, NetlinkAddr, SockFlag, SockProtocol, SockType,
    };
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkKObjectUEvent,
    )?;
    // Group 1: the kernel's own announcements.
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 1))?;
    Ok(fd)
}

/// Reads every announcement waiting on `sock`: whether one was the removal of `node`, and
/// whether some were lost (`ENOBUFS`: the socket overflowed, so the removal may have been
/// among them).
fn drain_removals(sock: Option<&OwnedFd>, node: &str) -> (bool, bool) {
    use nix::sys::socket::{recv, MsgFlags};
    let Some(sock) = sock else {
        return (false, false);
    };
    let mut buf = [0u8; 8192];
    let (mut hit, mut lost) = (false, false);
    loop {
        match recv(sock.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(n) => hit |= removal_of(&buf[..n.min(buf.len())], node),
            Err(Errno::EINTR) => continue,
            // The overflow is reported once; what arrived after it is still to read.
            Err(Errno::ENOBUFS) if !lost => lost = true,
            Err(_) => return (hit, lost),
        }
    }
}

/// Whether the uevent `msg` (`ACTION@DEVPATH` then `KEY=VALUE` lines, NUL-separated) says
/// that the device node `node` (`uverbs1`) is being removed. The kernel sends it just before
/// the node leaves sysfs, and on rxe nothing else tells a user-space program.
pub fn removal_of(msg: &[u8], node: &str) -> bool {
    let head = msg.split(|&b| b == 0).next().unwrap_or(&[]);
    let Some(path) = head.strip_prefix(b"remove@") else {
        return false;
    };
    !node.is_empty()
        && path.ends_with(node.as_bytes())
        && path.len() > node.len()
        && path[path.len() - node.len() - 1] == b'/'
}

/// See [`watch`]: dropping it ends the looks (on the thread that made it).
pub struct EventWatch {
    fault: RunFault,
    _looking: Looking,
}

impl EventWatch {
    /// The event that ends the run, once one was seen: the run's own.
    pub fn fault(&self) -> RunFault {
        self.fault.clone()
    }
}

impl Drop for EventWatch {
    fn drop(&mut self) {
        // The run's channel may keep a clone of the fault: the device's queues are let go now.
        if let Ok(mut s) = self.fault.0.source.lock() {
            *s = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: AsyncEventKind, port: Option<u8>, qp: Option<u32>) -> AsyncEvent {
        AsyncEvent {
            kind,
            port_num: port,
            qp_num: qp,
            srq: None,
            cq: None,
        }
    }

    #[test]
    fn faults_end_the_run_and_news_does_not() {
        assert!(ends_run(&ev(AsyncEventKind::PORT_ERR, Some(1), None), 1));
        assert!(!ends_run(&ev(AsyncEventKind::PORT_ERR, Some(2), None), 1));
        assert!(!ends_run(
            &ev(AsyncEventKind::PORT_ACTIVE, Some(1), None),
            1
        ));
        assert!(ends_run(&ev(AsyncEventKind::QP_FATAL, None, Some(0x11)), 1));
        assert!(ends_run(
            &ev(AsyncEventKind::QP_ACCESS_ERR, None, Some(7)),
            1
        ));
        assert!(ends_run(&ev(AsyncEventKind::DEVICE_FATAL, None, None), 1));
        assert!(!ends_run(&ev(AsyncEventKind::COMM_EST, None, Some(7)), 1));
        assert!(!ends_run(
            &ev(AsyncEventKind::SRQ_LIMIT_REACHED, None, None),
            1
        ));
        assert!(!ends_run(&ev(AsyncEventKind::GID_CHANGE, Some(1), None), 1));
        assert!(!ends_run(&ev(AsyncEventKind(99), None, None), 1));
    }

    #[test]
    fn messages_name_the_port_the_device_and_the_event() {
        let d = |kind, port, qp| DeviceEvent {
            device: "rxe1".into(),
            cause: Cause::Event(ev(kind, port, qp)),
        };
        let t = d(AsyncEventKind::PORT_ERR, Some(1), None).to_string();
        assert!(
            t.starts_with("port 1 of rxe1 went down (IBV_EVENT_PORT_ERR)"),
            "{t}"
        );
        let t = d(AsyncEventKind::QP_FATAL, None, Some(0x11)).to_string();
        assert_eq!(
            t,
            "QP 0x11 on rxe1 hit an error the device could not report in a completion \
             (IBV_EVENT_QP_FATAL)"
        );
        let t = d(AsyncEventKind::DEVICE_FATAL, None, None).to_string();
        assert!(t.starts_with("rxe1 failed (IBV_EVENT_DEVICE_FATAL)"), "{t}");
        let t = d(AsyncEventKind::WQ_FATAL, None, None).to_string();
        assert_eq!(t, "rxe1 reported IBV_EVENT_WQ_FATAL");
        let gone = DeviceEvent {
            device: "rxe1".into(),
            cause: Cause::Removed,
        };
        assert!(gone
            .to_string()
            .starts_with("rxe1 is being removed (rdma link delete"));
    }

    #[test]
    fn the_port_and_the_device_end_a_server_and_one_runs_objects_do_not() {
        let d = |cause| DeviceEvent {
            device: "rxe0".into(),
            cause,
        };
        let e = |kind, qp| Cause::Event(ev(kind, None, qp));
        assert!(d(Cause::Removed).ends_server());
        assert!(d(Cause::Event(ev(AsyncEventKind::PORT_ERR, Some(1), None))).ends_server());
        assert!(d(e(AsyncEventKind::DEVICE_FATAL, None)).ends_server());
        assert!(!d(e(AsyncEventKind::QP_ACCESS_ERR, Some(7))).ends_server());
        assert!(!d(e(AsyncEventKind::QP_FATAL, Some(7))).ends_server());
        assert!(!d(e(AsyncEventKind::CQ_ERR, None)).ends_server());
    }

    #[test]
    fn only_the_removal_of_our_node_counts() {
        let msg =
            b"remove@/devices/virtual/infiniband/rxe1/infiniband_verbs/uverbs1\0ACTION=remove\0";
        assert!(removal_of(msg, "uverbs1"));
        assert!(!removal_of(msg, "uverbs0"));
        assert!(!removal_of(b"remove@/devices/x/uverbs11\0", "uverbs1"));
        assert!(!removal_of(b"add@/devices/x/uverbs1\0", "uverbs1"));
        assert!(!removal_of(b"libudev\0remove@/x/uverbs1", "uverbs1"));
        assert!(!removal_of(msg, ""));
    }
}
