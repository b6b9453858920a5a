//! Work completions (`struct ibv_wc`), their statuses and opcodes, in readable form.

use std::fmt;

use rdma_sys::{ibv_wc, ibv_wc_flags, ibv_wc_opcode, ibv_wc_status};

use super::error::{Result, VerbsError};

/// A work-completion status (`enum ibv_wc_status`), printed by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WcStatus(pub u32);

/// One row of the status table: value, name, what it means, what to check.
struct StatusInfo {
    value: u32,
    name: &'static str,
    meaning: &'static str,
    hint: Option<&'static str>,
}

/// Every `enum ibv_wc_status` value, written once: the [`WcStatus`] constant (the C name without
/// `IBV_WC_`), the C constant, what it means (as `ibv_wc_status_str(3)` says it) and, for the
/// statuses a program meets, what usually causes it. Makes the constants and [`STATUSES`].
macro_rules! wc_statuses {
    ($($konst:ident = $c:ident, $meaning:literal, $hint:expr;)*) => {
        /// Every `enum ibv_wc_status` value, by its name without the `IBV_WC_` prefix.
        impl WcStatus {
            $(pub const $konst: WcStatus = WcStatus(ibv_wc_status::$c);)*
        }

        /// The status table, ordered by value.
        const STATUSES: &[StatusInfo] = &[
            $(StatusInfo {
                value: ibv_wc_status::$c,
                name: stringify!($c),
                meaning: $meaning,
                hint: $hint,
            },)*
        ];
    };
}

wc_statuses! {
    SUCCESS = IBV_WC_SUCCESS, "success", None;
    LOC_LEN_ERR = IBV_WC_LOC_LEN_ERR, "local length error",
        Some("a received message was larger than the posted receive buffer");
    LOC_QP_OP_ERR = IBV_WC_LOC_QP_OP_ERR, "local QP operation error",
        Some("the work request was malformed for this QP (e.g. inline data too large)");
    LOC_EEC_OP_ERR = IBV_WC_LOC_EEC_OP_ERR, "local EE context operation error", None;
    LOC_PROT_ERR = IBV_WC_LOC_PROT_ERR, "local protection error",
        Some("an SGE names memory outside its MR, a wrong lkey, or an MR of another PD");
    WR_FLUSH_ERR = IBV_WC_WR_FLUSH_ERR, "work request flushed error",
        Some("the QP went to the error state (usually because of an earlier error): look at the first failed completion");
    MW_BIND_ERR = IBV_WC_MW_BIND_ERR, "memory management operation error", None;
    BAD_RESP_ERR = IBV_WC_BAD_RESP_ERR, "bad response error", None;
    LOC_ACCESS_ERR = IBV_WC_LOC_ACCESS_ERR, "local access error",
        Some("the local MR lacks LOCAL_WRITE for data the NIC had to write");
    REM_INV_REQ_ERR = IBV_WC_REM_INV_REQ_ERR, "remote invalid request error",
        Some("the responder refused the request: a message longer than its receive buffer, an opcode its QP does not allow, or (under emulation) a response that came too late: try a larger QP timeout");
    REM_ACCESS_ERR = IBV_WC_REM_ACCESS_ERR, "remote access error",
        Some("the remote address or rkey is wrong, the range is outside the remote MR, or the remote MR lacks the REMOTE_WRITE/READ/ATOMIC access flag");
    REM_OP_ERR = IBV_WC_REM_OP_ERR, "remote operation error",
        Some("the responder could not complete the operation (e.g. its receive buffer MR lacks LOCAL_WRITE)");
    RETRY_EXC_ERR = IBV_WC_RETRY_EXC_ERR, "transport retry counter exceeded",
        Some("the peer did not acknowledge: it is dead, unreachable, its QP is not in RTR/RTS, or the QP timeout is too short for this link");
    RNR_RETRY_EXC_ERR = IBV_WC_RNR_RETRY_EXC_ERR, "RNR retry counter exceeded",
        Some("the peer had no receive posted for a SEND: post receives before the sender sends");
    LOC_RDD_VIOL_ERR = IBV_WC_LOC_RDD_VIOL_ERR, "local RDD violation error", None;
    REM_INV_RD_REQ_ERR = IBV_WC_REM_INV_RD_REQ_ERR, "remote invalid RD request", None;
    REM_ABORT_ERR = IBV_WC_REM_ABORT_ERR, "aborted error", None;
    INV_EECN_ERR = IBV_WC_INV_EECN_ERR, "invalid EE context number", None;
    INV_EEC_STATE_ERR = IBV_WC_INV_EEC_STATE_ERR, "invalid EE context state", None;
    FATAL_ERR = IBV_WC_FATAL_ERR, "fatal error", None;
    RESP_TIMEOUT_ERR = IBV_WC_RESP_TIMEOUT_ERR, "response timeout error", None;
    GENERAL_ERR = IBV_WC_GENERAL_ERR, "general error", None;
    TM_ERR = IBV_WC_TM_ERR, "TM error", None;
    TM_RNDV_INCOMPLETE = IBV_WC_TM_RNDV_INCOMPLETE, "TM software rendezvous", None;
}

