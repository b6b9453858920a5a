//! The device's asynchronous events while a `vl_*` tool runs: a port that goes down, a QP or
//! CQ in a fatal error, a device that fails or is being removed.
//!
//! Without this, such a fault is noticed only through its consequences — completions that fail
//! after every retry (seconds to minutes with a long `-u`), or a peer that falls silent. [`watch`]
//! starts one thread per device context that reads the context's event queue
//! ([`Context::get_async_event`], which acknowledges each event at once) and, every
//! [`SLICE`], looks whether the kernel has begun to remove the device
//! ([`Context::being_removed`]: rxe sends no event then, and `rdma link delete` would wait for
//! the run to end). An event that ends
//! the run ([`ends_run`]) is recorded, and the run's out-of-band socket is woken
//! ([`crate::signals::wake_reader`]), so a loop blocked on the peer returns at once and one that
//! spins sees [`check`] fail within [`crate::engine::CHANNEL_CHECK`]. The run's error path then
//! sends the peer an ERROR naming the event (before the QPs are torn down) and the tool exits 1
//! with the event as its error: "port 1 of rxe1 went down (IBV_EVENT_PORT_ERR) …".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use verbs_lab::verbs::{AsyncEvent, AsyncEventKind, Context};

/// One wait of the watcher: how late a stop request is seen (at the end of a run).
pub const SLICE: Duration = Duration::from_millis(100);

/// The first event that ended the run, if one came.
static FATAL: Mutex<Option<DeviceEvent>> = Mutex::new(None);

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

/// The event that ended the run, if one came.
pub fn fatal() -> Option<DeviceEvent> {
    FATAL.lock().ok().and_then(|f| f.clone())
}

/// Fails with the event that ended the run, once one came: loops call it as they look at the
/// peer (with [`crate::signals::check`]).
pub fn check() -> Result<(), DeviceEvent> {
    match fatal() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Records `ev` (the first one only) and wakes the run's blocked reads.
fn record(ev: DeviceEvent) {
    if let Ok(mut f) = FATAL.lock() {
        if f.is_some() {
            return;
        }
        *f = Some(ev);
    }
    crate::signals::wake_reader();
}

/// Reads `ctx`'s asynchronous events on a thread of its own until the returned guard is
/// dropped; events that end a run on `port` ([`ends_run`]) stop it (see the module's text).
pub fn watch(ctx: &Context, port: u8) -> std::io::Result<EventWatch> {
    let stop = Arc::new(AtomicBool::new(false));
    let ctx = ctx.clone();
    let stopped = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("async-events".into())
        .spawn(move || {
            let device = ctx.name().to_string();
            // Only a node that was there can go away (no sysfs in a container: no look).
            let removable = !ctx.being_removed();
            while !stopped.load(Ordering::SeqCst) {
                if removable && ctx.being_removed() {
                    record(DeviceEvent {
                        device: device.clone(),
                        cause: Cause::Removed,
                    });
                }
                match ctx.get_async_event(SLICE) {
                    Ok(Some(ev)) if ends_run(&ev, port) => record(DeviceEvent {
                        device: device.clone(),
                        cause: Cause::Event(ev),
                    }),
                    Ok(_) => {}
                    Err(e) => {
                        // The queue itself failed (a device removed under us): say so once,
                        // the run goes on and meets the fault through its completions.
                        eprintln!(
                            "warning: cannot read the asynchronous events of {}: {e}",
                            ctx.name()
                        );
                        return;
                    }
                }
            }
        })?;
    Ok(EventWatch {
        stop,
        thread: Some(thread),
    })
}

/// See [`watch`]: dropping it stops the thread (within [`SLICE`]) and waits for it.
pub struct EventWatch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for EventWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
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
}
