//! Where log lines go: a duplicate of stderr's descriptor, through a
//! buffer that a background thread writes out every `log.flush_interval`
//! (as nginx's `access_log … buffer= flush=` and Envoy's access-log flush
//! interval do). A system call per line was a tenth of foldgate's CPU on a
//! forwarded request: the `write` itself and, on a file, the filesystem's
//! work behind it. Lines still go out whole and in order:
//!
//! - a warning or an error goes out at once, with every line before it;
//! - the buffer goes out when it holds [`FLUSH_AT`] bytes;
//! - [`LogWriter::flush`] writes out what is left (at exit, on a panic);
//! - with a zero interval every line goes out as it is written.
//!
//! One lock guards the buffer and the descriptor, so no line lands inside
//! another, on a pipe or a file, whatever its length. A process killed
//! outright loses at most the last interval's info lines.

use std::fs::File;
use std::io::{self, Write};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;
use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// Bytes buffered before they go out whatever the interval.
pub const FLUSH_AT: usize = 32 * 1024;

/// The log's descriptor and buffer, shared by every thread.
#[derive(Debug, Clone)]
pub struct LogWriter(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    /// `None`: stderr could not be duplicated; lines go through std's stderr.
    file: Option<File>,
    /// Lines not yet written out.
    buffer: Mutex<Vec<u8>>,
    /// Whether lines wait for the flusher (a non-zero interval).
    buffered: bool,
}

impl LogWriter {
    /// Lines written to `file`, buffered for up to `interval`.
    pub fn new(file: File, interval: Duration) -> Self {
        Self::to(Some(file), interval)
    }

    /// Lines written to a duplicate of stderr (or, if it cannot be
    /// duplicated, through std's stderr), buffered for up to `interval`.
    pub fn stderr(interval: Duration) -> Self {
        use std::os::fd::AsFd;
        let fd = io::stderr().as_fd().try_clone_to_owned().ok();
        Self::to(fd.map(File::from), interval)
    }

    fn to(file: Option<File>, interval: Duration) -> Self {
        // The flusher learns of the log once it exists; without a flusher
        // (a zero interval, or no thread to be had) lines go out at once.
        let (tell, told) = std::sync::mpsc::channel::<Weak<Shared>>();
        let buffered = !interval.is_zero()
            && std::thread::Builder::new()
                .name("foldgate-log".into())
                .spawn(move || {
                    if let Ok(log) = told.recv() {
                        flush_every(&log, interval);
                    }
                })
                .is_ok();
        let shared = Arc::new(Shared {
            file,
            buffer: Mutex::new(Vec::with_capacity(FLUSH_AT)),
            buffered,
        });
        if buffered {
            // The flusher is waiting on `told`, so the send lands.
            let _sent = tell.send(Arc::downgrade(&shared));
        }
        Self(shared)
    }

    /// Writes out every buffered line.
    pub fn flush(&self) -> io::Result<()> {
        self.0.write_out(&mut self.0.lock())
    }
}

/// The flusher: writes out the buffer every `interval` until the log is
/// dropped.
fn flush_every(log: &Weak<Shared>, interval: Duration) {
    loop {
        std::thread::sleep(interval);
        let Some(shared) = log.upgrade() else { return };
        // A log that cannot be written has nowhere to say so.
        let _unwritten = shared.write_out(&mut shared.lock());
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.buffer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `line`, and writes the buffer out when the line is `urgent`,
    /// the buffer full, or nothing is buffered.
    fn put(&self, line: &[u8], urgent: bool) -> io::Result<()> {
        let mut buffer = self.lock();
        buffer.extend_from_slice(line);
        if urgent || !self.buffered || buffer.len() >= FLUSH_AT {
            self.write_out(&mut buffer)?;
        }
        Ok(())
    }

    /// Writes the buffer out and empties it, whether the write succeeds
    /// or not (a log that cannot be written does not grow).
    fn write_out(&self, buffer: &mut Vec<u8>) -> io::Result<()> {
        if buffer.is_empty() {
            return Ok(());
        }
        let written = match &self.file {
            Some(file) => (&*file).write_all(buffer),
            None => io::stderr().write_all(buffer),
        };
        buffer.clear();
        written
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let buffer = self
            .buffer
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        let mut rest = std::mem::take(buffer);
        let _unwritten = self.write_out(&mut rest);
    }
}

/// One line's writer: knows whether the line must go out at once.
#[derive(Debug)]
pub struct Line<'a> {
    log: &'a Shared,
    urgent: bool,
}

