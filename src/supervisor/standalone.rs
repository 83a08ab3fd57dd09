//! `airlockctl launch --standalone`: the supervisor in the launching process, for hosts
//! without airlockd. It keeps the same records and budgets as the daemon: the weekly run
//! budget from the ledger, a `run_opened` record before the jail starts and a `run_closed`
//! record after, and the run's journal (every output line and the same events).
//!
//! The ledger has one appender at a time. airlockd holds it for as long as it runs, so a
//! standalone launch next to a running daemon is refused. Standalone launches hold it only
//! while they append (a few milliseconds), so several can run side by side; a launch that
//! finds it taken retries for a moment before concluding that a daemon owns it.
//!
//! SIGINT, SIGTERM or SIGHUP to this process ([`Interrupt`], fed by the caller) stop the
//! run as `airlockctl stop` does, and its record is closed as interrupted. If this process
//! dies mid-run (SIGKILL), the jail helper kills the run (its lifeline closes) and the
//! record stays open until the next process that owns the ledger (airlockd, or the next
//! standalone launch) closes it as aborted, at the time the run's [`alive`] file was last
//! touched.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::alive::{self, Alive, Supervisor};
use super::launch::{self, LaunchError, LaunchRequest, Prepared, Resolved};
use super::lease_records;
use super::ledger::{self, Ledger, LedgerError, LedgerEvent, RunClosed, RunOpened};
use super::outcome::{self, Closing};
use super::process::{RunControl, Spawned};
use super::reap;
use super::run_output::{JournaledRun, Tee, WriterTee};
use crate::config::Config;
use crate::credentials::leases::LeaseStore;
use crate::journal::{EventKind, RunFields, RunJournal};
use crate::policy::budget;
use crate::sandbox::helper::Ahead;
use crate::supervisor::instances;
use crate::terminal::{Show, TerminalSafe};

/// What a standalone launch refused with when airlockd holds the ledger.
pub const DAEMON_OWNS_LEDGER: &str =
    "airlockd is running and owns the ledger: launch through it (drop --standalone)";

/// How long a launch waits for another standalone launch to finish its append.
const LOCK_PATIENCE: Duration = Duration::from_secs(3);

/// Open the ledger for one append, waiting out other standalone launches' appends. Only
/// its end is read: the records back to `since_ms` (for the weekly budget) and the last
/// one (see [`Ledger::open_recent`]).
fn open_ledger(cfg: &Config, since_ms: u64) -> Result<Ledger, LaunchError> {
    let path = cfg.state_dir.join(ledger::FILE_NAME);
    let until = Instant::now() + LOCK_PATIENCE;
    loop {
        match Ledger::open_recent(&path, since_ms) {
            Ok(l) => return Ok(l),
            // A live control socket: the holder is airlockd, which never lets go.
            Err(LedgerError::Locked { .. })
                if std::os::unix::net::UnixStream::connect(&cfg.socket).is_ok() =>
            {
                return Err(LaunchError::Refused(DAEMON_OWNS_LEDGER.to_string()))
            }
            Err(LedgerError::Locked { .. }) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(25));
            }
            Err(LedgerError::Locked { .. }) => {
                return Err(LaunchError::Refused(DAEMON_OWNS_LEDGER.to_string()))
            }
            Err(e) => return Err(LaunchError::Io(e.to_string())),
        }
    }
}

/// A signal that asked this launch to end: set by whoever catches signals, acted on by the
/// run's supervision (a stop, as `airlockctl stop` does), whichever comes first.
#[derive(Debug, Default)]
pub struct Interrupt {
    inner: Mutex<Interrupted>,
}

#[derive(Debug, Default)]
struct Interrupted {
    signal: Option<i32>,
    run: Option<(String, Arc<RunControl>)>,
}

impl Interrupt {
    /// A signal arrived. The first one is kept; returns the run it stops, when one is
    /// under way and this was the first.
    pub fn signal(&self, sig: i32) -> Option<String> {
        let mut i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if i.signal.is_some() {
            return None;
        }
        i.signal = Some(sig);
        let (run, ctl) = i.run.as_ref()?;
        ctl.request_stop(&stop_reason(sig));
        Some(run.clone())
    }

