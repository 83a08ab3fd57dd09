//! Frozen role revisions shared through the fleet store (issue 45): an approval on one host
//! pins the instance for the fleet, and every host installs that revision (its files
//! fetched from the store and checked against the sha256 that names them) before it
//! launches the instance. Without a store every call here does nothing.

use std::path::Path;

use super::Daemon;
use crate::store::pins::{FleetPin, PinWrite};
use crate::supervisor::decisions::pins::{self, Pin};
use crate::supervisor::decisions::revisions;

fn to_fleet(p: &Pin) -> FleetPin {
    FleetPin {
        role: p.role.clone(),
        sha256: p.sha256.clone(),
        rev: p.rev,
        source: p.source.clone(),
    }
}

/// Before a launch: the fleet's pin of `instance`, installed here when it differs from
/// this host's. The caller holds the decisions lock.
pub fn sync_pin(d: &Daemon, state: &Path, instance: &str) -> Result<(), String> {
    let Some(f) = &d.fleet else { return Ok(()) };
    match f.block(f.pin(instance)).map_err(|e| e.to_string())? {
        Some(p) => install(d, state, instance, p).map(|_| ()),
        None => Ok(()),
    }
}

/// Make `fp` this host's pin of `instance`, fetching its files when this host lacks them.
/// Files that do not hash to their name are refused: a row edited in the store never runs.
fn install(d: &Daemon, state: &Path, instance: &str, fp: FleetPin) -> Result<Pin, String> {
    let pin = Pin {
        role: fp.role,
        sha256: fp.sha256,
        rev: fp.rev,
        source: fp.source,
    };
    let frozen = revisions::folder(state, &pin.sha256, &pin.role).join("role.yaml");
    if !frozen.is_file() {
        let Some(f) = &d.fleet else {
            return Err(format!(
                "instance `{instance}`: its revision is not on this host"
            ));
        };
        let files = f
            .block(f.revision(&pin.sha256, &pin.role))
            .map_err(|e| e.to_string())?;
        if files.is_empty() {
            return Err(format!(
                "instance `{instance}`: the fleet store pins it to revision {} of role {} but holds none of its files",
                pin.sha256, pin.role
            ));
        }
        if revisions::sha_of(&files) != pin.sha256 {
            return Err(format!(
                "instance `{instance}`: the fleet store's files of revision {} do not hash to that name; refused (keep the store's rows as evidence)",
                pin.sha256
            ));
        }
        revisions::store(state, &pin.role, &files)?;
    }
    pins::put(state, instance, &pin)?;
    Ok(pin)
}

/// After `pin` was made this host's pin of `instance` (an approval, or the first freeze of
/// an instance from before revisions): the revision and the pin are the fleet's. Returns
/// the pin the fleet holds (its `rev` counted fleet-wide), installed here.
pub fn publish(
    d: &Daemon,
    state: &Path,
    instance: &str,
    pin: &Pin,
    how: PinWrite,
) -> Result<Pin, String> {
    let Some(f) = &d.fleet else {
        return Ok(pin.clone());
    };
    let files = revisions::read_folder(&revisions::folder(state, &pin.sha256, &pin.role))?;
    f.block(f.put_revision(&pin.sha256, &pin.role, &files))
        .map_err(|e| e.to_string())?;
    let held = f
        .block(f.put_pin(instance, &to_fleet(pin), how))
        .map_err(|e| e.to_string())?;
    install(d, state, instance, held)
}
