//! An opened device (`struct ibv_context`): queries of the device, its ports and GID tables,
//! and the factory of protection domains, CQs and completion channels.

use std::ffi::CStr;
use std::sync::Arc;

use nix::errno::Errno;
use rdma_sys::{
    ___ibv_query_port, ibv_close_device, ibv_context, ibv_device, ibv_device_attr,
    ibv_device_cap_flags, ibv_get_device_name, ibv_gid, ibv_gid_entry, ibv_open_device,
    ibv_port_attr, ibv_query_device, ibv_query_gid,
};

use super::attrs::{LinkLayer, Mtu, PortState};
use super::channel::CompChannel;
use super::cm::CmIdInner;
use super::cq::Cq;
use super::error::{Result, VerbsError};
use super::gid::{choose_gid, Gid, GidChoice, GidEntry, GidType};
use super::pd::Pd;
use crate::sysfs;

extern "C" {
    // Exported by libibverbs (>= 32) behind the static-inline ibv_query_gid_ex(3); rdma-sys does
    // not bind it. Returns 0, or an errno value (ENODATA for an empty index).
    fn _ibv_query_gid_ex(
        context: *mut ibv_context,
        port_num: u32,
        gid_index: u32,
        entry: *mut ibv_gid_entry,
        flags: u32,
        entry_size: usize,
    ) -> i32;
    // Also libibverbs >= 32, behind the static-inline ibv_query_gid_table(3): every populated
    // entry of every port in one command. Returns the count, or a negative errno value (EINVAL
    // when `max_entries` is too small).
    fn _ibv_query_gid_table(
        context: *mut ibv_context,
        entries: *mut ibv_gid_entry,
        max_entries: usize,
        flags: u32,
        entry_size: usize,
    ) -> isize;
}

/// A `struct ibv_context` and who closes it; every child object (PD, CQ, completion channel)
/// holds an `Arc` of it, so it outlives them all.
pub(crate) struct ContextInner {
    pub(crate) ptr: *mut ibv_context,
    /// The device name, e.g. `rxe0`.
    name: String,
    ownership: Ownership,
}

/// Who closes a device context.
enum Ownership {
    /// We opened it (`ibv_open_device`): closed with `ibv_close_device` after its last child.
    Owned,
    /// Lent by librdmacm (a cm id's `id->verbs`): librdmacm opened it and closes it once no id
    /// bound to the device is left (when the device is removed, at once). We hold such an id —
    /// the owner — until the last child of the context is gone, and never close the context.
    Borrowed { _owner: Arc<CmIdInner> },
}

// SAFETY: libibverbs contexts are thread-safe: every verb may be called from any thread. The
// owner a borrowed context holds is itself Send and Sync.
unsafe impl Send for ContextInner {}
// SAFETY: as above.
unsafe impl Sync for ContextInner {}

impl ContextInner {
    /// The device name, e.g. `rxe0`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// librdmacm's context `ptr`, bound to the id `owner`, which keeps it open for as long as the
    /// result lives.
    ///
    /// # Safety
    ///
    /// `ptr` is `owner`'s `id->verbs`, not NULL: librdmacm keeps it open while the id exists.
    pub(crate) unsafe fn borrowed(ptr: *mut ibv_context, owner: Arc<CmIdInner>) -> ContextInner {
        // SAFETY: the context is open (the caller's contract); its device pointer is valid and
        // the name a NUL-terminated string owned by libibverbs.
        let name = unsafe { device_name(ptr) };
        ContextInner {
            ptr,
            name,
            ownership: Ownership::Borrowed { _owner: owner },
        }
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        match self.ownership {
            // SAFETY: we opened the context; every PD, CQ and channel holds an Arc of it, so
            // none is left when it is closed.
            Ownership::Owned => unsafe {
                ibv_close_device(self.ptr);
            },
            // librdmacm's to close; its owner (the id) is released after this body.
            Ownership::Borrowed { .. } => {}
        }
    }
}

/// The name of the device of the open context `ptr` (`ibv_get_device_name(3)`).
///
/// # Safety
///
/// `ptr` is an open context.
pub(crate) unsafe fn device_name(ptr: *mut ibv_context) -> String {
    // SAFETY: an open context's device pointer is valid, and its name is a NUL-terminated string
    // owned by libibverbs.
    unsafe { CStr::from_ptr(ibv_get_device_name((*ptr).device)) }
        .to_string_lossy()
        .into_owned()
}

