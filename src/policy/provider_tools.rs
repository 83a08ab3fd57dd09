//! What a model request may have the provider do or read beyond the request itself.
//!
//! - Tools ([`check`]): an agent's own tools (function tools, which the agent runs in its
//!   jail and which meet Airlock there) go through; a server tool would have the provider
//!   fetch, search, run code or reach an MCP server from its side, past the run's egress:
//!   refused, except web search for a role whose `run.tools` grants `WebSearch`.
//! - Content ([`content`]): a block or field that has the provider fetch a URL or read
//!   something it keeps (a file id, a stored response, a container) is refused; a URL
//!   source is a web fetch, so it passes for a role granted `WebFetch`; a file id never
//!   (files live outside the run). From the providers' API references: Anthropic Messages
//!   `image`/`document` sources of type `url` or `file`, `container_upload`, any
//!   `file_id`, `container`, and the `files-api`, `skills` and `mcp-client` betas; OpenAI
//!   Responses `input_image` with an `image_url` that is not a `data:` URL or a
//!   `file_id`, `input_file` with a `file_url` or `file_id`, `item_reference` items,
//!   `previous_response_id`, `conversation` and stored `prompt`s.
//!
//! Pure: the request's JSON (or a header's value) in, a refusal's reason out. Reasons name
//! the place (key path), never a value.

use serde_json::{Map, Value};

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
            if wire == Wire::OpenAi && ty.and_then(Value::as_str) == Some("namespace") {
                namespace(i, t)?;
            }
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

/// An OpenAI `namespace` groups the agent's own tools: each of its `tools` must be a
/// `function` or `custom` tool. Anything else (a server tool, a nested namespace, an entry
/// without its `type` spelled so) is refused, so a server tool cannot ride inside one.
fn namespace(i: usize, t: &Value) -> Result<(), String> {
    let inner = match t.get("tools") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Array(inner)) => inner,
        Some(_) => return Err(format!("tools[{i}].tools: a list")),
    };
    for (j, t) in inner.iter().enumerate() {
        let ty = t.get("type").and_then(Value::as_str);
        if !matches!(ty, Some("function" | "custom")) {
            return Err(format!(
                "tools[{i}].tools[{j}]: a namespace holds only the agent's own tools (function, custom); a server tool inside one is refused like any other"
            ));
        }
    }
    Ok(())
}

/// Web searches reserved for a request whose web search tool names no limit (Anthropic
/// `max_uses`, OpenAI `max_tool_calls`): the provider's own search loop may run more, and
/// is charged what it ran; the reserve only has to make a run's budget unlikely to pass.
pub const DEFAULT_SEARCHES: u64 = 10;

fn is_search(t: &Value) -> bool {
    t.get("type")
        .and_then(Value::as_str)
        .is_some_and(|ty| ty.starts_with("web_search"))
}

/// How many web searches a request lets the provider run, for its reserve: none without a
/// web search tool; else the sum of Anthropic's `max_uses` (each search tool's), or
/// OpenAI's `max_tool_calls`, or [`DEFAULT_SEARCHES`] where the request names none.
pub fn searches(wire: Wire, doc: &Value) -> u64 {
    let tools = doc.get("tools").and_then(Value::as_array);
    let search: Vec<&Value> = tools
        .into_iter()
        .flatten()
        .filter(|t| is_search(t))
        .collect();
    if search.is_empty() {
        return 0;
    }
    let limit = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(DEFAULT_SEARCHES);
    match wire {
        Wire::Anthropic => search
            .iter()
            .fold(0u64, |n, t| n.saturating_add(limit(t.get("max_uses")))),
        Wire::OpenAi => limit(doc.get("max_tool_calls")),
    }
}

/// What a request's content holds that its reserve must allow for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Content {
    /// Whole files (a PDF document, an OpenAI `input_file` with its data), and what the
    /// provider fetches by URL: their tokens are not bounded by the request's bytes.
    pub files: usize,
}

