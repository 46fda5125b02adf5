//! Where log lines go: a duplicate of stderr's descriptor, written without
//! std's stderr lock, which made the workers wait on each other (under
//! load, a futex call for a third of the access lines).
//!
//! Lines stay whole without it: tracing formats each line whole and hands
//! it over in one `write_all`. A line of up to [`ATOMIC_LINE`] bytes goes in
//! one `write`, which a pipe takes in one piece and a file at its own
//! offset, so such lines share a read lock (no system call, no waiting). A
//! longer line may be cut into several writes on a pipe, so it takes the
//! lock alone, and no other line lands inside it.

use std::fs::File;
use std::io::{self, Write};
use std::sync::{Arc, PoisonError, RwLock};
use tracing_subscriber::fmt::MakeWriter;

/// Bytes a pipe takes in one piece (`PIPE_BUF` on Linux).
pub const ATOMIC_LINE: usize = 4096;

/// The log's descriptor, shared by every thread.
#[derive(Debug, Clone)]
pub struct LogWriter(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    /// `None`: stderr could not be duplicated; lines go through std's stderr.
    file: Option<File>,
    /// Shared by lines of up to [`ATOMIC_LINE`] bytes, held alone by longer ones.
    long_line: RwLock<()>,
}

impl LogWriter {
    /// Lines written to `file`.
    pub fn new(file: File) -> Self {
        Self::to(Some(file))
    }

    /// Lines written to a duplicate of stderr (or, if it cannot be
    /// duplicated, through std's stderr and its lock).
    pub fn stderr() -> Self {
        use std::os::fd::AsFd;
        let fd = io::stderr().as_fd().try_clone_to_owned().ok();
        Self::to(fd.map(File::from))
    }

    fn to(file: Option<File>) -> Self {
        Self(Arc::new(Shared {
            file,
            long_line: RwLock::new(()),
        }))
    }
}

impl Write for &LogWriter {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let shared = &self.0;
        let Some(file) = &shared.file else {
            io::stderr().write_all(line)?;
            return Ok(line.len());
        };
        if line.len() <= ATOMIC_LINE {
            let _shared = shared
                .long_line
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            (&*file).write_all(line)?;
        } else {
            let _alone = shared
                .long_line
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            (&*file).write_all(line)?;
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = &'a LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::OwnedFd;

    #[test]
    fn lines_stay_whole_on_a_pipe_whatever_their_length() {
        let (mut reader, writer) = io::pipe().unwrap_or_else(|e| panic!("a pipe: {e}"));
        let log = LogWriter::new(File::from(OwnedFd::from(writer)));
        let read = std::thread::spawn(move || {
            let mut text = String::new();
            reader.read_to_string(&mut text).map(|_| text)
        });
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..200 {
                        let len = if i % 5 == 0 { 3 * ATOMIC_LINE } else { 100 };
                        let body = char::from(b'a' + t).to_string().repeat(len);
                        let line = format!("{t}:{body}\n");
                        (&log)
                            .write_all(line.as_bytes())
                            .map_err(|e| e.to_string())?;
                    }
                    Ok::<_, String>(())
                })
            })
            .collect();
        for thread in threads {
            assert_eq!(thread.join().ok(), Some(Ok(())));
        }
        drop(log); // the last writer: the reader sees the end
        let text = match read.join() {
            Ok(Ok(text)) => text,
            other => panic!("reading the pipe: {other:?}"),
        };
        let mut lines = 0;
        for line in text.lines() {
            let (t, body) = line.split_once(':').unwrap_or(("?", line));
            let letter = t.parse::<u8>().map(|t| char::from(b'a' + t));
            assert!(
                body.len() == 100 || body.len() == 3 * ATOMIC_LINE,
                "a line cut or joined: {} bytes",
                body.len()
            );
            assert!(
                letter.is_ok_and(|c| body.chars().all(|b| b == c)),
                "another line inside line {t}"
            );
            lines += 1;
        }
        assert_eq!(lines, 800);
    }
}
