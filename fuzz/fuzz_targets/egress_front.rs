//! See fuzz/checks/egress_front.rs: the input and the invariants, shared with
//! tests/fuzz_corpora.rs, which replays this target's seeds and corpus in CI.
#![no_main]

include!("../checks/egress_front.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| check(data));
