//! Where a run's output goes: every line into the run's journal (journald or its fallback
//! file), and optionally a copy to someone watching (a `--wait` client of airlockd, or the
//! terminal of a standalone launch). Shared by both launch paths so both journal the same.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::process::OutputSink;
use crate::journal::{LineSplitter, RunJournal, Stream};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A copy of one output stream for whoever watches the run. Must not block for long: the
/// agent waits on its pipe meanwhile.
pub trait Tee: Send {
    /// A chunk exactly as the agent wrote it (before line splitting).
    fn chunk(&mut self, _bytes: &[u8]) {}
    /// One complete line, without its newline.
    fn line(&mut self, _stream: Stream, _line: &[u8]) {}
    /// The stream ended.
    fn finish(&mut self) {}
}

/// One output stream of a run: split into lines, each line to the journal (every one; a
/// line that reached neither journald nor the fallback file is counted in `lost`), and a
/// copy to the tee.
pub struct JournalSink {
    stream: Stream,
    splitter: LineSplitter,
    journal: Arc<Mutex<RunJournal>>,
    lost: Arc<AtomicU64>,
    tee: Option<Box<dyn Tee>>,
}

impl JournalSink {
    pub fn new(
        stream: Stream,
        journal: Arc<Mutex<RunJournal>>,
        lost: Arc<AtomicU64>,
        tee: Option<Box<dyn Tee>>,
    ) -> JournalSink {
        JournalSink {
            stream,
            splitter: LineSplitter::default(),
            journal,
            lost,
            tee,
        }
    }

    fn emit(&mut self, line: &[u8]) {
        if lock(&self.journal).line(self.stream, line).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(t) = &mut self.tee {
            t.line(self.stream, line);
        }
    }
}

impl OutputSink for JournalSink {
    fn data(&mut self, bytes: &[u8]) {
        if let Some(t) = &mut self.tee {
            t.chunk(bytes);
        }
        let mut splitter = std::mem::take(&mut self.splitter);
        let _ = splitter.push(bytes, |line| {
            self.emit(line);
            Ok::<(), ()>(())
        });
        self.splitter = splitter;
    }

    fn finish(&mut self) {
        let mut splitter = std::mem::take(&mut self.splitter);
        let _ = splitter.finish(|line| {
            self.emit(line);
            Ok::<(), ()>(())
        });
        self.splitter = splitter;
        if let Some(mut t) = self.tee.take() {
            t.finish();
        }
    }
}

/// The agent's raw bytes to a writer (a standalone `--wait` launch: the terminal, through
/// [`crate::terminal::TerminalSafe`]). A failed write never stops the draining.
pub struct WriterTee(pub Box<dyn Write + Send>);

impl Tee for WriterTee {
    fn chunk(&mut self, bytes: &[u8]) {
        if self.0.write_all(bytes).is_ok() {
            let _ = self.0.flush();
        }
    }

    fn finish(&mut self) {
        let _ = self.0.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{JournalConfig, RunFields};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_go_to_the_journal_and_bytes_to_the_tee() {
        let dir = tempfile::tempdir().unwrap();
        let fields = RunFields {
            run: "r-test-1".into(),
            role: "code".into(),
            instance: "tess".into(),
        };
        let config = JournalConfig {
            socket: dir.path().join("no-journald"),
            ..JournalConfig::default()
        };
        let j = Arc::new(Mutex::new(
            RunJournal::open_with(fields, dir.path(), config).unwrap(),
        ));
        let lost = Arc::new(AtomicU64::new(0));
        let seen = Shared::default();
        let mut sink = JournalSink::new(
            Stream::Stdout,
            j.clone(),
            lost.clone(),
            Some(Box::new(WriterTee(Box::new(seen.clone())))),
        );
        sink.data(b"one\ntw");
        sink.data(b"o\nthree");
        sink.finish();
        assert_eq!(lock(&seen.0).as_slice(), b"one\ntwo\nthree");
        assert_eq!(lost.load(Ordering::Relaxed), 0);
        assert_eq!(lock(&j).sent_to_fallback(), 3);
        let text = std::fs::read(lock(&j).fallback_path()).unwrap();
        let text = String::from_utf8_lossy(&text);
        assert!(text.contains("two") && text.contains("three"), "{text}");
    }
}
