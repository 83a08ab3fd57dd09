//! The role a launch without airlockd (`launch --standalone`) runs: the instance's frozen
//! revision when it has one, exactly as airlockd would run it (seed 003: never `roles/` as
//! it is now). An instance with no revision yet runs its template and is frozen at its next
//! launch through airlockd, which alone pins (it holds the decisions lock).

use std::path::Path;

use super::{pins, revisions};
use crate::catalog::{Catalog, CatalogEntry};
use crate::policy::Policies;

/// `Ok(None)`: the instance has no frozen revision. Refused: a launch naming another role
/// than the one the instance is pinned to, or a revision missing or no longer valid.
pub fn pinned(
    state: &Path,
    policies: &Policies,
    instance: &str,
    requested: &str,
) -> Result<Option<(CatalogEntry, pins::Pin)>, String> {
    let Some(pin) = pins::get(state, instance)? else {
        return Ok(None);
    };
    if pin.role != crate::policy::classes::canonicalize(requested) {
        return Err(format!(
            "instance `{instance}` is hired for role {}; launch it as that role",
            pin.role
        ));
    }
    let layer = revisions::root(state).join(&pin.sha256);
    match Catalog::load_one(std::slice::from_ref(&layer), policies, &pin.role) {
        Ok(Some(e)) => Ok(Some((e, pin))),
        Ok(None) => Err(format!(
            "instance `{instance}`: its frozen revision {} is missing from {}",
            pin.sha256,
            layer.display()
        )),
        Err(p) => Err(format!(
            "instance `{instance}`: its frozen revision no longer passes this host's rules: {}",
            p.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )),
    }
}
