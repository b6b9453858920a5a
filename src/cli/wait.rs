//! The one check of `--wait SECS`, the bound of every wait of a tool or lesson: whole seconds,
//! 1 to a day ([`WaitSecs`], a clap value parser).

use std::ffi::OsStr;

use clap::Command;

/// The longest `--wait`: a day. Every wait of a run gets at most this; a longer one would
/// hold a hung run for days (and an `Instant` plus `u64::MAX` seconds overflows).
pub const MAX_WAIT_SECS: u64 = 86_400;

/// The value parser of every `--wait SECS` (`value_parser = verbs_lab::cli::WaitSecs`): whole
/// seconds from 1 to [`MAX_WAIT_SECS`]. A refusal ends the program as a usage error (exit 2)
/// with [`wait_secs`]'s message, which names the flag, what is wrong and what to give.
#[derive(Debug, Clone, Copy)]
pub struct WaitSecs;

impl clap::builder::TypedValueParser for WaitSecs {
    type Value = u64;

    fn parse_ref(
        &self,
        cmd: &Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<u64, clap::Error> {
        super::parse_checked(cmd, arg, value, |_, given| wait_secs(given))
    }
}

/// `--wait GIVEN` checked: the seconds, or why they cannot be a wait (e.g. `--wait 0: every
/// wait needs at least 1 s, or nothing could ever arrive; give 1 to 86400 seconds`).
pub fn wait_secs(given: &str) -> Result<u64, String> {
    let give = format!("give 1 to {MAX_WAIT_SECS} seconds");
    match given.parse::<u64>() {
        Ok(s @ 1..=MAX_WAIT_SECS) => Ok(s),
        Ok(0) => Err(format!(
            "--wait 0: every wait needs at least 1 s, or nothing could ever arrive; {give}"
        )),
        Ok(_) => Err(format!("--wait {given}: longer than a day; {give}")),
        Err(_) if !given.is_empty() && given.bytes().all(|b| b.is_ascii_digit()) => {
            Err(format!("--wait {given}: longer than a day; {give}"))
        }
        Err(_) => Err(format!(
            "--wait {given}: not a whole number of seconds; {give}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn a_wait_is_one_second_to_a_day_and_a_refusal_says_what_to_give() {
        assert_eq!(wait_secs("1"), Ok(1));
        assert_eq!(wait_secs("86400"), Ok(MAX_WAIT_SECS));
        for (given, why) in [
            (
                "0",
                "--wait 0: every wait needs at least 1 s, or nothing could ever arrive",
            ),
            ("86401", "--wait 86401: longer than a day"),
            (
                "18446744073709551615",
                "--wait 18446744073709551615: longer than a day",
            ),
            (
                "18446744073709551616",
                "--wait 18446744073709551616: longer than a day",
            ),
            ("-1", "--wait -1: not a whole number of seconds"),
            ("1.5", "--wait 1.5: not a whole number of seconds"),
            ("", "--wait : not a whole number of seconds"),
        ] {
            let e = wait_secs(given).unwrap_err();
            assert!(e.starts_with(why), "{given:?}: {e}");
            assert!(e.ends_with("; give 1 to 86400 seconds"), "{given:?}: {e}");
        }
    }

    #[test]
    fn a_wait_is_refused_by_clap_with_that_message_alone() {
        #[derive(Parser, Debug)]
        struct T {
            #[arg(long = "wait", default_value_t = 30, value_parser = WaitSecs)]
            wait_secs: u64,
        }
        assert_eq!(T::try_parse_from(["t"]).unwrap().wait_secs, 30);
        assert_eq!(
            T::try_parse_from(["t", "--wait", "5"]).unwrap().wait_secs,
            5
        );
        let e = T::try_parse_from(["t", "--wait", "0"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert_eq!(e.exit_code(), 2);
        let text = e.to_string();
        assert!(
            text.starts_with("error: --wait 0: every wait needs at least 1 s"),
            "{text}"
        );
    }
}
