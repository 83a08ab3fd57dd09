//! Per-repository autonomy: what may change where. The format is the same as an
//! `AUTONOMY.yaml` at a repository's root, and the host keeps one per repository under
//! `policies/autonomy/<owner>/<repo>.yaml`:
//!
//! ```yaml
//! default: L2
//! paths:
//!   ".github/workflows/**": L2
//!   "docs/**": L4
//! ```
//!
//! Path globs are anchored at the repository root and match whole paths: `**` (a whole
//! segment) matches any number of segments, including none; `*` matches within one segment;
//! `?` matches one character other than `/`. When several globs match, the most specific
//! wins: the longest literal text before the first wildcard, then the most literal
//! characters overall, then the stricter level. YAML order never matters.

use super::store::{self, Obj};
use crate::diag::{self, Problem};
use crate::role::Level;
use crate::secret_shapes::is_plain_key;
use serde_yaml::Value;
use std::path::{Path, PathBuf};

/// One `paths:` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRule {
    pub glob: String,
    pub level: Level,
    segments: Vec<String>,
    /// Literal bytes before the first wildcard, then literal bytes in total.
    specificity: (usize, usize),
}

impl PathRule {
    fn matches(&self, path: &[&str]) -> bool {
        match_segments(&self.segments, path)
    }
}

/// A repository's autonomy policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoAutonomy {
    pub file: PathBuf,
    pub default: Level,
    pub rules: Vec<PathRule>,
}

impl RepoAutonomy {
    /// Parse an autonomy document (an `AUTONOMY.yaml` or a host policy file).
    pub fn parse(file: &Path, text: &str) -> Result<RepoAutonomy, Vec<Problem>> {
        let doc = store::parse_text(file, text)?;
        RepoAutonomy::from_value(file, &doc)
    }

    pub fn from_value(file: &Path, doc: &Value) -> Result<RepoAutonomy, Vec<Problem>> {
        let mut problems = Vec::new();
        let Some(top) = Obj::new(file, "", doc, &["default", "paths"], &mut problems) else {
            return Err(problems);
        };
        let default = top
            .required("default", &mut problems)
            .and_then(|v| store::level(file, "default", v, &mut problems));
        let mut rules = Vec::new();
        if let Some(v) = top.get("paths") {
            if let Some(map) = store::as_map(file, "paths", v, &mut problems) {
                for (i, (k, v)) in map.iter().enumerate() {
                    let Some(glob) = k.as_str() else {
                        problems.push(Problem::new(
                            file,
                            diag::key("paths", &format!("(key #{})", i + 1)),
                            "must be a path glob string",
                        ));
                        continue;
                    };
                    let path = if is_plain_key(glob) {
                        diag::key("paths", glob)
                    } else {
                        diag::key("paths", &format!("(key #{})", i + 1))
                    };
                    let level = store::level(file, &path, v, &mut problems);
                    match (check_glob(glob), level) {
                        (Ok(segments), Some(level)) => rules.push(PathRule {
                            glob: glob.to_string(),
                            level,
                            specificity: specificity(glob),
                            segments,
                        }),
                        (Err(why), _) => problems.push(Problem::new(file, path, why)),
                        _ => {}
                    }
                }
            }
        }
        match default {
            Some(default) if problems.is_empty() => Ok(RepoAutonomy {
                file: file.to_path_buf(),
                default,
                rules,
            }),
            _ => Err(problems),
        }
    }

    /// The repository's level for `path`, and the rule that decided it.
    pub fn level_for(&self, path: &str) -> (Level, String) {
        let Some(segs) = normal_path(path) else {
            return (
                Level::L1,
                "path is not a plain relative path (no `..`, `.`, empty or absolute); \
                 strictest level"
                    .to_string(),
            );
        };
        let best = self
            .rules
            .iter()
            .filter(|r| r.matches(&segs))
            .max_by(|a, b| {
                a.specificity
                    .cmp(&b.specificity)
                    // Equal specificity: the stricter (lower) level wins.
                    .then(b.level.cmp(&a.level))
            });
        match best {
            Some(r) => (
                r.level,
                format!(
                    "{}: paths \"{}\" = {}",
                    self.file.display(),
                    r.glob,
                    r.level
                ),
            ),
            None => (
                self.default,
                format!("{}: default = {}", self.file.display(), self.default),
            ),
        }
    }
}

/// The effective level of a change to `path`: the stricter of the role's level and the
/// repository's level for that path. A repository with no autonomy policy counts as L1
/// (fail closed: an unknown repo gets read and comment only). Returns the rule that decided.
pub fn effective_level(role: Level, repo: Option<&RepoAutonomy>, path: &str) -> (Level, String) {
    let (repo_level, repo_rule) = match repo {
        Some(r) => r.level_for(path),
        None => (
            Level::L1,
            "no autonomy policy for this repository = L1".to_string(),
        ),
    };
    let eff = role.stricter(repo_level);
    let from = if role < repo_level {
        "role level"
    } else {
        "repository level"
    };
    (
        eff,
        format!("role level {role}; {repo_rule}; effective {eff} ({from})"),
    )
}