/// Whether the request's content is all in the request (URL sources too when
/// `web_fetch`), and how many whole files it carries.
pub fn content(wire: Wire, doc: &Value, web_fetch: bool) -> Result<Content, String> {
    let present = |k: &str| doc.get(k).is_some_and(|v| !v.is_null());
    let (stored, places): (&[(&str, &str)], &[&str]) = match wire {
        Wire::Anthropic => (
            &[(
                "container",
                "a container of the provider's, holding files outside the request",
            )],
            &["system", "messages"],
        ),
        Wire::OpenAi => (
            &[
                (
                    "previous_response_id",
                    "a response the provider stored, outside the request",
                ),
                (
                    "conversation",
                    "a conversation the provider stored, outside the request",
                ),
                (
                    "prompt",
                    "a prompt the provider stored, outside the request",
                ),
            ],
            &["input", "instructions"],
        ),
    };
    if let Some((k, what)) = stored.iter().find(|(k, _)| present(k)) {
        return Err(format!("{k}: {what}; send the content itself"));
    }
    let mut walk = Walk {
        wire,
        web_fetch,
        found: Content::default(),
    };
    for k in places {
        if let Some(v) = doc.get(*k) {
            walk.value(v, k)?;
        }
    }
    Ok(walk.found)
}

struct Walk {
    wire: Wire,
    web_fetch: bool,
    found: Content,
}

const FILE_ID: &str = "a file the provider stores, outside the run; send the content itself";
const URL: &str = "a URL the provider would fetch itself, past the run's egress; only a role whose run.tools grants WebFetch may send one";

impl Walk {
    fn value(&mut self, v: &Value, at: &str) -> Result<(), String> {
        match v {
            Value::Object(m) => self.object(m, at),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .try_for_each(|(i, x)| self.value(x, &format!("{at}[{i}]"))),
            _ => Ok(()),
        }
    }

    fn object(&mut self, m: &Map<String, Value>, at: &str) -> Result<(), String> {
        if m.contains_key("file_id") {
            return Err(format!("{at}.file_id: {FILE_ID}"));
        }
        let ty = m.get("type").and_then(Value::as_str).unwrap_or("");
        match (self.wire, ty) {
            // The model's own tool calls: their input is the tool's arguments, not content.
            (Wire::Anthropic, "tool_use" | "server_tool_use") => return Ok(()),
            (Wire::Anthropic, "container_upload") => {
                return Err(format!("{at}: {FILE_ID}"));
            }
            (Wire::Anthropic, "image" | "document") => self.source(m, ty, at)?,
            (Wire::OpenAi, "item_reference") => {
                return Err(format!(
                    "{at}: an item the provider stored, outside the request; send the content itself"
                ));
            }
            (Wire::OpenAi, "input_image") => match m.get("image_url") {
                None | Some(Value::Null) => {}
                Some(Value::String(u)) if u.starts_with("data:") => {}
                Some(Value::String(u)) if web_url(u) && self.web_fetch => self.found.files += 1,
                Some(Value::String(u)) if web_url(u) => {
                    return Err(format!("{at}.image_url: {URL}"));
                }
                Some(_) => {
                    return Err(format!(
                        "{at}.image_url: an image is sent as a data: URL (or, with WebFetch, an https URL)"
                    ));
                }
            },
            (Wire::OpenAi, "input_file") => {
                if let Some(u) = m.get("file_url").filter(|u| !u.is_null()) {
                    if !(self.web_fetch && u.as_str().is_some_and(web_url)) {
                        return Err(format!("{at}.file_url: {URL}"));
                    }
                    self.found.files += 1;
                }
                if m.get("file_data").is_some_and(|d| !d.is_null()) {
                    self.found.files += 1;
                }
            }
            _ => {}
        }
        m.iter()
            .try_for_each(|(k, x)| self.value(x, &format!("{at}.{}", clip_key(k))))
    }

