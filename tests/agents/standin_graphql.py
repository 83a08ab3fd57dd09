"""The stand-in GitHub's GraphQL API: documents executed by graphql-core (the reference
implementation's Python port) over a subset of GitHub's public schema (the types, fields
and mutations `gh` uses for pull requests, issues, comments, reviews and labels, and
`node(id:)`), never by matching query strings.

State lives in memory (repositories, issues and pull requests sharing a number space per
repository as on GitHub, comments, reviews, labels) and is written to DIR/graphql.json
after each mutation for the tests to read. Node ids are opaque, shaped like GitHub's
(`R_kgDO...`, `I_kwDO...`, `PR_kwDO...`): clients must resolve them, not decode them.
A write through a token is refused (NOT_FOUND) for a repository outside the token's
repositories, as GitHub answers an installation token.
"""

import base64
import json
import os
import secrets
import sys
import threading

sys.path.insert(0, "/usr/local/lib/airlock-test/py")
try:
    import graphql  # noqa: E402
except ImportError:  # pragma: no cover
    sys.stderr.write("standin_graphql: graphql-core is missing: run scripts/install-deps.sh\n")
    raise

SDL = '''
scalar URI
scalar DateTime
scalar GitObjectID
scalar HTML

interface Node { id: ID! }

enum RepositoryPermission { ADMIN MAINTAIN WRITE TRIAGE READ }
enum PullRequestState { OPEN CLOSED MERGED }
enum IssueState { OPEN CLOSED }
enum IssueClosedStateReason { COMPLETED NOT_PLANNED }
enum PullRequestReviewEvent { APPROVE COMMENT REQUEST_CHANGES DISMISS }
enum PullRequestReviewState { APPROVED COMMENTED CHANGES_REQUESTED DISMISSED PENDING }
enum PullRequestMergeMethod { MERGE SQUASH REBASE }
enum MergeableState { MERGEABLE CONFLICTING UNKNOWN }
enum IssueOrderField { CREATED_AT UPDATED_AT COMMENTS }
enum OrderDirection { ASC DESC }
input IssueOrder { field: IssueOrderField! direction: OrderDirection! }
enum LabelOrderField { NAME CREATED_AT }
input LabelOrder { field: LabelOrderField! direction: OrderDirection! }
enum CommentAuthorAssociation { OWNER MEMBER COLLABORATOR CONTRIBUTOR NONE }

type PageInfo { hasNextPage: Boolean! endCursor: String }

interface Actor { login: String! avatarUrl(size: Int): URI! url: URI! }
type User implements Node & Actor & RepositoryOwner { id: ID! login: String! name: String avatarUrl(size: Int): URI! url: URI! }
type Bot implements Node & Actor { id: ID! login: String! avatarUrl(size: Int): URI! url: URI! }
type Organization implements Node & Actor & RepositoryOwner { id: ID! login: String! name: String avatarUrl(size: Int): URI! url: URI! }
interface RepositoryOwner { id: ID! login: String! url: URI! }

type Ref { id: ID! name: String! prefix: String! }

type Label implements Node { id: ID! name: String! color: String! description: String url: URI! repository: Repository! }
type LabelConnection { nodes: [Label] totalCount: Int! pageInfo: PageInfo! }
type UserConnection { nodes: [User] totalCount: Int! pageInfo: PageInfo! }

type IssueComment implements Node {
  id: ID! body: String! url: URI! author: Actor authorAssociation: CommentAuthorAssociation!
  createdAt: DateTime! includesCreatedEdit: Boolean! isMinimized: Boolean! minimizedReason: String
  viewerDidAuthor: Boolean! repository: Repository!
}
type IssueCommentEdge { node: IssueComment cursor: String! }
type IssueCommentConnection { nodes: [IssueComment] totalCount: Int! pageInfo: PageInfo! }

type Commit implements Node { id: ID! oid: GitObjectID! }

type PullRequestReview implements Node {
  id: ID! body: String! state: PullRequestReviewState! author: Actor url: URI!
  commit: Commit submittedAt: DateTime authorAssociation: CommentAuthorAssociation!
}
type PullRequestReviewConnection { nodes: [PullRequestReview] totalCount: Int! pageInfo: PageInfo! }

type Issue implements Node {
  id: ID! number: Int! title: String! body: String! url: URI! state: IssueState!
  stateReason: IssueClosedStateReason closed: Boolean! author: Actor createdAt: DateTime!
  updatedAt: DateTime! repository: Repository! locked: Boolean!
  labels(first: Int, after: String): LabelConnection
  assignees(first: Int, after: String): UserConnection!
  comments(first: Int, last: Int, after: String): IssueCommentConnection!
  projectCards(first: Int): ProjectCardConnection!
  milestone: Milestone
  viewerCanUpdate: Boolean!
}

type PullRequest implements Node {
  id: ID! number: Int! title: String! body: String! url: URI! state: PullRequestState!
  closed: Boolean! merged: Boolean! isDraft: Boolean! author: Actor createdAt: DateTime!
  updatedAt: DateTime! repository: Repository! locked: Boolean!
  headRefName: String! baseRefName: String! headRefOid: GitObjectID!
  headRepository: Repository headRepositoryOwner: RepositoryOwner isCrossRepository: Boolean!
  maintainerCanModify: Boolean! mergeable: MergeableState!
  labels(first: Int, after: String): LabelConnection
  assignees(first: Int, after: String): UserConnection!
  comments(first: Int, last: Int, after: String): IssueCommentConnection!
  reviews(first: Int, last: Int, after: String): PullRequestReviewConnection
  reviewRequests(first: Int): ReviewRequestConnection
  projectCards(first: Int): ProjectCardConnection!
  projectItems(first: Int, after: String): ProjectV2ItemConnection!
  milestone: Milestone
  commits(first: Int, last: Int): PullRequestCommitConnection!
  mergeStateStatus: MergeStateStatus!
  viewerCanUpdate: Boolean!
}
type Team implements Node { id: ID! name: String! slug: String! organization: Organization! }
union RequestedReviewer = User | Team | Bot
type ReviewRequest { requestedReviewer: RequestedReviewer }
type ReviewRequestConnection { nodes: [ReviewRequest] totalCount: Int! }
type Project { name: String! }
type ProjectV2 { id: ID! title: String! }
type ProjectV2Item { id: ID! project: ProjectV2! }
type ProjectV2ItemConnection { nodes: [ProjectV2Item] pageInfo: PageInfo! }
type ProjectColumn { name: String! }
type ProjectCard { project: Project! column: ProjectColumn }
type ProjectCardConnection { nodes: [ProjectCard] totalCount: Int! }
type Milestone { number: Int! title: String! description: String dueOn: DateTime }
type PullRequestCommit { commit: Commit! }
type PullRequestCommitConnection { nodes: [PullRequestCommit] totalCount: Int! }
enum MergeStateStatus { BEHIND BLOCKED CLEAN DIRTY DRAFT HAS_HOOKS UNKNOWN UNSTABLE }
type PullRequestConnection { nodes: [PullRequest] totalCount: Int! pageInfo: PageInfo! }
type IssueConnection { nodes: [Issue] totalCount: Int! pageInfo: PageInfo! }
union IssueOrPullRequest = Issue | PullRequest

type Repository implements Node {
  id: ID! name: String! nameWithOwner: String! owner: RepositoryOwner! url: URI!
  description: String hasIssuesEnabled: Boolean! hasWikiEnabled: Boolean!
  hasProjectsEnabled: Boolean! hasDiscussionsEnabled: Boolean! isPrivate: Boolean!
  isFork: Boolean! isArchived: Boolean! isEmpty: Boolean! isInOrganization: Boolean!
  viewerPermission: RepositoryPermission defaultBranchRef: Ref parent: Repository
  mergeCommitAllowed: Boolean! rebaseMergeAllowed: Boolean! squashMergeAllowed: Boolean!
  issue(number: Int!): Issue
  pullRequest(number: Int!): PullRequest
  issueOrPullRequest(number: Int!): IssueOrPullRequest
  pullRequests(headRefName: String, baseRefName: String, states: [PullRequestState!], orderBy: IssueOrder, labels: [String!], first: Int, last: Int, after: String): PullRequestConnection!
  issues(states: [IssueState!], orderBy: IssueOrder, labels: [String!], first: Int, after: String): IssueConnection!
  labels(first: Int, after: String, query: String, orderBy: LabelOrder): LabelConnection
  assignableUsers(first: Int, after: String, query: String): UserConnection!
  label(name: String!): Label
}

type Query {
  node(id: ID!): Node
  nodes(ids: [ID!]!): [Node]!
  repository(owner: String!, name: String!): Repository
  viewer: User!
}

input CreatePullRequestInput {
  repositoryId: ID! baseRefName: String! headRefName: String! headRepositoryId: ID
  title: String! body: String maintainerCanModify: Boolean draft: Boolean clientMutationId: String
}
type CreatePullRequestPayload { pullRequest: PullRequest clientMutationId: String }
input UpdatePullRequestInput {
  pullRequestId: ID! title: String body: String baseRefName: String state: PullRequestState
  maintainerCanModify: Boolean assigneeIds: [ID!] labelIds: [ID!] milestoneId: ID projectIds: [ID!]
  clientMutationId: String
}
type UpdatePullRequestPayload { pullRequest: PullRequest clientMutationId: String }
input MarkPullRequestReadyForReviewInput { pullRequestId: ID! clientMutationId: String }
type MarkPullRequestReadyForReviewPayload { pullRequest: PullRequest clientMutationId: String }
input ConvertPullRequestToDraftInput { pullRequestId: ID! clientMutationId: String }
type ConvertPullRequestToDraftPayload { pullRequest: PullRequest clientMutationId: String }
input AddPullRequestReviewInput {
  pullRequestId: ID! event: PullRequestReviewEvent body: String commitOID: GitObjectID clientMutationId: String
}
type AddPullRequestReviewPayload { pullRequestReview: PullRequestReview clientMutationId: String }
input MergePullRequestInput {
  pullRequestId: ID! mergeMethod: PullRequestMergeMethod commitHeadline: String commitBody: String
  expectedHeadOid: GitObjectID authorEmail: String clientMutationId: String
}
type MergePullRequestPayload { pullRequest: PullRequest clientMutationId: String }
input ClosePullRequestInput { pullRequestId: ID! clientMutationId: String }
type ClosePullRequestPayload { pullRequest: PullRequest clientMutationId: String }
input ReopenPullRequestInput { pullRequestId: ID! clientMutationId: String }
type ReopenPullRequestPayload { pullRequest: PullRequest clientMutationId: String }
input RequestReviewsInput { pullRequestId: ID! userIds: [ID!] teamIds: [ID!] union: Boolean clientMutationId: String }
type RequestReviewsPayload { pullRequest: PullRequest clientMutationId: String }

input CreateIssueInput {
  repositoryId: ID! title: String! body: String assigneeIds: [ID!] labelIds: [ID!]
  milestoneId: ID projectIds: [ID!] clientMutationId: String
}
type CreateIssuePayload { issue: Issue clientMutationId: String }
input UpdateIssueInput {
  id: ID! title: String body: String assigneeIds: [ID!] labelIds: [ID!] milestoneId: ID
  projectIds: [ID!] state: IssueState clientMutationId: String
}
type UpdateIssuePayload { issue: Issue clientMutationId: String }
input CloseIssueInput { issueId: ID! stateReason: IssueClosedStateReason clientMutationId: String }
type CloseIssuePayload { issue: Issue clientMutationId: String }
input ReopenIssueInput { issueId: ID! clientMutationId: String }
type ReopenIssuePayload { issue: Issue clientMutationId: String }

input AddCommentInput { subjectId: ID! body: String! clientMutationId: String }
type AddCommentPayload { commentEdge: IssueCommentEdge subject: Node clientMutationId: String }

union Labelable = Issue | PullRequest
union Assignable = Issue | PullRequest
input AddLabelsToLabelableInput { labelableId: ID! labelIds: [ID!]! clientMutationId: String }
type AddLabelsToLabelablePayload { labelable: Labelable clientMutationId: String }
input RemoveLabelsFromLabelableInput { labelableId: ID! labelIds: [ID!]! clientMutationId: String }
type RemoveLabelsFromLabelablePayload { labelable: Labelable clientMutationId: String }
input AddAssigneesToAssignableInput { assignableId: ID! assigneeIds: [ID!]! clientMutationId: String }
type AddAssigneesToAssignablePayload { assignable: Assignable clientMutationId: String }
input RemoveAssigneesFromAssignableInput { assignableId: ID! assigneeIds: [ID!]! clientMutationId: String }
type RemoveAssigneesFromAssignablePayload { assignable: Assignable clientMutationId: String }

type Mutation {
  createPullRequest(input: CreatePullRequestInput!): CreatePullRequestPayload
  updatePullRequest(input: UpdatePullRequestInput!): UpdatePullRequestPayload
  markPullRequestReadyForReview(input: MarkPullRequestReadyForReviewInput!): MarkPullRequestReadyForReviewPayload
  convertPullRequestToDraft(input: ConvertPullRequestToDraftInput!): ConvertPullRequestToDraftPayload
  addPullRequestReview(input: AddPullRequestReviewInput!): AddPullRequestReviewPayload
  mergePullRequest(input: MergePullRequestInput!): MergePullRequestPayload
  closePullRequest(input: ClosePullRequestInput!): ClosePullRequestPayload
  reopenPullRequest(input: ReopenPullRequestInput!): ReopenPullRequestPayload
  requestReviews(input: RequestReviewsInput!): RequestReviewsPayload
  createIssue(input: CreateIssueInput!): CreateIssuePayload
  updateIssue(input: UpdateIssueInput!): UpdateIssuePayload
  closeIssue(input: CloseIssueInput!): CloseIssuePayload
  reopenIssue(input: ReopenIssueInput!): ReopenIssuePayload
  addComment(input: AddCommentInput!): AddCommentPayload
  addLabelsToLabelable(input: AddLabelsToLabelableInput!): AddLabelsToLabelablePayload
  removeLabelsFromLabelable(input: RemoveLabelsFromLabelableInput!): RemoveLabelsFromLabelablePayload
  addAssigneesToAssignable(input: AddAssigneesToAssignableInput!): AddAssigneesToAssignablePayload
  removeAssigneesFromAssignable(input: RemoveAssigneesFromAssignableInput!): RemoveAssigneesFromAssignablePayload
}
'''

