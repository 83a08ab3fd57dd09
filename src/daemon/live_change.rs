//! A change decision at an instance's live runs (issue 45): one that only narrows what the
//! gateway decides per call ([`crate::policy::narrowing::narrows_live`]) replaces the
//! decisions of every live run of the instance, taking effect at its next gateway call;
//! anything else waits for the instance's next launch, and `show` says the run is on an
//! older revision.

use std::path::Path;

use serde_json::{json, Value};

use super::Daemon;
use crate::catalog::{Catalog, CatalogEntry};
use crate::journal::EventKind;
use crate::supervisor::decisions::{pins, revisions};

/// After `instance` was moved from revision `old` to `new` (revision `rev`): the live runs
/// whose decisions were narrowed, none when the change does not only narrow.
pub fn apply(
    d: &Daemon,
    state: &Path,
    instance: &str,
    old: Option<&pins::Pin>,
    new: &CatalogEntry,
    rev: u32,
) -> Vec<String> {
    let set = d.set();
    let Some(old) = old else { return Vec::new() };
    let layer = revisions::root(state).join(&old.sha256);
    let Ok(Some(before)) =
        Catalog::load_one(std::slice::from_ref(&layer), &set.policies, &old.role)
    else {
        return Vec::new();
    };
    // The brief and goals reach a run only at its start: a change of them is not live.
    let others = |dir: &Path| {
        revisions::read_folder(dir)
            .map(|f| {
                f.into_iter()
                    .filter(|(p, _)| p != "role.yaml")
                    .collect::<Vec<_>>()
            })
            .ok()
    };
    if others(&before.loaded.dir).is_none() || others(&before.loaded.dir) != others(&new.loaded.dir)
    {
        return Vec::new();
    }
    let cfg = &set.config;
    let granted = |e: &CatalogEntry| -> Vec<String> {
        crate::policy::egress::destinations::granted(
            &cfg.egress.lists,
            &e.loaded.role.role,
            &e.class,
            &cfg.egress.ports,
        )
        .iter()
        .map(|g| g.name.clone())
        .collect()
    };
    if !crate::policy::narrowing::narrows_live(
        &before.loaded.role,
        &new.loaded.role,
        (&granted(new), &granted(&before)),
    ) {
        return Vec::new();
    }
    let policy = std::sync::Arc::new(crate::policy::RolePolicy::compile(
        &new.loaded.role,
        &set.policies,
    ));
    let active: Vec<_> = d
        .active
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .filter(|r| r.info.instance == instance && r.info.role_sha256.is_some())
        .cloned()
        .collect();
    let mut reached = Vec::new();
    for r in active {
        r.policy.narrow(policy.clone());
        *r.narrowed_to.lock().unwrap_or_else(|e| e.into_inner()) = Some(rev);
        d.events.log(
            EventKind::InstanceHired,
            &format!(
                "run {}: narrowed to revision {rev} of its role by a change decision; its next gateway call is decided by it",
                r.info.run
            ),
            &[
                ("AIRLOCK_SUBJECT_INSTANCE", instance),
                ("AIRLOCK_SUBJECT_RUN", &r.info.run),
            ],
        );
        reached.push(r.info.run.clone());
    }
    reached
}

/// `show RUN`: the run, and where its instance is now when that is another revision than
/// the one the run started on (`instance_rev`), and the revision a narrowing moved a live
/// run to (`narrowed_to`).
pub fn show(d: &Daemon, info: crate::control::protocol::RunInfo) -> Value {
    let state = d.set().config.state_dir.clone();
    let now = pins::get(&state, &info.instance)
        .ok()
        .flatten()
        .map(|p| p.rev)
        .filter(|r| info.rev.is_some_and(|mine| mine != *r));
    let narrowed = d
        .active
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&info.run)
        .and_then(|r| *r.narrowed_to.lock().unwrap_or_else(|e| e.into_inner()));
    let mut v = json!({ "run": info });
    if let Some(m) = v.as_object_mut() {
        if let Some(r) = now {
            m.insert("instance_rev".into(), r.into());
        }
        if let Some(r) = narrowed {
            m.insert("narrowed_to".into(), r.into());
        }
    }
    v
}
