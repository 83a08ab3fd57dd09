//! Read a run's journal back for `airlockctl logs RUN [-f]`.
//!
//! Records come from two places: journald (`journalctl -o json AIRLOCK_RUN=<run>`) and the
//! run's fallback file. The writer puts every record in exactly one of them, so nothing is
//! deduplicated; the two are merged on (`AIRLOCK_TIME_US`, `AIRLOCK_SEQ`). Each record
//! prints as one line, `stdout: <text>`, `stderr: <text>` or `<event kind>: <text>`.
//!
//! The text is agent-controlled and lands on an operator's terminal, so it is escaped:
//! `\` becomes `\\`, newline `\n`, tab stays, other control characters (C0, DEL, C1) and
//! bytes that are not UTF-8 become `\xNN` / `\u{NNNN}`. One record is always one line.
//!
//! Only journald records written by the trusted uid (`_UID`, set by journald itself, root
//! by default) are shown: any local user can write `AIRLOCK_RUN=` to journald.
//!
//! Without follow, a gap in one writer's `AIRLOCK_SEQ` (records journald accepted and then
//! dropped, e.g. by its rate limit) is reported in place as `airlock: N record(s) missing`.
//! With follow, records print as they arrive from either source, and reading stops after
//! the record that ends the run (see [`EventKind::ends_run`]).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use super::fallback;
use super::fields::{self, EventKind, Stream};

/// What a record is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    Output(Stream),
    Event(String),
}

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub time_us: u64,
    pub seq: u64,
    pub what: What,
    pub message: Vec<u8>,
    /// Read from the fallback file rather than journald.
    pub from_fallback: bool,
    /// journald's cursor of this record (journald records only).
    pub cursor: Option<String>,
}

impl Entry {
    fn key(&self) -> (u64, u64) {
        (self.time_us, self.seq)
    }

    pub fn ends_run(&self) -> bool {
        match &self.what {
            What::Event(k) => EventKind::parse(k).is_some_and(EventKind::ends_run),
            What::Output(_) => false,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ReaderConfig {
    pub journalctl: PathBuf,
    /// Only journald records from this uid are shown; `None` shows any writer's.
    pub trusted_uid: Option<u32>,
    /// How often follow mode looks at the fallback file.
    pub poll: Duration,
}

impl Default for ReaderConfig {
    fn default() -> Self {
        ReaderConfig {
            journalctl: PathBuf::from("journalctl"),
            trusted_uid: Some(0),
            poll: Duration::from_millis(200),
        }
    }
}

/// Print the run's records to `out` (see the module doc); with `follow`, keep printing new
/// records until the run's final event.
pub fn read_run(
    run: &str,
    fallback_dir: &Path,
    follow: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    read_run_with(run, fallback_dir, follow, out, &ReaderConfig::default())
}

pub fn read_run_with(
    run: &str,
    fallback_dir: &Path,
    follow: bool,
    out: &mut dyn Write,
    config: &ReaderConfig,
) -> io::Result<()> {
    if !super::valid_run_id(run) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "run id: only letters, digits, '.', '_' and '-' are allowed, not starting with '.'",
        ));
    }
    let path = fallback::path_for(fallback_dir, run);
    if follow {
        follow_run(run, &path, out, config)
    } else {
        dump_run(run, &path, out, config)
    }
}

/// `follow`: `None` to read what is there and exit; `Some(cursor)` to follow, starting
/// after `cursor` when given.
fn spawn_journalctl(
    run: &str,
    follow: Option<Option<&str>>,
    config: &ReaderConfig,
) -> io::Result<Child> {
    let mut cmd = Command::new(&config.journalctl);
    cmd.args(["--no-pager", "--quiet", "--all", "--output=json"]);
    if let Some(after) = follow {
        // --follow alone starts at the last 10 records.
        cmd.args(["--follow", "--no-tail"]);
        if let Some(cursor) = after {
            cmd.arg(format!("--after-cursor={cursor}"));
        }
    }
    cmd.arg(format!("{}={run}", fields::AIRLOCK_RUN))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd.spawn().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot run {}: {e}", config.journalctl.display()),
        )
    })
}

/// Lines of a `journalctl -o json` stream, as entries of this run.
struct JournaldEntries<R> {
    lines: io::Lines<BufReader<R>>,
    run: String,
    trusted_uid: Option<u32>,
}

impl<R: Read> Iterator for JournaldEntries<R> {
    type Item = io::Result<Entry>;
    fn next(&mut self) -> Option<io::Result<Entry>> {
        loop {
            let line = match self.lines.next()? {
                Ok(l) => l,
                Err(e) => return Some(Err(e)),
            };
            if let Some(e) = parse_entry(&line, &self.run, self.trusted_uid, false) {
                return Some(Ok(e));
            }
        }
    }
}

