//! Argument `pattern` rules: short, anchored regular expressions with no backreference,
//! lookaround or quantified group, so a hostile role file cannot make a check slow or
//! surprising. The `regex` crate already refuses backreferences and lookaround and matches
//! in linear time; these rules keep patterns small and readable as well.

use regex_syntax::ast::{self, Ast};

/// Longest pattern accepted, in bytes.
pub const MAX_PATTERN_LEN: usize = 256;

/// Why a pattern is refused. Never contains the pattern itself.
pub fn check(pattern: &str) -> Result<(), &'static str> {
    if pattern.is_empty() {
        return Err("must not be empty");
    }
    if pattern.len() > MAX_PATTERN_LEN {
        return Err("must be at most 256 bytes");
    }
    if pattern.contains("(?=")
        || pattern.contains("(?!")
        || pattern.contains("(?<=")
        || pattern.contains("(?<!")
    {
        return Err("must not use lookaround");
    }
    if has_backreference(pattern) {
        return Err("must not use backreferences");
    }
    let parsed = ast::parse::Parser::new()
        .parse(pattern)
        .map_err(|_| "must be a valid regular expression (Rust regex syntax)")?;
    if has_quantified_group(&parsed) {
        return Err("must not quantify a group (no `(...)*`, `(...)+`, `(...){n}`)");
    }
    if max_count(&parsed) > MAX_COUNT {
        return Err("must not repeat anything more than 1000 times (`{n,m}` up to 1000)");
    }
    // The pattern is short, has no quantified group and small counts, so it compiles to a
    // small automaton; compiling it is left to the decision engine, which fails closed
    // (denies) should a pattern still not compile. Validation stays cheap.
    regex_syntax::hir::translate::Translator::new()
        .translate(pattern, &parsed)
        .map(|_| ())
        .map_err(|_| "must be a valid regular expression (Rust regex syntax)")
}

/// Largest `{n}`/`{n,m}` count accepted.
const MAX_COUNT: u32 = 1000;

/// The largest counted repetition anywhere in the pattern.
fn max_count(node: &Ast) -> u32 {
    use regex_syntax::ast::{RepetitionKind, RepetitionRange};
    match node {
        Ast::Repetition(rep) => {
            let here = match &rep.op.kind {
                RepetitionKind::Range(RepetitionRange::Exactly(n))
                | RepetitionKind::Range(RepetitionRange::AtLeast(n)) => *n,
                RepetitionKind::Range(RepetitionRange::Bounded(a, b)) => (*a).max(*b),
                _ => 0,
            };
            here.max(max_count(&rep.ast))
        }
        Ast::Group(g) => max_count(&g.ast),
        Ast::Concat(c) => c.asts.iter().map(max_count).max().unwrap_or(0),
        Ast::Alternation(a) => a.asts.iter().map(max_count).max().unwrap_or(0),
        _ => 0,
    }
}

/// Compile a checked pattern so that the whole value must match.
pub fn compile(pattern: &str) -> Result<regex::Regex, &'static str> {
    regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(1 << 16)
        .dfa_size_limit(1 << 18)
        .build()
        .map_err(|_| "must compile to a small regular expression")
}

/// `\1`..`\9` or `\k<name>` outside a character class are backreferences in other dialects.
fn has_backreference(pattern: &str) -> bool {
    let bytes = pattern.as_bytes();
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == b'\\' {
            let next = bytes[i + 1];
            if next.is_ascii_digit() && next != b'0' || next == b'k' {
                return true;
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    false
}

fn has_quantified_group(node: &Ast) -> bool {
    match node {
        Ast::Repetition(rep) => matches!(*rep.ast, Ast::Group(_)) || has_quantified_group(&rep.ast),
        Ast::Group(g) => has_quantified_group(&g.ast),
        Ast::Concat(c) => c.asts.iter().any(has_quantified_group),
        Ast::Alternation(a) => a.asts.iter().any(has_quantified_group),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_patterns() {
        for p in [
            "[a-z]+",
            "main|develop",
            r"v\d+\.\d+",
            "[A-Za-z0-9_.-]{1,64}",
            "(feat|fix)/[a-z-]+",
        ] {
            assert_eq!(check(p), Ok(()), "{p}");
        }
    }

    #[test]
    fn refuses_dangerous_patterns() {
        for p in [
            "(a+)+",
            "(ab)*",
            "(?:x|y){2,}",
            r"(a)\1",
            "(?=a)a",
            "(?!a)b",
            "(?<=a)b",
            "",
            "[",
            r"\k<n>",
        ] {
            assert!(check(p).is_err(), "{p} should be refused");
        }
        assert!(check(&"a".repeat(300)).is_err());
        assert!(check("a{1001}").is_err());
        assert!(check("[a-z]{1,2000}").is_err());
        assert!(check("[a-z]{1,1000}").is_ok());
        assert!(check(r"\p{Nope}").is_err());
    }

    #[test]
    fn compiled_patterns_are_anchored() {
        let re = compile("main|dev").expect("compiles");
        assert!(re.is_match("main"));
        assert!(re.is_match("dev"));
        assert!(!re.is_match("xmain"));
        assert!(!re.is_match("main2"));
    }
}