/// Split a repository-relative path; `None` for anything that is not plain.
fn normal_path(path: &str) -> Option<Vec<&str>> {
    let p = path.strip_prefix("./").unwrap_or(path);
    if p.is_empty() || p.starts_with('/') {
        return None;
    }
    let p = p.strip_suffix('/').unwrap_or(p);
    let segs: Vec<&str> = p.split('/').collect();
    if segs.iter().any(|s| s.is_empty() || *s == "." || *s == "..") {
        return None;
    }
    Some(segs)
}

fn check_glob(glob: &str) -> Result<Vec<String>, &'static str> {
    if glob.is_empty() || glob.len() > 256 {
        return Err("path glob must be 1 to 256 characters");
    }
    if glob.starts_with('/') {
        return Err("path glob is relative to the repository root; drop the leading /");
    }
    if glob
        .bytes()
        .any(|b| !(0x21..0x7f).contains(&b) || b"\\[]{}!".contains(&b))
    {
        return Err(
            "path glob may use printable ASCII without spaces; wildcards are ** * ? \
                    only (no [...], {...}, ! or \\)",
        );
    }
    let mut segs = Vec::new();
    for s in glob.split('/') {
        if s.is_empty() || s == "." || s == ".." {
            return Err("path glob segments must not be empty, `.` or `..`");
        }
        if s.contains("**") && s != "**" {
            return Err("`**` must be a whole path segment (e.g. docs/**/*.md)");
        }
        segs.push(s.to_string());
    }
    Ok(segs)
}

fn specificity(glob: &str) -> (usize, usize) {
    let prefix = glob.find(['*', '?']).unwrap_or(glob.len());
    let literal = glob.bytes().filter(|b| !matches!(b, b'*' | b'?')).count();
    (prefix, literal)
}

/// Segment-wise match; `**` spans any number of segments (dynamic programming).
fn match_segments(pat: &[String], path: &[&str]) -> bool {
    // live[j]: pat[..j] matches path[..i].
    let mut live = vec![false; pat.len() + 1];
    live[0] = true;
    close_double_stars(pat, &mut live);
    for seg in path {
        let mut next = vec![false; pat.len() + 1];
        for j in 0..pat.len() {
            if !live[j] {
                continue;
            }
            if pat[j] == "**" {
                next[j] = true;
            } else if super::rails::wildcard(pat[j].as_bytes(), seg.as_bytes(), false, false) {
                next[j + 1] = true;
            }
        }
        close_double_stars(pat, &mut next);
        live = next;
    }
    live[pat.len()]
}

fn close_double_stars(pat: &[String], live: &mut [bool]) {
    for j in 0..pat.len() {
        if live[j] && pat[j] == "**" {
            live[j + 1] = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(text: &str) -> RepoAutonomy {
        RepoAutonomy::parse(Path::new("AUTONOMY.yaml"), text).unwrap()
    }

    #[test]
    fn segment_globs() {
        let g = |p: &str, s: &str| {
            let pat = check_glob(p).unwrap();
            match_segments(&pat, &normal_path(s).unwrap())
        };
        assert!(g("docs/**", "docs/a/b.md"));
        assert!(g("docs/**", "docs"));
        assert!(!g("docs/**", "src/docs/a"));
        assert!(g("**/*.md", "README.md"));
        assert!(g("**/*.md", "a/b/c.md"));
        assert!(!g("*.md", "a/b.md"));
        assert!(g("src/*/mod.rs", "src/x/mod.rs"));
        assert!(!g("src/*/mod.rs", "src/x/y/mod.rs"));
        assert!(g("a?c", "abc"));
        assert!(!g("a?c", "a/c"));
        assert!(g(".github/workflows/**", ".github/workflows/ci.yml"));
    }

    #[test]
    fn most_specific_wins_regardless_of_order() {
        let a = repo("default: L3\npaths:\n  docs/**: L4\n  docs/secret/**: L1\n");
        let b = repo("default: L3\npaths:\n  docs/secret/**: L1\n  docs/**: L4\n");
        for r in [&a, &b] {
            assert_eq!(r.level_for("docs/secret/x.md").0, Level::L1);
            assert_eq!(r.level_for("docs/x.md").0, Level::L4);
            assert_eq!(r.level_for("src/main.rs").0, Level::L3);
        }
        let tie = repo("default: L3\npaths:\n  docs/*.md: L4\n  docs/*.m?: L2\n");
        // Same prefix; more literal text wins.
        assert_eq!(tie.level_for("docs/a.md").0, Level::L4);
        let tie2 = repo("default: L3\npaths:\n  a/*: L4\n  a/?: L2\n");
        assert_eq!(tie2.level_for("a/x").0, Level::L2);
    }

    #[test]
    fn odd_paths_are_strictest() {
        let r = repo("default: L4\n");
        for p in ["../x", "/etc/passwd", "a//b", "a/./b", ""] {
            assert_eq!(r.level_for(p).0, Level::L1, "{p}");
        }
        assert_eq!(r.level_for("./a/b/").0, Level::L4);
    }
}
