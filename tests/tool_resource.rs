//! MCP tool and resource decisions against a role.

use airlock::policy::resource::{self, ResourcePolicy};
use airlock::policy::tool::{self, ToolPolicy};
use airlock::role::Role;
use serde_json::{json, Value};

const ROLE: &str = r#"
schema: 1
role: tester
level: L2
brief: brief.md
writes: {}
budget: {}
tools:
  board: ["board_*"]
  github:
    - get_issue
    - list_*
    - create_issue
    - search_code
    - set_priority
    - bad name
    - merge_pull_request
  files: ["*"]
  broken: [run_query]
resources:
  files:
    - file:///data/*
    - file:///etc/hostname
    - "repo://Acme/docs/*"
    - "notes:*"
    - "file:///exact/page?x=1"
  everything: ["*"]
  bad: ["file:///a*b", "no-scheme/*"]
deny:
  github:
    - merge_*
    - list_secrets
    - file:///anything/*
  files:
    - file:///data/private/*
    - FILE:///DATA/Secret.TXT
    - delete_file
  broken:
    - "not a pattern!"
  everything:
    - "secret:*"
args:
  github:
    create_issue:
      repo: {enum: ["acme/web", "acme/api"]}
      title: {maxLength: 10}
      labels_count: {min: 0, max: 3}
      draft: {const: false}
    set_priority:
      priority: {enum: [1, 2, 3]}
      code: {pattern: "P[0-9]"}
    search_code:
      query: {pattern: "(a+)+"}
  broken:
    run_query:
      q: {maxLength: 5}
"#;

fn role() -> Role {
    serde_yaml::from_str(ROLE).unwrap()
}

fn tool_rule(p: &ToolPolicy, c: &str, t: &str, a: Value) -> (bool, String) {
    let d = p.decide(c, t, &a);
    (d.allow, d.rule)
}

#[test]
fn tools_allow_and_deny() {
    let p = ToolPolicy::compile(&role());
    let cases: &[(&str, &str, bool, &str)] = &[
        ("board", "board_read", true, "tools.board[0]"),
        ("board", "board_", true, "tools.board[0]"),
        ("board", "boardx", false, "default: tool not listed"),
        ("github", "get_issue", true, "tools.github[0]"),
        ("github", "get_issues", false, "default: tool not listed"),
        ("github", "get_issu", false, "default: tool not listed"),
        ("github", "list_issues", true, "tools.github[1]"),
        ("github", "list_secrets", false, "deny.github[1]"),
        ("github", "merge_pull_request", false, "deny.github[0]"),
        ("github", "delete_repo", false, "default: tool not listed"),
        ("github", "bad name", false, "tool: invalid name"),
        ("github", "GET_ISSUE", false, "default: tool not listed"),
        ("files", "read_file", true, "tools.files[0]"),
        ("files", "delete_file", false, "deny.files[2]"),
        ("nope", "get_issue", false, "default: unknown connector"),
        ("", "get_issue", false, "default: unknown connector"),
        ("github", "", false, "tool: invalid name"),
        ("github", "get_issue\n", false, "tool: invalid name"),
        ("github", "get/issue", false, "tool: invalid name"),
        ("github", "gеt_issue", false, "tool: invalid name"),
        ("broken", "run_query", false, "deny.broken[0]"),
    ];
    for (c, t, allow, rule) in cases {
        let (a, r) = tool_rule(&p, c, t, Value::Null);
        assert_eq!((a, r.as_str()), (*allow, *rule), "{c}/{t}");
    }
    let long = "a".repeat(129);
    assert_eq!(
        tool_rule(&p, "files", &long, Value::Null).1,
        "tool: invalid name"
    );
    assert!(tool_rule(&p, "files", &"a".repeat(128), Value::Null).0);
}

