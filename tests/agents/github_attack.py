"""Issue 41's second attack on the GitHub route, from inside an agent's jail: raw requests
(targets and bodies byte for byte) through the run's gateway, each printed with its answer
(tests/github_graphql.rs a_second_attack_from_inside_the_jail_finds_every_write_refused)."""
import http.client, json, os, ssl, urllib.parse, gzip

PROXY = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
CTX = ssl.create_default_context()
TOKEN = os.environ["GH_TOKEN"]
R = "/repos/example-org/example-repo"

def raw(method, path, body=b"", headers=None, host="api.github.com"):
    """One request, its target and body byte for byte as given, through the gateway."""
    c = http.client.HTTPSConnection(PROXY.hostname, PROXY.port, context=CTX, timeout=30)
    c.set_tunnel(host, 443)
    h = {"Authorization": "token " + TOKEN, "User-Agent": "probe", "Accept-Encoding": "identity"}
    if body:
        h["Content-Type"] = "application/json"
    h.update(headers or {})
    if isinstance(body, str):
        body = body.encode()
    try:
        c.request(method, path, body=body or None, headers=h)
        r = c.getresponse()
        text = r.read().decode(errors="replace")
        try:
            return [r.status, json.loads(text)]
        except ValueError:
            return [r.status, text]
    except Exception as e:
        return [0, repr(e)]
    finally:
        c.close()

def gql(doc, variables=None, **extra):
    body = {"query": doc, "variables": variables if variables is not None else {}}
    body.update(extra)
    return raw("POST", "/graphql", json.dumps(body))

def data(a, *keys):
    v = a[1]
    for k in keys:
        v = v[k]
    return v

ids = gql('{ repository(owner: "example-org", name: "example-repo") { id issue(number: 1) { id } pullRequest(number: 2) { id } } }')
REPO = data(ids, "data", "repository", "id")
MINE = data(ids, "data", "repository", "issue", "id")
THEIRS = data(ids, "data", "repository", "pullRequest", "id")
OTHER = data(gql('{ repository(owner: "example-org", name: "other") { issue(number: 1) { id } } }'), "data", "repository", "issue", "id")
AC = "mutation($input: AddCommentInput!) { addComment(input: $input) { commentEdge { node { id } } } }"
out = {}
# Two writes the role may make, for ids of other types to name.
setup_comment = gql(AC, {"input": {"subjectId": MINE, "body": "setup"}})
COMMENT = data(setup_comment, "data", "addComment", "commentEdge", "node", "id")
setup_review = gql("mutation($input: AddPullRequestReviewInput!) { addPullRequestReview(input: $input) { pullRequestReview { id } } }",
                   {"input": {"pullRequestId": THEIRS, "event": "COMMENT", "body": "setup"}})
REVIEW = data(setup_review, "data", "addPullRequestReview", "pullRequestReview", "id")
other_input = {"input": {"subjectId": OTHER, "body": "x"}}

# GraphQL bodies: batches, persisted-query shapes, operationName, comments, escapes.
out["g_batch"] = raw("POST", "/graphql", json.dumps([{"query": AC, "variables": other_input}]))
out["g_batch_mixed"] = raw("POST", "/graphql", json.dumps([{"query": "{ viewer { login } }"}, {"query": AC, "variables": other_input}]))
out["g_persisted_only"] = raw("POST", "/graphql", json.dumps({"variables": other_input, "extensions": {"persistedQuery": {"version": 1, "sha256Hash": "0" * 64}}}))
out["g_persisted_beside_a_query"] = gql("{ viewer { login } }", {}, id="stored-mutation", documentId="stored-mutation",
                                        extensions={"persistedQuery": {"version": 1, "sha256Hash": "0" * 64}})
