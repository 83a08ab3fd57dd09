//! Where `validate`, `explain` and `check` read roles and policies from: the command line's
//! `--roles` and `--policies` when given, otherwise the configuration's.

use crate::config::Config;
use std::path::PathBuf;

#[derive(Debug, Clone, Default)]
pub struct SourceArgs {
    /// Role directories, later overrides earlier (`roles/` then `roles.local/`).
    pub roles: Vec<PathBuf>,
    pub policies: Option<PathBuf>,
}

impl SourceArgs {
    pub fn role_dirs(&self, config: &Config) -> Vec<PathBuf> {
        if self.roles.is_empty() {
            config.roles.clone()
        } else {
            self.roles.clone()
        }
    }

    pub fn policies_dir(&self, config: &Config) -> PathBuf {
        self.policies
            .clone()
            .unwrap_or_else(|| config.policies.clone())
    }
}

pub use crate::catalog::{Loaded, LoadedOne};

/// The policies and every role, from the command line's sources or the configuration's.
pub fn load(args: &SourceArgs, config: &Config) -> Loaded {
    crate::catalog::load_all(args.role_dirs(config), &args.policies_dir(config))
}

/// The policies and the one role `name` resolves to.
pub fn load_one(args: &SourceArgs, config: &Config, name: &str) -> LoadedOne {
    crate::catalog::load_named(&args.role_dirs(config), &args.policies_dir(config), name)
}
