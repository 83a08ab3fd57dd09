//! Whether a request on the provider route may go, and what goes: its endpoint (method,
//! path and the URL query the endpoint takes), its headers (no other method named, no
//! request encoding, no beta that reaches stored files), and its body, read once by the
//! strict reader ([`crate::gateway::strict_json`]) with case-twin keys refused, and any key the checks
//! read spelled in another case ([`crate::policy::provider_keys`]), then the model, the
//! tools, the content, what it is priced at ([`crate::policy::provider_tools`]) and the
//! output limit. What is
//! forwarded is that value, re-serialized: never bytes the gateway did not read.
//!
//! No I/O: request parts in, a refusal (status, rule, message) or what to forward out.

use hyper::header::HeaderMap;
use hyper::{Method, StatusCode};
use serde_json::Value;

use crate::gateway::provider::usage::Api;
use crate::policy::provider_tools::{self, Content, Wire};

/// Why a request does not go: the status the agent gets, the journal's rule, the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub rule: &'static str,
    pub message: String,
}

/// A refusal whose message says it is Airlock's.
pub fn refused(status: StatusCode, rule: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        rule,
        message: format!("Airlock: {}", message.into()),
    }
}

/// What an endpoint is for the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metered {
    /// A model response: reserved, priced and counted.
    Yes,
    /// Counting tokens: counted, not priced.
    Free,
    /// The model list: no body, no model.
    List,
}

/// The endpoints each API offers, and the URL query each takes (Anthropic's SDK asks for
/// its beta features with `?beta=true`; the model list pages by id).
pub fn endpoint(
    api: Api,
    method: &Method,
    rest: &str,
    query: Option<&str>,
) -> Result<Metered, Refusal> {
    let metered = match (api, method.as_str(), rest) {
        (Api::AnthropicMessages, "POST", "/v1/messages") => Metered::Yes,
        (Api::AnthropicMessages, "POST", "/v1/messages/count_tokens") => Metered::Free,
        (Api::AnthropicMessages, "GET", "/v1/models") => Metered::List,
        (Api::OpenAiResponses, "POST", "/responses") => Metered::Yes,
        (Api::OpenAiResponses, "GET", "/models") => Metered::List,
        _ => {
            return Err(refused(
                StatusCode::NOT_FOUND,
                "endpoint",
                "the run's gateway forwards only the model endpoints of its provider",
            ))
        }
    };
    let taken = match (api, metered, query) {
        (_, _, None) => true,
        (Api::AnthropicMessages, Metered::Yes | Metered::Free, Some(q)) => q == "beta=true",
        (Api::AnthropicMessages, Metered::List, Some(q)) => q.split('&').all(|p| {
            p.split_once('=').is_some_and(|(k, v)| {
                matches!(k, "limit" | "after_id" | "before_id")
                    && (1..=128).contains(&v.len())
                    && v.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
            })
        }),
        _ => false,
    };
    if !taken {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "endpoint",
            "a URL query this endpoint does not take (Anthropic: ?beta=true on messages, limit/after_id/before_id on the model list; OpenAI: none)",
        ));
    }
    Ok(metered)
}

/// The request's headers: none that names another method, no encoding of a body the
/// gateway reads, no Anthropic beta of [`provider_tools::beta`]'s list.
pub fn headers(api: Api, h: &HeaderMap) -> Result<(), Refusal> {
    if crate::gateway::headers::names_another_method(h) {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "request: method",
            "a request that names another method than its own (X-HTTP-Method-Override and the like) is refused",
        ));
    }
    if crate::gateway::headers::encoded(h) {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "request: encoding",
            "the gateway reads the request body: send it without a Content-Encoding",
        ));
    }
    if api == Api::AnthropicMessages {
        for v in h.get_all("anthropic-beta") {
            let v = v.to_str().map_err(|_| {
                refused(
                    StatusCode::BAD_REQUEST,
                    "request",
                    "anthropic-beta: not text",
                )
            })?;
            provider_tools::beta(v)
                .map_err(|(rule, why)| refused(StatusCode::FORBIDDEN, rule, why))?;
        }
    }
    Ok(())
}

