//! The run manager: launch checks, the ledger's opening and closing records, one supervisor
//! thread per run (its jail taken from the [`warm`](super::warm) pool when one is ready)
//! (over the shared launch path in [`crate::supervisor::process`]), the
//! active table behind `ps`, `stop` and fire, and the per-run journal.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::warm::{Taken, WarmPool, Warmth};
use super::Daemon;
use crate::control::protocol::{ErrorCode, Frame, Response, RunInfo};
use crate::credentials::leases::LeaseStore;
use crate::journal::{EventKind, RunFields, RunJournal, Stream};
use crate::policy::budget;
use crate::supervisor::alive::{self, Alive, Beating, Supervisor};
use crate::supervisor::instances;
use crate::supervisor::launch::{self, LaunchError, LaunchRequest, Prepared};
use crate::supervisor::lease_records;
use crate::supervisor::ledger::{self, LedgerEvent, Outcome, RunClosed, RunOpened};
use crate::supervisor::outcome::{outcome_str, with_lost, NOT_STARTED};
use crate::supervisor::process::{self, RunControl};
use crate::supervisor::run_end::Teardown;
use crate::supervisor::run_output::{JournaledRun, Tee};
use crate::supervisor::tty::{Session, TtyHub, TtyRun};

/// Output frames buffered for a `--wait` client. A client that reads slower than the run
/// writes loses frames beyond this (counted and journaled); the journal keeps every line.
pub const FRAME_BUFFER: usize = 256;

/// A run being supervised.
pub struct ActiveRun {
    pub info: RunInfo,
    pub control: Arc<RunControl>,
    /// The run's leases as its gateway checks them: a fire revokes them here at once.
    pub leases: Arc<crate::credentials::leases::LiveLeases>,
    /// Its tallies so far, for `ps` and `top`.
    pub live: Arc<crate::metrics::live::LiveCounts>,
    /// Its gateway's role decisions: a change decision that only narrows replaces them.
    pub policy: crate::gateway::live_policy::LivePolicy,
    /// The revision a narrowing change moved its decisions to, if one did.
    pub narrowed_to: Mutex<Option<u32>>,
    /// A `--tty` run's terminal, for `attach`.
    pub tty: Option<Arc<TtyHub>>,
}

/// What a launch hands the connection: the run id, and for `--wait` its frames.
pub struct Started {
    pub run: String,
    pub frames: Option<(mpsc::Receiver<Frame>, oneshot::Receiver<Frame>)>,
    /// A `--tty` run: the launcher attached as its writer.
    pub tty: Option<Session>,
}

