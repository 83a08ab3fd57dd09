//! The composed per-role engine: the host's rails are checked on every call, on top of the
//! role's own grants, so a broad grant cannot reach what a rail forbids.

use airlock::policy::{Policies, RolePolicy};
use airlock::role::Role;
use serde_json::json;
use std::path::Path;

fn shipped_policies() -> Policies {
    Policies::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("policies"))
        .expect("shipped policies load")
}

fn role(yaml: &str) -> Role {
    serde_yaml::from_str(yaml).expect("test role parses")
}

const ROLE: &str = r#"
schema: 1
role: code
level: L2
brief: brief.md
writes: {}
tools:
  board: [board_*]
  github: [github_*, get_*]
resources:
  docs: ["file:///data/*"]
budget: {}
run:
  model: m
  bash: ["git log", "npm", "ls"]
"#;

#[test]
fn a_broad_tool_grant_cannot_reach_a_rail() {
    let p = RolePolicy::compile(&role(ROLE), &shipped_policies());
    let allowed = p.tool("github", "github_list_issues", &json!({}));
    assert!(allowed.allow, "{allowed:?}");
    for tool in [
        "github_delete_repo",
        "get_hired_agents",
        "github_purge_cache",
    ] {
        let d = p.tool("github", tool, &json!({}));
        assert!(!d.allow, "{tool}: {d:?}");
        assert!(d.rule.starts_with("rail: "), "{tool}: {d:?}");
    }
}

#[test]
fn a_broad_bash_grant_cannot_reach_a_rail() {
    // `npm` alone is refused when a role file loads; compiled directly here to show the
    // per-call check holds on its own.
    let p = RolePolicy::compile(&role(ROLE), &shipped_policies());
    assert!(p.bash("npm test").allow);
    let d = p.bash("npm publish");
    assert!(!d.allow, "{d:?}");
    assert!(d.rule.starts_with("rail: "), "{d:?}");
    let d = p.bash("'npm' 'publish' --tag x");
    assert!(!d.allow, "{d:?}");
    assert!(p.bash("git log --oneline").allow);
    assert!(!p.bash("git log; rm -rf /").allow);
}

#[test]
fn operator_guards_apply_to_every_role() {
    let tmp = tempfile::tempdir().unwrap();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    copy_dir(&shipped, tmp.path());
    std::fs::write(
        tmp.path().join("bash-guards.yaml"),
        "version: 1\nwrappers: []\nguards:\n  - program: ls\n    options: [--dired]\n",
    )
    .unwrap();
    let policies = Policies::load(tmp.path()).expect("loads");
    let p = RolePolicy::compile(&role(ROLE), &policies);
    assert!(p.bash("ls -la").allow);
    let d = p.bash("ls --dired");
    assert!(!d.allow && d.rule.starts_with("guard: "), "{d:?}");
}

#[test]
fn resources_go_through_the_same_engine() {
    let p = RolePolicy::compile(&role(ROLE), &shipped_policies());
    assert!(p.resource("docs", "file:///data/a.txt").allow);
    assert!(!p.resource("docs", "file:///data-evil/a.txt").allow);
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}
