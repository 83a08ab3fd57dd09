//! Host policies: classes and protected authority, rails, secrets, levels, autonomy, and the
//! policy store, against the shipped `policies/` directory and tempdir copies of it.

use airlock::diag::Problem;
use airlock::policy::autonomy::{effective_level, RepoAutonomy};
use airlock::policy::classes::{canonicalize, is_legacy_alias};
use airlock::policy::levels::Landing;
use airlock::policy::rails::check_role;
use airlock::policy::Policies;
use airlock::role::{Level, LoadedRole, Role};
use airlock::secret_shapes::find_secret;
use std::path::{Path, PathBuf};

fn shipped_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("policies")
}

fn shipped() -> Policies {
    match Policies::load(&shipped_dir()) {
        Ok(p) => p,
        Err(problems) => panic!("shipped policies refused: {problems:#?}"),
    }
}

/// A clean role file for folder `class`; `extra` is appended (YAML at top level).
fn role_yaml(class: &str, level: &str, writes_prs: &str, bash: &str, tools: &str) -> String {
    format!(
        "schema: 1\nrole: {class}\nlevel: {level}\nbrief: brief.md\n\
         writes:\n  repos: [example-org/example-repo]\n  issues: [comment]\n  pull_requests: {writes_prs}\n\
         tools:\n  board: [\"board_*\"]\n{tools}\
         budget:\n  runs_per_week: 10\n  minutes_per_run: 30\n\
         run:\n  model: test-model\n  bash: {bash}\n"
    )
}

/// Build a LoadedRole as if read from `/roles/<folder>/`, without touching the disk.
fn loaded(folder: &str, yaml: &str, brief: &str, goals: Option<&str>) -> LoadedRole {
    let doc: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
    let role: Role = serde_yaml::from_value(doc.clone()).unwrap();
    let dir = PathBuf::from("/roles").join(folder);
    LoadedRole {
        role,
        file: dir.join("role.yaml"),
        dir,
        doc,
        brief_text: brief.to_string(),
        goals_text: goals.map(str::to_string),
        workflow_text: None,
    }
}

fn check(folder: &str, yaml: &str) -> Vec<Problem> {
    check_role(&loaded(folder, yaml, "Do the job.\n", None), &shipped())
}

fn paths(problems: &[Problem]) -> Vec<&str> {
    problems.iter().map(|p| p.path.as_str()).collect()
}

// ---- the shipped policies ----

#[test]
fn shipped_policies_load() {
    let p = shipped();
    assert!(p.autonomy_for("example-org/example-repo").is_some());
    assert!(p.autonomy_for("example-org/other").is_none());
    assert!(!p.rails.bash.is_empty());
    assert!(!p.rails.tools.is_empty());
}

#[test]
fn a_clean_role_passes_every_rail() {
    let y = role_yaml(
        "code",
        "L2",
        "[open, comment]",
        "[\"git log\", \"cargo test\"]",
        "",
    );
    assert_eq!(check("code", &y), vec![]);
}

// ---- classes ----

#[test]
fn only_three_aliases() {
    assert_eq!(canonicalize("implementer"), "code");
    assert_eq!(canonicalize("reviewer"), "review");
    assert_eq!(canonicalize("operator-interaction"), "interaction");
    for not_alias in [
        "worker",
        "analyst",
        "canary",
        "tess",
        "ultron",
        "implementers",
        "review",
    ] {
        assert!(!is_legacy_alias(not_alias), "{not_alias}");
        assert_eq!(canonicalize(not_alias), not_alias);
    }
}

#[test]
fn authority_comes_from_the_canonical_class_only() {
    let p = shipped();
    assert_eq!(p.classes.authority_of("merge-gate"), ["merge"]);
    assert_eq!(
        p.classes.authority_of("validator"),
        ["validation-certificate"]
    );
    let orch = p.classes.authority_of("orchestrator");
    for a in ["orchestrate", "manage-topology", "issue-leases"] {
        assert!(orch.iter().any(|x| x == a), "{a}");
    }
    assert_eq!(
        p.classes.authority_of("team-leader"),
        ["use-leased-capacity"]
    );
    assert_eq!(
        p.classes.authority_of("operator-interaction"),
        ["request-status-surface"]
    );
    for none in [
        "code",
        "implementer",
        "review",
        "merge-gate-2",
        "my-merge-gate",
        "worker",
    ] {
        assert!(p.classes.authority_of(none).is_empty(), "{none}");
    }
    assert_eq!(p.classes.holder_of("merge"), Some("merge-gate"));
}

