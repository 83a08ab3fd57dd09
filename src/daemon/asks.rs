//! Asks: the run's gateway puts a request refused for want of a grant to a person
//! ([`crate::gateway::asks`]); here they wait, are listed (`airlockctl asks`) and answered
//! (`allow ID [--for-run]`, `deny ID`) by the run's launcher or an admin. An ask lives only
//! while its run's gateway waits for it: a run that ends drops it, and it is never stored.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::json;
use tokio::sync::oneshot;

use super::Daemon;
use crate::control::auth::{self, Peer};
use crate::control::protocol::{AskHow, AskShown, ErrorCode, Response};
use crate::gateway::asks::{AskAnswer, AskDesk, AskRequest, Waiting};
use crate::policy::asks::AskKind;
use crate::supervisor::instances;

/// An ask id: `a-` and a number (a decision's is `d-` and a number).
pub const PREFIX: &str = "a-";

struct Pending {
    run: String,
    instance: String,
    launched_by: u32,
    kind: AskKind,
    what: String,
    key: String,
    rule: String,
    grants: Arc<Mutex<HashSet<(AskKind, String)>>>,
    tx: oneshot::Sender<AskAnswer>,
}

#[derive(Default)]
struct Registry {
    next: u64,
    pending: BTreeMap<u64, Pending>,
    /// Ids answered, expired or withdrawn, so a late answer is told so (not "unknown").
    closed: BTreeSet<u64>,
}

static ASKS: Mutex<Option<Registry>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut g = ASKS.lock().unwrap_or_else(|e| e.into_inner());
    let reg = g.get_or_insert_with(Registry::default);
    // An ask whose gateway stopped waiting (its run ended) is gone.
    let gone: Vec<u64> = reg
        .pending
        .iter()
        .filter(|(_, p)| p.tx.is_closed())
        .map(|(id, _)| *id)
        .collect();
    for id in gone {
        reg.pending.remove(&id);
        reg.closed.insert(id);
    }
    f(reg)
}

/// One run's ask desk, handed to its gateway when the host's `asks` names its role.
#[derive(Debug)]
pub struct RunAsks {
    pub daemon: Weak<Daemon>,
    pub run: String,
    pub instance: String,
    pub launched_by: u32,
    pub wait: Duration,
    /// `--for-run` answers: exactly these requests go through for the rest of the run.
    pub grants: Arc<Mutex<HashSet<(AskKind, String)>>>,
}

impl AskDesk for RunAsks {
    fn wait(&self) -> Duration {
        self.wait
    }

    fn granted(&self, kind: AskKind, key: &str) -> bool {
        self.grants
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(kind, key.to_string()))
    }

    fn raise(&self, req: &AskRequest) -> Result<Waiting, String> {
        let d = self.daemon.upgrade().ok_or("airlockd is shutting down")?;
        // Nothing a fired instance asks is put to anyone (an unknown one counts as fired).
        let fired = instances::lookup(&d.set().config, &self.instance).map_or(true, |e| e.fired);
        if fired {
            return Err("the instance is fired".into());
        }
        let (tx, rx) = oneshot::channel();
        let id = with(|reg| {
            reg.next += 1;
            let id = reg.next;
            reg.pending.insert(
                id,
                Pending {
                    run: self.run.clone(),
                    instance: self.instance.clone(),
                    launched_by: self.launched_by,
                    kind: req.kind,
                    what: req.what.clone(),
                    key: req.key.clone(),
                    rule: req.rule.clone(),
                    grants: self.grants.clone(),
                    tx,
                },
            );
            id
        });
        Ok(Waiting {
            id: format!("{PREFIX}{id}"),
            answer: rx,
        })
    }

    fn expire(&self, id: &str) {
        if let Some(n) = number(id) {
            with(|reg| {
                if reg.pending.remove(&n).is_some() {
                    reg.closed.insert(n);
                }
            });
        }
    }
}