/// Lines of the fallback file. A final line without its newline is being written right now
/// and is left for later.
struct FallbackEntries {
    reader: Option<BufReader<File>>,
    run: String,
    pending: Vec<u8>,
}

impl FallbackEntries {
    fn open(path: &Path, run: &str) -> io::Result<FallbackEntries> {
        let reader = match File::open(path) {
            Ok(f) => Some(BufReader::new(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        Ok(FallbackEntries {
            reader,
            run: run.to_string(),
            pending: Vec::new(),
        })
    }

    /// The next complete record, or `None` at the current end of the file.
    fn next_entry(&mut self) -> io::Result<Option<Entry>> {
        let Some(reader) = self.reader.as_mut() else {
            return Ok(None);
        };
        loop {
            let n = reader.read_until(b'\n', &mut self.pending)?;
            if n == 0 || self.pending.last() != Some(&b'\n') {
                return Ok(None);
            }
            let line = std::mem::take(&mut self.pending);
            let parsed = std::str::from_utf8(&line)
                .ok()
                .and_then(|l| parse_entry(l, &self.run, None, true));
            if let Some(e) = parsed {
                return Ok(Some(e));
            }
        }
    }
}

/// Decode one JSON record; `None` for lines that are not records of this run.
fn parse_entry(
    line: &str,
    run: &str,
    trusted_uid: Option<u32>,
    from_fallback: bool,
) -> Option<Entry> {
    let v: Value = serde_json::from_str(line).ok()?;
    let obj = v.as_object()?;
    let text = |name: &str| -> Option<String> {
        obj.get(name)
            .and_then(value_bytes)
            .and_then(|b| String::from_utf8(b).ok())
    };
    if text(fields::AIRLOCK_RUN)? != run || text(fields::SYSLOG_IDENTIFIER)? != fields::IDENTIFIER {
        return None;
    }
    if let Some(uid) = trusted_uid {
        if text("_UID")?.parse::<u32>().ok()? != uid {
            return None;
        }
    }
    let what = if let Some(kind) = text(fields::AIRLOCK_EVENT) {
        What::Event(kind)
    } else {
        What::Output(Stream::parse(&text(fields::AIRLOCK_STREAM)?)?)
    };
    Some(Entry {
        time_us: text(fields::AIRLOCK_TIME_US)?.parse().ok()?,
        seq: text(fields::AIRLOCK_SEQ)?.parse().ok()?,
        what,
        message: obj
            .get(fields::MESSAGE)
            .and_then(value_bytes)
            .unwrap_or_default(),
        from_fallback,
        cursor: if from_fallback {
            None
        } else {
            obj.get("__CURSOR")
                .and_then(Value::as_str)
                .map(str::to_string)
        },
    })
}

/// A field value in journalctl's JSON convention: a string, an array of byte values, or
/// (for a field present several times) an array of those, of which the first counts.
fn value_bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Array(items) => match items.first() {
            Some(Value::Number(_)) | None => items
                .iter()
                .map(|n| n.as_u64().and_then(|n| u8::try_from(n).ok()))
                .collect(),
            Some(first) => value_bytes(first),
        },
        _ => None,
    }
}

fn print_entry(out: &mut dyn Write, e: &Entry) -> io::Result<()> {
    let mut line = Vec::with_capacity(e.message.len() + 24);
    match &e.what {
        What::Output(s) => line.extend_from_slice(s.as_str().as_bytes()),
        What::Event(k) => escape_into(&mut line, k.as_bytes()),
    }
    line.extend_from_slice(b": ");
    escape_into(&mut line, &e.message);
    line.push(b'\n');
    out.write_all(&line)
}

/// Make agent text safe for a terminal, one record per line (see the module doc).
pub fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        let (valid, bad) = match std::str::from_utf8(rest) {
            Ok(s) => (s, 0),
            Err(e) => {
                let (ok, _) = rest.split_at(e.valid_up_to());
                // Safe: from_utf8 just said this prefix is valid.
                let s = std::str::from_utf8(ok).unwrap_or_default();
                (s, e.error_len().unwrap_or(rest.len() - e.valid_up_to()))
            }
        };
        for c in valid.chars() {
            match c {
                '\\' => out.extend_from_slice(b"\\\\"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\t' => out.push(b'\t'),
                c if crate::terminal::unsafe_char(c) => {
                    let _ = write!(out, "\\u{{{:04x}}}", c as u32);
                }
                c => {
                    let mut b = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                }
            }
        }
        let after = valid.len();
        for b in &rest[after..after + bad] {
            let _ = write!(out, "\\x{b:02x}");
        }
        rest = &rest[after + bad..];
    }
}

