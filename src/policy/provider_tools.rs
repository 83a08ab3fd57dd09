//! The tools a model request may give the provider to run itself. An agent's own tools
//! (function tools, which the agent runs in its jail and which meet Airlock there) go
//! through; a server tool would have the provider fetch, search, run code or reach an MCP
//! server from its side, past the run's egress: refused, except web search for a role whose
//! `run.tools` grants `WebSearch`. Pure: the request's JSON in, a refusal's reason out.

use serde_json::Value;

/// The provider's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Anthropic Messages: a tool without `type` (or `custom`) is the agent's own.
    Anthropic,
    /// OpenAI Responses: `function`, `custom` and `namespace` (a group of function tools)
    /// are the agent's own.
    OpenAi,
}

/// Whether the request's tools are all the agent's own (web search too when `web_search`).
pub fn check(wire: Wire, doc: &Value, web_search: bool) -> Result<(), String> {
    let present = |k: &str| doc.get(k).is_some_and(|v| !v.is_null());
    if wire == Wire::Anthropic && present("mcp_servers") {
        return Err(
            "mcp_servers: the provider would reach MCP servers itself; a run's connectors go through Airlock (run.mcp)"
                .into(),
        );
    }
    let Some(tools) = doc.get("tools") else {
        return Ok(());
    };
    let Some(tools) = tools.as_array() else {
        return Err("tools: a list".into());
    };
    for (i, t) in tools.iter().enumerate() {
        let ty = t.get("type");
        let own = match (wire, ty) {
            (Wire::Anthropic, None) => true,
            (_, Some(Value::String(ty))) => match wire {
                Wire::Anthropic => ty == "custom",
                Wire::OpenAi => matches!(ty.as_str(), "function" | "custom" | "namespace"),
            },
            _ => false,
        };
        if own {
            continue;
        }
        let search = ty
            .and_then(Value::as_str)
            .is_some_and(|ty| ty.starts_with("web_search"));
        if search && web_search {
            continue;
        }
        return Err(if search {
            format!("tools[{i}]: web search by the provider, which the role's run.tools does not grant (WebSearch)")
        } else {
            format!("tools[{i}]: a server tool, run by the provider past the run's egress; only the agent's own tools (and web search, with WebSearch) are forwarded")
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_agents_own_tools_pass_and_server_tools_do_not() {
        let a = Wire::Anthropic;
        let o = Wire::OpenAi;
        let own_a = json!({"tools": [{"name": "Read", "input_schema": {}}, {"type": "custom", "name": "x"}]});
        let own_o = json!({"tools": [{"type": "function", "name": "f"}, {"type": "custom", "name": "apply_patch"}, {"type": "namespace", "name": "mcp__x", "tools": []}]});
        assert_eq!(check(a, &own_a, false), Ok(()));
        assert_eq!(check(o, &own_o, false), Ok(()));
        assert_eq!(check(a, &json!({"model": "m"}), false), Ok(()));
        let search_a = json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]});
        let search_o = json!({"tools": [{"type": "web_search"}]});
        assert_eq!(check(a, &search_a, true), Ok(()));
        assert_eq!(check(o, &search_o, true), Ok(()));
        for (wire, doc) in [
            (a, search_a.clone()),
            (o, search_o.clone()),
            (
                a,
                json!({"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}),
            ),
            (
                a,
                json!({"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}),
            ),
            (
                a,
                json!({"mcp_servers": [{"type": "url", "url": "https://x.example/mcp", "name": "x"}]}),
            ),
            (a, json!({"tools": [{"type": 7}]})),
            (a, json!({"tools": {"type": "custom"}})),
            (
                o,
                json!({"tools": [{"type": "mcp", "server_url": "https://x.example/mcp"}]}),
            ),
            (o, json!({"tools": [{"type": "file_search"}]})),
            (o, json!({"tools": [{"type": "code_interpreter"}]})),
            (o, json!({"tools": [{"name": "untyped"}]})),
        ] {
            assert!(check(wire, &doc, false).is_err(), "{wire:?} {doc}");
        }
        // Web search with the grant, but never a fetch or an MCP server.
        assert!(check(a, &json!({"tools": [{"type": "web_fetch_20250910"}]}), true).is_err());
        assert!(check(o, &json!({"tools": [{"type": "mcp"}]}), true).is_err());
    }
}