#[test]
fn tool_args_rules() {
    let p = ToolPolicy::compile(&role());
    let ok = json!({"repo": "acme/web", "title": "short", "labels_count": 2, "draft": false});
    assert_eq!(
        tool_rule(&p, "github", "create_issue", ok.clone()),
        (true, "tools.github[2]".into())
    );
    let with = |k: &str, v: Value| {
        let mut o = ok.clone();
        o[k] = v;
        o
    };
    let without = |k: &str| {
        let mut o = ok.clone();
        o.as_object_mut().unwrap().remove(k);
        o
    };
    let r = "args.github.create_issue";
    let cases: Vec<(Value, bool, String)> = vec![
        (
            with("extra", json!("ignored")),
            true,
            "tools.github[2]".into(),
        ),
        (without("repo"), false, format!("{r}.repo: required")),
        (without("draft"), false, format!("{r}.draft: required")),
        (
            with("repo", json!("acme/evil")),
            false,
            format!("{r}.repo: enum"),
        ),
        (
            with("repo", json!("ACME/WEB")),
            false,
            format!("{r}.repo: enum"),
        ),
        (with("repo", json!(1)), false, format!("{r}.repo: enum")),
        (
            with("title", json!("0123456789")),
            true,
            "tools.github[2]".into(),
        ),
        (
            with("title", json!("01234567890")),
            false,
            format!("{r}.title: maxLength"),
        ),
        // Ten code points, more than ten bytes.
        (
            with("title", json!("éééééééééé")),
            true,
            "tools.github[2]".into(),
        ),
        (
            with("title", json!("😀😀😀😀😀😀😀😀😀😀😀")),
            false,
            format!("{r}.title: maxLength"),
        ),
        (with("title", json!(12)), false, format!("{r}.title: type")),
        (
            with("labels_count", json!(0)),
            true,
            "tools.github[2]".into(),
        ),
        (
            with("labels_count", json!(3)),
            true,
            "tools.github[2]".into(),
        ),
        (
            with("labels_count", json!(3.0)),
            true,
            "tools.github[2]".into(),
        ),
        (
            with("labels_count", json!(3.0001)),
            false,
            format!("{r}.labels_count: max"),
        ),
        (
            with("labels_count", json!(4)),
            false,
            format!("{r}.labels_count: max"),
        ),
        (
            with("labels_count", json!(-1)),
            false,
            format!("{r}.labels_count: min"),
        ),
        (
            with("labels_count", json!(-0.5)),
            false,
            format!("{r}.labels_count: min"),
        ),
        (
            with("labels_count", json!("2")),
            false,
            format!("{r}.labels_count: type"),
        ),
        (
            with("labels_count", json!(u64::MAX)),
            false,
            format!("{r}.labels_count: max"),
        ),
        (
            with("draft", json!(true)),
            false,
            format!("{r}.draft: const"),
        ),
        (
            with("draft", json!("false")),
            false,
            format!("{r}.draft: const"),
        ),
        (with("draft", json!(0)), false, format!("{r}.draft: const")),
        (
            with("draft", Value::Null),
            false,
            format!("{r}.draft: const"),
        ),
    ];
    for (args, allow, rule) in cases {
        let d = p.decide("github", "create_issue", &args);
        assert_eq!((d.allow, d.rule.as_str()), (allow, rule.as_str()), "{args}");
    }
    // Arguments must be an object (or absent).
    for bad in [json!([1]), json!("x"), json!(3), json!(true)] {
        assert_eq!(
            tool_rule(&p, "github", "create_issue", bad).1,
            "args: not an object"
        );
    }
    assert_eq!(
        tool_rule(&p, "github", "create_issue", Value::Null).1,
        format!("{r}.draft: required")
    );
    // Numbers in enums compare numerically; patterns match the whole value.
    let sp = "args.github.set_priority";
    for (args, allow, rule) in [
        (
            json!({"priority": 2, "code": "P1"}),
            true,
            "tools.github[4]".to_string(),
        ),
        (
            json!({"priority": 2.0, "code": "P9"}),
            true,
            "tools.github[4]".into(),
        ),
        (
            json!({"priority": 4, "code": "P1"}),
            false,
            format!("{sp}.priority: enum"),
        ),
        (
            json!({"priority": "2", "code": "P1"}),
            false,
            format!("{sp}.priority: enum"),
        ),
        (
            json!({"priority": 1, "code": "P12"}),
            false,
            format!("{sp}.code: pattern"),
        ),
        (
            json!({"priority": 1, "code": "xP1"}),
            false,
            format!("{sp}.code: pattern"),
        ),
        (
            json!({"priority": 1, "code": 1}),
            false,
            format!("{sp}.code: type"),
        ),
    ] {
        let d = p.decide("github", "set_priority", &args);
        assert_eq!((d.allow, d.rule.as_str()), (allow, rule.as_str()), "{args}");
    }
    // A refused pattern makes the tool always deny.
    for args in [json!({"query": "a"}), json!({"query": "aaaa"})] {
        assert_eq!(
            tool_rule(&p, "github", "search_code", args).1,
            "args.github.search_code.query: pattern"
        );
    }
    // Convenience function agrees with the compiled form.
    assert_eq!(
        tool::decide(&role(), "github", "create_issue", &ok),
        p.decide("github", "create_issue", &ok)
    );
}

