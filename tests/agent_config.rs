//! Agent configuration generated from a role: Claude Code settings and MCP servers, Codex
//! config.toml, and the default argv.

use airlock::policy::agent_config::{
    agent_command, claude_mcp_config, claude_settings, codex_config, AgentConfigError,
    GatewayEndpoints, BASH_SERVER,
};
use airlock::role::Role;
use serde_json::Value;
use std::collections::BTreeMap;

const BASE: &str = r#"
schema: 1
role: worker
level: L2
brief: brief.md
writes:
  repos: [example-org/example-repo]
  pull_requests: [open]
tools:
  board: [board_read, board_post]
  github: [get_*, create_pull_request, "files.read"]
deny:
  github: [delete_*, merge_pull_request, "repo://example-org/secret/*"]
budget:
  runs_per_week: 1
run:
  model: claude-sonnet-4-5
  max_turns: 42
  bash: [git log, cargo test]
  mcp:
    board: {via: airlock}
    github: {via: airlock}
"#;

fn role(yaml: &str) -> Role {
    serde_yaml::from_str(yaml).unwrap()
}

fn gateway() -> GatewayEndpoints {
    let mut mcp = BTreeMap::new();
    mcp.insert(
        "board".to_string(),
        "http://10.0.0.1:9000/board".to_string(),
    );
    mcp.insert(
        "github".to_string(),
        "http://10.0.0.1:9000/github".to_string(),
    );
    GatewayEndpoints {
        bash_url: "http://10.0.0.1:9000/bash".to_string(),
        mcp,
        provider_url: Some("http://10.0.0.1:9000/provider/codex".to_string()),
    }
}

