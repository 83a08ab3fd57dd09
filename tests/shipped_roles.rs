//! The role templates shipped in `roles/`: each loads, is named for its folder, carries a
//! brief, grants least-privilege bash prefixes and (an agent) reaches the board; exactly
//! one role may merge and it is `merge-gate`; at least one L4 role has a judge and goals;
//! the smoke role `hello` is a workflow that needs no credential and runs its script.

use airlock::policy::agent_config::{
    agent_command, claude_settings, codex_config, GatewayEndpoints,
};
use airlock::policy::pattern;
use airlock::role::JudgeChecks;
use airlock::role::{load_role_dir, Kind, Level, LoadedRole, McpConnector, Provider};
use regex::Regex;
use std::path::{Path, PathBuf};

/// Every `roles/*` folder. Fails loudly when there are none, so a moved folder cannot make
/// the rest of this file pass over an empty list.
fn role_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("roles");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", root.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 10,
        "expected the shipped templates in {}",
        root.display()
    );
    dirs
}

/// The agent templates (every shipped role but the workflows).
fn agents() -> Vec<LoadedRole> {
    load_all()
        .into_iter()
        .filter(|l| l.role.kind == Kind::Agent)
        .collect()
}

fn load_all() -> Vec<LoadedRole> {
    role_dirs()
        .iter()
        .map(|dir| {
            load_role_dir(dir).unwrap_or_else(|problems| {
                let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
                panic!("{} does not load:\n{}", dir.display(), text.join("\n"))
            })
        })
        .collect()
}

#[test]
fn every_template_loads_and_is_named_for_its_folder() {
    for loaded in load_all() {
        let folder = loaded.dir.file_name().unwrap().to_str().unwrap();
        assert_eq!(loaded.role.role, folder, "{}", loaded.file.display());
        assert_eq!(loaded.role.schema, 1, "{folder}");
        assert_eq!(loaded.role.brief, "brief.md", "{folder}");
        let lines = loaded.brief_text.lines().count();
        assert!(
            (15..=40).contains(&lines),
            "{folder}: brief has {lines} lines, want 15 to 40"
        );
    }
}

#[test]
fn the_expected_roles_are_shipped_and_aliases_are_not_folders() {
    let names: Vec<String> = load_all().into_iter().map(|l| l.role.role).collect();
    for want in [
        "code",
        "review",
        "security-auditor",
        "test-engineer",
        "code-scout",
        "doc-researcher",
        "web-researcher",
        "merge-gate",
        "hello",
    ] {
        assert!(names.iter().any(|n| n == want), "missing role {want}");
    }
    // Legacy aliases are resolved before lookup; a folder by that name would never be read.
    for alias in ["implementer", "reviewer", "operator-interaction"] {
        assert!(
            !names.iter().any(|n| n == alias),
            "{alias} is an alias, not a role"
        );
    }
}

#[test]
fn exactly_one_role_may_merge_and_it_is_the_merge_gate() {
    let mergers: Vec<String> = load_all()
        .into_iter()
        .filter(|l| l.role.writes.pull_requests.iter().any(|p| p == "merge"))
        .map(|l| l.role.role)
        .collect();
    assert_eq!(mergers, ["merge-gate"]);
}

#[test]
fn an_l4_role_has_a_judge_with_a_check_and_goals() {
    let l4: Vec<LoadedRole> = load_all()
        .into_iter()
        .filter(|l| l.role.level == Level::L4)
        .collect();
    assert!(!l4.is_empty(), "no L4 template");
    for loaded in l4 {
        let name = &loaded.role.role;
        let judge = loaded
            .role
            .judge
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: no judge"));
        assert!(judge.check.is_some(), "{name}: judge has no check");
        assert!(loaded.role.goals.is_some(), "{name}: no goals");
        let goals = loaded.goals_text.as_deref().unwrap_or_default();
        assert!(goals.lines().count() >= 5, "{name}: goals file is too thin");
    }
}

