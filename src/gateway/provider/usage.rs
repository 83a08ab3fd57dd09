//! Reading a model response's token usage as it streams past, without holding the stream
//! back: the Anthropic Messages API and the OpenAI Responses API, streamed (server-sent
//! events) or not (one JSON body). Pure: bytes in, [`Usage`] out.
//!
//! - Anthropic: `message_start` carries the input side (`input_tokens`,
//!   `cache_creation_input_tokens`, `cache_read_input_tokens`); each `message_delta` carries
//!   the cumulative usage so far, so the last one wins field by field. A non-streamed reply
//!   has the same fields under `usage`.
//! - OpenAI Responses: `response.completed` (or `.incomplete`, `.failed`) carries the whole
//!   usage; its `input_tokens` already includes `input_tokens_details.cached_tokens`, which
//!   are priced apart.
//!
//! Only the usage is read, into fixed fields ([`Event`]): everything else in an event or a
//! body is skipped as it is parsed (`serde::de::IgnoredAny`), never built into a JSON
//! value, so reading an answer costs the same small memory however many values it holds
//! (a 14 MiB answer of five million `{}` would cost hundreds of MiB as values).

use serde::de::{Deserializer, IgnoredAny, Visitor};
use serde::Deserialize;

use crate::policy::prices::Usage;

/// Which wire API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    AnthropicMessages,
    OpenAiResponses,
}

/// Largest server-sent event or JSON body read for usage; a bigger one is passed through
/// unread (and the usage counts as incomplete).
const MAX_EVENT_BYTES: usize = 16 << 20;

/// What a response said of its usage, by the end of what was read of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    pub usage: Usage,
    /// Whether the input side (input and cache tokens) was reported: Anthropic gives it
    /// first (`message_start`), OpenAI only with the final count.
    pub input_known: bool,
    /// Whether the final count was seen.
    pub complete: bool,
}

/// Watches one response's bytes.
#[derive(Debug)]
pub struct Meter {
    api: Api,
    streaming: bool,
    usage: Usage,
    input_known: bool,
    /// Whether the final usage was seen.
    complete: bool,
    /// Stream: the current, unfinished line and event; body: the whole body so far.
    buf: Vec<u8>,
    data: Vec<u8>,
    overflowed: bool,
}

