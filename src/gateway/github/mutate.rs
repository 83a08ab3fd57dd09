//! A GraphQL mutation through the GitHub route: its node ids resolved ([`super::nodes`]),
//! the write decided by the same rules in the same order as a REST write (writes.repos,
//! the action in `writes`, merge authority, the effective level, the budget), counted,
//! journaled as `github_write` with the endpoint `graphql <field>`, forwarded, and a pull
//! request it opened remembered as GitHub answers the gateway's own lookup of its id. A
//! refusal answers as GraphQL does, an `errors` array naming the rule, so `gh` prints it.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use super::mutation::{self, Mutation, NodeType};
use super::nodes::{self, Node};
use super::{forward, Github, Host};
use crate::gateway::GwBody;

/// Largest answer read from GitHub for a lookup or a mutation.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// A refusal in GraphQL's own shape (HTTP 200 with `errors`, as GitHub answers one): the
/// type where GitHub puts it and where the GraphQL specification does (`extensions`), the
/// message first (clients that match on the text see it where they always did).
pub fn refusal(message: &str) -> Response<GwBody> {
    let body = format!(
        r#"{{"data":null,"errors":[{{"message":{},"type":"FORBIDDEN","extensions":{{"type":"FORBIDDEN"}}}}]}}"#,
        Value::from(message)
    );
    let mut r = Response::new(crate::gateway::full(Bytes::from(body)));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

/// POST a GraphQL document of the gateway's own to GitHub with the installation token of
/// `repo`'s owner (or the first): its answer.
pub async fn ask(gh: &Github, repo: Option<&str>, body: &Value) -> Option<Value> {
    let token = gh.token_for(repo)?;
    super::own_request(gh, "/graphql", token, Some(body), MAX_ANSWER_BYTES).await
}

/// Each of `ids` resolved: from the run's cache, else by one lookup. `Err` with the rule
/// and why when GitHub could not be asked or does not know an id.
async fn resolve(gh: &Github, ids: &[&String]) -> Result<Vec<Node>, (&'static str, String)> {
    if gh.nodes.to_learn() {
        // The repository ids of writes.repos, once: most mutations then need no lookup.
        let repos = gh.plan.policy.repos().to_vec();
        if let Some(q) = nodes::repo_query(&repos) {
            if let Some(a) = ask(gh, repos.first().map(String::as_str), &q).await {
                for (id, full) in nodes::read_repos(&a) {
                    let node = Node {
                        ty: NodeType::Repository,
                        repo: Some(full),
                        number: None,
                        head: None,
                    };
                    gh.nodes.put(id, node);
                }
            }
        }
    }
    let missing: Vec<String> = ids
        .iter()
        .filter(|id| gh.nodes.get(id).is_none())
        .map(|id| id.to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !missing.is_empty() {
        let q = json!({"query": nodes::LOOKUP, "variables": {"ids": missing}});
        let answer = ask(gh, None, &q).await.ok_or((
            "github: node id",
            "GitHub could not be asked what the mutation's node ids are, so it does not go on"
                .to_string(),
        ))?;
        let got = nodes::read_lookup(&missing, &answer).ok_or((
            "github: node id",
            "GitHub's answer to the node lookup could not be read".to_string(),
        ))?;
        for (id, node) in missing.iter().zip(got) {
            let node = node.ok_or((
                "github: node id",
                "the mutation names a node id GitHub does not know".to_string(),
            ))?;
            gh.nodes.put(id.clone(), node);
        }
    }
    ids.iter()
        .map(|id| {
            gh.nodes.get(id).ok_or((
                "github: node id",
                "the mutation names a node id GitHub does not know".to_string(),
            ))
        })
        .collect()
}

/// Serve one mutation.
pub async fn handle(
    gh: &Github,
    parts: &hyper::http::request::Parts,
    body: Bytes,
    m: Mutation,
    started: Instant,
) -> Response<GwBody> {
    let endpoint = format!("graphql {}", m.field);
    let refuse = |repo: &str, name: &str, rule: &str, msg: &str| {
        gh.journal(repo, name, &endpoint, (false, rule, msg), 403, started);
        refusal(&format!("Airlock refused {endpoint} by {rule}: {msg}"))
    };
    let plan = match mutation::plan(&m) {
        Ok(p) => p,
        Err(why) => return refuse("-", "unknown", "github: unknown write", why),
    };
    if plan.field == "mergePullRequest" {
        // The merge gate decides on the pull request the merge names, as GitHub answers a
        // lookup of that id now, whatever the run's cache holds.
        gh.nodes.forget(&plan.subject);
    }
    let mut ids: Vec<&String> = vec![&plan.subject];
    ids.extend(plan.repos.iter());
    ids.extend(plan.labels.iter());
    ids.extend(plan.people.iter());
    let resolved = match resolve(gh, &ids).await {
        Ok(r) => r,
        Err((rule, msg)) => return refuse("-", "unknown", rule, &msg),
    };
    let subject = &resolved[0];
    if !plan.subject_types.contains(&subject.ty) {
        return refuse(
            "-",
            "unknown",
            "github: node id",
            &format!(
                "{} names a {:?}, not what it acts on",
                plan.field, subject.ty
            ),
        );
    }
    let Some(repo) = subject.repo.clone() else {
        return refuse(
            "-",
            "unknown",
            "github: node id",
            "the mutation's subject is in no repository",
        );
    };
    let writes = match mutation::writes(&m, subject.ty) {
        Ok(w) => w,
        Err(why) => return refuse(&repo, "unknown", "github: unknown write", why),
    };
    let name = super::write_name(&writes.actions);
    // The role's own rules first (writes.repos, the actions, merge authority, the level).
    if let Err(d) = gh.decide(&repo, &writes.actions, &name, &endpoint, started) {
        return refusal(&format!(
            "Airlock refused {name} by {}: {}",
            d.rule, d.reason
        ));
    }
    // Every other id the mutation names: a head repository in writes.repos, labels of
    // the subject's repository, accounts as assignees.
    let others = &resolved[1..];
    let (heads, rest) = others.split_at(plan.repos.len());
    let (labels, people) = rest.split_at(plan.labels.len());
    for h in heads {
        let ok = h.ty == NodeType::Repository
            && h.repo
                .as_deref()
                .is_some_and(|r| gh.plan.policy.writable(r));
        if !ok {
            return refuse(
                &repo,
                &name,
                "writes.repos",
                "headRepositoryId names a repository the role may not write to",
            );
        }
    }
    for l in labels {
        let ok = l.ty == NodeType::Label
            && l.repo
                .as_deref()
                .is_some_and(|r| r.eq_ignore_ascii_case(&repo));
        if !ok {
            return refuse(
                &repo,
                &name,
                "github: node id",
                "a label id names no label of the subject's repository",
            );
        }
    }
    if people
        .iter()
        .any(|p| !matches!(p.ty, NodeType::User | NodeType::Bot))
    {
        return refuse(
            &repo,
            &name,
            "github: node id",
            "an assignee id names no account",
        );
    }
    if writes.own_pull && !gh.nodes.opened_id(&plan.subject) {
        return refuse(
            &repo,
            &name,
            "pull_requests.open",
            "only a pull request this run opened may be edited",
        );
    }
    if let Some(head) = &writes.head {
        if let Err((rule, msg)) = gh.branch_rules(&repo, Some(head), false).await {
            let msg = format!("headRefName: {msg}");
            return refuse(&repo, &name, rule, &msg);
        }
    }
    let mut landed = String::new();
    let mut body = body;
    if writes
        .actions
        .contains(&crate::policy::github::Action::PullRequest("merge"))
    {
        match super::land::gate(gh, &repo, subject.number).await {
            Ok((note, head)) => {
                landed = format!("; {note}");
                // GitHub merges the head the gate decided on, or nothing.
                match pin_merge_head(&body, &head) {
                    Ok(b) => body = b,
                    Err(msg) => return refuse(&repo, &name, "land: head", &msg),
                }
            }
            Err((rule, msg)) => return refuse(&repo, &name, rule, &msg),
        }
    }
    let d = match gh.authorize(&repo, &writes.actions, &name, &endpoint, started) {
        Ok(d) => d,
        Err(d) => {
            return refusal(&format!(
                "Airlock refused {name} by {}: {}",
                d.rule, d.reason
            ))
        }
    };
    let resp = forward(gh, Host::Api, parts, body, Some(repo.clone())).await;
    let status = resp.status();
    gh.journal(
        &repo,
        &name,
        &endpoint,
        (true, &d.rule, &format!("{}{landed}", d.reason)),
        status.as_u16(),
        started,
    );
    // A pull request it opened: its id read from the answer, then looked up (the only
    // thing read from an answer to the run's own request); the answer passed on as it came.
    let (rparts, rbody) = resp.into_parts();
    let Ok(bytes) = Limited::new(rbody, MAX_ANSWER_BYTES).collect().await else {
        return super::refusal(
            StatusCode::BAD_GATEWAY,
            "Airlock: GitHub's answer to the mutation could not be read",
        );
    };
    let bytes = bytes.to_bytes();
    if rparts.status.is_success() {
        let id = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|a| nodes::created_pull(&m.field, &a));
        if let Some(id) = id {
            remember_opened(gh, &repo, id, writes.head.as_deref()).await;
        }
    }
    Response::from_parts(rparts, crate::gateway::full(bytes))
}

/// A `mergePullRequest` body (its one variable, the input) with `expectedHeadOid` naming
/// `head`, re-serialized.
fn pin_merge_head(body: &Bytes, head: &str) -> Result<Bytes, String> {
    let mut v: Value = serde_json::from_slice(body)
        .map_err(|_| "the merge's body could not be read again".to_string())?;
    let input = v
        .get_mut("variables")
        .and_then(Value::as_object_mut)
        .and_then(|vars| vars.values_mut().next())
        .ok_or("the merge names no input")?;
    *input = super::land::pin_head(Some(input), "expectedHeadOid", head)?;
    serde_json::to_vec(&v)
        .map(Bytes::from)
        .map_err(|_| "the merge could not be written again".to_string())
}

/// Remember pull request `id` as one this run opened in `repo` from branch `head` (`None`:
/// a REST open, whose head may name its owner), if GitHub's answer to the gateway's own
/// lookup of the id says so; otherwise nothing is remembered, and the run may not edit it.
async fn remember_opened(gh: &Github, repo: &str, id: String, head: Option<&str>) {
    let q = json!({"query": nodes::LOOKUP, "variables": {"ids": [&id]}});
    let Some(answer) = ask(gh, Some(repo), &q).await else {
        return;
    };
    let ids = [id];
    let Some(Some(node)) = nodes::read_lookup(&ids, &answer).and_then(|v| v.into_iter().next())
    else {
        return;
    };
    if !nodes::is_opened(&node, repo, head) {
        return;
    }
    let [id] = ids;
    gh.nodes.opened(repo, node.number, Some(id.clone()));
    gh.nodes.put(id, node);
}

/// A REST pull request opened (`POST /repos/O/R/pulls`): the node id in GitHub's answer
/// looked up and remembered as [`remember_opened`] does; the answer passed on as it came.
pub async fn remember_pull(gh: &Github, repo: &str, resp: Response<GwBody>) -> Response<GwBody> {
    let (rparts, rbody) = resp.into_parts();
    let Ok(bytes) = Limited::new(rbody, MAX_ANSWER_BYTES).collect().await else {
        return super::refusal(
            StatusCode::BAD_GATEWAY,
            "Airlock: GitHub's answer could not be read",
        );
    };
    let bytes = bytes.to_bytes();
    if rparts.status.is_success() {
        let id = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| {
            v.get("node_id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        });
        if let Some(id) = id {
            remember_opened(gh, repo, id, None).await;
        }
    }
    Response::from_parts(rparts, crate::gateway::full(bytes))
}
