//! The host's policies, loaded from the shipped `policies/` directory: role classes and their
//! protected authority (`classes.yaml`), rails (`rails.yaml`), autonomy levels (`levels.yaml`)
//! and per-repository autonomy (`autonomy/<owner>/<repo>.yaml`).
//!
//! Every file is validated strictly: an unknown key refuses, and every problem names the file
//! and key path, never a value. Nothing here ever reads `roles.local/`: an operator's role
//! layer cannot loosen a rail.

use super::autonomy::RepoAutonomy;
use super::bash::ArgGuards;
use super::classes::ClassTable;
use super::levels::{LevelDef, LevelTable};
use super::rails::Rails;
use crate::diag::{self, Problem};
use crate::role::Level;
use crate::secret_shapes::is_plain_key;
use serde_yaml::{Mapping, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Largest policy file read, in bytes. Policy files are short; a huge one is a mistake.
pub const MAX_POLICY_FILE: u64 = 1 << 20;

/// Everything the host decides about roles, independent of any one role.
#[derive(Debug, Clone)]
pub struct Policies {
    pub dir: PathBuf,
    pub classes: ClassTable,
    pub rails: Rails,
    pub levels: LevelTable,
    /// `owner/repo` -> that repository's autonomy policy.
    pub autonomy: BTreeMap<String, RepoAutonomy>,
    /// Bash argument guards: the built-in ones plus `bash-guards.yaml`, which only adds.
    pub bash_guards: ArgGuards,
    /// Model prices (`prices.yaml`), for spend budgets. Without the file the table is
    /// empty, and every run that uses a model is refused before it starts.
    pub prices: super::prices::PriceTable,
    /// The rails compiled for the policy engine, once, when first asked for.
    compiled_rails: std::sync::OnceLock<std::sync::Arc<super::engine::CompiledRails>>,
}

impl Policies {
    /// Load and validate every policy file under `dir`. All problems are reported at once.
    pub fn load(dir: &Path) -> Result<Policies, Vec<Problem>> {
        let mut problems = Vec::new();
        let classes = read_yaml(&dir.join("classes.yaml"))
            .and_then(|(file, doc)| ClassTable::parse(&file, &doc));
        let rails =
            read_yaml(&dir.join("rails.yaml")).and_then(|(file, doc)| Rails::parse(&file, &doc));
        let levels = read_yaml(&dir.join("levels.yaml"))
            .and_then(|(file, doc)| LevelTable::parse(&file, &doc));
        let autonomy = load_autonomy_dir(&dir.join("autonomy"));
        let guards = load_guards(&dir.join("bash-guards.yaml"));
        let prices = load_prices(&dir.join("prices.yaml"));
        let classes = collect(classes, &mut problems);
        let rails = collect(rails, &mut problems);
        let levels = collect(levels, &mut problems);
        let autonomy = collect(autonomy, &mut problems);
        let bash_guards = collect(guards, &mut problems);
        let prices = collect(prices, &mut problems);
        match (classes, rails, levels, autonomy, bash_guards, prices) {
            (
                Some(classes),
                Some(rails),
                Some(levels),
                Some(autonomy),
                Some(bash_guards),
                Some(prices),
            ) if problems.is_empty() => Ok(Policies {
                dir: dir.to_path_buf(),
                classes,
                rails,
                levels,
                autonomy,
                bash_guards,
                prices,
                compiled_rails: std::sync::OnceLock::new(),
            }),
            _ => Err(problems),
        }
    }

    /// The rails compiled for the policy engine: every role's policy shares them.
    pub fn compiled_rails(&self) -> std::sync::Arc<super::engine::CompiledRails> {
        self.compiled_rails
            .get_or_init(|| std::sync::Arc::new(super::engine::CompiledRails::compile(&self.rails)))
            .clone()
    }

    /// The autonomy policy of `owner/repo`, if the host has one.
    pub fn autonomy_for(&self, repo: &str) -> Option<&RepoAutonomy> {
        self.autonomy.get(repo)
    }

    /// What a level permits (for `explain` and `check`).
    pub fn permits(&self, level: Level) -> &LevelDef {
        self.levels.permits(level)
    }
}

fn collect<T>(r: Result<T, Vec<Problem>>, problems: &mut Vec<Problem>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(mut p) => {
            problems.append(&mut p);
            None
        }
    }
}

