//! airlockd's use of the fleet store (`store:`): what a launch, a hire and a fire do in
//! the shared database besides this host's files. Called from blocking tasks.

use super::Daemon;
use crate::control::protocol::{ErrorCode, FleetStatus, Response};
use crate::store::pending::{Pending, PendingFire};
use crate::store::{MirrorWrite, StoreError};
use crate::supervisor::instances::{self, InstanceError};

fn refusal(e: StoreError) -> Response {
    match e {
        StoreError::Unavailable(..) => Response::err(ErrorCode::Busy, e.to_string()),
        StoreError::Refused(m) => Response::err(ErrorCode::Refused, m),
    }
}

/// Before a launch: the instance as the fleet records it, recorded here too (a hire on
/// another host, or a fire there). Refused while the store is unavailable.
pub fn sync_instance(d: &Daemon, cfg: &crate::config::Config, name: &str) -> Result<(), Response> {
    let Some(f) = &d.fleet else { return Ok(()) };
    let Some(i) = f.block(f.instance(name)).map_err(refusal)? else {
        return Ok(());
    };
    instances::adopt(cfg, &i.name, &i.role, i.uid, i.fired, i.hired_at_ms)
        .map_err(|e| Response::err(ErrorCode::Refused, e.to_string()))
}

/// For listings: every instance the fleet records, recorded here. Best effort (a listing
/// is not a decision); what could not be done is said in the returned text.
pub fn sync_all(d: &Daemon, cfg: &crate::config::Config) -> Option<String> {
    let f = d.fleet.as_ref()?;
    match f.block(f.instances()) {
        Ok(list) => {
            let bad: Vec<String> = list
                .iter()
                .filter_map(|i| {
                    instances::adopt(cfg, &i.name, &i.role, i.uid, i.fired, i.hired_at_ms)
                        .err()
                        .map(|e| e.to_string())
                })
                .collect();
            (!bad.is_empty()).then(|| bad.join("; "))
        }
        Err(e) => Some(e.to_string()),
    }
}

/// The fleet-wide admission of one run; nothing to do without a store.
pub fn admit(
    d: &Daemon,
    instance: &str,
    run: &str,
    runs_per_week: Option<u64>,
) -> Result<(), Response> {
    let Some(f) = &d.fleet else { return Ok(()) };
    f.block(f.admit(instance, run, runs_per_week))
        .map_err(refusal)
}

/// A run the fleet admitted that never started here (refused after its admission): its
/// lease is closed as `aborted` at once rather than left to expire as `unsupervised`. Best
/// effort: a store away now is caught by the reconciliation at airlockd's next start.
pub fn abandon(d: &Daemon, run: &str) {
    let Some(f) = &d.fleet else { return };
    if let Err(e) = f.block(f.abandon(run)) {
        eprintln!("airlockd: run {run}: its fleet admission is not closed yet: {e}");
    }
}

/// At start, before serving: this host's runs the fleet has as running but whose opening
/// record this host's ledger lacks were admitted and never started (airlockd died between
/// the two): closed as `aborted`, their ids returned. Runs with an opening record are
/// closed by their closing record (crash recovery writes one), once it is mirrored.
pub fn reconcile(
    f: &crate::store::Fleet,
    ledger_path: &std::path::Path,
) -> Result<Vec<String>, String> {
    use crate::supervisor::ledger::{self, LedgerEvent};
    let open = f.block(f.open_runs()).map_err(|e| e.to_string())?;
    if open.is_empty() {
        return Ok(Vec::new());
    }
    let opened: std::collections::BTreeSet<String> = ledger::records(ledger_path)
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter_map(|r| match r.event {
            LedgerEvent::RunOpened(o) => Some(o.run),
            _ => None,
        })
        .collect();
    let mut aborted = Vec::new();
    for run in open.into_iter().filter(|r| !opened.contains(r)) {
        f.block(f.abandon(&run)).map_err(|e| e.to_string())?;
        aborted.push(run);
    }
    Ok(aborted)
}

/// Hire through the fleet's registry when there is one, else this host's alone.
pub fn hire(
    d: &Daemon,
    cfg: &crate::config::Config,
    name: &str,
    role: &str,
    by_uid: u32,
    now_ms: u64,
) -> Result<instances::Instance, InstanceError> {
    let Some(f) = &d.fleet else {
        return instances::hire(cfg, name, role, now_ms);
    };
    let range = (cfg.uid_range.first, cfg.uid_range.last);
    let alloc = |usable: &dyn Fn(u32) -> bool| {
        f.block(f.hire(name, role, by_uid, now_ms, range, &|u| usable(u)))
            .map_err(|e| InstanceError::State(e.to_string()))
    };
    instances::hire_with(cfg, name, role, now_ms, Some(&alloc))
}

