//! What a GitHub request is: a read, a named write to one repository, or a write this
//! table does not know (refused: fail closed). Pure: method, path and (for the endpoints
//! whose meaning is in their body) the JSON body in, a [`Kind`] out.

use serde_json::Value;

use crate::policy::github::Action;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// GET, HEAD, a GraphQL query, git fetch: forwarded.
    Read,
    /// One write (several actions when one request does several things, each checked).
    Write { repo: String, actions: Vec<Action> },
    /// A git push: its ref updates are checked before its pack goes on.
    Push { repo: String },
    /// A GraphQL mutation: its node ids are resolved before it is decided.
    Mutation(super::mutation::Mutation),
    /// Refused: the reason.
    Unknown(&'static str),
}

/// `owner/repo` from two path segments (or tool arguments), if they are plain names.
pub fn repo_of(owner: &str, name: &str) -> Option<String> {
    let plain = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    };
    (plain(owner) && plain(name)).then(|| format!("{owner}/{name}"))
}

/// What a pull request review does: only an event that is plainly not an approval
/// (none yet, a comment, a change request) is a review; `APPROVE`, and anything else
/// (`approve`, a value GitHub may read another way), needs merge authority.
pub fn review_action(event: Option<&Value>) -> Action {
    match event {
        None | Some(Value::Null) => Action::PullRequest("review"),
        Some(Value::String(e))
            if matches!(e.as_str(), "COMMENT" | "REQUEST_CHANGES" | "PENDING") =>
        {
            Action::PullRequest("review")
        }
        _ => Action::Approve,
    }
}

/// What arrived with a request to the API host besides its method and path.
pub struct Extras<'a> {
    pub query: Option<&'a str>,
    /// The header names (lower-case).
    pub headers: &'a [&'a str],
    /// The body, when it is JSON ([`crate::gateway::strict_json`]).
    pub json: Option<&'a Value>,
    /// Whether there is a body at all.
    pub has_body: bool,
    /// Whether the request says its body is encoded (`Content-Encoding`, not identity).
    pub encoded: bool,
}

/// A request to the API host: a request that names another method than its own is
/// refused, as are an encoded body (the gateway reads what it forwards), a JSON body with
/// two keys a case-blind reader takes for one, and a write whose body is not JSON
/// (GitHub's REST writes all are); GraphQL
/// only as a POST with its document in the JSON body (GitHub's own way; a document in the
/// URL would be one this table never read); every other path as [`rest`].
pub fn api(method: &str, path: &str, x: &Extras<'_>) -> Kind {
    let mut query_names = x
        .query
        .unwrap_or_default()
        .split('&')
        .map(|p| p.split_once('=').map_or(p, |(k, _)| k));
    if x.headers
        .iter()
        .any(|h| crate::gateway::headers::METHOD_OVERRIDES.contains(h))
        || query_names.any(|k| k == "_method")
    {
        return Kind::Unknown("a request that names another method than its own");
    }
    if x.encoded {
        return Kind::Unknown(
            "a request body with a Content-Encoding is not read; send it uncompressed",
        );
    }
    if x.json
        .is_some_and(|j| crate::policy::tool::folded_twins(j, String::new()).is_some())
    {
        return Kind::Unknown(
            "a JSON body with two keys that differ only in case: GitHub could read the one Airlock did not check",
        );
    }
    if matches!(method, "GET" | "HEAD") {
        if x.has_body {
            return Kind::Unknown("a read carries no body");
        }
    } else {
        if x.has_body && x.json.is_none() {
            return Kind::Unknown(
                "a GitHub API write carries a JSON body (one object, no duplicate keys)",
            );
        }
        // What a write does is in its path and body; GitHub's writes take no parameters
        // in the URL, and one read from there would be one this table never saw.
        if x.query.is_some() {
            return Kind::Unknown("a GitHub API write carries no URL query");
        }
    }
    if path == "/graphql" && (method != "POST" || x.query.is_some()) {
        return Kind::Unknown(
            "GraphQL is forwarded only as POST /graphql with the document in its JSON body",
        );
    }
    rest(method, path, x.json)
}

