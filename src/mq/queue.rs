//! [`Queue`]: an open message queue carrying [`WorkerMsg`]s, with bounded waits and removal on
//! drop.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::mqueue::{
    mq_attr_member_t, mq_close, mq_getattr, mq_open, mq_receive, mq_send, mq_unlink, MQ_OFlag,
    MqAttr, MqdT,
};
use nix::poll::{PollFd, PollFlags};
use nix::sys::stat::Mode;

use super::cleanup::registry;
use super::limits::{call_error, check_name, create_error, open_error, MqError, Result};
use super::msg::{WorkerMsg, MQ_PRIO_MAX};
use crate::fdwait::{deadline_after, poll_until};

/// A queue's attributes (`mq_getattr(3)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueAttr {
    /// Capacity in messages.
    pub maxmsg: usize,
    /// Largest message in bytes (a receive buffer must be at least this large).
    pub msgsize: usize,
    /// Messages in the queue now.
    pub curmsgs: usize,
    /// `O_NONBLOCK` is set on this descriptor (always, for a [`Queue`]).
    pub nonblocking: bool,
}

impl From<MqAttr> for QueueAttr {
    fn from(a: MqAttr) -> QueueAttr {
        QueueAttr {
            maxmsg: a.maxmsg().max(0) as usize,
            msgsize: a.msgsize().max(0) as usize,
            curmsgs: a.curmsgs().max(0) as usize,
            nonblocking: a.flags() & mq_attr_member_t::from(MQ_OFlag::O_NONBLOCK.bits()) != 0,
        }
    }
}

/// An open message queue carrying [`WorkerMsg`]s. The process that created it (the *owner*) removes
/// its name when the `Queue` is dropped; every `Queue` closes its descriptor on drop.
///
/// The descriptor is always `O_NONBLOCK`: every wait is a `poll(2)` with a deadline, so it is
/// bounded whatever other readers and writers do. [`Queue::try_recv`] / [`Queue::try_send`]
/// give the nonblocking behaviour (EAGAIN → [`MqError::WouldBlock`]).
#[derive(Debug)]
pub struct Queue {
    name: String,
    mqd: Option<MqdT>,
    owner: bool,
    maxmsg: usize,
    msgsize: usize,
    send_wait: Duration,
}

impl Queue {
    /// How long [`Queue::send`] waits for room in a full queue, unless changed with
    /// [`Queue::set_send_wait`].
    pub const DEFAULT_SEND_WAIT: Duration = Duration::from_secs(10);

    /// Creates a new queue (`mq_open(3)` with `O_CREAT | O_EXCL | O_RDWR`, mode 0600, the given
    /// `mq_maxmsg` and `mq_msgsize`) and registers its name for cleanup. Fails if the name
    /// exists. The error names the limit that refused: `maxmsg` above `msg_max` or `msgsize`
    /// above `msgsize_max` (EINVAL), the per-user bytes (EMFILE), `queues_max` (ENOSPC).
    ///
    /// To carry every [`WorkerMsg`], `msgsize` must be at least
    /// [`MAX_MSG_LEN`](super::MAX_MSG_LEN); a queue that only carries small messages (`Go`,
    /// `Abort`) may be smaller — [`Queue::send`] refuses what does not fit.
    pub fn create(name: &str, maxmsg: usize, msgsize: usize) -> Result<Queue> {
        check_name(name)?;
        if maxmsg == 0 || msgsize == 0 {
            return Err(MqError::Invalid(format!(
                "queue {name}: maxmsg ({maxmsg}) and msgsize ({msgsize}) must be at least 1"
            )));
        }
        let too_big = |v: usize| mq_attr_member_t::try_from(v).is_err();
        if too_big(maxmsg) || too_big(msgsize) {
            return Err(MqError::Invalid(format!(
                "queue {name}: maxmsg {maxmsg} / msgsize {msgsize} out of range"
            )));
        }
        let attr = MqAttr::new(
            0,
            maxmsg as mq_attr_member_t,
            msgsize as mq_attr_member_t,
            0,
        );
        // Hold the registry while creating: a signal's cleanup then sees either no queue or a
        // registered one, never a created but unregistered one.
        let mut reg = registry();
        let mqd = mq_open(
            name,
            MQ_OFlag::O_CREAT | MQ_OFlag::O_EXCL | MQ_OFlag::O_RDWR | MQ_OFlag::O_NONBLOCK,
            Mode::S_IRUSR | Mode::S_IWUSR,
            Some(&attr),
        )
        .map_err(|e| create_error(name, maxmsg, msgsize, e))?;
        reg.push(name.to_string());
        drop(reg);
        Ok(Queue {
            name: name.to_string(),
            mqd: Some(mqd),
            owner: true,
            maxmsg,
            msgsize,
            send_wait: Queue::DEFAULT_SEND_WAIT,
        })
    }

