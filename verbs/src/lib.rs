//! # vl_verbs: the safe verbs layer of verbs-lab
//!
//! libibverbs and librdmacm objects as owned Rust values, over `rdma-sys`. This crate is the
//! only one of the project where `unsafe` is allowed; every other crate says
//! `#![forbid(unsafe_code)]` and builds on what is here.
//!
//! One file per verbs object, named as the man pages name them. Ownership follows one rule
//! everywhere: **a child holds an `Arc` of its parent's handle**. An [`Mr`] holds its PD, a
//! [`Pd`] its context, a [`Qp`] its PD and CQs, a [`Cq`] its completion channel. Whatever order
//! values are dropped in, a parent is freed only after its last child, so `ibv_dealloc_pd` can
//! never fail with EBUSY and a CQ is never destroyed under a QP.
//!
//! Memory the NIC may touch is owned by its [`Mr`] and freed only after deregistration; work
//! requests name it through [`Sge`]s that only an MR can make. See `docs/architecture.md`.
//!
//! Beside the objects, the small helpers they need and nothing else: [`fdwait`] (the one
//! bounded `poll(2)` until a deadline), [`sysfs`] (what the kernel says about a device: GID
//! types, netdevs, NUMA node, port counters), [`names`] (enums printed and parsed by name).

pub mod ah;
pub mod async_event;
pub mod attrs;
pub mod channel;
pub mod cm;
pub mod context;
pub mod cq;
pub mod device;
pub mod error;
pub(crate) mod fd;
pub mod fdwait;
pub mod gid;
pub(crate) mod handle;
pub mod mr;
pub mod mw;
pub mod names;
pub mod pd;
pub mod qp;
pub mod srq;
pub mod sysfs;
pub(crate) mod ud_sends;
pub mod wc;
pub mod wr;

pub use ah::{Ah, AhAttr, GlobalRoute};
pub use async_event::{AsyncEvent, AsyncEventKind};
pub use attrs::{AccessFlags, LinkLayer, Mtu, PortState, QpState, QpType};
pub use channel::CompChannel;
pub use cm::{CmEvent, CmEventKind, CmId, CmQpOverrides, ConnParam, EventChannel, PortSpace};
pub use context::{Context, DeviceAttr, DeviceCapFlags, PortAttr, RXE_VENDOR_ID, SIW_VENDOR_ID};
pub use cq::Cq;
pub use device::{ActivePort, Device, DeviceList};
pub use error::{Result, VerbsError};
pub use gid::{Gid, GidChoice, GidEntry, GidType};
pub use mr::Mr;
pub use mw::Mw;
pub use pd::Pd;
pub use qp::{InitAttr, Qp, QpCaps, QpInitAttr, RtrAttr, RtsAttr, SendList};
pub use srq::{Srq, SrqAttr};
pub use wc::{WcOpcode, WcStatus, WorkCompletion};
pub use wr::{Payload, RecvWr, RemoteBuf, SendOp, SendWr, Sge, UdDest};