/// An opened RDMA device (`ibv_open_device(3)`), or one librdmacm lends a cm id
/// ([`CmId::context`](super::cm::CmId::context)). Cheap to clone (an `Arc`).
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

/// What a benchmarker checks about a device (a subset of `struct ibv_device_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    pub fw_ver: String,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub phys_port_cnt: u8,
    pub max_qp: i32,
    pub max_qp_wr: i32,
    pub max_sge: i32,
    pub max_sge_rd: i32,
    pub max_cq: i32,
    pub max_cqe: i32,
    pub max_mr: i32,
    pub max_mr_size: u64,
    pub max_pd: i32,
    pub max_qp_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
    pub max_res_rd_atom: i32,
    pub max_srq: i32,
    pub max_ah: i32,
    /// `IBV_ATOMIC_NONE` (0), `HCA` (1) or `GLOB` (2).
    pub atomic_cap: u32,
    pub device_cap_flags: DeviceCapFlags,
    pub page_size_cap: u64,
}

/// The `IBV_DEVICE_*` capability bits of `ibv_device_attr.device_cap_flags`
/// (`ibv_query_device(3)`), with their names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeviceCapFlags(pub u32);

/// Every `IBV_DEVICE_*` bit libibverbs defines for `device_cap_flags`, with its C name: each
/// flag is written once, and [`DeviceCapFlags::names`] drops the `IBV_DEVICE_` prefix.
macro_rules! device_caps {
    ($($flag:ident),* $(,)?) => {
        &[$((ibv_device_cap_flags::$flag, stringify!($flag))),*]
    };
}
const DEVICE_CAPS: &[(ibv_device_cap_flags, &str)] = device_caps![
    IBV_DEVICE_RESIZE_MAX_WR,
    IBV_DEVICE_BAD_PKEY_CNTR,
    IBV_DEVICE_BAD_QKEY_CNTR,
    IBV_DEVICE_RAW_MULTI,
    IBV_DEVICE_AUTO_PATH_MIG,
    IBV_DEVICE_CHANGE_PHY_PORT,
    IBV_DEVICE_UD_AV_PORT_ENFORCE,
    IBV_DEVICE_CURR_QP_STATE_MOD,
    IBV_DEVICE_SHUTDOWN_PORT,
    IBV_DEVICE_INIT_TYPE,
    IBV_DEVICE_PORT_ACTIVE_EVENT,
    IBV_DEVICE_SYS_IMAGE_GUID,
    IBV_DEVICE_RC_RNR_NAK_GEN,
    IBV_DEVICE_SRQ_RESIZE,
    IBV_DEVICE_N_NOTIFY_CQ,
    IBV_DEVICE_MEM_WINDOW,
    IBV_DEVICE_UD_IP_CSUM,
    IBV_DEVICE_XRC,
    IBV_DEVICE_MEM_MGT_EXTENSIONS,
    IBV_DEVICE_MEM_WINDOW_TYPE_2A,
    IBV_DEVICE_MEM_WINDOW_TYPE_2B,
    IBV_DEVICE_RC_IP_CSUM,
    IBV_DEVICE_RAW_IP_CSUM,
];

impl DeviceCapFlags {
    /// Memory windows (`ibv_alloc_mw(3)`).
    pub const MEM_WINDOW: DeviceCapFlags =
        DeviceCapFlags(ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW.0);
    /// Type 2B memory windows (bound with `ibv_post_send`).
    pub const MEM_WINDOW_TYPE_2B: DeviceCapFlags =
        DeviceCapFlags(ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2B.0);
    /// The device resizes shared receive queues.
    pub const SRQ_RESIZE: DeviceCapFlags =
        DeviceCapFlags(ibv_device_cap_flags::IBV_DEVICE_SRQ_RESIZE.0);

