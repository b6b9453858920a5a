//! The address handles of a UD QP's sends, kept alive until the sends are done.
//!
//! A UD send names its destination by an address handle ([`UdDest`](super::wr::UdDest)), and the
//! device may read the handle until the send has completed: the verbs leave destroying an AH
//! under a posted request undefined (rxe copies the address vector into the work request when it
//! is posted; other providers hand the hardware a reference to it). So a UD QP keeps an `Arc` of
//! the handle of every send it posts in its [`SendLedger`], in post order, and lets each go only
//! once the send is known to be done:
//!
//! - when a *successful* send completion of the QP is polled from its send CQ
//!   ([`Cq::poll`](super::cq::Cq::poll)): a send queue completes in order, and only a signaled
//!   request gets a successful completion, so the oldest signaled send and every send before it
//!   are done — the ledger drops those entries ([`SendLedger::complete_one`]);
//! - when the QP is destroyed (`ibv_destroy_qp` returns once the QP can send no more): the rest.
//!
//! A failed completion releases nothing: its opcode is undefined, so it cannot be told from a
//! receive's; what it would have released waits for the end of the QP. Every rule here can let a
//! handle go late, never early: a completion polled from a CQ after its QP was destroyed, whose
//! QP number a new QP got meanwhile, is counted against the old QP ([`CqSends::unregister`]).
//!
//! A CQ that never served a UD QP pays one atomic load per poll for this.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rdma_sys::ibv_wc_opcode;

use super::ah::AhInner;
use super::cq::CqInner;
use super::wc::WorkCompletion;
use super::wr::SendWr;

/// A UD QP's posted sends, oldest first: what each keeps alive (its address handle), and whether
/// it was signaled.
pub(crate) struct SendLedger<T = Arc<AhInner>> {
    sends: Mutex<VecDeque<(T, bool)>>,
}

