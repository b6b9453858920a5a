//! Whole numbers on the command line: the one check of a flag with a fixed range and a reason
//! for it ([`WholeRange`]: `-u`, the QP ack timeout exponent, [`qp_timeout`]; `-i`, a port,
//! [`ib_port`]; `-p`, a TCP port, [`tcp_port`]), and plain English for clap's own refusal of a number that is not one
//! ([`explain_number_error`]: `-D 1.5` said "invalid digit found in string"), including a
//! negative one ([`negative_numbers_are_values`]: `-s -5` was taken for a flag `-5`, and clap's
//! tip to write `-- -5` would have made it the SERVER argument).

use std::ffi::OsStr;
use std::marker::PhantomData;
use std::num::{IntErrorKind, ParseIntError};
use std::ops::RangeInclusive;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, Command};

/// A clap value parser of a whole number within a range, refused with one message that names
/// the flag, the value, the range and why the range is what it is:
/// `-u 32: give 0 to 31: the QP ack timeout is a 5-bit exponent (4.096 µs × 2^N)`.
#[derive(Debug)]
pub struct WholeRange<T> {
    range: RangeInclusive<u64>,
    why: &'static str,
    value: PhantomData<fn() -> T>,
}

impl<T> Clone for WholeRange<T> {
    fn clone(&self) -> Self {
        WholeRange {
            range: self.range.clone(),
            why: self.why,
            value: PhantomData,
        }
    }
}

impl<T: TryFrom<u64>> WholeRange<T> {
    /// Whole numbers in `range` (which must fit `T`), refused with `why`.
    pub fn new(range: RangeInclusive<u64>, why: &'static str) -> Self {
        assert!(
            T::try_from(*range.end()).is_ok(),
            "the range's end fits the type"
        );
        WholeRange {
            range,
            why,
            value: PhantomData,
        }
    }

    /// `given` for `flag` checked: the number, or the refusal's message.
    pub fn check(&self, flag: &str, given: &str) -> Result<T, String> {
        let (lo, hi) = (self.range.start(), self.range.end());
        given
            .parse::<u64>()
            .ok()
            .filter(|v| self.range.contains(v))
            .and_then(|v| T::try_from(v).ok())
            .ok_or_else(|| format!("{flag} {given}: give {lo} to {hi}: {}", self.why))
    }
}

impl<T: TryFrom<u64> + Clone + Send + Sync + 'static> clap::builder::TypedValueParser
    for WholeRange<T>
{
    type Value = T;

    fn parse_ref(&self, cmd: &Command, arg: Option<&Arg>, value: &OsStr) -> Result<T, clap::Error> {
        super::parse_checked(cmd, arg, value, |flag, given| self.check(flag, given))
    }
}

/// The QP ack timeout exponent (`-u`, `--qp-timeout` of every tool, lesson and collective):
/// `ibv_modify_qp`'s `timeout` is 5 bits, 0 to 31.
pub fn qp_timeout() -> WholeRange<u8> {
    WholeRange::new(
        0..=31,
        "the QP ack timeout is a 5-bit exponent: 4.096 µs × 2^N before a retransmission \
         (0 waits forever; 18 ≈ 1.1 s)",
    )
}

/// The TCP (or rdma_cm) port a server listens on and its client connects to (`-p`, `--port` of
/// the lessons): 0 would have the kernel pick one, which the client cannot know.
pub fn tcp_port() -> WholeRange<u16> {
    WholeRange::new(
        1..=65535,
        "the same port on both sides (0 would listen on a port the kernel picks, which the \
         client cannot know)",
    )
}

/// A port of a device (`-i`, `--ib-port`): numbered from 1, 8 bits.
pub fn ib_port() -> WholeRange<u8> {
    WholeRange::new(1..=255, "ports are numbered from 1 (vl_devinfo lists them)")
}