    /// The raw bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: DeviceCapFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The names of the bits set, in bit order without the `IBV_DEVICE_` prefix, e.g.
    /// `RC_RNR_NAK_GEN`; bits libibverbs does not name come last as one hex value.
    pub fn names(self) -> Vec<String> {
        let mut rest = self.0;
        let mut names: Vec<String> = DEVICE_CAPS
            .iter()
            .filter(|(f, _)| self.0 & f.0 != 0)
            .map(|(f, n)| {
                rest &= !f.0;
                n.strip_prefix("IBV_DEVICE_").unwrap_or(n).to_string()
            })
            .collect();
        if rest != 0 {
            names.push(format!("{rest:#x}"));
        }
        names
    }
}

/// The vendor ID the kernel's rxe driver (SoftRoCE) reports: no IEEE OUI, a constant of the
/// driver (`RXE_VENDOR_ID`).
pub const RXE_VENDOR_ID: u32 = 0xff_ffff;
/// The vendor ID the kernel's siw driver (Soft-iWARP) reports (`SIW_VENDOR_ID`, "bmt").
pub const SIW_VENDOR_ID: u32 = 0x62_6d74;

impl DeviceAttr {
    /// The software driver behind the device — `Some("rxe")` (SoftRoCE) or `Some("siw")`
    /// (Soft-iWARP) — or `None` for a hardware NIC. Told from the vendor ID each of these kernel
    /// drivers reports (a constant of the driver, not a real OUI), which holds whatever the
    /// device is named and whatever netdev it sits on (sysfs's `device/driver` of an rxe device
    /// is the netdev's parent: `virtio_net`, `e1000e`, or nothing on a veth).
    pub fn software_driver(&self) -> Option<&'static str> {
        match self.vendor_id {
            RXE_VENDOR_ID => Some("rxe"),
            SIW_VENDOR_ID => Some("siw"),
            _ => None,
        }
    }
}

/// The state and capabilities of one port (a subset of `struct ibv_port_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortAttr {
    pub port_num: u8,
    pub state: PortState,
    pub max_mtu: Option<Mtu>,
    pub active_mtu: Option<Mtu>,
    pub link_layer: LinkLayer,
    pub lid: u16,
    pub sm_lid: u16,
    pub gid_tbl_len: u32,
    pub max_msg_sz: u32,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
}

impl Context {
    pub(crate) fn open(device: *mut ibv_device, name: String) -> Result<Context> {
        // SAFETY: `device` is a live entry of a device list the caller still holds; the new
        // context is ours alone.
        let ptr = unsafe { ibv_open_device(device) };
        if ptr.is_null() {
            return Err(VerbsError::last("ibv_open_device"));
        }
        Ok(Context {
            inner: Arc::new(ContextInner {
                ptr,
                name,
                ownership: Ownership::Owned,
            }),
        })
    }

    /// The device name, e.g. `rxe0`.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Device capabilities (`ibv_query_device(3)`).
    pub fn query_device(&self) -> Result<DeviceAttr> {
        // SAFETY: ibv_device_attr is plain C data; zero is a valid starting value.
        let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open; `a` is a valid out-pointer.
        let ret = unsafe { ibv_query_device(self.inner.ptr, &mut a) };
        VerbsError::check_ret("ibv_query_device", ret)?;
        // SAFETY: fw_ver is a NUL-terminated char array filled by the provider (zeroed above,
        // so a NUL exists even if it wrote nothing).
        let fw_ver = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok(DeviceAttr {
            fw_ver,
            node_guid: u64::from_be(a.node_guid),
            sys_image_guid: u64::from_be(a.sys_image_guid),
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            hw_ver: a.hw_ver,
            phys_port_cnt: a.phys_port_cnt,
            max_qp: a.max_qp,
            max_qp_wr: a.max_qp_wr,
            max_sge: a.max_sge,
            max_sge_rd: a.max_sge_rd,
            max_cq: a.max_cq,
            max_cqe: a.max_cqe,
            max_mr: a.max_mr,
            max_mr_size: a.max_mr_size,
            max_pd: a.max_pd,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom,
            max_res_rd_atom: a.max_res_rd_atom,
            max_srq: a.max_srq,
            max_ah: a.max_ah,
            atomic_cap: a.atomic_cap,
            device_cap_flags: DeviceCapFlags(a.device_cap_flags),
            page_size_cap: a.page_size_cap,
        })
    }