SCHEMA = graphql.build_schema(SDL)
RULES = [r for r in graphql.specified_rules if r is not graphql.OverlappingFieldsCanBeMergedRule]
LOCK = threading.RLock()
NOW = "2026-01-01T00:00:00Z"
# The App's bot account: what the installation token acts as.
BOT = {"__typename": "Bot", "id": "BOT_kgDOairlock", "login": "airlock-app[bot]"}


def new_id(prefix):
    return prefix + "_kwDO" + base64.urlsafe_b64encode(secrets.token_bytes(9)).decode()


class State:
    """Everything the GraphQL API knows; one per stand-in."""

    def __init__(self, dir_, head_of):
        self.dir = dir_
        self.head_of = head_of  # (repo, branch) -> sha or None
        self.nodes = {}  # id -> object (dict with "__typename")
        self.repos = {}  # "owner/name" -> repository dict
        self.users = {}
        for login in ("airlock-app[bot]",):
            self.nodes[BOT["id"]] = BOT
        for login in ("octo-human", "other-bot[bot]"):
            self.user(login)
        for full in ("example-org/example-repo", "example-org/scratch", "example-org/other"):
            self.repo(full)

    def user(self, login):
        if login not in self.users:
            typ = "Bot" if login.endswith("[bot]") else "User"
            u = {"__typename": typ, "id": new_id("U"), "login": login}
            self.users[login] = u
            self.nodes[u["id"]] = u
        return self.users[login]

    def repo(self, full):
        if full not in self.repos:
            owner, name = full.split("/")
            r = {"__typename": "Repository", "id": "R_kgDO" + secrets.token_hex(5),
                 "full": full, "ownerLogin": owner, "name": name, "items": [], "labels": {}}
            self.repos[full] = r
            self.nodes[r["id"]] = r
            for lname in ("bug", "enhancement"):
                lab = {"__typename": "Label", "id": new_id("LA"), "name": lname,
                       "color": "ededed", "repo": full}
                r["labels"][lname] = lab
                self.nodes[lab["id"]] = lab
            # Every repository starts with issue #1, opened by a human.
            self.add_issue(r, "First issue", "seed", self.user("octo-human"))
        return self.repos[full]

    def add_issue(self, r, title, body, author):
        i = {"__typename": "Issue", "id": new_id("I"), "number": len(r["items"]) + 1,
             "title": title, "body": body or "", "state": "OPEN", "stateReason": None,
             "author": author, "repo": r["full"], "labels": [], "assignees": [], "comments": []}
        r["items"].append(i)
        self.nodes[i["id"]] = i
        return i

    def add_pull(self, r, a, author):
        p = {"__typename": "PullRequest", "id": new_id("PR"), "number": len(r["items"]) + 1,
             "title": a["title"], "body": a.get("body") or "", "state": "OPEN",
             "isDraft": bool(a.get("draft")), "author": author, "repo": r["full"],
             "headRefName": a["headRefName"], "baseRefName": a["baseRefName"],
             "labels": [], "assignees": [], "comments": [], "reviews": []}
        r["items"].append(p)
        self.nodes[p["id"]] = p
        return p

    def save(self):
        out = {"repos": {}}
        for full, r in self.repos.items():
            out["repos"][full] = {
                "id": r["id"],
                "items": [{k: v for k, v in i.items() if k not in ("author",)}
                          | {"author": i["author"]["login"]} for i in r["items"]],
            }
        with open(os.path.join(self.dir, "graphql.json.tmp"), "w") as f:
            json.dump(out, f, indent=1, default=lambda o: o.get("login", o.get("id")))
        os.replace(os.path.join(self.dir, "graphql.json.tmp"),
                   os.path.join(self.dir, "graphql.json"))