#[test]
fn merge_is_refused_outside_merge_gate() {
    for folder in [
        "code",
        "review",
        "merge-gate-2",
        "my-merge-gate",
        "validator",
        "orchestrator",
    ] {
        let y = role_yaml(folder, "L3", "[open, merge]", "[]", "");
        let problems = check(folder, &y);
        assert!(
            problems
                .iter()
                .any(|p| p.path == "writes.pull_requests[1]" && p.message.contains("merge-gate")),
            "{folder}: {problems:#?}"
        );
    }
    let y = role_yaml("merge-gate", "L3", "[merge, comment]", "[]", "");
    assert_eq!(check("merge-gate", &y), vec![]);
}

#[test]
fn merge_tools_and_prefixes_are_refused_outside_merge_gate() {
    let tools = "  github: [merge_pull_request, get_pull_request]\n";
    let y = role_yaml("code", "L2", "[open]", "[\"gh pr merge\"]", tools);
    let problems = check("code", &y);
    let ps = paths(&problems);
    assert!(ps.contains(&"tools.github[0]"), "{problems:#?}");
    assert!(!ps.contains(&"tools.github[1]"), "{problems:#?}");
    assert!(ps.contains(&"run.bash[0]"), "{problems:#?}");
    // merge-gate may hold them.
    let y = role_yaml("merge-gate", "L3", "[merge]", "[\"gh pr merge\"]", tools);
    assert_eq!(check("merge-gate", &y), vec![]);
}

#[test]
fn other_protected_powers_stay_with_their_class() {
    let lease = "  fleet: [issue_lease]\n";
    let y = role_yaml("team-leader", "L2", "[]", "[]", lease);
    assert!(paths(&check("team-leader", &y)).contains(&"tools.fleet[0]"));
    let y = role_yaml("orchestrator", "L2", "[]", "[]", lease);
    assert_eq!(check("orchestrator", &y), vec![]);
    let cert = "  ci: [issue_validation_certificate]\n";
    let y = role_yaml("code", "L2", "[]", "[]", cert);
    assert!(paths(&check("code", &y)).contains(&"tools.ci[0]"));
    let y = role_yaml("validator", "L2", "[]", "[]", cert);
    assert_eq!(check("validator", &y), vec![]);
}

#[test]
fn role_field_must_match_folder_and_alias_folders_are_refused() {
    // role: says merge-gate, folder says code: the folder decides, and the mismatch refuses.
    let y = role_yaml("merge-gate", "L3", "[merge]", "[]", "");
    let problems = check("code", &y);
    let ps = paths(&problems);
    assert!(ps.contains(&"role"), "{problems:#?}");
    assert!(ps.contains(&"writes.pull_requests[0]"), "{problems:#?}");
    let y = role_yaml("implementer", "L2", "[open]", "[]", "");
    let problems = check("implementer", &y);
    assert!(
        problems.iter().any(|p| p.message.contains("legacy alias")),
        "{problems:#?}"
    );
    let y = role_yaml("implementer", "L2", "[open]", "[]", "");
    let problems = check("code", &y);
    assert!(
        problems
            .iter()
            .any(|p| p.path == "role" && p.message.contains("`code`")),
        "{problems:#?}"
    );
}

// ---- hard waits and hire chains ----

#[test]
fn hard_wait_bash_prefixes_are_refused() {
    for bad in [
        "sudo",
        "sudo -u root id",
        "/usr/bin/sudo",
        "su",
        "doas",
        "pkexec",
        "git push",
        "git push origin main",
        "git",
        "gi",
        "git -C repo",
        "gh",
        "gh pr",
        "gh auth token",
        "gh release create",
        "cargo",
        "cargo publish",
        "npm publish",
        "npm",
        "twine upload",
        "docker push",
        "aws sts get-session-token",
        "gcloud auth print-access-token",
        "kubectl apply",
        "terraform destroy",
        "bash",
        "env",
        "airlockctl",
        "airlockctl hire tess --role code",
        "",
    ] {
        let y = role_yaml("code", "L2", "[open]", &format!("[{bad:?}]"), "");
        let problems = check("code", &y);
        assert!(
            problems
                .iter()
                // `gh pr` is refused as merge authority (classes.yaml), the rest as rails.
                .any(|p| p.path == "run.bash[0]"
                    && (p.message.contains("rail ") || bad == "gh pr")),
            "{bad:?} should be refused: {problems:#?}"
        );
    }
}

