//! airlockd: the supervisor as a service. Startup (load, lock the ledger, crash recovery,
//! socket, READY=1), the main loop (connections, signals, watchdog, STATUS=), and the drain
//! on SIGTERM/SIGINT.
//!
//! Threads: one tokio runtime (a worker per CPU) serves the control socket and every run:
//! each run is a task tree on it (its supervision, output, heartbeat and gateway), and what
//! blocks (ledger fsyncs, journal writes, spawning the single-threaded `airlock-jail`
//! helper, cgroup and disk clean-up) goes to its bounded blocking pool. The daemon itself
//! never forks.

pub mod asks;
pub mod cgroup;
pub mod connectors;
pub mod decisions;
pub mod events;
pub mod fleet;
pub mod fleet_revisions;
pub mod live_change;
pub mod peer;
pub mod recovery;
pub mod reload;
pub mod runs;
pub mod scrape;
pub mod server;
mod shared_policy;
mod trim;
pub mod tty;
pub mod warm;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};

use crate::control::listener;
use crate::journal::{EventKind, JournalConfig};
use crate::supervisor::ledger::{self, Ledger};
use crate::supervisor::{instances, mount_hold, notify};
use events::Events;
use reload::LoadedSet;
use runs::ActiveRun;

/// Threads of the runtime's blocking pool at most (idle ones exit after a few seconds):
/// launches, closings and journal writes of many runs queue for them rather than each
/// holding a thread.
pub const BLOCKING_THREADS: usize = 16;

/// The daemon's shared state.
pub struct Daemon {
    config_path: PathBuf,
    set: RwLock<Arc<LoadedSet>>,
    reload_lock: Mutex<()>,
    pub ledger: Mutex<Ledger>,
    /// The ledger's record count, read without its lock ([`Ledger::counter`]): an async
    /// task must never wait on a lock a blocking thread holds across a store call.
    ledger_count: Arc<std::sync::atomic::AtomicU64>,
    /// The last record of this host's ledger the fleet store is known to hold (the mirror
    /// writer's position; 0 before it has asked).
    pub mirrored: std::sync::atomic::AtomicU64,
    pub ledger_path: PathBuf,
    pub journal_dir: PathBuf,
    pub active: Mutex<BTreeMap<String, Arc<ActiveRun>>>,
    /// Poked whenever the active table changes.
    pub changed: Notify,
    draining: AtomicBool,
    /// Launches being decided (see [`Daemon::launch_in_flight`]).
    launches: AtomicUsize,
    /// Runs being supervised or torn down (see [`Daemon::run_in_flight`]).
    supervising: AtomicUsize,
    pub events: Events,
    /// Parent of every run's cgroup, settled once at startup.
    pub cgroup_parent: Option<PathBuf>,
    /// Jails built ahead of launches (see [`warm`]).
    pub warm: warm::WarmPool,
    /// Empty workspace images made ahead of launches (`None`: its directory could not be
    /// made; every launch makes its own).
    pub images: Option<crate::supervisor::image_pool::ImagePool>,
    /// Instances' homes held between their runs (see [`mount_hold`]).
    pub homes: mount_hold::KeptHomes,
    /// What `/metrics` shows (counted whether or not it is served).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The OpenTelemetry exporter, when `tracing:` asks for one.
    pub traces: Option<crate::metrics::traces::Traces>,
    /// The fleet's shared store (`store:` in the config, read at start only); `None`: this
    /// host's files alone.
    pub fleet: Option<Arc<crate::store::Fleet>>,
}