fn err(code: ErrorCode, msg: impl Into<String>) -> Response {
    Response::err(code, msg)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The parameters of one launch request.
pub struct LaunchArgs {
    pub peer_uid: u32,
    /// The peer as the kernel reports it, for deciding on its `--workspace`.
    pub requester: crate::supervisor::workspace::Requester,
    pub role: String,
    pub instance: String,
    pub workspace: Option<String>,
    pub max_seconds: Option<u64>,
    pub command: Option<Vec<String>>,
    pub wait: bool,
    /// `--tty`: the launcher's window size (rows, cols).
    pub tty: Option<(u16, u16)>,
}

/// Check, record and start one run. Blocking (ledger fsync, NSS, mkdir): call from a
/// blocking task. Refusals are journaled as `launch_refused`.
pub fn launch(d: &Arc<Daemon>, a: LaunchArgs) -> Result<Started, Response> {
    let _deciding = d.launch_in_flight();
    let r = launch_inner(d, &a);
    // A warm jail taken by a launch that then failed ran nothing; have one for the next. (A
    // launch that started its run gets the shared one rebuilt when the run ends, so that
    // building it does not compete with this run's start.)
    if r.is_err() {
        WarmPool::refill(d);
    }
    if let Err(resp) = &r {
        if let Some(e) = &resp.error {
            d.events.log(
                EventKind::LaunchRefused,
                &format!("launch refused (uid {}): {}", a.peer_uid, e.message),
                &[],
            );
        }
    }
    r
}

/// Whether a run of `instance` may start now: not draining, not fired, a free run slot, and
/// a run left in the instance's weekly budget. The caller holds the ledger lock, which
/// `fire` also takes: checked under it, a fire either comes first (and refuses the launch
/// here) or finds the run in the active table (and stops it).
fn admit(
    d: &Daemon,
    cfg: &crate::config::Config,
    ledger: &ledger::Ledger,
    instance: &str,
    role: &crate::role::Role,
) -> Result<instances::Entry, Response> {
    if d.is_draining() {
        return Err(err(ErrorCode::Draining, "airlockd is shutting down"));
    }
    let inst =
        instances::lookup(cfg, instance).map_err(|e| err(ErrorCode::Refused, e.to_string()))?;
    if inst.fired {
        return Err(err(
            ErrorCode::Refused,
            instances::InstanceError::Fired(instance.to_string()).to_string(),
        ));
    }
    budget::check_concurrency(d.active_count(), cfg.max_concurrent_runs)
        .map_err(|m| err(ErrorCode::Busy, m))?;
    let used = ledger.opened_since(instance, budget::window_start(ledger::now_ms()));
    budget::check_weekly(instance, used, role.budget.runs_per_week)
        .map_err(|m| err(ErrorCode::Refused, m))?;
    Ok(inst)
}

fn launch_inner(d: &Arc<Daemon>, a: &LaunchArgs) -> Result<Started, Response> {
    let requested = std::time::Instant::now();
    if d.is_draining() {
        return Err(err(
            ErrorCode::Draining,
            "airlockd is shutting down and starts no new runs; launch again once it is back",
        ));
    }
    let set = d.set();
    let cfg = &set.config;
    // The instance's frozen revision of its role, never roles/ as it is now (seed 003).
    let (entry, pin) = super::decisions::entry_for_launch(d, &a.role, &a.instance)
        .map_err(|m| err(ErrorCode::Refused, m))?
        .ok_or_else(|| {
            err(
                ErrorCode::NotFound,
                "the requested role is not in the catalog (missing, or it failed validation); see `airlockctl validate`",
            )
        })?;
    let entry = &entry;
    let role = &entry.loaded.role;
    if !crate::sandbox::spec::valid_name(&a.instance) {
        return Err(err(
            ErrorCode::BadRequest,
            "instance names match [a-z][a-z0-9_-]{0,31}",
        ));
    }
    // An instance hired (or fired) on another host of the fleet is known here first.
    super::fleet::sync_instance(d, cfg, &a.instance)?;
    // Refused early, before anything is prepared for a launch that cannot run; checked again
    // below, under the same hold of the ledger lock as the opening record.
    admit(d, cfg, &lock(&d.ledger), &a.instance, role)?;
    // Decided as the peer: a directory it owns (root and admins: any), reached with its
    // own permissions, never through a link (see `workspace`).
    if let Some(ws) = &a.workspace {
        crate::supervisor::workspace::check_for(
            std::path::Path::new(ws),
            &a.requester,
            &cfg.state_dir,
        )
        .map_err(|m| err(ErrorCode::Refused, m))?;
    }
    let req = LaunchRequest {
        role: a.role.clone(),
        instance: a.instance.clone(),
        workspace: a.workspace.as_ref().map(Into::into),
        max_seconds: a.max_seconds,
        command: a.command.clone().unwrap_or_default(),
        tty: a.tty.is_some(),
    };

    // The jail helper was started already (a warm jail) or starts now, so its start
    // overlaps preparing and recording the run; it gets its spec only once the record
    // below is durable.
    // A `--tty` run's helper is its own: its stdio socket brings the pty's master back.
    let tty_sock = match a.tty {
        None => None,
        Some(_) => {
            Some(crate::supervisor::tty::socket_pair().map_err(|e| err(ErrorCode::Internal, e))?)
        }
    };
    let runner = match &tty_sock {
        Some((_, theirs)) => WarmPool::take_with_stdio(d, theirs),
        None => WarmPool::take(d, &entry.class),
    };
    // The jail's end lives in its helper alone, so the run's end closes the socket.
    let tty_sock = tty_sock.map(|(ours, _theirs)| ours);
    // Prepared without the ledger lock (instance registry, NSS, run directory): launches
    // and run closings do not wait for each other's preparation. The image it may have
    // taken from the pool is made again off this launch's path.
    let mut prepared = match launch::prepare_in(
        cfg,
        &req,
        launch::Resolved {
            role: &entry.loaded,
            policies: &set.policies,
            // A frozen revision is compiled once for its live runs; the set's cache holds
            // the templates.
            policy: match &pin {
                Some(p) => set.pinned_policy(entry, &p.sha256),
                None => set.role_policy(entry),
            },
        },
        runner.slot.clone(),
        d.images.as_ref(),
        Some(&d.homes),
    ) {
        Ok(p) => {
            d.refill_images();
            p
        }
        Err(e) => {
            runner.abandon();
            return Err(err(ErrorCode::Refused, e.to_string()));
        }
    };
    // A chief's run may ask for decisions through its gateway (its class holds `hire`).
    if entry
        .authority
        .iter()
        .any(|a| a == super::decisions::HIRE_AUTHORITY)
    {
        prepared.gateway.desk = Some(Arc::new(super::decisions::ChiefDesk {
            daemon: Arc::downgrade(d),
            instance: a.instance.clone(),
            role: entry.loaded.role.clone(),
            class: entry.class.clone(),
        }));
    }
    // A run of a role the host's `asks` names may put a refusal for want of a grant to a
    // person (its launcher or an admin) instead of failing at once.
    if cfg.asks.covers(&role.role, &entry.class) {
        prepared.gateway.asks = Some(Arc::new(super::asks::RunAsks {
            daemon: Arc::downgrade(d),
            run: prepared.spec.run_id.clone(),
            instance: a.instance.clone(),
            launched_by: a.peer_uid,
            wait: std::time::Duration::from_secs(cfg.asks.wait_seconds),
            grants: Default::default(),
        }));
    }
    // Nothing of a refused run stays behind: its directory, its helper, its cgroups.
    let refuse = |runner: Taken, r: Response| {
        let _ = std::fs::remove_dir_all(&prepared.run_dir);
        runner.abandon();
        r
    };
    let run = prepared.spec.run_id.clone();
    // The fleet's budget before the ledger lock: the wait on the store holds no lock (a
    // fire here, `status` and the run closings go on meanwhile). It refuses an instance the
    // fleet has fired; one fired here meanwhile is refused by the check under the lock
    // below, and the fleet's admission is then closed as aborted.
    if let Err(r) = super::fleet::admit(d, &a.instance, &run, role.budget.runs_per_week) {
        return Err(refuse(runner, r));
    }
    let refuse = |runner: Taken, r: Response| {
        super::fleet::abandon(d, &run);
        refuse(runner, r)
    };
    // The checks, the opening record and the active table change under one hold of the
    // ledger lock, so two launches cannot both take the last run of a budget or the last
    // slot.
    let mut ledger = lock(&d.ledger);
    if let Err(r) = admit(d, cfg, &ledger, &a.instance, role) {
        drop(ledger);
        return Err(refuse(runner, r));
    }
    let now = ledger::now_ms();
    let deadline_s = prepared.deadline.map(|d| d.as_secs()).unwrap_or(0);
    let opened = RunOpened {
        run: run.clone(),
        launched_by_uid: a.peer_uid,
        role: role.role.clone(),
        instance: a.instance.clone(),
        uid: prepared.spec.uid,
        level: role.level,
        budgets: budget::budgets_json(role, a.max_seconds, deadline_s),
        role_sha256: pin.as_ref().map(|p| p.sha256.clone()),
        rev: pin.as_ref().map(|p| p.rev),
        started_at: now,
        deadline_s,
        image: prepared.spec.image.as_ref().map(|i| i.name.clone()),
        image_digest: prepared.spec.image.as_ref().map(|i| i.digest.clone()),
    };
    // Made before the opening record, so a record whose file is missing was never this
    // build's; held and touched for as long as this process supervises the run.
    let held = match Alive::create(
        &cfg.state_dir,
        &run,
        Supervisor::Airlockd,
        prepared.spec.cgroup_parent.as_deref(),
    ) {
        Ok(a) => a,
        Err(e) => {
            drop(ledger);
            let r = err(ErrorCode::Internal, format!("the run was not started: {e}"));
            return Err(refuse(runner, r));
        }
    };
    // The leases' records and the opening record in one write and one fsync.
    let store = LeaseStore::new(&cfg.state_dir);
    let opened =
        lease_records::record_opening_pending(&store, &mut ledger, &prepared.leases, opened);
    let pending = match opened {
        Ok(p) => p,
        Err(e) => {
            prepared.gateway.leases.revoke_all();
            let mut append =
                |e: LedgerEvent| ledger.append(e).map(|_| ()).map_err(|e| e.to_string());
            let _ = lease_records::revoke_run(&store, &mut append, &run, "the run was not started");
            drop(ledger);
            held.remove();
            let r = err(ErrorCode::Internal, format!("the run was not started: {e}"));
            return Err(refuse(runner, r));
        }
    };
    let control = Arc::new(RunControl::new(
        prepared.deadline,
        Duration::from_secs(cfg.grace_seconds),
    ));
    let info = RunInfo {
        run: run.clone(),
        role: role.role.clone(),
        instance: a.instance.clone(),
        uid: prepared.spec.uid,
        launched_by_uid: a.peer_uid,
        image: prepared.spec.image.as_ref().map(|i| i.name.clone()),
        image_digest: prepared.spec.image.as_ref().map(|i| i.digest.clone()),
        state: "running".into(),
        started_at: now,
        ended_at: None,
        exit_code: None,
        signal: None,
        reason: None,
        deadline_s,
        role_sha256: pin.as_ref().map(|p| p.sha256.clone()),
        rev: pin.as_ref().map(|p| p.rev),
        calls: None,
        spend: None,
        github: None,
        egress: None,
        leases: Vec::new(),
        leases_unreadable: None,
        live: None,
    };
    let live = Arc::new(crate::metrics::live::LiveCounts::default());
    // The launcher holds the keyboard from the start.
    let hub = a.tty.map(|_| TtyHub::new());
    let session = match &hub {
        Some(h) => h.attach(a.peer_uid, true).ok(),
        None => None,
    };
    lock(&d.active).insert(
        run.clone(),
        Arc::new(ActiveRun {
            info: info.clone(),
            control: control.clone(),
            leases: prepared.gateway.leases.clone(),
            live: live.clone(),
            tty: hub.clone(),
            policy: prepared.gateway.policy.clone(),
            narrowed_to: Mutex::new(None),
        }),
    );
    drop(ledger);
    d.changed.notify_one();
    // The opening record is durable before the run starts or the launch is answered; the
    // sync is shared with the launches and closings that wrote meanwhile.
    if let Err(e) = pending.wait() {
        lock(&d.active).remove(&run);
        d.changed.notify_one();
        prepared.gateway.leases.revoke_all();
        held.remove();
        let r = err(ErrorCode::Internal, format!("the run was not started: {e}"));
        return Err(refuse(runner, r));
    }
    // Without a heartbeat the file still tells that the run is supervised; only the time
    // it was last alive is lost.
    let heartbeat = held.beat().ok();

    let (frames, client) = if a.wait || a.tty.is_some() {
        let (tx, rx) = mpsc::channel(FRAME_BUFFER);
        let (etx, erx) = oneshot::channel();
        (Some((tx, etx)), Some((rx, erx)))
    } else {
        (None, None)
    };
    let state_dir = cfg.state_dir.clone();
    let go = Go {
        requested,
        live,
        prepared,
        info: info.clone(),
        control,
        frames,
        heartbeat,
        tty: tty_sock.zip(hub.clone()).map(|(sock, hub)| TtyRun {
            sock,
            hub,
            size: a.tty,
        }),
        jail: runner.warmth,
    };
    if !runner.start(d, go) {
        // No runtime took the run (and its heartbeat went with the `Go` it was handed):
        // close what was opened.
        revoke_leases(d, &info.run, "the run was not started");
        let closed = close(
            d,
            &info,
            Outcome::Refused,
            None,
            None,
            "airlockd could not supervise the run on its runtime",
            ledger::Tally::default(),
        );
        if closed {
            alive::forget(&state_dir, &info.run);
        }
        return Err(err(ErrorCode::Internal, "airlockd could not start the run"));
    }
    Ok(Started {
        run,
        frames: client,
        tty: session,
    })
}

/// The copy of a run's output lines for a `--wait` client, when it keeps up.
struct FrameTee {
    frames: Option<mpsc::Sender<Frame>>,
    dropped: Arc<AtomicU64>,
}

impl Tee for FrameTee {
    fn line(&mut self, stream: Stream, line: &[u8]) {
        if let Some(tx) = &self.frames {
            let mut data = String::from_utf8_lossy(line).into_owned();
            data.push('\n');
            let frame = Frame::Output {
                stream: stream.as_str().to_string(),
                data,
            };
            match tx.try_send(frame) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
                // The client went away: stop building frames for it.
                Err(mpsc::error::TrySendError::Closed(_)) => self.frames = None,
            }
        }
    }

    fn finish(&mut self) {
        self.frames = None;
    }
}