out["g_opname_names_none"] = gql(AC, other_input, operationName="Other")
out["g_query_then_mutation"] = gql("query Q { viewer { login } } mutation M($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }", other_input, operationName="M")
out["g_comment_cr"] = gql("query { viewer { login } } #\rmutation($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }", other_input)
out["g_comment_crlf_hides_nothing"] = gql("query { viewer { login } } # a comment\r\nmutation($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }", other_input)
M = "mutation($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }"
# Query-only to a reader that knows every escape; a reader that ends the string early, or a
# comment at another line terminator, would see a mutation.
out["g_string_escape_quote"] = gql('{ repository(owner: "\\u0022) { id } } ' + M + ' #", name: "y") { id } }', other_input)
out["g_string_backslash_quote"] = gql('{ repository(owner: "\\\\\\") { id } } ' + M + ' #", name: "y") { id } }', other_input)
out["g_unicode_brace_escape"] = gql('{ repository(owner: "\\u{22}) { id } } ' + M + ' #", name: "y") { id } }', other_input)
out["g_comment_nel"] = gql("{ viewer { login } } #\u0085" + M, other_input)
out["g_comment_ls"] = gql("{ viewer { login } } #\u2028" + M, other_input)
out["g_comment_ff"] = gql("{ viewer { login } } #\u000c" + M, other_input)
out["g_comment_nul"] = gql("{ viewer { login } } #\u0000" + M, other_input)
out["g_alias_after_unicode_name"] = gql("mutation($input: CreateIssueInput!) { createIssue(input: $input) { issue { \\u0069d: title } } }", {"input": {"repositoryId": REPO, "title": OTHER}})
out["g_typename_alias"] = gql("mutation($input: AddCommentInput!) { addComment(input: $input) { __typename: clientMutationId } }", other_input)
out["g_typename_only"] = gql("mutation { __typename }", {})
out["g_subscription"] = gql("subscription($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } }", other_input)
out["g_block_string"] = gql('mutation($input: AddCommentInput!) { addComment(input: $input) { clientMutationId } } query { repository(owner: """x""", name: "y") { id } }', other_input)
# Variables: typed differently, twins, extra keys, lists for ids.
out["g_var_list_type"] = gql("mutation($input: [AddCommentInput!]!) { addComment(input: $input) { clientMutationId } }", {"input": [{"subjectId": OTHER, "body": "x"}]})
out["g_var_subject_list"] = gql(AC, {"input": {"subjectId": [OTHER], "body": "x"}})
out["g_var_alias_key"] = gql(AC, {"input": {"subjectId": MINE, "body": "x", "subjectId: id": OTHER}})
out["g_var_case_twin"] = gql(AC, {"input": {"subjectId": MINE, "SubjectId": OTHER, "body": "x"}})
out["g_var_escaped_twin"] = raw("POST", "/graphql", '{"query": %s, "variables": {"input": {"subjectId": "%s", "body": "x"}, "\\u0069nput": {"subjectId": "%s", "body": "x"}}}' % (json.dumps(AC), MINE, OTHER))
out["g_var_escaped_key_twin"] = raw("POST", "/graphql", '{"query": %s, "variables": {"input": {"subjectId": "%s", "body": "x", "s\\u0075bjectId": "%s"}}}' % (json.dumps(AC), MINE, OTHER))
out["g_var_second"] = gql("mutation($input: AddCommentInput!, $x: ID) { addComment(input: $input) { clientMutationId } }", {"input": {"subjectId": MINE, "body": "x"}, "x": OTHER})
out["g_labels_as_string"] = gql("mutation($input: AddLabelsToLabelableInput!) { addLabelsToLabelable(input: $input) { clientMutationId } }", {"input": {"labelableId": MINE, "labelIds": "LA_x"}})
# Node ids of other types as a subject.
out["g_comment_as_subject"] = gql(AC, {"input": {"subjectId": COMMENT, "body": "x"}})
out["g_review_as_subject"] = gql(AC, {"input": {"subjectId": REVIEW, "body": "x"}})
out["g_repo_as_subject"] = gql(AC, {"input": {"subjectId": REPO, "body": "x"}})
out["g_comment_as_issue"] = gql("mutation($input: UpdateIssueInput!) { updateIssue(input: $input) { clientMutationId } }", {"input": {"id": COMMENT, "title": "x"}})
out["g_close_issue_on_pr"] = gql("mutation($input: CloseIssueInput!) { closeIssue(input: $input) { clientMutationId } }", {"input": {"issueId": THEIRS}})
out["g_update_issue_on_pr"] = gql("mutation($input: UpdateIssueInput!) { updateIssue(input: $input) { clientMutationId } }", {"input": {"id": THEIRS, "title": "mine-now"}})
out["g_update_pr_theirs"] = gql("mutation($input: UpdatePullRequestInput!) { updatePullRequest(input: $input) { clientMutationId } }", {"input": {"pullRequestId": THEIRS, "title": "mine-now"}})
out["g_close_pr_theirs"] = gql("mutation($input: ClosePullRequestInput!) { closePullRequest(input: $input) { clientMutationId } }", {"input": {"pullRequestId": THEIRS}})
out["g_other_repo_issue"] = gql("mutation($input: UpdateIssueInput!) { updateIssue(input: $input) { clientMutationId } }", {"input": {"id": OTHER, "title": "x"}})
out["g_approve_lowercase"] = gql("mutation($input: AddPullRequestReviewInput!) { addPullRequestReview(input: $input) { clientMutationId } }", {"input": {"pullRequestId": THEIRS, "event": "approve"}})
out["g_submit_review"] = gql("mutation($input: SubmitPullRequestReviewInput!) { submitPullRequestReview(input: $input) { clientMutationId } }", {"input": {"pullRequestReviewId": REVIEW, "event": "APPROVE"}})
out["g_merge"] = gql("mutation($input: MergePullRequestInput!) { mergePullRequest(input: $input) { clientMutationId } }", {"input": {"pullRequestId": THEIRS}})
out["g_label_of_other_repo"] = gql("mutation($input: AddLabelsToLabelableInput!) { addLabelsToLabelable(input: $input) { clientMutationId } }",
                                   {"input": {"labelableId": MINE, "labelIds": [COMMENT]}})