/// A task ended when its holder goes.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A launch being decided ([`Daemon::launch_in_flight`]) or a run being supervised
/// ([`Daemon::run_in_flight`]): counted until it drops.
pub struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Daemon {
    /// The set in force (config, policies, catalog), whole.
    pub fn set(&self) -> Arc<LoadedSet> {
        self.set.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn swap(&self, new: LoadedSet) {
        *self.set.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(new);
    }

    pub fn journal_config(&self) -> JournalConfig {
        self.set().config.journal_config()
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Count a launch as being decided until the guard drops: the drain waits for these,
    /// so a launch refused late still removes what it made before airlockd exits, and one
    /// that started its run has it in the active table for the drain to stop.
    pub fn launch_in_flight(&self) -> InFlight<'_> {
        self.launches.fetch_add(1, Ordering::SeqCst);
        InFlight(&self.launches)
    }

    /// Count a run as supervised until the guard drops, past its closing record: what
    /// follows it (the helper's exit, the cgroups' removal, the disks let go) is waited
    /// for by the drain too, so airlockd exits with nothing of a run left behind.
    pub fn run_in_flight(&self) -> InFlight<'_> {
        self.supervising.fetch_add(1, Ordering::SeqCst);
        InFlight(&self.supervising)
    }

    pub fn active_count(&self) -> usize {
        self.active.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn ledger_len(&self) -> u64 {
        self.ledger_count.load(Ordering::SeqCst)
    }

    /// Fill the pool of workspace images again, on the blocking pool, for the size the
    /// config in force says (nothing when workspaces are unbounded).
    pub fn refill_images(self: &Arc<Self>) {
        if self.images.is_none() || self.is_draining() {
            return;
        }
        let d = self.clone();
        tokio::task::spawn_blocking(move || {
            if let (Some(pool), Some(b)) = (&d.images, d.set().config.disk.workspace) {
                pool.refill(b);
            }
        });
    }

    pub fn status_line(&self) -> String {
        let n = self.active_count();
        let runs = if n == 1 { "run" } else { "runs" };
        if self.is_draining() {
            format!("{n} active {runs}; draining")
        } else {
            format!("{n} active {runs}")
        }
    }
}

fn fail(lines: &[String]) -> i32 {
    for l in lines {
        eprintln!("airlockd: {l}");
    }
    1
}

/// Let `admin_group` connect to the control socket at `socket` too (a POSIX ACL entry),
/// when it is not the socket's own group; admins need not be operators.
pub fn admit_admins(set: &reload::LoadedSet, socket: &Path) -> Result<(), String> {
    let extra: Vec<u32> = set
        .groups
        .admin_gid
        .filter(|g| Some(*g) != set.socket_gid)
        .into_iter()
        .collect();
    crate::control::socket_acl::admit(socket, &extra).map_err(|e| {
        format!(
            "{}: cannot let admin_group connect (an ACL entry on the socket): {e}; admins must also be in the socket's group",
            socket.display()
        )
    })
}

/// `airlockd --admit-socket PATH` (the socket unit's ExecStartPost=): the ACL of
/// [`admit_admins`] on a socket systemd made, before airlockd itself ever started.
pub fn admit_socket(config_path: &Path, socket: &Path) -> i32 {
    match reload::load(config_path) {
        Ok(set) => match admit_admins(&set, socket) {
            Ok(()) => 0,
            Err(e) => fail(&[e]),
        },
        Err(problems) => fail(&problems),
    }
}

/// Run airlockd with the config at `config_path`; returns the process exit code.
/// Call from `main` before any other thread exists: it takes systemd's listening socket.
pub fn main(config_path: &Path) -> i32 {
    trim::without_thread_caches();
    trim::bound_arenas();
    // LISTEN_FDS is read (and cleared) while the process is still single-threaded.
    let activated = match listener::from_systemd() {
        Ok(l) => l,
        Err(e) => return fail(&[format!("socket activation: {e}")]),
    };
    let set = match reload::load(config_path) {
        Ok(s) => s,
        Err(problems) => {
            let mut lines = problems;
            lines.push(
                "refusing to start: fix the files above (`airlockctl validate` checks roles and policies)"
                    .into(),
            );
            return fail(&lines);
        }
    };
    // Signals are caught from here on: a SIGTERM during startup drains instead of killing.
    let signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ]) {
        Ok(s) => s,
        Err(e) => return fail(&[format!("cannot install signal handlers: {e}")]),
    };
    let cfg = &set.config;
    if let Err(e) = instances::ensure_state_dir(&cfg.state_dir) {
        return fail(&[format!("state_dir: {e}")]);
    }
    let journal_dir = cfg.journal_dir();
    if let Err(e) = crate::journal::fallback::ensure_dir(&journal_dir) {
        return fail(&[format!("{}: cannot create: {e}", journal_dir.display())]);
    }
    let ledger_path = cfg.state_dir.join(ledger::FILE_NAME);
    let (mut ledger, unclosed) = match Ledger::open_with_unclosed(&ledger_path) {
        Ok(l) => l,
        Err(e) => return fail(&[e.to_string()]),
    };
    let jcfg = cfg.journal_config();
    let events = Events::open(&journal_dir, &jcfg);
    let cgroup_parent = cgroup::settle();
    if let Err(e) = crate::supervisor::alive::ensure_dir(&cfg.state_dir) {
        return fail(&[format!("state_dir: {e}")]);
    }
    match recovery::recover(
        &mut ledger,
        &unclosed,
        &cfg.state_dir,
        &journal_dir,
        &jcfg,
        cgroup_parent.as_deref(),
    ) {
        Ok(r) => {
            for run in &r.supervised {
                events.log(
                    EventKind::DaemonStarted,
                    &format!("crash recovery: run {run} is still supervised by a standalone launch and is left open; with airlockd owning the ledger that launch cannot close it, so airlockd's next start closes it as aborted, at the time the run was last alive"),
                    &[],
                );
            }
            for line in &r.not_killed {
                // Always on stderr too: the startup log must show it even if the journal
                // does not take it.
                eprintln!("airlockd: crash recovery: could not kill an orphaned run: {line}");
                events.log(
                    EventKind::RunAborted,
                    &format!("crash recovery: could not kill an orphaned run, processes of it may still be alive: {line}"),
                    &[],
                );
            }
            let killed = r.aborted - r.not_killed.len();
            if r.aborted > 0 {
                events.log(
                    EventKind::RunAborted,
                    &format!(
                        "crash recovery: {} run(s) left by a supervisor that died were closed as aborted; nothing of {killed} is left alive, {} could not be killed",
                        r.aborted,
                        r.not_killed.len()
                    ),
                    &[],
                );
            }
        }
        Err(e) => return fail(&[format!("crash recovery failed, refusing to start: {e}")]),
    }
    // Helpers started ahead of a record (warm jails) that died with the last airlockd:
    // their cgroups, which no ledger record names.
    let swept = crate::supervisor::ahead_marks::sweep(&cfg.state_dir);
    let (removed, failed): (Vec<_>, Vec<_>) = swept.into_iter().partition(|(_, e)| e.is_none());
    if !removed.is_empty() {
        let runs: Vec<String> = removed.into_iter().map(|(r, _)| r).collect();
        events.log(
            EventKind::DaemonStarted,
            &format!(
                "crash recovery: the cgroups of {} jail(s) built ahead of a run and killed with the last airlockd were removed: {}",
                runs.len(),
                runs.join(", ")
            ),
            &[],
        );
    }
    for (run, why) in failed {
        let line = format!(
            "crash recovery: the cgroups of {run}, a jail built ahead and killed with the last airlockd, could not all be removed: {}",
            why.unwrap_or_default()
        );
        eprintln!("airlockd: {line}");
        events.log(EventKind::DaemonStarted, &line, &[]);
    }
    // Leases a crash left active: every run not still supervised by a standalone launch
    // is over, so its leases are revoked now (completing a fire the crash interrupted).
    {
        let mut append = |e| ledger.append(e).map(|_| ()).map_err(|e| e.to_string());
        match crate::supervisor::lease_records::sweep_left(cfg, &mut append, "airlockd's start") {
            Ok(r) if !r.revoked.is_empty() || !r.pending.is_empty() => events.log(
                EventKind::DaemonStarted,
                &format!(
                    "crash recovery: {} lease(s) left active were revoked: {}{}",
                    r.revoked.len(),
                    r.revoked.join(", "),
                    if r.pending.is_empty() {
                        String::new()
                    } else {
                        format!("; pending at their source: {}", r.pending.join(", "))
                    }
                ),
                &[],
            ),
            Ok(_) => {}
            Err(e) => {
                return fail(&[format!(
                "crash recovery: leases left active could not be revoked, refusing to start: {e}"
            )])
            }
        }
    }
    let (std_listener, origin) = match activated {
        Some(l) => (l, "socket activation"),
        None => match listener::bind(&cfg.socket, set.socket_gid) {
            Ok(l) => (l, "bound"),
            Err(e) => return fail(&[format!("socket {}: {e}", cfg.socket.display())]),
        },
    };
    if let Err(e) = std_listener.set_nonblocking(true) {
        return fail(&[format!("socket: {e}")]);
    }
    if let Err(e) = admit_admins(&set, &cfg.socket) {
        // Not fatal: operators still connect; admins outside the operator group cannot.
        eprintln!("airlockd: {e}");
        events.log(EventKind::DaemonStarted, &e, &[]);
    }
    let socket_path = cfg.socket.clone();
    let images = match crate::supervisor::image_pool::ImagePool::open(&cfg.state_dir) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("airlockd: no pool of workspace images ({e}); each launch makes its own");
            None
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("airlockd")
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(&[format!("cannot start the runtime: {e}")]),
    };
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let traces = match &set.config.tracing {
        None => None,
        Some(t) => match crate::metrics::traces::Traces::start(
            &t.otlp,
            runtime.handle().clone(),
            metrics.trace_spans_dropped.clone(),
        ) {
            Ok(t) => Some(t),
            Err(e) => return fail(&[e]),
        },
    };
    // The fleet store before the daemon serves anything: a database it cannot use, a schema
    // from the future or a host_id another live host holds stop the start here.
    let (fires_tx, fires_rx) = mpsc::unbounded_channel();
    let fleet = match &set.config.store {
        None => None,
        Some(conf) => match open_fleet(&runtime, &set.config, conf, fires_tx) {
            Ok(f) => Some(Arc::new(f)),
            Err(e) => return fail(&[e, "refusing to start".into()]),
        },
    };
    if let Some(f) = &fleet {
        match fleet::reconcile(f, &ledger_path) {
            Ok(runs) => {
                for run in runs {
                    events.log(
                        EventKind::RunAborted,
                        &format!("fleet: run {run} was admitted by the fleet but never started here (airlockd stopped between the two); closed as aborted in the store"),
                        &[("AIRLOCK_SUBJECT_RUN", &run)],
                    );
                }
            }
            // Left for the next start; the rows stay `unsupervised` meanwhile.
            Err(e) => eprintln!("airlockd: fleet: admitted runs not reconciled: {e}"),
        }
    }
    let daemon = Arc::new(Daemon {
        config_path: config_path.to_path_buf(),
        set: RwLock::new(Arc::new(set)),
        reload_lock: Mutex::new(()),
        ledger_count: ledger.counter(),
        mirrored: std::sync::atomic::AtomicU64::new(0),
        ledger: Mutex::new(ledger),
        ledger_path,
        journal_dir,
        active: Mutex::new(BTreeMap::new()),
        changed: Notify::new(),
        draining: AtomicBool::new(false),
        launches: AtomicUsize::new(0),
        supervising: AtomicUsize::new(0),
        events,
        cgroup_parent,
        warm: warm::WarmPool::default(),
        images,
        homes: mount_hold::KeptHomes::default(),
        metrics,
        traces,
        fleet,
    });
    let code = runtime.block_on(main_loop(
        daemon.clone(),
        std_listener,
        signals,
        fires_rx,
        format!("{origin} {}", socket_path.display()),
    ));
    // Every run is closed by now: what its spans left queued goes out (bounded wait).
    if let Some(t) = &daemon.traces {
        t.flush();
    }
    // Connections still streaming to clients are cut.
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// Connect to the fleet store, migrate it and take this host's lease.
fn open_fleet(
    runtime: &tokio::runtime::Runtime,
    cfg: &crate::config::Config,
    conf: &crate::store::StoreConf,
    fires: crate::store::pg::Fires,
) -> Result<crate::store::Fleet, String> {
    let password = match &conf.password_credential {
        None => None,
        Some(n) => {
            let src = cfg
                .credentials
                .get(n)
                .ok_or_else(|| format!("store.password_credential: no credentials.{n}"))?;
            Some(crate::credentials::read(n, src)?)
        }
    };
    let pending = crate::store::pending::Pending::new(&cfg.state_dir);
    let key = crate::store::signing::HostKey::load_or_create(&cfg.state_dir)?;
    runtime.block_on(crate::store::Fleet::open(
        conf,
        password.as_ref(),
        fires,
        pending,
        key,
    ))
}

