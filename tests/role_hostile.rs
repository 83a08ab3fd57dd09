//! Hostile role files: parse_role must never panic, must refuse resource bombs, and must
//! never echo a value it refuses. No timing assertions: each case only has to return.

use airlock::diag::Problem;
use airlock::role::parse_role;
use proptest::prelude::*;
use std::path::Path;

const VALID: &str = r#"schema: 1
role: scout
level: L4
brief: brief.md
goals: goals.md
judge:
  metric: coverage
  source: ci
  pass: ">= 80"
  check: [{repo: acme/widgets, workflow: ci.yml, branch: main, max_age_days: 3}]
identity: {github_login: bot, key_store: "ssm:/roles/scout"}
writes: {repos: [acme/widgets], issues: [comment], board: [general], dispatch: true}
tools:
  board: ["board_*"]
  github: [get_issue]
resources: {docs: ["https://docs.example.com/*", "*"]}
deny: {github: [delete_repo]}
args:
  github:
    get_issue:
      number: {min: 1, max: 10}
      owner: {const: acme, pattern: "[a-z]+"}
budget: {runs_per_week: 7, minutes_per_run: 30, spend_usd: 0}
run:
  model: m
  tools: [Agent]
  mcp: {board: {via: airlock}, github: {url: "https://x"}}
scopes: {board: [read]}
"#;

const MARKER: &str = "zz-SECRET-MARKER-77";

fn file() -> &'static Path {
    Path::new("roles/scout/role.yaml")
}

fn refused(text: &str) -> Vec<Problem> {
    parse_role(file(), text).expect_err("hostile input must be refused")
}

fn rendered(p: &[Problem]) -> String {
    p.iter().map(|p| format!("{p}\n")).collect()
}

#[test]
fn the_valid_document_is_valid() {
    parse_role(file(), VALID).expect("valid");
}

#[test]
fn deep_flow_nesting_is_refused() {
    let depth = 100_000;
    let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let p = refused(&text);
    assert!(rendered(&p).contains("deep"), "{p:?}");
    let text = format!("a: {}{}", "{a: ".repeat(50_000), "}".repeat(50_000));
    let p = refused(&text);
    assert!(rendered(&p).contains("deep"), "{p:?}");
}

#[test]
fn deep_block_nesting_is_refused() {
    let mut text = String::new();
    for i in 0..200 {
        text.push_str(&" ".repeat(i));
        text.push_str("a:\n");
    }
    let p = refused(&text);
    assert!(rendered(&p).contains("deep"), "{p:?}");
}

#[test]
fn billion_laughs_is_refused_without_expansion() {
    let mut text = String::from("a0: &a0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        let items = [prev.as_str(); 9].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{items}]\n"));
    }
    text.push_str("floors: *a9\n");
    let p = refused(&text);
    let out = rendered(&p);
    assert!(out.contains("anchors and aliases are not allowed"), "{out}");
    assert!(p.len() <= 51, "problem count is bounded, got {}", p.len());
}

#[test]
fn a_single_alias_in_a_valid_document_is_refused() {
    let text = VALID.replace("board: [general]", "board: &g [general]") + "floors: *g\n";
    let p = refused(&text);
    assert!(p
        .iter()
        .any(|p| p.path == "writes.board" && p.message.contains("anchor")));
    assert!(p
        .iter()
        .any(|p| p.path == "floors" && p.message.contains("alias")));
}

#[test]
fn a_ten_megabyte_scalar_is_refused() {
    let text = format!(
        "{VALID}floors: [\"{MARKER}{}\"]\n",
        "x".repeat(10 * 1024 * 1024)
    );
    let p = refused(&text);
    assert_eq!(p.len(), 1);
    assert!(p[0].message.contains("at most 262144 bytes"), "{p:?}");
    assert!(!rendered(&p).contains(MARKER));
}

#[test]
fn a_large_scalar_within_the_file_bound_is_refused() {
    let text = VALID.replace(
        "brief: brief.md",
        &format!("brief: \"{MARKER}{}\"", "x".repeat(100_000)),
    );
    let p = refused(&text);
    assert!(
        p.iter()
            .any(|p| p.path == "brief" && p.message.contains("at most 16384 bytes")),
        "{p:?}"
    );
    assert!(!rendered(&p).contains(MARKER));
}

#[test]
fn many_keys_are_refused() {
    let mut text = String::new();
    for i in 0..25_000 {
        text.push_str(&format!("k{i}: 1\n"));
    }
    let p = refused(&text);
    assert!(rendered(&p).contains("more than 20000 values"), "{p:?}");
}

#[test]
fn many_duplicate_keys_give_a_bounded_report() {
    let text = "floors: []\n".repeat(20_000);
    let p = refused(&text);
    assert!(p.len() <= 51, "got {}", p.len());
    assert!(p.iter().any(|p| p.message.contains("only the first 50")));
}