/// The body of a request that carries one: one JSON object, strictly read (no duplicate
/// keys), with no two keys anywhere that a case-blind reader takes for one.
pub fn read(body: &[u8]) -> Result<Value, Refusal> {
    let doc = crate::gateway::strict_json::parse(body)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| {
            refused(
                StatusCode::BAD_REQUEST,
                "request",
                "the request body is not one valid JSON object (each key once)",
            )
        })?;
    if let Some(at) = crate::policy::tool::folded_twins(&doc, String::from("body")) {
        return Err(refused(
            StatusCode::BAD_REQUEST,
            "request: case",
            format!("{at}: two keys that differ only in case (or in Unicode case folding); the provider could read the one Airlock did not check"),
        ));
    }
    Ok(doc)
}

/// What the run's role lets a request ask for.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub api: Api,
    /// `run.model`.
    pub model: &'a str,
    /// The model's `max_output` (policies/prices.yaml).
    pub max_output: u64,
    /// `run.tools` grants `WebSearch`, `WebFetch`.
    pub web_search: bool,
    pub web_fetch: bool,
}

/// A request the rules let go: its output limit (for an endpoint that costs) and what its
/// content holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decided {
    pub output_limit: u64,
    pub content: Content,
    /// Web searches the request lets the provider run, for its reserve.
    pub searches: u64,
}