class Refused(Exception):
    pass


def conn(items):
    items = list(items)
    return {"nodes": items, "totalCount": len(items),
            "pageInfo": {"hasNextPage": False, "endCursor": None}}


def url_of(st, o):
    t = o["__typename"]
    if t == "Repository":
        return "https://github.com/" + o["full"]
    if t in ("Issue", "PullRequest"):
        kind = "pull" if t == "PullRequest" else "issues"
        return "https://github.com/%s/%s/%d" % (o["repo"], kind, o["number"])
    if t == "IssueComment":
        parent = st.nodes[o["subject"]]
        return url_of(st, parent) + "#issuecomment-" + o["id"][-6:]
    if t == "PullRequestReview":
        return url_of(st, st.nodes[o["pull"]]) + "#pullrequestreview-" + o["id"][-6:]
    if t == "Label":
        return "https://github.com/%s/labels/%s" % (o["repo"], o["name"])
    return "https://github.com/" + o.get("login", "")


def resolver(st):
    """graphql-core's field resolver over the state's dicts."""

    def resolve(obj, info, **args):
        f = info.field_name
        t = obj.get("__typename") if isinstance(obj, dict) else None
        if t is None:
            v = obj.get(f) if isinstance(obj, dict) else getattr(obj, f, None)
            return v(obj, info, **args) if callable(v) else v
        if f == "url":
            return url_of(st, obj)
        if f == "avatarUrl":
            return "https://avatars.example/u"
        if f in ("createdAt", "updatedAt", "submittedAt"):
            return NOW
        if t == "Repository":
            items = obj["items"]
            if f == "owner":
                return {"__typename": "Organization", "id": "O_" + obj["ownerLogin"],
                        "login": obj["ownerLogin"]}
            if f == "nameWithOwner":
                return obj["full"]
            if f in ("hasIssuesEnabled", "hasWikiEnabled", "hasProjectsEnabled",
                     "mergeCommitAllowed", "rebaseMergeAllowed", "squashMergeAllowed",
                     "isInOrganization"):
                return True
            if f in ("hasDiscussionsEnabled", "isPrivate", "isFork", "isArchived", "isEmpty"):
                return False
            if f == "viewerPermission":
                return "WRITE"
            if f == "defaultBranchRef":
                return {"id": "REF_main", "name": "main", "prefix": "refs/heads/"}
            if f == "parent":
                return None
            if f == "description":
                return ""
            if f in ("issue", "pullRequest", "issueOrPullRequest"):
                want = {"issue": ("Issue",), "pullRequest": ("PullRequest",),
                        "issueOrPullRequest": ("Issue", "PullRequest")}[f]
                for i in items:
                    if i["number"] == args["number"] and i["__typename"] in want:
                        return i
                return None
            if f == "pullRequests":
                ps = [i for i in items if i["__typename"] == "PullRequest"]
                if args.get("headRefName"):
                    ps = [p for p in ps if p["headRefName"] == args["headRefName"]]
                if args.get("baseRefName"):
                    ps = [p for p in ps if p["baseRefName"] == args["baseRefName"]]
                if args.get("states"):
                    ps = [p for p in ps if p["state"] in args["states"]]
                return conn(ps)
            if f == "issues":
                xs = [i for i in items if i["__typename"] == "Issue"]
                if args.get("states"):
                    xs = [i for i in xs if i["state"] in args["states"]]
                return conn(xs)
            if f == "labels":
                return conn(obj["labels"].values())
            if f == "assignableUsers":
                return conn(u for u in st.users.values() if u["__typename"] == "User")
            if f == "label":
                return obj["labels"].get(args["name"])
        if t in ("Issue", "PullRequest"):
            if f == "repository":
                return st.repos[obj["repo"]]
            if f == "closed":
                return obj["state"] != "OPEN"
            if f == "merged":
                return obj["state"] == "MERGED"
            if f == "locked":
                return False
            if f == "viewerCanUpdate":
                return True
            if f == "labels":
                return conn(st.nodes[x] for x in obj["labels"])
            if f == "assignees":
                return conn(st.nodes[x] for x in obj["assignees"])
            if f == "comments":
                return conn(st.nodes[x] for x in obj["comments"])
            if f == "reviewRequests":
                return {"nodes": [], "totalCount": 0}
            if f == "projectCards":
                return {"nodes": [], "totalCount": 0}
            if f == "milestone":
                return None
            if f == "projectItems":
                return conn([])
            if f == "commits":
                oid = st.head_of(obj["repo"], obj["headRefName"]) or "0" * 40
                return {"nodes": [{"commit": {"__typename": "Commit", "id": "C_" + oid, "oid": oid}}],
                        "totalCount": 1}
            if f == "mergeStateStatus":
                return "CLEAN"
            if f == "reviews":
                return conn(st.nodes[x] for x in obj.get("reviews", []))
            if f == "headRefOid":
                return st.head_of(obj["repo"], obj["headRefName"]) or "0" * 40
            if f == "headRepository":
                return st.repos[obj["repo"]]
            if f == "headRepositoryOwner":
                return {"__typename": "Organization", "id": "O_x",
                        "login": obj["repo"].split("/")[0]}
            if f == "isCrossRepository":
                return False
            if f == "maintainerCanModify":
                return False
            if f == "mergeable":
                return "MERGEABLE"
        if t == "IssueComment":
            if f == "authorAssociation":
                return "NONE"
            if f in ("includesCreatedEdit", "isMinimized"):
                return False
            if f == "viewerDidAuthor":
                return obj["author"] is BOT
        if t == "PullRequestReview":
            if f == "commit":
                return {"__typename": "Commit", "id": "C_" + obj["oid"], "oid": obj["oid"]}
            if f == "authorAssociation":
                return "NONE"
        if t == "Label" and f == "description":
            return None
        if t == "Label" and f == "repository":
            return st.repos[obj["repo"]]
        if t == "IssueComment" and f == "repository":
            return st.repos[st.nodes[obj["subject"]]["repo"]]
        return obj.get(f)

    return resolve


