//! The journal of a run: agent output lines and daemon events, sent to journald with the
//! run's fields, or to a per-run fallback file when journald cannot take them.
//!
//! Every record carries `MESSAGE`, `PRIORITY`, `SYSLOG_IDENTIFIER=airlockd`, `AIRLOCK_RUN`,
//! `AIRLOCK_ROLE`, `AIRLOCK_INSTANCE`, `AIRLOCK_SEQ` and `AIRLOCK_TIME_US`; output lines add
//! `AIRLOCK_STREAM=stdout|stderr`, events add `AIRLOCK_EVENT=<kind>` and the kind's fixed
//! `MESSAGE_ID` (table in [`fields`]). An agent line is only ever the `MESSAGE` value, sent
//! length-prefixed when it holds a newline, so text like `AIRLOCK_RUN=x` in the output is
//! just text: agents cannot forge fields.
//!
//! Delivery: each record goes to exactly one place. While journald accepts datagrams,
//! records go there. The first record journald refuses (missing socket, refused, queue still
//! full after the send timeout...) is written to `<fallback_dir>/<run>.journal` instead, and
//! so is every later record until a retry (at most one per `retry_interval`) reaches journald
//! again. A record that reached neither is reported as an error to the caller, never dropped
//! silently. journald's own rate limit can still discard accepted records; the reader
//! reports such holes through gaps in `AIRLOCK_SEQ`.
//!
//! A writer on an async thread offers an event with [`RunJournal::event_now`] first: sent
//! only if journald's socket takes it without waiting, else nothing is written and the
//! writer hands the record to a thread that writes it with [`RunJournal::event`] as above.

pub mod fallback;
pub mod fields;
pub mod lines;
pub mod native;
pub mod reader;

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use fields::{EventKind, Stream};
pub use lines::LineSplitter;
pub use reader::read_run;

use fallback::FallbackFile;
use native::NativeSender;

/// The identity of a run, fixed for every record it writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFields {
    pub run: String,
    pub role: String,
    pub instance: String,
}

/// Tunables; the defaults are what airlockd uses.
#[derive(Debug, Clone)]
pub struct JournalConfig {
    /// journald's native socket.
    pub socket: PathBuf,
    /// Longest wait for room in journald's queue before a record goes to the fallback file.
    pub send_timeout: Duration,
    /// While falling back, how often to try journald again.
    pub retry_interval: Duration,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            socket: PathBuf::from(native::DEFAULT_SOCKET),
            send_timeout: Duration::from_millis(250),
            retry_interval: Duration::from_secs(1),
        }
    }
}

/// A run id names a file: letters, digits, `.`, `_`, `-`, not starting with `.`, at most
/// 128 bytes.
pub fn valid_run_id(run: &str) -> bool {
    !run.is_empty()
        && run.len() <= 128
        && !run.starts_with('.')
        && run
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

/// Where records go: journald, or the fallback file since a failed send.
#[derive(Debug, Clone, Copy)]
enum Route {
    Journald,
    Fallback { last_try: Instant },
}

/// How [`RunJournal::write`] delivers a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// To journald (waiting up to the send timeout), else to the fallback file.
    Sure,
    /// To journald if its socket takes it at once, else nowhere.
    Now,
}

/// The journal writer of one run. Not shared between threads: the supervisor owns one per
/// run and feeds it from the run's output pump.
#[derive(Debug)]
pub struct RunJournal {
    fields: RunFields,
    config: JournalConfig,
    sender: NativeSender,
    fallback: FallbackFile,
    route: Route,
    seq: u64,
    last_time_us: u64,
    datagram: Vec<u8>,
    to_journald: u64,
    to_fallback: u64,
    /// airlockd's count of fallback records, when it keeps one.
    fallback_counter: Option<prometheus_client::metrics::counter::Counter>,
}

