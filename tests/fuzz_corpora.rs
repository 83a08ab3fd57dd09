//! The fuzz targets whose invariants live in fuzz/checks/ replayed on stable: every input in
//! their seeds (fuzz/seeds/TARGET) and found corpus (fuzz/corpus/TARGET) goes through the
//! same check the fuzzer ran, so CI keeps what the fuzzer explored as regression tests.

use std::path::Path;

mod egress_front {
    include!("../fuzz/checks/egress_front.rs");
}
mod git_push {
    include!("../fuzz/checks/git_push.rs");
}
mod provider_usage {
    include!("../fuzz/checks/provider_usage.rs");
}
mod graphql_doc {
    include!("../fuzz/checks/graphql_doc.rs");
}
mod github_graphql {
    include!("../fuzz/checks/github_graphql.rs");
}

/// Run `check` on every input kept for `target`; how many there were.
fn replay(target: &str, check: fn(&[u8])) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut n = 0;
    for dir in ["seeds", "corpus"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for e in entries {
            let path = e.expect("a readable corpus directory").path();
            let data = std::fs::read(&path).expect("a readable corpus file");
            let caught = std::panic::catch_unwind(|| check(&data));
            assert!(caught.is_ok(), "{} broke an invariant", path.display());
            n += 1;
        }
    }
    assert!(n > 0, "fuzz/seeds/{target} is empty: nothing was replayed");
    n
}

#[test]
fn egress_front_inputs_hold() {
    replay("egress_front", egress_front::check);
}

#[test]
fn git_push_inputs_hold() {
    replay("git_push", git_push::check);
}

#[test]
fn provider_usage_inputs_hold() {
    replay("provider_usage", provider_usage::check);
}

#[test]
fn graphql_doc_inputs_hold() {
    replay("graphql_doc", graphql_doc::check);
}

#[test]
fn github_graphql_inputs_hold() {
    replay("github_graphql", github_graphql::check);
}
