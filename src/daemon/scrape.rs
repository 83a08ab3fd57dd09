//! The metrics read at scrape time from the daemon's tables (runs, leases, the ledger,
//! each instance's weekly budget), and the `/metrics` listener's start.

use std::sync::{Arc, Weak};

use super::Daemon;
use crate::credentials::leases::{LeaseKind, LeaseState, LeaseStore};
use crate::metrics::{InstanceBudget, KindLabel};
use crate::policy::budget;
use crate::supervisor::{instances, ledger};

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Bring the scrape-time gauges up to date. Blocking (the lease store, the instance
/// registry): called on the blocking pool.
pub fn refresh(d: &Daemon) {
    let m = &d.metrics;
    let now = ledger::now_ms();
    let mut live = [0i64; 3];
    {
        let active = lock(&d.active);
        m.runs_active.set(active.len() as i64);
        for r in active.values() {
            for (i, k) in KINDS.iter().enumerate() {
                live[i] += r.leases.live(*k, now) as i64;
            }
        }
    }
    for (i, k) in KINDS.iter().enumerate() {
        m.leases_active
            .get_or_create(&KindLabel { kind: k.as_str() })
            .set(live[i]);
    }
    m.ledger_len(d.ledger_len());
    let set = d.set();
    let cfg = &set.config;
    let store = LeaseStore::new(&cfg.state_dir);
    let pending: usize = store
        .open_runs()
        .unwrap_or_default()
        .iter()
        .filter_map(|run| store.load(run).ok().flatten())
        .map(|ls| {
            ls.iter()
                .filter(|l| l.state == LeaseState::RevokePending)
                .count()
        })
        .sum();
    m.lease_revocations_pending.set(pending as i64);
    let window = budget::window_start(now);
    for inst in instances::list(cfg).unwrap_or_default() {
        let Some(entry) = set.catalog.resolve(&inst.role) else {
            continue;
        };
        let Some(per_week) = entry.loaded.role.budget.runs_per_week else {
            continue;
        };
        let used = lock(&d.ledger).opened_since(&inst.name, window);
        let left = if inst.fired {
            0
        } else {
            per_week.saturating_sub(used as u64)
        };
        m.budget_remaining
            .get_or_create(&InstanceBudget {
                instance: inst.name.clone(),
                budget: "runs_per_week",
            })
            .set(i64::try_from(left).unwrap_or(i64::MAX));
    }
}

const KINDS: [LeaseKind; 3] = [LeaseKind::Provider, LeaseKind::Connector, LeaseKind::Github];

/// Listen where `metrics:` says and serve scrapes on the current runtime; `Ok(None)` when
/// the config has no `metrics:`. The task holds the daemon weakly: it never keeps it alive.
pub async fn start(d: &Arc<Daemon>) -> Result<Option<tokio::task::JoinHandle<()>>, String> {
    let Some(conf) = d.set().config.metrics.clone() else {
        return Ok(None);
    };
    let listener = crate::metrics::serve::bind(&conf).await?;
    let weak: Weak<Daemon> = Arc::downgrade(d);
    let refresh: crate::metrics::serve::Refresh = Arc::new(move || {
        if let Some(d) = weak.upgrade() {
            refresh(&d);
        }
    });
    Ok(Some(tokio::spawn(crate::metrics::serve::serve(
        listener,
        d.metrics.clone(),
        refresh,
    ))))
}
