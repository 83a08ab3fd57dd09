//! GitHub writes: may this run make this write? Pure, like the rest of the policy core:
//! the role's `writes`, the effective level (the role's and the repository's autonomy
//! policy, as `airlockctl check ROLE write` computes it), protected authority (only the
//! class holding `merge` merges or approves), and the run's `github_writes_per_run`.

use std::collections::BTreeMap;

use super::autonomy::{effective_level, RepoAutonomy};
use super::classes::{canonicalize, MERGE_ACTION};
use super::levels::{Landing, LevelTable};
use super::{Decision, Policies};
use crate::role::{Level, Role, Writes};

/// A named GitHub write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `writes.issues`: create, label, edit_body, comment, close, reopen, assign.
    Issue(&'static str),
    /// `writes.pull_requests`: open, merge, review, label, comment.
    PullRequest(&'static str),
    /// A review that approves: the merge authority's, like a merge.
    Approve,
    /// `writes.dispatch`: a workflow dispatch.
    Dispatch,
    /// A change to the repository's contents: a file through the API (its path), or a
    /// git push (its ref updates checked apart).
    Contents(Option<String>),
}

impl Action {
    /// `issues.create`, `pull_requests.merge`, `dispatch`, `contents`.
    pub fn name(&self) -> String {
        match self {
            Action::Issue(a) => format!("issues.{a}"),
            Action::PullRequest(a) => format!("pull_requests.{a}"),
            Action::Approve => "pull_requests.review (approve)".into(),
            Action::Dispatch => "dispatch".into(),
            Action::Contents(_) => "contents".into(),
        }
    }
}

/// Where a workflow lives; changing one needs `writes.workflows`.
pub const WORKFLOWS_DIR: &str = ".github/workflows/";

/// One role's GitHub write rules, compiled once per run.
#[derive(Debug, Clone)]
pub struct GithubPolicy {
    writes: Writes,
    level: Level,
    holds_merge: bool,
    levels: LevelTable,
    autonomy: BTreeMap<String, RepoAutonomy>,
    /// `budget.github_writes_per_run` (absent: 0, the schema's default).
    pub budget: u64,
}

impl GithubPolicy {
    pub fn compile(role: &Role, policies: &Policies) -> GithubPolicy {
        let class = canonicalize(&role.role);
        GithubPolicy {
            writes: role.writes.clone(),
            level: role.level,
            holds_merge: policies
                .classes
                .authority_of(class)
                .iter()
                .any(|a| a == MERGE_ACTION),
            levels: policies.levels.clone(),
            autonomy: policies.autonomy.clone(),
            budget: role.budget.github_writes_per_run.unwrap_or(0),
        }
    }

    /// Whether `repo` (`owner/name`, as GitHub compares: case-insensitively) is one of
    /// `writes.repos`.
    pub fn writable(&self, repo: &str) -> bool {
        self.writes
            .repos
            .iter()
            .any(|r| r.eq_ignore_ascii_case(repo))
    }

    /// The configured spelling of `repo` (its autonomy file's key).
    fn canonical<'a>(&'a self, repo: &'a str) -> &'a str {
        self.writes
            .repos
            .iter()
            .find(|r| r.eq_ignore_ascii_case(repo))
            .map(String::as_str)
            .unwrap_or(repo)
    }

    /// On what condition a merge into `repo` lands (the effective level's `land`).
    pub fn landing(&self, repo: &str) -> Landing {
        let (level, _) = repo_level(self.level, self.autonomy.get(self.canonical(repo)));
        self.levels.permits(level).land
    }

    /// `writes.repos`, as configured.
    pub fn repos(&self) -> &[String] {
        &self.writes.repos
    }

    /// Whether the role may change `.github/workflows/` at all.
    pub fn workflows(&self) -> bool {
        self.writes.workflows
    }

    /// Decide one write to `repo`, the run having made `used` writes so far.
    pub fn decide(&self, repo: &str, action: &Action, used: u64) -> Decision {
        if !self.writable(repo) {
            return Decision::deny("writes.repos", "the role may not write to this repository");
        }
        let w = &self.writes;
        let granted = match action {
            Action::Issue(a) => w.issues.iter().any(|x| x == a),
            Action::PullRequest(a) => w.pull_requests.iter().any(|x| x == a),
            Action::Approve => w.pull_requests.iter().any(|x| x == "review"),
            Action::Dispatch => w.dispatch,
            Action::Contents(_) => true,
        };
        if !granted {
            let key = match action {
                Action::Issue(_) => "writes.issues",
                Action::Dispatch => "writes.dispatch",
                _ => "writes.pull_requests",
            };
            return Decision::deny(
                key,
                format!("the role's writes do not grant {}", action.name()),
            );
        }
        if matches!(action, Action::PullRequest(MERGE_ACTION) | Action::Approve)
            && !self.holds_merge
        {
            return Decision::deny(
                "classes: merge",
                "only the class holding merge authority (merge-gate) merges or approves pull requests",
            );
        }
        let repo = self.canonical(repo);
        let path = match action {
            Action::Contents(Some(p)) => p.as_str(),
            _ => "",
        };
        if path.starts_with(WORKFLOWS_DIR) && !w.workflows {
            return Decision::deny(
                "writes.workflows",
                "the role may not change .github/workflows/",
            );
        }
        let auto = self.autonomy.get(repo);
        let (level, rule) = if path.is_empty() {
            repo_level(self.level, auto)
        } else {
            effective_level(self.level, auto, path)
        };
        let eff = self.levels.permits(level);
        let permitted = match action {
            Action::Issue(a) => eff.issues.iter().any(|x| x == a),
            Action::PullRequest(MERGE_ACTION) | Action::Approve => eff.land != Landing::Never,
            Action::PullRequest(a) => eff.pull_requests.iter().any(|x| x == a),
            // Proposing a change, as `airlockctl check ROLE write` decides it.
            Action::Contents(_) => {
                eff.pull_requests.iter().any(|x| x == "open")
                    && (!path.starts_with(WORKFLOWS_DIR) || eff.workflow_files)
            }
            Action::Dispatch => true,
        };
        if !permitted {
            return Decision::deny(rule, format!("{level} does not permit {}", action.name()));
        }
        if used >= self.budget {
            return Decision::deny(
                "budget.github_writes_per_run",
                format!(
                    "the run has made {used} of its {} GitHub writes",
                    self.budget
                ),
            );
        }
        Decision::allow(rule, format!("{} at {level}", action.name()))
    }
}

/// One review of a pull request, as GitHub lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    pub login: String,
    /// The account's type: `User`, `Bot`, `Organization`, ...
    pub account: String,
    /// `APPROVED`, `CHANGES_REQUESTED`, `COMMENTED`, `DISMISSED`, `PENDING`.
    pub state: String,
    /// The commit the review was made on.
    pub commit: String,
}

