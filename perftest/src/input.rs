//! Reading a file the user named (a report, a plot, a benchmark run's outputs): whole, as
//! UTF-8 text, and bounded, so that `/dev/zero`, a pipe that never ends or a file that is not
//! what it should be ends in a message rather than in the OOM killer.

use std::io::Read as _;
use std::path::Path;

/// The largest file the readers take: far above any real report (a 1000-row collective report
/// is well under 1 MiB; a `-a` sweep's outputs, a few MiB).
pub const MAX_INPUT: u64 = 256 << 20;

/// The whole of `path` as text, or why not: it cannot be opened or read, it is larger than
/// [`MAX_INPUT`] (read no further than that), or it is not UTF-8. The message names the file.
pub fn read_text(path: &Path) -> Result<String, String> {
    let name = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {name}: {e}"))?;
    if bytes.len() as u64 > MAX_INPUT {
        return Err(format!(
            "{name} is larger than {} MiB: not a file of verbs-lab's tools (name the report \
             itself)",
            MAX_INPUT >> 20
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{name} is not text (not UTF-8 at byte {}): not a file of verbs-lab's tools",
            e.utf8_error().valid_up_to()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_at_the_bound_and_a_real_one_is_read() {
        let e = read_text(Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("/dev/zero is larger than 256 MiB"), "{e}");
        let e = read_text(Path::new("/no/such/file")).unwrap_err();
        assert!(e.starts_with("cannot read /no/such/file: "), "{e}");
        let dir = std::env::temp_dir().join(format!("vl-input-{}", std::process::id()));
        std::fs::write(&dir, [0xff, 0xfe]).unwrap();
        let e = read_text(&dir).unwrap_err();
        assert!(e.contains("is not text (not UTF-8 at byte 0)"), "{e}");
        std::fs::write(&dir, "{\"a\": 1}").unwrap();
        assert_eq!(read_text(&dir).unwrap(), "{\"a\": 1}");
        std::fs::remove_file(&dir).unwrap();
    }
}