type ClientFrames = (mpsc::Sender<Frame>, oneshot::Sender<Frame>);

/// What a run's supervision needs once its run is recorded.
pub struct Go {
    /// When the launch request came: the launch duration metric runs to the agent's exec.
    requested: std::time::Instant,
    live: Arc<crate::metrics::live::LiveCounts>,
    prepared: Prepared,
    info: RunInfo,
    control: Arc<RunControl>,
    frames: Option<ClientFrames>,
    /// The run's [`alive`] file, touched while the run is supervised.
    heartbeat: Option<Beating>,
    /// A `--tty` run: the jail's socket, the terminal's hub and the first window size.
    tty: Option<TtyRun>,
    /// Where its jail came from.
    jail: Warmth,
}

/// The supervision of one run, a task of airlockd's runtime, once the run's record is
/// durable: journal, jail, gateway, output, deadline, then the leases revoked and the
/// record closed. `helper` was started before that and has had no spec yet.
///
/// `go` comes boxed: this task lives as long as the run, and a `Go` taken by value was
/// stored in it twice over (as the argument and as the fields moved out of it), 4.6 kB of
/// every live run. Unboxed by a function of its own, so the box is freed at once rather
/// than at the end of this one.
pub(super) async fn supervise_run(
    d: Arc<Daemon>,
    go: Box<Go>,
    helper: Result<process::Spawned, LaunchError>,
) {
    fn unbox(go: Box<Go>) -> Go {
        *go
    }
    let _supervising = d.run_in_flight();
    let Go {
        requested,
        live,
        prepared,
        info,
        control,
        frames,
        heartbeat,
        tty,
        jail,
    } = unbox(go);
    // The files the jail writes (brief, agent configuration, CAs: kilobytes) go to the
    // helper with its spec and are needed nowhere else: encoded now, not held for the run.
    let mut prepared = prepared;
    let helper = helper.map(|mut sp| {
        if sp.encode_spec(&prepared.spec) {
            prepared.spec.files = Vec::new();
        }
        sp
    });
    let fields = RunFields {
        run: info.run.clone(),
        role: info.role.clone(),
        instance: info.instance.clone(),
    };
    let exit_tx;
    let mut teardown = None;
    let (closed, frame) = match RunJournal::open_with(fields, &d.journal_dir, d.journal_config()) {
        Err(e) => {
            exit_tx = frames.map(|(_, e)| e);
            let reason = format!("the run's journal could not be opened: {e}");
            let (d2, info2, r2) = (d.clone(), info.clone(), reason.clone());
            let closed = blocking(move || {
                if let Ok(sp) = helper {
                    sp.abandon();
                }
                revoke_leases(&d2, &info2.run, "the run was not started");
                close(
                    &d2,
                    &info2,
                    Outcome::Refused,
                    None,
                    None,
                    &r2,
                    ledger::Tally::default(),
                )
            })
            .await
            .unwrap_or(false);
            let frame = exited_frame(&info.run, NOT_STARTED, Outcome::Refused, &reason);
            (closed, frame)
        }
        Ok(j) => {
            let trace = d
                .traces
                .as_ref()
                .map(|t| t.run(&info.run, &info.role, &info.instance));
            let journal = JournaledRun::new(j).with_metrics(
                d.metrics.clone(),
                &info.role,
                requested,
                live,
                trace,
            );
            let (frame_tx, etx) = match frames {
                Some((f, e)) => (Some(f), Some(e)),
                None => (None, None),
            };
            exit_tx = etx;
            // A terminal's output goes to its hub, not to frames of lines.
            let frame_tx = if tty.is_some() { None } else { frame_tx };
            let (closed, frame, rest) = supervised(
                &d, &info, &prepared, &control, journal, helper, frame_tx, tty, jail,
            )
            .await;
            teardown = rest;
            (closed, frame)
        }
    };
    settle(heartbeat, closed).await;
    if let Some(exit) = exit_tx {
        let _ = exit.send(frame);
    }
    // Nothing of the run runs any more; its helper's exit and the removal of its cgroups
    // come after its end is recorded and answered. What could not be removed is told.
    if let Some(t) = teardown {
        if let Err(e) = t.finish().await {
            d.events.log(
                EventKind::JailReport,
                &format!(
                    "run {}: after its end was recorded, removing what was left of it failed: {e}",
                    info.run
                ),
                &[("AIRLOCK_SUBJECT_RUN", info.run.as_str())],
            );
        }
    }
    // The run's disks go on the blocking pool (unlinking a large image takes a while), and
    // the shared warm jail is built again once this run is over, so building it never
    // slows the run down.
    let d2 = d.clone();
    let _ = blocking(move || {
        drop(prepared);
        WarmPool::refill(&d2);
    })
    .await;
}

