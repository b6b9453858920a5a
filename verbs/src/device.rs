//! The device list (`ibv_get_device_list(3)`) and the devices in it.

use std::ffi::CStr;
use std::marker::PhantomData;

use nix::errno::Errno;
use rdma_sys::{
    ibv_device, ibv_free_device_list, ibv_get_device_guid, ibv_get_device_list, ibv_get_device_name,
};

use super::attrs::PortState;
use super::context::{Context, PortAttr};
use super::error::{Result, VerbsError};
use super::gid::GidChoice;

/// The RDMA devices of this machine, as `ibv_get_device_list(3)` returns them.
///
/// The list must stay alive while its [`Device`]s are used (they borrow it); a [`Context`]
/// opened from a device does not need it any more.
pub struct DeviceList {
    list: *mut *mut ibv_device,
    len: usize,
}

impl DeviceList {
    /// Lists the devices (`ibv_get_device_list(3)`).
    ///
    /// A kernel without RDMA makes the call return NULL with `ENOSYS`: that becomes
    /// [`VerbsError::NoRdmaSupport`]. An empty list is returned as such; use
    /// [`DeviceList::open`] to turn "no device" into an error that says how to get one.
    pub fn new() -> Result<DeviceList> {
        let mut n: i32 = 0;
        // SAFETY: `n` is a valid out-pointer; the returned array is owned by us until
        // ibv_free_device_list, which Drop calls exactly once.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            let errno = Errno::last();
            let errno = if errno == Errno::UnknownErrno {
                Errno::ENOSYS
            } else {
                errno
            };
            return Err(VerbsError::NoRdmaSupport { errno });
        }
        Ok(DeviceList {
            list,
            len: n.max(0) as usize,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The devices, in the order libibverbs lists them.
    pub fn iter(&self) -> impl Iterator<Item = Device<'_>> + '_ {
        (0..self.len).map(move |i| Device {
            // SAFETY: i < len, and the array holds `len` valid device pointers.
            ptr: unsafe { *self.list.add(i) },
            _list: PhantomData,
        })
    }

    /// The names of all devices.
    pub fn names(&self) -> Vec<String> {
        self.iter().map(|d| d.name()).collect()
    }

    /// The device called `name`, or an error that lists the devices there are.
    pub fn find(&self, name: &str) -> Result<Device<'_>> {
        self.iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| VerbsError::DeviceNotFound {
                name: name.into(),
                available: self.names(),
            })
    }

    /// Opens the device called `name`, or the first device when `name` is `None`.
    /// No device at all is an error ([`VerbsError::NoDevices`]) that says how to get one.
    pub fn open(name: Option<&str>) -> Result<Context> {
        let list = DeviceList::new()?;
        match name {
            Some(name) => list.find(name)?.open(),
            None => list.iter().next().ok_or(VerbsError::NoDevices)?.open(),
        }
    }

    /// What every tool does before it creates anything: opens the device called `name` (or
    /// the first, as [`DeviceList::open`]), queries port `port_num` (`ibv_query_port(3)`),
    /// refuses it unless it is ACTIVE ([`VerbsError::PortNotActive`]: nothing sent on it
    /// would arrive), and chooses its GID: index `gid_index`, or the automatic rule of
    /// [`Context::choose_gid`].
    pub fn open_port(
        name: Option<&str>,
        port_num: u8,
        gid_index: Option<u32>,
    ) -> Result<ActivePort> {
        let ctx = DeviceList::open(name)?;
        let port = ctx.query_port(port_num)?;
        if port.state != PortState::ACTIVE {
            return Err(VerbsError::PortNotActive {
                device: ctx.name().into(),
                port: port_num,
                state: port.state,
            });
        }
        let gid = ctx.choose_gid(port_num, gid_index)?;
        Ok(ActivePort { ctx, port, gid })
    }
}

/// An opened device with the ACTIVE port a tool uses and the GID it sends from
/// ([`DeviceList::open_port`]).
pub struct ActivePort {
    pub ctx: Context,
    /// The port's attributes as they were when it was opened (`port_num`, active MTU, LID).
    pub port: PortAttr,
    pub gid: GidChoice,
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from ibv_get_device_list and is freed only here.
        unsafe { ibv_free_device_list(self.list) };
    }
}

/// One device of a [`DeviceList`] (`struct ibv_device`), not yet opened.
#[derive(Clone, Copy)]
pub struct Device<'a> {
    ptr: *mut ibv_device,
    _list: PhantomData<&'a DeviceList>,
}

impl Device<'_> {
    /// The kernel name, e.g. `rxe0` or `mlx5_0` (`ibv_get_device_name(3)`).
    pub fn name(&self) -> String {
        // SAFETY: ptr is a live device of the borrowed list; ibv_get_device_name returns a
        // NUL-terminated string stored inside it, which we copy before the borrow ends.
        unsafe { CStr::from_ptr(ibv_get_device_name(self.ptr)) }
            .to_string_lossy()
            .into_owned()
    }

    /// The node GUID in host order (`ibv_get_device_guid(3)`); zero for SoftRoCE on some kernels.
    pub fn guid(&self) -> u64 {
        // SAFETY: ptr is a live device of the borrowed list.
        u64::from_be(unsafe { ibv_get_device_guid(self.ptr) })
    }

    /// Opens the device (`ibv_open_device(3)`), giving a [`Context`] for everything else.
    pub fn open(&self) -> Result<Context> {
        Context::open(self.ptr, self.name())
    }
}

/// Formats a GUID the way `ibv_devinfo` does: `0011:2233:4455:6677`.
pub fn format_guid(guid: u64) -> String {
    let b = guid.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn guid_format() {
        assert_eq!(
            super::format_guid(0x0011_2233_4455_6677),
            "0011:2233:4455:6677"
        );
    }
}