    /// The signal that interrupted this launch, if one did.
    pub fn received(&self) -> Option<i32> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).signal
    }

    /// The run is under way: a signal from now on stops it; one that came already stops
    /// it at once.
    fn attach(&self, run: &str, ctl: Arc<RunControl>) {
        let mut i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sig) = i.signal {
            ctl.request_stop(&stop_reason(sig));
        }
        i.run = Some((run.to_string(), ctl));
    }
}

/// The stop request's reason, for the closing record.
fn stop_reason(sig: i32) -> String {
    format!(
        "{} to its supervisor (airlockctl launch --standalone, pid {})",
        signal_name(sig),
        std::process::id()
    )
}

/// `SIGINT` for 2, and so on.
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// What the launching process adds to its run.
#[derive(Debug, Clone)]
pub struct Caller<'a> {
    /// Copy the agent's output to this process's stdout and stderr, shown so.
    pub stream: Option<Show>,
    /// Signals to this process: they stop the run.
    pub interrupt: &'a Interrupt,
    /// The instance's frozen revision the role came from (`role_sha256`, `rev`), recorded
    /// in the opening record.
    pub revision: Option<(String, u32)>,
}

/// How a standalone run ended.
#[derive(Debug, Clone)]
pub struct Finished {
    pub run_id: String,
    pub closing: Closing,
    /// Set when the closing record could not be appended (it stays open until airlockd
    /// next starts and closes it as aborted).
    pub ledger_error: Option<String>,
}