/// The body's model, tools, content and output limit against the rules.
pub fn decide(r: &Rules<'_>, metered: Metered, doc: &Value) -> Result<Decided, Refusal> {
    // Before anything reads a key: a key read here spelled another way is refused.
    crate::policy::provider_keys::check(doc)
        .map_err(|why| refused(StatusCode::BAD_REQUEST, "request: case", why))?;
    if doc.get("model").and_then(Value::as_str) != Some(r.model) {
        return Err(refused(
            StatusCode::FORBIDDEN,
            "model",
            format!(
                "this run may use only its role's model ({}), named in the request's model field",
                r.model
            ),
        ));
    }
    let wire = match r.api {
        Api::AnthropicMessages => Wire::Anthropic,
        Api::OpenAiResponses => Wire::OpenAi,
    };
    provider_tools::check(wire, doc, r.web_search)
        .map_err(|why| refused(StatusCode::FORBIDDEN, "tools", why))?;
    let content = provider_tools::content(wire, doc, r.web_fetch)
        .map_err(|why| refused(StatusCode::FORBIDDEN, "content", why))?;
    provider_tools::priced(wire, doc)
        .map_err(|why| refused(StatusCode::FORBIDDEN, "price", why))?;
    let output_limit = match metered {
        Metered::Yes => provider_tools::output_limit(wire, doc, r.max_output)
            .map_err(|why| refused(StatusCode::BAD_REQUEST, "output limit", why))?,
        Metered::Free | Metered::List => 0,
    };
    Ok(Decided {
        output_limit,
        content,
        searches: provider_tools::searches(wire, doc),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;
    use serde_json::json;

    const A: Api = Api::AnthropicMessages;
    const O: Api = Api::OpenAiResponses;

    #[test]
    fn only_model_endpoints_and_the_queries_they_take_are_forwarded() {
        let post = Method::POST;
        let get = Method::GET;
        for (api, m, p, q, want) in [
            (A, &post, "/v1/messages", None, Metered::Yes),
            (A, &post, "/v1/messages", Some("beta=true"), Metered::Yes),
            (
                A,
                &post,
                "/v1/messages/count_tokens",
                Some("beta=true"),
                Metered::Free,
            ),
            (
                A,
                &get,
                "/v1/models",
                Some("limit=20&after_id=claude-x_1"),
                Metered::List,
            ),
            (O, &post, "/responses", None, Metered::Yes),
            (O, &get, "/models", None, Metered::List),
        ] {
            assert_eq!(endpoint(api, m, p, q), Ok(want), "{m} {p} {q:?}");
        }
        for (api, m, p, q) in [
            (A, Method::POST, "/v1/files", None),
            (A, Method::POST, "/v1/messages/batches", None),
            (A, Method::DELETE, "/v1/messages", None),
            (O, Method::POST, "/v1/messages", None),
            (O, Method::POST, "/chat/completions", None),
            (O, Method::POST, "/responses/../files", None),
            (O, Method::GET, "/responses/resp_1", None),
            (A, Method::POST, "/v1/messages", Some("beta=true&x=1")),
            (
                A,
                Method::POST,
                "/v1/messages",
                Some("model=claude-opus-4-1"),
            ),
            (A, Method::GET, "/v1/models", Some("limit=1&x=2")),
            (A, Method::GET, "/v1/models", Some("after_id=a/b")),
            (O, Method::POST, "/responses", Some("")),
            (O, Method::POST, "/responses", Some("api-version=1")),
            (O, Method::GET, "/models", Some("limit=1")),
        ] {
            assert!(endpoint(api, &m, p, q).is_err(), "{m} {p} {q:?}");
        }
    }

    #[test]
    fn method_overrides_encodings_and_file_betas_are_refused() {
        let h = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.append(*k, HeaderValue::from_static(v));
            }
            h
        };
        assert_eq!(
            headers(
                A,
                &h(&[("anthropic-beta", "interleaved-thinking-2025-05-14")])
            ),
            Ok(())
        );
        assert_eq!(headers(O, &h(&[("content-encoding", "identity")])), Ok(()));
        for (api, hs, rule) in [
            (
                A,
                h(&[("x-http-method-override", "GET")]),
                "request: method",
            ),
            (O, h(&[("X-Method-Override", "DELETE")]), "request: method"),
            (O, h(&[("x-http-method", "PUT")]), "request: method"),
            (A, h(&[("content-encoding", "gzip")]), "request: encoding"),
            (O, h(&[("content-encoding", "br")]), "request: encoding"),
            (
                A,
                h(&[
                    ("anthropic-beta", "x"),
                    ("anthropic-beta", "files-api-2025-04-14"),
                ]),
                "content",
            ),
        ] {
            assert_eq!(headers(api, &hs).map_err(|r| r.rule), Err(rule), "{hs:?}");
        }
    }

    #[test]
    fn bodies_are_one_object_with_no_case_twins_at_any_depth() {
        assert!(read(br#"{"model":"m","messages":[]}"#).is_ok());
        for bad in [
            &br#"{"model":"claude-sonnet-4-5","MODEL":"claude-opus-4-1"}"#[..],
            br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","Type":"image"}]}]}"#,
            br#"{"model":"m","Tools":[],"tools":[]}"#,
            br#"{"model":"m","model":"n"}"#,
            br#"[1]"#,
            b"",
        ] {
            let e = read(bad).unwrap_err();
            assert!(!e.message.contains("opus"), "{}", e.message);
        }
        assert_eq!(
            read(br#"{"a":{"b":1,"B":2}}"#).unwrap_err().rule,
            "request: case"
        );
    }

    #[test]
    fn the_output_limit_is_required_where_the_api_requires_it_and_whole() {
        let rules = Rules {
            api: A,
            model: "m",
            max_output: 64000,
            web_search: false,
            web_fetch: false,
        };
        let d = |api, doc: Value| decide(&Rules { api, ..rules }, Metered::Yes, &doc);
        assert_eq!(
            d(A, json!({"model": "m", "max_tokens": 600}))
                .unwrap()
                .output_limit,
            600
        );
        assert_eq!(d(O, json!({"model": "m"})).unwrap().output_limit, 64000);
        assert_eq!(
            d(O, json!({"model": "m", "max_output_tokens": null}))
                .unwrap()
                .output_limit,
            64000
        );
        assert_eq!(
            d(O, json!({"model": "m", "max_output_tokens": 10}))
                .unwrap()
                .output_limit,
            10
        );
        for (api, doc) in [
            (A, json!({"model": "m"})),
            (A, json!({"model": "m", "max_tokens": 64000.0})),
            (A, json!({"model": "m", "max_tokens": "64000"})),
            (A, json!({"model": "m", "max_tokens": -1})),
            (O, json!({"model": "m", "max_output_tokens": 1.5})),
        ] {
            assert_eq!(
                d(api, doc.clone()).unwrap_err().rule,
                "output limit",
                "{doc}"
            );
        }
        // Counting tokens takes no limit.
        assert!(decide(&rules, Metered::Free, &json!({"model": "m"})).is_ok());
        assert_eq!(
            decide(
                &rules,
                Metered::Yes,
                &json!({"model": "n", "max_tokens": 1})
            )
            .unwrap_err()
            .rule,
            "model"
        );
    }
}