/// The operator's bash guards extend the built-in ones. The file is optional: without it the
/// built-in guards apply alone.
fn load_guards(file: &Path) -> Result<ArgGuards, Vec<Problem>> {
    match std::fs::symlink_metadata(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ArgGuards::builtin()),
        _ => ArgGuards::from_yaml(file, &read_text(file)?),
    }
}

/// The price table is optional too: a host whose runs use no model needs none.
fn load_prices(file: &Path) -> Result<super::prices::PriceTable, Vec<Problem>> {
    match std::fs::symlink_metadata(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Default::default()),
        _ => read_yaml(file).and_then(|(f, doc)| super::prices::PriceTable::parse(&f, &doc)),
    }
}

/// A policy file's text: a regular file of at most [`MAX_POLICY_FILE`] bytes, read from one
/// open (so it cannot be swapped or grow between the check and the read). Errors never
/// quote the file.
fn read_text(file: &Path) -> Result<String, Vec<Problem>> {
    crate::role::files::read_bounded(file, MAX_POLICY_FILE)
        .map_err(|why| vec![Problem::new(file, "", why)])
}

/// Read a policy file and parse it as one YAML document. Errors never quote the file.
pub fn read_yaml(file: &Path) -> Result<(PathBuf, Value), Vec<Problem>> {
    let doc = parse_text(file, &read_text(file)?)?;
    Ok((file.to_path_buf(), doc))
}

pub use crate::diag::parse_yaml as parse_text;

/// `autonomy/<owner>/<repo>.yaml`, nothing else. A missing directory means no repository
/// has a policy of its own (every repo then caps at L1, see `autonomy::effective_level`).
fn load_autonomy_dir(dir: &Path) -> Result<BTreeMap<String, RepoAutonomy>, Vec<Problem>> {
    let mut out = BTreeMap::new();
    let mut problems = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    let owners = match sorted_entries(dir) {
        Ok(o) => o,
        Err(p) => return Err(vec![p]),
    };
    for owner_path in owners {
        let owner = file_name(&owner_path);
        if !is_owner_name(&owner) || !owner_path.is_dir() {
            problems.push(Problem::new(
                &owner_path,
                "",
                "only folders named after a GitHub owner ([A-Za-z0-9-]+) belong in autonomy/",
            ));
            continue;
        }
        let repos = match sorted_entries(&owner_path) {
            Ok(r) => r,
            Err(p) => {
                problems.push(p);
                continue;
            }
        };
        for repo_path in repos {
            let name = file_name(&repo_path);
            let repo = match name.strip_suffix(".yaml") {
                Some(r) if is_repo_name(r) && repo_path.is_file() => r.to_string(),
                _ => {
                    problems.push(Problem::new(
                        &repo_path,
                        "",
                        "only <repo>.yaml files ([a-z0-9.-]+) belong in autonomy/<owner>/",
                    ));
                    continue;
                }
            };
            match read_yaml(&repo_path).and_then(|(f, doc)| RepoAutonomy::from_value(&f, &doc)) {
                Ok(a) => {
                    out.insert(format!("{owner}/{repo}"), a);
                }
                Err(mut p) => problems.append(&mut p),
            }
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, Problem> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| Problem::new(dir, "", format!("cannot read directory: {}", e.kind())))?;
    let mut v = Vec::new();
    for e in rd {
        let e =
            e.map_err(|e| Problem::new(dir, "", format!("cannot read directory: {}", e.kind())))?;
        v.push(e.path());
    }
    v.sort();
    Ok(v)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn is_owner_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

fn is_repo_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
}

// ---- strict YAML walking shared by the policy parsers ----

/// A mapping being read strictly: keys are checked against an allowed list.
pub(crate) struct Obj<'a> {
    pub file: &'a Path,
    pub path: String,
    pub map: &'a Mapping,
}