    /// Opens an existing queue for reading and writing (`mq_open(3)` with `O_RDWR`); dropping
    /// it closes the descriptor but leaves the queue to its owner.
    pub fn open(name: &str) -> Result<Queue> {
        check_name(name)?;
        let mqd = mq_open(
            name,
            MQ_OFlag::O_RDWR | MQ_OFlag::O_NONBLOCK,
            Mode::empty(),
            None,
        )
        .map_err(|e| open_error(name, e))?;
        let a: QueueAttr = mq_getattr(&mqd)
            .map_err(|e| call_error("mq_getattr", name, e, ""))?
            .into();
        Ok(Queue {
            name: name.to_string(),
            mqd: Some(mqd),
            owner: false,
            maxmsg: a.maxmsg,
            msgsize: a.msgsize,
            send_wait: Queue::DEFAULT_SEND_WAIT,
        })
    }

    /// True if a queue of this name exists: `mq_open(O_RDONLY)` succeeds (and is closed
    /// again) or fails with anything but ENOENT.
    pub fn exists(name: &str) -> Result<bool> {
        check_name(name)?;
        match mq_open(name, MQ_OFlag::O_RDONLY, Mode::empty(), None) {
            Ok(mqd) => {
                let _ = mq_close(mqd);
                Ok(true)
            }
            Err(Errno::ENOENT) => Ok(false),
            Err(Errno::EACCES) => Ok(true),
            Err(e) => Err(open_error(name, e)),
        }
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// True if this process created the queue and will remove it on drop.
    pub fn is_owner(&self) -> bool {
        self.owner
    }

    /// Capacity in messages and the largest message, as created.
    pub fn capacity(&self) -> (usize, usize) {
        (self.maxmsg, self.msgsize)
    }

    /// Changes how long [`Queue::send`] waits for room.
    pub fn set_send_wait(&mut self, wait: Duration) {
        self.send_wait = wait;
    }

    fn mqd(&self) -> &MqdT {
        self.mqd.as_ref().expect("the descriptor lives until drop")
    }

    /// The attributes now (`mq_getattr(3)`), with the number of queued messages.
    pub fn attr(&self) -> Result<QueueAttr> {
        mq_getattr(self.mqd())
            .map(QueueAttr::from)
            .map_err(|e| call_error("mq_getattr", &self.name, e, ""))
    }

    /// Sends `msg` with `priority` (0 to 32767; higher is received first), waiting up to the
    /// send wait (10 s by default) for room if the queue is full.
    pub fn send(&self, msg: &WorkerMsg, priority: u32) -> Result<()> {
        self.send_timeout(msg, priority, self.send_wait)
    }

    /// Sends `msg` (`mq_send(3)`), waiting up to `timeout` for room.
    pub fn send_timeout(&self, msg: &WorkerMsg, priority: u32, timeout: Duration) -> Result<()> {
        let bytes = self.encode(msg, priority)?;
        let deadline = deadline_after(timeout);
        loop {
            match mq_send(self.mqd(), &bytes, priority) {
                Ok(()) => return Ok(()),
                Err(Errno::EAGAIN) => {
                    if !self.wait_for(PollFlags::POLLOUT, deadline)? {
                        return Err(MqError::Timeout {
                            name: self.name.clone(),
                            what:
                                "room for a message (the queue stayed full: is its reader alive?)",
                            after: timeout,
                        });
                    }
                }
                Err(Errno::EINTR) => {}
                Err(e) => return Err(self.send_error(e, bytes.len())),
            }
        }
    }

    /// Sends without waiting: a full queue is [`MqError::WouldBlock`].
    pub fn try_send(&self, msg: &WorkerMsg, priority: u32) -> Result<()> {
        let bytes = self.encode(msg, priority)?;
        match mq_send(self.mqd(), &bytes, priority) {
            Ok(()) => Ok(()),
            Err(Errno::EAGAIN) => Err(MqError::WouldBlock {
                name: self.name.clone(),
                what: "the queue is full (mq_send: EAGAIN)",
            }),
            Err(e) => Err(self.send_error(e, bytes.len())),
        }
    }

    fn encode(&self, msg: &WorkerMsg, priority: u32) -> Result<Vec<u8>> {
        if priority >= MQ_PRIO_MAX {
            return Err(MqError::Invalid(format!(
                "priority {priority} on {}: priorities run from 0 to {}",
                self.name,
                MQ_PRIO_MAX - 1
            )));
        }
        let bytes = msg.encode().map_err(|err| MqError::Codec {
            name: self.name.clone(),
            err,
        })?;
        if bytes.len() > self.msgsize {
            return Err(MqError::Invalid(format!(
                "{}: a {} message of {} bytes does not fit the queue's msgsize of {} bytes",
                self.name,
                msg.kind(),
                bytes.len(),
                self.msgsize
            )));
        }
        Ok(bytes)
    }

    fn send_error(&self, e: Errno, len: usize) -> MqError {
        let hint = match e {
            Errno::EMSGSIZE => format!(
                "the {len}-byte message is longer than the queue's msgsize of {}",
                self.msgsize
            ),
            Errno::EBADF => "the descriptor is not open for writing".into(),
            _ => String::new(),
        };
        call_error("mq_send", &self.name, e, &hint)
    }

    /// Receives the oldest message of the highest priority, waiting up to `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<WorkerMsg> {
        self.recv_with_priority(timeout).map(|(m, _)| m)
    }

