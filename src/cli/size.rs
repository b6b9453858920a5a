//! The one parser of a size in bytes given on a command line (`-s 64K`, `--maxbytes 1M`).

/// A size in bytes: decimal digits, optionally followed by a binary suffix `K`, `M` or `G` in
/// either case (`64K` = 65536, `1g` = 2^30); blanks around it are ignored.
///
/// Anything else is refused with one message that names the text, says what is wrong (empty,
/// not whole digits, too large) and shows the accepted form: a sign, a fraction, another
/// suffix, or a value that does not fit in `T`. Each option keeps its own type: give it as
/// `value_parser = parse_size::<u64>` (or `::<usize>`).
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
    let t = s.trim();
    // The suffix is one ASCII byte, so cutting it off leaves a whole `str`.
    let (digits, shift) = match t.as_bytes().last() {
        Some(b'k' | b'K') => (&t[..t.len() - 1], 10),
        Some(b'm' | b'M') => (&t[..t.len() - 1], 20),
        Some(b'g' | b'G') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    let refuse = |why: &str| {
        format!(
            "'{s}' is not a size in bytes: {why} (give digits, optionally followed by K, M or G \
             for KiB, MiB or GiB: e.g. 4096, 64K, 1M)"
        )
    };
    if t.is_empty() {
        return Err(refuse("it is empty"));
    }
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse("expected a whole number"));
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| refuse("too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

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
            "K", "x", "lots", "-1", "+5", "1.5K", "1e3", "4X", "64KB", "6 4K", "4é", "é",
        ] {
            why(bad, "expected a whole number");
        }
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
}
