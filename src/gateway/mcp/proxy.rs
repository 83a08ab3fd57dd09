//! The gateway as the MCP server of a connector (`/mcp/<connector>` for `run.mcp.<name>:
//! {via: airlock}`), in front of the upstream airlockd's config declares. Every message is
//! checked against the role before anything reaches the upstream, and what is forwarded is
//! what was checked, rebuilt: a fresh request with Airlock's own id, the known parameters
//! only, re-serialized.
//!
//! - tools/list, resources/list and resources/templates/list come back filtered to what the
//!   role lists (every page; a later list after a change is filtered afresh). Cursors are
//!   Airlock's own tokens, mapped to the upstream's per session.
//! - tools/call, resources/read, resources/subscribe and unsubscribe outside `tools` and
//!   `resources`, inside `deny`, or against `args` are refused and reach nothing upstream.
//!   A URI goes upstream in its canonical spelling, the one that was checked
//!   ([`crate::policy::resource::canonical_uri`]), never as the agent spelled it.
//! - What comes back is held to the same rules: each resource a tool result embeds or
//!   links, and each of a `resources/read` answer's contents, must be one the role could
//!   read; any other is replaced by a notice saying which rule withheld it, and journaled.
//! - prompts, completions and logging fail closed: a role cannot grant them.
//! - The upstream's own requests (sampling, elicitation, roots) are answered by
//!   [`crate::gateway::mcp::upstream`], never relayed; its notifications go no further.
//! - Each side keeps its own session: the agent's id is Airlock's, the upstream's stays here.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::gateway::mcp::jsonrpc::{
    self, negotiate, parse_message, rpc_error, rpc_result, Headers, Reply, INTERNAL_ERROR,
    INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, REFUSED,
};
use crate::gateway::mcp::upstream::{Exchange, Upstream, UpstreamError};
use crate::gateway::{withhold, CallLog, CallRecord, RunGateway};

/// One connector of a run: its upstream and the sessions the agent opened on it.
pub struct Connector {
    pub name: String,
    /// Reached only through [`Connector::exchange`], which withholds the credential.
    upstream: Upstream,
    pub sessions: jsonrpc::Sessions<ProxySession>,
    /// Exchanges with the upstream at once (each may read an answer of 16 MiB).
    in_flight: tokio::sync::Semaphore,
    /// The session stateless (2026-07-28) requests share with the upstream.
    stateless: tokio::sync::Mutex<Option<String>>,
    /// The connector's static credential: an upstream that echoes it must not hand it to
    /// the agent (nor the OAuth tokens and client secret its upstream holds).
    secret: Option<String>,
    /// Where what was withheld is journaled.
    log: std::sync::Arc<dyn CallLog>,
}

/// Most exchanges one connector of a run has with its upstream at once.
pub const MAX_IN_FLIGHT: usize = 4;

/// What Airlock keeps of one agent session on a connector.
#[derive(Debug, Default)]
pub struct ProxySession {
    upstream_session: Option<String>,
    version: String,
    next_id: u64,
    /// Airlock's cursor tokens -> the upstream's cursors.
    cursors: HashMap<String, String>,
    /// What the agent was told of the upstream (for server/discover).
    capabilities: Value,
    instructions: Option<String>,
}

/// Most cursors one session keeps (a long listing is a few pages).
const MAX_CURSORS: usize = 1024;

impl Connector {
    /// What the agent is told of a failure of the upstream: which connector it was, so the
    /// agent (and whoever reads its log) knows which server is gone.
    fn failed(&self, e: impl std::fmt::Display) -> String {
        format!("connector `{}`: {e}", self.name)
    }

    /// `secret`: the connector's credential, if it has one (never relayed to the agent).
    pub fn new(
        name: String,
        upstream: Upstream,
        secret: Option<&str>,
        log: std::sync::Arc<dyn CallLog>,
    ) -> Connector {
        Connector {
            name,
            upstream,
            sessions: jsonrpc::Sessions::default(),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            stateless: tokio::sync::Mutex::new(None),
            secret: secret.map(str::to_string),
            log,
        }
    }

