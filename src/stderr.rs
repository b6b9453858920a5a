//! Lines on stderr that arrive whole.
//!
//! Rust's `stderr` is unbuffered, and `eprintln!` writes each piece of its format — the text
//! between the arguments, then each argument — with a `write(2)` of its own. When several
//! processes share one stderr (the workers of `--procs`, the ranks of a collective, a
//! coordinator and its workers all writing into one log), their pieces interleave and a reader
//! gets `SIGUSR1SIGUSR1: the coordinator (pid 5995: the coordinator (pid ) is gone`.
//!
//! [`eprintln_whole!`](crate::eprintln_whole) formats the line first and hands it to the kernel
//! in one `write(2)`, which a pipe keeps whole up to `PIPE_BUF` (4 KiB) and a file opened by
//! the shell (one shared offset) keeps whole at any length. It never panics: a closed stderr
//! loses the line and nothing else. `clippy.toml` forbids `eprintln!` and `eprint!` so that
//! every message goes through it.

use std::fmt;
use std::io::Write;

/// This program's name, the last component of `argv[0]` (`vl_write_bw`, `lesson10_mqueue`):
/// what starts every line a tool prints, for code that is not told the tool's name.
pub fn program_name() -> String {
    std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "this program".into())
}

/// Writes `args` and a newline to stderr in one `write(2)`; errors are ignored (there is
/// nowhere left to report them).
pub fn write_line(args: fmt::Arguments<'_>) {
    let mut line = fmt::format(args);
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `eprintln!` that writes the whole line at once (see [the module](crate::stderr)), so lines
/// of processes sharing one stderr never interleave.
#[macro_export]
macro_rules! eprintln_whole {
    () => {
        $crate::stderr::write_line(::std::format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::stderr::write_line(::std::format_args!($($arg)*))
    };
}