/// The run itself, once its journal is open: returns whether its record was closed, and
/// the last frame for a waiting client.
#[allow(clippy::too_many_arguments)]
async fn supervised(
    d: &Arc<Daemon>,
    info: &RunInfo,
    prepared: &Prepared,
    control: &Arc<RunControl>,
    journal: JournaledRun,
    helper: Result<process::Spawned, LaunchError>,
    frame_tx: Option<mpsc::Sender<Frame>>,
    tty: Option<TtyRun>,
    jail: Warmth,
) -> (bool, Frame, Option<Teardown>) {
    // Which jail helper serves the run, and whether it was built ahead (a warm jail).
    let helper_pid = helper
        .as_ref()
        .map(|h| h.pid().to_string())
        .unwrap_or_default();
    journal.event_with(
        EventKind::RunStarted,
        &format!(
            "run started: role {}, instance {} (uid {}), launched by uid {}, deadline {}, jail {} (helper pid {})",
            info.role,
            info.instance,
            info.uid,
            info.launched_by_uid,
            if info.deadline_s == 0 {
                "none".to_string()
            } else {
                format!("{} s", info.deadline_s)
            },
            jail.as_str(),
            if helper_pid.is_empty() { "none" } else { &helper_pid },
        ),
        &[("AIRLOCK_JAIL", jail.as_str()), ("AIRLOCK_HELPER_PID", &helper_pid)],
    );
    let dropped = Arc::new(AtomicU64::new(0));
    let tee = || {
        frame_tx.clone().map(|tx| {
            Box::new(FrameTee {
                frames: Some(tx),
                dropped: dropped.clone(),
            }) as Box<dyn Tee>
        })
    };
    let tees = [tee(), tee()];
    drop(frame_tx);
    let relay = tty.map(|t| {
        tokio::spawn(crate::supervisor::tty::relay(
            t.sock,
            t.hub,
            journal.tty_sink(),
            t.size,
        ))
    });
    let (end, teardown) = journal
        .supervise_until_end(prepared, helper, control, tees, info.deadline_s)
        .await;
    // The terminal's last output reaches the journal before the run's last records: the
    // pty reads end of file once the run's last process is gone.
    if let Some(r) = relay {
        match tokio::time::timeout(Duration::from_secs(2), r).await {
            Ok(Ok(Err(why))) => journal.event(EventKind::JailReport, &format!("terminal: {why}")),
            Ok(_) => {}
            Err(_) => journal.event(
                EventKind::JailReport,
                "terminal: its output did not end within 2 s of the run",
            ),
        }
    }
    let n = dropped.load(Ordering::Relaxed);
    // The leases, the journal's last records and the closing record on the blocking pool
    // (GitHub's DELETEs, fsync).
    let (d2, info2) = (d.clone(), info.clone());
    let (closed, frame) = blocking(move || {
        if n > 0 {
            journal.event(
                EventKind::OutputDropped,
                &format!("{n} output lines were not sent to the waiting client (it read too slowly); the journal has every line"),
            );
        }
        let why = format!("the run ended ({})", outcome_str(end.outcome));
        journal.revoked(&revoke_leases(&d2, &info2.run, &why), &why);
        journal.event(end.kind, &end.reason);
        journal.sync();
        let reason = with_lost(&end.reason, journal.lost());
        let closed = close(
            &d2,
            &info2,
            end.outcome,
            end.exit_code(),
            end.signal,
            &reason,
            end.tally,
        );
        (closed, exited_frame(&info2.run, end.code, end.outcome, &reason))
    })
    .await
    .unwrap_or_else(|| {
        (
            false,
            exited_frame(
                &info.run,
                NOT_STARTED,
                Outcome::Aborted,
                "airlockd could not close the run's record; its next start closes it",
            ),
        )
    });
    (closed, frame, teardown)
}

