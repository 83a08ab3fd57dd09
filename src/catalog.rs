//! The role catalog: layered lookup over role directories (`roles/`, then the operator's
//! `roles.local/`). A later layer overrides an earlier one for the same canonical class.
//!
//! Every subfolder that holds a `role.yaml` is loaded and must pass the schema and every rail
//! ([`crate::policy::rails::check_role`]); one that fails is reported and left out (fail
//! closed). A failing override also hides the layer below it: an operator who meant to
//! replace a role never silently gets the baseline instead. A folder named after a legacy
//! alias (`implementer`, `reviewer`, `operator-interaction`) is refused in every layer; a
//! request for an alias resolves to its canonical class.

use crate::diag::Problem;
use crate::policy::classes::{canonicalize, is_legacy_alias};
use crate::policy::{rails, Policies};
use crate::role::{self, LoadedRole};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One usable role.
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    pub loaded: LoadedRole,
    /// The canonical class (the folder name).
    pub class: String,
    /// Protected authority held by the class (from `policies/classes.yaml`).
    pub authority: Vec<String>,
    /// Index into the `role_dirs` the catalog was loaded from.
    pub layer: usize,
    /// The role directory of that layer (`roles/` or `roles.local/`).
    pub layer_dir: PathBuf,
}

/// The roles that passed, by canonical class.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    entries: BTreeMap<String, CatalogEntry>,
}

impl Catalog {
    /// Load every layer in order; later layers override earlier ones. A layer directory
    /// that does not exist is an empty layer; one that exists but cannot be read is a problem.
    pub fn load(role_dirs: &[PathBuf], policies: &Policies) -> (Catalog, Vec<Problem>) {
        let mut entries: BTreeMap<String, CatalogEntry> = BTreeMap::new();
        let mut problems = Vec::new();
        for (layer, dir) in role_dirs.iter().enumerate() {
            if !dir.exists() {
                continue;
            }
            let folders = match role_folders(dir) {
                Ok(f) => f,
                Err(p) => {
                    problems.push(p);
                    continue;
                }
            };
            // Reading and checking one folder is independent of every other: spread the
            // work over the cores (a reload of many roles), then merge in name order.
            let checked = parallel_map(&folders, |(name, folder)| {
                check_folder(name, folder, policies)
            });
            for ((name, _), result) in folders.into_iter().zip(checked) {
                // Whatever happens next, this layer now decides this class.
                entries.remove(&name);
                match result {
                    Ok(loaded) => {
                        let authority = policies.classes.authority_of(&name).to_vec();
                        entries.insert(
                            name.clone(),
                            CatalogEntry {
                                loaded,
                                class: name,
                                authority,
                                layer,
                                layer_dir: dir.clone(),
                            },
                        );
                    }
                    Err(mut p) => problems.append(&mut p),
                }
            }
        }
        (Catalog { entries }, problems)
    }

    /// Load just the role `requested` resolves to, by the same rules as [`Catalog::load`]:
    /// canonical name first, the last layer that has the folder decides, and a failing
    /// override hides the baseline. For a one-off launch, which needs one role, not all.
    /// `Ok(None)`: no layer has it.
    pub fn load_one(
        role_dirs: &[PathBuf],
        policies: &Policies,
        requested: &str,
    ) -> Result<Option<CatalogEntry>, Vec<Problem>> {
        let name = canonicalize(requested);
        if !crate::names::is_role_name(name) {
            return Ok(None);
        }
        let found = role_dirs.iter().enumerate().rev().find(|(_, dir)| {
            let folder = dir.join(name);
            folder.is_dir() && folder.join("role.yaml").exists()
        });
        let Some((layer, dir)) = found else {
            return Ok(None);
        };
        let loaded = check_folder(name, &dir.join(name), policies)?;
        Ok(Some(CatalogEntry {
            authority: policies.classes.authority_of(name).to_vec(),
            class: name.to_string(),
            loaded,
            layer,
            layer_dir: dir.clone(),
        }))
    }

    /// The role for a requested class or role name, after canonicalization.
    pub fn resolve(&self, requested: &str) -> Option<&CatalogEntry> {
        self.entries.get(canonicalize(requested))
    }

    /// Every usable role, by canonical class.
    pub fn entries(&self) -> impl Iterator<Item = &CatalogEntry> {
        self.entries.values()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// One role folder: not a legacy alias, schema-valid, and within every rail and class rule.
fn check_folder(
    name: &str,
    folder: &Path,
    policies: &Policies,
) -> Result<LoadedRole, Vec<Problem>> {
    if is_legacy_alias(name) {
        return Err(vec![Problem::new(
            &folder.join("role.yaml"),
            "",
            format!(
                "`{name}` is a legacy alias of `{}` and cannot be defined or redefined; move \
                 this role to {}/",
                canonicalize(name),
                canonicalize(name)
            ),
        )]);
    }
    let loaded = role::load_role_dir(folder)?;
    let refusals = rails::check_role(&loaded, policies);
    if refusals.is_empty() {
        Ok(loaded)
    } else {
        Err(refusals)
    }
}

/// `f` over `items` on every available core, results in the order of `items`.
fn parallel_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores < 2 || items.len() < 16 {
        return items.iter().map(&f).collect();
    }
    let chunk = items.len().div_ceil(cores);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(|| part.iter().map(&f).collect::<Vec<R>>()))
            .collect();
        handles
            .into_iter()
            // A worker fails only by panicking, as the same call would on this thread.
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// Subfolders of `dir` that hold a `role.yaml`, sorted by name. Hidden folders are skipped.
fn role_folders(dir: &Path) -> Result<Vec<(String, PathBuf)>, Problem> {
    let unreadable = |e: std::io::Error| {
        Problem::new(dir, "", format!("cannot read role directory: {}", e.kind()))
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !path.is_dir() || !path.join("role.yaml").exists() {
            continue;
        }
        out.push((name, path));
    }
    out.sort();
    Ok(out)
}

/// The policies and the catalog of roles that passed, with every problem found on the way.
pub struct Loaded {
    pub policies: Option<Policies>,
    pub catalog: Catalog,
    pub role_dirs: Vec<PathBuf>,
    pub problems: Vec<Problem>,
}

/// Load the policies in `policies_dir`, then the roles of `role_dirs` under them. Without
/// valid policies no role is valid: every rail and class rule comes from them (fail closed).
pub fn load_all(role_dirs: Vec<PathBuf>, policies_dir: &Path) -> Loaded {
    match Policies::load(policies_dir) {
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

pub fn load_named(role_dirs: &[PathBuf], policies_dir: &Path, name: &str) -> LoadedOne {
    match Policies::load(policies_dir) {
        Ok(policies) => {
            let (entry, problems) = match Catalog::load_one(role_dirs, &policies, name) {
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