/// A bash prefix no shipped role may grant, with why.
fn forbidden(prefix: &str) -> Option<&'static str> {
    let words: Vec<&str> = prefix.split_whitespace().collect();
    let first = words.first().copied().unwrap_or("");
    let two = words.get(..2).map(|w| w.join(" ")).unwrap_or_default();
    if prefix.trim().is_empty() {
        return Some("empty prefix allows everything");
    }
    if words.len() == 1 && (first == "git" || first == "gh") {
        return Some("git or gh alone is too broad");
    }
    match first {
        "sudo" | "su" | "doas" => return Some("privilege change"),
        "rm" | "shred" | "dd" => return Some("deletes data"),
        "airlockctl" | "airlockd" => return Some("controls airlock itself"),
        "env" | "bash" | "sh" | "zsh" | "xargs" | "timeout" | "nohup" | "exec" | "eval" => {
            return Some("a wrapper runs any command")
        }
        "curl" | "wget" | "ssh" | "scp" => return Some("network egress tool"),
        _ => {}
    }
    match two.as_str() {
        "git push" => Some("pushes go through the GitHub connector"),
        "cargo publish" | "npm publish" => Some("publishes a package"),
        "gh auth" => Some("mints or prints credentials"),
        "gh api" => Some("any GitHub API call, writes included"),
        "gh repo" | "gh release" | "gh secret" => Some("repository administration"),
        _ => None,
    }
}

#[test]
fn the_forbidden_prefix_check_itself_catches_what_it_should() {
    for bad in [
        "git",
        "gh",
        "git push",
        "git push origin",
        "sudo ls",
        "rm",
        "rm -rf",
        "env",
        "bash",
        "sh",
        "xargs",
        "timeout",
        "cargo publish",
        "npm publish",
        "gh auth token",
        "airlockctl",
        "",
    ] {
        assert!(forbidden(bad).is_some(), "{bad:?} should be forbidden");
    }
    for good in [
        "git log",
        "git diff",
        "cargo test",
        "rg",
        "ls",
        "gh pr view",
    ] {
        assert!(forbidden(good).is_none(), "{good:?} should be allowed");
    }
}

#[test]
fn no_template_grants_a_forbidden_bash_prefix() {
    for loaded in load_all() {
        for (i, prefix) in loaded.role.bash_prefixes().iter().enumerate() {
            if let Some(why) = forbidden(prefix) {
                panic!("{}: run.bash[{i}] {prefix:?}: {why}", loaded.role.role);
            }
        }
    }
}

#[test]
fn every_agent_template_reaches_the_board_through_airlock() {
    let agents = agents();
    assert!(agents.len() >= 9, "expected the agent templates");
    for loaded in agents {
        let role = &loaded.role;
        let name = &role.role;
        assert_eq!(role.kind, Kind::Agent, "{name}");
        let board = role
            .tools
            .get("board")
            .unwrap_or_else(|| panic!("{name}: no board tools"));
        assert!(
            board.iter().any(|t| t.starts_with("board_")),
            "{name}: board tools must include board_*"
        );
        let run = role
            .run
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: no run"));
        assert!(
            matches!(run.mcp.get("board"), Some(McpConnector::Gateway { via }) if via == "airlock"),
            "{name}: run.mcp.board must be via airlock"
        );
        assert!(run.max_turns.is_some(), "{name}: run.max_turns");
        assert!(!run.model.is_empty(), "{name}: run.model");
    }
}

#[test]
fn both_providers_are_used() {
    let providers: Vec<Provider> = load_all()
        .into_iter()
        .filter_map(|l| l.role.run.map(|r| r.provider))
        .collect();
    assert!(providers.contains(&Provider::Claude));
    assert!(providers.contains(&Provider::Codex));
}

#[test]
fn read_only_templates_write_nothing_to_github() {
    for loaded in load_all() {
        let role = &loaded.role;
        let writes = &role.writes;
        let read_only = writes.repos.is_empty();
        if read_only {
            assert!(writes.issues.is_empty(), "{}", role.role);
            assert!(writes.pull_requests.is_empty(), "{}", role.role);
            assert_eq!(role.budget.github_writes_per_run, Some(0), "{}", role.role);
        }
        assert!(role.budget.runs_per_week.is_some(), "{}", role.role);
        assert!(role.budget.minutes_per_run.is_some(), "{}", role.role);
        assert!(role.budget.github_writes_per_run.is_some(), "{}", role.role);
        assert!(role.budget.spend_usd.is_some(), "{}", role.role);
    }
}

#[test]
fn web_tools_only_for_the_web_researcher() {
    for loaded in agents() {
        let run = loaded.role.run.as_ref().unwrap();
        let web = run
            .tools
            .iter()
            .any(|t| t == "WebFetch" || t == "WebSearch");
        assert_eq!(
            web,
            loaded.role.role == "web-researcher",
            "{}",
            loaded.role.role
        );
    }
}