/// The closing record is durable: the run's alive file goes. Not closed: it stays, touched
/// now, for airlockd's next start to close the run with this time.
async fn settle(heartbeat: Option<Beating>, closed: bool) {
    if let Some(h) = heartbeat {
        if let Some(a) = h.stop().await {
            if closed {
                a.remove()
            } else {
                a.leave()
            }
        }
    }
}

/// Run `f` on the runtime's blocking pool; `None` if it panicked.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

fn exited_frame(run: &str, code: i32, outcome: Outcome, reason: &str) -> Frame {
    Frame::Exited {
        run: run.to_string(),
        exit_code: code,
        outcome: outcome_str(outcome).to_string(),
        reason: reason.to_string(),
    }
}

/// Revoke a run's leases durably (its tokens died with its gateway, or were revoked by a
/// fire, already). A failure is told and left for airlockd's next start, which revokes
/// every lease a closed run still holds.
pub fn revoke_leases(d: &Daemon, run: &str, reason: &str) -> lease_records::Revoked {
    let store = LeaseStore::new(&d.set().config.state_dir);
    // GitHub's DELETEs before the ledger lock: launches and closings do not wait on them.
    crate::credentials::github_app::Held::revoke_run(run);
    let mut ledger = lock(&d.ledger);
    let mut append = |e: LedgerEvent| ledger.append(e).map(|_| ()).map_err(|e| e.to_string());
    match lease_records::revoke_run(&store, &mut append, run, reason) {
        Ok(r) => r,
        Err(e) => {
            d.events.log(
                EventKind::RunAborted,
                &format!("run {run}: its leases could not be revoked ({e}); airlockd's next start revokes them"),
                &[],
            );
            lease_records::Revoked::default()
        }
    }
}