    /// End the agent's session `id`, and its upstream session with it. False when it was
    /// not open.
    pub async fn end(&self, id: &str) -> bool {
        match self.sessions.take(id) {
            Some(s) => {
                self.end_upstream(s).await;
                true
            }
            None => false,
        }
    }

    /// End every session with the upstream (the run is over).
    pub async fn end_all(&self) {
        for s in self.sessions.take_all() {
            self.end_upstream(s).await;
        }
    }

    async fn end_upstream(&self, s: ProxySession) {
        if let (Upstream::Http(h), Some(up)) = (&self.upstream, s.upstream_session) {
            h.delete(&up).await;
        }
    }

    /// Every credential of this connector as it stands now, in each spelling
    /// [`withhold::forms`] names: an OAuth connector's tokens change while the run goes on.
    fn secrets(&self) -> withhold::Secrets {
        let live = match &self.upstream {
            Upstream::Http(h) => h.live_secrets(),
            Upstream::Stdio(_) => Vec::new(),
        };
        withhold::Secrets::new(self.secret.iter().chain(live.iter()).map(String::as_str))
    }

    /// The one way to the upstream: send `msg` and take its answer with every copy of the
    /// connector's credentials withheld, before anything reads it, so whatever part of it
    /// reaches the agent (initialize's serverInfo and instructions, a listing's
    /// descriptions, a result, an error) was scrubbed; what was withheld is journaled.
    async fn exchange(
        &self,
        msg: &Value,
        id: Option<&Value>,
        session: Option<&str>,
        version: Option<&str>,
    ) -> Result<Exchange, UpstreamError> {
        let mut ex = self.upstream.post(msg, id, session, version).await?;
        let Some(resp) = ex.response.take() else {
            return Ok(ex);
        };
        let secrets = self.secrets();
        if secrets.is_empty() {
            ex.response = Some(resp);
            return Ok(ex);
        }
        let (text, n) = secrets.text(&resp.to_string());
        if n > 0 {
            self.log.withheld(withhold::WithheldRecord {
                route: format!("mcp {}", self.name),
                endpoint: crate::gateway::mcp::upstream::shown_method(
                    msg.get("method").and_then(Value::as_str),
                ),
                in_headers: 0,
                in_body: n as u64,
            });
        }
        // The mark stands inside a JSON string; a credential that spanned JSON's own
        // syntax leaves no answer, and the agent gets an error, never a guess.
        ex.response = Some(serde_json::from_str(&text).map_err(|_| UpstreamError::Echoed)?);
        Ok(ex)
    }
}