    /// Port state and attributes (`ibv_query_port(3)`); ports are numbered from 1.
    pub fn query_port(&self, port_num: u8) -> Result<PortAttr> {
        // SAFETY: plain C data; zeroed first because the compat fallback does not clear it.
        let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open; `a` is a valid, full-size ibv_port_attr.
        let ret = unsafe { ___ibv_query_port(self.inner.ptr, port_num, &mut a) };
        if ret != 0 {
            let err = VerbsError::from_ret("ibv_query_port", ret);
            if err.errno() == Some(Errno::EINVAL) {
                return Err(VerbsError::InvalidArgument(format!(
                    "device {} has no port {port_num} (ports are numbered from 1)",
                    self.name()
                )));
            }
            return Err(err);
        }
        Ok(PortAttr {
            port_num,
            state: PortState(a.state),
            max_mtu: Mtu::from_ibv(a.max_mtu),
            active_mtu: Mtu::from_ibv(a.active_mtu),
            link_layer: LinkLayer::from_ibv(a.link_layer),
            lid: a.lid,
            sm_lid: a.sm_lid,
            gid_tbl_len: a.gid_tbl_len.max(0) as u32,
            max_msg_sz: a.max_msg_sz,
            active_width: a.active_width,
            active_speed: a.active_speed,
            phys_state: a.phys_state,
        })
    }

    /// One GID (`ibv_query_gid(3)`); an empty index reads as all zeros.
    pub fn query_gid(&self, port_num: u8, index: u32) -> Result<Gid> {
        let mut g = ibv_gid { raw: [0; 16] };
        // SAFETY: the context is open; `g` is a valid out-pointer.
        let ret = unsafe { ibv_query_gid(self.inner.ptr, port_num, index as i32, &mut g) };
        VerbsError::check_ret("ibv_query_gid", ret)?;
        // SAFETY: every bit pattern of the union is a valid [u8; 16].
        Ok(Gid(unsafe { g.raw }))
    }

    /// One populated GID-table entry with its type and netdev, or `None` for an empty index
    /// (`ibv_query_gid_ex(3)`, falling back to `ibv_query_gid(3)` and sysfs on old kernels).
    pub fn gid_entry(&self, port_num: u8, index: u32) -> Result<Option<GidEntry>> {
        // SAFETY: plain C data.
        let mut e: ibv_gid_entry = unsafe { std::mem::zeroed() };
        // SAFETY: the context is open; `e` is a valid out-pointer of the size we pass.
        let ret = unsafe {
            _ibv_query_gid_ex(
                self.inner.ptr,
                port_num as u32,
                index,
                &mut e,
                0,
                std::mem::size_of::<ibv_gid_entry>(),
            )
        };
        let (gid, gid_type) = match ret {
            0 => {
                // SAFETY: every bit pattern of the union is a valid [u8; 16].
                (
                    Gid(unsafe { e.gid.raw }),
                    Some(GidType::from_ibv(e.gid_type)),
                )
            }
            r if r == Errno::ENODATA as i32 => return Ok(None),
            r if r == Errno::EOPNOTSUPP as i32 || r == Errno::ENOSYS as i32 => {
                (self.query_gid(port_num, index)?, None)
            }
            r => return Err(VerbsError::from_ret("ibv_query_gid_ex", r)),
        };
        if gid.is_zero() {
            return Ok(None);
        }
        let gid_type = gid_type
            .or_else(|| {
                sysfs::gid_type(self.name(), port_num, index).and_then(|s| GidType::from_sysfs(&s))
            })
            .unwrap_or(GidType::IbOrRoceV1);
        Ok(Some(GidEntry {
            index,
            gid,
            gid_type,
            netdev: sysfs::gid_netdev(self.name(), port_num, index),
        }))
    }

    /// Every populated entry of a port's GID table, in index order.
    ///
    /// One `ibv_query_gid_table(3)` reads the populated entries of every port at once; asking
    /// index by index costs one command per index, and rxe's table has 1024 (measured in the
    /// guest: 1023 failed ioctls in every start of a tool, docs/benchmarks.md). Kernels without
    /// the table command get the walk.
    pub fn gid_table(&self, port_num: u8) -> Result<Vec<GidEntry>> {
        let len = self.query_port(port_num)?.gid_tbl_len;
        match self.gid_table_at_once(port_num, len)? {
            Some(table) => Ok(table),
            None => self.gid_table_walk(port_num, len),
        }
    }

