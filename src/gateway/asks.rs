//! Asks: a request refused only because no grant of the role matches it
//! ([`crate::policy::asks`]) waits for a person instead of failing at once. The gateway puts
//! it to the run's ask desk, which airlockd answers (`airlockctl asks`, `allow`, `deny`);
//! the gateway knows nothing of who may answer or how, only the answer.

use std::sync::Arc;
use std::time::Duration;

use crate::gateway::RunGateway;
use crate::policy::asks::AskKind;

/// One request put to a person.
#[derive(Debug, Clone)]
pub struct AskRequest {
    pub kind: AskKind,
    /// What is asked, as shown to people (secret-shaped words redacted).
    pub what: String,
    /// The exact request, which a `--for-run` answer grants again (never shown).
    pub key: String,
    /// The rule that refused it.
    pub rule: String,
}

/// How an ask was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskAnswer {
    /// This one request; `by` names who answered (`uid N`).
    Allow {
        by: String,
    },
    /// This request and any identical one for the rest of the run.
    AllowForRun {
        by: String,
    },
    Deny {
        by: String,
    },
}

/// A waiting ask: its id and where its answer comes.
pub struct Waiting {
    pub id: String,
    pub answer: tokio::sync::oneshot::Receiver<AskAnswer>,
}

/// Where a run's asks go (airlockd); only a run whose role the host's `asks` names has one.
pub trait AskDesk: Send + Sync + std::fmt::Debug {
    /// How long an ask waits for its answer.
    fn wait(&self) -> Duration;
    /// Whether a `--for-run` answer already granted exactly this request.
    fn granted(&self, kind: AskKind, key: &str) -> bool;
    /// Raise an ask; `Err` says why none may be raised (a fired instance).
    fn raise(&self, req: &AskRequest) -> Result<Waiting, String>;
    /// Nobody answered in time: withdraw it, so a late answer finds nothing.
    fn expire(&self, id: &str);
}

/// What the run's journal says of an ask: raised (`state` waiting), or answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskRecord {
    pub id: String,
    pub kind: AskKind,
    pub what: String,
    pub rule: String,
    /// waiting, allowed, allowed_for_run, granted_for_run, denied, expired, withdrawn.
    pub state: &'static str,
    /// Who answered (`uid N`), when someone did.
    pub by: Option<String>,
}

/// Put a refused request to a person. `Ok(by)`: allowed (by whom, or by an earlier
/// `--for-run` answer); `Err(text)`: the tool result's refusal.
pub async fn put(gw: &RunGateway, req: AskRequest, refused: &str) -> Result<String, String> {
    put_via(gw.plan.asks.clone(), gw.log.as_ref(), req, refused).await
}

/// [`put`] for a route that holds the run's desk and log itself (egress).
pub async fn put_via(
    desk: Option<Arc<dyn AskDesk>>,
    log: &dyn crate::gateway::CallLog,
    req: AskRequest,
    refused: &str,
) -> Result<String, String> {
    let Some(desk) = desk else {
        return Err(refused.to_string());
    };
    let record = |id: &str, state: &'static str, by: Option<&str>| AskRecord {
        id: id.to_string(),
        kind: req.kind,
        what: req.what.clone(),
        rule: req.rule.clone(),
        state,
        by: by.map(str::to_string),
    };
    if desk.granted(req.kind, &req.key) {
        log.ask(record("-", "granted_for_run", None));
        return Ok("an earlier answer for this run".into());
    }
    // A wait cut short (the run ends and its tasks are dropped mid-wait) is still
    // recorded, as withdrawn.
    let guard = std::sync::Mutex::new(Withdrawn { log, rec: None });
    let (outcome, state, by) = put_to(desk.clone(), &req, refused, &|id| {
        log.ask(record(id, "waiting", None));
        guard.lock().unwrap_or_else(|e| e.into_inner()).rec = Some(record(id, "withdrawn", None));
    })
    .await;
    guard.lock().unwrap_or_else(|e| e.into_inner()).rec = None;
    let id = outcome.0;
    log.ask(record(&id, state, by.as_deref()));
    outcome.1
}

