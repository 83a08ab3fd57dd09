//! The keys of a model request that Airlock's checks read, and the case rule for them.
//!
//! A provider may match a request's keys without regard to case (Go's encoding/json does,
//! with simple Unicode case folding); Airlock's checks read each key as the API spells it.
//! So a key the checks read, spelled any other way that folds to the same name (`Tools`,
//! `mcp_Servers`, a content block's `Type`, `ſtream`), would be checked as absent and
//! could be read by the provider: such a key is refused, never taken for the other. Only
//! the places the checks read are held to it, so the agent's own data (a tool's
//! `input_schema` with a property `Model`, a tool call's arguments) is left alone. Two
//! keys of one object that fold together are refused anywhere
//! ([`super::tool::folded_twins`]).
//!
//! Pure: the request's JSON in, the place of a refused key out (never its value).

use serde_json::{Map, Value};

use super::fold::fold;

/// Top-level keys the checks (and the meter) read, in either API.
pub const TOP: &[&str] = &[
    "model",
    "tools",
    "tool_choice",
    "mcp_servers",
    "container",
    "previous_response_id",
    "conversation",
    "prompt",
    "system",
    "messages",
    "input",
    "instructions",
    "max_tokens",
    "max_output_tokens",
    "service_tier",
    "stream",
    "max_tool_calls",
];

/// Keys read in each of `tools`' entries.
pub const TOOL: &[&str] = &["type", "name", "max_uses"];

/// Keys read in every object of the content (`system`, `messages`, `input`,
/// `instructions`, at any depth), a `source` included.
pub const CONTENT: &[&str] = &[
    "type",
    "source",
    "file_id",
    "image_url",
    "file_url",
    "file_data",
];

/// The name of `read` that a key of `m` spells another way, if one does.
pub fn variant(m: &Map<String, Value>, read: &[&'static str]) -> Option<&'static str> {
    m.keys().find_map(|k| {
        let f = fold(k);
        read.iter().find(|r| **r != k && fold(r) == f).copied()
    })
}

/// Why a key at `at` is refused: it spells `name` another way.
pub fn refusal(at: &str, name: &str) -> String {
    format!(
        "{at}.{name}: spelled in another case (or Unicode case folding); Airlock checks the key as {name} and the provider could read this one unchecked: spell it {name}"
    )
}

/// Where the content check reads ([`super::provider_tools::content`]).
const CONTENT_PLACES: &[&str] = &["system", "messages", "input", "instructions"];

/// The request's top level, its `tools` entries and every object of its content against
/// [`TOP`], [`TOOL`] and [`CONTENT`].
pub fn check(doc: &Value) -> Result<(), String> {
    let Some(m) = doc.as_object() else {
        return Ok(());
    };
    if let Some(name) = variant(m, TOP) {
        return Err(refusal("body", name));
    }
    let tools = m.get("tools").and_then(Value::as_array);
    for (i, t) in tools.into_iter().flatten().enumerate() {
        if let Some(name) = t.as_object().and_then(|t| variant(t, TOOL)) {
            return Err(refusal(&format!("body.tools[{i}]"), name));
        }
    }
    for k in CONTENT_PLACES {
        if let Some(v) = m.get(*k) {
            content(v, &format!("body.{k}"))?;
        }
    }
    Ok(())
}

/// Every object in `v` against [`CONTENT`], but the arguments of the model's own tool
/// calls (Anthropic `tool_use`, `server_tool_use`), which the content check does not read.
fn content(v: &Value, at: &str) -> Result<(), String> {
    match v {
        Value::Object(m) => {
            if let Some(name) = variant(m, CONTENT) {
                return Err(refusal(at, name));
            }
            let call = matches!(
                m.get("type").and_then(Value::as_str),
                Some("tool_use" | "server_tool_use")
            );
            m.iter()
                .filter(|(k, _)| !(call && *k == "input"))
                .try_for_each(|(k, x)| {
                    content(
                        x,
                        &format!("{at}.{}", k.chars().take(40).collect::<String>()),
                    )
                })
        }
        Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| content(x, &format!("{at}[{i}]"))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lone_variant_of_a_key_the_checks_read_is_refused_and_nothing_else() {
        for (doc, at) in [
            (
                json!({"Tools": [{"type": "web_fetch_20250910"}]}),
                "body.tools",
            ),
            (json!({"mcp_Servers": []}), "body.mcp_servers"),
            (json!({"ſtream": true}), "body.stream"),
            (json!({"MAX_OUTPUT_TOKENS": 9}), "body.max_output_tokens"),
            (
                json!({"tools": [{"name": "x"}, {"Type": "web_fetch_20250910"}]}),
                "body.tools[1].type",
            ),
            (
                json!({"tools": [{"type": "web_search_20250305", "MAX_USES": 99}]}),
                "body.tools[0].max_uses",
            ),
        ] {
            let e = check(&doc).unwrap_err();
            assert!(e.starts_with(&format!("{at}: ")), "{doc}: {e}");
        }
        // The agent's own data is its own: schema properties, unknown keys.
        for doc in [
            json!({"model": "m", "tools": [{"name": "Read", "input_schema": {"properties": {"Model": {}, "Type": {}}}}]}),
            json!({"metadata": {"Tools": 1}, "Other": 2}),
            json!([1]),
        ] {
            assert_eq!(check(&doc), Ok(()), "{doc}");
        }
        let image = json!({"messages": [{"role": "user", "content": [
            {"Type": "image", "source": {"type": "url", "url": "https://x.example/p"}}]}]});
        assert!(check(&image)
            .unwrap_err()
            .starts_with("body.messages[0].content[0].type: "));
        let src = json!({"input": [{"type": "input_file", "File_Url": "https://x.example/d"}]});
        assert!(check(&src)
            .unwrap_err()
            .starts_with("body.input[0].file_url: "));
        // A tool call's arguments are the agent's.
        let call = json!({"messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "Read", "input": {"Type": "x", "Source": 1}}]}]});
        assert_eq!(check(&call), Ok(()));
    }
}
