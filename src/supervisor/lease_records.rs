//! A run's leases through their life, for airlockd and standalone launches alike: issued
//! once the run's opening record is durable, revoked when it ends or its instance is
//! fired, and swept at start-up for runs a crash left with live leases. Each step is a
//! ledger record; the lease store holds each lease's current state.
//!
//! Order, so that nothing is reported done that was not: an issue is written to the store
//! before the ledger (a crash in between leaves a lease the sweep will revoke); a
//! revocation goes to the ledger before the store (a crash in between leaves the lease
//! active in the store, and the sweep revokes it again: a second record, never a missing
//! one). The gateway stops honouring a lease's token before either is written.

use crate::credentials::leases::{self, Lease, LeaseState, LeaseStore};
use crate::supervisor::ledger::{self, LeaseIssued, LeaseRevoked, LedgerEvent};

/// Appends one ledger record.
pub type Append<'a> = dyn FnMut(LedgerEvent) -> Result<(), String> + 'a;

/// Record a run's freshly issued leases: the store, then the ledger.
pub fn record_issued(
    store: &LeaseStore,
    append: &mut Append<'_>,
    records: &[Lease],
) -> Result<(), String> {
    let Some(first) = records.first() else {
        return Ok(());
    };
    store
        .save(&first.run, records)
        .map_err(|e| format!("the run's leases could not be stored: {e}"))?;
    for l in records {
        append(LedgerEvent::LeaseIssued(LeaseIssued {
            lease: l.id.clone(),
            run: l.run.clone(),
            instance: l.instance.clone(),
            lease_kind: l.kind.as_str().to_string(),
            grants: l.grants.clone(),
            issued_at: l.issued_at,
            expires_at: l.expires_at,
        }))?;
    }
    Ok(())
}

/// Record a run's leases and its opening record: the store, then the ledger's records of
/// both in one write and one fsync (the leases' first: a crash in between leaves leases
/// of a run that never opened, which the next start's sweep revokes).
pub fn record_opening(
    store: &LeaseStore,
    ledger: &mut ledger::Ledger,
    leases: &[Lease],
    opened: ledger::RunOpened,
) -> Result<(), String> {
    record_opening_pending(store, ledger, leases, opened)?
        .wait()
        .map_err(|e| e.to_string())
}

/// [`record_opening`], the records written and not yet known durable: the caller waits
/// for them ([`ledger::Pending::wait`]) once it has released the ledger's lock.
pub fn record_opening_pending(
    store: &LeaseStore,
    ledger: &mut ledger::Ledger,
    leases: &[Lease],
    opened: ledger::RunOpened,
) -> Result<ledger::Pending, String> {
    let mut batch = Vec::with_capacity(leases.len() + 1);
    record_issued(
        store,
        &mut |e: LedgerEvent| {
            batch.push(e);
            Ok(())
        },
        leases,
    )?;
    batch.push(LedgerEvent::RunOpened(opened));
    ledger
        .append_all_pending(batch)
        .map(|(_, pending)| pending)
        .map_err(|e| e.to_string())
}

/// What a revocation did: lease ids revoked, and those whose revocation is pending.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Revoked {
    pub revoked: Vec<String>,
    pub pending: Vec<String>,
}

impl Revoked {
    fn add(&mut self, other: Revoked) {
        self.revoked.extend(other.revoked);
        self.pending.extend(other.pending);
    }
}

/// Revoke every lease of `run` not yet revoked: the ledger, then the store. A run with no
/// leases revokes nothing.
pub fn revoke_run(
    store: &LeaseStore,
    append: &mut Append<'_>,
    run: &str,
    reason: &str,
) -> Result<Revoked, String> {
    let Some(mut all) = store
        .load(run)
        .map_err(|e| format!("run {run}: its leases could not be read: {e}"))?
    else {
        return Ok(Revoked::default());
    };
    let now = ledger::now_ms();
    // A GitHub token is revoked at GitHub (while this process holds it), or is over once
    // GitHub's own expiry has passed; otherwise its lease stays pending.
    let mut upstream = |l: &Lease| {
        crate::credentials::github_app::Held::revoke(&l.id)
            || (!crate::credentials::github_app::Held::holds(&l.id)
                && l.upstream_expires_at.is_some_and(|t| now >= t))
    };
    let changed = leases::revoke(&mut all, now, reason, &mut upstream);
    let mut out = Revoked::default();
    for l in &changed {
        append(LedgerEvent::LeaseRevoked(LeaseRevoked {
            lease: l.id.clone(),
            run: l.run.clone(),
            instance: l.instance.clone(),
            revoked_at: l.revoked_at.unwrap_or_else(ledger::now_ms),
            state: l.state.as_str().to_string(),
            reason: reason.to_string(),
        }))?;
        match l.state {
            LeaseState::RevokePending => out.pending.push(l.id.clone()),
            _ => out.revoked.push(l.id.clone()),
        }
    }
    if !changed.is_empty() {
        store
            .save(run, &all)
            .map_err(|e| format!("run {run}: its revoked leases could not be stored: {e}"))?;
    }
    // Recorded: only now may the tokens' file go (see `Held::recorded`).
    for l in changed.iter().filter(|l| l.state == LeaseState::Revoked) {
        crate::credentials::github_app::Held::recorded(&l.id);
    }
    Ok(out)
}

