//! The schema's string patterns, written out as plain character checks (no regex engine on
//! operator input, and each rule readable on its own line).

fn all(s: &str, ok: impl Fn(u8) -> bool) -> bool {
    s.bytes().all(ok)
}

fn lower_digit(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `^[a-z][a-z0-9-]*$`: a role name.
pub fn is_role_name(s: &str) -> bool {
    match s.as_bytes().first() {
        Some(b) if b.is_ascii_lowercase() => all(s, |b| lower_digit(b) || b == b'-'),
        _ => false,
    }
}

/// `^[a-z0-9][a-z0-9-]{0,39}$`: a gateway connector name.
pub fn is_connector(s: &str) -> bool {
    match s.as_bytes().first() {
        Some(&b) if lower_digit(b) => s.len() <= 40 && all(s, |b| lower_digit(b) || b == b'-'),
        _ => false,
    }
}

/// MCP's tool-name characters.
fn tool_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// `^[A-Za-z0-9_.-]{1,128}$`: an MCP tool name.
pub fn is_tool_name(s: &str) -> bool {
    (1..=128).contains(&s.len()) && all(s, tool_char)
}

/// A tool pattern: tool-name characters, then an optional single trailing `*` (`*` alone
/// grants every tool). Never empty.
pub fn is_tool_pattern(s: &str) -> bool {
    let head = s.strip_suffix('*').unwrap_or(s);
    !s.is_empty() && head.len() <= 128 && all(head, tool_char)
}

/// Printable ASCII without space: 0x21..=0x7e.
pub fn is_printable_ascii(s: &str) -> bool {
    all(s, |b| (0x21..=0x7e).contains(&b))
}

/// RFC 3986 scheme: a letter, then letters, digits, `+`, `-`, `.`.
pub fn is_scheme(s: &str) -> bool {
    match s.as_bytes().first() {
        Some(b) if b.is_ascii_alphabetic() => all(s, |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
        }),
        _ => false,
    }
}

/// A resource pattern: an exact URI, a prefix ending in `/*`, `<scheme>:*`, or `*`; printable
/// ASCII only, and `*` nowhere else.
pub fn is_resource_pattern(s: &str) -> bool {
    if s.is_empty() || !is_printable_ascii(s) {
        return false;
    }
    match s.strip_suffix('*') {
        None => !s.contains('*'),
        Some(head) if head.contains('*') => false,
        Some("") => true,
        Some(head) => head.ends_with('/') || head.strip_suffix(':').is_some_and(is_scheme),
    }
}

/// `^[A-Za-z0-9-]+/[a-z0-9.-]+$`: a repo in `writes.repos` and `run.clone`.
pub fn is_repo(s: &str) -> bool {
    match s.split_once('/') {
        Some((owner, name)) => {
            !owner.is_empty()
                && !name.is_empty()
                && all(owner, |b| b.is_ascii_alphanumeric() || b == b'-')
                && all(name, |b| lower_digit(b) || matches!(b, b'.' | b'-'))
        }
        None => false,
    }
}

/// `^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$`: the repo of a judge check.
pub fn is_judge_repo(s: &str) -> bool {
    match s.split_once('/') {
        Some((owner, name)) => {
            !owner.is_empty()
                && !name.is_empty()
                && all(owner, |b| b.is_ascii_alphanumeric() || b == b'-')
                && all(name, |b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
                })
        }
        None => false,
    }
}

/// `^[A-Za-z0-9._-]+\.ya?ml$`: a workflow file name.
pub fn is_workflow_file(s: &str) -> bool {
    let stem = s.strip_suffix(".yml").or_else(|| s.strip_suffix(".yaml"));
    stem.is_some_and(|st| {
        !st.is_empty()
            && all(st, |b| {
                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
            })
    })
}

/// `^(github|airlock|ssm:/[A-Za-z0-9/_.-]+|local:~/[A-Za-z0-9/_.-]+)$`: where a role's key is kept.
pub fn is_key_store(s: &str) -> bool {
    let path_ok = |p: &str| {
        !p.is_empty()
            && all(p, |b| {
                b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'.' | b'-')
            })
    };
    s == "github"
        || s == "airlock"
        || s.strip_prefix("ssm:/").is_some_and(path_ok)
        || s.strip_prefix("local:~/").is_some_and(path_ok)
}

/// Whether a granted tool pattern starts with `board_` (what an agent role needs).
pub fn grants_board(pattern: &str) -> bool {
    pattern.starts_with("board_")
}

/// Whether a tool pattern could match any `board_…` tool (what a workflow role may not have):
/// `*`, `b*`, `board*`, `board_post`, `board_x*`.
pub fn could_match_board(pattern: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(head) => "board_".starts_with(head) || head.starts_with("board_"),
        None => pattern.starts_with("board_"),
    }
}

/// A name usable as a path component and a passwd entry: `[a-z][a-z0-9_-]{0,31}`.
pub fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z'))
        && s.len() <= 32
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-' | '_'))
}

/// A run id: `[a-z0-9-]{1,64}` starting with a letter (also the jail's hostname).
pub fn valid_run_id(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some('a'..='z'))
        && s.len() <= 64
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_the_schema() {
        assert!(is_role_name("code-review") && !is_role_name("9x") && !is_role_name("A"));
        assert!(is_connector("gh") && is_connector(&"a".repeat(40)));
        assert!(!is_connector(&"a".repeat(41)) && !is_connector("-x") && !is_connector(""));
        assert!(is_tool_pattern("*") && is_tool_pattern("board_*") && is_tool_pattern("a.b-c"));
        assert!(!is_tool_pattern("") && !is_tool_pattern("a*b") && !is_tool_pattern("**"));
        assert!(!is_tool_pattern("a b"));
        for ok in ["*", "file:///x", "https://h/a/*", "repo:*", "x"] {
            assert!(is_resource_pattern(ok), "{ok}");
        }
        for bad in ["", "a*", "*/x", "h://a*/b/*", "a b", "é", "1x:*", "x:/*:*"] {
            assert!(!is_resource_pattern(bad), "{bad}");
        }
        assert!(is_repo("Org-1/name.x") && !is_repo("a/B") && !is_repo("a/b/c") && !is_repo("/b"));
        assert!(is_judge_repo("a/B_c.d") && !is_judge_repo("a_b/c"));
        assert!(is_workflow_file("ci.yml") && is_workflow_file("a.b.yaml"));
        assert!(
            !is_workflow_file(".yml")
                && !is_workflow_file("ci.yml2")
                && !is_workflow_file("c i.yml")
        );
        assert!(is_key_store("github") && is_key_store("ssm:/a/b") && is_key_store("local:~/k"));
        assert!(!is_key_store("ssm:/") && !is_key_store("local:/x") && !is_key_store("vault"));
        for m in ["*", "b*", "board*", "board_*", "board_post", "board_x*"] {
            assert!(could_match_board(m), "{m}");
        }
        for m in ["gh_*", "boards", "c*", "boardx*"] {
            assert!(!could_match_board(m), "{m}");
        }
    }
}
