//! Which CPU a tool's thread runs on: `--cpu`, else a CPU local to the NIC when sysfs tells;
//! for the processes of `--procs` (and of a collective launcher), one CPU each.

use anyhow::{Context as _, Result};
use verbs_lab::affinity::{self, CpuChoice, CpuList};

use crate::conn::device::LocalDev;
use crate::params::Config;

/// Pins the thread: `--cpu`, else a CPU local to the NIC when sysfs tells.
pub fn pin(cfg: &Config, dev: &LocalDev) -> Result<Option<(usize, String)>> {
    let choice = match &cfg.procs.worker {
        Some(w) => worker_cpu(dev.ctx.name(), cfg.pin.cpu.as_ref(), w.index),
        None if cfg.pin.cpu.is_none() && !cfg.pin.auto => Ok(None),
        None => affinity::choose_cpu(dev.ctx.name(), cfg.pin.cpu.as_ref(), 0),
    }
    .map_err(anyhow::Error::msg)
    .context("choosing a CPU (--cpu)")?;
    if let Some((cpu, _)) = &choice {
        affinity::pin_current_thread(*cpu)
            .map_err(anyhow::Error::msg)
            .context("pinning the thread (--cpu)")?;
    }
    Ok(choice)
}

/// The CPU of worker `index` on device `dev`: [`affinity::cpu_choice`] (the `--cpu` list, else
/// the NIC-local CPUs); when that does not pin (a virtual NIC such as rxe has no locality), the
/// `index`-th CPU this process may use, so the workers still get a core each.
pub fn worker_cpu(
    dev: &str,
    requested: Option<&CpuList>,
    index: u32,
) -> Result<Option<(usize, String)>, String> {
    let choice = affinity::cpu_choice(dev, requested, index as usize)?;
    let allowed =
        affinity::allowed_cpus().map_err(|e| format!("cannot read the CPU affinity: {e}"))?;
    Ok(pick_worker_cpu(choice, &allowed, index))
}

/// [`worker_cpu`] without the machine: the choice made, the allowed CPUs, the index.
pub fn pick_worker_cpu(
    choice: CpuChoice,
    allowed: &CpuList,
    index: u32,
) -> Option<(usize, String)> {
    match choice {
        CpuChoice::Pin { cpu, why } => Some((cpu, why)),
        CpuChoice::DontPin { why } if !allowed.is_empty() => {
            let n = allowed.len();
            let i = index as usize;
            let shared = if i >= n {
                format!(", shared: process {i} wraps around {n} CPUs")
            } else {
                String::new()
            };
            Some((
                allowed.cpus()[i % n],
                format!("one per process among the allowed CPUs {allowed}{shared}; {why}"),
            ))
        }
        CpuChoice::DontPin { .. } => None,
    }
}
