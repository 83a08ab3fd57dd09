//! Daemon-level journal records (start, stop, reloads, refusals): a journal writer whose run
//! id is `airlockd`, so `journalctl AIRLOCK_RUN=airlockd` lists them, with the same
//! journald-or-fallback-file delivery as a run's records.

use std::path::Path;
use std::sync::Mutex;

use crate::journal::{EventKind, JournalConfig, RunFields, RunJournal};

/// `AIRLOCK_RUN` of daemon-level records.
pub const DAEMON_RUN: &str = "airlockd";

pub struct Events {
    journal: Mutex<Option<RunJournal>>,
    echo: bool,
}

impl Events {
    pub fn open(dir: &Path, config: &JournalConfig) -> Events {
        let fields = RunFields {
            run: DAEMON_RUN.to_string(),
            role: "-".to_string(),
            instance: "-".to_string(),
        };
        let journal = RunJournal::open_with(fields, dir, config.clone()).ok();
        if journal.is_none() {
            eprintln!("airlockd: cannot open the daemon journal; events go to stderr only");
        }
        Events {
            journal: Mutex::new(journal),
            // Under systemd stderr is the journal already: do not log each event twice.
            echo: std::env::var_os("JOURNAL_STREAM").is_none(),
        }
    }

    /// Record one event. `extra` fields must be valid journald names; values never secrets.
    pub fn log(&self, kind: EventKind, message: &str, extra: &[(&str, &str)]) {
        let mut j = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        let delivered = match j.as_mut() {
            Some(j) => j.event(kind, message, extra).is_ok(),
            None => false,
        };
        if self.echo || !delivered {
            eprintln!("airlockd: {}: {message}", kind.as_str());
        }
    }
}
