//! Credential shapes: what a secret looks like (GitHub and cloud tokens, API keys, private
//! keys, JWTs, passwords in URLs, bearer tokens). A leaf: the role rails scan role text with
//! it, and every error path asks it before repeating a key, so a pasted secret is never
//! echoed. The shapes are code, not data: no file can switch the scan off.

use regex::RegexSet;
use std::sync::OnceLock;

/// Credential shapes, each with the name a problem gives it. Order matters only for naming:
/// the first matching shape names a hit (Anthropic before the generic `sk-` shape).
const SHAPES: &[(&str, &str)] = &[
    ("a GitHub token", r"(?-u:\b)gh[pousr]_[A-Za-z0-9]{30,}"),
    (
        "a GitHub fine-grained token",
        r"(?-u:\b)github_pat_[A-Za-z0-9_]{22,}",
    ),
    ("a GitLab token", r"(?-u:\b)glpat-[A-Za-z0-9_-]{20,}"),
    (
        "an AWS access key id",
        r"(?-u:\b)(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?-u:\b)",
    ),
    (
        "an AWS secret access key",
        r"(?i)aws[^\n]{0,20}secret[^\n]{0,20}[:=][ \t\r\n]*['\x22]?[A-Za-z0-9/+=]{40}(?-u:\b)",
    ),
    ("a Google API key", r"(?-u:\b)AIza[0-9A-Za-z_-]{35}"),
    ("a Google OAuth token", r"(?-u:\b)ya29\.[0-9A-Za-z_-]{20,}"),
    ("a Slack token", r"(?-u:\b)xox[abprse]-[A-Za-z0-9-]{10,}"),
    (
        "a Slack webhook",
        r"hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/[A-Za-z0-9]+",
    ),
    ("an Anthropic API key", r"(?-u:\b)sk-ant-[A-Za-z0-9_-]{20,}"),
    (
        "an OpenAI API key",
        r"(?-u:\b)sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    ),
    (
        "a Stripe key",
        r"(?-u:\b)(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
    ),
    ("an npm token", r"(?-u:\b)npm_[A-Za-z0-9]{36}(?-u:\b)"),
    ("a PyPI token", r"(?-u:\b)pypi-AgE[A-Za-z0-9_-]{50,}"),
    ("a Hugging Face token", r"(?-u:\b)hf_[A-Za-z0-9]{30,}"),
    (
        "a SendGrid key",
        r"(?-u:\b)SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}",
    ),
    (
        "a private key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
    ),
    (
        "a JSON Web Token",
        r"(?-u:\b)eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]+",
    ),
    (
        "a password in a URL",
        r"(?-u:\b)[a-zA-Z][a-zA-Z0-9+.-]*://[^/ \t\r\n:@]+:[^/ \t\r\n:@]{3}[^/ \t\r\n:@]*@",
    ),
    (
        "a bearer token",
        r"(?i)(?-u:\b)bearer[ \t\r\n]+[A-Za-z0-9._~+/-]{20,}=*",
    ),
];

fn set() -> &'static RegexSet {
    static SET: OnceLock<RegexSet> = OnceLock::new();
    SET.get_or_init(|| {
        // The patterns are constants checked by the unit tests; an empty set (which matches
        // nothing) can only happen if a constant is broken, and the tests catch that.
        RegexSet::new(SHAPES.iter().map(|(_, re)| *re)).unwrap_or_else(|_| RegexSet::empty())
    })
}

/// The kind of credential `s` contains, if any. Never returns the match.
pub fn find_secret(s: &str) -> Option<&'static str> {
    // Cheap pre-check: no shape matches fewer bytes (`a://b:ccc@` is the shortest).
    if s.len() < 10 {
        return None;
    }
    set()
        .matches(s)
        .iter()
        .next()
        .and_then(|i| SHAPES.get(i))
        .map(|(name, _)| *name)
}

/// A key safe to repeat in a problem path: short, from a plain alphabet (globs and repository
/// paths included: `_.-/*?`), and not shaped like a credential. Anything else is named by
/// its position.
pub fn is_plain_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-/*?".contains(&b))
        && find_secret(s).is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_compiles_alone() {
        for (name, re) in SHAPES {
            assert!(regex::Regex::new(re).is_ok(), "{name}");
        }
        assert_eq!(set().len(), SHAPES.len());
    }

    #[test]
    fn plain_text_is_clean() {
        for s in [
            "git log",
            "Open a PR for each issue labelled good-first-issue.",
            "sk-",
            "the task is ask-ant-colony simulation",
            "https://example.com/path?x=1",
            "ssh://git@github.com/o/r.git",
            "Authorization: Bearer <token>",
            "eyJ only once",
        ] {
            assert_eq!(find_secret(s), None, "{s}");
        }
    }

    #[test]
    fn anthropic_named_before_openai() {
        let k = format!("sk-ant-api03-{}", "a".repeat(40));
        assert_eq!(find_secret(&k), Some("an Anthropic API key"));
    }
}