    /// As [`Queue::recv_timeout`], with the message's priority (`mq_receive(3)`).
    pub fn recv_with_priority(&self, timeout: Duration) -> Result<(WorkerMsg, u32)> {
        let deadline = deadline_after(timeout);
        loop {
            match self.receive_once()? {
                Some(got) => return Ok(got),
                None => {
                    if !self.wait_for(PollFlags::POLLIN, deadline)? {
                        return Err(MqError::Timeout {
                            name: self.name.clone(),
                            what: "message",
                            after: timeout,
                        });
                    }
                }
            }
        }
    }

    /// Receives without waiting: an empty queue is [`MqError::WouldBlock`].
    pub fn try_recv(&self) -> Result<(WorkerMsg, u32)> {
        self.receive_once()?.ok_or_else(|| MqError::WouldBlock {
            name: self.name.clone(),
            what: "the queue is empty (mq_receive: EAGAIN)",
        })
    }

    /// One `mq_receive`: `Ok(None)` when the queue is empty.
    fn receive_once(&self) -> Result<Option<(WorkerMsg, u32)>> {
        let mut buf = vec![0u8; self.msgsize];
        let mut prio = 0u32;
        loop {
            match mq_receive(self.mqd(), &mut buf, &mut prio) {
                Ok(n) => {
                    let msg = WorkerMsg::decode(&buf[..n]).map_err(|err| MqError::Codec {
                        name: self.name.clone(),
                        err,
                    })?;
                    return Ok(Some((msg, prio)));
                }
                Err(Errno::EAGAIN) => return Ok(None),
                Err(Errno::EINTR) => {}
                Err(e) => {
                    let hint = if e == Errno::EMSGSIZE {
                        format!(
                            "the receive buffer ({} bytes) is smaller than the queue's msgsize",
                            buf.len()
                        )
                    } else {
                        String::new()
                    };
                    return Err(call_error("mq_receive", &self.name, e, &hint));
                }
            }
        }
    }

    /// Waits (`poll(2)`, [`poll_until`]) until the descriptor is ready for `events` or
    /// `deadline` passes; false on the deadline.
    fn wait_for(&self, events: PollFlags, deadline: Instant) -> Result<bool> {
        let mut fds = [PollFd::new(self.mqd().as_fd(), events)];
        poll_until(&mut fds, Some(deadline)).map_err(|e| call_error("poll", &self.name, e, ""))
    }
}

impl Drop for Queue {
    /// `mq_close(3)`; the owner also `mq_unlink(3)`s the name and forgets it.
    fn drop(&mut self) {
        if let Some(mqd) = self.mqd.take() {
            let _ = mq_close(mqd);
        }
        if self.owner {
            // Under the registry lock, so a signal's cleanup never unlinks a name that this
            // drop already removed (and someone else may have created again since).
            let mut reg = registry();
            let _ = mq_unlink(self.name.as_str());
            reg.retain(|n| n != &self.name);
        }
    }
}