/// How often leases of ended runs still held (a revocation pending at its source, or one
/// the ledger could not take) are revoked again.
pub const PENDING_RETRY: Duration = Duration::from_secs(10);

/// Revoke again the leases of every ended run that still has one not revoked (a GitHub
/// token whose DELETE failed): a success is recorded, a failure stays pending. Runs still
/// running are left alone (checked under the ledger lock, which launches hold while they
/// record their leases and join the active table).
pub fn retry_pending(d: &Daemon) {
    let store = LeaseStore::new(&d.set().config.state_dir);
    let Ok(runs) = store.open_runs() else {
        return;
    };
    // The DELETEs first, without the ledger lock (GitHub may be slow or down).
    for run in &runs {
        if !lock(&d.active).contains_key(run) {
            crate::credentials::github_app::Held::revoke_run(run);
        }
    }
    let mut ledger = lock(&d.ledger);
    for run in runs {
        if lock(&d.active).contains_key(&run) {
            continue;
        }
        let mut append = |e: LedgerEvent| ledger.append(e).map(|_| ()).map_err(|e| e.to_string());
        let _ = lease_records::revoke_run(
            &store,
            &mut append,
            &run,
            "revocation retried at its source",
        );
    }
}

/// What a run's closing record counts: gateway calls, and model requests and spend.
/// Close a run's record and take it off the active table; whether the record is closed. A
/// failed append leaves the record open; the next start of airlockd closes it as aborted.
fn close(
    d: &Daemon,
    info: &RunInfo,
    outcome: Outcome,
    exit_code: Option<i32>,
    signal: Option<i32>,
    reason: &str,
    tally: ledger::Tally,
) -> bool {
    let closed = RunClosed::new(&info.run, outcome, exit_code, signal, reason, tally);
    // Written under the lock, made durable after it (one sync for the closings and
    // launches writing meanwhile).
    let written = lock(&d.ledger).append_all_pending(vec![LedgerEvent::RunClosed(closed)]);
    let appended = written.and_then(|(_, pending)| pending.wait());
    let ok = appended.is_ok();
    let seconds = ledger::now_ms().saturating_sub(info.started_at) as f64 / 1000.0;
    d.metrics
        .run_closed(&info.role, outcome_str(outcome), seconds);
    if let Err(e) = appended {
        d.events.log(
            EventKind::RunAborted,
            &format!(
                "run {}: its ledger record could not be closed: {e}",
                info.run
            ),
            &[],
        );
    }
    let idle = {
        let mut active = lock(&d.active);
        active.remove(&info.run);
        active.is_empty()
    };
    d.changed.notify_one();
    if idle {
        super::trim::when_idle();
    }
    ok
}

