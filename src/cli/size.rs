//! The one parser of a size in bytes given on a command line (`-s 64K`, `--maxbytes 1M`):
//! [`parse_size`] for any size, [`SizeRange`] (a clap value parser) for a size with bounds.

use std::ffi::OsStr;
use std::ops::RangeInclusive;

use clap::Command;

/// The form a size is given in, as every refusal shows it.
const FORM: &str =
    "digits, optionally followed by K, M or G for KiB, MiB or GiB: e.g. 4096, 64K, 1M";

/// A size in bytes: decimal digits, optionally followed by a binary suffix `K`, `M` or `G` in
/// either case (`64K` = 65536, `1g` = 2^30); blanks around it are ignored.
///
/// Anything else is refused with one message that names the text, says what is wrong (empty,
/// not whole digits, too large) and shows the accepted form: a sign, a fraction, another
/// suffix, or a value that does not fit in `T`. Each option keeps its own type: give it as
/// `value_parser = parse_size::<u64>` (or `::<usize>`); an option with bounds takes
/// [`SizeRange`] instead.
///
/// ```
/// use verbs_lab::cli::parse_size;
///
/// assert_eq!(parse_size::<u64>("64K"), Ok(65536));
/// assert_eq!(parse_size::<usize>(" 1m "), Ok(1 << 20));
/// let e = parse_size::<u64>("1.5K").unwrap_err();
/// assert!(e.starts_with("'1.5K' is not a size in bytes: "), "{e}");
/// ```
pub fn parse_size<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    bytes(s)
        .and_then(|n| T::try_from(n).map_err(|_| "too large"))
        .map_err(|why| format!("'{s}' is not a size in bytes: {why} (give {FORM})"))
}

/// The bytes `s` says, or what is wrong with it: `"it is empty"`, `"it cannot be negative"`,
/// `"expected a whole number"` or `"too large"` (for a `u64`).
fn bytes(s: &str) -> Result<u64, &'static str> {
    let t = s.trim();
    // The suffix is one ASCII byte, so cutting it off leaves a whole `str`.
    let (digits, shift) = match t.as_bytes().last() {
        Some(b'k' | b'K') => (&t[..t.len() - 1], 10),
        Some(b'm' | b'M') => (&t[..t.len() - 1], 20),
        Some(b'g' | b'G') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    if t.is_empty() {
        return Err("it is empty");
    }
    if t.starts_with('-') {
        return Err("it cannot be negative");
    }
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("expected a whole number");
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or("too large")
}

/// `n` bytes the way a size is given: with the largest suffix that divides it exactly
/// (`65536` → `64K`, `1073741824` → `1G`, `65535` → `65535`).
fn size_text(n: u64) -> String {
    match n {
        0 => "0".to_string(),
        _ if n % (1 << 30) == 0 => format!("{}G", n >> 30),
        _ if n % (1 << 20) == 0 => format!("{}M", n >> 20),
        _ if n % (1 << 10) == 0 => format!("{}K", n >> 10),
        _ => n.to_string(),
    }
}

/// The value parser of a size option with bounds (`value_parser = SizeRange::new(1..=MAX)`):
/// [`parse_size`]'s form, and a value within the range, checked as clap parses the command line
/// (the default too). A refusal ends the program as a usage error (exit 2) with a message that
/// names the flag, what is wrong and the range to give, in the form a size is given:
///
/// ```text
/// error: -s 128K: too large; give 1 to 64K bytes (digits, optionally followed by K, M or G …)
/// ```
///
/// The option keeps the range's type ([`SizeType`]: `u16`, `u32`, `u64` or `usize`).
#[derive(Debug, Clone)]
pub struct SizeRange<T> {
    range: RangeInclusive<T>,
}

impl<T: SizeType> SizeRange<T> {
    /// Sizes from `range.start()` to `range.end()` bytes, both included.
    pub const fn new(range: RangeInclusive<T>) -> SizeRange<T> {
        SizeRange { range }
    }

    /// `1 to 64K`: the range as its refusals and the options' help say it.
    pub fn text(&self) -> String {
        let (start, end) = (self.range.start().bytes(), self.range.end().bytes());
        format!("{} to {}", size_text(start), size_text(end))
    }

