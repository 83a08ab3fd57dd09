//! What a GraphQL mutation asks GitHub to do, and which named write it is. Pure: the
//! request's JSON in, a [`Mutation`] and its [`Plan`] out; the route resolves the node ids
//! the plan names (never decoding them) and decides the writes by the same rules as REST.
//!
//! Only one shape is read: one operation, a mutation, with exactly one top-level field,
//! its one argument `input` given through a variable whose value is in `variables` (no
//! default), and no alias, fragment (named or inline) or directive anywhere in its
//! selection set, at any depth. Everything a write does is then in one JSON object the
//! gateway reads and forwards as read: an inline literal, a second field or an alias would
//! be a write this reading did not see. And every key of GitHub's answer is the field of
//! that name: no answer the run shaped can put one value where another belongs (the
//! gateway still reads nothing from it that decides; see [`super::nodes`]).

use async_graphql_parser::types::{DocumentOperations, OperationType, Selection, SelectionSet};
use async_graphql_parser::{parse_query, Positioned};
use serde_json::{Map, Value};

use crate::policy::github::Action;

/// A mutation as read: its field and the `input` object it sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutation {
    pub field: String,
    pub input: Map<String, Value>,
}

/// What a GraphQL request is.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Queries only: a read.
    Read,
    Mutation(Mutation),
}

/// Read a GraphQL request body (`query`, `variables`, `operationName`). Both readers
/// must accept the document: the gateway's own lexer ([`super::graphql`], which refuses
/// what parsers disagree on) and the GraphQL parser, which gives its structure.
pub fn read(body: &Value) -> Result<Request, &'static str> {
    let doc = body
        .get("query")
        .and_then(Value::as_str)
        .ok_or("a GraphQL request must carry its query")?;
    let ops = super::graphql::operations(doc)?;
    let parsed = parse_query(doc).map_err(|_| "a GraphQL document the parser cannot read")?;
    let listed: Vec<_> = parsed.operations.iter().collect();
    if listed.len() != ops.len() {
        return Err("a GraphQL document its two readers read differently");
    }
    if ops.iter().all(|o| *o == super::graphql::Op::Query)
        && listed
            .iter()
            .all(|(_, o)| o.node.ty == OperationType::Query)
    {
        return Ok(Request::Read);
    }
    let op = match &parsed.operations {
        DocumentOperations::Single(op) => op,
        DocumentOperations::Multiple(m) if m.len() == 1 => {
            m.values().next().ok_or("no operation")?
        }
        DocumentOperations::Multiple(_) => {
            return Err("a GraphQL mutation is sent alone: one operation per document")
        }
    };
    let op = &op.node;
    if op.ty != OperationType::Mutation {
        return Err("a subscription is not forwarded");
    }
    if !parsed.fragments.is_empty() {
        return Err("a GraphQL mutation document has no fragments");
    }
    if !op.directives.is_empty() {
        return Err("a GraphQL mutation carries no directives");
    }
    let name = |n: &Option<&async_graphql_value::Name>| n.map(|n| n.as_str().to_string());
    let op_name = name(&listed.first().and_then(|(n, _)| *n));
    match body.get("operationName") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if op_name.as_deref() == Some(s.as_str()) || op_name.is_none() => {}
        Some(_) => return Err("operationName names no operation of the document"),
    }
    let [item] = op.selection_set.node.items.as_slice() else {
        return Err("a GraphQL mutation has exactly one top-level field");
    };
    let Selection::Field(Positioned { node: field, .. }) = &item.node else {
        return Err("a GraphQL mutation's top-level field is a field, not a fragment");
    };
    if field.alias.is_some() {
        return Err("a GraphQL mutation's field has no alias");
    }
    if !field.directives.is_empty() {
        return Err("a GraphQL mutation's field carries no directives");
    }
    plain_selection(&field.selection_set.node)?;
    let [(arg, value)] = field.arguments.as_slice() else {
        return Err("a GraphQL mutation takes one argument, input");
    };
    if arg.node.as_str() != "input" {
        return Err("a GraphQL mutation takes one argument, input");
    }
    let async_graphql_value::Value::Variable(var) = &value.node else {
        return Err("a GraphQL mutation's input is a variable ($input), not an inline literal");
    };
    let [def] = op.variable_definitions.as_slice() else {
        return Err("a GraphQL mutation defines one variable, its input");
    };
    if def.node.name.node != *var || def.node.default_value.is_some() {
        return Err("a GraphQL mutation's input variable is defined without a default");
    }
    if !def.node.directives.is_empty() {
        return Err("a GraphQL mutation's variable carries no directives");
    }
    let vars = body
        .get("variables")
        .and_then(Value::as_object)
        .ok_or("a GraphQL mutation's variables are a JSON object")?;
    if vars.len() != 1 {
        return Err("a GraphQL mutation's variables are its input alone");
    }
    let input = vars
        .get(var.as_str())
        .and_then(Value::as_object)
        .ok_or("a GraphQL mutation's input variable is a JSON object")?;
    Ok(Request::Mutation(Mutation {
        field: field.name.node.as_str().to_string(),
        input: input.clone(),
    }))
}