/// One POSTed message to the connector's endpoint.
pub async fn post(gw: &RunGateway, c: &Connector, h: Headers<'_>, body: &[u8]) -> Reply {
    let msg = match parse_message(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Err(r) = h.agree(&msg) {
        return r;
    }
    let stateless = match jsonrpc::stateless(&msg, &h) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if !stateless {
        if let Some(("initialize", id)) = msg.request() {
            return initialize(c, id, &msg.params).await;
        }
    }
    // For the call's trace span: the agent's session (none when stateless) and revision.
    let (agent_session, version) = match stateless {
        true => (None, h.version.map(str::to_string)),
        false => (h.session.map(str::to_string), h.version.map(str::to_string)),
    };
    // A stateless request rides on one session Airlock keeps with the upstream for them.
    let session = match stateless {
        true => match stateless_session(c).await {
            Ok(s) => s,
            Err(r) => return r,
        },
        false => match c.sessions.admit(h) {
            Ok(s) => s,
            Err(r) => return r,
        },
    };
    let Some((method, id)) = msg.request() else {
        // The agent's notifications and responses stay here: the upstream has what it
        // needs (Airlock sent its `initialized`), and Airlock relays it no request.
        return Reply::accepted();
    };
    let p = &msg.params;
    if stateless && method == "server/discover" {
        let (caps, instructions) = c
            .sessions
            .with(&session, |s| {
                (s.capabilities.clone(), s.instructions.clone())
            })
            .unwrap_or_default();
        let mut out = json!({
            "resultType": "complete",
            "supportedVersions": jsonrpc::all_versions(),
            "capabilities": caps,
            "serverInfo": {"name": c.name, "version": env!("CARGO_PKG_VERSION")},
        });
        if let Some(i) = instructions {
            out["instructions"] = json!(i);
        }
        return Reply::json(rpc_result(id, out));
    }
    let rpc =
        crate::gateway::RpcMeta::new(method, id, agent_session.as_deref(), version.as_deref());
    let reply = crate::gateway::RPC
        .scope(rpc, answer(gw, c, &session, method, id, p))
        .await;
    Reply::json(if stateless {
        mark_complete(reply)
    } else {
        reply
    })
}

/// The stateless revision's results are marked complete.
fn mark_complete(mut reply: Value) -> Value {
    if let Some(r) = reply.get_mut("result") {
        *r = jsonrpc::complete(r.take());
    }
    reply
}

/// The session stateless requests share: opened with the upstream on the first one.
async fn stateless_session(c: &Connector) -> Result<String, Reply> {
    let mut slot = c.stateless.lock().await;
    if let Some(s) = slot
        .as_ref()
        .filter(|s| c.sessions.with(s, |_| ()).is_some())
    {
        return Ok(s.clone());
    }
    let r = initialize(
        c,
        &json!(0),
        &json!({"protocolVersion": jsonrpc::SUPPORTED_VERSIONS[0]}),
    )
    .await;
    let Some(s) = r.session else {
        return Err(r);
    };
    *slot = Some(s.clone());
    Ok(s)
}

/// One request of an agent session (either revision).
async fn answer(
    gw: &RunGateway,
    c: &Connector,
    session: &str,
    method: &str,
    id: &Value,
    p: &Value,
) -> Value {
    let out = match method {
        "ping" => Ok(json!({})),
        // Each listing's items, kept when the role grants the name or URI they carry.
        "tools/list" => {
            let policy = &gw.plan.policy.get();
            list(c, session, method, p, "tools", "name", |n| {
                policy.tool_listed(&c.name, n).allow
            })
            .await
        }
        "resources/list" => {
            let policy = &gw.plan.policy.get();
            list(c, session, method, p, "resources", "uri", |u| {
                policy.resource(&c.name, u).allow
            })
            .await
        }
        "resources/templates/list" => {
            let policy = &gw.plan.policy.get();
            list(
                c,
                session,
                method,
                p,
                "resourceTemplates",
                "uriTemplate",
                |t| policy.resource(&c.name, &template_probe(t)).allow,
            )
            .await
        }
        "tools/call" => return tool_call(gw, c, session, id, p).await,
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            return resource(gw, c, session, id, method, p).await
        }
        "prompts/list" | "prompts/get" | "completion/complete" | "logging/setLevel" => Err((
            METHOD_NOT_FOUND,
            "Airlock relays no prompts, completions or logging from a connector".to_string(),
        )),
        _ => Err((
            METHOD_NOT_FOUND,
            "method not relayed by Airlock's gateway".to_string(),
        )),
    };
    match out {
        Ok(result) => rpc_result(id, result),
        Err((code, msg)) => rpc_error(id, code, &msg),
    }
}

/// What the agent may learn of the upstream's capabilities: tools and resources, nothing
/// of prompts, completions, logging or experiments, and no change notifications (none are
/// relayed).
fn capabilities(up: &Value) -> Value {
    let mut caps = Map::new();
    if up.get("tools").is_some_and(Value::is_object) {
        caps.insert("tools".into(), json!({}));
    }
    if up.get("resources").is_some_and(Value::is_object) {
        caps.insert("resources".into(), json!({}));
    }
    Value::Object(caps)
}

