//! What a lesson prints as it goes: numbered steps and the lines under them, silenced by `-q`.
//! Every line reaches stdout through [`outln!`](crate::outln) (the library's
//! `verbs_lab::outln!`), which ends the lesson quietly when stdout is closed
//! (`lesson09_affinity | head -3`; see `verbs_lab::stdout`).

use std::fmt;

use verbs_lab::verbs::{AccessFlags, Mr};

/// Prints what the program does, step by step, unless `--quiet`.
#[derive(Debug, Clone, Copy)]
pub struct Narrator {
    pub quiet: bool,
}

impl Narrator {
    /// A numbered step heading: `[3] Register memory`.
    pub fn step(&self, n: u32, title: &str) {
        if !self.quiet {
            crate::outln!("\n[{n}] {title}");
        }
    }
    /// One line of narration under a step.
    pub fn say(&self, msg: impl fmt::Display) {
        if !self.quiet {
            crate::outln!("    {msg}");
        }
    }
}

/// Narrates a memory region the way lessons 05 and 06 do after `pd.reg_mr(len, access)`:
/// `ibv_reg_mr: LEN bytes at ADDR, access FLAGS: lkey K, rkey R`.
pub fn say_mr(n: &Narrator, mr: &Mr, access: AccessFlags) {
    n.say(format!(
        "ibv_reg_mr: {} bytes at {:#x}, access {access}: lkey {:#x}, rkey {:#x}",
        mr.len(),
        mr.addr(),
        mr.lkey(),
        mr.rkey()
    ));
}