impl<T> SendLedger<T> {
    pub(crate) fn new() -> SendLedger<T> {
        SendLedger {
            sends: Mutex::new(VecDeque::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<(T, bool)>> {
        // A panic elsewhere leaves the queue whole (every change is one push or drain).
        self.sends.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records sends about to be posted; the ledger stays locked until the returned [`Held`] is
    /// dropped, so the order of the entries is the order of the posts.
    pub(crate) fn hold(&self, sends: impl IntoIterator<Item = (T, bool)>) -> Held<'_, T> {
        let mut queue = self.lock();
        let before = queue.len();
        queue.extend(sends);
        Held { queue, before }
    }

    /// One successful send completion was polled: takes the entries up to and including the
    /// oldest signaled one (nothing when none is signaled: then no posted send can have been
    /// reported).
    pub(crate) fn complete_one(&self) -> Vec<T> {
        let mut queue = self.lock();
        match queue.iter().position(|(_, signaled)| *signaled) {
            Some(i) => queue.drain(..=i).map(|(held, _)| held).collect(),
            None => Vec::new(),
        }
    }

    /// Signaled sends not yet reported complete: at most this many successful completions of
    /// the QP may still be waiting in its CQ.
    fn signaled_left(&self) -> usize {
        self.lock().iter().filter(|(_, signaled)| *signaled).count()
    }
}

/// Sends recorded for a post under way, the ledger locked (see [`SendLedger::hold`]).
pub(crate) struct Held<'a, T> {
    queue: MutexGuard<'a, VecDeque<(T, bool)>>,
    before: usize,
}

impl<T> Held<'_, T> {
    /// The post took only the first `posted` of the sends recorded: forgets the others.
    pub(crate) fn posted_only(&mut self, posted: usize) {
        self.queue.truncate(self.before + posted);
    }
}

impl SendLedger {
    /// [`SendLedger::hold`] for the requests of one `ibv_post_send` on a UD QP: each holds its
    /// address handle, signaled if it asks to be or the QP signals every send (`sq_sig_all`).
    /// A request without a destination (refused before posting) holds nothing.
    pub(crate) fn hold_for(&self, wrs: &[SendWr<'_>], sq_sig_all: bool) -> Held<'_, Arc<AhInner>> {
        self.hold(wrs.iter().filter_map(|wr| {
            let dest = wr.ud?;
            Some((dest.ah.inner.clone(), wr.signaled || sq_sig_all))
        }))
    }
}

/// The send ledgers of the UD QPs whose send CQ this is, by QP number.
pub(crate) struct CqSends<T = Arc<AhInner>> {
    /// Whether a UD QP was ever registered: polls of a CQ that never served one look no further.
    used: AtomicBool,
    by_qpn: Mutex<HashMap<u32, QpSends<T>>>,
}

/// What a CQ knows of the sends of one QP number.
struct QpSends<T> {
    /// The ledger of the QP that has this number now, if any.
    ledger: Option<Arc<SendLedger<T>>>,
    /// Successful completions that may still come for QPs of this number that were destroyed:
    /// the next ones are theirs, not the live QP's.
    stale: usize,
}

impl<T> CqSends<T> {
    pub(crate) fn new() -> CqSends<T> {
        CqSends {
            used: AtomicBool::new(false),
            by_qpn: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u32, QpSends<T>>> {
        self.by_qpn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The QP `qpn`, which sends through this CQ, keeps its sends in `ledger`.
    pub(crate) fn register(&self, qpn: u32, ledger: Arc<SendLedger<T>>) {
        let mut map = self.lock();
        map.entry(qpn)
            .or_insert(QpSends {
                ledger: None,
                stale: 0,
            })
            .ledger = Some(ledger);
        self.used.store(true, Ordering::Release);
    }

    /// The QP `qpn` of `ledger` was destroyed: its successful completions still to come (at most
    /// its signaled sends left) are counted, so that they release nothing of a later QP that
    /// gets the same number.
    pub(crate) fn unregister(&self, qpn: u32, ledger: &Arc<SendLedger<T>>) {
        let mut map = self.lock();
        let Some(entry) = map.get_mut(&qpn) else {
            return;
        };
        if entry
            .ledger
            .as_ref()
            .is_some_and(|l| Arc::ptr_eq(l, ledger))
        {
            entry.ledger = None;
            entry.stale += ledger.signaled_left();
        }
        if entry.ledger.is_none() && entry.stale == 0 {
            map.remove(&qpn);
        }
    }

    /// Successful send completions of the QPs `qpns` were polled: what their ledgers let go, to
    /// be dropped by the caller (outside every lock).
    pub(crate) fn sends_completed(&self, qpns: impl IntoIterator<Item = u32>) -> Vec<T> {
        let mut released = Vec::new();
        let mut qpns = qpns.into_iter().peekable();
        if qpns.peek().is_none() || !self.used.load(Ordering::Acquire) {
            return released;
        }
        let mut map = self.lock();
        for qpn in qpns {
            let Some(entry) = map.get_mut(&qpn) else {
                continue;
            };
            if entry.stale > 0 {
                entry.stale -= 1;
                if entry.stale == 0 && entry.ledger.is_none() {
                    map.remove(&qpn);
                }
            } else if let Some(ledger) = &entry.ledger {
                released.extend(ledger.complete_one());
            }
        }
        released
    }
}

impl CqSends {
    /// Lets go of what the successful send completions among `wcs`, just polled, release.
    #[inline]
    pub(crate) fn completed(&self, wcs: &[WorkCompletion]) {
        if !self.used.load(Ordering::Acquire) {
            return;
        }
        let sends = wcs
            .iter()
            .filter(|wc| wc.is_success() && wc.opcode().0 < ibv_wc_opcode::IBV_WC_RECV)
            .map(WorkCompletion::qp_num);
        drop(self.sends_completed(sends));
    }
}

/// A UD QP's registration with its send CQ. A parent of the QP, so it is dropped after the QP
/// is destroyed: then it unregisters, and the handles left in the ledger go with it.
pub(crate) struct UdSends {
    qpn: u32,
    pub(crate) ledger: Arc<SendLedger>,
    send_cq: Arc<CqInner>,
}

impl UdSends {
    /// Registers the UD QP `qpn` with its send CQ.
    pub(crate) fn register(qpn: u32, send_cq: Arc<CqInner>) -> UdSends {
        let ledger = Arc::new(SendLedger::new());
        send_cq.ud_sends.register(qpn, ledger.clone());
        UdSends {
            qpn,
            ledger,
            send_cq,
        }
    }
}

impl Drop for UdSends {
    fn drop(&mut self) {
        self.send_cq.ud_sends.unregister(self.qpn, &self.ledger);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A held value that says when it is let go.
    fn tokens(n: usize) -> Vec<Arc<()>> {
        (0..n).map(|_| Arc::new(())).collect()
    }

    fn alive(t: &[Arc<()>]) -> Vec<bool> {
        t.iter().map(|t| Arc::strong_count(t) > 1).collect()
    }

    #[test]
    fn a_completion_releases_up_to_the_oldest_signaled_send() {
        let t = tokens(5);
        let cq = CqSends::new();
        let ledger = Arc::new(SendLedger::new());
        cq.register(7, ledger.clone());
        // Unsignaled, unsignaled, signaled, unsignaled, signaled.
        drop(ledger.hold(t.iter().cloned().zip([false, false, true, false, true])));
        assert_eq!(alive(&t), [true; 5]);
        // A completion of another QP, or of none, releases nothing here.
        drop(cq.sends_completed([8]));
        assert_eq!(alive(&t), [true; 5]);
        drop(cq.sends_completed([7]));
        assert_eq!(alive(&t), [false, false, false, true, true]);
        drop(cq.sends_completed([7]));
        assert_eq!(alive(&t), [false; 5]);
        // More completions than signaled sends: nothing unsignaled is let go without one.
        let u = tokens(1);
        drop(ledger.hold([(u[0].clone(), false)]));
        drop(cq.sends_completed([7, 7]));
        assert_eq!(alive(&u), [true]);
    }

    #[test]
    fn sends_a_post_did_not_take_are_forgotten() {
        let t = tokens(3);
        let ledger = SendLedger::new();
        let mut held = ledger.hold(t.iter().cloned().map(|t| (t, true)));
        // ibv_post_send refused the second request: the first was posted, the rest were not.
        held.posted_only(1);
        drop(held);
        assert_eq!(alive(&t), [true, false, false]);
        assert_eq!(ledger.complete_one().len(), 1);
    }

    #[test]
    fn the_end_of_a_qp_releases_the_rest_and_its_late_completions_touch_no_successor() {
        let t = tokens(2);
        let cq = CqSends::new();
        let old = Arc::new(SendLedger::new());
        cq.register(7, old.clone());
        drop(old.hold([(t[0].clone(), true)]));
        // The QP is destroyed with its completion still in the CQ; its ledger goes.
        cq.unregister(7, &old);
        drop(old);
        assert_eq!(alive(&t), [false, false]);
        // A new QP gets number 7 and posts; the old QP's completion is polled first.
        let new = Arc::new(SendLedger::new());
        cq.register(7, new.clone());
        drop(new.hold([(t[1].clone(), true)]));
        drop(cq.sends_completed([7]));
        assert_eq!(
            alive(&t),
            [false, true],
            "the late completion was the old QP's"
        );
        drop(cq.sends_completed([7]));
        assert_eq!(alive(&t), [false, false]);
        // Unregistering a ledger that is not the number's current one changes nothing.
        cq.unregister(7, &Arc::new(SendLedger::new()));
        assert!(cq.lock().get(&7).unwrap().ledger.is_some());
    }

    #[test]
    fn a_cq_without_ud_qps_looks_no_further() {
        let cq: CqSends<Arc<()>> = CqSends::new();
        assert!(cq.sends_completed([1, 2, 3]).is_empty());
        assert!(cq.lock().is_empty());
    }
}
