//! Node ids, resolved and never decoded: what GitHub says an id is (its type and its
//! repository), asked once per id with a `nodes(ids:)` query and kept for the run; the
//! repository ids of `writes.repos`, learned on the run's first mutation; and the pull
//! requests this run opened. Everything kept here comes from the gateway's own questions,
//! never from an answer to the run's request, whose shape the run chose: of such an
//! answer only a new pull request's id is read ([`created_pull`]), and it is then looked
//! up like any other id (its type, repository, number and head branch, which must be the
//! ones the run's own request named).

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::mutation::NodeType;

/// What an id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub ty: NodeType,
    /// `owner/name` of its repository (a repository's own), none for an account.
    pub repo: Option<String>,
    /// An issue's or a pull request's number.
    pub number: Option<u64>,
    /// A pull request's head branch.
    pub head: Option<String>,
}

/// A pull request this run opened: its repository, number and node id (as GitHub
/// answered the gateway's lookup of the id).
type Opened = (String, Option<u64>, Option<String>);

/// The run's resolved ids.
#[derive(Default)]
pub struct Nodes {
    known: Mutex<HashMap<String, Node>>,
    /// Whether the repository ids of `writes.repos` were asked for.
    learned: Mutex<bool>,
    /// Pull requests this run opened.
    opened: Mutex<Vec<Opened>>,
}

/// Ids held at most: a run naming more ids than this asks GitHub again for the rest.
const MAX_CACHED: usize = 100_000;

/// The lookup: each id's type and repository, in one query.
pub const LOOKUP: &str = "query AirlockNodes($ids: [ID!]!) { nodes(ids: $ids) { __typename ... on Repository { nameWithOwner } ... on Issue { number repository { nameWithOwner } } ... on PullRequest { number headRefName repository { nameWithOwner } } ... on IssueComment { repository { nameWithOwner } } ... on Label { repository { nameWithOwner } } } }";

/// The repository-id query for `repos` (`owner/name` each): variables `o0, n0, ...`.
pub fn repo_query(repos: &[String]) -> Option<Value> {
    let mut defs = Vec::new();
    let mut fields = Vec::new();
    let mut vars = serde_json::Map::new();
    for (i, r) in repos.iter().enumerate() {
        let (o, n) = r.split_once('/')?;
        defs.push(format!("$o{i}: String!, $n{i}: String!"));
        fields.push(format!(
            "r{i}: repository(owner: $o{i}, name: $n{i}) {{ id nameWithOwner }}"
        ));
        vars.insert(format!("o{i}"), json!(o));
        vars.insert(format!("n{i}"), json!(n));
    }
    if fields.is_empty() {
        return None;
    }
    Some(json!({
        "query": format!("query AirlockRepos({}) {{ {} }}", defs.join(", "), fields.join(" ")),
        "variables": vars,
    }))
}

/// The nodes an answer to [`LOOKUP`] names, by id (`None` for an id GitHub does not
/// know). Pure.
pub fn read_lookup(ids: &[String], answer: &Value) -> Option<Vec<Option<Node>>> {
    let list = answer.get("data")?.get("nodes")?.as_array()?;
    if list.len() != ids.len() {
        return None;
    }
    Some(
        list.iter()
            .map(|n| {
                let ty = NodeType::of(n.get("__typename")?.as_str()?);
                let repo = n
                    .get("nameWithOwner")
                    .or_else(|| n.get("repository").and_then(|r| r.get("nameWithOwner")))
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let number = n.get("number").and_then(Value::as_u64);
                let head = n
                    .get("headRefName")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                Some(Node {
                    ty,
                    repo,
                    number,
                    head,
                })
            })
            .collect(),
    )
}