    /// The size `given` to `flag`, or why it is not one in the range (the message of the usage
    /// error: `-s 0: too small; give 1 to 64K bytes (…)`).
    pub fn check(&self, flag: &str, given: &str) -> Result<T, String> {
        let size = bytes(given).and_then(|n| T::try_from(n).map_err(|_| "too large"));
        let why = match size {
            Ok(t) if self.range.contains(&t) => return Ok(t),
            Ok(t) if t < *self.range.start() => "too small",
            Ok(_) => "too large",
            Err(why) => why,
        };
        Err(format!(
            "{flag} {given}: {why}; give {} bytes ({FORM})",
            self.text()
        ))
    }

    /// `size` checked the way [`SizeRange::check`] checks a given one, for a size that came
    /// another way (the peer's terms): `-s 2097152: too large; give 1 to 1M bytes (…)`.
    pub fn check_value(&self, flag: &str, size: T) -> Result<T, String> {
        self.check(flag, &size.bytes().to_string())
    }
}

impl<T: SizeType> clap::builder::TypedValueParser for SizeRange<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<T, clap::Error> {
        super::parse_checked(cmd, arg, value, |flag, given| self.check(flag, given))
    }
}

/// The unsigned types a [`SizeRange`] option may have. (A bare literal range would be an `i32`
/// one, which clap would only refuse at run time, as a type mismatch with the option's field.)
pub trait SizeType: Copy + PartialOrd + TryFrom<u64> + Send + Sync + 'static {
    /// The value as a number of bytes.
    fn bytes(self) -> u64;
}

macro_rules! size_type {
    ($($t:ty),*) => {$(
        impl SizeType for $t {
            fn bytes(self) -> u64 {
                self as u64
            }
        }
    )*};
}
size_type!(u16, u32, u64, usize);

#[cfg(test)]
mod tests {
    use super::{parse_size, size_text, SizeRange};

    #[test]
    fn digits_with_an_optional_binary_suffix() {
        assert_eq!(parse_size::<u64>("0"), Ok(0));
        assert_eq!(parse_size::<u64>("12"), Ok(12));
        assert_eq!(parse_size::<u64>("64K"), Ok(65536));
        assert_eq!(parse_size::<u64>("64k"), Ok(65536));
        assert_eq!(parse_size::<u64>(" 64K "), Ok(65536));
        assert_eq!(parse_size::<u64>("1m"), Ok(1 << 20));
        assert_eq!(parse_size::<u64>("1g"), Ok(1 << 30));
        assert_eq!(parse_size::<usize>("4M"), Ok(4 << 20));
        assert_eq!(parse_size::<u64>("0K"), Ok(0));
        assert_eq!(parse_size::<u64>("16G"), Ok(16 << 30));
    }