/// Refuse an alias, a fragment or a directive anywhere below the top-level field: each
/// would let the run choose what a key of GitHub's answer holds (`issue { id: title }`),
/// or which fields are there at all. Walked with a stack of its own: the parser bounds
/// the depth, and this must not overflow either way.
fn plain_selection(set: &SelectionSet) -> Result<(), &'static str> {
    let mut todo = vec![set];
    while let Some(set) = todo.pop() {
        for item in &set.items {
            let Selection::Field(Positioned { node: f, .. }) = &item.node else {
                return Err(
                    "a GraphQL mutation's selection set has no fragment (inline or named), at any depth",
                );
            };
            if f.alias.is_some() {
                return Err("a GraphQL mutation's selection set has no alias, at any depth");
            }
            if !f.directives.is_empty() {
                return Err("a GraphQL mutation's selection set has no directive, at any depth");
            }
            todo.push(&f.selection_set.node);
        }
    }
    Ok(())
}

/// What a node id names, as GitHub answered a lookup (its `__typename`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeType {
    Repository,
    Issue,
    PullRequest,
    IssueComment,
    Label,
    User,
    Bot,
    Other,
}

impl NodeType {
    pub fn of(typename: &str) -> NodeType {
        match typename {
            "Repository" => NodeType::Repository,
            "Issue" => NodeType::Issue,
            "PullRequest" => NodeType::PullRequest,
            "IssueComment" => NodeType::IssueComment,
            "Label" => NodeType::Label,
            "User" => NodeType::User,
            "Bot" => NodeType::Bot,
            _ => NodeType::Other,
        }
    }
}

use NodeType as T;

/// The ids a mutation names and what each must be: its subject (whose repository the
/// write is to), other repositories (a pull request's head), labels (of the subject's
/// repository), and people (assignees: accounts, in no repository).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub field: &'static str,
    pub subject: String,
    pub subject_types: &'static [NodeType],
    pub repos: Vec<String>,
    pub labels: Vec<String>,
    pub people: Vec<String>,
}

/// What a mutation is once its subject is resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Writes {
    pub actions: Vec<Action>,
    /// An edit of a pull request: only one this run opened.
    pub own_pull: bool,
    /// `createPullRequest`'s head: a branch this run created, never the default.
    pub head: Option<String>,
}

