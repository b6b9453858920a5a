//! The one application error of the `vl_*` tools: what went wrong, with its chain of causes, and
//! the exit code it ends the program with.
//!
//! The layers below return typed errors (the verbs layer one per operation, [`crate::oob`],
//! [`crate::mq`], ...) or `anyhow` errors with the context of each step; a tool's `main` turns
//! whatever reached it into a [`Fail`] and ends with [`Fail::exit`] (or [`exit`] for a run that
//! returns its own status): one line `NAME: error: ...` on stderr and the documented status —
//! 1 a failed run, 2 a bad command line (nothing ran), 3 a missed gate, 128 + N a signal.
//!
//! Which code an error gets is decided once, where it is made into a [`Fail`]: [`Fail::usage`]
//! for a command line refused, [`From<anyhow::Error>`](Fail#impl-From<Error>-for-Fail) for a
//! step that failed (2 when its context marks the command line as the cause,
//! [`crate::cli::CommandLine`]; 1 otherwise), [`Fail::new`] for any other code.

use std::fmt;
use std::process::ExitCode;

/// A failure that ends a tool, with its exit code (see [the module](self)).
pub struct Fail {
    code: u8,
    error: anyhow::Error,
    said: Said,
}

/// How [`Fail::exit`] says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    /// `NAME: error: ...`
    AsError,
    /// `NAME: ...`: not an error of the tool (a signal stopped it).
    AsIs,
    /// Nothing: the failure is the echo of one said elsewhere (a closed `| head`).
    Not,
}

impl Fail {
    /// The run failed.
    pub const FAILED: u8 = 1;
    /// The command line was refused; nothing was run.
    pub const USAGE: u8 = 2;

    /// `error`, ending the program with `code`.
    pub fn new(code: u8, error: impl Into<anyhow::Error>) -> Fail {
        Fail {
            code,
            error: error.into(),
            said: Said::AsError,
        }
    }

    /// A message alone, ending the program with `code`.
    pub fn msg(code: u8, msg: impl fmt::Display + fmt::Debug + Send + Sync + 'static) -> Fail {
        Fail::new(code, anyhow::Error::msg(msg))
    }

    /// A command line refused: exit code 2 ([`Fail::USAGE`]).
    pub fn usage(msg: impl fmt::Display + fmt::Debug + Send + Sync + 'static) -> Fail {
        Fail::msg(Fail::USAGE, msg)
    }

    /// A failed run: exit code 1 ([`Fail::FAILED`]).
    pub fn failed(msg: impl fmt::Display + fmt::Debug + Send + Sync + 'static) -> Fail {
        Fail::msg(Fail::FAILED, msg)
    }

    /// A stop that is not the tool's error (a signal): said as `NAME: ...`, without "error:".
    pub fn stopped(code: u8, what: impl Into<anyhow::Error>) -> Fail {
        Fail {
            said: Said::AsIs,
            ..Fail::new(code, what)
        }
    }

    /// The same failure, ending the program with its code but without a word: it echoes one
    /// said elsewhere.
    pub fn quiet(self) -> Fail {
        Fail {
            said: Said::Not,
            ..self
        }
    }

    /// The exit code it ends the program with.
    pub fn code(&self) -> u8 {
        self.code
    }

    /// What went wrong, with its chain of causes.
    pub fn error(&self) -> &anyhow::Error {
        &self.error
    }

    /// The line [`Fail::exit`] prints for the program `tool`, if it prints one.
    pub fn line(&self, tool: &str) -> Option<String> {
        match self.said {
            Said::AsError => Some(format!("{tool}: error: {:#}", self.error)),
            Said::AsIs => Some(format!("{tool}: {:#}", self.error)),
            Said::Not => None,
        }
    }

    /// Ends the program `tool`: says why on stderr ([`Fail::line`]) and returns the exit code.
    pub fn exit(self, tool: &str) -> ExitCode {
        if let Some(line) = self.line(tool) {
            crate::eprintln_whole!("{line}");
        }
        ExitCode::from(self.code)
    }
}

/// The exit code of a step that failed: 2 when its context marks the command line as the cause
/// (a device, port or GID index this machine does not have, [`crate::cli::CommandLine`]); else 1.
pub fn code_of(e: &anyhow::Error) -> u8 {
    match e.downcast_ref::<crate::cli::CommandLine>() {
        Some(_) => Fail::USAGE,
        None => Fail::FAILED,
    }
}

impl From<anyhow::Error> for Fail {
    fn from(error: anyhow::Error) -> Fail {
        Fail::new(code_of(&error), error)
    }
}

/// The typed errors of the layers below: a failed run (1), or for the verbs layer a usage
/// error (2) when the call was refused for an argument the command line gave
/// ([`crate::verbs::VerbsError::is_bad_argument`]).
macro_rules! failed_run {
    ($($t:ty),* $(,)?) => {$(
        impl From<$t> for Fail {
            fn from(e: $t) -> Fail {
                Fail::new(Fail::FAILED, e)
            }
        }
    )*};
}

failed_run!(
    std::io::Error,
    crate::oob::OobError,
    crate::mq::MqError,
    crate::wire::WireError,
);

impl From<crate::verbs::VerbsError> for Fail {
    fn from(e: crate::verbs::VerbsError) -> Fail {
        let code = match e.is_bad_argument() {
            true => Fail::USAGE,
            false => Fail::FAILED,
        };
        Fail::new(code, e)
    }
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl fmt::Debug for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fail({}, {:#})", self.code, self.error)
    }
}

/// How a tool's `main` ends: `Ok(code)` is the status the run chose (0, or 3 for a missed
/// gate), `Err` a [`Fail`], said and exited with its code.
pub fn exit(tool: &str, result: Result<u8, Fail>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(fail) => fail.exit(tool),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::CommandLine;

    #[test]
    fn each_failure_carries_its_code_and_its_line() {
        let f = Fail::usage("-s 0: too small");
        assert_eq!(
            (f.code(), f.line("vl_x")),
            (2, Some("vl_x: error: -s 0: too small".into()))
        );
        let f = Fail::failed("cannot write --json a.json: No space left on device");
        assert_eq!(f.code(), 1);
        let f = Fail::stopped(
            130,
            anyhow::anyhow!("interrupted by SIGINT: the peer was told"),
        );
        assert_eq!(
            f.line("vl_x").as_deref(),
            Some("vl_x: interrupted by SIGINT: the peer was told")
        );
        assert_eq!(
            Fail::new(3, anyhow::anyhow!("gate")).quiet().line("vl_x"),
            None
        );
    }

    #[test]
    fn the_chain_of_causes_is_said_and_the_command_line_is_a_usage_error() {
        let e = anyhow::anyhow!("no such device").context("opening the RDMA device");
        let f = Fail::from(e);
        assert_eq!(f.code(), 1);
        assert_eq!(f.to_string(), "opening the RDMA device: no such device");
        let e = anyhow::anyhow!("no port 9").context(CommandLine("opening the port (-i)"));
        assert_eq!(Fail::from(e).code(), 2);
        let io = std::io::Error::other("disk on fire");
        assert_eq!(Fail::from(io).code(), 1);
    }
}
