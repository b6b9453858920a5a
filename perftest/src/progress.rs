//! Progress of long runs on stderr — `-a` sweeps, `-D` runs and the collectives' size sweeps —
//! only when stderr is a terminal: stdout stays exactly perftest's (or nccl-tests') layout, and a
//! redirected or piped stderr (CI logs, scripts) sees nothing.
//!
//! The bar counts message sizes and names the one running; rows printed to the same terminal
//! go through [`Progress::row`], which lifts the bar while the row is written.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::params::{Config, RunMode};

/// The bar of one run (or nothing, when there is nothing to show or no terminal to show it).
pub struct Progress {
    bar: Option<ProgressBar>,
    per_size: Option<Duration>,
}

impl Progress {
    /// A bar for a run of `sizes`, shown when the run is long — a sweep, or `-D` — and stderr
    /// is a terminal. The workers of a `--procs` run never show one.
    pub fn start(cfg: &Config, sizes: &[u64]) -> Progress {
        let per_size = match cfg.timing.mode {
            RunMode::Duration(d) => Some(d),
            RunMode::Iters(_) => None,
        };
        let long = sizes.len() > 1 || per_size.is_some();
        Progress::new(
            &cfg.tool.name(),
            sizes.len(),
            per_size,
            long && cfg.procs.worker.is_none(),
        )
    }

    /// A bar for a collective's sweep of `sizes` message sizes, shown by the rank that prints
    /// the table (rank 0) when there is more than one size and stderr is a terminal.
    pub fn sweep(tool: &str, sizes: usize, printing_rank: bool) -> Progress {
        Progress::new(tool, sizes, None, printing_rank && sizes > 1)
    }

    fn new(tool: &str, sizes: usize, per_size: Option<Duration>, wanted: bool) -> Progress {
        let show = wanted && std::io::stderr().is_terminal();
        Progress {
            bar: show.then(|| new_bar(tool, sizes as u64)),
            per_size,
        }
    }

    /// A size starts.
    pub fn size(&self, bytes: u64) {
        self.warmed_size(bytes, 0)
    }

    /// A size starts, after `warmup` warm-up messages per QP (0: none), which the line shows:
    /// `8388608 B after 1 warm-up`.
    pub fn warmed_size(&self, bytes: u64, warmup: u64) {
        if let Some(bar) = &self.bar {
            let warm = match warmup {
                0 => String::new(),
                n => format!(" after {n} warm-up"),
            };
            match self.per_size {
                Some(d) => bar.set_message(format!("{bytes} B for {} s{warm}", d.as_secs())),
                None => bar.set_message(format!("{bytes} B{warm}")),
            }
        }
    }

    /// A size is done: `print` writes its row while the bar is lifted off the terminal.
    pub fn row<R>(&self, print: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => {
                let r = bar.suspend(print);
                bar.inc(1);
                r
            }
            None => print(),
        }
    }
}

impl Drop for Progress {
    /// The bar leaves no trace, whether the run ended or failed.
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn new_bar(tool: &str, sizes: u64) -> ProgressBar {
    let style = ProgressStyle::with_template(
        "{spinner} {prefix}: [{bar:30}] {pos}/{len} sizes, running {msg} ({elapsed})",
    )
    .expect("a valid template")
    .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(Some(sizes), ProgressDrawTarget::stderr())
        .with_style(style)
        .with_prefix(tool.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
