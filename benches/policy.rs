//! Policy throughput on one core, with plain `std::time` (no harness):
//! bash, tool and resource decisions per second over a mixed, realistic input set with
//! precompiled policies, and the time to load and validate 1,000 role directories.
//!
//! Run: `cargo bench --bench policy`. Targets: >= 1,000,000 decisions/s for each kind,
//! < 200 ms for 1,000 role files.

use airlock::catalog::Catalog;
use airlock::policy::Policies;
use airlock::policy::RolePolicy;
use airlock::role::Role;
use serde_json::{json, Value};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

const ROLE: &str = r#"schema: 1
role: bench
level: L2
brief: brief.md
writes:
  repos: [acme/web]
  issues: [create, comment, label]
  pull_requests: [open, comment]
tools:
  board: ["board_*"]
  github: [get_issue, list_issues, list_pull_requests, create_issue, add_comment, "search_*"]
resources:
  files: ["file:///data/*", "file:///etc/hostname", "notes:*"]
deny:
  github: [merge_pull_request, "delete_*"]
  files: ["file:///data/private/*", "file:///data/secret.txt"]
args:
  github:
    create_issue:
      repo: {enum: ["acme/web", "acme/api"]}
      title: {maxLength: 120}
      priority: {min: 1, max: 5}
    add_comment:
      body: {maxLength: 4000}
      issue: {pattern: "[0-9]{1,6}"}
budget:
  runs_per_week: 20
  minutes_per_run: 30
run:
  model: claude-sonnet
  bash: ["git log", "git status", "git diff", "cargo test", "cargo build", "ls", "cat", "rg", "gh pr view"]
"#;

/// Run `f` over `inputs` in rounds until `min` has passed; return decisions per second.
fn rate<T>(inputs: &[T], min: Duration, mut f: impl FnMut(&T) -> bool) -> f64 {
    // Warm up.
    for x in inputs {
        black_box(f(black_box(x)));
    }
    let start = Instant::now();
    let mut n: u64 = 0;
    let mut allowed: u64 = 0;
    while start.elapsed() < min {
        for _ in 0..100 {
            for x in inputs {
                allowed += u64::from(black_box(f(black_box(x))));
            }
            n += inputs.len() as u64;
        }
    }
    black_box(allowed);
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    // `cargo bench --bench policy -- load` runs only the role-loading figure (for profiling).
    if std::env::args().any(|a| a == "load") {
        role_load();
        return;
    }
    let role: Role = serde_yaml::from_str(ROLE).expect("bench role parses");
    let min = Duration::from_secs(2);

    // The engine the gateway calls: the role's grants under the shipped policies, with the
    // rails checked on every call.
    let policies = Policies::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("policies"))
        .expect("shipped policies load");
    let engine = RolePolicy::compile(&role, &policies);
    let commands = [
        "git log --oneline -n 20",
        "git status -sb",
        "git diff --stat HEAD",
        "cargo test --release -- --nocapture",
        "ls -la src",
        "cat Cargo.toml",
        "rg -n 'fn main' src",
        "gh pr view 42 --comments",
        "git push origin main",
        "git log; rm -rf /",
        "git -c core.pager=sh log",
        "cargo +nightly test",
        "FOO=bar git log",
        "sudo ls",
        "git log $(id)",
        "/usr/bin/git log",
        "cat \"file with spaces.txt\"",
        "g\u{0456}t log",
    ];
    let r = rate(&commands, min, |c| engine.bash(c).allow);
    println!("bash decisions/s: {r:.0}");

    let calls: Vec<(&str, &str, Value)> = vec![
        ("board", "board_read", Value::Null),
        (
            "github",
            "get_issue",
            json!({"owner": "acme", "repo": "web", "number": 7}),
        ),
        ("github", "list_issues", json!({"state": "open"})),
        (
            "github",
            "create_issue",
            json!({"repo": "acme/web", "title": "Fix the flaky test", "priority": 2}),
        ),
        (
            "github",
            "create_issue",
            json!({"repo": "acme/evil", "title": "x", "priority": 2}),
        ),
        (
            "github",
            "add_comment",
            json!({"body": "Looks good to me.", "issue": "1234"}),
        ),
        (
            "github",
            "add_comment",
            json!({"body": "x", "issue": "12a"}),
        ),
        ("github", "merge_pull_request", json!({})),
        ("github", "delete_repo", json!({})),
        ("github", "search_code", json!({"q": "fn main"})),
        ("unknown", "get_issue", Value::Null),
        ("github", "bad name", Value::Null),
    ];
    let r = rate(&calls, min, |(c, t, a)| engine.tool(c, t, a).allow);
    println!("tool decisions/s: {r:.0}");

    let uris = [
        ("files", "file:///data/report.csv"),
        ("files", "file:///data/a/b/c/d.txt"),
        ("files", "file:///data-evil/x"),
        ("files", "file:///data/../etc/passwd"),
        ("files", "file:///data/private/key"),
        ("files", "FILE:///DATA/Secret.TXT"),
        ("files", "file:///data/%2e%2e/etc"),
        ("files", "file:///etc/hostname"),
        ("files", "notes:today"),
        ("files", "https://example.com/x?y=1#z"),
        ("other", "file:///data/x"),
    ];
    let r = rate(&uris, min, |(c, u)| engine.resource(c, u).allow);
    println!("resource decisions/s: {r:.0}");

    role_load();
    hostile_yaml();
}

