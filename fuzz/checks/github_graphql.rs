// One GraphQL request body POSTed by a jailed client to its GitHub route: the strict JSON
// reader, then the mutation reader (the gateway's lexer and the GraphQL parser), the plan
// of node ids and the named writes for each type a subject could resolve to. Invariants:
// never a panic; what is read as a mutation is, to the gateway's own lexer, a document of
// exactly one operation, a mutation, with no alias, fragment or directive at any depth
// (the lexer's reading of the parser's walk); a read is queries only.
use airlock::gateway::github::graphql::{marks, operations, Marks, Op};
use airlock::gateway::github::mutation::{self, NodeType, Request};
use airlock::gateway::strict_json;

pub fn check(data: &[u8]) {
    let Ok(body) = strict_json::parse(data) else {
        return;
    };
    let Ok(req) = mutation::read(&body) else {
        return;
    };
    let doc = body["query"].as_str().expect("a read request has its query");
    let ops = operations(doc).expect("what was read, the lexer reads");
    match req {
        Request::Read => assert!(ops.iter().all(|o| *o == Op::Query)),
        Request::Mutation(m) => {
            assert_eq!(ops, [Op::Mutation]);
            assert_eq!(marks(doc), Ok(Marks::default()), "{doc}");
            if mutation::plan(&m).is_ok() {
                for ty in [NodeType::Repository, NodeType::Issue, NodeType::PullRequest] {
                    let _ = mutation::writes(&m, ty);
                }
            }
        }
    }
}