/// A REST API request (`path` without the query).
pub fn rest(method: &str, path: &str, body: Option<&Value>) -> Kind {
    if matches!(method, "GET" | "HEAD") {
        return Kind::Read;
    }
    if path.contains("//")
        || path.contains('%')
        || path.contains('\\')
        || path.split('/').any(|s| s == "." || s == "..")
    {
        return Kind::Unknown("the path is not plain (no empty, dot, encoded or escaped segments)");
    }
    if path == "/graphql" {
        return graphql(body);
    }
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["repos", owner, name, rest @ ..] = seg.as_slice() else {
        return Kind::Unknown("not a write Airlock knows (only /repos/OWNER/REPO/... writes)");
    };
    let Some(repo) = repo_of(owner, name) else {
        return Kind::Unknown("the repository is not a plain OWNER/REPO");
    };
    let num = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let field = |k: &str| body.and_then(|b| b.get(k));
    let one = |a: Action| Kind::Write {
        repo: repo.clone(),
        actions: vec![a],
    };
    use Action::*;
    match (method, rest) {
        ("POST", ["issues"]) => one(Issue("create")),
        ("PATCH", ["issues", n]) if num(n) => {
            let mut actions = Vec::new();
            match field("state").and_then(Value::as_str) {
                Some("closed") => actions.push(Issue("close")),
                Some("open") => actions.push(Issue("reopen")),
                Some(_) => return Kind::Unknown("an issue's state is open or closed"),
                None => {}
            }
            if field("title").is_some() || field("body").is_some() {
                actions.push(Issue("edit_body"));
            }
            if field("labels").is_some() {
                actions.push(Issue("label"));
            }
            if field("assignees").is_some() || field("assignee").is_some() {
                actions.push(Issue("assign"));
            }
            let known = [
                "state",
                "state_reason",
                "title",
                "body",
                "labels",
                "assignees",
                "assignee",
            ];
            let other = body
                .and_then(Value::as_object)
                .is_some_and(|o| o.keys().any(|k| !known.contains(&k.as_str())));
            if actions.is_empty() || other {
                return Kind::Unknown("an issue edit Airlock does not know (milestone, lock, ...)");
            }
            Kind::Write { repo, actions }
        }
        ("POST", ["issues", n, "comments"]) if num(n) => one(Issue("comment")),
        ("POST" | "PUT", ["issues", n, "labels"]) | ("DELETE", ["issues", n, "labels", ..])
            if num(n) =>
        {
            one(Issue("label"))
        }
        ("POST" | "DELETE", ["issues", n, "assignees"]) if num(n) => one(Issue("assign")),
        ("POST", ["pulls"]) => one(PullRequest("open")),
        // Editing a pull request: part of opening it, on one this run opened (the route
        // checks whose it is).
        ("PATCH", ["pulls", n]) if num(n) => {
            let known = ["title", "body", "base", "state", "maintainer_can_modify"];
            let other = body.and_then(Value::as_object).map_or(true, |o| {
                o.is_empty() || o.keys().any(|k| !known.contains(&k.as_str()))
            });
            if other {
                return Kind::Unknown("a pull request edit Airlock does not know");
            }
            one(PullRequest("open"))
        }
        ("PUT", ["pulls", n, "merge"]) if num(n) => one(PullRequest("merge")),
        ("POST", ["pulls", n, "reviews"]) if num(n) => one(review_action(field("event"))),
        ("POST", ["pulls", n, "reviews", r, "events"]) if num(n) && num(r) => {
            one(review_action(field("event")))
        }
        ("POST", ["pulls", n, "comments"]) if num(n) => one(PullRequest("comment")),
        ("POST", ["pulls", n, "comments", c, "replies"]) if num(n) && num(c) => {
            one(PullRequest("comment"))
        }
        ("POST", ["actions", "workflows", _, "dispatches"]) => one(Dispatch),
        ("PUT" | "DELETE", ["contents", path @ ..]) if !path.is_empty() => {
            if path.iter().any(|s| s.is_empty() || *s == "." || *s == "..") {
                return Kind::Unknown("the file path is not plain");
            }
            one(Contents(Some(path.join("/"))))
        }
        _ => Kind::Unknown("not a write Airlock knows; unknown writes are refused"),
    }
}