async fn initialize(c: &Connector, id: &Value, params: &Value) -> Reply {
    let version = negotiate(params);
    // Airlock's own client identity and no client capabilities: the upstream has no
    // sampling, elicitation or roots to ask for.
    let init = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "airlock-gateway", "version": env!("CARGO_PKG_VERSION")},
        }
    });
    let Ok(_permit) = c.in_flight.acquire().await else {
        return Reply::refused(503, INTERNAL_ERROR, "the gateway is stopping");
    };
    let ex = match c.exchange(&init, Some(&json!(0)), None, None).await {
        Ok(ex) => ex,
        Err(e) => return Reply::refused(502, INTERNAL_ERROR, &c.failed(e)),
    };
    let Some(result) = ex.response.as_ref().and_then(|r| r.get("result")) else {
        return Reply::refused(
            502,
            INTERNAL_ERROR,
            "the connector's upstream refused to initialize",
        );
    };
    let Some(up_version) = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .filter(|v| jsonrpc::SUPPORTED_VERSIONS.contains(v))
    else {
        return Reply::refused(
            502,
            INTERNAL_ERROR,
            "the connector's upstream speaks no MCP revision Airlock does",
        );
    };
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    if let Err(e) = c
        .exchange(&initialized, None, ex.session.as_deref(), Some(up_version))
        .await
    {
        return Reply::refused(502, INTERNAL_ERROR, &c.failed(e));
    }
    let caps = capabilities(result.get("capabilities").unwrap_or(&Value::Null));
    let text = |k: &str| result.get(k).and_then(Value::as_str).map(str::to_string);
    let state = ProxySession {
        upstream_session: ex.session.clone(),
        version: up_version.to_string(),
        next_id: 1,
        cursors: HashMap::new(),
        capabilities: caps.clone(),
        instructions: text("instructions"),
    };
    let Some(session) = c.sessions.open(state) else {
        return Reply::refused(500, INVALID_REQUEST, "no session id could be made");
    };
    let info = result.get("serverInfo");
    let info_text = |k: &str| info.and_then(|i| i.get(k)).and_then(Value::as_str);
    let mut server_info = json!({
        "name": info_text("name").unwrap_or(&c.name),
        "version": info_text("version").unwrap_or("unknown"),
    });
    if let Some(t) = info_text("title") {
        server_info["title"] = json!(t);
    }
    let mut out = json!({
        "protocolVersion": up_version,
        "capabilities": caps,
        "serverInfo": server_info,
    });
    if let Some(i) = text("instructions") {
        out["instructions"] = json!(i);
    }
    Reply {
        status: 200,
        body: Some(rpc_result(id, out)),
        session: Some(session),
    }
}

/// A request of this session to the upstream, with Airlock's own id; its result, or the
/// upstream's error as (code, message).
async fn forward(
    c: &Connector,
    session: &str,
    method: &str,
    params: Value,
    asked: &mut Vec<&'static str>,
) -> Result<Value, (i64, String)> {
    let Some((up_id, up_session, version)) = c.sessions.with(session, |s| {
        s.next_id += 1;
        (s.next_id, s.upstream_session.clone(), s.version.clone())
    }) else {
        return Err((INVALID_REQUEST, "the session ended".into()));
    };
    let req = json!({"jsonrpc": "2.0", "id": up_id, "method": method, "params": params});
    let _permit = c
        .in_flight
        .acquire()
        .await
        .map_err(|_| (INTERNAL_ERROR, "the gateway is stopping".to_string()))?;
    let ex = c
        .exchange(
            &req,
            Some(&json!(up_id)),
            up_session.as_deref(),
            Some(&version),
        )
        .await
        .map_err(|e| match e {
            UpstreamError::TooManyRequests => {
                asked.push("more than 16 requests of its client: refused");
                (INTERNAL_ERROR, c.failed(e))
            }
            UpstreamError::Status(404) => (
                INTERNAL_ERROR,
                c.failed("the connector's upstream ended its session; initialize again"),
            ),
            e => (INTERNAL_ERROR, c.failed(e)),
        })?;
    // Whatever the upstream answers, what it asked meanwhile is the caller's to journal.
    asked.extend(&ex.asked);
    let mut resp = ex.response.unwrap_or(Value::Null);
    if let Some(err) = resp.get("error") {
        let code = err
            .get("code")
            .and_then(Value::as_i64)
            .unwrap_or(INTERNAL_ERROR);
        let msg = err
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("the connector's upstream refused the request");
        return Err((code, msg.chars().take(500).collect()));
    }
    // Taken out of the answer, which is dropped here: no copy of the result.
    match resp.get_mut("result") {
        Some(r) if r.is_object() => Ok(r.take()),
        _ => Err((
            INTERNAL_ERROR,
            "the connector's upstream sent no result".into(),
        )),
    }
}