/// Whether a pull request authored by `author` with head commit `head` has a human's
/// approval: a review in state APPROVED on the head commit from an account of type
/// `User` (never a Bot or an App, whose logins end in `[bot]`) that is not the author
/// and whose latest deciding review (approve, request changes, dismissal) is that
/// approval. The approver's login, or why there is none. Pure.
pub fn human_approval(reviews: &[Review], head: &str, author: &str) -> Result<String, String> {
    let mut why = "no review approves the pull request".to_string();
    for (i, r) in reviews.iter().enumerate() {
        if r.state != "APPROVED" {
            continue;
        }
        let later_decision = reviews[i + 1..].iter().any(|l| {
            l.login.eq_ignore_ascii_case(&r.login)
                && matches!(
                    l.state.as_str(),
                    "APPROVED" | "CHANGES_REQUESTED" | "DISMISSED"
                )
        });
        if later_decision {
            continue;
        }
        if r.account != "User" || r.login.ends_with("[bot]") {
            why = "the only approvals are from bots or apps, not a human".into();
        } else if r.login.eq_ignore_ascii_case(author) {
            why = "the only approval is from the pull request's author".into();
        } else if !r.commit.eq_ignore_ascii_case(head) {
            why = "the only approvals are on an older commit than the head".into();
        } else {
            return Ok(r.login.clone());
        }
    }
    Err(why)
}