impl RunJournal {
    /// Open the journal of a run with the default configuration.
    pub fn open(fields: RunFields, fallback_dir: &Path) -> io::Result<RunJournal> {
        RunJournal::open_with(fields, fallback_dir, JournalConfig::default())
    }

    /// Open with an explicit configuration (tests point `socket` at a fake or missing path).
    pub fn open_with(
        fields: RunFields,
        fallback_dir: &Path,
        config: JournalConfig,
    ) -> io::Result<RunJournal> {
        if !valid_run_id(&fields.run) {
            return Err(invalid(
                "run id: only letters, digits, '.', '_' and '-' are allowed, not starting with '.', at most 128 bytes",
            ));
        }
        fallback::ensure_dir(fallback_dir)?;
        let sender = NativeSender::new(&config.socket, config.send_timeout)?;
        let fallback = FallbackFile::new(fallback::path_for(fallback_dir, &fields.run));
        Ok(RunJournal {
            fields,
            config,
            sender,
            fallback,
            route: Route::Journald,
            seq: 0,
            last_time_us: 0,
            datagram: Vec::with_capacity(1024),
            to_journald: 0,
            to_fallback: 0,
            fallback_counter: None,
        })
    }

    /// `<fallback_dir>/<run>.journal`, whether or not it exists yet.
    pub fn fallback_path(&self) -> &Path {
        self.fallback.path()
    }

    /// Count every record written to the fallback file in `counter` too.
    pub fn count_fallback(&mut self, counter: prometheus_client::metrics::counter::Counter) {
        self.fallback_counter = Some(counter);
    }

    /// Records journald accepted so far.
    pub fn sent_to_journald(&self) -> u64 {
        self.to_journald
    }

    /// Records written to the fallback file so far.
    pub fn sent_to_fallback(&self) -> u64 {
        self.to_fallback
    }

    /// True while records are going to the fallback file.
    pub fn falling_back(&self) -> bool {
        matches!(self.route, Route::Fallback { .. })
    }

    /// One line of agent output, bytes kept exactly.
    pub fn line(&mut self, stream: Stream, bytes: &[u8]) -> io::Result<()> {
        let prio = [b'0' + stream.priority()];
        self.write(
            bytes,
            &prio,
            &[(fields::AIRLOCK_STREAM, stream.as_str().as_bytes())],
            &[],
            Delivery::Sure,
        )
        .map(|_| ())
    }

    /// A daemon event about this run. `extra` adds fields; their names must be valid journald
    /// names and not one of [`fields::RESERVED`]. Values must never hold secrets.
    pub fn event(
        &mut self,
        kind: EventKind,
        message: &str,
        extra: &[(&str, &str)],
    ) -> io::Result<()> {
        self.event_unsynced(kind, message, extra)?;
        // Events are rare and matter: make fallback copies durable right away.
        if self.falling_back() {
            self.fallback.sync()?;
        }
        Ok(())
    }

    /// [`Self::event`] without making a fallback copy durable: for a writer of many
    /// records at once, which calls [`Self::sync`] after the last of them.
    pub fn event_unsynced(
        &mut self,
        kind: EventKind,
        message: &str,
        extra: &[(&str, &str)],
    ) -> io::Result<()> {
        self.event_with(kind, message, extra, Delivery::Sure)
            .map(|_| ())
    }

    /// [`Self::event`] only if journald's socket takes it at once: `Ok(false)` when it did
    /// not (full, missing, falling back, a record too big for one datagram), and then
    /// nothing was written and no sequence number spent; the caller writes it with
    /// [`Self::event`] (off its async thread: that may wait or write a file).
    pub fn event_now(
        &mut self,
        kind: EventKind,
        message: &str,
        extra: &[(&str, &str)],
    ) -> io::Result<bool> {
        self.event_with(kind, message, extra, Delivery::Now)
    }

