//! The names of one kind of run's queues: `{prefix}{pid}` is the *base* of the run whose
//! coordinator (or launcher) is process `pid`, and member `i` is `{base}-{tag}{i}` — for
//! example `/vl-procs-4242` and `/vl-procs-4242-w0`. The pid in the name is what ties the queues
//! to their owner: a worker checks that the base it was given names its own coordinator
//! ([`QueueFamily::check_owner`]) before it arranges to remove those queues when the
//! coordinator dies, and the next run removes the queues of owners that no longer exist
//! ([`QueueFamily::remove_orphans`]).

use super::cleanup::{remove_orphans, split_owner};

/// One tool's queue names (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFamily {
    /// What every name starts with, the leading '/' included: `/vl-procs-`.
    pub prefix: &'static str,
    /// What comes before a member's index: `w` (worker), `r` (rank).
    pub tag: &'static str,
    /// Whether the base is itself a queue (the coordinator's inbox), or only names the run.
    pub base_is_queue: bool,
}

impl QueueFamily {
    /// The base of the run whose coordinator is process `pid`.
    pub fn base(&self, pid: u32) -> String {
        format!("{}{pid}", self.prefix)
    }

    /// The queue of member `i` of the run under `base`.
    pub fn member(&self, base: &str, i: u32) -> String {
        format!("{base}-{}{i}", self.tag)
    }

    /// Every queue of the run under `base` with `n` members: the base first when it is a queue.
    pub fn all(&self, base: &str, n: u32) -> Vec<String> {
        let own = self.base_is_queue.then(|| base.to_string());
        own.into_iter()
            .chain((0..n).map(|i| self.member(base, i)))
            .collect()
    }

    /// The owner's pid in a base made by [`QueueFamily::base`]; `None` for any other string.
    pub fn owner_of(&self, base: &str) -> Option<u32> {
        match split_owner(base.strip_prefix(self.prefix)?) {
            Some((pid, "")) => Some(pid),
            _ => None,
        }
    }

    /// Whether `base` (given to a worker by `flag`) names the queues of `coordinator`, the
    /// worker's own coordinator: a worker tied to another run's queues would remove them when
    /// its coordinator dies. The error says which pid the name holds.
    pub fn check_owner(&self, base: &str, flag: &str, coordinator: u32) -> Result<(), String> {
        match self.owner_of(base) {
            None => Err(format!(
                "{flag} {base:?}: not a name of this tool's queues ({}PID)",
                self.prefix
            )),
            Some(owner) if owner != coordinator => Err(format!(
                "{flag} {base:?} names the queues of pid {owner}, but this process's \
                 coordinator is pid {coordinator}"
            )),
            Some(_) => Ok(()),
        }
    }

    /// Removes the queues of this family whose owner no longer runs (left by one killed
    /// outright, see [`remove_orphans`]) and says what was removed: one line per owner, "removed
    /// 2 message queues left by a coordinator that is gone (pid 4242): /vl-procs-4242
    /// /vl-procs-4242-w0", for the caller to print.
    pub fn remove_orphans(&self) -> Vec<String> {
        remove_orphans(self.prefix)
            .into_iter()
            .map(|(pid, names)| {
                format!(
                    "removed {} message queue{} left by a coordinator that is gone (pid {pid}): {}",
                    names.len(),
                    if names.len() == 1 { "" } else { "s" },
                    names.join(" ")
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROCS: QueueFamily = QueueFamily {
        prefix: "/vl-procs-",
        tag: "w",
        base_is_queue: true,
    };
    const COLL: QueueFamily = QueueFamily {
        prefix: "/vl-coll-",
        tag: "r",
        base_is_queue: false,
    };

    #[test]
    fn names_and_owner() {
        let base = PROCS.base(4242);
        assert_eq!(base, "/vl-procs-4242");
        assert_eq!(
            PROCS.all(&base, 2),
            ["/vl-procs-4242", "/vl-procs-4242-w0", "/vl-procs-4242-w1"]
        );
        assert_eq!(
            COLL.all(&COLL.base(7), 2),
            ["/vl-coll-7-r0", "/vl-coll-7-r1"]
        );
        assert_eq!(PROCS.owner_of(&base), Some(4242));
        for not_a_base in [
            "/vl-coll-4242",
            "/vl-procs-",
            "/vl-procs-0",
            "/vl-procs-042",
            "/vl-procs-+42",
            "/vl-procs-42-w0",
            "/vl-procs-4x",
        ] {
            assert_eq!(PROCS.owner_of(not_a_base), None, "{not_a_base}");
        }
    }

    #[test]
    fn a_worker_refuses_another_runs_queues() {
        assert_eq!(PROCS.check_owner("/vl-procs-42", "--q", 42), Ok(()));
        let e = PROCS.check_owner("/vl-procs-43", "--q", 42).unwrap_err();
        assert_eq!(
            e,
            "--q \"/vl-procs-43\" names the queues of pid 43, but this process's coordinator \
             is pid 42"
        );
        let e = PROCS.check_owner("/q", "--q", 42).unwrap_err();
        assert_eq!(
            e,
            "--q \"/q\": not a name of this tool's queues (/vl-procs-PID)"
        );
    }
}