/// A listing, filtered: `key` holds the items, each kept when `keep` allows the string at
/// its `field` (an item without one goes). The cursor the agent sends is Airlock's; the
/// upstream's next cursor is kept here.
async fn list(
    c: &Connector,
    session: &str,
    method: &str,
    params: &Value,
    key: &str,
    field: &str,
    keep: impl Fn(&str) -> bool,
) -> Result<Value, (i64, String)> {
    let mut up_params = json!({});
    if let Some(cursor) = params.get("cursor") {
        let token = cursor
            .as_str()
            .ok_or((INVALID_PARAMS, "params.cursor: a string".to_string()))?;
        let up = c
            .sessions
            .with(session, |s| s.cursors.get(token).cloned())
            .flatten()
            .ok_or((
                INVALID_PARAMS,
                "params.cursor: not a cursor of this session".to_string(),
            ))?;
        up_params["cursor"] = json!(up);
    }
    let result = forward(c, session, method, up_params, &mut Vec::new()).await?;
    let items: Vec<Value> = result
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter(|item| item.get(field).and_then(Value::as_str).is_some_and(&keep))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let mut out = json!({ key: items });
    if let Some(next) = result.get("nextCursor").and_then(Value::as_str) {
        let token = c.sessions.with(session, |s| {
            if s.cursors.len() >= MAX_CURSORS {
                s.cursors.clear();
            }
            let t = format!("airlock-{}", s.cursors.len() + 1);
            s.cursors.insert(t.clone(), next.to_string());
            t
        });
        if let Some(t) = token {
            out["nextCursor"] = json!(t);
        }
    }
    Ok(out)
}

/// A URI that stands for a template when matching resource patterns: each `{var}` as `x`.
fn template_probe(tpl: &str) -> String {
    let mut out = String::with_capacity(tpl.len());
    let mut in_var = false;
    for ch in tpl.chars() {
        match (ch, in_var) {
            ('{', false) => in_var = true,
            ('}', true) => {
                in_var = false;
                out.push('x');
            }
            (_, true) => {}
            (c, false) => out.push(c),
        }
    }
    out
}

async fn tool_call(gw: &RunGateway, c: &Connector, session: &str, id: &Value, p: &Value) -> Value {
    let started = std::time::Instant::now();
    let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
    let args = p.get("arguments").cloned().unwrap_or(json!({}));
    let mut rec = CallRecord::new(&c.name, if name.is_empty() { "(none)" } else { name });
    rec.detail = jsonrpc::shape(&args);
    let mut d = gw.plan.policy.get().tool(&c.name, name, &args);
    // A tool no pattern lists may be put to a person; the GitHub checks below still hold.
    let mut refusal = None;
    if !d.allow {
        match crate::gateway::asks::tool(gw, &c.name, name, &d).await {
            Ok(by) => {
                d = crate::policy::Decision::allow(
                    format!("ask: allowed by {by}"),
                    "a person allowed it",
                )
            }
            Err(text) => refusal = Some(text),
        }
    }
    // The GitHub connector's writes are GitHub writes: the same checks and budget.
    let mut github = None;
    if let (true, Some(gh)) = (
        d.allow && c.name == crate::gateway::github::mcp::CONNECTOR,
        &gw.github,
    ) {
        match crate::gateway::github::mcp::check(gh, name, &args).await {
            Ok(p) => github = p.map(|p| (gh, p)),
            Err(why) => {
                d = crate::policy::Decision::deny("github", why);
            }
        }
    }
    rec.decided(&d);
    let reply = if !d.allow {
        rpc_result(
            id,
            json!({
                "content": [{"type": "text", "text": refusal.filter(|_| !d.allow && d.rule != "github").unwrap_or_else(|| format!("refused by {}: {}", d.rule, d.reason))}],
                "isError": true,
            }),
        )
    } else {
        let params = json!({"name": name, "arguments": args});
        let answer = forward(c, session, "tools/call", params, &mut rec.asked).await;
        if let Some((gh, p)) = &github {
            let ok = matches!(&answer, Ok(r) if r.get("isError") != Some(&json!(true)));
            crate::gateway::github::mcp::passed(gh, name, p, ok);
        }
        match answer {
            Ok(mut result) => {
                rec.is_error = result.get("isError") == Some(&json!(true));
                hold_embedded(gw, c, name, &mut result);
                hold_structured(gw, c, name, &mut result);
                rpc_result(id, result)
            }
            Err((code, msg)) => rpc_error(id, code, &msg),
        }
    };
    rec.finish(started, &reply, gw.log.as_ref());
    reply
}