    /// Each refusal names the text, says what is wrong, and shows the accepted form.
    #[test]
    fn refusals_say_why() {
        let why = |s: &str, why: &str| {
            let e = parse_size::<u64>(s).unwrap_err();
            assert!(
                e.starts_with(&format!("'{s}' is not a size in bytes: {why} (")),
                "{s:?}: {e}"
            );
            assert!(e.ends_with("e.g. 4096, 64K, 1M)"), "{e}");
        };
        why("", "it is empty");
        why("  ", "it is empty");
        for bad in [
            "K", "x", "lots", "+5", "1.5K", "1e3", "4X", "64KB", "6 4K", "4é", "é",
        ] {
            why(bad, "expected a whole number");
        }
        why("-1", "it cannot be negative");
        why("99999999999999999999", "too large");
        why("17179869184G", "too large"); // 2^34 GiB = 2^64
        assert_eq!(parse_size::<u64>("17179869183G"), Ok(17179869183 << 30));
        why("18446744073709551616", "too large");
        assert_eq!(parse_size::<u64>("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn a_size_too_large_for_the_type_is_refused() {
        assert_eq!(parse_size::<u16>("63K"), Ok(63 << 10));
        let e = parse_size::<u16>("64K").unwrap_err();
        assert!(e.contains(": too large ("), "{e}");
        assert_eq!(parse_size::<u32>("3G"), Ok(3 << 30));
        assert!(parse_size::<u32>("4G").is_err());
    }

    #[test]
    fn a_bound_is_written_with_the_largest_exact_suffix() {
        for (n, text) in [
            (0, "0"),
            (1, "1"),
            (26, "26"),
            (1000, "1000"),
            (1024, "1K"),
            (4096, "4K"),
            (65535, "65535"),
            (65536, "64K"),
            (1536 << 10, "1536K"),
            (1 << 20, "1M"),
            (1 << 30, "1G"),
            (3 << 30, "3G"),
        ] {
            assert_eq!(size_text(n), text, "{n}");
        }
        assert_eq!(SizeRange::new(1..=65536u32).text(), "1 to 64K");
        assert_eq!(SizeRange::new(26..=65535u32).text(), "26 to 65535");
        assert_eq!(SizeRange::new(1..=1usize << 30).text(), "1 to 1G");
    }

    /// Within the range a size is taken in any form [`parse_size`] takes; outside it, or not a
    /// size at all, the refusal names the flag and the text, says what is wrong and gives the
    /// range in the same form.
    #[test]
    fn a_range_takes_its_sizes_and_refuses_the_rest_saying_what_to_give() {
        let r = SizeRange::new(1..=64usize << 10);
        for (given, want) in [("1", 1), ("4K", 4096), ("64k", 65536), (" 65536 ", 65536)] {
            assert_eq!(r.check("-s", given), Ok(want), "{given:?}");
        }
        let give = "give 1 to 64K bytes (digits, optionally followed by K, M or G for KiB, MiB \
                    or GiB: e.g. 4096, 64K, 1M)";
        for (given, why) in [
            ("0", "too small"),
            ("0K", "too small"),
            ("65537", "too large"),
            ("1M", "too large"),
            ("99999999999999999999", "too large"),
            ("1.5K", "expected a whole number"),
            ("-1", "it cannot be negative"),
            ("64KB", "expected a whole number"),
            ("", "it is empty"),
        ] {
            assert_eq!(
                r.check("-s", given),
                Err(format!("-s {given}: {why}; {give}")),
                "{given:?}"
            );
        }
        assert_eq!(r.check_value("-s", 4096), Ok(4096));
        assert_eq!(
            r.check_value("-s", 1 << 20),
            Err(format!("-s 1048576: too large; {give}"))
        );
        // A value the range's type cannot hold is too large for it, whatever the range.
        let narrow = SizeRange::new(0..=u16::MAX);
        assert_eq!(narrow.check("-S", "63K"), Ok(63 << 10));
        assert!(narrow
            .check("-S", "64K")
            .unwrap_err()
            .starts_with("-S 64K: too large; give 0 to 65535 bytes"));
    }

    #[test]
    fn a_range_is_checked_by_clap_naming_the_flag_as_typed() {
        use clap::Parser;
        #[derive(Parser, Debug)]
        struct T {
            #[arg(short = 's', long = "size", default_value_t = 4096,
                  value_parser = SizeRange::new(1..=65536u32))]
            size: u32,
            #[arg(long = "slot-size", value_parser = SizeRange::new(8..=1usize << 20))]
            slot: Option<usize>,
        }
        let t = T::try_parse_from(["t"]).unwrap();
        assert_eq!((t.size, t.slot), (4096, None));
        let t = T::try_parse_from(["t", "--size", "64K", "--slot-size", "1m"]).unwrap();
        assert_eq!((t.size, t.slot), (65536, Some(1 << 20)));
        for (args, want) in [
            (
                &["t", "-s", "0"][..],
                "error: -s 0: too small; give 1 to 64K bytes (",
            ),
            (
                &["t", "--size", "128K"],
                "error: -s 128K: too large; give 1 to 64K bytes (",
            ),
            (
                &["t", "--slot-size", "4"],
                "error: --slot-size 4: too small; give 8 to 1M bytes (",
            ),
        ] {
            let e = T::try_parse_from(args).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().starts_with(want), "{args:?}: {e}");
        }
    }
}