/// Records a raised ask as withdrawn when its wait is dropped before an outcome.
struct Withdrawn<'a> {
    log: &'a dyn crate::gateway::CallLog,
    rec: Option<AskRecord>,
}

impl Drop for Withdrawn<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.rec.take() {
            self.log.ask(r);
        }
    }
}

type Outcome = (
    (String, Result<String, String>),
    &'static str,
    Option<String>,
);

async fn put_to(
    desk: Arc<dyn AskDesk>,
    req: &AskRequest,
    refused: &str,
    raised: &(dyn Fn(&str) + Sync),
) -> Outcome {
    let waiting = match desk.raise(req) {
        Ok(w) => w,
        Err(why) => {
            return (
                ("-".into(), Err(format!("{refused} (not asked: {why})"))),
                "refused",
                None,
            )
        }
    };
    let id = waiting.id.clone();
    raised(&id);
    let r = match tokio::time::timeout(desk.wait(), waiting.answer).await {
        Ok(Ok(AskAnswer::Allow { by })) => (Ok(by.clone()), "allowed", Some(by)),
        Ok(Ok(AskAnswer::AllowForRun { by })) => (Ok(by.clone()), "allowed_for_run", Some(by)),
        Ok(Ok(AskAnswer::Deny { by })) => (
            Err(format!("{refused} (ask {id} denied by {by})")),
            "denied",
            Some(by),
        ),
        Ok(Err(_)) => (
            Err(format!("{refused} (ask {id} withdrawn: the run is ending)")),
            "withdrawn",
            None,
        ),
        Err(_) => {
            desk.expire(&id);
            (
                Err(format!(
                    "{refused} (ask {id}: nobody answered within {} s)",
                    desk.wait().as_secs()
                )),
                "expired",
                None,
            )
        }
    };
    ((id, r.0), r.1, r.2)
}

/// An MCP tool call refused by `d`: put to a person when it is askable (no pattern of the
/// role lists the tool). `Ok(by)`: allowed; `Err(text)`: the refusal's text.
pub async fn tool(
    gw: &RunGateway,
    connector: &str,
    tool: &str,
    d: &crate::policy::Decision,
) -> Result<String, String> {
    let refused = format!("refused by {}: {}", d.rule, d.reason);
    // GitHub's tools are GitHub writes and merges: never put to a person.
    let github = connector == crate::gateway::github::mcp::CONNECTOR;
    if github
        || !crate::policy::asks::askable(AskKind::Tool, &d.rule, gw.plan.asks.is_some(), false)
    {
        return Err(refused);
    }
    // A tool name is 1 to 128 plain characters (checked before "not listed").
    let what = format!("{connector}/{tool}");
    let req = AskRequest {
        kind: AskKind::Tool,
        what: what.clone(),
        key: what,
        rule: d.rule.clone(),
    };
    put(gw, req, &refused).await
}

/// An egress destination refused by `d`: put to a person when it is askable (no grant of
/// the role names the host). `Ok(by)`: allowed; the addresses are still checked after.
pub async fn egress(
    desk: Option<Arc<dyn AskDesk>>,
    log: &dyn crate::gateway::CallLog,
    host: &str,
    port: u16,
    d: &crate::policy::Decision,
) -> Result<String, String> {
    let refused = format!("refused by {}: {}", d.rule, d.reason);
    if !crate::policy::asks::askable(AskKind::Egress, &d.rule, desk.is_some(), false) {
        return Err(refused);
    }
    let what = format!("{host}:{port}");
    let req = AskRequest {
        kind: AskKind::Egress,
        what: what.clone(),
        key: what,
        rule: d.rule.clone(),
    };
    put_via(desk, log, req, &refused).await
}