/// Where a fire made here stands in the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetFire {
    /// No fleet store: this host is all there is.
    Alone,
    /// The store has it; every host was told.
    Recorded,
    /// The store is away: queued in this host's state, sent once it is back.
    Pending(String),
    /// Neither in the store nor queued here (both failed): fire again.
    Lost(String),
}

impl FleetFire {
    /// The reply's `fleet` field.
    pub fn word(&self) -> &'static str {
        match self {
            FleetFire::Alone => "none",
            FleetFire::Recorded => "recorded",
            FleetFire::Pending(_) => "pending",
            FleetFire::Lost(_) => "lost",
        }
    }
}

/// Queue a fire for the fleet, durably, before the fire is answered (the caller holds the
/// ledger lock and has recorded the fire here). `None` without a store.
pub fn queue_fire(
    d: &Daemon,
    state_dir: &std::path::Path,
    f: &PendingFire,
) -> Option<Result<(), String>> {
    d.fleet.as_ref()?;
    Some(Pending::new(state_dir).add(f))
}

/// Send a fire to the fleet store (never under a lock: the wait is the store's) and say
/// where it stands; a queued one the store now has leaves the queue.
pub fn tell_fleet(
    d: &Daemon,
    state_dir: &std::path::Path,
    f: &PendingFire,
    queued: Option<Result<(), String>>,
) -> FleetFire {
    let Some(fleet) = &d.fleet else {
        return FleetFire::Alone;
    };
    match (fleet.block(fleet.fire(f)), queued) {
        (Ok(_), _) => {
            // Left queued, it is only sent once more (the store keeps the first).
            let _ = Pending::new(state_dir).remove(&f.instance);
            FleetFire::Recorded
        }
        (Err(e), Some(Ok(()))) => FleetFire::Pending(e.to_string()),
        (Err(e), Some(Err(q))) => {
            FleetFire::Lost(format!("{e}; and it could not be queued here: {q}"))
        }
        (Err(e), None) => FleetFire::Lost(e.to_string()),
    }
}

/// `status`: this host's writes the fleet store does not have yet. Read without a lock
/// or a store call, so it answers whatever the store is doing.
pub fn status(d: &Daemon, state_dir: &std::path::Path) -> Option<FleetStatus> {
    use std::sync::atomic::Ordering;
    let f = d.fleet.as_ref()?;
    Some(FleetStatus {
        host_id: f.host_id().to_string(),
        pending_fires: Pending::new(state_dir).names(),
        unmirrored_records: d
            .ledger_len()
            .saturating_sub(d.mirrored.load(Ordering::SeqCst)),
    })
}

/// A fire recorded by another host (its notification, or found on a heartbeat): recorded
/// here too, this host's runs of the instance stopped and their leases revoked, as a fire
/// here does. Idempotent: a name may come more than once (this host's own fires too).
pub fn fired_elsewhere(d: &Daemon, name: &str) {
    use crate::credentials::leases::LeaseStore;
    use crate::journal::EventKind;
    use crate::supervisor::{lease_records, ledger};
    if !crate::sandbox::spec::valid_name(name) {
        return;
    }
    let set = d.set();
    let cfg = &set.config;
    // Under the ledger lock, as a fire here: no launch slips between the record and the stop.
    let mut ledger = d.ledger.lock().unwrap_or_else(|e| e.into_inner());
    let recorded = instances::fire(cfg, name, ledger::now_ms()).is_ok();
    super::runs::revoke_live_instance(d, name);
    let why = format!("instance `{name}` was fired on another host of the fleet");
    let n = super::runs::stop_instance(d, name, &why);
    let store = LeaseStore::new(&cfg.state_dir);
    let mut append = |e| ledger.append(e).map(|_| ()).map_err(|e| e.to_string());
    let revoked = lease_records::revoke_instance(&store, &mut append, name, &why);
    drop(ledger);
    let revoked = match revoked {
        Ok(r) => r.revoked.len().to_string(),
        Err(e) => format!("not all ({e}; the rest at airlockd's next start)"),
    };
    if recorded || n > 0 {
        d.events.log(
            EventKind::InstanceFired,
            &format!("{why}; {n} active run(s) stopped here; {revoked} lease(s) revoked"),
            &[("AIRLOCK_SUBJECT_INSTANCE", name)],
        );
    }
}

/// How often the ledger's mirror in the fleet store catches up with the file.
pub const MIRROR_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// How often the writer asks the table what it holds of this host rather than trusting
/// its own position: rows deleted behind its back (a cut tail, a hole) are put back within
/// this long.
pub const MIRROR_AUDIT: std::time::Duration = std::time::Duration::from_secs(10);
/// Records per mirroring transaction.
const MIRROR_BATCH: usize = 500;

