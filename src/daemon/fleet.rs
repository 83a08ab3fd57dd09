//! airlockd's use of the fleet store (`store:`): what a launch, a hire and a fire do in
//! the shared database besides this host's files. Called from blocking tasks.

use super::Daemon;
use crate::control::protocol::{ErrorCode, Response};
use crate::store::StoreError;
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
    now_ms: u64,
) -> Result<(), Response> {
    let Some(f) = &d.fleet else { return Ok(()) };
    f.block(f.admit(instance, run, runs_per_week, now_ms))
        .map_err(refusal)
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

/// Record a fire in the fleet's registry (the local record is made first, by the caller).
/// `Err` says why the fleet does not know of it yet.
pub fn fire(d: &Daemon, name: &str, by_uid: u32, now_ms: u64) -> Result<(), String> {
    let Some(f) = &d.fleet else { return Ok(()) };
    f.block(f.fire(name, by_uid, now_ms))
        .map(|_| ())
        .map_err(|e| e.to_string())
}
