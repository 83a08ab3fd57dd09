// A GraphQL document the GitHub route reads to tell queries from mutations. Invariants:
// never a panic; ignored tokens (white space, line ends, commas, comments) around the
// document change nothing of what it reads (the operations, or that it is refused).
use airlock::gateway::github::graphql::operations;

pub fn check(data: &[u8]) {
    let Ok(doc) = std::str::from_utf8(data) else {
        return;
    };
    let read = operations(doc).ok();
    for padded in [format!("# a comment\n{doc}\n,"), format!(" \t,\r\n{doc}")] {
        assert_eq!(
            operations(&padded).ok(),
            read,
            "ignored tokens changed the reading"
        );
    }
}