#[test]
fn narrow_bash_prefixes_are_accepted() {
    for ok in [
        "git log",
        "git diff",
        "git status",
        "cargo test",
        "cargo build",
        "cargo clippy",
        "npm test",
        "gh api",
        "gh pr view",
        "gh release view",
        "ls",
        "cat",
        "rg",
        "shellcheck",
        "sha256sum",
    ] {
        let y = role_yaml("code", "L2", "[open]", &format!("[{ok:?}]"), "");
        assert_eq!(check("code", &y), vec![], "{ok:?}");
    }
}

#[test]
fn hire_fire_and_control_tools_are_refused() {
    for bad in [
        "hire_agent",
        "hire*",
        "airlock_hire",
        "airlock_fire",
        "airlock_status",
        "airlock_*",
        "air*",
        "*",
        "fire_instance",
        "agents_fire",
        "unhire",
        "delete_repository",
        "create_release",
        "mint_token",
        "sudo_exec",
    ] {
        let tools = format!("  ops: [{bad:?}]\n");
        let y = role_yaml("code", "L2", "[open]", "[]", &tools);
        let problems = check("code", &y);
        assert!(
            problems
                .iter()
                .any(|p| p.path == "tools.ops[0]" && p.message.contains("rail ")),
            "{bad:?} should be refused: {problems:#?}"
        );
    }
    let p = shipped();
    assert!(p.rails.forbidden_tool("board_delete_post").is_some());
    assert!(p.rails.forbidden_tool("Airlock_Hire").is_some());
    assert!(p.rails.forbidden_tool("board_post").is_none());
    let argv = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    assert!(p.rails.forbidden_argv(&argv("git push origin x")).is_some());
    assert!(p.rails.forbidden_argv(&argv("git log")).is_none());
    for ok in [
        "board_*",
        "board_post",
        "get_issue",
        "github_*",
        "firebase_get",
        "list_*",
    ] {
        let tools = format!("  ops: [{ok:?}]\n");
        let y = role_yaml("code", "L2", "[open]", "[]", &tools);
        assert_eq!(check("code", &y), vec![], "{ok:?}");
    }
}

// ---- secrets ----