/// Hostile role files are refused quickly and without memory blow-up; the figure is the
/// worst time over the set (the limits cut each one off early).
fn hostile_yaml() {
    let laughs = {
        let mut t = String::from(
            "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        for i in 1..10 {
            let prev = if i == 1 {
                "a".to_string()
            } else {
                format!("a{}", i - 1)
            };
            t.push_str(&format!("a{i}: &a{i} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
        }
        t
    };
    let cases: Vec<(&str, String)> = vec![
        ("100k-deep flow nesting", "[".repeat(100_000)),
        ("50k-deep mapping nesting", "{a: ".repeat(50_000)),
        ("billion laughs", laughs),
        (
            "10 MB scalar",
            format!("role: \"{}\"\n", "x".repeat(10 << 20)),
        ),
        (
            "25k keys",
            (0..25_000).map(|i| format!("k{i}: 1\n")).collect(),
        ),
    ];
    let file = Path::new("hostile/role.yaml");
    let mut worst = Duration::ZERO;
    for (name, text) in &cases {
        let start = Instant::now();
        let refused = airlock::role::parse_role(file, black_box(text)).is_err();
        let took = start.elapsed();
        worst = worst.max(took);
        println!(
            "hostile yaml, {name}: {:.2} ms (refused: {refused})",
            took.as_secs_f64() * 1000.0
        );
        assert!(refused, "{name} must be refused");
    }
    println!(
        "hostile yaml worst case: {:.2} ms",
        worst.as_secs_f64() * 1000.0
    );
}

fn role_load() {
    let policies = Policies::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("policies"))
        .expect("shipped policies load");
    let tmp = tempfile::tempdir().expect("temp dir");
    let roles = tmp.path().join("roles");
    for i in 0..1000 {
        let dir = roles.join(format!("bench-{i}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let text = ROLE.replace("role: bench", &format!("role: bench-{i}"));
        std::fs::write(dir.join("role.yaml"), text).expect("write role");
        std::fs::write(
            dir.join("brief.md"),
            format!("# Brief {i}\n\nDo the work.\n"),
        )
        .expect("write brief");
    }
    let layers = vec![roles];
    // One untimed pass warms the page cache, as on a daemon reload.
    black_box(Catalog::load(&layers, &policies));
    let mut best = Duration::MAX;
    let mut refused = 0;
    let mut loaded = 0;
    for _ in 0..5 {
        let start = Instant::now();
        let (catalog, problems) = black_box(Catalog::load(black_box(&layers), &policies));
        best = best.min(start.elapsed());
        loaded = catalog.len();
        refused = problems.len();
    }
    println!(
        "load+validate 1000 role files (schema, files, rails, secret scan, classes): {:.1} ms (best of 5; {loaded} loaded, {refused} problems)",
        best.as_secs_f64() * 1000.0
    );
    assert_eq!(loaded, 1000, "every generated role must load");
}