impl WcStatus {
    fn info(self) -> Option<&'static StatusInfo> {
        STATUSES.iter().find(|s| s.value == self.0)
    }

    /// The C name, e.g. `IBV_WC_REM_ACCESS_ERR`; `IBV_WC_<n>` for values we do not know.
    pub fn name(self) -> String {
        match self.info() {
            Some(i) => i.name.to_string(),
            None => format!("IBV_WC_STATUS_{}", self.0),
        }
    }

    /// A short description, as `ibv_wc_status_str(3)` would give.
    pub fn meaning(self) -> &'static str {
        self.info().map_or("unknown status", |i| i.meaning)
    }

    /// What usually causes this status and what to check.
    pub fn hint(self) -> Option<&'static str> {
        self.info().and_then(|i| i.hint)
    }

    /// True for `IBV_WC_SUCCESS`.
    pub fn is_success(self) -> bool {
        self == WcStatus::SUCCESS
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.meaning())
    }
}

/// The opcode of a completion (`enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WcOpcode(pub u32);

impl WcOpcode {
    pub const SEND: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_SEND);
    pub const RDMA_WRITE: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_RDMA_WRITE);
    pub const RDMA_READ: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_RDMA_READ);
    pub const COMP_SWAP: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_COMP_SWAP);
    pub const FETCH_ADD: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_FETCH_ADD);
    pub const RECV: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_RECV);
    pub const RECV_RDMA_WITH_IMM: WcOpcode = WcOpcode(ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM);

    /// The name without the `IBV_WC_` prefix, e.g. `RDMA_WRITE`.
    pub fn name(self) -> String {
        let s = match self {
            WcOpcode::SEND => "SEND",
            WcOpcode::RDMA_WRITE => "RDMA_WRITE",
            WcOpcode::RDMA_READ => "RDMA_READ",
            WcOpcode::COMP_SWAP => "COMP_SWAP",
            WcOpcode::FETCH_ADD => "FETCH_ADD",
            WcOpcode::RECV => "RECV",
            WcOpcode::RECV_RDMA_WITH_IMM => "RECV_RDMA_WITH_IMM",
            WcOpcode(other) => return format!("OPCODE_{other}"),
        };
        s.to_string()
    }
}

crate::display_by_name!(WcOpcode);

/// One work completion, layout-identical to `struct ibv_wc` so that `ibv_poll_cq(3)` can fill a
/// slice of them directly.
#[repr(transparent)]
pub struct WorkCompletion(pub(crate) ibv_wc);

impl Default for WorkCompletion {
    fn default() -> Self {
        // SAFETY: ibv_wc is plain C data (integers and a union of integers); all-zero is valid.
        WorkCompletion(unsafe { std::mem::zeroed() })
    }
}

impl Clone for WorkCompletion {
    fn clone(&self) -> Self {
        // SAFETY: ibv_wc holds no pointers or resources; a bitwise copy is a full copy.
        WorkCompletion(unsafe { std::ptr::read(&self.0) })
    }
}

impl fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkCompletion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status().name())
            .field("opcode", &self.opcode().name())
            .field("byte_len", &self.byte_len())
            .field("imm_data", &self.imm_data())
            .field("qp_num", &self.qp_num())
            .finish()
    }
}

impl WorkCompletion {
    /// A fixed-size array of empty completions to poll into, without heap allocation.
    pub fn array<const N: usize>() -> [WorkCompletion; N] {
        std::array::from_fn(|_| WorkCompletion::default())
    }