/// Nothing that looks like a credential in any shipped file.
#[test]
fn no_token_shaped_strings_in_templates() {
    let shapes = Regex::new(
        r"(?i)(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_|\bsk-[A-Za-z0-9_-]{16,}|xox[abp]-|AKIA[0-9A-Z]{16}|-----BEGIN|\b(password|passwd|token|secret|api_key)\s*[:=])",
    )
    .unwrap();
    for dir in role_dirs() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                !shapes.is_match(&text),
                "{}: contains a token-shaped string",
                path.display()
            );
        }
    }
    // The check itself finds what it is for.
    assert!(shapes.is_match("token: abc"));
    assert!(shapes.is_match("ghp_abcdefghijklmnopqrstuvwxyz0123"));
    assert!(!shapes.is_match("the task-runner"));
}

/// Schema rules the placeholder loader does not check yet (it only runs serde); the real
/// validator replaces this, and until then the shipped files must not rely on it.
#[test]
fn templates_meet_the_schema_patterns() {
    let repo = Regex::new(r"^[A-Za-z0-9-]+/[a-z0-9.-]+$").unwrap();
    let judge_repo = Regex::new(r"^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$").unwrap();
    let connector = Regex::new(r"^[a-z0-9][a-z0-9-]{0,39}$").unwrap();
    let tool = Regex::new(r"^[A-Za-z0-9_.-]*\*?$").unwrap();
    let param = Regex::new(r"^[A-Za-z0-9_.-]{1,128}$").unwrap();
    let workflow = Regex::new(r"^[A-Za-z0-9._-]+\.ya?ml$").unwrap();
    let role_name = Regex::new(r"^[a-z][a-z0-9-]*$").unwrap();
    let issues = [
        "create",
        "label",
        "edit_body",
        "comment",
        "close",
        "reopen",
        "assign",
    ];
    let prs = ["open", "merge", "review", "label", "comment"];
    for loaded in load_all() {
        let r = &loaded.role;
        let n = &r.role;
        assert!(role_name.is_match(n), "{n}: role");
        for x in r
            .writes
            .repos
            .iter()
            .chain(r.run.iter().flat_map(|run| run.clone.iter().flatten()))
        {
            assert!(repo.is_match(x), "{n}: repo pattern");
        }
        assert!(
            r.writes.issues.iter().all(|i| issues.contains(&i.as_str())),
            "{n}"
        );
        assert!(
            r.writes
                .pull_requests
                .iter()
                .all(|p| prs.contains(&p.as_str())),
            "{n}"
        );
        assert!(r.writes.reads.iter().all(|p| p == "actions"), "{n}");
        for (c, patterns) in &r.tools {
            assert!(connector.is_match(c), "{n}: tools.{c}");
            for p in patterns {
                assert!(!p.is_empty() && tool.is_match(p), "{n}: tools.{c} pattern");
            }
        }
        let keyed = r.resources.keys().chain(r.deny.keys()).chain(r.args.keys());
        for c in keyed.chain(r.run.iter().flat_map(|run| run.mcp.keys())) {
            assert!(connector.is_match(c), "{n}: connector {c}");
        }
        for (c, tools) in &r.args {
            for (t, params) in tools {
                assert!(param.is_match(t), "{n}: args.{c}.{t}");
                for (p, rule) in params {
                    if let Some(pat) = &rule.pattern {
                        assert!(pattern::check(pat).is_ok(), "{n}: args.{c}.{t}.{p}.pattern");
                    }
                    if let Some(values) = &rule.enum_ {
                        assert!(!values.is_empty(), "{n}: args.{c}.{t}.{p}.enum");
                    }
                }
            }
        }
        if r.level == Level::L4 {
            assert!(
                r.judge.is_some() && r.goals.is_some(),
                "{n}: L4 needs judge and goals"
            );
        }
        if let Some(JudgeChecks::One(check)) = r.judge.as_ref().and_then(|j| j.check.as_ref()) {
            assert!(judge_repo.is_match(&check.repo), "{n}: judge.check.repo");
            assert!((1..=7).contains(&check.max_age_days), "{n}: max_age_days");
            let ci = check.workflow.is_some() && check.branch.is_some();
            let report = check.issue_label.is_some();
            assert!(ci != report, "{n}: a check is a CI judge or a report judge");
            if let Some(w) = &check.workflow {
                assert!(workflow.is_match(w), "{n}: judge.check.workflow");
                assert_eq!(check.branch.as_deref(), Some("main"), "{n}");
            }
        }
        let b = &r.budget;
        assert!(
            b.runs_per_week.unwrap_or(0) >= 1 && b.minutes_per_run.unwrap_or(0) >= 1,
            "{n}"
        );
    }
}