    fn event_with(
        &mut self,
        kind: EventKind,
        message: &str,
        extra: &[(&str, &str)],
        delivery: Delivery,
    ) -> io::Result<bool> {
        for (name, _) in extra {
            if !fields::valid_name(name) {
                return Err(invalid(
                    "event field name: use A-Z, 0-9 and '_', not starting with a digit or '_', at most 64 bytes",
                ));
            }
            if fields::RESERVED.contains(name) {
                return Err(invalid("event field name: reserved by the journal writer"));
            }
        }
        let prio = [b'0' + kind.priority()];
        self.write(
            message.as_bytes(),
            &prio,
            &[
                (fields::AIRLOCK_EVENT, kind.as_str().as_bytes()),
                (fields::MESSAGE_ID, kind.message_id().as_bytes()),
            ],
            extra,
            delivery,
        )
    }

    fn write(
        &mut self,
        message: &[u8],
        priority: &[u8],
        kind_fields: &[(&str, &[u8])],
        extra: &[(&str, &str)],
        delivery: Delivery,
    ) -> io::Result<bool> {
        if delivery == Delivery::Now && self.falling_back() {
            // Retrying journald and the fallback file are the sure writer's business.
            return Ok(false);
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        // Never decreasing, so (time, seq) orders one writer's records even if the clock
        // steps back.
        let (next_seq, next_time) = (self.seq + 1, self.last_time_us.max(now));
        if delivery == Delivery::Sure {
            // Spent even if the record then reaches neither place: the reader sees the gap.
            (self.seq, self.last_time_us) = (next_seq, next_time);
        }
        let seq = next_seq.to_string();
        let time = next_time.to_string();

        let mut all: Vec<(&str, &[u8])> = Vec::with_capacity(10 + kind_fields.len() + extra.len());
        all.push((fields::MESSAGE, message));
        all.push((fields::PRIORITY, priority));
        all.push((fields::SYSLOG_IDENTIFIER, fields::IDENTIFIER.as_bytes()));
        all.push((fields::AIRLOCK_RUN, self.fields.run.as_bytes()));
        all.push((fields::AIRLOCK_ROLE, self.fields.role.as_bytes()));
        all.push((fields::AIRLOCK_INSTANCE, self.fields.instance.as_bytes()));
        all.extend_from_slice(kind_fields);
        all.extend(extra.iter().map(|(n, v)| (*n, v.as_bytes())));
        all.push((fields::AIRLOCK_SEQ, seq.as_bytes()));
        all.push((fields::AIRLOCK_TIME_US, time.as_bytes()));

        let try_journald = match self.route {
            Route::Journald => true,
            Route::Fallback { last_try } => last_try.elapsed() >= self.config.retry_interval,
        };
        if try_journald {
            self.datagram.clear();
            for (name, value) in &all {
                native::encode_field(&mut self.datagram, name, value);
            }
            if delivery == Delivery::Now {
                if !self.sender.send_now(&self.datagram) {
                    return Ok(false);
                }
                (self.seq, self.last_time_us) = (next_seq, next_time);
                self.to_journald += 1;
                return Ok(true);
            }
            match self.sender.send(&self.datagram) {
                Ok(()) => {
                    self.route = Route::Journald;
                    self.to_journald += 1;
                    return Ok(true);
                }
                Err(_) => {
                    // Why journald failed does not matter to the record: it goes to the
                    // file, and retries continue on their own schedule.
                    self.route = Route::Fallback {
                        last_try: Instant::now(),
                    };
                }
            }
        }
        self.fallback.append(&all)?;
        self.to_fallback += 1;
        if let Some(c) = &self.fallback_counter {
            c.inc();
        }
        Ok(true)
    }

    /// Flush fallback records to stable storage (call when the run ends).
    pub fn sync(&mut self) -> io::Result<()> {
        self.fallback.sync()
    }
}

impl Drop for RunJournal {
    fn drop(&mut self) {
        // Best effort: a failure here has no one left to report to.
        let _ = self.fallback.sync();
    }
}