/// The effective level of a write that changes no particular path (an issue, a pull
/// request): the stricter of the role's level and the repository's default (L1 when the
/// host has no autonomy policy for it, as [`effective_level`] says).
fn repo_level(role: Level, repo: Option<&RepoAutonomy>) -> (Level, String) {
    match repo {
        Some(r) => {
            let eff = role.stricter(r.default);
            (
                eff,
                format!(
                    "role level {role}; {}: default = {}; effective {eff}",
                    r.file.display(),
                    r.default
                ),
            )
        }
        None => effective_level(role, None, "-"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn load(role: &str) -> (Role, Policies) {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let r = crate::role::load_role_dir(&repo.join("roles").join(role))
            .unwrap()
            .role;
        (r, Policies::load(&repo.join("policies")).unwrap())
    }

    #[test]
    fn each_rule_refuses_what_it_guards() {
        let (role, pol) = load("code");
        let p = GithubPolicy::compile(&role, &pol);
        let repo = "example-org/example-repo";
        let d = p.decide(repo, &Action::PullRequest("open"), 0);
        assert!(d.allow, "{d:?}");
        assert!(
            p.decide("Example-Org/Example-Repo", &Action::Issue("comment"), 0)
                .allow
        );
        let d = p.decide("example-org/other", &Action::Issue("comment"), 0);
        assert_eq!((d.allow, d.rule.as_str()), (false, "writes.repos"));
        let d = p.decide(repo, &Action::Issue("close"), 0);
        assert_eq!((d.allow, d.rule.as_str()), (false, "writes.issues"));
        let d = p.decide(repo, &Action::PullRequest("merge"), 0);
        assert!(
            !d.allow && d.rule.starts_with("writes.pull_requests"),
            "{d:?}"
        );
        let d = p.decide(
            repo,
            &Action::Contents(Some(".github/workflows/ci.yml".into())),
            0,
        );
        assert_eq!((d.allow, d.rule.as_str()), (false, "writes.workflows"));
        let d = p.decide(repo, &Action::Issue("comment"), 12);
        assert_eq!(
            (d.allow, d.rule.as_str()),
            (false, "budget.github_writes_per_run")
        );
    }

    #[test]
    fn only_a_humans_approval_on_the_head_that_is_not_the_authors_lands_a_change() {
        let r = |login: &str, account: &str, state: &str, commit: &str| Review {
            login: login.into(),
            account: account.into(),
            state: state.into(),
            commit: commit.into(),
        };
        let head = "h";
        assert!(human_approval(&[], head, "a").is_err());
        let bot = [r("ci[bot]", "Bot", "APPROVED", head)];
        assert!(human_approval(&bot, head, "a")
            .unwrap_err()
            .contains("bots"));
        let typed_bot = [r("sneaky[bot]", "User", "APPROVED", head)];
        assert!(human_approval(&typed_bot, head, "a").is_err());
        let author = [r("a", "User", "APPROVED", head)];
        assert!(human_approval(&author, head, "A")
            .unwrap_err()
            .contains("author"));
        let old = [r("h1", "User", "APPROVED", "old")];
        assert!(human_approval(&old, head, "a")
            .unwrap_err()
            .contains("older"));
        let withdrawn = [
            r("h1", "User", "APPROVED", head),
            r("h1", "User", "CHANGES_REQUESTED", head),
        ];
        assert!(human_approval(&withdrawn, head, "a").is_err());
        let good = [
            r("h1", "User", "COMMENTED", head),
            r("h2", "User", "APPROVED", head),
            r("h2", "User", "COMMENTED", head),
        ];
        assert_eq!(human_approval(&good, head, "a").unwrap(), "h2");
    }

    #[test]
    fn merge_is_the_merge_gates_alone_and_the_level_bounds_it() {
        let (mut role, pol) = load("code");
        role.writes.pull_requests.push("merge".into());
        let p = GithubPolicy::compile(&role, &pol);
        let d = p.decide("example-org/example-repo", &Action::PullRequest("merge"), 0);
        assert_eq!((d.allow, d.rule.as_str()), (false, "classes: merge"));
        let (role, mut pol) = load("merge-gate");
        let repo = role.writes.repos[0].clone();
        // The shipped repository policy is L2 by default: nothing lands there.
        let d = GithubPolicy::compile(&role, &pol).decide(&repo, &Action::PullRequest("merge"), 0);
        assert!(!d.allow && d.reason.contains("L2"), "{d:?}");
        if let Some(a) = pol.autonomy.get_mut(&repo) {
            a.default = Level::L3;
        }
        let p = GithubPolicy::compile(&role, &pol);
        assert!(p.decide(&repo, &Action::PullRequest("merge"), 0).allow);
        assert!(p.decide(&repo, &Action::Approve, 0).allow);
        // At L1 no change lands, whoever asks.
        let mut low = role.clone();
        low.level = Level::L1;
        let d = GithubPolicy::compile(&low, &pol).decide(&repo, &Action::PullRequest("merge"), 0);
        assert!(!d.allow && d.reason.contains("L1"), "{d:?}");
    }
}
