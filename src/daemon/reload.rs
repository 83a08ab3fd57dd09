//! The set airlockd works from: config, policies and the role catalog, loaded together and
//! swapped whole. A new set with any problem (an invalid role, policy, config key or
//! unknown group) is refused whole and the old one stays in force.

use std::path::{Path, PathBuf};

use crate::catalog::Catalog;
use crate::catalog::CatalogEntry;
use crate::config::{self, Config, GroupRef};
use crate::control::auth::AccessGroups;
use crate::policy::{Policies, RolePolicy};
use std::sync::Arc;

pub struct LoadedSet {
    pub config: Config,
    pub policies: Policies,
    pub catalog: Catalog,
    /// Each role's decisions, compiled once for this set, by canonical class.
    compiled: std::collections::BTreeMap<String, Arc<RolePolicy>>,
    /// Frozen revisions' decisions, compiled once for all their live runs.
    pinned: super::shared_policy::Shared<crate::role::Role, RolePolicy>,
    pub groups: AccessGroups,
    pub socket_gid: Option<u32>,
    /// Unix milliseconds of this load.
    pub loaded_at: u64,
}

fn group(cfg: &Config, key: &str, g: &Option<GroupRef>) -> Result<Option<u32>, String> {
    match g {
        None => Ok(None),
        Some(g) => g
            .resolve()
            .map(Some)
            .map_err(|why| format!("{}: {key}: {why}", cfg.file.display())),
    }
}

/// The largest config file read, in bytes.
const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// Load everything from the config file at `path`. `Err` lists every problem, each naming
/// its file and key.
pub fn load(path: &Path) -> Result<LoadedSet, Vec<String>> {
    // Files anyone but root could have written are not taken, however valid: the config's
    // text is read from the file that was checked.
    let text = crate::trust::read_checked(path, MAX_CONFIG_BYTES).map_err(|e| vec![e])?;
    let cfg = config::parse(path, &text)
        .map_err(|ps| ps.iter().map(ToString::to_string).collect::<Vec<_>>())?;
    let untrusted =
        crate::trust::check_config_set(&cfg.file, cfg.roles.iter().chain([&cfg.policies]));
    if !untrusted.is_empty() {
        return Err(untrusted);
    }
    let loaded = crate::catalog::load_all(cfg.roles.clone(), &cfg.policies);
    let mut problems: Vec<String> = loaded.problems.iter().map(ToString::to_string).collect();
    let admin = group(&cfg, "admin_group", &cfg.admin_group);
    let operator = group(&cfg, "operator_group", &cfg.operator_group);
    let socket = group(&cfg, "socket_group", &cfg.socket_group);
    for r in [&admin, &operator, &socket] {
        if let Err(e) = r {
            problems.push(e.clone());
        }
    }
    problems.extend(crate::supervisor::instances::check_config(&cfg));
    problems.extend(crate::config::warm::unknown_roles(
        &cfg.file,
        &cfg.warm,
        &|class| loaded.catalog.resolve(class).is_some(),
    ));
    let policies = match loaded.policies {
        Some(p) if problems.is_empty() => p,
        Some(_) => return Err(problems),
        None => {
            problems.push(format!(
                "{}: the policies are invalid, so no role is valid",
                cfg.policies.display()
            ));
            return Err(problems);
        }
    };
    let compiled = loaded
        .catalog
        .entries()
        .map(|e| {
            let p = RolePolicy::compile(&e.loaded.role, &policies);
            (e.class.clone(), Arc::new(p))
        })
        .collect();
    Ok(LoadedSet {
        compiled,
        pinned: Default::default(),
        groups: AccessGroups {
            admin_gid: admin.ok().flatten(),
            operator_gid: operator.ok().flatten(),
            admin_name: cfg.admin_group.as_ref().map(GroupRef::to_string),
            operator_name: cfg.operator_group.as_ref().map(GroupRef::to_string),
        },
        socket_gid: socket.ok().flatten(),
        config: cfg,
        policies,
        catalog: loaded.catalog,
        loaded_at: crate::supervisor::ledger::now_ms(),
    })
}

/// What a running daemon cannot change without a restart: where its state, ledger and
/// socket live.
pub fn check_swap(old: &Config, new: &Config) -> Result<(), Vec<String>> {
    let mut problems = Vec::new();
    let mut fixed = |key: &str, a: &PathBuf, b: &PathBuf| {
        if a != b {
            problems.push(format!(
                "{}: {key}: cannot change while airlockd runs; restart airlockd to move it",
                new.file.display()
            ));
        }
    };
    fixed("state_dir", &old.state_dir, &new.state_dir);
    fixed("socket", &old.socket, &new.socket);
    // The fleet store is opened once, at start (its pool and host lease).
    if old.store != new.store {
        problems.push(format!(
            "{}: store: cannot change while airlockd runs; restart airlockd to use another store",
            new.file.display()
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

impl LoadedSet {
    /// The compiled decisions of a role of this set's catalog (compiled now for one that
    /// somehow is not among them).
    pub fn role_policy(&self, entry: &CatalogEntry) -> Arc<RolePolicy> {
        match self.compiled.get(&entry.class) {
            Some(p) => p.clone(),
            None => Arc::new(RolePolicy::compile(&entry.loaded.role, &self.policies)),
        }
    }

    /// The compiled decisions of `entry` loaded from the frozen revision `sha256`: shared
    /// with the live runs of the same revision (see [`super::shared_policy`]).
    pub fn pinned_policy(&self, entry: &CatalogEntry, sha256: &str) -> Arc<RolePolicy> {
        let key = format!("{}@{sha256}", entry.class);
        self.pinned.get(&key, &entry.loaded.role, || {
            RolePolicy::compile(&entry.loaded.role, &self.policies)
        })
    }
}