impl Meter {
    /// `streaming`: the response is `text/event-stream`.
    pub fn new(api: Api, streaming: bool) -> Meter {
        Meter {
            api,
            streaming,
            usage: Usage::default(),
            input_known: false,
            complete: false,
            buf: Vec::new(),
            data: Vec::new(),
            overflowed: false,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        if !self.streaming {
            if self.buf.len() + chunk.len() > MAX_EVENT_BYTES {
                self.overflowed = true;
                self.buf = Vec::new();
            }
            if !self.overflowed {
                self.buf.extend_from_slice(chunk);
            }
            return;
        }
        for &b in chunk {
            if b != b'\n' {
                if self.buf.len() < MAX_EVENT_BYTES {
                    self.buf.push(b);
                }
                continue;
            }
            let line = std::mem::take(&mut self.buf);
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            if line.is_empty() {
                self.dispatch();
            } else if let Some(d) = line.strip_prefix(b"data:") {
                let d = d.strip_prefix(b" ").unwrap_or(d);
                if !self.data.is_empty() {
                    self.data.push(b'\n');
                }
                if self.data.len() + d.len() <= MAX_EVENT_BYTES {
                    self.data.extend_from_slice(d);
                }
            }
        }
    }

    /// What the response said of its usage.
    pub fn finish(&mut self) -> Seen {
        if self.streaming {
            // An event not closed by a blank line still counts.
            if !self.buf.is_empty() {
                self.feed(b"\n");
            }
            self.dispatch();
        } else if !self.overflowed {
            if let Ok(v) = serde_json::from_slice::<Event>(&self.buf) {
                if let Some(u) = v.usage {
                    self.take(&u, true);
                }
                if self.api == Api::OpenAiResponses {
                    self.usage.web_search = v.output.0;
                }
            }
            self.buf = Vec::new();
        }
        Seen {
            usage: self.usage,
            input_known: self.input_known,
            complete: self.complete,
        }
    }

    fn dispatch(&mut self) {
        let data = std::mem::take(&mut self.data);
        if data.is_empty() {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Event>(&data) else {
            return;
        };
        let kind = v.kind.0.as_deref().unwrap_or("");
        match (self.api, kind) {
            (Api::AnthropicMessages, "message_start") => {
                if let Some(u) = v.message.and_then(|m| m.usage) {
                    self.take(&u, false);
                }
            }
            (Api::AnthropicMessages, "message_delta") => {
                if let Some(u) = v.usage {
                    self.take(&u, true);
                }
            }
            (
                Api::OpenAiResponses,
                "response.completed" | "response.incomplete" | "response.failed",
            ) => {
                if let Some(r) = v.response {
                    if let Some(u) = r.usage {
                        self.take(&u, true);
                    }
                    self.usage.web_search = r.output.0;
                }
            }
            _ => {}
        }
    }

    /// Take the fields `u` has (Anthropic's deltas carry only some); `last`: this is a
    /// final count.
    fn take(&mut self, u: &Counts, last: bool) {
        match self.api {
            Api::AnthropicMessages => {
                if let Some(x) = u.input_tokens.0 {
                    self.usage.input = x;
                    self.input_known = true;
                }
                if let Some(x) = u.output_tokens.0 {
                    self.usage.output = x;
                }
                if let Some(x) = u.cache_creation_input_tokens.0 {
                    self.usage.cache_write = x;
                }
                if let Some(x) = u.cache_read_input_tokens.0 {
                    self.usage.cache_read = x;
                }
                if let Some(x) = u
                    .server_tool_use
                    .as_ref()
                    .and_then(|s| s.web_search_requests.0)
                {
                    self.usage.web_search = x;
                }
            }
            Api::OpenAiResponses => {
                let input = u.input_tokens.0.unwrap_or(0);
                let cached = u
                    .input_tokens_details
                    .as_ref()
                    .and_then(|d| d.cached_tokens.0)
                    .unwrap_or(0)
                    .min(input);
                self.usage = Usage {
                    input: input - cached,
                    output: u.output_tokens.0.unwrap_or(0),
                    cache_write: 0,
                    cache_read: cached,
                    // Counted from the response's output items, by the caller.
                    web_search: self.usage.web_search,
                };
                self.input_known = u.input_tokens.0.is_some();
            }
        }
        self.complete |= last;
    }
}

/// What of an event (or a whole body) is read: its type and the usage where each API puts
/// it; every other member is skipped unbuilt.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Event {
    #[serde(rename = "type")]
    kind: Lenient<String>,
    usage: Option<Counts>,
    message: Option<Holder>,
    response: Option<Holder>,
    /// An OpenAI response's output items (a whole body), its web search calls counted.
    output: SearchCalls,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Holder {
    usage: Option<Counts>,
    output: SearchCalls,
}

/// How many of a list's items are OpenAI `web_search_call`s: counted as the list is read,
/// each item skipped unbuilt but for its type (0 for anything but a list).
#[derive(Default)]
struct SearchCalls(u64);

/// One output item: whether it is a `web_search_call` (anything but an object is not).
struct Item(bool);

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Item;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Item, A::Error> {
                let mut search = false;
                while let Some(k) = a.next_key::<std::borrow::Cow<'de, str>>()? {
                    if k == "type" {
                        let t = a.next_value::<Lenient<String>>()?;
                        search = t.0.as_deref() == Some("web_search_call");
                    } else {
                        a.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Item(search))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Item, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Item(false))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Item, E> {
                Ok(Item(false))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Item, E> {
                Ok(Item(false))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Item, E> {
                Ok(Item(false))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Item, E> {
                Ok(Item(false))
            }
            fn visit_str<E>(self, _: &str) -> Result<Item, E> {
                Ok(Item(false))
            }
            fn visit_unit<E>(self) -> Result<Item, E> {
                Ok(Item(false))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for SearchCalls {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SearchCalls;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<SearchCalls, A::Error> {
                let mut n = 0u64;
                while let Some(Item(search)) = a.next_element::<Item>()? {
                    n += u64::from(search);
                }
                Ok(SearchCalls(n))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<SearchCalls, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(SearchCalls(0))
            }
            fn visit_u64<E>(self, _: u64) -> Result<SearchCalls, E> {
                Ok(SearchCalls(0))
            }
            fn visit_i64<E>(self, _: i64) -> Result<SearchCalls, E> {
                Ok(SearchCalls(0))
            }
            fn visit_f64<E>(self, _: f64) -> Result<SearchCalls, E> {
                Ok(SearchCalls(0))
            }
            fn visit_bool<E>(self, _: bool) -> Result<SearchCalls, E> {
                Ok(SearchCalls(0))
            }
            fn visit_str<E>(self, _: &str) -> Result<SearchCalls, E> {
                Ok(SearchCalls(0))
            }
            fn visit_unit<E>(self) -> Result<SearchCalls, E> {
                Ok(SearchCalls(0))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Counts {
    input_tokens: Lenient<u64>,
    output_tokens: Lenient<u64>,
    cache_creation_input_tokens: Lenient<u64>,
    cache_read_input_tokens: Lenient<u64>,
    input_tokens_details: Option<Details>,
    server_tool_use: Option<ServerToolUse>,
}

/// Anthropic's count of the server tools the provider ran.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ServerToolUse {
    web_search_requests: Lenient<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Details {
    cached_tokens: Lenient<u64>,
}

/// A member read only when it has the expected kind (a string; a non-negative integer),
/// None for anything else (`null`, another type), which is skipped unbuilt: as
/// `Value::as_str`/`as_u64` read it.
struct Lenient<T>(Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Lenient(None)
    }
}

impl<'de> Deserialize<'de> for Lenient<u64> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LenientVisitor(|v: Scalar<'_>| match v {
            Scalar::U64(n) => Some(n),
            _ => None,
        }))
    }
}

impl<'de> Deserialize<'de> for Lenient<String> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LenientVisitor(|v: Scalar<'_>| match v {
            Scalar::Str(s) => Some(s.to_string()),
            _ => None,
        }))
    }
}