    /// The `wr_id` given when the work request was posted.
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }
    pub fn status(&self) -> WcStatus {
        WcStatus(self.0.status)
    }
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode(self.0.opcode)
    }
    /// Bytes received (receive completions and RDMA reads).
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }
    /// The QP number the completion belongs to.
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
    /// The source QP (meaningful on UD receives).
    pub fn src_qp(&self) -> u32 {
        self.0.src_qp
    }
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }
    /// True when a GRH occupies the first 40 bytes of a UD receive buffer.
    pub fn has_grh(&self) -> bool {
        self.0.wc_flags & ibv_wc_flags::IBV_WC_GRH.0 != 0
    }
    /// The immediate data, in host order, if the completion carries one.
    pub fn imm_data(&self) -> Option<u32> {
        if self.0.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0 {
            // SAFETY: with IBV_WC_WITH_IMM set, the union holds imm_data (network byte order).
            Some(u32::from_be(unsafe {
                self.0.imm_data_invalidated_rkey_union.imm_data
            }))
        } else {
            None
        }
    }
    pub fn is_success(&self) -> bool {
        self.status().is_success()
    }
    /// `Ok(self)` on success, otherwise a [`VerbsError::Completion`] naming the status.
    pub fn ok(&self) -> Result<&Self> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(VerbsError::Completion {
                status: self.status(),
                wr_id: self.wr_id(),
                vendor_err: self.vendor_err(),
                qp_num: self.qp_num(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_c_name() {
        for (i, s) in STATUSES.iter().enumerate() {
            assert_eq!(s.value as usize, i, "table is ordered by value");
            assert!(s.name.starts_with("IBV_WC_"));
            // Names must agree with libibverbs' own description for the same value.
            // SAFETY: ibv_wc_status_str returns a static string for any value.
            let c = unsafe { std::ffi::CStr::from_ptr(rdma_sys::ibv_wc_status_str(s.value)) };
            let c = c.to_string_lossy().to_lowercase();
            let ours = s.meaning.to_lowercase();
            assert!(
                c == ours,
                "{}: ours '{}' vs libibverbs '{}'",
                s.name,
                s.meaning,
                c
            );
        }
        assert_eq!(WcStatus(10).name(), "IBV_WC_REM_ACCESS_ERR");
        assert_eq!(WcStatus(99).name(), "IBV_WC_STATUS_99");
        assert_eq!(
            WcStatus(5).to_string(),
            "IBV_WC_WR_FLUSH_ERR (work request flushed error)"
        );
    }

    #[test]
    fn every_status_has_a_constant_of_its_name() {
        macro_rules! named {
            ($($n:ident),*) => {{
                $(assert_eq!(WcStatus::$n.name(), concat!("IBV_WC_", stringify!($n)));)*
                [$(WcStatus::$n),*].len()
            }};
        }
        let n = named!(
            SUCCESS,
            LOC_LEN_ERR,
            LOC_QP_OP_ERR,
            LOC_EEC_OP_ERR,
            LOC_PROT_ERR,
            WR_FLUSH_ERR,
            MW_BIND_ERR,
            BAD_RESP_ERR,
            LOC_ACCESS_ERR,
            REM_INV_REQ_ERR,
            REM_ACCESS_ERR,
            REM_OP_ERR,
            RETRY_EXC_ERR,
            RNR_RETRY_EXC_ERR,
            LOC_RDD_VIOL_ERR,
            REM_INV_RD_REQ_ERR,
            REM_ABORT_ERR,
            INV_EECN_ERR,
            INV_EEC_STATE_ERR,
            FATAL_ERR,
            RESP_TIMEOUT_ERR,
            GENERAL_ERR,
            TM_ERR,
            TM_RNDV_INCOMPLETE
        );
        assert_eq!(n, STATUSES.len(), "a constant for every row of the table");
    }

    #[test]
    fn immediate_data_is_read_in_host_order() {
        let mut wc = WorkCompletion::default();
        assert_eq!(wc.imm_data(), None);
        wc.0.wc_flags = ibv_wc_flags::IBV_WC_WITH_IMM.0;
        wc.0.imm_data_invalidated_rkey_union.imm_data = 0x1234_5678u32.to_be();
        assert_eq!(wc.imm_data(), Some(0x1234_5678));
    }

    #[test]
    fn failed_completion_becomes_error() {
        let mut wc = WorkCompletion::default();
        assert!(wc.ok().is_ok());
        wc.0.status = 12;
        wc.0.wr_id = 3;
        let err = wc.ok().unwrap_err();
        assert_eq!(err.wc_status(), Some(WcStatus::RETRY_EXC_ERR));
        assert!(err.to_string().contains("IBV_WC_RETRY_EXC_ERR"));
    }
}