fn check_exit(child: &mut Child, config: &ReaderConfig) -> io::Result<()> {
    let status = child.wait()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{} failed ({status})",
            config.journalctl.display()
        )))
    }
}

/// What a dump saw: journald's last cursor and whether the run's final record was printed.
struct Dumped {
    cursor: Option<String>,
    ended: bool,
}

fn dump_run(run: &str, path: &Path, out: &mut dyn Write, config: &ReaderConfig) -> io::Result<()> {
    let mut file = FallbackEntries::open(path, run)?;
    dump(run, &mut file, out, config).map(|_| ())
}

/// Print every record there is now, both sources merged in order.
fn dump(
    run: &str,
    file: &mut FallbackEntries,
    out: &mut dyn Write,
    config: &ReaderConfig,
) -> io::Result<Dumped> {
    let mut child = spawn_journalctl(run, None, config)?;
    let Some(stdout) = child.stdout.take() else {
        return Err(io::Error::other("journalctl output not captured"));
    };
    let mut journald = JournaldEntries {
        lines: BufReader::new(stdout).lines(),
        run: run.to_string(),
        trusted_uid: config.trusted_uid,
    }
    .peekable();
    let mut seen = Dumped {
        cursor: None,
        ended: false,
    };
    let mut last_seq: Option<u64> = None;

    let result = (|| -> io::Result<()> {
        let mut file_next = file.next_entry()?;
        loop {
            let from_journald = match (journald.peek(), &file_next) {
                (None, None) => return Ok(()),
                (Some(Err(_)), _) => true,
                (Some(Ok(j)), Some(f)) => j.key() <= f.key(),
                (Some(Ok(_)), None) => true,
                (None, Some(_)) => false,
            };
            let entry = if from_journald {
                match journald.next() {
                    Some(r) => r?,
                    None => return Ok(()),
                }
            } else {
                match file_next.take() {
                    Some(e) => {
                        file_next = file.next_entry()?;
                        e
                    }
                    None => return Ok(()),
                }
            };
            // A writer counts from 1; a jump within one writer means lost records.
            if let Some(prev) = last_seq {
                if entry.seq > prev.saturating_add(1) {
                    writeln!(out, "airlock: {} record(s) missing", entry.seq - prev - 1)?;
                }
            }
            last_seq = Some(entry.seq);
            print_entry(out, &entry)?;
            seen.ended |= entry.ends_run();
            if entry.cursor.is_some() {
                seen.cursor = entry.cursor;
            }
        }
    })();
    if let Err(e) = result {
        // We spawned it; stop it rather than leave it writing into a closed pipe.
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    check_exit(&mut child, config)?;
    Ok(seen)
}

fn follow_run(
    run: &str,
    path: &Path,
    out: &mut dyn Write,
    config: &ReaderConfig,
) -> io::Result<()> {
    // What is already there prints merged and in order; only newer records print as they
    // arrive.
    let mut file = FallbackEntries::open(path, run)?;
    let dumped = dump(run, &mut file, out, config)?;
    out.flush()?;
    if dumped.ended {
        return Ok(());
    }
    let mut child = spawn_journalctl(run, Some(dumped.cursor.as_deref()), config)?;
    let Some(stdout) = child.stdout.take() else {
        return Err(io::Error::other("journalctl output not captured"));
    };
    let (tx, rx) = mpsc::channel::<io::Result<Entry>>();
    let run_owned = run.to_string();
    let trusted_uid = config.trusted_uid;
    let pump = std::thread::spawn(move || {
        let entries = JournaldEntries {
            lines: BufReader::new(stdout).lines(),
            run: run_owned,
            trusted_uid,
        };
        for e in entries {
            if tx.send(e).is_err() {
                return;
            }
        }
    });

    let result = (|| -> io::Result<()> {
        let mut ended = false;
        loop {
            if file.reader.is_none() {
                // The run may start falling back at any moment.
                file = FallbackEntries::open(path, run)?;
            }
            while let Some(e) = file.next_entry()? {
                print_entry(out, &e)?;
                ended |= e.ends_run();
            }
            match rx.recv_timeout(config.poll) {
                Ok(e) => {
                    let e = e?;
                    print_entry(out, &e)?;
                    ended |= e.ends_run();
                }
                // After the final record, one quiet poll interval lets the other source's
                // last records arrive before we stop.
                Err(mpsc::RecvTimeoutError::Timeout) if ended => return Ok(()),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // journalctl --follow only ends on error.
                    return check_exit(&mut child, config)
                        .and(Err(io::Error::other("journalctl stopped following")));
                }
            }
            out.flush()?;
        }
    })();
    let _ = child.kill();
    let _ = child.wait();
    let _ = pump.join();
    out.flush()?;
    result
}