/// Who launched an active run (`None`: no such active run).
pub fn launched_by(d: &Daemon, run: &str) -> Option<u32> {
    lock(&d.active).get(run).map(|r| r.info.launched_by_uid)
}

/// Ask one active run to stop. `false` when no active run has this id.
pub fn stop(d: &Daemon, run: &str, reason: &str) -> bool {
    match lock(&d.active).get(run) {
        Some(r) => {
            r.control.request_stop(reason);
            true
        }
        None => false,
    }
}

/// Stop every token of every active run of `instance` now (a fire, before the stop).
pub fn revoke_live_instance(d: &Daemon, instance: &str) {
    for r in lock(&d.active)
        .values()
        .filter(|r| r.info.instance == instance)
    {
        r.leases.revoke_all();
    }
}

/// Stop every active run of `instance`; returns how many.
pub fn stop_instance(d: &Daemon, instance: &str, reason: &str) -> usize {
    let active = lock(&d.active);
    let mut n = 0;
    for r in active.values().filter(|r| r.info.instance == instance) {
        r.control.request_stop(reason);
        n += 1;
    }
    n
}

/// Stop every active run (shutdown).
pub fn stop_all(d: &Daemon, reason: &str) {
    for r in lock(&d.active).values() {
        r.control.request_stop(reason);
    }
}

/// Active runs, for `ps`.
pub fn active(d: &Daemon) -> Vec<RunInfo> {
    let runs: Vec<Arc<ActiveRun>> = lock(&d.active).values().cloned().collect();
    runs.iter()
        .map(|r| {
            let mut info = r.info.clone();
            let mut live = r.live.get();
            if let Some(parent) = &d.cgroup_parent {
                (live.cpu_usec, live.memory_bytes) =
                    crate::metrics::live::cgroup_usage(&parent.join(&info.run));
            }
            info.live = Some(live);
            info
        })
        .collect()
}