/// Check the budget, record, journal and run one launch in this process. Blocks until the
/// run is over. `slot`: the run's id and cgroup parent ([`launch::new_slot`]); `helper`: a
/// jail helper from [`process::spawn_helper`] for that slot, started as early as the caller
/// could (it builds the common part of the jail meanwhile and gets its spec
/// only after the opening record is durable). `started` hears the run id once that record
/// is written; `caller`: whether the agent's output is copied to this process's stdout and
/// stderr (on top of the journal), and the signals that stop the run. `Err`: nothing was
/// started and nothing was recorded, except a run whose journal could not be opened (then
/// its record is closed as refused). A helper not handed a run dies with this process
/// (its lifeline). Runs of earlier launches whose supervisor died are closed first.
pub fn run(
    cfg: &Config,
    req: &LaunchRequest,
    resolved: Resolved<'_>,
    slot: Ahead,
    helper: Result<Spawned, LaunchError>,
    caller: Caller<'_>,
    started: impl FnOnce(&str),
) -> Result<Finished, LaunchError> {
    let Caller {
        stream,
        interrupt,
        revision,
    } = caller;
    let role = resolved.role;
    // Root runs what these files say: only if no one else could have written them.
    if nix::unistd::geteuid().is_root() {
        let untrusted =
            crate::trust::check_config_set(&cfg.file, cfg.roles.iter().chain([&cfg.policies]));
        if !untrusted.is_empty() {
            return Err(LaunchError::Refused(untrusted.join("; ")));
        }
    }
    // The instances' uids, as airlockd checks them at load.
    let uids = super::instances::check_config(cfg);
    if !uids.is_empty() {
        return Err(LaunchError::Refused(uids.join("; ")));
    }
    // The run's supervision, heartbeat and gateway are tasks of this runtime, as they are
    // of airlockd's; what blocks goes to its blocking pool.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| LaunchError::Io(format!("cannot start the run's runtime: {e}")))?;
    let _entered = runtime.enter();
    instances::ensure_state_dir(&cfg.state_dir)
        .map_err(|e| LaunchError::Io(format!("state_dir: {e}")))?;
    let journal_dir = cfg.journal_dir();
    crate::journal::fallback::ensure_dir(&journal_dir)
        .map_err(|e| LaunchError::Io(format!("{}: cannot create: {e}", journal_dir.display())))?;
    alive::ensure_dir(&cfg.state_dir).map_err(|e| LaunchError::Io(format!("state_dir: {e}")))?;
    let jcfg = cfg.journal_config();

    // The budget check and the opening record under one hold of the ledger lock, so two
    // launches cannot both take the last run of the week.
    let now = ledger::now_ms();
    let window = budget::window_start(now);
    let mut ledger = open_ledger(cfg, window)?;
    // This launch owns the ledger now: runs whose supervisor died are closed first, so
    // their records never stay open for longer than until the next launch.
    let reaped = reap::reap_left(&mut ledger, &cfg.state_dir, &journal_dir, &jcfg)
        .map_err(|e| LaunchError::Io(e.to_string()))?;
    for line in &reaped.not_killed {
        eprintln!(
            "airlockctl: closing an abandoned run: could not kill what was left of it: {line}"
        );
    }
    {
        let mut append = |e| ledger.append(e).map(|_| ()).map_err(|e| e.to_string());
        lease_records::sweep_left(cfg, &mut append, "a standalone launch")
            .map_err(LaunchError::Io)?;
    }
    let used = ledger.opened_since(&req.instance, window);
    budget::check_weekly(&req.instance, used, role.role.budget.runs_per_week)
        .map_err(LaunchError::Refused)?;
    // No pool: each standalone launch is a process of its own.
    let prepared = launch::prepare_in(cfg, req, resolved, slot, None, None)?;
    let run = prepared.spec.run_id.clone();
    let deadline_s = prepared.deadline.map(|d| d.as_secs()).unwrap_or(0);
    let launched_by_uid = nix::unistd::getuid().as_raw();
    if let Some(sig) = interrupt.received() {
        let _ = std::fs::remove_dir_all(&prepared.run_dir);
        return Err(LaunchError::Refused(format!(
            "{} arrived before the run started; nothing was started or recorded",
            signal_name(sig)
        )));
    }
    // Under the ledger lock, which every cleanup of abandoned runs holds too: no cleanup
    // can find this file before its record exists.
    let held = Alive::create(
        &cfg.state_dir,
        &run,
        Supervisor::Standalone,
        prepared.spec.cgroup_parent.as_deref(),
    )
    .map_err(|e| {
        let _ = std::fs::remove_dir_all(&prepared.run_dir);
        LaunchError::Io(format!("the run was not started: {e}"))
    })?;
    // The leases and the opening record, as airlockd records them.
    let store = LeaseStore::new(&cfg.state_dir);
    let opened = RunOpened {
        run: run.clone(),
        launched_by_uid,
        role: role.role.role.clone(),
        instance: req.instance.clone(),
        uid: prepared.spec.uid,
        level: role.role.level,
        budgets: budget::budgets_json(&role.role, req.max_seconds, deadline_s),
        role_sha256: revision.as_ref().map(|r| r.0.clone()),
        rev: revision.as_ref().map(|r| r.1),
        started_at: now,
        deadline_s,
        image: prepared.spec.image.as_ref().map(|i| i.name.clone()),
        image_digest: prepared.spec.image.as_ref().map(|i| i.digest.clone()),
    };
    if let Err(e) = lease_records::record_opening(&store, &mut ledger, &prepared.leases, opened) {
        prepared.gateway.leases.revoke_all();
        let mut append = |e: LedgerEvent| ledger.append(e).map(|_| ()).map_err(|e| e.to_string());
        let _ = lease_records::revoke_run(&store, &mut append, &run, "the run was not started");
        // Nothing of a refused run stays behind.
        let _ = std::fs::remove_dir_all(&prepared.run_dir);
        held.remove();
        return Err(LaunchError::Io(format!("the run was not started: {e}")));
    }
    drop(ledger);
    // Without a heartbeat the file still says the run is supervised; only the time it was
    // last alive is lost.
    let heartbeat = held.beat().ok();
    // The closing record is durable: the file goes. Not closed: it stays, touched now, for
    // the next owner of the ledger to close the run with this time.
    let settle = |closed: bool| {
        let stopped = heartbeat.map(|h| runtime.block_on(h.stop()));
        if let Some(a) = stopped.flatten() {
            if closed {
                a.remove()
            } else {
                a.leave()
            }
        }
    };
    started(&run);

    let fields = RunFields {
        run: run.clone(),
        role: role.role.role.clone(),
        instance: req.instance.clone(),
    };
    let journal = match RunJournal::open_with(fields, &journal_dir, jcfg) {
        Ok(j) => JournaledRun::new(j),
        Err(e) => {
            if let Ok(sp) = helper {
                sp.abandon();
            }
            let reason = format!("the run's journal could not be opened: {e}");
            let closing = Closing {
                outcome: ledger::Outcome::Refused,
                code: outcome::NOT_STARTED,
                signal: None,
                reason: reason.clone(),
                kind: EventKind::RunAborted,
                tally: Default::default(),
            };
            let ledger_error = close(cfg, &run, &closing).err();
            settle(ledger_error.is_none());
            return Ok(Finished {
                run_id: run,
                closing,
                ledger_error,
            });
        }
    };
    let ctl = Arc::new(RunControl::new(prepared.deadline, launch::GRACE));
    interrupt.attach(&run, ctl.clone());
    let mut closing = runtime.block_on(supervise(
        &prepared,
        helper,
        &journal,
        &ctl,
        stream,
        launched_by_uid,
        deadline_s,
    ));
    if interrupt.received().is_some() {
        closing = outcome::interrupted(closing);
    }
    // The ledger first, so the run's last journal record can say if it failed.
    let ledger_error = match close(cfg, &run, &closing) {
        Ok(revoked) => {
            journal.revoked(
                &revoked,
                &format!("the run ended ({})", outcome::outcome_str(closing.outcome)),
            );
            None
        }
        Err(e) => Some(e),
    };
    settle(ledger_error.is_none());
    let last = match &ledger_error {
        None => closing.reason.clone(),
        Some(e) => format!(
            "{}; its ledger record could not be closed ({e}); the next start of airlockd or launch --standalone closes it as aborted",
            closing.reason
        ),
    };
    journal.event(closing.kind, &last);
    journal.sync();
    Ok(Finished {
        run_id: run,
        closing,
        ledger_error,
    })
}

