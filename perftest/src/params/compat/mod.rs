//! Every perftest 6.x option, and what the `vl_*` tools do with it: the same thing, nothing (a
//! documented no-op), or a refusal that names the option and says why.
//!
//! [`OPTIONS`] is the one table. [`register`] adds a hidden argument to the parser for each
//! option our own [`Params`](crate::params::Params) does not define, so that perftest's command
//! lines parse; [`refusal`] turns a refused option that was given into a usage error (exit 2).
//! `docs/perftest-compat.md` shows the same table, and `perftest/tests/compat.rs` checks it
//! against this one and against `tests/perftest-options` (perftest's list), so the three cannot
//! drift apart.

use clap::{Arg, ArgAction, ArgMatches, Command};

mod table;

pub use table::OPTIONS;

/// What a `vl_*` tool does with a perftest option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Accepted with perftest's meaning (the note says where ours differs in detail).
    Same(&'static str),
    /// Accepted and ignored, for the reason given: it changes nothing here.
    NoOp(&'static str),
    /// Refused (usage error, exit 2) with this reason.
    Refused(&'static str),
}

impl Status {
    /// The word the compatibility page uses: `same`, `no-op` or `refused`.
    pub fn word(self) -> &'static str {
        match self {
            Status::Same(_) => "same",
            Status::NoOp(_) => "no-op",
            Status::Refused(_) => "refused",
        }
    }

    /// The note or reason.
    pub fn text(self) -> &'static str {
        match self {
            Status::Same(t) | Status::NoOp(t) | Status::Refused(t) => t,
        }
    }
}

/// One perftest option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerftestOption {
    pub short: Option<char>,
    /// The long name without `--`.
    pub long: &'static str,
    /// Whether it takes a value.
    pub takes_value: bool,
    pub status: Status,
}

/// The entry of `long` (without `--`).
pub fn find(long: &str) -> Option<&'static PerftestOption> {
    OPTIONS.iter().find(|o| o.long == long)
}

/// The argument id of a perftest option registered by [`register`].
fn id(o: &PerftestOption) -> String {
    format!("perftest:{}", o.long)
}

/// Whether `cmd` already defines this long name (or alias) or short letter.
fn defined(cmd: &Command, o: &PerftestOption) -> bool {
    cmd.get_arguments().any(|a| {
        a.get_long() == Some(o.long)
            || a.get_all_aliases().is_some_and(|al| al.contains(&o.long))
            || (o.short.is_some() && a.get_short() == o.short)
    })
}

/// Adds a hidden argument for every perftest option `cmd` does not define itself (refused ones
/// and no-ops), so that perftest's command lines parse and [`refusal`] can name what was given.
pub fn register(mut cmd: Command) -> Command {
    for o in OPTIONS {
        // -h/--help and -V/--version are clap's own, generated when the parser is built.
        if defined(&cmd, o) || matches!(o.long, "help" | "version") {
            continue;
        }
        // clap ids are 'static: ~150 short strings, once per process.
        let name: &'static str = Box::leak(id(o).into_boxed_str());
        let mut a = Arg::new(name).long(o.long).hide(true);
        if let Some(c) = o.short {
            a = a.short(c);
        }
        a = if o.takes_value {
            a.action(ArgAction::Set)
                .num_args(1)
                .allow_hyphen_values(true)
        } else {
            a.action(ArgAction::SetTrue)
        };
        cmd = cmd.arg(a);
    }
    cmd
}

/// The first refused perftest option given on the command line, as a usage error's text:
/// `--tclass is not supported: ...`. No-ops pass.
pub fn refusal(m: &ArgMatches) -> Option<String> {
    OPTIONS.iter().find_map(|o| {
        let given = m.try_get_raw(&id(o)).ok().flatten().is_some_and(|_| {
            m.value_source(&id(o)) == Some(clap::parser::ValueSource::CommandLine)
        });
        match o.status {
            Status::Refused(why) if given => Some(format!("{} is refused: {why}", spell(o))),
            _ => None,
        }
    })
}

/// `-S/--sl`, or `--tclass`.
pub fn spell(o: &PerftestOption) -> String {
    match o.short {
        Some(c) => format!("-{c}/--{}", o.long),
        None => format!("--{}", o.long),
    }
}