/// The newest `limit` runs in the ledger, in launch order, with their outcome once closed
/// (`runs`), and whether older ones exist. Runs open in the ledger but not in the active
/// table do not exist while this daemon runs (crash recovery closed them), so open means
/// running.
pub fn recent(d: &Daemon, limit: usize) -> Result<(Vec<RunInfo>, bool), String> {
    let (runs, more) = ledger::recent_runs(&d.ledger_path, limit).map_err(|e| e.to_string())?;
    Ok((runs.into_iter().map(run_info).collect(), more))
}

/// One run of the ledger (`show`).
pub fn one(d: &Daemon, run: &str) -> Result<Option<RunInfo>, String> {
    let found = ledger::find_run(&d.ledger_path, run).map_err(|e| e.to_string())?;
    let state_dir = d.set().config.state_dir.clone();
    Ok(found.map(|r| with_leases(run_info(r), &state_dir)))
}

/// A run as the ledger records it, as `runs` and `show` report it: open means running.
pub fn run_info((o, closed): ledger::RunRecords) -> RunInfo {
    let mut info = RunInfo {
        run: o.run,
        role: o.role,
        instance: o.instance,
        uid: o.uid,
        launched_by_uid: o.launched_by_uid,
        image: o.image,
        image_digest: o.image_digest,
        state: "running".into(),
        started_at: o.started_at,
        ended_at: None,
        exit_code: None,
        signal: None,
        reason: None,
        deadline_s: o.deadline_s,
        role_sha256: o.role_sha256,
        rev: o.rev,
        calls: None,
        spend: None,
        github: None,
        egress: None,
        leases: Vec::new(),
        leases_unreadable: None,
        live: None,
    };
    if let Some(c) = closed {
        info.state = outcome_str(c.outcome).to_string();
        info.ended_at = Some(c.ended_at);
        info.exit_code = c.exit_code;
        info.signal = c.signal;
        info.reason = Some(c.reason);
        info.calls = c.calls;
        info.spend = c.spend;
        info.github = c.github;
        info.egress = c.egress;
    }
    info
}

/// A run's leases, from the lease store, for `show`. Unreadable: said so, not shown as
/// none (the ledger's lease records still tell what was issued and revoked).
pub fn with_leases(mut info: RunInfo, state_dir: &std::path::Path) -> RunInfo {
    match LeaseStore::new(state_dir).load(&info.run) {
        Ok(leases) => info.leases = leases.unwrap_or_default(),
        Err(e) => info.leases_unreadable = Some(e.to_string()),
    }
    info
}

/// The leases not yet revoked, by instance (`instances`).
pub fn open_leases(
    state_dir: &std::path::Path,
) -> std::collections::BTreeMap<String, Vec<crate::credentials::leases::Lease>> {
    let store = LeaseStore::new(state_dir);
    let mut out: std::collections::BTreeMap<String, Vec<_>> = Default::default();
    for run in store.open_runs().unwrap_or_default() {
        for l in store.load(&run).ok().flatten().unwrap_or_default() {
            if l.state != crate::credentials::leases::LeaseState::Revoked {
                out.entry(l.instance.clone()).or_default().push(l);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(run: &str) -> RunInfo {
        serde_json::from_value(serde_json::json!({
            "run": run, "role": "code", "instance": "tess", "uid": 1, "launched_by_uid": 0,
            "state": "exited", "started_at": 1, "deadline_s": 0
        }))
        .expect("a run")
    }

    #[test]
    fn an_unreadable_lease_record_is_said_not_shown_as_none() {
        let state = tempfile::tempdir().expect("tempdir");
        let leases = state.path().join("leases");
        std::fs::create_dir_all(leases.join("done")).expect("mkdir");
        let run = "r-20261201-0000000a";
        // None recorded: none, and nothing to say.
        let none = with_leases(info(run), state.path());
        assert!(none.leases.is_empty() && none.leases_unreadable.is_none());
        // A record that is no lease record, and one that cannot be read at all.
        std::fs::write(leases.join(format!("{run}.json")), b"{not json").expect("write");
        let bad = with_leases(info(run), state.path());
        let why = bad.leases_unreadable.expect("said");
        assert!(why.contains("not a valid lease record"), "{why}");
        std::fs::remove_file(leases.join(format!("{run}.json"))).expect("rm");
        std::fs::create_dir(leases.join(format!("{run}.json"))).expect("mkdir");
        let why = with_leases(info(run), state.path())
            .leases_unreadable
            .expect("said");
        assert!(why.contains(&format!("{run}.json")), "{why}");
    }
}