async fn main_loop(
    d: Arc<Daemon>,
    std_listener: std::os::unix::net::UnixListener,
    mut signals: signal_hook::iterator::Signals,
    mut fires: mpsc::UnboundedReceiver<String>,
    where_: String,
) -> i32 {
    let listener = match tokio::net::UnixListener::from_std(std_listener) {
        Ok(l) => l,
        Err(e) => return fail(&[format!("socket: {e}")]),
    };
    let (sig_tx, mut sig_rx) = mpsc::unbounded_channel();
    let handle = signals.handle();
    let sig_thread = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for s in signals.forever() {
                if sig_tx.send(s).is_err() {
                    break;
                }
            }
        });
    if let Err(e) = sig_thread {
        return fail(&[format!("cannot start the signal thread: {e}")]);
    }
    let watchdog = notify::watchdog_interval();
    let mut tick = tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
    let mut warm_tick = tokio::time::interval(warm::MAX_AGE / 4);
    // Revocations pending at their source (a GitHub DELETE that failed) are tried again.
    let mut pending_tick = tokio::time::interval(runs::PENDING_RETRY);
    // Connections being served at once, decided per peer (see control::slots).
    let slots = crate::control::slots::Slots::new(crate::control::slots::LIMITS);

    // Before READY=1: a metrics listener that cannot be had fails the start.
    let _metrics = match scrape::start(&d).await {
        Ok(task) => task.map(AbortOnDrop),
        Err(e) => return fail(&[e]),
    };
    if d.fleet.is_some() {
        tokio::spawn(fleet::mirror_ledger(d.clone()));
        tokio::spawn(fleet::beat_runs(d.clone()));
    }
    let d2 = d.clone();
    let _ = tokio::task::spawn_blocking(move || warm::WarmPool::refill(&d2)).await;
    d.refill_images();
    notify::ready(&d.status_line());
    d.events.log(
        EventKind::DaemonStarted,
        &format!(
            "airlockd {} ready (pid {}, socket {where_}, {} roles); {}",
            env!("CARGO_PKG_VERSION"),
            std::process::id(),
            d.set().catalog.len(),
            match &d.cgroup_parent {
                Some(p) => format!("run cgroups under {}", p.display()),
                // Said once here, not only in each run's log: a sysadmin should know.
                None => "no writable cgroup v2 for runs: each run is limited by cgroup v1 \
                         pids (or RLIMIT_NPROC) where available and ended with its pid \
                         namespace; run airlockd under systemd (Delegate=yes) for cgroup \
                         v2 limits"
                    .to_string(),
            }
        ),
        &[],
    );
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(server::accept(d.clone(), stream, slots.clone()));
                }
                // Out of descriptors or similar: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            },
            sig = sig_rx.recv() => match sig {
                Some(signal_hook::consts::SIGHUP) => {
                    let d2 = d.clone();
                    tokio::task::spawn_blocking(move || { let _ = server::reload_now(&d2); });
                }
                _ => break,
            },
            _ = tick.tick(), if watchdog.is_some() => notify::watchdog(),
            _ = warm_tick.tick() => {
                let d2 = d.clone();
                tokio::task::spawn_blocking(move || {
                    warm::WarmPool::expire(&d2);
                    d2.homes.sweep(mount_hold::LINGER);
                });
            }
            _ = pending_tick.tick() => {
                let d2 = d.clone();
                tokio::task::spawn_blocking(move || runs::retry_pending(&d2));
            }
            _ = d.changed.notified() => notify::status(&d.status_line()),
            // Fires on other hosts of the fleet (never without a store: no sender then).
            Some(name) = fires.recv() => {
                let d2 = d.clone();
                tokio::task::spawn_blocking(move || fleet::fired_elsewhere(&d2, &name));
            }
        }
    }
    handle.close();
    // New connections are refused from here on instead of waiting in the backlog.
    drop(listener);
    drain(&d, watchdog).await;
    0
}