#[test]
fn tool_reasons_do_not_echo_values() {
    let p = ToolPolicy::compile(&role());
    let secret = "ghp_SECRET0123456789abcdef";
    for (c, t, a) in [
        ("github", secret, json!({})),
        (
            "github",
            "create_issue",
            json!({"repo": secret, "title": "x", "labels_count": 1, "draft": false}),
        ),
        (
            "github",
            "create_issue",
            json!({"repo": "acme/web", "title": secret, "labels_count": 1, "draft": false}),
        ),
        (
            "github",
            "set_priority",
            json!({"priority": 1, "code": secret}),
        ),
        (secret, "get_issue", json!({})),
    ] {
        let d = p.decide(c, t, &a);
        assert!(!d.allow);
        assert!(
            !d.reason.contains("SECRET") && !d.rule.contains("SECRET"),
            "{d:?}"
        );
    }
}

fn res(p: &ResourcePolicy, c: &str, uri: &str) -> (bool, String) {
    let d = p.decide(c, uri);
    (d.allow, d.rule)
}

#[test]
fn resources_allow_and_deny() {
    let p = ResourcePolicy::compile(&role());
    let cases: &[(&str, &str, bool, &str)] = &[
        (
            "files",
            "file:///data/report.csv",
            true,
            "resources.files[0]",
        ),
        ("files", "file:///data/a/b/c", true, "resources.files[0]"),
        ("files", "file:///data/a?page=2", true, "resources.files[0]"),
        ("files", "FILE:///data/x", true, "resources.files[0]"),
        (
            "files",
            "file:///data",
            false,
            "default: resource not listed",
        ),
        (
            "files",
            "file:///data/",
            false,
            "default: resource not listed",
        ),
        (
            "files",
            "file:///data-evil/x",
            false,
            "default: resource not listed",
        ),
        (
            "files",
            "file:///dataevil",
            false,
            "default: resource not listed",
        ),
        (
            "files",
            "file:///Data/x",
            false,
            "default: resource not listed",
        ),
        (
            "files",
            "file:///data/../etc/passwd",
            false,
            "default: resource not listed",
        ),
        (
            "files",
            "file:///data/x/../../etc/passwd",
            false,
            "default: resource not listed",
        ),
        ("files", "file:///data/./x", true, "resources.files[0]"),
        ("files", "file:///data/x/../y", true, "resources.files[0]"),
        (
            "files",
            "file:///../data/x",
            false,
            "uri: '..' above the root",
        ),
        (
            "files",
            "file:///data/%2e%2e/etc",
            false,
            "uri: encoded dot segment",
        ),
        (
            "files",
            "file:///data/.%2E/etc",
            false,
            "uri: encoded dot segment",
        ),
        (
            "files",
            "file:///data/..%2Fetc",
            false,
            "uri: encoded slash, backslash, question mark or hash",
        ),
        (
            "files",
            "file:///data%2Fx",
            false,
            "uri: encoded slash, backslash, question mark or hash",
        ),
        (
            "files",
            "file:///data%2fx",
            false,
            "uri: encoded slash, backslash, question mark or hash",
        ),
        (
            "files",
            "file:///data/%5c..",
            false,
            "uri: encoded slash, backslash, question mark or hash",
        ),
        (
            "files",
            "file:///data/x%00",
            false,
            "uri: encoded control or non-ASCII byte",
        ),
        (
            "files",
            "file:///data/%C3%A9",
            false,
            "uri: encoded control or non-ASCII byte",
        ),
        (
            "files",
            "file:///data/%zz",
            false,
            "uri: malformed percent-escape",
        ),
        ("files", "file:///%64ata/x", true, "resources.files[0]"),
        (
            "files",
            "file:///data//etc/passwd",
            false,
            "uri: empty path segment",
        ),
        (
            "files",
            "file:///data/x\\..\\..\\etc",
            false,
            "uri: backslash",
        ),
        ("files", "file:///data/é", false, "uri: not printable ASCII"),
        (
            "files",
            "file:///data/a b",
            false,
            "uri: not printable ASCII",
        ),
        (
            "files",
            "file:///data/a\nb",
            false,
            "uri: not printable ASCII",
        ),
        (
            "files",
            "file:///data/a\u{200B}",
            false,
            "uri: not printable ASCII",
        ),
        ("files", "", false, "uri: empty URI"),
        ("files", "/data/x", false, "uri: no scheme"),
        ("files", "file:///etc/hostname", true, "resources.files[1]"),
        (
            "files",
            "file:///etc/hostname/",
            false,
            "default: resource not listed",
        ),
        (
            "files",
            "file:///etc/hostname?x",
            false,
            "default: resource not listed",
        ),
        (
            "files",
            "file:///etc/hostnames",
            false,
            "default: resource not listed",
        ),
        // Scheme and host in any case; path in case.
        (
            "files",
            "REPO://acme/docs/intro",
            true,
            "resources.files[2]",
        ),
        (
            "files",
            "repo://ACME/docs/intro",
            true,
            "resources.files[2]",
        ),
        (
            "files",
            "repo://acme/Docs/intro",
            false,
            "default: resource not listed",
        ),
        (
            "files",
            "repo://acme-evil/docs/intro",
            false,
            "default: resource not listed",
        ),
        (
            "files",
            "repo://u@acme/docs/intro",
            false,
            "uri: userinfo in authority",
        ),
        ("files", "notes:anything/at/all", true, "resources.files[3]"),
        ("files", "NOTES:x", true, "resources.files[3]"),
        ("files", "notesx:y", false, "default: resource not listed"),
        (
            "files",
            "file:///exact/page?x=1",
            true,
            "resources.files[4]",
        ),
        (
            "files",
            "file:///exact/page?x=2",
            false,
            "default: resource not listed",
        ),
        (
            "files",
            "file:///exact/page",
            false,
            "default: resource not listed",
        ),
        // Deny: any case, without query, fragment or trailing slash; prefix covers itself.
        ("files", "file:///data/private/key", false, "deny.files[0]"),
        ("files", "file:///data/private", false, "deny.files[0]"),
        ("files", "file:///data/private/", false, "deny.files[0]"),
        ("files", "file:///data/PRIVATE/key", false, "deny.files[0]"),
        (
            "files",
            "file:///data/Private/key?x=1#y",
            false,
            "uri: fragment",
        ),
        (
            "files",
            "file:///data/x/../private/key",
            false,
            "deny.files[0]",
        ),
        (
            "files",
            "file:///data/%70rivate/key",
            false,
            "deny.files[0]",
        ),
        ("files", "file:///data/privatex", true, "resources.files[0]"),
        ("files", "file:///data/secret.txt", false, "deny.files[1]"),
        ("files", "file:///data/SECRET.txt/", false, "deny.files[1]"),
        (
            "files",
            "file:///data/secret.txt?v=2",
            false,
            "deny.files[1]",
        ),
        (
            "files",
            "file:///data/secret.txt#top",
            false,
            "uri: fragment",
        ),
        (
            "files",
            "file:///data/secret.txt.bak",
            true,
            "resources.files[0]",
        ),
        // `*` and deny by scheme.
        (
            "everything",
            "anything:at/all",
            true,
            "resources.everything[0]",
        ),
        (
            "everything",
            "https://example.com/x",
            true,
            "resources.everything[0]",
        ),
        ("everything", "secret:x", false, "deny.everything[0]"),
        ("everything", "SECRET:x", false, "deny.everything[0]"),
        // Unknown connector; a connector with only malformed patterns; broken deny.
        (
            "github",
            "file:///anything/x",
            false,
            "default: unknown connector",
        ),
        (
            "nope",
            "file:///data/x",
            false,
            "default: unknown connector",
        ),
        ("bad", "file:///a", false, "default: resource not listed"),
        ("bad", "file:///axb", false, "default: resource not listed"),
    ];
    let mut failures = Vec::new();
    for (c, uri, allow, rule) in cases {
        let (a, r) = res(&p, c, uri);
        if (a, r.as_str()) != (*allow, *rule) {
            failures.push(format!("{c} {uri:?}: want {allow} {rule}, got {a} {r}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let long = format!("file:///data/{}", "a".repeat(3000));
    assert_eq!(res(&p, "files", &long).1, "uri: URI too long");
    assert_eq!(
        resource::decide(&role(), "files", "file:///data/x"),
        p.decide("files", "file:///data/x")
    );
}

#[test]
fn malformed_resource_deny_fails_closed() {
    let text = ROLE.replace(
        "    - \"secret:*\"",
        "    - \"secret:*\"\n    - \"x:/a*/b\"",
    );
    let role: Role = serde_yaml::from_str(&text).unwrap();
    let p = ResourcePolicy::compile(&role);
    assert_eq!(
        res(&p, "everything", "https://example.com/").1,
        "deny.everything[1]"
    );
    // Tool patterns in deny do not affect resources, and resource patterns do not affect tools.
    let t = ToolPolicy::compile(&role);
    assert!(t.decide("github", "get_issue", &Value::Null).allow);
}

#[test]
fn resource_reasons_do_not_echo_values() {
    let p = ResourcePolicy::compile(&role());
    let secret = "ghp_SECRET0123456789abcdef";
    for uri in [
        format!("file:///{secret}"),
        format!("file:///data/private/{secret}"),
        format!("file:///{secret}/%2F"),
        format!("https://{secret}@host/x"),
        format!("{secret} x"),
    ] {
        let d = p.decide("files", &uri);
        assert!(!d.allow, "{uri}");
        assert!(
            !d.reason.contains("SECRET") && !d.rule.contains("SECRET"),
            "{d:?}"
        );
    }
}

/// A denied id is denied in every spelling a server could read as the same id (finding:
/// `text/05`, `5.0`, `+5`, `0x5` and `5e0` all read "Resource 5" from server-everything,
/// which reads the id with `Number()`), and what is forwarded is the one spelling that was
/// checked.
#[test]
fn a_resource_id_has_one_spelling_and_that_is_what_is_forwarded() {
    let text = r#"
schema: 1
role: tester
level: L2
brief: brief.md
writes: {}
budget: {}
tools:
  everything: ["get-*"]
  repo: ["*"]
resources:
  everything: ["demo://resource/dynamic/text/*"]
  repo: ["repo://example-org/example-repo/*"]
deny:
  everything: ["demo://resource/dynamic/text/5"]
"#;
    let role: Role = serde_yaml::from_str(text).unwrap();
    let p = ResourcePolicy::compile(&role);
    let base = "demo://resource/dynamic/text/";
    assert_eq!(
        res(&p, "everything", &format!("{base}5")).1,
        "deny.everything[0]"
    );
    assert!(res(&p, "everything", &format!("{base}6")).0);
    for other in [
        "05", "5.0", "+5", "0x5", "5e0", "%35", "%205", "5%20", "0005", "5.", "0o5", "0b101",
        "5abc", "5.txt", "%2B5",
    ] {
        let uri = format!("{base}{other}");
        let (allow, rule) = res(&p, "everything", &uri);
        assert!(!allow, "{uri} is allowed ({rule})");
    }
    // An escape of an escape is refused; one escape is decoded once.
    assert_eq!(
        res(&p, "everything", &format!("{base}%25352")).1,
        "uri: an escape of an escape (%25 and two hex digits)"
    );
    // What the gateway forwards is the canonical spelling, or nothing.
    let (d, fwd) = p.read(
        "repo",
        "repo://example-org/other-repo/../example-repo/SECRET",
    );
    assert!(d.allow, "{d:?}");
    assert_eq!(
        fwd.as_deref(),
        Some("repo://example-org/example-repo/SECRET")
    );
    let (d, fwd) = p.read("everything", &format!("{base}%37"));
    assert!(d.allow);
    assert_eq!(fwd.as_deref(), Some("demo://resource/dynamic/text/7"));
    let (d, fwd) = p.read("everything", &format!("{base}07"));
    assert!(!d.allow && fwd.is_none());
}