async fn resource(
    gw: &RunGateway,
    c: &Connector,
    session: &str,
    id: &Value,
    method: &str,
    p: &Value,
) -> Value {
    let started = std::time::Instant::now();
    let uri = p.get("uri").and_then(Value::as_str).unwrap_or_default();
    let mut rec = CallRecord::new(&c.name, method);
    // A URI may carry anything: the journal keeps its scheme only.
    rec.detail = format!("{}:…", uri.split(':').next().unwrap_or_default());
    let (d, canonical) = gw.plan.policy.get().resource_read(&c.name, uri);
    rec.decided(&d);
    let reply = match canonical.filter(|_| d.allow) {
        None => rpc_error(id, REFUSED, &format!("refused by {}: {}", d.rule, d.reason)),
        Some(uri) => match forward(c, session, method, json!({"uri": uri}), &mut rec.asked).await {
            Ok(mut result) => {
                rec.is_error = false;
                if method == "resources/read" {
                    hold_contents(gw, c, &uri, &mut result);
                }
                rpc_result(id, result)
            }
            Err((code, msg)) => rpc_error(id, code, &msg),
        },
    };
    rec.finish(started, &reply, gw.log.as_ref());
    reply
}

/// A tool result's embedded resources (`resource`) and resource links (`resource_link`),
/// each held to the role's resource rules like a read: one it could not read is replaced
/// by a text notice naming the rule, and journaled.
fn hold_embedded(gw: &RunGateway, c: &Connector, tool: &str, result: &mut Value) {
    let Some(items) = result.get_mut("content").and_then(Value::as_array_mut) else {
        return;
    };
    for item in items {
        let uri = match item.get("type").and_then(Value::as_str) {
            Some("resource") => item.get("resource").and_then(|r| r.get("uri")),
            Some("resource_link") => item.get("uri"),
            _ => continue,
        };
        let uri = uri.and_then(Value::as_str).unwrap_or_default().to_string();
        if let Some(notice) = withheld(gw, c, tool, &uri) {
            *item = json!({"type": "text", "text": notice});
        }
    }
}

/// A tool result's `structuredContent`, held to the same rules as its `content` (it is free
/// JSON, so the check is conservative): every object in it with a string member named `uri`
/// (in any case) is taken for a resource, and every string that is a URI for one; if the
/// role may not read one of those objects' resources, or a `deny` entry of the role names
/// one of those strings, the whole structuredContent is withheld (a notice goes in
/// `content`) and each is journaled like a withheld embedded resource. A string the role
/// merely does not list passes (a tool's output may name any web page).
fn hold_structured(gw: &RunGateway, c: &Connector, tool: &str, result: &mut Value) {
    let Some(sc) = result.get("structuredContent") else {
        return;
    };
    let mut named: Vec<(String, bool)> = Vec::new();
    resources_in(sc, &mut named);
    let mut notices: Vec<String> = Vec::new();
    for (uri, is_object) in named {
        let d = gw.plan.policy.get().resource(&c.name, &uri);
        if d.allow || !(is_object || d.rule.starts_with("deny.")) {
            continue;
        }
        if let Some(n) = withheld(gw, c, tool, &uri) {
            notices.push(n);
        }
    }
    if notices.is_empty() {
        return;
    }
    if let Some(obj) = result.as_object_mut() {
        obj.remove("structuredContent");
        let notice = format!(
            "[Airlock withheld this result's structuredContent: it named {} resource(s) the role may not read: {}]",
            notices.len(),
            notices.join(" ")
        );
        match obj.get_mut("content").and_then(Value::as_array_mut) {
            Some(items) => items.push(json!({"type": "text", "text": notice})),
            None => {
                obj.insert("content".into(), json!([{"type": "text", "text": notice}]));
            }
        }
    }
}