/// `cmd` with every option that takes a value taking a negative number as that value: `-s -5`
/// reaches the option's parser, which says what the option accepts, instead of clap reading
/// `-5` as an unknown flag and advising `-- -5` (which would make it the SERVER argument). No
/// option is spelled with a digit, so a negative number after one can only be its value.
pub fn negative_numbers_are_values(cmd: Command) -> Command {
    cmd.mut_args(|a| {
        if !a.is_positional() && a.get_action().takes_values() {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    })
}

/// clap's refusal of a whole number that does not parse (`-D 1.5`: "invalid digit found in
/// string") rewritten to name the flag, the value and the form it takes:
/// `--duration 1.5: not a whole number; give whole seconds (digits only, e.g. 5)`. Any other
/// error is returned as it is. Every binary's parsing passes its errors through here
/// ([`super::parse`], the lessons' and the vl_* tools' own).
pub fn explain_number_error(e: clap::Error, cmd: &mut Command) -> clap::Error {
    if e.kind() != ErrorKind::ValueValidation {
        return e;
    }
    let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        e.get(ContextKind::InvalidArg),
        e.get(ContextKind::InvalidValue),
    ) else {
        return e;
    };
    let source = std::error::Error::source(&e);
    // clap's own parser of a u8, u16 or u32 reads an i64 and checks its range: "-1 is not in
    // 0..=255"; a u64's fails to parse (ParseIntError).
    let out_of_range = source.map(|s| s.to_string()).and_then(|t| {
        t.strip_prefix(&format!("{value} is not in "))
            .map(String::from)
    });
    let bad = source
        .and_then(|s| s.downcast_ref::<ParseIntError>())
        .map(ParseIntError::kind);
    if bad.is_none() && out_of_range.is_none() {
        return e;
    }
    // `arg` reads `--duration <SECS>`.
    let (flag, value_name) = arg.split_once(' ').unwrap_or((arg, ""));
    let form = match value_name.trim_matches(['<', '>']) {
        "SECS" => "whole seconds",
        "USEC" => "whole microseconds",
        "BYTES" => "a whole number of bytes",
        _ => "a whole number",
    };
    let negative =
        value.len() > 1 && value.starts_with('-') && value[1..].bytes().all(|b| b.is_ascii_digit());
    let range = out_of_range.and_then(|r| {
        let (lo, hi) = r.split_once("..=")?;
        Some(format!("{lo} to {hi}"))
    });
    let why = match (bad, range) {
        (_, Some(range)) if negative => format!("{flag} {value}: cannot be negative; give {range}"),
        (_, Some(range)) => format!("{flag} {value}: give {range}"),
        _ if negative => {
            format!("{flag} {value}: cannot be negative; give {form} (digits only, e.g. 5)")
        }
        (Some(IntErrorKind::PosOverflow), _) => format!("{flag} {value}: too large"),
        _ => format!("{flag} {value}: not a whole number; give {form} (digits only, e.g. 5)"),
    };

    cmd.error(ErrorKind::ValueValidation, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches, Parser};

    #[derive(Parser, Debug)]
    struct T {
        #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = qp_timeout())]
        qp_timeout: u8,
        #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = ib_port())]
        ib_port: u8,
        #[arg(short = 'D', long = "duration", value_name = "SECS")]
        duration: Option<u64>,
        #[arg(short = 'n', long = "iters")]
        iters: Option<u64>,
        #[arg(short = 'r', long = "rx-depth")]
        rx_depth: Option<u32>,
    }

    fn refusal(args: &[&str]) -> String {
        let mut cmd = negative_numbers_are_values(T::command());
        let e = cmd
            .try_get_matches_from_mut(std::iter::once("t").chain(args.iter().copied()))
            .and_then(|m| T::from_arg_matches(&m))
            .map_err(|e| explain_number_error(e, &mut cmd))
            .unwrap_err();
        assert_eq!(e.exit_code(), 2, "{args:?}");
        e.to_string()
    }

    /// `args` are refused (exit code 2) with a message that starts `error: {start}`.
    fn refused_with(args: &[&str], start: &str) -> String {
        let text = refusal(args);
        assert!(
            text.starts_with(&format!("error: {start}")),
            "{args:?}: {text}"
        );
        text
    }

    #[test]
    fn the_qp_timeout_is_0_to_31_with_one_message() {
        assert_eq!(T::try_parse_from(["t", "-u", "31"]).unwrap().qp_timeout, 31);
        assert_eq!(T::try_parse_from(["t", "-u", "0"]).unwrap().qp_timeout, 0);
        for bad in ["32", "99", "300", "x", ""] {
            let why = "give 0 to 31: the QP ack timeout is a 5-bit exponent";
            refused_with(&["-u", bad], &format!("-u {bad}: {why}"));
        }
    }

    #[test]
    fn a_port_is_1_to_255_with_one_message() {
        assert_eq!(T::try_parse_from(["t", "-i", "255"]).unwrap().ib_port, 255);
        for bad in ["0", "256", "300"] {
            let why = "give 1 to 255: ports are numbered from 1";
            refused_with(&["-i", bad], &format!("-i {bad}: {why}"));
        }
    }

    #[test]
    fn a_number_that_is_not_one_is_explained() {
        let text = refused_with(
            &["-D", "1.5"],
            "--duration 1.5: not a whole number; give whole seconds (digits only",
        );
        assert!(!text.contains("invalid digit"), "{text}");
        refused_with(
            &["-n", "ten"],
            "--iters ten: not a whole number; give a whole number",
        );
        refused_with(
            &["-D", "99999999999999999999999"],
            "--duration 99999999999999999999999: too large",
        );
    }

    /// A negative number is the option's value, refused with what the option takes; never
    /// clap's tip `-- -5`, which would turn it into a positional argument.
    #[test]
    fn a_negative_number_says_what_the_option_takes() {
        let text = refused_with(
            &["-D", "-1"],
            "--duration -1: cannot be negative; give whole seconds (digits only",
        );
        assert!(!text.contains("-- -1"), "{text}");
        refused_with(
            &["-n", "-1"],
            "--iters -1: cannot be negative; give a whole number",
        );
        refused_with(&["-u", "-3"], "-u -3: give 0 to 31");
        // clap's own u32 parser checks a range ("-1 is not in 0..=4294967295"): explained too.
        refused_with(
            &["-r", "-1"],
            "--rx-depth -1: cannot be negative; give 0 to 4294967295",
        );
        refused_with(
            &["-r", "4294967296"],
            "--rx-depth 4294967296: give 0 to 4294967295",
        );
        refused_with(&["-i", "-1"], "-i -1: give 1 to 255");
    }
}