    /// An Anthropic image or document's `source`.
    fn source(&mut self, m: &Map<String, Value>, ty: &str, at: &str) -> Result<(), String> {
        let kind = m
            .get("source")
            .and_then(|s| s.get("type"))
            .and_then(Value::as_str);
        match kind {
            Some("base64") => {
                if ty == "document" {
                    self.found.files += 1;
                }
                Ok(())
            }
            Some("text" | "content") => Ok(()),
            Some("url") if self.web_fetch => {
                self.found.files += 1;
                Ok(())
            }
            Some("url") => Err(format!("{at}.source: {URL}")),
            Some("file") => Err(format!("{at}.source: {FILE_ID}")),
            _ => Err(format!(
                "{at}.source: a kind of source Airlock does not know (base64, text, content; url with WebFetch)"
            )),
        }
    }
}

fn web_url(u: &str) -> bool {
    let lower = u.get(..8).unwrap_or(u).to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://")
}

/// A key as a refusal names it: at most 40 characters.
fn clip_key(k: &str) -> String {
    k.chars().take(40).collect()
}

/// The most output tokens a request asks for: Anthropic's `max_tokens` (required by its
/// API), OpenAI's `max_output_tokens` (optional: the model's `max_output` when absent). A
/// limit that is not a whole number is refused: the provider may read it, and the reserve
/// and the charge of a cut answer must not be smaller than what it reads.
pub fn output_limit(wire: Wire, doc: &Value, max_output: u64) -> Result<u64, String> {
    let (key, required) = match wire {
        Wire::Anthropic => ("max_tokens", true),
        Wire::OpenAi => ("max_output_tokens", false),
    };
    match doc.get(key) {
        None | Some(Value::Null) if !required => Ok(max_output),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!("{key}: a whole number of tokens, without a fraction")),
        None => Err(format!("{key}: required, a whole number of tokens")),
    }
}

/// Anthropic betas that have the provider read what it keeps or reach out itself (the
/// Files API: files by id; Agent Skills: skills stored with the provider; the MCP
/// connector: servers the provider calls), or that price tokens above the price table
/// (the 1M-token context: long requests at higher rates).
const REFUSED_BETAS: &[(&str, &str, &str)] = &[
    (
        "files-api-",
        "content",
        "the Files API (files the provider stores, outside the run)",
    ),
    (
        "skills-",
        "content",
        "Agent Skills (skills the provider stores, outside the run)",
    ),
    (
        "mcp-client-",
        "content",
        "the MCP connector (servers the provider would call, past the run's egress)",
    ),
    (
        "context-1m-",
        "price",
        "the 1M-token context (priced above policies/prices.yaml)",
    ),
];

/// Whether the request asks for nothing the provider prices above the price table: an
/// OpenAI `service_tier` of `priority` (or any but `auto`, `default` and `flex`).
pub fn priced(wire: Wire, doc: &Value) -> Result<(), String> {
    if wire == Wire::OpenAi {
        match doc.get("service_tier") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if matches!(t.as_str(), "auto" | "default" | "flex") => {}
            Some(_) => {
                return Err(
                    "service_tier: only auto, default or flex (another tier is priced above policies/prices.yaml)"
                        .into(),
                )
            }
        }
    }
    Ok(())
}