/// The repositories an answer to [`repo_query`] names: (id, `owner/name`). Pure.
pub fn read_repos(answer: &Value) -> Vec<(String, String)> {
    let Some(data) = answer.get("data").and_then(Value::as_object) else {
        return Vec::new();
    };
    data.values()
        .filter_map(|r| {
            Some((
                r.get("id")?.as_str()?.to_string(),
                r.get("nameWithOwner")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The id of the pull request a `createPullRequest` answer says it made: read at
/// `data.createPullRequest.pullRequest.id` only (a document with no alias, fragment or
/// directive, [`super::mutation::read`], so that key is GitHub's `id`), and only to be
/// looked up; nothing else of the answer is read.
pub fn created_pull(field: &str, answer: &Value) -> Option<String> {
    if field != "createPullRequest" {
        return None;
    }
    let id = answer
        .get("data")?
        .get(field)?
        .get("pullRequest")?
        .get("id")?
        .as_str()?;
    (!id.is_empty()).then(|| id.to_string())
}

/// Whether a looked-up `node` is the pull request a run's request opened in `repo` (from
/// `head`, when the request named it): the only way into [`Nodes::opened`].
pub fn is_opened(node: &Node, repo: &str, head: Option<&str>) -> bool {
    node.ty == NodeType::PullRequest
        && node.number.is_some()
        && node
            .repo
            .as_deref()
            .is_some_and(|r| r.eq_ignore_ascii_case(repo))
        && head.map_or(true, |h| node.head.as_deref() == Some(h))
}

impl Nodes {
    pub fn get(&self, id: &str) -> Option<Node> {
        self.known.lock().ok()?.get(id).cloned()
    }

    pub fn put(&self, id: String, node: Node) {
        if let Ok(mut k) = self.known.lock() {
            if k.len() < MAX_CACHED {
                k.insert(id, node);
            }
        }
    }

    /// Drop what is known of `id`: the next use asks GitHub again.
    pub fn forget(&self, id: &str) {
        if let Ok(mut k) = self.known.lock() {
            k.remove(id);
        }
    }

    /// Whether the repository ids are still to be learned (true once: the caller asks).
    pub fn to_learn(&self) -> bool {
        self.learned
            .lock()
            .is_ok_and(|mut l| !std::mem::replace(&mut *l, true))
    }

    /// Remember a pull request this run opened.
    pub fn opened(&self, repo: &str, number: Option<u64>, id: Option<String>) {
        if let Ok(mut o) = self.opened.lock() {
            o.push((repo.to_string(), number, id));
        }
    }

    /// Whether this run opened the pull request with node id `id`.
    pub fn opened_id(&self, id: &str) -> bool {
        self.opened
            .lock()
            .is_ok_and(|o| o.iter().any(|(_, _, i)| i.as_deref() == Some(id)))
    }

    /// Whether this run opened pull request `number` of `repo`.
    pub fn opened_number(&self, repo: &str, number: u64) -> bool {
        self.opened.lock().is_ok_and(|o| {
            o.iter()
                .any(|(r, n, _)| r.eq_ignore_ascii_case(repo) && *n == Some(number))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_and_answers_are_read_without_decoding_an_id() {
        let ids = vec!["PR_a".to_string(), "X_b".to_string(), "U_c".to_string()];
        let answer = json!({"data": {"nodes": [
            {"__typename": "PullRequest", "repository": {"nameWithOwner": "o/r"}},
            null,
            {"__typename": "User"},
        ]}});
        let got = read_lookup(&ids, &answer).unwrap();
        assert_eq!(
            got[0],
            Some(Node {
                ty: NodeType::PullRequest,
                repo: Some("o/r".into()),
                number: None,
                head: None,
            })
        );
        assert_eq!(got[1], None);
        assert_eq!(got[2].as_ref().map(|n| n.ty), Some(NodeType::User));
        assert!(read_lookup(&ids[..1], &answer).is_none(), "lengths differ");
        let q = repo_query(&["o/r".into(), "o/s".into()]).unwrap();
        assert!(q["query"].as_str().unwrap().contains("r1: repository"));
        assert_eq!(q["variables"]["n1"], "s");
        let a = json!({"data": {"createPullRequest": {"pullRequest": {"id": "PR_new", "url": "https://github.com/o/r/pull/7"}}}});
        assert_eq!(created_pull("createPullRequest", &a), Some("PR_new".into()));
        assert_eq!(created_pull("addComment", &a), None);
        assert_eq!(created_pull("createIssue", &a), None);
    }

    #[test]
    fn only_a_looked_up_pull_request_of_the_repository_and_head_is_the_runs() {
        let pr = |repo: &str, number: Option<u64>, head: &str| Node {
            ty: NodeType::PullRequest,
            repo: Some(repo.into()),
            number,
            head: Some(head.into()),
        };
        assert!(is_opened(&pr("O/R", Some(3), "b"), "o/r", Some("b")));
        assert!(is_opened(&pr("o/r", Some(3), "b"), "o/r", None));
        assert!(!is_opened(&pr("o/other", Some(3), "b"), "o/r", Some("b")));
        assert!(!is_opened(&pr("o/r", Some(3), "theirs"), "o/r", Some("b")));
        assert!(!is_opened(&pr("o/r", None, "b"), "o/r", Some("b")));
        let issue = Node {
            ty: NodeType::Issue,
            ..pr("o/r", Some(3), "b")
        };
        assert!(!is_opened(&issue, "o/r", None));
    }
}
