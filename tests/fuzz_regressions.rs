//! Inputs the fuzz targets (fuzz/fuzz_targets/) once crashed on, replayed through the same
//! invariants, so each fix stays fixed without a nightly toolchain.

use airlock::gateway::{mcp::jsonrpc, strict_json};
use serde_json::Value;

/// mcp_message: a number with a long mantissa was read (not correctly rounded) as one
/// float, re-serialized as the gateway forwards it, and read back as another: what
/// Airlock checked and what the upstream read differed by one ulp. serde_json's
/// float_roundtrip makes every reading correctly rounded.
#[test]
fn a_forwarded_number_reads_back_as_the_number_checked() {
    let found = format!("20{}2", "3".repeat(126));
    let longer = format!("20{}2", "3".repeat(127));
    let cases = [
        found.as_str(),
        longer.as_str(),
        "2.0333333333333333e+128",
        "0.30000000000000004441",
        "1.7976931348623157e308",
        "4.9406564584124654e-324",
        "123456789012345678901234567890.123456789",
        "100.000000000000000000001",
    ];
    for text in cases {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{"n":{text}}}}}}}"#
        );
        let msg = jsonrpc::parse_message(body.as_bytes()).expect("a valid message");
        let checked = msg.params["arguments"]["n"].as_f64().expect("a number");
        // What a correctly rounding reader (Rust's own) makes of the agent's text.
        let exact: f64 = text.parse().expect("a float");
        assert_eq!(checked.to_bits(), exact.to_bits(), "{text} was misread");
        let forwarded = serde_json::to_vec(&msg.params).expect("serializes");
        let back = strict_json::parse(&forwarded).expect("reads back");
        assert_eq!(back, msg.params, "{text} changed when forwarded");
    }
}

/// The exact body the fuzzer found (after one empty header field): a bare number.
#[test]
fn the_fuzzers_number_round_trips() {
    let body = format!("20{}2", "3".repeat(126));
    let v = strict_json::parse(body.as_bytes()).expect("a number is a JSON value");
    let again = strict_json::parse(&serde_json::to_vec(&v).unwrap()).unwrap();
    assert_eq!(again, v);
    assert!(matches!(v, Value::Number(_)));
}