/// Revoke the leases of every run with live leases that `is_live` says is not running
/// (at start-up: all of them, since no run outlives its supervisor's process), each with
/// the reason `reason` gives for the run's instance.
pub fn sweep(
    store: &LeaseStore,
    append: &mut Append<'_>,
    is_live: &dyn Fn(&str) -> bool,
    reason: &dyn Fn(&str) -> String,
) -> Result<Revoked, String> {
    let mut out = Revoked::default();
    for run in open_runs(store)?.iter().filter(|r| !is_live(r)) {
        let instance = instance_of(store, run)?;
        out.add(revoke_run(store, append, run, &reason(&instance))?);
    }
    Ok(out)
}

/// At a start that owns the ledger (airlockd's, or a standalone launch's): revoke the
/// leases of every run whose supervisor is gone, saying so, and completing the revocation
/// of a fire the crash interrupted. Runs still supervised (their [`alive`] file held) keep
/// theirs.
///
/// [`alive`]: crate::supervisor::alive
pub fn sweep_left(
    cfg: &crate::config::Config,
    append: &mut Append<'_>,
    at: &str,
) -> Result<Revoked, String> {
    use crate::supervisor::alive::{self, Liveness};
    let held = |run: &str| matches!(alive::probe(&cfg.state_dir, run), Ok(Liveness::Held { .. }));
    reload_tokens(cfg, &held);
    let reason = |i: &str| {
        if crate::supervisor::instances::lookup(cfg, i).is_ok_and(|c| c.fired) {
            format!("instance `{i}` was fired; revocation completed at {at}")
        } else {
            format!(
                "the run ended without its leases revoked (its supervisor died); revoked at {at}"
            )
        }
    };
    sweep(&LeaseStore::new(&cfg.state_dir), append, &held, &reason)
}

/// The GitHub tokens a crashed supervisor kept for revocation, taken back so the sweep
/// revokes them at GitHub (with this host's App client: the tokens are its App's).
fn reload_tokens(cfg: &crate::config::Config, supervised: &dyn Fn(&str) -> bool) {
    use crate::credentials::github_app::{self, AppClient, Held};
    let dir = github_app::held_dir(&cfg.state_dir);
    if !dir.exists() {
        return;
    }
    let client = cfg.github.as_ref().and_then(|g| {
        Some(AppClient {
            api: crate::urls::ProviderUrl::parse(&g.api_url).ok()?,
            tls: crate::gateway::provider::tls_config(None).ok()?,
        })
    });
    let Some(client) = client else {
        tracing::warn!(
            dir = %dir.display(),
            "GitHub tokens kept for revocation, and no usable github: in the config to revoke them with; they die at GitHub's expiry"
        );
        return;
    };
    for f in Held::reload(&dir, &client, ledger::now_ms(), supervised) {
        tracing::warn!(file = %f, "a kept GitHub token file could not be read; left for an operator");
    }
}

/// Revoke every lease of `instance` not yet revoked, whatever its run (a fire).
pub fn revoke_instance(
    store: &LeaseStore,
    append: &mut Append<'_>,
    instance: &str,
    reason: &str,
) -> Result<Revoked, String> {
    let mut out = Revoked::default();
    for run in open_runs(store)? {
        if instance_of(store, &run)? == instance {
            out.add(revoke_run(store, append, &run, reason)?);
        }
    }
    Ok(out)
}

fn open_runs(store: &LeaseStore) -> Result<Vec<String>, String> {
    store
        .open_runs()
        .map_err(|e| format!("the lease store could not be read: {e}"))
}