/// A GraphQL request: a document of queries reads; a mutation in the one shape
/// [`super::mutation::read`] takes is decided once its node ids are resolved; anything
/// else is refused, as is a document the readers cannot read.
fn graphql(body: Option<&Value>) -> Kind {
    let Some(body) = body else {
        return Kind::Unknown("a GraphQL request must carry its query");
    };
    match super::mutation::read(body) {
        Ok(super::mutation::Request::Read) => Kind::Read,
        Ok(super::mutation::Request::Mutation(m)) => Kind::Mutation(m),
        Err(why) => Kind::Unknown(why),
    }
}

/// A git smart HTTP request on the git host: `/OWNER/REPO(.git)/info/refs?service=...`,
/// `/OWNER/REPO(.git)/git-upload-pack` (reads) or `.../git-receive-pack` (a push).
pub fn git(method: &str, path: &str, query: Option<&str>) -> Kind {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (owner, name, rest) = match seg.as_slice() {
        [o, n, rest @ ..] => (*o, n.trim_end_matches(".git"), rest),
        _ => return Kind::Unknown("not a repository path (/OWNER/REPO.git/...)"),
    };
    let Some(repo) = repo_of(owner, name) else {
        return Kind::Unknown("the repository is not a plain OWNER/REPO");
    };
    match (method, rest, query) {
        ("GET", ["info", "refs"], Some("service=git-upload-pack"))
        | ("GET", ["info", "refs"], Some("service=git-receive-pack"))
        | ("POST", ["git-upload-pack"], _) => Kind::Read,
        ("POST", ["git-receive-pack"], _) => Kind::Push { repo },
        _ => Kind::Unknown("only git's smart HTTP protocol is served"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(repo: &str, a: Action) -> Kind {
        Kind::Write {
            repo: repo.into(),
            actions: vec![a],
        }
    }

    #[test]
    fn the_api_host_refuses_method_overrides_non_json_writes_and_graphql_by_url() {
        let body = json!({"body": "hi"});
        let doc = json!({"query": "{ a }"});
        let x = |query, headers, json, has_body| Extras {
            query,
            headers,
            json,
            has_body,
            encoded: false,
        };
        let comment = "/repos/o/r/issues/1/comments";
        // An encoded body, and keys a case-blind reader takes for one, at any depth.
        let gz = Extras {
            encoded: true,
            ..x(None, &["content-encoding"], None, true)
        };
        assert!(matches!(api("POST", comment, &gz), Kind::Unknown(_)));
        let twins = json!({"query": "{ a }", "variables": {"owner": "o", "Owner": "p"}});
        assert!(matches!(
            api("POST", "/graphql", &x(None, &[], Some(&twins), true)),
            Kind::Unknown(_)
        ));
        assert_eq!(
            api(
                "POST",
                comment,
                &x(None, &["content-type"], Some(&body), true)
            ),
            write("o/r", Action::Issue("comment"))
        );
        for (m, p, extras) in [
            (
                "GET",
                "/repos/o/r",
                x(None, &["x-http-method-override"], None, false),
            ),
            (
                "POST",
                comment,
                x(None, &["x-http-method"], Some(&body), true),
            ),
            (
                "POST",
                comment,
                x(None, &["x-method-override"], Some(&body), true),
            ),
            (
                "POST",
                comment,
                x(Some("a=1&_method=DELETE"), &[], Some(&body), true),
            ),
            ("POST", comment, x(Some("_method"), &[], Some(&body), true)),
            ("POST", comment, x(None, &[], None, true)),
            ("GET", "/repos/o/r", x(None, &[], None, true)),
            (
                "POST",
                comment,
                x(Some("event=APPROVE"), &[], Some(&body), true),
            ),
            (
                "GET",
                "/graphql",
                x(Some("query=%7Bx%7D"), &[], None, false),
            ),
            (
                "POST",
                "/graphql",
                x(Some("query=mutation%7Bx%7D"), &[], Some(&doc), true),
            ),
        ] {
            assert!(
                matches!(api(m, p, &extras), Kind::Unknown(_)),
                "{m} {p} {:?}",
                extras.query
            );
        }
        // A read may come without a body; a DELETE's body may be absent.
        assert_eq!(
            api("GET", "/repos/o/r", &x(Some("page=2"), &[], None, false)),
            Kind::Read
        );
        assert_eq!(
            api(
                "DELETE",
                "/repos/o/r/issues/1/labels/x",
                &x(None, &[], None, false)
            ),
            write("o/r", Action::Issue("label"))
        );
    }

    #[test]
    fn writes_are_named_and_unknown_writes_refused() {
        let r = "o/r";
        // Only a plain review is a review: an approval in any spelling needs merge authority.
        for (event, want) in [
            (None, Action::PullRequest("review")),
            (Some(json!("COMMENT")), Action::PullRequest("review")),
            (
                Some(json!("REQUEST_CHANGES")),
                Action::PullRequest("review"),
            ),
            (Some(json!("APPROVE")), Action::Approve),
            (Some(json!("approve")), Action::Approve),
            (Some(json!(["APPROVE"])), Action::Approve),
        ] {
            let body = event.map(|e| json!({ "event": e }));
            assert_eq!(
                rest("POST", "/repos/o/r/pulls/3/reviews", body.as_ref()),
                write(r, want.clone()),
                "{body:?}"
            );
        }
        assert_eq!(rest("GET", "/repos/o/r/issues", None), Kind::Read);
        assert_eq!(
            rest("POST", "/repos/o/r/issues", None),
            write(r, Action::Issue("create"))
        );
        assert_eq!(
            rest("PUT", "/repos/o/r/pulls/3/merge", None),
            write(r, Action::PullRequest("merge"))
        );
        assert_eq!(
            rest(
                "POST",
                "/repos/o/r/pulls/3/reviews",
                Some(&json!({"event": "APPROVE"}))
            ),
            write(r, Action::Approve)
        );
        assert_eq!(
            rest(
                "PATCH",
                "/repos/o/r/issues/4",
                Some(&json!({"state": "closed", "labels": []}))
            ),
            Kind::Write {
                repo: r.into(),
                actions: vec![Action::Issue("close"), Action::Issue("label")]
            }
        );
        assert_eq!(
            rest("PUT", "/repos/o/r/contents/.github/workflows/x.yml", None),
            write(r, Action::Contents(Some(".github/workflows/x.yml".into())))
        );
        for (m, p, b) in [
            ("DELETE", "/repos/o/r", None),
            ("POST", "/repos/o/r/hooks", None),
            (
                "PATCH",
                "/repos/o/r/issues/4",
                Some(json!({"milestone": 1})),
            ),
            ("POST", "/repositories/1/issues", None),
            ("POST", "/repos/o/r/contents/../x", None),
            (
                "DELETE",
                "/repos/o/r/issues/1/labels/../../../git/refs/heads/main",
                None,
            ),
            (
                "POST",
                "/repos/o/r/actions/workflows/../../../../other/r/dispatches",
                None,
            ),
            ("PUT", "/repos/o/r/contents/./x", None),
            ("POST", "/repos/o/%72/issues", None),
            ("POST", "/user/repos", None),
            (
                "POST",
                "/graphql",
                Some(json!({"query": "mutation { closeIssue(input:{}) { clientMutationId } }"})),
            ),
            (
                "POST",
                "/graphql",
                Some(json!({"query": "query($a:String){x} mutation M {y}"})),
            ),
        ] {
            assert!(
                matches!(rest(m, p, b.as_ref()), Kind::Unknown(_)),
                "{m} {p} {b:?}"
            );
        }
        assert_eq!(
            rest(
                "POST",
                "/graphql",
                Some(
                    &json!({"query": "query { viewer { login } } # mutation\n", "variables": {"m": "mutation"}})
                )
            ),
            Kind::Read
        );
        assert_eq!(
            rest(
                "POST",
                "/graphql",
                Some(&json!({"query": "{ search(query: \"mutation\") { x } }"}))
            ),
            Kind::Read
        );
    }

    #[test]
    fn git_paths() {
        assert_eq!(
            git("GET", "/o/r.git/info/refs", Some("service=git-upload-pack")),
            Kind::Read
        );
        assert_eq!(git("POST", "/o/r/git-upload-pack", None), Kind::Read);
        assert_eq!(
            git("POST", "/o/r.git/git-receive-pack", None),
            Kind::Push { repo: "o/r".into() }
        );
        assert!(matches!(
            git("GET", "/o/r.git/objects/ab/cd", None),
            Kind::Unknown(_)
        ));
        assert!(matches!(
            git("POST", "/../r.git/git-receive-pack", None),
            Kind::Unknown(_)
        ));
    }
}