fn secret_samples() -> Vec<(&'static str, String)> {
    let a36 = "A1b2C3d4".repeat(5)[..36].to_string();
    vec![
        ("GitHub", format!("ghp_{a36}")),
        ("GitHub", format!("gho_{a36}")),
        ("GitHub", format!("ghu_{a36}")),
        ("GitHub", format!("ghs_{a36}")),
        ("GitHub", format!("ghr_{a36}")),
        ("GitHub", format!("github_pat_11ABCDEFG0{}", "x".repeat(59))),
        ("AWS", "AKIAIOSFODNN7EXAMPL3".to_string()),
        ("AWS", "ASIAY34FZKBOKMUTVV7A".to_string()),
        ("Google", format!("AIza{}", &"Sy0123456789abcdefghijklmnopqrstu_-"[..35])),
        ("Slack", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp".to_string()),
        ("Slack", "xoxp-1234567890-abcdefghij".to_string()),
        ("OpenAI", format!("sk-{}", "Zz9".repeat(16))),
        ("OpenAI", format!("sk-proj-{}", "Qq7_".repeat(12))),
        ("Anthropic", format!("sk-ant-api03-{}", "Rr5-".repeat(20))),
        ("private key", "-----BEGIN RSA PRIVATE KEY-----".to_string()),
        ("private key", "-----BEGIN OPENSSH PRIVATE KEY-----".to_string()),
        ("private key", "-----BEGIN PRIVATE KEY-----".to_string()),
        (
            "JSON Web Token",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
                .to_string(),
        ),
        ("URL", "https://deploy:hunter2hunter2@example.com/x".to_string()),
        ("GitLab", format!("glpat-{}", "Ab1".repeat(8))),
        ("npm", format!("npm_{a36}")),
        ("Hugging Face", format!("hf_{}", "Hh4".repeat(12))),
    ]
}

fn assert_hidden(problems: &[Problem], secret: &str) {
    for p in problems {
        let shown = format!("{p} {p:?}");
        assert!(!shown.contains(secret), "problem leaks the secret: {shown}");
    }
    let json = serde_json::to_string(problems).unwrap();
    assert!(!json.contains(secret));
}

#[test]
fn secret_shapes_are_detected_in_values_keys_brief_and_goals() {
    let p = shipped();
    let clean = role_yaml("code", "L2", "[open]", "[\"git log\"]", "");
    for (kind, secret) in secret_samples() {
        assert!(find_secret(&secret).is_some(), "{kind} not detected");
        let embedded = format!("before {secret} after");
        assert!(
            find_secret(&embedded).is_some(),
            "{kind} not detected inside text"
        );

        // A value.
        let y = format!("{clean}floors:\n  - {:?}\n", embedded);
        let problems = check_role(&loaded("code", &y, "brief\n", None), &p);
        assert!(
            problems.iter().any(|q| q.path == "floors[0]"),
            "{kind} in a value: {problems:#?}"
        );
        assert_hidden(&problems, &secret);

        // A key: the document carries it, the path must not.
        let mut doc: serde_yaml::Value = serde_yaml::from_str(&clean).unwrap();
        let tools = doc.get_mut("tools").unwrap().as_mapping_mut().unwrap();
        tools.insert(
            serde_yaml::Value::String(secret.clone()),
            serde_yaml::Value::Sequence(vec![]),
        );
        let mut l = loaded("code", &clean, "brief\n", None);
        l.doc = doc;
        let problems = check_role(&l, &p);
        assert!(
            problems
                .iter()
                .any(|q| q.path == "tools" && q.message.contains("a key here")),
            "{kind} in a key: {problems:#?}"
        );
        assert_hidden(&problems, &secret);

        // The brief, with its line number.
        let brief = format!("# Brief\n\nUse {secret} to log in.\n");
        let problems = check_role(&loaded("code", &clean, &brief, None), &p);
        assert!(
            problems
                .iter()
                .any(|q| q.path == "brief line 3" && q.file.ends_with("brief.md")),
            "{kind} in the brief: {problems:#?}"
        );
        assert_hidden(&problems, &secret);

        // The goals.
        let with_goals = clean.replace("brief: brief.md\n", "brief: brief.md\ngoals: goals.md\n");
        let goals = format!("{secret}\n");
        let problems = check_role(&loaded("code", &with_goals, "b\n", Some(&goals)), &p);
        assert!(
            problems
                .iter()
                .any(|q| q.path == "goals line 1" && q.file.ends_with("goals.md")),
            "{kind} in the goals: {problems:#?}"
        );
        assert_hidden(&problems, &secret);

        // A workflow role's script.
        let mut l = loaded("code", &clean, "b\n", None);
        l.workflow_text = Some(format!("echo hi\ncurl -H 'x: {secret}' x\n"));
        let problems = check_role(&l, &p);
        assert!(
            problems
                .iter()
                .any(|q| q.path == "workflow line 2" && q.file.ends_with("workflow.sh")),
            "{kind} in the workflow script: {problems:#?}"
        );
        assert_hidden(&problems, &secret);
    }
}

#[test]
fn ordinary_text_is_not_a_secret() {
    for s in [
        "Open one pull request per issue; never merge.",
        "Run cargo test before asking for review.",
        "token budget: 20000",
        "ghp_short",
        "AKIA lowercase akiaiosfodnn7example",
        "BEGIN PRIVATE KEY without dashes",
        "sk-learn",
    ] {
        assert_eq!(find_secret(s), None, "{s}");
    }
}

// ---- levels ----

#[test]
fn levels_permit_what_they_say() {
    let p = shipped();
    let l1 = p.permits(Level::L1);
    assert_eq!(l1.issues, ["comment"]);
    assert_eq!(l1.land, Landing::Never);
    assert!(!l1.workflow_files);
    let l2 = p.permits(Level::L2);
    assert!(l2.pull_requests.iter().any(|a| a == "open"));
    assert_eq!(l2.land, Landing::Never);
    assert_eq!(p.permits(Level::L3).land, Landing::AfterHumanApproval);
    assert_eq!(p.permits(Level::L4).land, Landing::ByRatchet);
}

#[test]
fn role_writes_stay_within_its_level() {
    let y = role_yaml("code", "L1", "[open]", "[]", "");
    let problems = check("code", &y);
    assert!(
        paths(&problems).contains(&"writes.pull_requests[0]"),
        "{problems:#?}"
    );
    let y = role_yaml("merge-gate", "L2", "[merge]", "[]", "");
    let problems = check("merge-gate", &y);
    assert!(
        paths(&problems).contains(&"writes.pull_requests[0]"),
        "{problems:#?}"
    );
    let y = role_yaml("code", "L1", "[comment]", "[]", "")
        .replace("issues: [comment]", "issues: [comment]\n  workflows: true");
    let problems = check("code", &y);
    assert!(
        paths(&problems).contains(&"writes.workflows"),
        "{problems:#?}"
    );
}

// ---- autonomy ----

#[test]
fn autonomy_and_effective_level() {
    let p = shipped();
    let repo = p.autonomy_for("example-org/example-repo").unwrap();
    let cases = [
        (Level::L4, "docs/guide.md", Level::L4),
        (Level::L3, "docs/guide.md", Level::L3),
        (Level::L4, ".github/workflows/ci.yml", Level::L2),
        (Level::L4, "src/main.rs", Level::L2),
        (Level::L4, "src/auth/token.rs", Level::L1),
        (Level::L4, "README.md", Level::L3),
        (Level::L1, "docs/guide.md", Level::L1),
    ];
    for (role, path, want) in cases {
        let (got, rule) = effective_level(role, Some(repo), path);
        assert_eq!(got, want, "{role} {path}: {rule}");
        assert!(rule.contains("effective"), "{rule}");
    }
    let (got, rule) = effective_level(Level::L4, None, "docs/x.md");
    assert_eq!(got, Level::L1);
    assert!(rule.contains("no autonomy policy"), "{rule}");
    let (_, rule) = effective_level(Level::L4, Some(repo), "docs/x.md");
    assert!(rule.contains("docs/**"), "{rule}");
}

#[test]
fn autonomy_errors_name_file_and_key_never_value() {
    let f = Path::new("AUTONOMY.yaml");
    let bad = [
        ("default: L9\n", "default"),
        ("paths:\n  docs/**: L2\n", "default"),
        ("default: L2\nextra: 1\n", "extra"),
        ("default: L2\npaths:\n  docs/**: L7\n", "paths.docs/**"),
        ("default: L2\npaths:\n  docs/a**b: L2\n", "paths.docs/a**b"),
        ("default: L2\npaths:\n  /abs/**: L2\n", "paths./abs/**"),
        ("default: L2\npaths:\n  ../up: L2\n", "paths.../up"),
        ("default: L2\npaths:\n  \"[ab]\": L2\n", "paths.(key #1)"),
        ("default: L2\npaths: [a]\n", "paths"),
        ("- not a map\n", "(file)"),
    ];
    for (text, key) in bad {
        let problems = RepoAutonomy::parse(f, text).unwrap_err();
        assert!(
            problems.iter().any(|p| p.path == key && p.file == f),
            "{text:?}: {problems:#?}"
        );
    }
    let secret = format!("ghp_{}", "Z".repeat(36));
    let problems = RepoAutonomy::parse(f, &format!("default: {secret}\n")).unwrap_err();
    assert_hidden(&problems, &secret);
    let problems = RepoAutonomy::parse(f, &format!("default: L2\n{secret}: x\n")).unwrap_err();
    assert_hidden(&problems, &secret);
    let problems = RepoAutonomy::parse(f, "default: L2\ndefault: L3\n").unwrap_err();
    assert_eq!(problems[0].path, "(file)");
}

// ---- the store ----

fn copy_shipped(to: &Path) {
    for entry in walk(&shipped_dir()) {
        let rel = entry.strip_prefix(shipped_dir()).unwrap();
        let dest = to.join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&entry, &dest).unwrap();
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn load_with(file: &str, edit: impl Fn(String) -> String) -> Vec<Problem> {
    let tmp = tempfile::tempdir().unwrap();
    copy_shipped(tmp.path());
    let path = tmp.path().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, edit(text)).unwrap();
    match Policies::load(tmp.path()) {
        Ok(_) => Vec::new(),
        Err(problems) => problems
            .into_iter()
            .map(|mut p| {
                // Make the file relative to the policies dir for stable assertions.
                p.file = p.file.strip_prefix(tmp.path()).unwrap().to_path_buf();
                p
            })
            .collect(),
    }
}

fn has(problems: &[Problem], file: &str, key: &str) -> bool {
    problems
        .iter()
        .any(|p| p.file == Path::new(file) && p.path == key)
}

type Edit = Box<dyn Fn(String) -> String>;

#[test]
fn store_errors_name_file_and_key() {
    let secret = format!("sk-ant-{}", "k".repeat(30));
    let cases: Vec<(&str, Edit, &str)> = vec![
        ("classes.yaml", Box::new(|t| t + "\nextra: 1\n"), "extra"),
        (
            "classes.yaml",
            Box::new(|t| t.replace("schema: 1", "schema: 2")),
            "schema",
        ),
        (
            "classes.yaml",
            Box::new(|t| t.replace("  merge-gate: [merge]", "  code: [merge]")),
            "classes",
        ),
        (
            "classes.yaml",
            Box::new(|t| {
                t.replace(
                    "  validator: [validation-certificate]",
                    "  validator: [validation-certificate, merge]",
                )
            }),
            "authorities.merge",
        ),
        (
            "classes.yaml",
            Box::new(|t| t + "  implementer: []\n"),
            "classes.implementer",
        ),
        (
            "classes.yaml",
            Box::new(|t| t.replace("description: sole", "descripton: sole")),
            "authorities.merge.descripton",
        ),
        (
            "rails.yaml",
            Box::new(|t| t.replace("schema: 1", "schema: 1\nsecrets: off")),
            "secrets",
        ),
        (
            "rails.yaml",
            Box::new(|t| {
                t.replace(
                    "    prefixes:\n      - \"sudo\"",
                    "    prefix:\n      - \"sudo\"",
                )
            }),
            "bash[0].prefix",
        ),
        (
            "rails.yaml",
            Box::new(|t| t.replace("      - \"airlock_*\"", "      - \"airlock_[a]\"")),
            "tools[0].globs[0]",
        ),
        (
            "levels.yaml",
            Box::new(|t| t.replace("    land: by-ratchet", "    land: always")),
            "levels.L4.land",
        ),
        (
            "levels.yaml",
            Box::new(|t| t.replace("    issues: [comment]", "    issues: [comment, delete]")),
            "levels.L1.issues[1]",
        ),
        (
            "levels.yaml",
            Box::new(|t| t.replace("    land: by-ratchet", "    land: never")),
            "levels.L4",
        ),
        ("levels.yaml", Box::new(|t| t + "  L5: {}\n"), "levels.L5"),
        (
            "autonomy/example-org/example-repo.yaml",
            Box::new(|t| t.replace("docs/**: L4", "docs/**: L5")),
            "paths.docs/**",
        ),
        (
            "autonomy/example-org/example-repo.yaml",
            Box::new(move |t| t.replace("default: L2", &format!("default: {secret}"))),
            "default",
        ),
        (
            "autonomy/example-org/notes.txt",
            Box::new(|_| "x".into()),
            "(file)",
        ),
        ("classes.yaml", Box::new(|_| "a: [\n".into()), "(file)"),
    ];
    for (file, edit, key) in cases {
        let problems = load_with(file, edit);
        assert!(has(&problems, file, key), "{file} {key}: {problems:#?}");
        assert_hidden(&problems, &format!("sk-ant-{}", "k".repeat(30)));
        for p in &problems {
            assert!(
                !p.message.contains("invalid type"),
                "serde text leaked: {p}"
            );
        }
    }
}

#[test]
fn a_missing_policy_file_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    copy_shipped(tmp.path());
    std::fs::remove_file(tmp.path().join("rails.yaml")).unwrap();
    let problems = Policies::load(tmp.path()).unwrap_err();
    assert!(
        problems.iter().any(|p| p.file.ends_with("rails.yaml")),
        "{problems:#?}"
    );
}

#[test]
fn bash_guards_file_extends_the_builtin_guards_and_a_broken_one_refuses_the_set() {
    let tmp = tempfile::tempdir().unwrap();
    copy_shipped(tmp.path());
    let guards = "version: 1\nwrappers: [mytool]\nguards: []\n";
    std::fs::write(tmp.path().join("bash-guards.yaml"), guards).unwrap();
    let policies = Policies::load(tmp.path()).unwrap();
    assert!(policies.bash_guards.is_wrapper("mytool"));
    assert!(policies.bash_guards.is_wrapper("sudo"), "built-ins stay");

    std::fs::write(tmp.path().join("bash-guards.yaml"), "anything: [\n").unwrap();
    let problems = Policies::load(tmp.path()).unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.file.ends_with("bash-guards.yaml")),
        "{problems:#?}"
    );

    std::fs::remove_file(tmp.path().join("bash-guards.yaml")).unwrap();
    let policies = Policies::load(tmp.path()).unwrap();
    assert!(policies.bash_guards.is_wrapper("sudo"));
}