#[test]
fn codex_reaches_its_model_only_through_the_gateway_with_the_run_token() {
    let text = codex_config(&role(BASE), &gateway()).unwrap();
    // A top-level key: before the first table.
    let top: Vec<&str> = text.lines().take_while(|l| !l.starts_with('[')).collect();
    assert!(top.contains(&"model_provider = \"airlock\""), "{text}");
    let p = table(&text, "[model_providers.airlock]");
    for want in [
        "base_url = \"http://10.0.0.1:9000/provider/codex\"",
        "env_key = \"OPENAI_API_KEY\"",
        "wire_api = \"responses\"",
    ] {
        assert!(p.contains(&want), "{want} in {p:?}");
    }
    // Without a provider route, no provider entry (and nothing points elsewhere).
    let mut none = gateway();
    none.provider_url = None;
    let text = codex_config(&role(BASE), &none).unwrap();
    assert!(!text.contains("model_provider"), "{text}");
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn allow(settings: &Value) -> Vec<String> {
    strings(&settings["permissions"]["allow"])
}

fn deny(settings: &Value) -> Vec<String> {
    strings(&settings["permissions"]["deny"])
}

#[test]
fn claude_settings_are_dont_ask_and_lock_the_escape_hatches() {
    let s = claude_settings(&role(BASE), &gateway()).unwrap();
    assert_eq!(s["permissions"]["defaultMode"], "dontAsk");
    assert_eq!(s["permissions"]["disableBypassPermissionsMode"], "disable");
    assert_eq!(s["allowManagedPermissionRulesOnly"], true);
    assert_eq!(s["allowManagedHooksOnly"], true);
    assert_eq!(s["allowManagedMcpServersOnly"], true);
    assert_eq!(s["enableAllProjectMcpServers"], false);
    assert_eq!(s["model"], "claude-sonnet-4-5");
    // Settings files take no server definitions; they live in managed-mcp.json.
    assert!(s.get("mcpServers").is_none());
}

#[test]
fn builtin_bash_is_always_denied_and_never_allowed() {
    let s = claude_settings(&role(BASE), &gateway()).unwrap();
    assert!(deny(&s).contains(&"Bash".to_string()));
    assert!(!allow(&s)
        .iter()
        .any(|r| r == "Bash" || r.starts_with("Bash(")));
    // Airlock's bash tool replaces it.
    assert!(allow(&s).contains(&"mcp__airlock__bash".to_string()));
}

#[test]
fn no_bash_prefixes_means_no_bash_server() {
    let yaml = BASE.replace("  bash: [git log, cargo test]\n", "");
    let r = role(&yaml);
    let s = claude_settings(&r, &gateway()).unwrap();
    assert!(!allow(&s).iter().any(|a| a.starts_with("mcp__airlock__")));
    let servers = claude_mcp_config(&r, &gateway()).unwrap();
    assert!(servers["mcpServers"].get(BASH_SERVER).is_none());
    let toml = codex_config(&r, &gateway()).unwrap();
    assert!(!toml.contains("[mcp_servers.airlock]"));
}

#[test]
fn web_tools_only_when_granted() {
    let s = claude_settings(&role(BASE), &gateway()).unwrap();
    for tool in ["WebFetch", "WebSearch", "Agent", "Task"] {
        assert!(!allow(&s).contains(&tool.to_string()), "{tool} allowed");
        assert!(deny(&s).contains(&tool.to_string()), "{tool} not denied");
    }
    let granted = BASE.replace(
        "  max_turns: 42\n",
        "  max_turns: 42\n  tools: [WebFetch]\n",
    );
    let s = claude_settings(&role(&granted), &gateway()).unwrap();
    assert!(allow(&s).contains(&"WebFetch".to_string()));
    assert!(!deny(&s).contains(&"WebFetch".to_string()));
    assert!(!allow(&s).contains(&"WebSearch".to_string()));
    assert!(deny(&s).contains(&"WebSearch".to_string()));
}

#[test]
fn mcp_tools_become_rules_with_server_wide_form_for_globs() {
    let s = claude_settings(&role(BASE), &gateway()).unwrap();
    let a = allow(&s);
    assert!(a.contains(&"mcp__board__board_read".to_string()));
    assert!(a.contains(&"mcp__board__board_post".to_string()));
    // Claude Code has no partial wildcard: `get_*` widens to the server, the gateway narrows.
    assert!(a.contains(&"mcp__github__*".to_string()));
    assert!(!a.iter().any(|r| r.contains("get_*")));
    // Dots are not part of Claude Code's MCP tool names.
    assert!(a.contains(&"mcp__github__files_read".to_string()));
    // The server-wide rule appears once however many globs lead to it.
    assert_eq!(a.iter().filter(|r| *r == "mcp__github__*").count(), 1);
}

#[test]
fn deny_rules_carry_exact_names_only() {
    let s = claude_settings(&role(BASE), &gateway()).unwrap();
    let d = deny(&s);
    assert!(d.contains(&"mcp__github__merge_pull_request".to_string()));
    // A prefix deny cannot be written without denying the whole server; the gateway holds it.
    assert!(!d.iter().any(|r| r.contains("delete")));
    assert!(!d.contains(&"mcp__github__*".to_string()));
    // Resource patterns are not tool rules.
    assert!(!d.iter().any(|r| r.contains("repo:")));
}

#[test]
fn a_star_deny_denies_the_whole_server() {
    let yaml = BASE.replace(
        "deny:\n  github: [delete_*, merge_pull_request, \"repo://example-org/secret/*\"]\n",
        "deny:\n  board: [\"*\"]\n",
    );
    let s = claude_settings(&role(&yaml), &gateway()).unwrap();
    assert!(deny(&s).contains(&"mcp__board__*".to_string()));
}

#[test]
fn edits_only_for_roles_that_open_pull_requests() {
    let s = claude_settings(&role(BASE), &gateway()).unwrap();
    assert!(allow(&s).contains(&"Edit".to_string()));
    assert!(allow(&s).contains(&"Write".to_string()));
    let reader = BASE.replace("  pull_requests: [open]\n", "  pull_requests: [comment]\n");
    let s = claude_settings(&role(&reader), &gateway()).unwrap();
    assert!(!allow(&s).contains(&"Edit".to_string()));
    assert!(deny(&s).contains(&"Edit".to_string()));
    assert!(deny(&s).contains(&"Write".to_string()));
    assert!(allow(&s).contains(&"Read".to_string()));
    let toml = codex_config(&role(&reader), &gateway()).unwrap();
    assert!(toml.contains("sandbox_mode = \"read-only\"\n"));
}

#[test]
fn allowed_servers_and_mcp_config_point_at_the_gateway() {
    let r = role(BASE);
    let s = claude_settings(&r, &gateway()).unwrap();
    let names: Vec<&str> = s["allowedMcpServers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["serverName"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["airlock", "board", "github"]);

    let m = claude_mcp_config(&r, &gateway()).unwrap();
    assert_eq!(
        m["mcpServers"]["airlock"]["url"],
        "http://10.0.0.1:9000/bash"
    );
    assert_eq!(m["mcpServers"]["airlock"]["type"], "http");
    assert_eq!(
        m["mcpServers"]["github"]["url"],
        "http://10.0.0.1:9000/github"
    );
    assert_eq!(m["mcpServers"].as_object().unwrap().len(), 3);
}

#[test]
fn direct_connectors_are_served_through_the_gateway_never_at_their_own_url() {
    let yaml = BASE.replace(
        "    github: {via: airlock}\n",
        "    github: {via: airlock}\n    elsewhere: {url: \"https://mcp.example.invalid/mcp\"}\n",
    );
    let yaml = yaml.replace("tools:\n", "tools:\n  elsewhere: [anything]\n");
    let r = role(&yaml);
    let gw = GatewayEndpoints::at("http://10.0.0.1:9000", &r);
    assert_eq!(gw.mcp["elsewhere"], "http://10.0.0.1:9000/mcp/elsewhere");
    let m = claude_mcp_config(&r, &gw).unwrap();
    assert_eq!(
        m["mcpServers"]["elsewhere"]["url"],
        "http://10.0.0.1:9000/mcp/elsewhere"
    );
    let s = claude_settings(&r, &gw).unwrap();
    assert!(allow(&s).iter().any(|a| a.contains("elsewhere")));
    let codex = codex_config(&r, &gw).unwrap();
    assert!(
        codex.contains("http://10.0.0.1:9000/mcp/elsewhere"),
        "{codex}"
    );
    for text in [m.to_string(), s.to_string(), codex] {
        assert!(!text.contains("mcp.example.invalid"), "{text}");
    }
}

#[test]
fn errors_fail_closed_and_name_keys_not_values() {
    let missing = GatewayEndpoints {
        bash_url: "http://x/bash".into(),
        mcp: BTreeMap::new(),
        provider_url: None,
    };
    let err = claude_settings(&role(BASE), &missing).unwrap_err();
    assert_eq!(err, AgentConfigError::MissingEndpoint("board".into()));
    assert!(err.to_string().starts_with("run.mcp.board:"));

    let reserved = BASE.replace(
        "    board: {via: airlock}\n",
        "    airlock: {via: airlock}\n",
    );
    let err = codex_config(&role(&reserved), &gateway()).unwrap_err();
    assert_eq!(err, AgentConfigError::ReservedConnector("airlock".into()));

    let bad = BASE.replace("[board_read, board_post]", "[board_read, \"x(y)\"]");
    let err = claude_settings(&role(&bad), &gateway()).unwrap_err();
    assert_eq!(err, AgentConfigError::BadToolPattern("board".into(), 1));
    assert!(!err.to_string().contains("x(y)"));

    let unknown = BASE.replace("  max_turns: 42\n", "  max_turns: 42\n  tools: [Shell]\n");
    let err = claude_settings(&role(&unknown), &gateway()).unwrap_err();
    assert_eq!(err, AgentConfigError::UnknownBuiltinTool(0));
    assert!(!err.to_string().contains("Shell"));

    let workflow = format!("{BASE}kind: workflow\n");
    assert_eq!(
        agent_command(&role(&workflow), "b", "s").unwrap_err(),
        AgentConfigError::NotAnAgent
    );
    let norun = BASE.split("run:\n").next().unwrap().to_string();
    assert_eq!(
        claude_settings(&role(&norun), &gateway()).unwrap_err(),
        AgentConfigError::NoRun
    );
}

/// The lines of a table (from its header to the next header).
fn table<'a>(toml: &'a str, header: &str) -> Vec<&'a str> {
    let mut lines = toml.lines().skip_while(|l| *l != header);
    assert!(lines.next().is_some(), "no table {header} in:\n{toml}");
    lines
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn codex_config_disables_the_shell_and_never_asks() {
    let codex = BASE.replace("  max_turns: 42\n", "  max_turns: 42\n  provider: codex\n");
    let toml = codex_config(&role(&codex), &gateway()).unwrap();
    // Root keys come before any table.
    let root: Vec<&str> = toml
        .lines()
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        root,
        [
            "model = \"claude-sonnet-4-5\"",
            "model_provider = \"airlock\"",
            "approval_policy = \"never\"",
            "sandbox_mode = \"danger-full-access\"",
            "web_search = \"disabled\"",
        ]
    );
    let features = table(&toml, "[features]");
    assert!(features.contains(&"shell_tool = false"));
    assert!(features.contains(&"unified_exec = false"));
    assert!(features.contains(&"multi_agent = false"));

    assert_eq!(
        table(&toml, "[mcp_servers.airlock]"),
        [
            "url = \"http://10.0.0.1:9000/bash\"",
            // The gateway decides each call; Codex's own approval would refuse them all.
            "default_tools_approval_mode = \"approve\"",
            "enabled_tools = [\"bash\"]"
        ]
    );
    assert_eq!(
        table(&toml, "[mcp_servers.board]"),
        [
            "url = \"http://10.0.0.1:9000/board\"",
            "default_tools_approval_mode = \"approve\"",
            "enabled_tools = [\"board_read\", \"board_post\"]"
        ]
    );
    // A glob means no enabled_tools list (the gateway filters); exact denies are disabled.
    assert_eq!(
        table(&toml, "[mcp_servers.github]"),
        [
            "url = \"http://10.0.0.1:9000/github\"",
            "default_tools_approval_mode = \"approve\"",
            "disabled_tools = [\"merge_pull_request\"]"
        ]
    );
}