/// Refuse new launches, stop every run (SIGTERM, grace, SIGKILL), wait for their records
/// to close.
async fn drain(d: &Arc<Daemon>, watchdog: Option<Duration>) {
    d.draining.store(true, Ordering::SeqCst);
    notify::stopping();
    let n = d.active_count();
    d.events.log(
        EventKind::DaemonStopping,
        &format!("airlockd stopping: {n} active run(s) will be stopped"),
        &[],
    );
    // Launches that passed their draining check before the flag was set end first: refused
    // (having removed what they made) or with their run in the active table, stopped below.
    // Bounded: a launch only waits on local files and the ledger.
    let mut tick = tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    while d.launches.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < until {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            _ = tick.tick(), if watchdog.is_some() => notify::watchdog(),
        }
    }
    let d2 = d.clone();
    let _ = tokio::task::spawn_blocking(move || {
        d2.warm.clear();
        if let Some(p) = &d2.images {
            p.clear();
        }
    })
    .await;
    runs::stop_all(d, "airlockd is shutting down");
    while d.active_count() > 0 {
        tokio::select! {
            _ = d.changed.notified() => notify::status(&d.status_line()),
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = tick.tick(), if watchdog.is_some() => notify::watchdog(),
        }
    }
    // Their records are closed; what is left of them is torn down after. Bounded: the
    // helpers remove their runs' cgroups and exit on their own.
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    while d.supervising.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < until {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            _ = tick.tick(), if watchdog.is_some() => notify::watchdog(),
        }
    }
    // The homes kept between runs are written back before airlockd says it stopped (the
    // watchdog kept fed meanwhile: there may be many).
    let d2 = d.clone();
    let mut clearing = tokio::task::spawn_blocking(move || d2.homes.clear());
    loop {
        tokio::select! {
            _ = &mut clearing => break,
            _ = tick.tick(), if watchdog.is_some() => notify::watchdog(),
        }
    }
    d.events.log(
        EventKind::DaemonStopping,
        "airlockd stopped: every run is closed",
        &[],
    );
}
