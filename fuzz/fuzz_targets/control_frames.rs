//! The control socket: one request line from any local peer that may connect (airlockd
//! parses it before authorization), and the response lines and launch frames airlockctl
//! reads back. Invariants: an accepted request re-serializes to a line that parses to the
//! same request; an error never quotes the request (checked with a canary: the corpus
//! carries requests with CANARY-SECRET-7f3a in a field, which no answer may repeat).
#![no_main]

use airlock::control::protocol::{parse_request, Frame, Response};
use libfuzzer_sys::fuzz_target;

const CANARY: &str = "CANARY-SECRET-7f3a";

fuzz_target!(|data: &[u8]| {
    match parse_request(data) {
        Ok(req) => {
            let line = req.to_line();
            let again = parse_request(line.trim_end().as_bytes())
                .unwrap_or_else(|_| panic!("a request airlockd accepted does not round-trip"));
            assert_eq!(req, again, "a request changed meaning when re-serialized");
        }
        Err(resp) => {
            let shown = serde_json::to_string(&resp).expect("a response serializes");
            assert!(!shown.contains(CANARY), "an error quotes the request");
        }
    }
    // What airlockctl reads from airlockd.
    let _ = serde_json::from_slice::<Response>(data);
    let _ = serde_json::from_slice::<Frame>(data);
});
