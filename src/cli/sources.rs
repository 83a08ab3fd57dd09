//! Where `validate`, `explain` and `check` read roles and policies from: the command line's
//! `--roles` and `--policies` when given, otherwise the configuration's.

use crate::catalog::{Catalog, CatalogEntry};
use crate::config::Config;
use crate::diag::Problem;
use crate::policy::Policies;
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

/// The policies and the catalog of roles that passed, with every problem found on the way.
pub struct Loaded {
    pub policies: Option<Policies>,
    pub catalog: Catalog,
    pub role_dirs: Vec<PathBuf>,
    pub problems: Vec<Problem>,
}

/// Load policies, then roles under them. Without valid policies no role is valid: every
/// rail and class rule comes from them (fail closed).
pub fn load(args: &SourceArgs, config: &Config) -> Loaded {
    let role_dirs = args.role_dirs(config);
    match Policies::load(&args.policies_dir(config)) {
        Ok(policies) => {
            let (catalog, problems) = Catalog::load(&role_dirs, &policies);
            Loaded {
                policies: Some(policies),
                catalog,
                role_dirs,
                problems,
            }
        }
        Err(problems) => Loaded {
            policies: None,
            catalog: Catalog::default(),
            role_dirs,
            problems,
        },
    }
}

/// The policies and the one role `name` resolves to, by the catalog's rules
/// ([`Catalog::load_one`]): `explain` and `check` answer about one role and need not
/// validate every other. `problems` are the policies' or that role's.
pub struct LoadedOne {
    pub policies: Option<Policies>,
    pub entry: Option<CatalogEntry>,
    pub problems: Vec<Problem>,
}

pub fn load_one(args: &SourceArgs, config: &Config, name: &str) -> LoadedOne {
    match Policies::load(&args.policies_dir(config)) {
        Ok(policies) => {
            let (entry, problems) =
                match Catalog::load_one(&args.role_dirs(config), &policies, name) {
                    Ok(entry) => (entry, Vec::new()),
                    Err(problems) => (None, problems),
                };
            LoadedOne {
                policies: Some(policies),
                entry,
                problems,
            }
        }
        Err(problems) => LoadedOne {
            policies: None,
            entry: None,
            problems,
        },
    }
}
