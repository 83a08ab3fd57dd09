//! Claude Code: managed settings (`managed-settings.json`) and the managed MCP server set
//! (`managed-mcp.json`).
//!
//! Keys used, as Claude Code documents them:
//! - `permissions.defaultMode: "dontAsk"`: a tool call no allow rule covers is refused, never
//!   prompted (nobody is there to answer).
//! - `permissions.disableBypassPermissionsMode: "disable"` and
//!   `permissions.disableAutoMode: "disable"`: no mode that skips the rules.
//! - `allowManagedPermissionRulesOnly`, `allowManagedHooksOnly`, `allowManagedMcpServersOnly`
//!   (managed-only): rules, hooks and MCP servers from a cloned repository's
//!   `.claude/settings.json` or `.mcp.json` are ignored. Hooks matter most: they run shell
//!   commands outside Airlock's bash tool.
//! - `allowedMcpServers: [{serverName}]`: the only servers that may load.
//!
//! MCP rule grammar: Claude Code matches `mcp__<server>` and `mcp__<server>__*` (every tool of
//! a server) and `mcp__<server>__<tool>` (one tool). It has no partial wildcard such as
//! `mcp__github__get_*`. So a role's `prefix*` pattern becomes the server-wide
//! `mcp__<server>__*` allow rule, and the gateway, which holds every call to the role's exact
//! patterns, refuses the rest. A `prefix*` deny cannot be narrowed that way (a server-wide deny
//! would refuse everything), so it is left to the gateway alone; exact and `*` denies are
//! written out. Resource patterns have no Claude Code rule form and are likewise the
//! gateway's.
//!
//! Settings files have no documented `mcpServers` key, so servers are not in the settings:
//! they go in `managed-mcp.json` ([`claude_mcp_config`]), which Claude Code treats as the
//! exclusive server set.

use super::{
    AgentConfigError, Builtin, GatewayEndpoints, Grants, ToolPattern, BASH_SERVER, BASH_TOOL,
};
use crate::role::Role;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Claude Code's built-in tools that only read the workspace.
const READ_TOOLS: [&str; 3] = ["Read", "Glob", "Grep"];
/// Built-in tools that change files. Allowed only to roles that propose changes.
const EDIT_TOOLS: [&str; 3] = ["Edit", "Write", "NotebookEdit"];

/// Managed settings for a run of `role` (the `managed-settings.json` shape).
pub fn claude_settings(role: &Role, gateway: &GatewayEndpoints) -> Result<Value, AgentConfigError> {
    let grants = Grants::resolve(role, gateway)?;
    let mut allow: Vec<String> = Vec::new();
    let mut deny: Vec<String> = Vec::new();

    allow.extend(READ_TOOLS.iter().map(|t| t.to_string()));
    let edit_list = if grants.edits { &mut allow } else { &mut deny };
    edit_list.extend(EDIT_TOOLS.iter().map(|t| t.to_string()));

    // Airlock's bash tool over MCP replaces the built-in shell, so every command meets the
    // role's prefix list in the gateway.
    deny.push("Bash".into());

    for (tool, names) in [
        (Builtin::WebFetch, &["WebFetch"][..]),
        (Builtin::WebSearch, &["WebSearch"][..]),
        // `Task` is the subagent tool's earlier name; both are covered.
        (Builtin::Agent, &["Agent", "Task"][..]),
    ] {
        let list = if grants.has(tool) {
            &mut allow
        } else {
            &mut deny
        };
        list.extend(names.iter().map(|n| n.to_string()));
    }

    if grants.has_bash() {
        allow.push(mcp_rule(BASH_SERVER, Some(BASH_TOOL)));
    }
    let mut seen = BTreeSet::new();
    for (connector, patterns) in &role.tools {
        if !grants.servers.contains_key(connector.as_str()) {
            continue; // no server, nothing to call
        }
        for pattern in patterns {
            let rule = match ToolPattern::parse(pattern) {
                Some(ToolPattern::Exact(tool)) => mcp_rule(connector, Some(tool)),
                Some(ToolPattern::Prefix(_)) | Some(ToolPattern::All) => mcp_rule(connector, None),
                None => continue, // refused by Grants::resolve already
            };
            if seen.insert(rule.clone()) {
                allow.push(rule);
            }
        }
    }
    for (connector, patterns) in &role.deny {
        for pattern in patterns {
            match ToolPattern::parse(pattern) {
                Some(ToolPattern::Exact(tool)) => deny.push(mcp_rule(connector, Some(tool))),
                Some(ToolPattern::All) => deny.push(mcp_rule(connector, None)),
                // See the module comment: the gateway holds these.
                Some(ToolPattern::Prefix(_)) | None => {}
            }
        }
    }

    let mut servers: Vec<Value> = Vec::new();
    if grants.has_bash() {
        servers.push(json!({ "serverName": BASH_SERVER }));
    }
    servers.extend(
        grants
            .servers
            .keys()
            .map(|name| json!({ "serverName": name })),
    );

    Ok(json!({
        "model": grants.run.model,
        "permissions": {
            "defaultMode": "dontAsk",
            "disableBypassPermissionsMode": "disable",
            "disableAutoMode": "disable",
            "allow": allow,
            "deny": deny,
        },
        "allowManagedPermissionRulesOnly": true,
        "allowManagedHooksOnly": true,
        "allowManagedMcpServersOnly": true,
        "allowedMcpServers": servers,
        "enableAllProjectMcpServers": false,
    }))
}