#[test]
fn codex_web_search_follows_run_tools() {
    let yaml = BASE.replace(
        "  max_turns: 42\n",
        "  max_turns: 42\n  tools: [WebSearch, Agent]\n",
    );
    let toml = codex_config(&role(&yaml), &gateway()).unwrap();
    assert!(toml.contains("\nweb_search = \"live\"\n"));
    assert!(toml.contains("\nmulti_agent = true\n"));
}

#[test]
fn codex_strings_are_escaped() {
    let yaml = BASE.replace(
        "  model: claude-sonnet-4-5\n",
        "  model: \"m\\\"\\n[evil]\\\\x\"\n",
    );
    let r = role(&yaml);
    assert_eq!(r.run.as_ref().unwrap().model, "m\"\n[evil]\\x");
    let mut gw = gateway();
    gw.bash_url = "http://h/\"q\"".into();
    let toml = codex_config(&r, &gw).unwrap();
    assert!(toml.contains("model = \"m\\\"\\n[evil]\\\\x\"\n"));
    assert!(toml.contains("url = \"http://h/\\\"q\\\"\"\n"));
    // The quote and newline stayed inside the string: no line starts a table of its own.
    assert!(!toml.lines().any(|l| l.starts_with("[evil]")));
}

#[test]
fn claude_command_names_brief_settings_turns_and_model() {
    let argv = agent_command(&role(BASE), "/run/brief.md", "/run/settings.json").unwrap();
    assert_eq!(argv[0], "claude");
    assert_eq!(argv[1], "-p");
    assert!(argv[2].contains("/run/brief.md"));
    let after = |flag: &str| {
        let i = argv.iter().position(|a| a == flag).unwrap();
        argv[i + 1].clone()
    };
    assert_eq!(after("--settings"), "/run/settings.json");
    assert_eq!(after("--max-turns"), "42");
    assert_eq!(after("--model"), "claude-sonnet-4-5");
    assert_eq!(after("--permission-mode"), "dontAsk");
    // JSON lines, which the journal keeps as the agent's events.
    assert_eq!(after("--output-format"), "stream-json");
    assert!(argv.iter().any(|a| a == "--verbose"));
    assert!(!argv.iter().any(|a| a.contains("dangerously")));
}

