//! See fuzz/checks/graphql_doc.rs: the input and the invariants, shared with
//! tests/fuzz_corpora.rs, which replays this target's seeds and corpus in CI.
#![no_main]

include!("../checks/graphql_doc.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