#[test]
fn many_unknown_keys_are_all_reported_and_secret_shaped_ones_by_position() {
    // Secret-shaped keys (GitHub tokens) are named by position only.
    let mut text = VALID.to_string();
    for i in 0..500 {
        text.push_str(&format!("ghp_{}{i:04}: 1\n", "SECRETMARKER".repeat(3)));
    }
    let p = refused(&text);
    assert_eq!(p.len(), 500);
    assert!(!rendered(&p).contains("SECRETMARKER"));
    assert!(p.iter().all(|p| p.path.starts_with("<key #")), "{p:?}");
    // Plain identifiers are named.
    let mut text = VALID.to_string();
    for i in 0..500 {
        text.push_str(&format!("{MARKER}{i}: 1\n"));
    }
    let p = refused(&text);
    assert_eq!(p.len(), 500);
    assert!(p.iter().all(|p| p.path.starts_with(MARKER)), "{p:?}");
}

#[test]
fn a_long_unterminated_string_is_refused() {
    let text = format!("role: \"{}", "y".repeat(200_000));
    let p = refused(&text);
    assert!(rendered(&p).contains("is not valid YAML"), "{p:?}");
}

#[test]
fn control_characters_and_bom_do_not_panic() {
    for text in [
        "\u{feff}schema: 1\n",
        "a: \u{1}\n",
        "\t- x\n",
        "a: \"\\x00\"\n",
        "%YAML 1.1\n---\na: 1\n",
        "%TAG ! tag:x,2000:\n---\na: !b c\n",
    ] {
        let _ = parse_role(file(), text);
    }
}

/// String-valued places of the valid document, for planting a hostile value.
const VALUE_SITES: &[&str] = &[
    "role: scout",
    "level: L4",
    "brief: brief.md",
    "goals: goals.md",
    "metric: coverage",
    "workflow: ci.yml",
    "branch: main",
    "github_login: bot",
    "repos: [acme/widgets]",
    "issues: [comment]",
    "board: [\"board_*\"]",
    "github: [get_issue]",
    "deny: {github: [delete_repo]}",
    "const: acme",
    "model: m",
    "tools: [Agent]",
    "url: \"https://x\"",
    "scopes: {board: [read]}",
];

fn plant(site: &str, value: &str) -> String {
    let (key, old) = site.split_once(": ").unwrap();
    let quoted = serde_json::to_string(value).unwrap();
    let new = match old.chars().next() {
        Some('[') => format!("{key}: [{quoted}]"),
        Some('{') => {
            let inner = old.trim_start_matches('{').split_once(": ").unwrap().0;
            format!("{key}: {{{inner}: [{quoted}]}}")
        }
        _ => format!("{key}: {quoted}"),
    };
    VALID.replacen(site, &new, 1)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_strings_never_panic(s in any::<String>()) {
        let _ = parse_role(file(), &s);
    }

    #[test]
    fn yaml_shaped_noise_never_panics(s in "[a-z0-9:\\-\\[\\]{}&*!#|>?,.'\" \n\t%@`~]{0,600}") {
        let _ = parse_role(file(), &s);
    }

    #[test]
    fn mutations_of_a_valid_document_never_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..3, "[a-z0-9:\\-\\[\\]{}&*!#|>?,.'\" \n]{0,3}"), 1..8)
    ) {
        let mut text = VALID.to_string();
        for (at, op, piece) in edits {
            let mut i = at.index(text.len() + 1);
            while !text.is_char_boundary(i) { i -= 1; }
            match op {
                0 => text.insert_str(i, &piece),
                1 => { let end = (i + piece.len().max(1)).min(text.len()); if text.is_char_boundary(end) { text.replace_range(i..end, ""); } }
                _ => { let end = (i + piece.len()).min(text.len()); if text.is_char_boundary(end) { text.replace_range(i..end, &piece); } }
            }
        }
        if let Ok((role, _)) = parse_role(file(), &text) {
            // Whatever got through is still a well-formed role.
            prop_assert!(!role.role.is_empty());
            prop_assert!(role.tools.keys().all(|k| !k.is_empty()));
        }
    }

    #[test]
    fn a_refused_value_is_never_echoed(
        site in proptest::sample::select(VALUE_SITES),
        tail in "[ -~\t\u{a0}-\u{ff}]{0,40}",
    ) {
        let value = format!("{MARKER}{tail}");
        let text = plant(site, &value);
        prop_assert!(text.contains(MARKER));
        if let Err(p) = parse_role(file(), &text) {
            prop_assert!(!rendered(&p).contains(MARKER), "{}", rendered(&p));
        }
    }
}
