//! Autonomy levels: what each of L1..L4 permits, from `policies/levels.yaml`.
//!
//! A level says which GitHub writes a change may involve and whether, and how, a change may
//! land. Landing itself is always done by the class that holds merge authority (merge-gate);
//! the level of the change decides whether merge-gate may land it and on what condition.
//! Each level must permit everything the level below it permits (checked on load).

use super::store::Obj;
use crate::diag::{self, Problem};
use crate::role::Level;
use serde_yaml::Value;
use std::path::Path;

pub use crate::role::model::ISSUE_ACTIONS;
/// Pull-request writes a level lists. `merge` is not one: landing is `land`.
pub const PR_ACTIONS: [&str; 4] = ["open", "review", "label", "comment"];

/// Whether and how a change at this level may land.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Landing {
    /// Agents never land the change; a human merges it.
    Never,
    /// merge-gate may land it once a human has approved the pull request.
    AfterHumanApproval,
    /// merge-gate may land it when the role's judge passes (the ratchet) and the change stays
    /// within the role's goals; no human approval needed.
    ByRatchet,
}

impl Landing {
    pub fn as_str(self) -> &'static str {
        match self {
            Landing::Never => "never",
            Landing::AfterHumanApproval => "after-human-approval",
            Landing::ByRatchet => "by-ratchet",
        }
    }

    fn parse(s: &str) -> Option<Landing> {
        [
            Landing::Never,
            Landing::AfterHumanApproval,
            Landing::ByRatchet,
        ]
        .into_iter()
        .find(|l| l.as_str() == s)
    }
}

/// What one level permits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelDef {
    pub level: Level,
    pub summary: String,
    /// `writes.issues` actions permitted.
    pub issues: Vec<String>,
    /// `writes.pull_requests` actions permitted, other than merge.
    pub pull_requests: Vec<String>,
    pub land: Landing,
    /// May propose changes to `.github/workflows/` (with `writes.workflows`). Landing them
    /// still follows `land` and the repository's own level for that path.
    pub workflow_files: bool,
}

/// The four levels, L1 first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelTable {
    defs: [LevelDef; 4],
}

impl LevelTable {
    pub fn parse(file: &Path, doc: &Value) -> Result<LevelTable, Vec<Problem>> {
        let mut problems = Vec::new();
        let Some(top) = Obj::new(file, "", doc, &["schema", "levels"], &mut problems) else {
            return Err(problems);
        };
        top.schema_one(&mut problems);
        let mut defs: Vec<LevelDef> = Vec::new();
        if let Some(v) = top.required("levels", &mut problems) {
            if let Some(levels) =
                Obj::new(file, "levels", v, &["L1", "L2", "L3", "L4"], &mut problems)
            {
                for level in Level::ALL {
                    let Some(v) = levels.required(level.as_str(), &mut problems) else {
                        continue;
                    };
                    if let Some(d) =
                        parse_def(file, &levels.key(level.as_str()), level, v, &mut problems)
                    {
                        defs.push(d);
                    }
                }
            }
        }
        for pair in defs.windows(2) {
            if let [lo, hi] = pair {
                let key = diag::key("levels", hi.level.as_str());
                let covers = lo.issues.iter().all(|a| hi.issues.contains(a))
                    && lo
                        .pull_requests
                        .iter()
                        .all(|a| hi.pull_requests.contains(a))
                    && hi.land >= lo.land
                    && (hi.workflow_files || !lo.workflow_files);
                if !covers {
                    problems.push(Problem::new(
                        file,
                        key,
                        format!("must permit everything {} permits", lo.level),
                    ));
                }
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        match <[LevelDef; 4]>::try_from(defs) {
            Ok(defs) => Ok(LevelTable { defs }),
            Err(_) => Err(vec![Problem::new(
                file,
                "levels",
                "must define L1, L2, L3 and L4",
            )]),
        }
    }

    /// What `level` permits.
    pub fn permits(&self, level: Level) -> &LevelDef {
        match level {
            Level::L1 => &self.defs[0],
            Level::L2 => &self.defs[1],
            Level::L3 => &self.defs[2],
            Level::L4 => &self.defs[3],
        }
    }

    pub fn all(&self) -> &[LevelDef] {
        &self.defs
    }
}

fn parse_def(
    file: &Path,
    path: &str,
    level: Level,
    v: &Value,
    problems: &mut Vec<Problem>,
) -> Option<LevelDef> {
    let o = Obj::new(
        file,
        path,
        v,
        &[
            "summary",
            "issues",
            "pull_requests",
            "land",
            "workflow_files",
        ],
        problems,
    )?;
    let summary = o.string("summary", true, problems).unwrap_or_default();
    let issues = checked(&o, "issues", &ISSUE_ACTIONS, problems);
    let pull_requests = checked(&o, "pull_requests", &PR_ACTIONS, problems);
    let land = o.string("land", true, problems).and_then(|s| {
        let l = Landing::parse(&s);
        if l.is_none() {
            problems.push(Problem::new(
                file,
                o.key("land"),
                "must be one of never, after-human-approval, by-ratchet",
            ));
        }
        l
    });
    let workflow_files = o.boolean("workflow_files", problems);
    Some(LevelDef {
        level,
        summary,
        issues,
        pull_requests,
        land: land?,
        workflow_files: workflow_files?,
    })
}

fn checked(o: &Obj<'_>, key: &str, allowed: &[&str], problems: &mut Vec<Problem>) -> Vec<String> {
    if o.get(key).is_none() {
        problems.push(Problem::new(
            o.file,
            o.key(key),
            "is required (it may be [])",
        ));
        return Vec::new();
    }
    let v = o.strings(key, problems);
    for (i, a) in v.iter().enumerate() {
        if !allowed.contains(&a.as_str()) {
            problems.push(Problem::new(
                o.file,
                diag::index(&o.key(key), i),
                format!("must be one of {}", allowed.join(", ")),
            ));
        }
    }
    v
}
