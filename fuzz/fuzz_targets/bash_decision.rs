//! An agent's bash command string (what a jailed, possibly prompt-injected agent sends to
//! the gateway's bash tool) against a set of run.bash prefixes, which also come from the
//! input so the matcher and the dead-prefix check see odd prefixes too.
//! Input: prefixes, one per line, then a NUL byte, then the command.
//! Invariants: the lexer and the decision agree (a command the lexer refuses is never
//! allowed), an allowed command's argv starts with an allowing prefix's words, and lexing
//! is deterministic.
#![no_main]

use airlock::policy::bash::{self, lex, ArgGuards, BashPolicy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (prefix_text, cmd) = match text.split_once('\0') {
        Some((p, c)) => (p, c),
        None => ("git log\ncargo test\nls", text),
    };
    let prefixes: Vec<String> = prefix_text.lines().take(16).map(str::to_string).collect();
    let guards = ArgGuards::builtin();
    for p in &prefixes {
        let _ = bash::dead_prefix(p, &guards);
    }
    let policy = BashPolicy::compile(&prefixes, &guards);
    let lexed = lex(cmd);
    assert_eq!(lexed, lex(cmd), "lexing is not deterministic");
    let decision = policy.decide(cmd);
    match &lexed {
        Err(_) => assert!(!decision.allow, "a command the lexer refuses was allowed"),
        Ok(argv) => {
            let again = policy.decide_argv(argv);
            assert_eq!(
                decision.allow, again.allow,
                "decide and decide_argv disagree"
            );
            if decision.allow {
                assert!(!argv.is_empty(), "an empty command was allowed");
                // The allowing prefix is named by its index; its words lead the argv.
                let idx: usize = decision
                    .rule
                    .strip_prefix("run.bash[")
                    .and_then(|r| r.split(']').next())
                    .and_then(|n| n.parse().ok())
                    .expect("an allow names its run.bash index");
                let words = lex(&prefixes[idx]).expect("an allowing prefix lexes");
                assert!(
                    argv.starts_with(&words),
                    "allowed argv does not start with its prefix"
                );
                assert!(
                    guards.check(argv).is_none(),
                    "allowed argv trips an argument guard"
                );
            }
        }
    }
});