def type_resolver(value, info, abstract_type):
    return value.get("__typename")


def root(st, token_repos):
    """The root value: queries and mutations, for a token reaching `token_repos`."""

    def node(id_, types=None):
        o = st.nodes.get(id_)
        if o is None or (types and o["__typename"] not in types):
            raise Refused("Could not resolve to a node with the global id of '%s'" % id_)
        return o

    def writable(o):
        full = o["full"] if o["__typename"] == "Repository" else o["repo"]
        if full.split("/")[1] not in token_repos:
            raise Refused("Resource not accessible by integration")
        return st.repos[full]

    def mutating(fn):
        def run(_info, input):
            with LOCK:
                out = fn(input)
                st.save()
                return {**out, "clientMutationId": input.get("clientMutationId")}
        return lambda _root, info, input: run(info, input)

    def create_pr(a):
        r = writable(node(a["repositoryId"], ["Repository"]))
        for b in (a["headRefName"], a["baseRefName"]):
            if not st.head_of(r["full"], b):
                raise Refused("Head sha can't be blank, Base sha can't be blank, "
                              "No commits between %s and %s" % (a["baseRefName"], a["headRefName"]))
        return {"pullRequest": st.add_pull(r, a, BOT)}

    def update_pr(a):
        p = node(a["pullRequestId"], ["PullRequest"])
        writable(p)
        for k in ("title", "body", "baseRefName"):
            if a.get(k) is not None:
                p[k] = a[k]
        if a.get("state"):
            p["state"] = a["state"]
        return {"pullRequest": p}

    def ready(a):
        p = node(a["pullRequestId"], ["PullRequest"])
        writable(p)
        p["isDraft"] = False
        return {"pullRequest": p}

    def to_draft(a):
        p = node(a["pullRequestId"], ["PullRequest"])
        writable(p)
        p["isDraft"] = True
        return {"pullRequest": p}

    def review(a):
        p = node(a["pullRequestId"], ["PullRequest"])
        writable(p)
        state = {"APPROVE": "APPROVED", "COMMENT": "COMMENTED",
                 "REQUEST_CHANGES": "CHANGES_REQUESTED"}.get(a.get("event"), "PENDING")
        rv = {"__typename": "PullRequestReview", "id": new_id("PRR"), "body": a.get("body") or "",
              "state": state, "author": BOT, "pull": p["id"],
              "oid": a.get("commitOID") or st.head_of(p["repo"], p["headRefName"]) or "0" * 40}
        st.nodes[rv["id"]] = rv
        p["reviews"].append(rv["id"])
        return {"pullRequestReview": rv}

    def merge(a):
        p = node(a["pullRequestId"], ["PullRequest"])
        writable(p)
        head = st.head_of(p["repo"], p["headRefName"])
        if a.get("expectedHeadOid") and a["expectedHeadOid"] != head:
            raise Refused("Head branch was modified. Review and try the merge again.")
        p["state"] = "MERGED"
        # What landed: the head the branch had when GitHub merged it.
        p["mergedOid"] = head
        return {"pullRequest": p}

    def set_state(kind, state):
        def f(a):
            o = node(a.get("pullRequestId") or a.get("issueId"), [kind])
            writable(o)
            o["state"] = state
            if kind == "Issue":
                o["stateReason"] = a.get("stateReason") or ("COMPLETED" if state == "CLOSED" else None)
                return {"issue": o}
            return {"pullRequest": o}
        return f

    def create_issue(a):
        r = writable(node(a["repositoryId"], ["Repository"]))
        i = st.add_issue(r, a["title"], a.get("body"), BOT)
        i["labels"] = list(a.get("labelIds") or [])
        i["assignees"] = list(a.get("assigneeIds") or [])
        return {"issue": i}

    def update_issue(a):
        i = node(a["id"], ["Issue"])
        writable(i)
        for k in ("title", "body", "state"):
            if a.get(k) is not None:
                i[k] = a[k]
        if a.get("labelIds") is not None:
            i["labels"] = list(a["labelIds"])
        if a.get("assigneeIds") is not None:
            i["assignees"] = list(a["assigneeIds"])
        return {"issue": i}

    def comment(a):
        s = node(a["subjectId"], ["Issue", "PullRequest"])
        writable(s)
        c = {"__typename": "IssueComment", "id": new_id("IC"), "body": a["body"], "author": BOT,
             "subject": s["id"]}
        st.nodes[c["id"]] = c
        s["comments"].append(c["id"])
        return {"commentEdge": {"node": c, "cursor": "c"}, "subject": s}

    def labels(add):
        def f(a):
            o = node(a["labelableId"], ["Issue", "PullRequest"])
            writable(o)
            for lid in a["labelIds"]:
                node(lid, ["Label"])
                if add and lid not in o["labels"]:
                    o["labels"].append(lid)
                if not add and lid in o["labels"]:
                    o["labels"].remove(lid)
            return {"labelable": o}
        return f

    def assignees(add):
        def f(a):
            o = node(a["assignableId"], ["Issue", "PullRequest"])
            writable(o)
            for uid in a["assigneeIds"]:
                node(uid, ["User", "Bot"])
                if add and uid not in o["assignees"]:
                    o["assignees"].append(uid)
                if not add and uid in o["assignees"]:
                    o["assignees"].remove(uid)
            return {"assignable": o}
        return f

    def request_reviews(a):
        p = node(a["pullRequestId"], ["PullRequest"])
        writable(p)
        return {"pullRequest": p}

    def q_node(_r, _i, id):
        o = st.nodes.get(id)
        if o is None:
            raise Refused("Could not resolve to a node with the global id of '%s'" % id)
        return o

    def q_repo(_r, _i, owner, name):
        r = st.repos.get("%s/%s" % (owner, name))
        if r is None:
            raise Refused("Could not resolve to a Repository with the name '%s/%s'." % (owner, name))
        return r

    return {
        "node": q_node,
        "nodes": lambda _r, _i, ids: [st.nodes.get(i) for i in ids],
        "repository": q_repo,
        "viewer": lambda _r, _i: {**BOT, "__typename": "User", "name": None},
        "createPullRequest": mutating(create_pr),
        "updatePullRequest": mutating(update_pr),
        "markPullRequestReadyForReview": mutating(ready),
        "convertPullRequestToDraft": mutating(to_draft),
        "addPullRequestReview": mutating(review),
        "mergePullRequest": mutating(merge),
        "closePullRequest": mutating(set_state("PullRequest", "CLOSED")),
        "reopenPullRequest": mutating(set_state("PullRequest", "OPEN")),
        "requestReviews": mutating(request_reviews),
        "createIssue": mutating(create_issue),
        "updateIssue": mutating(update_issue),
        "closeIssue": mutating(set_state("Issue", "CLOSED")),
        "reopenIssue": mutating(set_state("Issue", "OPEN")),
        "addComment": mutating(comment),
        "addLabelsToLabelable": mutating(labels(True)),
        "removeLabelsFromLabelable": mutating(labels(False)),
        "addAssigneesToAssignable": mutating(assignees(True)),
        "removeAssigneesFromAssignable": mutating(assignees(False)),
    }