/// Each mutation allowed: its field, the input key naming its subject, what the subject
/// may be, and the input keys it may carry (any other is refused: a key this table does
/// not know could be a write it did not decide).
const TABLE: &[(&str, &str, &[NodeType], &[&str])] = &[
    (
        "createPullRequest",
        "repositoryId",
        &[T::Repository],
        &[
            "repositoryId",
            "baseRefName",
            "headRefName",
            "headRepositoryId",
            "title",
            "body",
            "maintainerCanModify",
            "draft",
        ],
    ),
    (
        "updatePullRequest",
        "pullRequestId",
        &[T::PullRequest],
        &[
            "pullRequestId",
            "title",
            "body",
            "baseRefName",
            "state",
            "maintainerCanModify",
            "labelIds",
            "assigneeIds",
        ],
    ),
    (
        "markPullRequestReadyForReview",
        "pullRequestId",
        &[T::PullRequest],
        &["pullRequestId"],
    ),
    (
        "convertPullRequestToDraft",
        "pullRequestId",
        &[T::PullRequest],
        &["pullRequestId"],
    ),
    (
        "closePullRequest",
        "pullRequestId",
        &[T::PullRequest],
        &["pullRequestId"],
    ),
    (
        "reopenPullRequest",
        "pullRequestId",
        &[T::PullRequest],
        &["pullRequestId"],
    ),
    (
        "addPullRequestReview",
        "pullRequestId",
        &[T::PullRequest],
        &["pullRequestId", "event", "body", "commitOID"],
    ),
    (
        "mergePullRequest",
        "pullRequestId",
        &[T::PullRequest],
        &[
            "pullRequestId",
            "mergeMethod",
            "commitHeadline",
            "commitBody",
            "expectedHeadOid",
            "authorEmail",
        ],
    ),
    (
        "createIssue",
        "repositoryId",
        &[T::Repository],
        &["repositoryId", "title", "body", "labelIds", "assigneeIds"],
    ),
    (
        "updateIssue",
        "id",
        &[T::Issue],
        &["id", "title", "body", "state", "labelIds", "assigneeIds"],
    ),
    (
        "closeIssue",
        "issueId",
        &[T::Issue],
        &["issueId", "stateReason"],
    ),
    ("reopenIssue", "issueId", &[T::Issue], &["issueId"]),
    (
        "addComment",
        "subjectId",
        &[T::Issue, T::PullRequest],
        &["subjectId", "body"],
    ),
    (
        "addLabelsToLabelable",
        "labelableId",
        &[T::Issue, T::PullRequest],
        &["labelableId", "labelIds"],
    ),
    (
        "removeLabelsFromLabelable",
        "labelableId",
        &[T::Issue, T::PullRequest],
        &["labelableId", "labelIds"],
    ),
    (
        "addAssigneesToAssignable",
        "assignableId",
        &[T::Issue, T::PullRequest],
        &["assignableId", "assigneeIds"],
    ),
    (
        "removeAssigneesFromAssignable",
        "assignableId",
        &[T::Issue, T::PullRequest],
        &["assignableId", "assigneeIds"],
    ),
];

/// Every mutation field the route forwards (for the operator's documentation and tests).
pub fn known() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|t| t.0)
}

fn id_list(input: &Map<String, Value>, key: &str) -> Result<Vec<String>, &'static str> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or("a list of node ids holds strings only"),
        Some(_) => Err("a list of node ids is a JSON array"),
    }
}

/// The ids `m` names and what each must resolve to; `Err` for a mutation this table does
/// not know, or an input key it does not.
pub fn plan(m: &Mutation) -> Result<Plan, &'static str> {
    let Some(&(field, key, types, keys)) = TABLE.iter().find(|t| t.0 == m.field) else {
        return Err("not a GraphQL mutation Airlock knows; unknown writes are refused");
    };
    if m.input
        .keys()
        .any(|k| k != "clientMutationId" && !keys.contains(&k.as_str()))
    {
        return Err(
            "an input field Airlock does not know for this mutation (milestone, projects, ...)",
        );
    }
    let subject = m
        .input
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("the mutation's input names its subject's node id")?
        .to_string();
    let mut repos = Vec::new();
    match m.input.get("headRepositoryId") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => repos.push(s.clone()),
        Some(_) => return Err("headRepositoryId is a node id"),
    }
    Ok(Plan {
        field,
        subject,
        subject_types: types,
        repos,
        labels: id_list(&m.input, "labelIds")?,
        people: id_list(&m.input, "assigneeIds")?,
    })
}