impl<'a> Obj<'a> {
    /// `v` must be a mapping whose keys are all strings in `allowed`.
    pub fn new(
        file: &'a Path,
        path: &str,
        v: &'a Value,
        allowed: &[&str],
        problems: &mut Vec<Problem>,
    ) -> Option<Obj<'a>> {
        let map = as_map(file, path, v, problems)?;
        for k in map.keys() {
            match k.as_str() {
                Some(s) if allowed.contains(&s) => {}
                Some(s) if is_plain_key(s) => problems.push(Problem::new(
                    file,
                    diag::key(path, s),
                    format!("unknown key; allowed here: {}", allowed.join(", ")),
                )),
                _ => problems.push(Problem::new(
                    file,
                    path,
                    format!("has an unknown key; allowed here: {}", allowed.join(", ")),
                )),
            }
        }
        Some(Obj {
            file,
            path: path.to_string(),
            map,
        })
    }

    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    pub fn key(&self, key: &str) -> String {
        diag::key(&self.path, key)
    }

    pub fn required(&self, key: &str, problems: &mut Vec<Problem>) -> Option<&'a Value> {
        let v = self.get(key);
        if v.is_none() {
            problems.push(Problem::new(self.file, self.key(key), "is required"));
        }
        v
    }

    pub fn string(&self, key: &str, required: bool, problems: &mut Vec<Problem>) -> Option<String> {
        let v = if required {
            self.required(key, problems)?
        } else {
            self.get(key)?
        };
        match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => {
                problems.push(Problem::new(self.file, self.key(key), "must be a string"));
                None
            }
        }
    }

    pub fn strings(&self, key: &str, problems: &mut Vec<Problem>) -> Vec<String> {
        match self.get(key) {
            None => Vec::new(),
            Some(v) => string_list(self.file, &self.key(key), v, problems),
        }
    }

    pub fn boolean(&self, key: &str, problems: &mut Vec<Problem>) -> Option<bool> {
        match self.required(key, problems)? {
            Value::Bool(b) => Some(*b),
            _ => {
                problems.push(Problem::new(
                    self.file,
                    self.key(key),
                    "must be true or false",
                ));
                None
            }
        }
    }

    /// `schema: 1` is required at the top of every policy file.
    pub fn schema_one(&self, problems: &mut Vec<Problem>) {
        match self.required("schema", problems) {
            Some(Value::Number(n)) if n.as_u64() == Some(1) => {}
            Some(_) => problems.push(Problem::new(self.file, self.key("schema"), "must be 1")),
            None => {}
        }
    }
}

pub(crate) fn as_map<'a>(
    file: &Path,
    path: &str,
    v: &'a Value,
    problems: &mut Vec<Problem>,
) -> Option<&'a Mapping> {
    match v {
        Value::Mapping(m) => Some(m),
        _ => {
            problems.push(Problem::new(file, path, "must be a mapping"));
            None
        }
    }
}

pub(crate) fn string_list(
    file: &Path,
    path: &str,
    v: &Value,
    problems: &mut Vec<Problem>,
) -> Vec<String> {
    let Value::Sequence(seq) = v else {
        problems.push(Problem::new(file, path, "must be a list of strings"));
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in seq.iter().enumerate() {
        match item.as_str() {
            Some(s) => out.push(s.to_string()),
            None => problems.push(Problem::new(file, diag::index(path, i), "must be a string")),
        }
    }
    out
}

/// Parse a level name (`L1`..`L4`).
pub(crate) fn level(
    file: &Path,
    path: &str,
    v: &Value,
    problems: &mut Vec<Problem>,
) -> Option<Level> {
    match v.as_str().and_then(Level::parse) {
        Some(l) => Some(l),
        None => {
            problems.push(Problem::new(file, path, "must be one of L1, L2, L3, L4"));
            None
        }
    }
}
