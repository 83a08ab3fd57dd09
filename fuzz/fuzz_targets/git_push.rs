//! See fuzz/checks/git_push.rs: the input and the invariants, shared with
//! tests/fuzz_corpora.rs, which replays this target's seeds and corpus in CI.
#![no_main]

include!("../checks/git_push.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