def execute(st, token_repos, body):
    """One POST /graphql body: (GitHub's answer as a dict, the operation's type and its
    top-level fields, for the log)."""
    try:
        req = json.loads(body or b"{}")
    except ValueError:
        return {"message": "Problems parsing JSON"}, None
    doc_text = req.get("query") or ""
    try:
        doc = graphql.parse(doc_text)
    except graphql.GraphQLError as e:
        return {"errors": [{"message": e.message}]}, None
    ops = [d for d in doc.definitions if isinstance(d, graphql.OperationDefinitionNode)]
    op = None
    for d in ops:
        if req.get("operationName") in (None, d.name.value if d.name else None):
            op = d
    fields = []
    if op is not None:
        fields = [s.name.value for s in op.selection_set.selections
                  if isinstance(s, graphql.FieldNode)]
    seen = {"type": op.operation.value if op else None, "fields": fields}
    # Every rule but the one on overlapping fields: GitHub (graphql-ruby) takes `state`
    # asked on both Issue and PullRequest (two enums) in one selection, as `gh` asks it.
    errors = graphql.validate(SCHEMA, doc, RULES)
    if errors:
        return {"errors": [e.formatted for e in errors]}, seen
    with LOCK:
        result = graphql.execute(SCHEMA, doc, root_value=root(st, token_repos),
                                 variable_values=req.get("variables"),
                                 operation_name=req.get("operationName"),
                                 field_resolver=resolver(st), type_resolver=type_resolver)
    out = {"data": result.data}
    if result.errors:
        out["errors"] = [{**e.formatted, "type": "NOT_FOUND"} for e in result.errors]
    return out, seen