impl Write for Line<'_> {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        self.log.put(line, self.urgent)?;
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        Line {
            log: &self.0,
            urgent: false,
        }
    }

    /// Warnings and errors go out at once.
    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        Line {
            log: &self.0,
            urgent: *meta.level() <= Level::WARN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::OwnedFd;
    use std::time::Instant;

    /// A log writing to a fresh file, and the file to read it back.
    fn log_to_file(interval: Duration) -> (LogWriter, File) {
        let file = tempfile::tempfile().unwrap_or_else(|e| panic!("a temporary file: {e}"));
        let reader = file.try_clone().unwrap_or_else(|e| panic!("{e}"));
        (LogWriter::new(file, interval), reader)
    }

    fn contents(file: &File) -> String {
        let mut text = String::new();
        let mut file = file;
        use std::io::Seek;
        file.rewind().unwrap_or_else(|e| panic!("{e}"));
        file.read_to_string(&mut text)
            .unwrap_or_else(|e| panic!("{e}"));
        text
    }

    fn put(log: &LogWriter, level: Level, line: &str) {
        let mut line_writer = Line {
            log: &log.0,
            urgent: level <= Level::WARN,
        };
        line_writer
            .write_all(line.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn info_lines_wait_and_a_warning_takes_them_out_in_order() {
        let (log, file) = log_to_file(Duration::from_secs(3600));
        put(&log, Level::INFO, "one\n");
        put(&log, Level::DEBUG, "two\n");
        assert_eq!(contents(&file), "", "info lines wait for the interval");
        put(&log, Level::WARN, "three\n");
        assert_eq!(contents(&file), "one\ntwo\nthree\n");
        put(&log, Level::INFO, "four\n");
        put(&log, Level::ERROR, "five\n");
        assert_eq!(contents(&file), "one\ntwo\nthree\nfour\nfive\n");
    }

    #[test]
    fn a_full_buffer_goes_out_and_flush_and_drop_write_the_rest() {
        let (log, file) = log_to_file(Duration::from_secs(3600));
        let line = format!("{}\n", "x".repeat(99));
        for _ in 0..FLUSH_AT / line.len() {
            put(&log, Level::INFO, &line);
        }
        assert_eq!(
            contents(&file),
            "",
            "below the threshold nothing is written"
        );
        put(&log, Level::INFO, &line);
        let full = contents(&file);
        assert_eq!(full.len(), (FLUSH_AT / line.len() + 1) * line.len());
        put(&log, Level::INFO, "after\n");
        log.flush().unwrap_or_else(|e| panic!("{e}"));
        assert!(contents(&file).ends_with("x\nafter\n"));
        put(&log, Level::INFO, "last\n");
        drop(log);
        assert!(
            contents(&file).ends_with("after\nlast\n"),
            "dropping the log writes the rest"
        );
    }

    #[test]
    fn the_flusher_writes_lines_out_within_the_interval() {
        let (log, file) = log_to_file(Duration::from_millis(20));
        put(&log, Level::INFO, "soon\n");
        let start = Instant::now();
        while contents(&file).is_empty() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(contents(&file), "soon\n");
    }

    #[test]
    fn a_zero_interval_writes_every_line_at_once() {
        let (log, file) = log_to_file(Duration::ZERO);
        put(&log, Level::INFO, "now\n");
        assert_eq!(contents(&file), "now\n");
    }

    #[test]
    fn lines_stay_whole_on_a_pipe_whatever_their_length() {
        for interval in [Duration::ZERO, Duration::from_millis(1)] {
            let (mut reader, writer) = io::pipe().unwrap_or_else(|e| panic!("a pipe: {e}"));
            let log = LogWriter::new(File::from(OwnedFd::from(writer)), interval);
            let read = std::thread::spawn(move || {
                let mut text = String::new();
                reader.read_to_string(&mut text).map(|_| text)
            });
            let threads: Vec<_> = (0..4u8)
                .map(|t| {
                    let log = log.clone();
                    std::thread::spawn(move || {
                        for i in 0..200 {
                            let len = if i % 5 == 0 { 3 * 4096 } else { 100 };
                            let body = char::from(b'a' + t).to_string().repeat(len);
                            let level = if i % 7 == 0 { Level::WARN } else { Level::INFO };
                            put(&log, level, &format!("{t}:{body}\n"));
                        }
                    })
                })
                .collect();
            for thread in threads {
                assert!(thread.join().is_ok());
            }
            drop(log); // the last writer: the rest goes out, the reader sees the end
            let text = match read.join() {
                Ok(Ok(text)) => text,
                other => panic!("reading the pipe: {other:?}"),
            };
            let mut lines = 0;
            for line in text.lines() {
                let (t, body) = line.split_once(':').unwrap_or(("?", line));
                let letter = t.parse::<u8>().map(|t| char::from(b'a' + t));
                assert!(
                    body.len() == 100 || body.len() == 3 * 4096,
                    "a line cut or joined: {} bytes",
                    body.len()
                );
                assert!(
                    letter.is_ok_and(|c| body.chars().all(|b| b == c)),
                    "another line inside line {t}"
                );
                lines += 1;
            }
            assert_eq!(lines, 800, "interval {interval:?}");
        }
    }
}
