//! See fuzz/checks/github_graphql.rs: the input and the invariants, shared with
//! tests/fuzz_corpora.rs, which replays this target's seeds and corpus in CI.
#![no_main]

include!("../checks/github_graphql.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
