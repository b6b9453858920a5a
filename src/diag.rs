//! What the device says when a wait expires: the QP's state (`ibv_query_qp(3)`) and how the
//! port's transport counters moved while we waited (retransmissions, sequence errors, RNR
//! NAKs), with a reading of the pattern — so that "timed out" is never the whole story.
//!
//! Take a [`PortCounters`] snapshot before the work (after the QP is connected); when a bounded
//! wait expires, [`device_report`] says what changed since. Counters that a provider does not
//! have are left out (rxe has them all under `ports/N/hw_counters`).

use std::fmt::Write as _;

use crate::verbs::{Qp, QpState};

/// The port counters that tell a lost peer from a slow one. Names as rxe spells them; other
/// providers have some of them under `counters/`.
pub const COUNTERS: &[&str] = &[
    "sent_pkts",
    "rcvd_pkts",
    "completer_retry_err",
    "retry_exceeded_err",
    "rcvd_seq_err",
    "duplicate_request",
    "out_of_seq_request",
    "ack_deferred",
    "rcvd_rnr_err",
    "send_rnr_err",
    "rnr_nak_retry_err",
    "local_ack_timeout_err",
    "packet_seq_err",
];

/// The snapshot that [`device_report`] compares with the port's counters now (one type for
/// every reader of port counters, in [`crate::sysfs`]).
pub use crate::sysfs::PortCounters;

/// How each of [`COUNTERS`] that exists in both snapshots moved from `before` to `after`:
/// `(name, increase)`, in the order of [`COUNTERS`], zeros included.
fn changes(before: &PortCounters, after: &PortCounters) -> Vec<(&'static str, u64)> {
    COUNTERS
        .iter()
        .filter_map(|c| Some((*c, before.increase(after, c)?)))
        .collect()
}

/// One paragraph for an error message: the QP's state, the counters of our port that moved
/// since `since`, and what that pattern usually means. Never fails: what cannot be read is
/// said to be unreadable.
pub fn device_report(qp: Option<&Qp>, since: &PortCounters) -> String {
    let state = qp.map(|q| (q.qpn(), q.state().map_err(|e| e.to_string())));
    describe(state, since, &since.read_again())
}

/// [`device_report`] from what was read: the QP's number and state (or why it could not be
/// queried), and the counters before and after.
fn describe(
    state: Option<(u32, Result<QpState, String>)>,
    before: &PortCounters,
    after: &PortCounters,
) -> String {
    let mut s = String::from("the device says: ");
    match &state {
        Some((qpn, Ok(st))) => {
            let _ = write!(s, "QP {qpn:#x} is {st} (ibv_query_qp); ");
        }
        Some((qpn, Err(e))) => {
            let _ = write!(s, "QP {qpn:#x}: ibv_query_qp failed ({e}); ");
        }
        None => {}
    }
    let changes = changes(before, after);
    let get = |name: &str| {
        changes
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    };
    if changes.is_empty() {
        let _ = write!(
            s,
            "{} port {} has no readable counters",
            before.dev(),
            before.port()
        );
    } else {
        let moved: Vec<String> = changes
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(n, v)| format!("{n} +{v}"))
            .collect();
        let _ = write!(
            s,
            "{} port {} in the last {:.1} s: {}",
            before.dev(),
            before.port(),
            after.at().duration_since(before.at()).as_secs_f64(),
            if moved.is_empty() {
                "no counter moved".to_string()
            } else {
                moved.join(", ")
            }
        );
    }
    let st = state.and_then(|(_, r)| r.ok());
    if let Some(reading) = reading(st, &get, !changes.is_empty()) {
        let _ = write!(s, " — {reading}");
    }
    s
}

/// What a pattern of QP state and counter increases usually means.
fn reading(
    state: Option<QpState>,
    get: &dyn Fn(&str) -> u64,
    have_counters: bool,
) -> Option<&'static str> {
    if state == Some(QpState::Err) {
        return Some(
            "the QP is in the error state: its failed or flushed completions are in the CQ",
        );
    }
    if !have_counters {
        return None;
    }
    if get("completer_retry_err") > 0 && get("retry_exceeded_err") == 0 {
        return Some(
            "our requester keeps retransmitting and no answer comes back: the peer's QP is gone \
             or unreachable; the retries end in IBV_WC_RETRY_EXC_ERR after retry_cnt ack \
             timeouts, or never on rxe with a retry count of 7",
        );
    }
    if get("retry_exceeded_err") > 0 {
        return Some("the retries ran out: a IBV_WC_RETRY_EXC_ERR completion is in the CQ");
    }
    if get("rcvd_rnr_err") > 0 {
        return Some("the peer answers RNR (receiver not ready): it has no receive posted");
    }
    if get("sent_pkts") == 0 && get("rcvd_pkts") == 0 {
        return Some(
            "no packet moved on this port: nothing was sent (was anything posted?), or the \
             device's work is not getting CPU time",
        );
    }
    if get("sent_pkts") > 0 && get("rcvd_pkts") == 0 {
        return Some("packets left this port and nothing came back");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(f: impl Fn(&str) -> Option<u64>) -> PortCounters {
        let values = COUNTERS
            .iter()
            .filter_map(|c| Some((format!("hw_counters/{c}"), f(c)?)))
            .collect();
        PortCounters::from_values("rxe7", 1, values)
    }

    #[test]
    fn reports_what_moved_and_reads_the_pattern() {
        let before = counters(|_| Some(5));
        let after = counters(|c| {
            Some(if c == "completer_retry_err" || c == "sent_pkts" {
                17
            } else {
                5
            })
        });
        let r = describe(Some((0x11, Ok(QpState::Rts))), &before, &after);
        assert!(
            r.starts_with(
                "the device says: QP 0x11 is RTS (ibv_query_qp); rxe7 port 1 in the last"
            ),
            "{r}"
        );
        assert!(
            r.contains("s: sent_pkts +12, completer_retry_err +12 — "),
            "{r}"
        );
        assert!(r.contains("or never on rxe"), "{r}");

        let quiet = describe(None, &before, &before.clone());
        assert!(
            quiet.contains("no counter moved — no packet moved"),
            "{quiet}"
        );

        let err = describe(Some((0x12, Ok(QpState::Err))), &before, &after);
        assert!(
            err.contains("is ERR") && err.contains("the QP is in the error state"),
            "{err}"
        );

        let rnr = counters(|c| Some(if c == "rcvd_rnr_err" { 6 } else { 5 }));
        assert!(describe(None, &before, &rnr).contains("receiver not ready"));

        let none = counters(|_| None);
        let r = describe(Some((0x13, Err("EINVAL".into()))), &none, &none);
        assert!(
            r.contains("ibv_query_qp failed (EINVAL)") && r.contains("no readable counters"),
            "{r}"
        );
    }
}