/// The resource URIs `v` names: `(uri, true)` for an object's string member `uri` (any
/// case), `(uri, false)` for any other string that parses as a URI with an authority or
/// the resource policy's one spelling. Depth is bounded by the strict parser.
fn resources_in(v: &Value, out: &mut Vec<(String, bool)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match x {
                    Value::String(s) if k.eq_ignore_ascii_case("uri") => {
                        out.push((s.clone(), true));
                    }
                    _ => resources_in(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| resources_in(x, out)),
        Value::String(s) if looks_like_uri(s) => out.push((s.clone(), false)),
        _ => {}
    }
}

/// `scheme:` then something, the scheme as RFC 3986 spells one (a bare word with a colon
/// in prose, `note: x`, has a space after it and is not taken).
fn looks_like_uri(s: &str) -> bool {
    s.split_once(':').is_some_and(|(scheme, rest)| {
        crate::names::is_scheme(scheme) && !rest.is_empty() && !rest.starts_with(' ')
    })
}

/// A `resources/read` answer's contents, each held to the role's resource rules: an upstream
/// answering one read with other resources hands over only those the role could read.
fn hold_contents(gw: &RunGateway, c: &Connector, asked: &str, result: &mut Value) {
    let Some(items) = result.get_mut("contents").and_then(Value::as_array_mut) else {
        return;
    };
    for item in items {
        let uri = item.get("uri").and_then(Value::as_str).unwrap_or_default();
        if let Some(notice) = withheld(gw, c, "resources/read", uri) {
            *item = json!({"uri": asked, "mimeType": "text/plain", "text": notice});
        }
    }
}

/// The notice standing in for a resource the role may not read, journaled as a refused
/// call of `tool` (the URI by its scheme only); None when the role may read it.
fn withheld(gw: &RunGateway, c: &Connector, tool: &str, uri: &str) -> Option<String> {
    let d = gw.plan.policy.get().resource(&c.name, uri);
    if d.allow {
        return None;
    }
    let started = std::time::Instant::now();
    let mut rec = CallRecord::new(&c.name, tool);
    rec.detail = format!("embedded {}:…", uri.split(':').next().unwrap_or_default());
    rec.decided(&d);
    rec.reason = format!(
        "{}; the upstream's answer held it and Airlock withheld it",
        d.reason
    );
    let notice = format!(
        "[Airlock withheld a resource in this answer: refused by {}: {}]",
        d.rule, d.reason
    );
    rec.finish(started, &json!(notice), gw.log.as_ref());
    Some(notice)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_matched_with_their_variables_filled() {
        assert_eq!(template_probe("repo://o/r/{path}"), "repo://o/r/x");
        assert_eq!(template_probe("test://{a}/b/{c}"), "test://x/b/x");
        assert_eq!(template_probe("plain://x"), "plain://x");
    }

    #[test]
    fn only_tools_and_resources_are_announced() {
        let up = json!({"tools": {"listChanged": true}, "resources": {"subscribe": true},
                        "prompts": {}, "completions": {}, "logging": {}, "experimental": {"x": {}}});
        assert_eq!(capabilities(&up), json!({"tools": {}, "resources": {}}));
        assert_eq!(capabilities(&json!({})), json!({}));
    }
}