/// Whether an `anthropic-beta` header's value asks for none of [`REFUSED_BETAS`]; else
/// the rule (`content`, `price`) and why.
pub fn beta(value: &str) -> Result<(), (&'static str, String)> {
    for b in value.split(',') {
        let b = b
            .trim_matches(|c: char| c == '"' || c == '\'' || c.is_whitespace())
            .to_ascii_lowercase();
        if let Some((_, rule, what)) = REFUSED_BETAS.iter().find(|(p, _, _)| b.starts_with(p)) {
            return Err((rule, format!("anthropic-beta: a beta of {what}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_search_tool_reserves_its_limit_or_the_default() {
        let (a, o) = (Wire::Anthropic, Wire::OpenAi);
        assert_eq!(searches(a, &json!({"tools": [{"name": "Read"}]})), 0);
        assert_eq!(
            searches(
                a,
                &json!({"tools": [{"type": "web_search_20250305", "max_uses": 5}]})
            ),
            5
        );
        assert_eq!(
            searches(
                a,
                &json!({"tools": [{"type": "web_search_20250305"}, {"type": "web_search_20250305", "max_uses": 1}]})
            ),
            DEFAULT_SEARCHES + 1
        );
        assert_eq!(
            searches(
                a,
                &json!({"tools": [{"type": "web_search_20250305", "max_uses": "9"}]})
            ),
            DEFAULT_SEARCHES
        );
        assert_eq!(
            searches(
                o,
                &json!({"tools": [{"type": "web_search"}], "max_tool_calls": 3})
            ),
            3
        );
        assert_eq!(
            searches(o, &json!({"tools": [{"type": "web_search_preview"}]})),
            DEFAULT_SEARCHES
        );
        assert_eq!(searches(o, &json!({"max_tool_calls": 3})), 0);
    }

    #[test]
    fn a_namespace_holds_only_the_agents_own_tools() {
        let o = Wire::OpenAi;
        let ns = |inner: Value| json!({"tools": [{"type": "function", "name": "f"}, {"type": "namespace", "name": "mcp__x", "tools": inner}]});
        assert_eq!(
            check(
                o,
                &ns(json!([{"type": "function", "name": "g"}, {"type": "custom", "name": "h"}])),
                false
            ),
            Ok(())
        );
        assert_eq!(
            check(
                o,
                &json!({"tools": [{"type": "namespace", "name": "n"}]}),
                false
            ),
            Ok(())
        );
        for inner in [
            json!([{"type": "web_search"}]),
            json!([{"type": "function", "name": "g"}, {"type": "mcp", "server_url": "https://x.example/mcp"}]),
            json!([{"type": "code_interpreter", "container": {"type": "auto"}}]),
            json!([{"type": "namespace", "name": "inner", "tools": [{"type": "web_search"}]}]),
            json!([{"Type": "function", "name": "g"}]),
            json!([{"name": "g"}]),
            json!({"type": "function"}),
        ] {
            let err = check(o, &ns(inner.clone()), true).expect_err(&inner.to_string());
            assert!(err.starts_with("tools[1].tools"), "{err}");
        }
    }

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

    fn user(blocks: Value) -> Value {
        json!({"model": "m", "messages": [{"role": "user", "content": blocks}]})
    }

    fn input(parts: Value) -> Value {
        json!({"model": "m", "input": [{"role": "user", "content": parts}]})
    }

    #[test]
    fn content_in_the_request_passes_and_files_are_counted() {
        let a = Wire::Anthropic;
        let o = Wire::OpenAi;
        let pdf = json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBER"}});
        let doc = user(json!([
            {"type": "text", "text": "see https://x.example/a.png"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
            pdf,
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hi"}},
            {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "x"}]}},
            {"type": "search_result", "source": "https://x.example", "title": "t", "content": [{"type": "text", "text": "x"}]},
            // The model's own tool call may have any arguments at all.
            {"type": "tool_use", "id": "t", "name": "Read", "input": {"file_id": "f", "source": {"type": "url"}}},
            {"type": "tool_result", "tool_use_id": "t", "content": [pdf]},
        ]));
        assert_eq!(content(a, &doc, false), Ok(Content { files: 2 }));
        let doc = input(json!([
            {"type": "input_text", "text": "hi"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBOR", "detail": "auto"},
            {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBER"},
        ]));
        assert_eq!(content(o, &doc, false), Ok(Content { files: 1 }));
        assert_eq!(
            content(o, &json!({"input": "hi"}), false),
            Ok(Content::default())
        );
        assert_eq!(
            content(o, &json!({"previous_response_id": null}), false),
            Ok(Content::default())
        );
    }

    #[test]
    fn url_sources_need_web_fetch_and_file_ids_and_stored_things_never_pass() {
        let a = Wire::Anthropic;
        let o = Wire::OpenAi;
        let url_image = user(
            json!([{"type": "image", "source": {"type": "url", "url": "https://exfil.example/p.png?s=1"}}]),
        );
        let url_doc = user(
            json!([{"type": "document", "source": {"type": "url", "url": "https://exfil.example/d.pdf"}}]),
        );
        let nested = user(
            json!([{"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://exfil.example/p.png"}}]}]),
        );
        let o_image =
            input(json!([{"type": "input_image", "image_url": "https://exfil.example/p.png"}]));
        let o_file =
            input(json!([{"type": "input_file", "file_url": "https://exfil.example/d.pdf"}]));
        for (wire, doc) in [
            (a, &url_image),
            (a, &url_doc),
            (a, &nested),
            (o, &o_image),
            (o, &o_file),
        ] {
            let e = content(wire, doc, false).unwrap_err();
            assert!(e.contains("WebFetch"), "{e}");
            assert!(!e.contains("exfil"), "{e}");
            // Fetched by the provider: reserved as a whole file.
            assert_eq!(content(wire, doc, true), Ok(Content { files: 1 }), "{doc}");
        }
        for (wire, doc) in [
            (
                a,
                user(
                    json!([{"type": "document", "source": {"type": "file", "file_id": "file_1"}}]),
                ),
            ),
            (
                a,
                user(json!([{"type": "image", "source": {"type": "file", "file_id": "file_1"}}])),
            ),
            (a, user(json!([{"type": "document", "file_id": "file_1"}]))),
            (
                a,
                user(json!([{"type": "container_upload", "file_id": "file_1"}])),
            ),
            (
                a,
                json!({"model": "m", "container": "container_1", "messages": []}),
            ),
            (
                a,
                user(json!([{"type": "image", "source": {"type": "s3", "uri": "s3://b/k"}}])),
            ),
            (
                a,
                user(json!([{"type": "image", "source": "https://x.example/p.png"}])),
            ),
            (
                o,
                input(json!([{"type": "input_image", "file_id": "file-1"}])),
            ),
            (
                o,
                input(json!([{"type": "input_file", "file_id": "file-1"}])),
            ),
            (
                o,
                input(json!([{"type": "input_image", "image_url": "ftp://x.example/p"}])),
            ),
            (
                o,
                input(json!([{"type": "input_image", "image_url": {"url": "data:x"}}])),
            ),
            (o, input(json!([{"type": "input_file", "file_url": 7}]))),
            (
                o,
                json!({"input": [{"type": "item_reference", "id": "msg_1"}]}),
            ),
            (o, json!({"input": "hi", "previous_response_id": "resp_1"})),
            (o, json!({"input": "hi", "conversation": "conv_1"})),
            (o, json!({"input": "hi", "prompt": {"id": "pmpt_1"}})),
        ] {
            assert!(content(wire, &doc, true).is_err(), "{wire:?} {doc}");
        }
    }

    #[test]
    fn tiers_priced_above_the_table_are_refused() {
        let o = Wire::OpenAi;
        for ok in [
            json!({}),
            json!({"service_tier": "auto"}),
            json!({"service_tier": "flex"}),
        ] {
            assert_eq!(priced(o, &ok), Ok(()), "{ok}");
        }
        for bad in [
            json!({"service_tier": "priority"}),
            json!({"service_tier": "scale"}),
            json!({"service_tier": 1}),
        ] {
            assert!(priced(o, &bad).is_err(), "{bad}");
        }
        assert_eq!(
            priced(Wire::Anthropic, &json!({"service_tier": "auto"})),
            Ok(())
        );
    }

    #[test]
    fn betas_that_reach_stored_files_or_servers_are_refused() {
        assert_eq!(
            beta("interleaved-thinking-2025-05-14, fine-grained-tool-streaming-2025-05-14"),
            Ok(())
        );
        assert_eq!(beta("claude-code-20250219"), Ok(()));
        for v in [
            "files-api-2025-04-14",
            "x, Files-API-2025-04-14",
            "skills-2025-10-02",
            "mcp-client-2025-04-04",
        ] {
            assert_eq!(beta(v).map_err(|e| e.0), Err("content"), "{v}");
        }
        assert_eq!(beta("context-1m-2025-08-07").map_err(|e| e.0), Err("price"));
    }
}