    /// [`Self::gid_table`] in one command, or `None` where the kernel lacks it.
    fn gid_table_at_once(&self, port_num: u8, len: u32) -> Result<Option<Vec<GidEntry>>> {
        let ports = usize::from(self.query_device()?.phys_port_cnt.max(1));
        let max = ports * len.max(1) as usize;
        let mut raw: Vec<ibv_gid_entry> = (0..max)
            // SAFETY: plain C data; all zeros is a valid ibv_gid_entry.
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        // SAFETY: the context is open; `raw` holds `max` entries of the size we pass, and the
        // library writes at most `max` of them.
        let ret = unsafe {
            _ibv_query_gid_table(
                self.inner.ptr,
                raw.as_mut_ptr(),
                max,
                0,
                std::mem::size_of::<ibv_gid_entry>(),
            )
        };
        if ret < 0 {
            let errno = -ret as i32;
            if errno == Errno::EOPNOTSUPP as i32 || errno == Errno::ENOSYS as i32 {
                return Ok(None);
            }
            return Err(VerbsError::from_ret("ibv_query_gid_table", errno));
        }
        raw.truncate(ret as usize);
        let mut out: Vec<GidEntry> = raw
            .iter()
            .filter(|e| e.port_num == u32::from(port_num))
            .filter_map(|e| {
                // SAFETY: every bit pattern of the union is a valid [u8; 16].
                let gid = Gid(unsafe { e.gid.raw });
                (!gid.is_zero()).then(|| GidEntry {
                    index: e.gid_index,
                    gid,
                    gid_type: GidType::from_ibv(e.gid_type),
                    netdev: sysfs::gid_netdev(self.name(), port_num, e.gid_index),
                })
            })
            .collect();
        out.sort_by_key(|e| e.index);
        Ok(Some(out))
    }

    /// [`Self::gid_table`] one index at a time.
    fn gid_table_walk(&self, port_num: u8, len: u32) -> Result<Vec<GidEntry>> {
        let mut out = Vec::new();
        for index in 0..len {
            if let Some(e) = self.gid_entry(port_num, index)? {
                out.push(e);
            }
        }
        Ok(out)
    }

    /// The GID to use on a port: `requested` if given (it must be populated), otherwise the
    /// rule of [`choose_gid`] — which both sides apply alike, so they agree without flags.
    pub fn choose_gid(&self, port_num: u8, requested: Option<u32>) -> Result<GidChoice> {
        let table = self.gid_table(port_num)?;
        choose_gid(&table, requested).map_err(|msg| {
            VerbsError::InvalidArgument(format!("{} port {port_num}: {msg}", self.name()))
        })
    }

    /// A protection domain (`ibv_alloc_pd(3)`).
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::alloc(self)
    }

    /// A completion queue of at least `cqe` entries (`ibv_create_cq(3)`), optionally tied to a
    /// completion channel for event-driven waiting.
    pub fn create_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        Cq::create(self, cqe, channel)
    }

    /// A completion channel (`ibv_create_comp_channel(3)`).
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        CompChannel::create(self)
    }

    /// The NUMA node the device sits on, when sysfs knows it.
    pub fn numa_node(&self) -> Option<u32> {
        sysfs::numa_node(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_bits_are_named_and_unknown_bits_kept() {
        let rxe_like = DeviceCapFlags(
            ibv_device_cap_flags::IBV_DEVICE_RC_RNR_NAK_GEN.0
                | DeviceCapFlags::MEM_WINDOW.0
                | 1 << 31,
        );
        assert_eq!(
            rxe_like.names(),
            ["RC_RNR_NAK_GEN", "MEM_WINDOW", "0x80000000"]
        );
        assert!(rxe_like.contains(DeviceCapFlags::MEM_WINDOW));
        assert!(!rxe_like.contains(DeviceCapFlags::SRQ_RESIZE));
        assert!(DeviceCapFlags::default().names().is_empty());
        for (i, (f, n)) in DEVICE_CAPS.iter().enumerate() {
            assert_eq!(f.0.count_ones(), 1, "{n} is one bit");
            assert!(n.starts_with("IBV_DEVICE_"), "{n} is the C name");
            if let Some((g, m)) = DEVICE_CAPS.get(i + 1) {
                assert!(f.0 < g.0, "{n} before {m}: the table is in bit order");
            }
        }
    }
}
