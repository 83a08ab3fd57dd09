//! `airlockctl logs` for people: the agent's own JSON-lines events (Claude Code's
//! `stream-json`, Codex's `exec --json`), which the journal keeps as the run's stdout, shown
//! as one readable line each between Airlock's own records; and `--json`, every record as a
//! JSON object. Pure: a printed line in, the lines to print out.

use serde_json::{json, Value};

/// Longest part of a tool's input or result shown on one line.
const SHOWN: usize = 160;

/// `kind: message` as the journal reader prints it (the message escaped for a terminal),
/// for people: an agent event becomes `agent: ...`, anything else stays as it is.
pub fn readable(line: &str) -> Vec<String> {
    let Some(rest) = line.strip_prefix("stdout: ") else {
        return vec![line.to_string()];
    };
    match serde_json::from_str::<Value>(&unescape(rest)) {
        Ok(e) => match agent_event(&e) {
            Some(lines) => lines.into_iter().map(|l| format!("agent: {l}")).collect(),
            // JSON, but nothing a person needs (the agent's bookkeeping).
            None => Vec::new(),
        },
        Err(_) => vec![line.to_string()],
    }
}

/// The same line as a JSON object: `{"kind": ..., "message": ...}` (the message as
/// written, unescaped; an agent's JSON event as the object it is).
pub fn as_json(line: &str) -> String {
    let (kind, message) = line.split_once(": ").unwrap_or(("", line));
    let message = unescape(message);
    let event = (kind == "stdout")
        .then(|| serde_json::from_str::<Value>(&message).ok())
        .flatten();
    match event {
        Some(e) => json!({"kind": kind, "event": e}).to_string(),
        None => json!({"kind": kind, "message": message}).to_string(),
    }
}

/// Undo the reader's terminal escaping: `\\` and `\n`, `\t`, `\xNN`.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

fn clip(s: &str) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > SHOWN {
        format!("{}…", one.chars().take(SHOWN).collect::<String>())
    } else {
        one
    }
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .map(|i| {
                i.get("text")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| i.to_string())
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

/// One agent event as lines, or `None` when it is bookkeeping.
fn agent_event(e: &Value) -> Option<Vec<String>> {
    let kind = e.get("type").and_then(Value::as_str)?;
    let mut out = Vec::new();
    match kind {
        // Claude Code.
        "system" if e.get("subtype").and_then(Value::as_str) == Some("init") => out.push(format!(
            "started: model {}, {} tools",
            e.get("model").and_then(Value::as_str).unwrap_or("?"),
            e.get("tools").and_then(Value::as_array).map_or(0, Vec::len)
        )),
        "assistant" | "user" => {
            for c in e.pointer("/message/content")?.as_array()? {
                match c.get("type").and_then(Value::as_str) {
                    Some("text") => out.push(format!("says: {}", clip(&text_of(&c["text"])))),
                    Some("tool_use") => out.push(format!(
                        "calls {} {}",
                        c.get("name").and_then(Value::as_str).unwrap_or("?"),
                        clip(&c.get("input").map(Value::to_string).unwrap_or_default())
                    )),
                    Some("tool_result") => out.push(format!(
                        "{} {}",
                        if c.get("is_error").and_then(Value::as_bool) == Some(true) {
                            "got an error:"
                        } else {
                            "got:"
                        },
                        clip(&text_of(c.get("content").unwrap_or(&Value::Null)))
                    )),
                    _ => {}
                }
            }
        }
        "result" => out.push(format!(
            "finished: {} after {} turns, {} ms",
            e.get("subtype").and_then(Value::as_str).unwrap_or("?"),
            e.get("num_turns").and_then(Value::as_u64).unwrap_or(0),
            e.get("duration_ms").and_then(Value::as_u64).unwrap_or(0)
        )),
        // Codex.
        "item.started" | "item.completed" => {
            let item = e.get("item")?;
            let done = kind == "item.completed";
            match item.get("type").and_then(Value::as_str) {
                Some("agent_message") if done => out.push(format!(
                    "says: {}",
                    clip(item.get("text").and_then(Value::as_str).unwrap_or(""))
                )),
                Some("mcp_tool_call") if !done => out.push(format!(
                    "calls {}/{} {}",
                    item.get("server").and_then(Value::as_str).unwrap_or("?"),
                    item.get("tool").and_then(Value::as_str).unwrap_or("?"),
                    clip(
                        &item
                            .get("arguments")
                            .map(Value::to_string)
                            .unwrap_or_default()
                    )
                )),
                Some("mcp_tool_call") => {
                    out.push(match item.get("error").filter(|x| !x.is_null()) {
                        Some(err) => format!(
                            "got an error: {}",
                            clip(&text_of(err.get("message").unwrap_or(err)))
                        ),
                        None => format!(
                            "got: {}",
                            clip(&text_of(
                                item.pointer("/result/content").unwrap_or(&Value::Null)
                            ))
                        ),
                    })
                }
                Some("error") => out.push(format!(
                    "error: {}",
                    clip(item.get("message").and_then(Value::as_str).unwrap_or(""))
                )),
                _ => {}
            }
        }
        "turn.completed" => out.push("finished a turn".to_string()),
        _ => {}
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_codes_events_read_as_lines_and_bookkeeping_goes() {
        let call = r#"stdout: {"type":"assistant","message":{"content":[{"type":"tool_use","name":"mcp__airlock__bash","input":{"command":"git log"}}]}}"#;
        assert_eq!(
            readable(call),
            [r#"agent: calls mcp__airlock__bash {"command":"git log"}"#]
        );
        // The reader doubles backslashes; the event still parses.
        let result = r#"stdout: {"type":"user","message":{"content":[{"type":"tool_result","is_error":true,"content":"refused: \\"rm\\""}]}}"#;
        assert_eq!(readable(result), [r#"agent: got an error: refused: "rm""#]);
        assert!(readable(r#"stdout: {"type":"system","subtype":"ui_invalidate"}"#).is_empty());
        assert_eq!(
            readable("tool_call: airlock/bash allow"),
            ["tool_call: airlock/bash allow"]
        );
        assert_eq!(readable("stdout: plain text"), ["stdout: plain text"]);
    }

    #[test]
    fn codex_events_read_as_lines() {
        let started = r#"stdout: {"type":"item.started","item":{"type":"mcp_tool_call","server":"airlock","tool":"bash","arguments":{"command":"ls"}}}"#;
        assert_eq!(
            readable(started),
            [r#"agent: calls airlock/bash {"command":"ls"}"#]
        );
        let failed = r#"stdout: {"type":"item.completed","item":{"type":"mcp_tool_call","error":{"message":"no"}}}"#;
        assert_eq!(readable(failed), ["agent: got an error: no"]);
    }

    #[test]
    fn json_lines_keep_agent_events_as_objects() {
        let v: Value =
            serde_json::from_str(&as_json(r#"stdout: {"type":"result","num_turns":2}"#)).unwrap();
        assert_eq!(v["event"]["num_turns"], 2);
        let v: Value = serde_json::from_str(&as_json("lease: lease x revoked\\nmore")).unwrap();
        assert_eq!(v["kind"], "lease");
        assert_eq!(v["message"], "lease x revoked\nmore");
    }
}