/// Claude Code's environment in a run: quiet, and every model call on the run's model.
///
/// - `DISABLE_TELEMETRY`, `DISABLE_ERROR_REPORTING`, `DISABLE_AUTOUPDATER`,
///   `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`: no start-up or background traffic (it
///   would only be refused by the gateway, and slowly).
/// - `ENABLE_TOOL_SEARCH=false`: MCP tools (Airlock's bash tool among them) are listed to
///   the model directly, not deferred behind a search tool.
/// - `ANTHROPIC_SMALL_FAST_MODEL`, `ANTHROPIC_DEFAULT_HAIKU_MODEL`: the background calls
///   (titles, summaries) use `run.model` too, the only model the gateway lets through.
pub fn claude_env(role: &Role) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("ENABLE_TOOL_SEARCH", "false"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    if let Some(run) = &role.run {
        for k in [
            "ANTHROPIC_SMALL_FAST_MODEL",
            "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        ] {
            env.push((k.to_string(), run.model.clone()));
        }
    }
    env
}

/// The MCP servers of a run (the `managed-mcp.json` shape, also what `--mcp-config` reads):
/// Airlock's bash tool when the role has bash prefixes, and the gateway endpoint of every
/// `run.mcp` connector that goes through Airlock. All are streamable HTTP; the gateway knows
/// the run by its endpoint, so no credential appears here.
pub fn claude_mcp_config(
    role: &Role,
    gateway: &GatewayEndpoints,
) -> Result<Value, AgentConfigError> {
    let grants = Grants::resolve(role, gateway)?;
    let mut servers = serde_json::Map::new();
    if grants.has_bash() {
        servers.insert(
            BASH_SERVER.to_string(),
            json!({ "type": "http", "url": gateway.bash_url }),
        );
    }
    for (name, url) in &grants.servers {
        servers.insert(name.to_string(), json!({ "type": "http", "url": url }));
    }
    Ok(json!({ "mcpServers": servers }))
}

/// `mcp__<server>__<tool>`, or the server-wide `mcp__<server>__*`. Claude Code names MCP tools
/// with every character outside `A-Za-z0-9_-` replaced by `_`, so rules are written the same
/// way (a tool `files.read` is `mcp__x__files_read`).
fn mcp_rule(server: &str, tool: Option<&str>) -> String {
    match tool {
        Some(tool) => format!("mcp__{}__{}", normalize(server), normalize(tool)),
        None => format!("mcp__{}__*", normalize(server)),
    }
}

fn normalize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