/// Run the jail to its end with the run's journal; journal what the daemon journals.
async fn supervise(
    prepared: &Prepared,
    helper: Result<Spawned, LaunchError>,
    run: &JournaledRun,
    ctl: &RunControl,
    stream: Option<Show>,
    launched_by_uid: u32,
    deadline_s: u64,
) -> Closing {
    let spec = &prepared.spec;
    run.event(
        EventKind::RunStarted,
        &format!(
            "run started (standalone, pid {}): role {}, instance {} (uid {}), launched by uid {launched_by_uid}, deadline {}",
            std::process::id(),
            spec.role,
            spec.instance,
            spec.uid,
            if deadline_s == 0 {
                "none".to_string()
            } else {
                format!("{deadline_s} s")
            }
        ),
    );
    let tees: [Option<Box<dyn Tee>>; 2] = match stream {
        Some(show) => [
            Some(Box::new(WriterTee(Box::new(TerminalSafe::stdout(show))))),
            Some(Box::new(WriterTee(Box::new(TerminalSafe::stderr(show))))),
        ],
        None => [None, None],
    };
    let mut closing = run.supervise(prepared, helper, ctl, tees, deadline_s).await;
    closing.reason = outcome::with_lost(&closing.reason, run.lost());
    closing
}

/// Revoke the run's leases and append its closing record, under one hold of the ledger.
fn close(cfg: &Config, run: &str, c: &Closing) -> Result<lease_records::Revoked, String> {
    // Nothing before the last record is needed to append the closing one.
    let mut ledger = open_ledger(cfg, u64::MAX).map_err(|e| e.to_string())?;
    let store = LeaseStore::new(&cfg.state_dir);
    let why = format!("the run ended ({})", outcome::outcome_str(c.outcome));
    let revoked = {
        let mut append = |e: LedgerEvent| ledger.append(e).map(|_| ()).map_err(|e| e.to_string());
        lease_records::revoke_run(&store, &mut append, run, &why)?
    };
    ledger
        .append(LedgerEvent::RunClosed(RunClosed::new(
            run,
            c.outcome,
            c.exit_code(),
            c.signal,
            &c.reason,
            c.tally.clone(),
        )))
        .map(|_| revoked)
        .map_err(|e| e.to_string())
}