#[test]
fn every_template_generates_its_agent_configuration() {
    for loaded in agents() {
        let role = &loaded.role;
        let gateway = GatewayEndpoints::at(&airlock::sandbox::env::gateway_url(), role);
        let settings =
            claude_settings(role, &gateway).unwrap_or_else(|e| panic!("{}: {e}", role.role));
        assert_eq!(settings["permissions"]["defaultMode"], "dontAsk");
        codex_config(role, &gateway).unwrap_or_else(|e| panic!("{}: {e}", role.role));
        let argv = agent_command(role, "/brief.md", "/config/settings").unwrap();
        let expected = match role.run.as_ref().unwrap().provider {
            Provider::Claude => "claude",
            Provider::Codex => "codex",
        };
        assert_eq!(argv[0], expected, "{}", role.role);
    }
}

/// The smoke role: a workflow a fresh host can hire and launch at once. It needs no
/// provider, connector, GitHub App or credential, writes nothing anywhere but its run's
/// workspace, has a small budget, and its own command is the workflow.sh beside it.
#[test]
fn hello_is_a_workflow_that_needs_nothing_and_runs_its_script() {
    let hello = load_all()
        .into_iter()
        .find(|l| l.role.role == "hello")
        .expect("roles/hello is shipped");
    let role = &hello.role;
    assert_eq!(role.kind, Kind::Workflow);
    assert_eq!(role.level, Level::L1, "the lowest level");
    assert!(role.run.is_none(), "a workflow role has no run section");
    assert!(role.identity.is_none(), "no GitHub identity");
    let w = &role.writes;
    assert!(
        w.repos.is_empty()
            && w.issues.is_empty()
            && w.pull_requests.is_empty()
            && w.board.is_empty()
            && w.reads.is_empty()
            && !w.workflows
            && !w.dispatch,
        "hello writes nothing"
    );
    assert!(role.tools.values().all(Vec::is_empty), "no connector tools");
    assert!(role.resources.is_empty() && role.args.is_empty());
    assert!(role.bash_prefixes().is_empty());
    let b = &role.budget;
    assert_eq!(b.github_writes_per_run, Some(0));
    assert_eq!(b.spend_usd, Some(0.0));
    assert!(
        b.minutes_per_run.is_some_and(|m| (1..=5).contains(&m)),
        "{b:?}"
    );
    assert!(b.runs_per_week.is_some());

    // Hiring it on a host with nothing configured lists no credential and refuses nothing.
    let cfg = airlock::config::parse(Path::new("airlock.yaml"), "{}\n").unwrap();
    assert_eq!(
        airlock::policy::hire::credential_lines(role, &cfg),
        Ok(Vec::new())
    );

    // Its command: the script beside role.yaml, a shell script that prints, writes its
    // workspace and lists it.
    let script = hello.workflow_text.as_deref().expect("hello/workflow.sh");
    let on_disk = std::fs::read_to_string(hello.dir.join(airlock::role::WORKFLOW_FILE)).unwrap();
    assert_eq!(script, on_disk);
    for needle in ["id", "uname", "AIRLOCK_WORKSPACE", "hello.txt", "ls"] {
        assert!(script.contains(needle), "workflow.sh does not use {needle}");
    }
    let gateway = GatewayEndpoints::at(&airlock::sandbox::env::gateway_url(), role);
    let files = airlock::supervisor::agent_files::agent_files(&hello, &gateway).unwrap();
    assert_eq!(
        files.argv.unwrap(),
        ["/bin/sh", airlock::supervisor::agent_files::WORKFLOW_PATH]
    );
    // `sh -n` accepts it.
    let ok = std::process::Command::new("/bin/sh")
        .arg("-n")
        .arg(hello.dir.join(airlock::role::WORKFLOW_FILE))
        .status()
        .unwrap();
    assert!(ok.success());
}

/// Only a workflow role has a workflow.sh; an agent template never carries one.
#[test]
fn only_workflow_templates_carry_a_workflow_script() {
    for loaded in load_all() {
        assert_eq!(
            loaded.workflow_text.is_some(),
            loaded.role.kind == Kind::Workflow,
            "{}",
            loaded.role.role
        );
    }
}