/// The number of an ask id, when `id` has an ask's shape.
pub fn number(id: &str) -> Option<u64> {
    id.strip_prefix(PREFIX)
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|n| n.parse().ok())
}

/// Whether `id` is shaped as an ask's id.
pub fn is_ask_id(id: &str) -> bool {
    number(id).is_some()
}

/// `asks`: what waits, for every operator to see.
pub fn list() -> Response {
    let asks: Vec<_> = with(|reg| {
        reg.pending
            .iter()
            .map(|(id, p)| {
                json!({
                    "id": format!("{PREFIX}{id}"),
                    "run": p.run,
                    "instance": p.instance,
                    "kind": p.kind.as_str(),
                    "what": p.what,
                    "rule": p.rule,
                })
            })
            .collect()
    });
    Response::ok(json!({ "asks": asks }))
}

/// The asks of run `run` waiting now, oldest first (a terminal session's status line).
pub fn of_run(run: &str) -> Vec<AskShown> {
    with(|reg| {
        reg.pending
            .iter()
            .filter(|(_, p)| p.run == run)
            .map(|(id, p)| AskShown {
                id: format!("{PREFIX}{id}"),
                kind: p.kind.as_str().to_string(),
                what: p.what.clone(),
                rule: p.rule.clone(),
            })
            .collect()
    })
}

/// `allow ID [--for-run]` and `deny ID`: the run's launcher or an admin answers.
pub fn answer(d: &Daemon, peer: &Peer, id: &str, how: How) -> Response {
    let shown = crate::terminal::escaped(id);
    let Some(n) = number(id) else {
        return Response::err(
            ErrorCode::BadRequest,
            format!("{shown}: not an ask id (a-N); `airlockctl asks` lists them"),
        );
    };
    let groups = d.set().groups.clone();
    let by = format!("uid {}", peer.uid);
    with(|reg| {
        let Some(p) = reg.pending.get(&n) else {
            return if reg.closed.contains(&n) {
                Response::err(
                    ErrorCode::Refused,
                    format!("ask {shown} was already answered, expired or withdrawn with its run"),
                )
            } else {
                Response::err(
                    ErrorCode::NotFound,
                    format!("no ask {shown}; `airlockctl asks` lists those waiting"),
                )
            };
        };
        if !auth::may_stop(peer, &groups, p.launched_by) {
            return Response::err(
                ErrorCode::Forbidden,
                format!(
                    "only run {}'s launcher (uid {}) or an admin may answer its asks",
                    p.run, p.launched_by
                ),
            );
        }
        let Some(p) = reg.pending.remove(&n) else {
            return Response::err(ErrorCode::Internal, "the ask vanished");
        };
        reg.closed.insert(n);
        let answer = match how {
            How::Allow => AskAnswer::Allow { by: by.clone() },
            How::AllowForRun => {
                p.grants
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert((p.kind, p.key.clone()));
                AskAnswer::AllowForRun { by: by.clone() }
            }
            How::Deny => AskAnswer::Deny { by: by.clone() },
        };
        let word = match how {
            How::Allow => "allowed",
            How::AllowForRun => "allowed for the rest of its run",
            How::Deny => "denied",
        };
        if p.tx.send(answer).is_err() {
            return Response::err(
                ErrorCode::Refused,
                format!("ask {shown} was withdrawn: its run stopped waiting"),
            );
        }
        Response::ok(json!({
            "id": id, "run": p.run, "answered_by": by,
            "message": format!("ask {shown} {word}: {} {}", p.kind.as_str(), p.what),
        }))
    })
}

/// How a person answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    Allow,
    AllowForRun,
    Deny,
}

impl From<AskHow> for How {
    fn from(h: AskHow) -> How {
        match h {
            AskHow::Allow => How::Allow,
            AskHow::AllowForRun => How::AllowForRun,
            AskHow::Deny => How::Deny,
        }
    }
}