/// Where the mirror's writer resumes: the table's last row of this host, and the records
/// below it the table lacks (to put back). Asked at start, after every failed write (the
/// store was away) and every [`MIRROR_AUDIT`].
async fn resume_point(
    f: &crate::store::Fleet,
) -> Result<(u64, std::collections::BTreeSet<u64>), crate::store::StoreError> {
    let (rows, head) = f.mirror_state().await?;
    let gaps = if rows < head {
        f.mirror_gaps(head).await?.into_iter().collect()
    } else {
        Default::default()
    };
    Ok((head, gaps))
}

/// Mirror this host's ledger into the fleet store, for as long as airlockd runs: the file
/// stays the record (fsync'd before a run starts or is answered); the table follows it,
/// resuming from the table's own last row of this host and putting back rows it lacks.
pub async fn mirror_ledger(d: std::sync::Arc<Daemon>) {
    use crate::supervisor::ledger;
    use std::sync::atomic::Ordering;
    let Some(f) = d.fleet.clone() else { return };
    // What the table holds, as last known (`None`: ask it).
    let mut upto: Option<u64> = None;
    let mut audited = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(MIRROR_EVERY);
    loop {
        tick.tick().await;
        if audited.elapsed() >= MIRROR_AUDIT {
            upto = None;
        }
        let have = d.ledger_len();
        if upto.is_some_and(|u| u >= have) {
            continue;
        }
        let (from, refill) = match upto {
            Some(u) => (u, Default::default()),
            None => match resume_point(&f).await {
                Ok(p) => {
                    audited = tokio::time::Instant::now();
                    p
                }
                Err(_) => continue,
            },
        };
        upto = Some(from);
        d.mirrored.store(from.min(have), Ordering::SeqCst);
        if from >= have && refill.is_empty() {
            continue;
        }
        let path = d.ledger_path.clone();
        let rows = tokio::task::spawn_blocking(move || {
            let records = ledger::records(&path).map_err(|e| e.to_string())?;
            records
                .into_iter()
                .filter(|r| r.seq > from || refill.contains(&r.seq))
                .map(|r| {
                    // A closing record ends the run's lease in the store (an
                    // `unsupervised` one too: its host came back and closed it).
                    let closes = match &r.event {
                        ledger::LedgerEvent::RunClosed(c) => {
                            Some((c.run.clone(), i64::try_from(c.ended_at).unwrap_or(i64::MAX)))
                        }
                        _ => None,
                    };
                    Ok(MirrorWrite {
                        seq: r.seq,
                        hash: r.hash.clone(),
                        line: ledger::line_of(&r).map_err(|e| e.to_string())?,
                        closes,
                    })
                })
                .collect::<Result<Vec<_>, String>>()
        })
        .await;
        let rows = match rows {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                eprintln!("airlockd: the ledger's mirror cannot read the ledger: {e}");
                continue;
            }
            Err(_) => continue,
        };
        for chunk in rows.chunks(MIRROR_BATCH) {
            match f.mirror(chunk).await {
                Ok(()) => {
                    let last = chunk.iter().map(|r| r.seq).max().unwrap_or(0);
                    let u = upto.unwrap_or(0).max(last);
                    upto = Some(u);
                    d.mirrored.store(u, Ordering::SeqCst);
                }
                Err(_) => {
                    // Away: asked again (and caught up) once it answers.
                    upto = None;
                    break;
                }
            }
        }
    }
}

/// Renew this host's run leases every heartbeat, and mark runs of hosts that stopped
/// renewing theirs (crashed, cut off) `unsupervised`, saying so in this host's journal.
pub async fn beat_runs(d: std::sync::Arc<Daemon>) {
    use crate::journal::EventKind;
    let Some(f) = d.fleet.clone() else { return };
    let mut tick = tokio::time::interval(crate::store::pg::HEARTBEAT);
    let mut failing = false;
    loop {
        tick.tick().await;
        let active: Vec<String> = super::runs::active(&d).into_iter().map(|r| r.run).collect();
        let reclaimed = match f.beat_runs(&active).await {
            Ok(r) => {
                failing = false;
                r
            }
            Err(e) => {
                // Said once per outage, not every beat.
                if !failing {
                    eprintln!("airlockd: run leases not renewed: {e}");
                }
                failing = true;
                continue;
            }
        };
        for (run, host) in reclaimed {
            d.events.log(
                EventKind::RunAborted,
                &format!("fleet: run {run} of host {host} is unsupervised: its host stopped renewing its lease (crashed or cut off); its ledger record on that host says how it ended once it is back"),
                &[("AIRLOCK_SUBJECT_RUN", &run)],
            );
        }
    }
}