# GraphQL by other means than a POST of JSON.
out["g_get"] = raw("GET", "/graphql?query=" + urllib.parse.quote(AC) + "&variables=" + urllib.parse.quote(json.dumps(other_input)))
out["g_form"] = raw("POST", "/graphql", "query=" + urllib.parse.quote(AC), {"Content-Type": "application/x-www-form-urlencoded"})
out["g_gzip"] = raw("POST", "/graphql", gzip.compress(json.dumps({"query": AC, "variables": other_input}).encode()), {"Content-Encoding": "gzip"})
out["g_slash"] = raw("POST", "/graphql/", json.dumps({"query": AC, "variables": other_input}))
out["g_api_prefix"] = raw("POST", "/api/graphql", json.dumps({"query": AC, "variables": other_input}))
out["g_git_host"] = raw("POST", "/graphql", json.dumps({"query": AC, "variables": other_input}), host="github.com")
# REST: a person's pull request by its issue number, paths that are not plain, approvals.
out["r_issue_patch_closes_pr"] = raw("PATCH", R + "/issues/2", json.dumps({"state": "closed"}))
out["r_issue_patch_retitles_pr"] = raw("PATCH", R + "/issues/2", json.dumps({"title": "mine-now"}))
out["r_pull_patch"] = raw("PATCH", R + "/pulls/2", json.dumps({"state": "closed"}))
out["r_encoded_repo"] = raw("POST", "/repos/example-org/%6fther/issues/1/comments", json.dumps({"body": "x"}))
out["r_double_encoded"] = raw("POST", R + "/issues/1/%252e%252e/%252e%252e/%252e%252e/other/issues/1/comments", json.dumps({"body": "x"}))
out["r_dot_segments"] = raw("POST", R + "/../other/issues/1/comments", json.dumps({"body": "x"}))
out["r_semicolon"] = raw("POST", "/repos/example-org/other;x=example-repo/issues/1/comments", json.dumps({"body": "x"}))
out["r_backslash"] = raw("POST", "/repos/example-org/example-repo\\..\\other/issues/1/comments", json.dumps({"body": "x"}))
out["r_case"] = raw("POST", "/repos/EXAMPLE-ORG/OTHER/issues/1/comments", json.dumps({"body": "x"}))
out["r_repositories_id"] = raw("POST", "/repositories/1/issues/1/comments", json.dumps({"body": "x"}))
out["r_absolute_target"] = raw("POST", "https://api.github.com/repos/example-org/other/issues/1/comments", json.dumps({"body": "x"}))
out["r_review_approve"] = raw("POST", R + "/pulls/2/reviews", json.dumps({"event": "Approve"}))
out["r_review_event_approve"] = raw("POST", R + "/pulls/2/reviews/1/events", json.dumps({"event": "APPROVE"}))
out["r_merge"] = raw("PUT", R + "/pulls/2/merge", json.dumps({}))
out["r_update_branch"] = raw("PUT", R + "/pulls/2/update-branch", json.dumps({}))
out["r_requested_reviewers"] = raw("POST", R + "/pulls/2/requested_reviewers", json.dumps({"reviewers": ["octo-human"]}))
out["r_override_header"] = raw("GET", R + "/issues/1", b"", {"X-HTTP-Method-Override": "PATCH"})
out["r_override_query"] = raw("POST", R + "/issues/1/comments?_method=DELETE", json.dumps({"body": "x"}))
out["r_dismiss_review"] = raw("PUT", R + "/pulls/2/reviews/1/dismissals", json.dumps({"message": "x"}))
print(json.dumps(out))