/// The named writes of `m`, its subject resolved to `subject`.
pub fn writes(m: &Mutation, subject: NodeType) -> Result<Writes, &'static str> {
    use Action::{Issue, PullRequest};
    let has = |k: &str| m.input.get(k).is_some_and(|v| !v.is_null());
    let mut w = Writes {
        actions: Vec::new(),
        own_pull: false,
        head: None,
    };
    let on_pull = subject == T::PullRequest;
    match m.field.as_str() {
        "createPullRequest" => {
            w.actions.push(PullRequest("open"));
            w.head = Some(
                m.input
                    .get("headRefName")
                    .and_then(Value::as_str)
                    .ok_or("createPullRequest names its head branch")?
                    .to_string(),
            );
        }
        "updatePullRequest" => {
            // Editing one's own pull request is part of opening it.
            if [
                "title",
                "body",
                "baseRefName",
                "state",
                "maintainerCanModify",
            ]
            .iter()
            .any(|k| has(k))
            {
                w.actions.push(PullRequest("open"));
                w.own_pull = true;
            }
            if has("labelIds") {
                w.actions.push(PullRequest("label"));
            }
            if has("assigneeIds") {
                w.actions.push(Issue("assign"));
            }
        }
        "markPullRequestReadyForReview"
        | "convertPullRequestToDraft"
        | "closePullRequest"
        | "reopenPullRequest" => {
            w.actions.push(PullRequest("open"));
            w.own_pull = true;
        }
        "addPullRequestReview" => w
            .actions
            .push(super::classify::review_action(m.input.get("event"))),
        "mergePullRequest" => w.actions.push(PullRequest("merge")),
        "createIssue" => {
            w.actions.push(Issue("create"));
            if has("labelIds") {
                w.actions.push(Issue("label"));
            }
            if has("assigneeIds") {
                w.actions.push(Issue("assign"));
            }
        }
        "updateIssue" => {
            match m.input.get("state") {
                Some(Value::String(s)) if s == "CLOSED" => w.actions.push(Issue("close")),
                Some(Value::String(s)) if s == "OPEN" => w.actions.push(Issue("reopen")),
                None | Some(Value::Null) => {}
                Some(_) => return Err("an issue's state is OPEN or CLOSED"),
            }
            if has("title") || has("body") {
                w.actions.push(Issue("edit_body"));
            }
            if has("labelIds") {
                w.actions.push(Issue("label"));
            }
            if has("assigneeIds") {
                w.actions.push(Issue("assign"));
            }
        }
        "closeIssue" => w.actions.push(Issue("close")),
        "reopenIssue" => w.actions.push(Issue("reopen")),
        "addComment" if on_pull => w.actions.push(PullRequest("comment")),
        "addComment" => w.actions.push(Issue("comment")),
        "addLabelsToLabelable" | "removeLabelsFromLabelable" if on_pull => {
            w.actions.push(PullRequest("label"))
        }
        "addLabelsToLabelable" | "removeLabelsFromLabelable" => w.actions.push(Issue("label")),
        "addAssigneesToAssignable" | "removeAssigneesFromAssignable" => {
            w.actions.push(Issue("assign"))
        }
        _ => return Err("not a GraphQL mutation Airlock knows; unknown writes are refused"),
    }
    if w.actions.is_empty() {
        return Err("a mutation that changes nothing Airlock knows");
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CREATE: &str = "mutation PullRequestCreate($input: CreatePullRequestInput!) {\n  createPullRequest(input: $input) { pullRequest { id url } }\n}";

    fn body(doc: &str, vars: Value) -> Value {
        json!({"query": doc, "variables": vars})
    }

    #[test]
    fn the_documents_gh_sends_are_read_and_mapped() {
        let m = read(&body(
            CREATE,
            json!({"input": {"repositoryId": "R_1", "headRefName": "b", "baseRefName": "main", "title": "t", "draft": false}}),
        ))
        .unwrap();
        let Request::Mutation(m) = m else {
            panic!("{m:?}")
        };
        assert_eq!(m.field, "createPullRequest");
        let p = plan(&m).unwrap();
        assert_eq!(p.subject, "R_1");
        let w = writes(&m, NodeType::Repository).unwrap();
        assert_eq!(w.actions, [Action::PullRequest("open")]);
        assert_eq!(w.head.as_deref(), Some("b"));
        let comment = "mutation CommentCreate($input:AddCommentInput!){addComment(input: $input){commentEdge{node{url}}}}";
        let Ok(Request::Mutation(m)) = read(&body(
            comment,
            json!({"input": {"subjectId": "PR_x", "body": "hi"}}),
        )) else {
            panic!()
        };
        assert_eq!(
            writes(&m, NodeType::PullRequest).unwrap().actions,
            [Action::PullRequest("comment")]
        );
        assert_eq!(
            writes(&m, NodeType::Issue).unwrap().actions,
            [Action::Issue("comment")]
        );
        let upd = "mutation IssueUpdate($input:UpdateIssueInput!){updateIssue(input: $input){__typename}}";
        let Ok(Request::Mutation(m)) = read(&body(
            upd,
            json!({"input": {"id": "I_x", "assigneeIds": ["U_1"], "state": "CLOSED"}}),
        )) else {
            panic!()
        };
        assert_eq!(plan(&m).unwrap().people, ["U_1"]);
        assert_eq!(
            writes(&m, NodeType::Issue).unwrap().actions,
            [Action::Issue("close"), Action::Issue("assign")]
        );
        let review = "mutation PullRequestReviewAdd($input:AddPullRequestReviewInput!){addPullRequestReview(input:$input){clientMutationId}}";
        let Ok(Request::Mutation(m)) = read(&body(
            review,
            json!({"input": {"pullRequestId": "PR_x", "event": "APPROVE", "body": ""}}),
        )) else {
            panic!()
        };
        assert_eq!(
            writes(&m, NodeType::PullRequest).unwrap().actions,
            [Action::Approve]
        );
        assert!(matches!(
            read(&json!({"query": "query { viewer { login } }"})),
            Ok(Request::Read)
        ));
    }

    #[test]
    fn every_other_shape_is_refused() {
        let input = json!({"input": {"subjectId": "I_1", "body": "x"}});
        for (doc, vars) in [
            // Two mutations, two fields, an alias, inline literals, a fragment.
            ("mutation A($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } } mutation B($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }", input.clone()),
            ("mutation($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } closeIssue(input: $input) { clientMutationId } }", input.clone()),
            ("mutation($input: AddCommentInput!) { x: addComment(input: $input) { clientMutationId } }", input.clone()),
            ("mutation { addComment(input: {subjectId: \"I_other\", body: \"x\"}) { clientMutationId } }", json!({})),
            ("mutation($input: AddCommentInput!) { ...F } fragment F on Mutation { addComment(input: $input) { clientMutationId } }", input.clone()),
            ("mutation($input: AddCommentInput! = {subjectId: \"I_1\", body: \"x\"}) { addComment(input: $input) { clientMutationId } }", json!({})),
            ("mutation($input: AddCommentInput!) { addComment(input: $input) @skip(if: false) { clientMutationId } }", input.clone()),
            ("mutation($input: AddCommentInput!, $b: String) { addComment(input: $input) { clientMutationId } }", json!({"input": {"subjectId": "I_1", "body": "x"}, "b": "y"})),
            ("query Q { a } mutation($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }", input.clone()),
            ("mutation($input: AddCommentInput!) { addComment(input: $input) { clientMutationId }", input.clone()),
            ("mutation($input: AddCommentInput!) { addComment(input: $input) { c(s: \"\"\"x\"\"\") } }", input.clone()),
            ("mutation($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }", json!({"input": "not an object"})),
            ("subscription { s }", json!({})),
            // Aliases, fragments and directives below the top-level field.
            ("mutation($input: CreateIssueInput!) { createIssue(input: $input) { issue { id: title } } }", input.clone()),
            ("mutation($input: CreateIssueInput!) { createIssue(input: $input) { issue { repository { nameWithOwner: name } } } }", input.clone()),
            ("mutation($input: CreateIssueInput!) { createIssue(input: $input) { issue { ... on Issue { id } } } }", input.clone()),
            ("mutation($input: CreateIssueInput!) { createIssue(input: $input) { issue { ... { id } } } }", input.clone()),
            ("mutation($input: AddCommentInput!) { addComment(input: $input) { subject { ...S } } } fragment S on Issue { id }", input.clone()),
            ("mutation($input: CreateIssueInput!) { createIssue(input: $input) { issue { id @include(if: true) } } }", input.clone()),
            ("mutation($input: CreateIssueInput!) { createIssue(input: $input) { issue @skip(if: false) { id } } }", input.clone()),
        ] {
            assert!(read(&body(doc, vars)).is_err(), "{doc}");
        }
        // A mutation this table does not know, and an input key it does not.
        let del = "mutation($input: DeleteIssueInput!) { deleteIssue(input: $input) { clientMutationId } }";
        let Ok(Request::Mutation(m)) = read(&body(del, json!({"input": {"issueId": "I_1"}})))
        else {
            panic!()
        };
        assert!(plan(&m).is_err());
        let ci =
            "mutation($input: CreateIssueInput!) { createIssue(input: $input) { issue { id } } }";
        let Ok(Request::Mutation(m)) = read(&body(
            ci,
            json!({"input": {"repositoryId": "R", "title": "t", "milestoneId": "M"}}),
        )) else {
            panic!()
        };
        assert!(plan(&m).is_err());
    }

    #[test]
    fn below_the_top_field_an_alias_a_fragment_or_a_directive_is_named_as_refused() {
        let input = json!({"input": {"subjectId": "I_1", "body": "x"}});
        let m = "mutation($input: AddCommentInput!) { addComment(input: $input)";
        for (sel, rule) in [
            ("{ commentEdge { node { id: body } } }", "no alias"),
            ("{ subject { __typename id: __typename } }", "no alias"),
            ("{ subject { ... on Node { id } } }", "no fragment"),
            ("{ commentEdge { node { ... { id } } } }", "no fragment"),
            ("{ subject { id @include(if: true) } }", "no directive"),
        ] {
            let doc = format!("{m} {sel} }}");
            let why = read(&body(&doc, input.clone())).unwrap_err();
            assert!(
                why.contains(rule) && why.contains("any depth"),
                "{doc}: {why}"
            );
        }
        let plain =
            format!("{m} {{ commentEdge {{ node {{ id url }} }} subject {{ __typename id }} }} }}");
        assert!(matches!(
            read(&body(&plain, input)),
            Ok(Request::Mutation(_))
        ));
    }

    #[test]
    fn deep_or_broken_documents_are_refused_without_a_panic() {
        let deep = format!(
            "mutation($input: X!) {{ addComment(input: $input) {}{} }}",
            "{ a ".repeat(50_000),
            "}".repeat(50_000)
        );
        // Either answer will do (the parser bounds its depth); a panic or an overflow won't.
        let _ = read(&body(&deep, json!({"input": {}})));
        let deep_query = format!("{}{}", "{ a ".repeat(50_000), "}".repeat(50_000));
        let _ = read(&json!({"query": deep_query}));
        for doc in [
            "mutation(",
            "mutation { a(b: $",
            "\u{0}",
            "mutation($i: [[[[X",
        ] {
            assert!(read(&body(doc, json!({}))).is_err(), "{doc}");
        }
    }
}