#[test]
fn claude_command_defaults_max_turns() {
    let yaml = BASE.replace("  max_turns: 42\n", "");
    let argv = agent_command(&role(&yaml), "b.md", "s.json").unwrap();
    let i = argv.iter().position(|a| a == "--max-turns").unwrap();
    assert_eq!(argv[i + 1], "200");
}

#[test]
fn codex_command_runs_exec_with_the_model() {
    let yaml = BASE.replace("  max_turns: 42\n", "  provider: codex\n");
    let argv = agent_command(&role(&yaml), "/run/brief.md", "/run/codex/config.toml").unwrap();
    assert_eq!(&argv[..2], ["codex", "exec"]);
    let i = argv.iter().position(|a| a == "--model").unwrap();
    assert_eq!(argv[i + 1], "claude-sonnet-4-5");
    assert!(argv.last().unwrap().contains("/run/brief.md"));
    assert!(argv.iter().any(|a| a == "--json"), "JSON lines: {argv:?}");
}

#[test]
fn the_gateway_endpoints_cover_the_roles_connectors() {
    let r = role(BASE);
    let full = GatewayEndpoints::at("http://127.0.0.1:4180", &r);
    assert_eq!(full.bash_url, "http://127.0.0.1:4180/mcp/airlock");
    assert_eq!(full.mcp.keys().collect::<Vec<_>>(), ["board", "github"]);
    assert_eq!(full.mcp["github"], "http://127.0.0.1:4180/mcp/github");
    claude_settings(&r, &full).unwrap();
    codex_config(&r, &full).unwrap();
}