enum Scalar<'a> {
    U64(u64),
    Str(&'a str),
    Other,
}

struct LenientVisitor<F>(F);

impl<'de, T, F: FnOnce(Scalar<'_>) -> Option<T>> Visitor<'de> for LenientVisitor<F> {
    type Value = Lenient<T>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Lenient((self.0)(Scalar::U64(v))))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Lenient(match u64::try_from(v) {
            Ok(n) => (self.0)(Scalar::U64(n)),
            Err(_) => (self.0)(Scalar::Other),
        }))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Lenient((self.0)(Scalar::Other)))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Lenient((self.0)(Scalar::Other)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Lenient((self.0)(Scalar::Str(v))))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Lenient((self.0)(Scalar::Other)))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        while a.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Lenient(None))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
        while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Lenient(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(api: Api, text: &str, chunk: usize) -> (Usage, bool) {
        let s = seen(api, text, chunk);
        (s.usage, s.complete)
    }

    fn seen(api: Api, text: &str, chunk: usize) -> Seen {
        let mut m = Meter::new(api, true);
        for c in text.as_bytes().chunks(chunk) {
            m.feed(c);
        }
        m.finish()
    }

    const ANTHROPIC: &str = "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":300,\"cache_read_input_tokens\":4000,\"output_tokens\":1}}}\r\n\r\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":57}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    #[test]
    fn anthropic_streams_take_the_last_cumulative_delta_and_the_cache_counts() {
        for chunk in [1, 7, 4096] {
            let (u, done) = stream(Api::AnthropicMessages, ANTHROPIC, chunk);
            assert!(done);
            assert_eq!(
                u,
                Usage {
                    input: 12,
                    output: 57,
                    cache_write: 300,
                    cache_read: 4000,
                    web_search: 0,
                }
            );
        }
        // Cut before the delta: only the input side is known, and it is not final.
        let cut = &ANTHROPIC[..ANTHROPIC.find("event: message_delta").unwrap()];
        let s = seen(Api::AnthropicMessages, cut, 64);
        assert!(!s.complete && s.input_known);
        assert_eq!(
            (s.usage.input, s.usage.output, s.usage.cache_read),
            (12, 1, 4000)
        );
        // Cut before message_start: nothing is known.
        assert_eq!(
            seen(Api::AnthropicMessages, "event: ping\n\n", 4),
            Seen::default()
        );
    }

    #[test]
    fn openai_streams_take_response_completed_with_cached_tokens_apart() {
        let text = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n\
event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":1000,\"input_tokens_details\":{\"cached_tokens\":800},\"output_tokens\":50,\"output_tokens_details\":{\"reasoning_tokens\":20}}}}\n\n";
        let (u, done) = stream(Api::OpenAiResponses, text, 3);
        assert!(done);
        // Cut before response.completed: not even the input is known.
        let cut = &text[..text.find("event: response.completed").unwrap()];
        let s = seen(Api::OpenAiResponses, cut, 3);
        assert!(!s.complete && !s.input_known, "{s:?}");
        assert_eq!(
            u,
            Usage {
                input: 200,
                output: 50,
                cache_write: 0,
                cache_read: 800,
                web_search: 0,
            }
        );
    }

    #[test]
    fn whole_bodies_read_usage_at_the_end() {
        let mut m = Meter::new(Api::AnthropicMessages, false);
        m.feed(br#"{"content":[],"usage":{"input_tokens":5,"output_tokens":"#);
        m.feed(br#"9,"cache_read_input_tokens":2}}"#);
        assert_eq!(
            m.finish(),
            Seen {
                usage: Usage {
                    input: 5,
                    output: 9,
                    cache_write: 0,
                    cache_read: 2,
                    web_search: 0,
                },
                input_known: true,
                complete: true
            }
        );
        let mut m = Meter::new(Api::OpenAiResponses, false);
        m.feed(b"not json");
        assert!(!m.finish().complete);
    }

    #[test]
    fn web_searches_are_counted_from_either_api() {
        let text = "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n\
data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9,\"server_tool_use\":{\"web_search_requests\":4}}}\n\n";
        let s = seen(Api::AnthropicMessages, text, 5);
        assert_eq!((s.usage.web_search, s.complete), (4, true));
        let mut m = Meter::new(Api::AnthropicMessages, false);
        m.feed(br#"{"usage":{"input_tokens":1,"output_tokens":2,"server_tool_use":{"web_search_requests":7}}}"#);
        assert_eq!(m.finish().usage.web_search, 7);
        // OpenAI: each web_search_call item of the final response; other items, and items
        // that are not objects, are not.
        let output = r#"[{"type":"web_search_call","id":"a"},{"type":"message","content":[{"type":"web_search_call"}]},7,[1],{"type":"web_search_call"},{"id":"x","type":"web_search_call"}]"#;
        let usage = r#"{"input_tokens":10,"output_tokens":1}"#;
        let text = format!("data: {{\"type\":\"response.completed\",\"response\":{{\"output\":{output},\"usage\":{usage}}}}}\n\n");
        let s = seen(Api::OpenAiResponses, &text, 9);
        assert_eq!(
            (s.usage.web_search, s.usage.input, s.complete),
            (3, 10, true)
        );
        let mut m = Meter::new(Api::OpenAiResponses, false);
        m.feed(format!("{{\"output\":{output},\"usage\":{usage}}}").as_bytes());
        assert_eq!(m.finish().usage.web_search, 3);
        // An output that is not a list counts none, and the usage is still read.
        let mut m = Meter::new(Api::OpenAiResponses, false);
        m.feed(format!("{{\"output\":\"x\",\"usage\":{usage}}}").as_bytes());
        let s = m.finish();
        assert_eq!(
            (s.usage.web_search, s.usage.input, s.complete),
            (0, 10, true)
        );
    }

    #[test]
    fn garbage_never_panics_and_counts_as_incomplete() {
        for text in [
            "data: {\n\n",
            "data: [1,2]\n\n",
            "\n\n\n",
            "data:",
            "event: x",
        ] {
            for api in [Api::AnthropicMessages, Api::OpenAiResponses] {
                let (_, done) = stream(api, text, 1);
                assert!(!done, "{text}");
            }
        }
    }
}
