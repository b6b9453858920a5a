//! The table's lines on stdout, written in one place: a closed pipe (`| head`) is noticed here,
//! once, and nothing more is written after it; the sweep asks [`Stdout::closed`] whether
//! anyone still reads (see [`super::run`]). Any other write error fails the run.

use std::io::{self, ErrorKind, Write};

/// Where the header, the rows and the footer go (stdout, or any writer for tests).
pub(super) struct Stdout<W: Write> {
    out: W,
    closed: bool,
}

impl Stdout<io::Stdout> {
    pub(super) fn new() -> Stdout<io::Stdout> {
        Stdout::to(io::stdout())
    }
}

impl<W: Write> Stdout<W> {
    pub(super) fn to(out: W) -> Stdout<W> {
        Stdout { out, closed: false }
    }

    /// Writes `text` and a newline, flushed (a row is seen as its size finishes). A reader that
    /// has gone (EPIPE) closes this writer quietly; another error is returned.
    pub(super) fn line(&mut self, text: &str) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        match writeln!(self.out, "{text}").and_then(|()| self.out.flush()) {
            Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            r => r,
        }
    }

    /// Whether the reader has gone.
    pub(super) fn closed(&self) -> bool {
        self.closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe whose reader goes away after `room` bytes, or a disk that fills up.
    struct Sink {
        got: Vec<u8>,
        room: usize,
        error: ErrorKind,
    }

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if self.got.len() + b.len() > self.room {
                return Err(io::Error::from(self.error));
            }
            self.got.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_ends_the_writing_quietly_and_other_errors_are_errors() {
        let mut out = Stdout::to(Sink {
            got: Vec::new(),
            room: 6,
            error: ErrorKind::BrokenPipe,
        });
        out.line("row 1").unwrap();
        assert!(!out.closed());
        out.line("row 2").unwrap();
        assert!(out.closed());
        out.line("row 3").unwrap();
        assert_eq!(out.out.got, b"row 1\n");
        let mut full = Stdout::to(Sink {
            got: Vec::new(),
            room: 0,
            error: ErrorKind::StorageFull,
        });
        assert_eq!(full.line("row").unwrap_err().kind(), ErrorKind::StorageFull);
        assert!(!full.closed());
    }
}