fn instance_of(store: &LeaseStore, run: &str) -> Result<String, String> {
    Ok(store
        .load(run)
        .map_err(|e| format!("run {run}: its leases could not be read: {e}"))?
        .and_then(|l| l.first().map(|l| l.instance.clone()))
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::leases::{issue, LeaseKind, Want};

    #[test]
    fn each_issue_and_revocation_is_one_record_and_a_sweep_finishes_what_a_crash_left() {
        let dir = tempfile::tempdir().unwrap();
        let store = LeaseStore::new(dir.path());
        let want = Want {
            kind: LeaseKind::Provider,
            name: "claude".into(),
            grants: "provider claude".into(),
        };
        let mut log = Vec::new();
        let mut append = |e: LedgerEvent| {
            log.push(e);
            Ok(())
        };
        let a = issue(
            "r-20261201-000000a1",
            "tess",
            std::slice::from_ref(&want),
            1,
            None,
        )
        .unwrap();
        let b = issue("r-20261201-000000b2", "tess", &[want], 1, None).unwrap();
        record_issued(&store, &mut append, &a.records).unwrap();
        record_issued(&store, &mut append, &b.records).unwrap();
        let r = revoke_run(&store, &mut append, "r-20261201-000000a1", "the run ended").unwrap();
        assert_eq!(
            r.revoked,
            vec!["run/r-20261201-000000a1/provider/1".to_string()]
        );
        // Again: nothing more to revoke, no second record.
        let again = revoke_run(&store, &mut append, "r-20261201-000000a1", "again").unwrap();
        assert_eq!(again, Revoked::default());
        // b was left active (a crash): the sweep revokes it, but not a live run.
        let why = |i: &str| format!("airlockd restarted ({i})");
        let none = sweep(&store, &mut append, &|_| true, &why).unwrap();
        assert_eq!(none, Revoked::default());
        let swept = sweep(&store, &mut append, &|_| false, &why).unwrap();
        assert_eq!(
            swept.revoked,
            vec!["run/r-20261201-000000b2/provider/1".to_string()]
        );
        let kinds: Vec<&str> = log
            .iter()
            .map(|e| match e {
                LedgerEvent::LeaseIssued(_) => "issued",
                LedgerEvent::LeaseRevoked(_) => "revoked",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["issued", "issued", "revoked", "revoked"]);
        assert!(store.open_runs().unwrap().is_empty());
    }

    #[test]
    fn lease_records_round_trip_through_a_real_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let store = LeaseStore::new(dir.path());
        let mut l = ledger::Ledger::open(&dir.path().join("ledger.jsonl")).unwrap();
        let mut append = |e| l.append(e).map(|_| ()).map_err(|e| e.to_string());
        let want = Want {
            kind: LeaseKind::Provider,
            name: "codex".into(),
            grants: "provider codex".into(),
        };
        let run = "r-20261201-000000d4";
        let i = issue(run, "tess", &[want], 5, Some(99)).unwrap();
        record_issued(&store, &mut append, &i.records).unwrap();
        revoke_run(&store, &mut append, run, "the run ended").unwrap();
        let all = ledger::records(&dir.path().join("ledger.jsonl")).unwrap();
        assert_eq!(all.len(), 2);
        assert!(
            matches!(&all[0].event, LedgerEvent::LeaseIssued(x) if x.lease_kind == "provider" && x.expires_at == Some(99))
        );
        assert!(matches!(&all[1].event, LedgerEvent::LeaseRevoked(x) if x.state == "revoked"));
    }

    #[test]
    fn a_failed_ledger_append_leaves_the_lease_active_for_the_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let store = LeaseStore::new(dir.path());
        let want = Want {
            kind: LeaseKind::Connector,
            name: "web".into(),
            grants: "connector web".into(),
        };
        let run = "r-20261201-000000c3";
        let a = issue(run, "tess", &[want], 1, None).unwrap();
        record_issued(&store, &mut |_| Ok(()), &a.records).unwrap();
        let e = revoke_run(&store, &mut |_| Err("disk full".to_string()), run, "ended");
        assert!(e.is_err());
        assert_eq!(store.open_runs().unwrap(), vec![run.to_string()]);
        let l = store.load(run).unwrap().unwrap();
        assert_eq!(l[0].state, LeaseState::Active, "never reported done");
    }
}
