//! Rails: rules no role, layer or setting can change while the system runs. Loaded only from
//! the shipped `policies/rails.yaml` (never from `roles.local/`).
//!
//! - Secrets never in role text ([`super::secrets`]).
//! - Hard waits stay with a human: bash prefixes and MCP tools no role may be granted.
//! - No hire chains: no role may reach airlock's own control tools or `airlockctl`.
//! - Protected authority follows the canonical class ([`super::classes`]).
//! - A role's writes stay within what its own level permits ([`super::levels`]).
//!
//! [`check_role`] runs all of them on one loaded role.

use super::classes::{self, canonicalize, is_class_name, is_legacy_alias};
use super::levels::{self, Landing};
use super::secrets;
use super::store::{Obj, Policies};
use crate::diag::{self, Problem};
use crate::role::LoadedRole;
use serde_yaml::Value;
use std::path::Path;

/// A group of bash prefixes no role may be granted, under one named rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BashRail {
    pub rule: String,
    pub reason: String,
    pub prefixes: Vec<String>,
}

/// A group of MCP tool-name globs no role may be granted, under one named rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRail {
    pub rule: String,
    pub reason: String,
    pub globs: Vec<String>,
}

/// `policies/rails.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rails {
    pub bash: Vec<BashRail>,
    pub tools: Vec<ToolRail>,
}

impl Rails {
    pub fn parse(file: &Path, doc: &Value) -> Result<Rails, Vec<Problem>> {
        let mut problems = Vec::new();
        let Some(top) = Obj::new(file, "", doc, &["schema", "bash", "tools"], &mut problems) else {
            return Err(problems);
        };
        top.schema_one(&mut problems);
        let mut bash = Vec::new();
        for o in groups(&top, "bash", &["rule", "reason", "prefixes"], &mut problems) {
            let (rule, reason) = rule_and_reason(&o, &mut problems);
            let prefixes = o.strings("prefixes", &mut problems);
            if prefixes.is_empty() {
                problems.push(Problem::new(
                    file,
                    o.key("prefixes"),
                    "must list at least one prefix",
                ));
            }
            for (i, p) in prefixes.iter().enumerate() {
                if normalize_prefix(p).is_empty() {
                    problems.push(Problem::new(
                        file,
                        diag::index(&o.key("prefixes"), i),
                        "must be a non-empty command prefix",
                    ));
                }
            }
            // Stored normalized: every check compares normalized forms, so do it once here
            // rather than on every role prefix and every call.
            bash.push(BashRail {
                rule,
                reason,
                prefixes: prefixes.iter().map(|p| normalize_prefix(p)).collect(),
            });
        }
        let mut tools = Vec::new();
        for o in groups(&top, "tools", &["rule", "reason", "globs"], &mut problems) {
            let (rule, reason) = rule_and_reason(&o, &mut problems);
            let globs = o.strings("globs", &mut problems);
            if globs.is_empty() {
                problems.push(Problem::new(
                    file,
                    o.key("globs"),
                    "must list at least one glob",
                ));
            }
            for (i, g) in globs.iter().enumerate() {
                if let Err(why) = check_tool_glob(g) {
                    problems.push(Problem::new(file, diag::index(&o.key("globs"), i), why));
                }
            }
            tools.push(ToolRail {
                rule,
                reason,
                globs,
            });
        }
        if problems.is_empty() {
            Ok(Rails { bash, tools })
        } else {
            Err(problems)
        }
    }

    /// The rail and forbidden prefix a role's bash prefix would reach, if any.
    pub fn bash_grant_refusal(&self, role_prefix: &str) -> Option<(&BashRail, &str)> {
        let r = normalize_prefix(role_prefix);
        self.bash.iter().find_map(|rail| {
            rail.prefixes
                .iter()
                .find(|f| overlaps_normalized(&r, f))
                .map(|f| (rail, f.as_str()))
        })
    }

    /// The rail and glob a role's tool pattern could reach, if any.
    pub fn tool_grant_refusal(&self, role_pattern: &str) -> Option<(&ToolRail, &str)> {
        self.tools.iter().find_map(|r| {
            r.globs
                .iter()
                .find(|g| tool_reaches(role_pattern, g))
                .map(|g| (r, g.as_str()))
        })
    }

    /// Call-time check for the gateway: the rail that forbids calling tool `name`, if any.
    /// A role wildcard is only refused at load time when it plainly reaches a forbidden name
    /// (see [`tool_reaches`]), so the gateway applies this to every call as well.
    pub fn forbidden_tool(&self, name: &str) -> Option<&ToolRail> {
        self.tools
            .iter()
            .find(|r| r.globs.iter().any(|g| glob_match(g, name)))
    }

    /// Call-time check on a lexed argv (quotes already gone, program a bare name): the rail
    /// whose prefix its words start with. It runs on every bash call.
    pub fn forbidden_argv(&self, argv: &[String]) -> Option<&BashRail> {
        // One joined string, then a byte comparison per forbidden prefix. A word with a
        // space inside (`'push origin'`) joins like two: that can only refuse more.
        let cmd = argv.join(" ");
        self.bash
            .iter()
            .find(|r| r.prefixes.iter().any(|f| token_prefix(f, &cmd)))
    }
}

fn rule_and_reason(o: &Obj<'_>, problems: &mut Vec<Problem>) -> (String, String) {
    let rule = o.string("rule", true, problems).unwrap_or_default();
    if !rule.is_empty() && !is_class_name(&rule) {
        problems.push(Problem::new(
            o.file,
            o.key("rule"),
            "must match ^[a-z][a-z0-9-]*$",
        ));
    }
    let reason = o.string("reason", true, problems).unwrap_or_default();
    (rule, reason)
}

fn groups<'a>(
    top: &Obj<'a>,
    key: &str,
    allowed: &[&str],
    problems: &mut Vec<Problem>,
) -> Vec<Obj<'a>> {
    let Some(v) = top.required(key, problems) else {
        return Vec::new();
    };
    let Value::Sequence(seq) = v else {
        problems.push(Problem::new(top.file, key, "must be a list of rules"));
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in seq.iter().enumerate() {
        let path = diag::index(key, i);
        if let Some(o) = Obj::new(top.file, &path, item, allowed, problems) {
            out.push(o);
        }
    }
    out
}

// ---- bash prefixes ----

/// Tokens of a command prefix, compared loosely on purpose: quotes and backslashes are
/// dropped and the first word is reduced to its basename, so `/usr/bin/sudo` and `'sudo'`
/// are both `sudo`.
fn normalize_prefix(p: &str) -> String {
    let mut out = Vec::new();
    for (i, tok) in p.split_whitespace().enumerate() {
        let t: String = tok
            .chars()
            .filter(|c| !matches!(c, '\'' | '"' | '\\'))
            .collect();
        let t = if i == 0 {
            t.rsplit('/').next().unwrap_or("").to_string()
        } else {
            t
        };
        if !t.is_empty() {
            out.push(t);
        }
    }
    out.join(" ")
}

/// `a` is `b`, or `b` followed by more words.
fn token_prefix(short: &str, long: &str) -> bool {
    long == short || (long.starts_with(short) && long.as_bytes().get(short.len()) == Some(&b' '))
}

/// True when granting `role_prefix` would let a role run something `forbidden` covers:
/// the role prefix is the forbidden one or narrower (`git push origin` under `git push`), or
/// it is broader and could be completed into it (`git`, `gi`, or the empty prefix).
pub fn bash_overlaps(role_prefix: &str, forbidden: &str) -> bool {
    overlaps_normalized(&normalize_prefix(role_prefix), &normalize_prefix(forbidden))
}

fn overlaps_normalized(r: &str, f: &str) -> bool {
    !f.is_empty() && (f.starts_with(r) || token_prefix(f, r))
}

// ---- MCP tool names ----

/// A tool glob in a policy file: MCP tool-name characters plus `*` and `?`.
pub fn check_tool_glob(g: &str) -> Result<(), &'static str> {
    if g.is_empty() || g.len() > 128 {
        return Err("must be 1 to 128 characters");
    }
    if !g
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_.-*?".contains(&b))
    {
        return Err("may use only A-Za-z0-9_.- and the wildcards * and ?");
    }
    Ok(())
}

/// Whole-name match of a glob (`*` any run, `?` one character), ignoring ASCII case.
pub fn glob_match(glob: &str, name: &str) -> bool {
    wildcard(glob.as_bytes(), name.as_bytes(), true, false)
}

/// Wildcard matching by dynamic programming (no backtracking blow-up). With `prefix_only`,
/// true when some string that starts with `s` matches `pat`.
pub(crate) fn wildcard(pat: &[u8], s: &[u8], fold_case: bool, prefix_only: bool) -> bool {
    if !pat.contains(&b'?') {
        return star_glob(pat, s, fold_case, prefix_only);
    }
    wildcard_dp(pat, s, fold_case, prefix_only)
}

/// Globs with `*` only (nearly all of them): literal pieces matched greedily, left to right.
/// Greedy is exact here: taking the earliest place for each piece never rules out a match.
fn star_glob(pat: &[u8], s: &[u8], fold_case: bool, prefix_only: bool) -> bool {
    let eq = |a: &[u8], b: &[u8]| {
        if fold_case {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    let mut pieces = pat.split(|&b| b == b'*');
    let first = pieces.next().unwrap_or(&[]);
    let starred = pat.contains(&b'*');
    if prefix_only {
        // Some string starting with `s` matches: `s` and the first piece agree as far as
        // both go, and then either `s` ends inside the piece or a `*` absorbs the rest.
        let n = first.len().min(s.len());
        return eq(&first[..n], &s[..n]) && (s.len() <= first.len() || starred);
    }
    if !starred {
        return eq(first, s);
    }
    if s.len() < first.len() || !eq(first, &s[..first.len()]) {
        return false;
    }
    let rest = &s[first.len()..];
    // `starred`, so there is a last `*`; what follows it must end the string.
    let last_star = pat.iter().rposition(|&b| b == b'*').unwrap_or(0);
    let last = &pat[last_star + 1..];
    if rest.len() < last.len() || !eq(last, &rest[rest.len() - last.len()..]) {
        return false;
    }
    let mut rest = &rest[..rest.len() - last.len()];
    let middle = if last_star > first.len() {
        &pat[first.len() + 1..last_star]
    } else {
        &[][..]
    };
    for piece in middle.split(|&b| b == b'*').filter(|p| !p.is_empty()) {
        if rest.len() < piece.len() {
            return false;
        }
        match (0..=rest.len() - piece.len()).find(|&i| eq(piece, &rest[i..i + piece.len()])) {
            Some(i) => rest = &rest[i + piece.len()..],
            None => return false,
        }
    }
    true
}

/// The general case (`?` present), by dynamic programming: no backtracking blow-up.
fn wildcard_dp(pat: &[u8], s: &[u8], fold_case: bool, prefix_only: bool) -> bool {
    // Two DP rows. Patterns are short (policy globs are at most 128 bytes), so the rows
    // live on the stack; this runs for every grant at load and every gateway call.
    const STACK: usize = 129;
    let n = pat.len() + 1;
    let mut stack = [false; 2 * STACK];
    let mut heap;
    let rows: &mut [bool] = if n <= STACK {
        &mut stack[..2 * n]
    } else {
        heap = vec![false; 2 * n];
        &mut heap
    };
    let (mut live, mut next) = rows.split_at_mut(n);
    let eq = |a: u8, b: u8| {
        if fold_case {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    // live[j]: pat[..j] can match s[..i].
    live[0] = true;
    close_stars(pat, live);
    for &c in s {
        next.fill(false);
        let mut any = false;
        for j in 0..pat.len() {
            if !live[j] {
                continue;
            }
            match pat[j] {
                b'*' => next[j] = true,
                b'?' => next[j + 1] = true,
                p if eq(p, c) => next[j + 1] = true,
                _ => continue,
            }
            any = true;
        }
        if !any {
            return false;
        }
        close_stars(pat, next);
        std::mem::swap(&mut live, &mut next);
    }
    if prefix_only {
        // Whatever is left of the pattern can always be satisfied by some suffix.
        live.iter().any(|&l| l)
    } else {
        live[pat.len()]
    }
}

/// A `*` can match nothing: a live position before a star makes the one after it live.
fn close_stars(pat: &[u8], live: &mut [bool]) {
    for j in 0..pat.len() {
        if live[j] && pat[j] == b'*' {
            live[j + 1] = true;
        }
    }
}

/// True when a role's tool pattern (`name`, or `prefix*`) could reach a name `glob` forbids.
///
/// An exact name is matched whole. For a `prefix*` pattern: against an anchored glob (one
/// that does not start with `*`, e.g. `airlock_*`), the test is exact — could any name
/// starting with the prefix match the glob. A floating glob (`*hire*`) would overlap every
/// wildcard, so there the prefix itself must match (`hire*`, `airlock_hire*` are refused,
/// `board_*` is not); the gateway still refuses each forbidden call by name
/// ([`Rails::forbidden_tool`]).
pub fn tool_reaches(role_pattern: &str, glob: &str) -> bool {
    let first_wild = role_pattern.find(['*', '?']);
    match first_wild {
        None => glob_match(glob, role_pattern),
        Some(at) => {
            let prefix = &role_pattern[..at];
            if glob.starts_with('*') {
                glob_match(glob, prefix)
            } else {
                wildcard(glob.as_bytes(), prefix.as_bytes(), true, true)
            }
        }
    }
}

// ---- the whole check ----

/// The role folder's name (its class before canonicalization).
pub fn folder_name(loaded: &LoadedRole) -> String {
    loaded
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Run every rail and class rule on one loaded role. Empty means the role may be used.
pub fn check_role(loaded: &LoadedRole, policies: &Policies) -> Vec<Problem> {
    let file = loaded.file.as_path();
    let role = &loaded.role;
    let mut problems = Vec::new();

    // Class: the folder name, which must be a canonical class name.
    let folder = folder_name(loaded);
    if !is_class_name(&folder) {
        problems.push(Problem::new(
            file,
            "",
            "the role folder's name must match ^[a-z][a-z0-9-]*$ (it is the role's class)",
        ));
    } else if is_legacy_alias(&folder) {
        problems.push(Problem::new(
            file,
            "",
            format!(
                "the folder `{folder}` is a legacy alias and cannot define a role; rename the \
                 folder to `{}` (requests for `{folder}` resolve there)",
                canonicalize(&folder)
            ),
        ));
    }
    if role.role != folder {
        let hint = if is_legacy_alias(&role.role) {
            format!(
                "; legacy names are not accepted here, use `{}`",
                canonicalize(&role.role)
            )
        } else {
            String::new()
        };
        problems.push(Problem::new(
            file,
            "role",
            format!("must equal the role folder's name `{folder}`{hint}"),
        ));
    }

    // Secrets never in role text.
    problems.extend(secrets::scan_document(file, &loaded.doc));
    problems.extend(secrets::scan_text(
        &loaded.dir.join(&role.brief),
        "brief",
        &loaded.brief_text,
    ));
    if let (Some(goals), Some(text)) = (&role.goals, &loaded.goals_text) {
        problems.extend(secrets::scan_text(&loaded.dir.join(goals), "goals", text));
    }
    if let Some(text) = &loaded.workflow_text {
        problems.extend(secrets::scan_text(
            &loaded.dir.join(crate::role::WORKFLOW_FILE),
            "workflow",
            text,
        ));
    }

    // Hard waits and no hire chains: bash prefixes.
    for (i, prefix) in role.bash_prefixes().iter().enumerate() {
        if let Some((rail, f)) = policies.rails.bash_grant_refusal(prefix) {
            problems.push(Problem::new(
                file,
                diag::index("run.bash", i),
                format!(
                    "rail {}: this prefix could run `{f}`; {} (grant a narrower prefix, e.g. \
                     `git log` rather than `git`)",
                    rail.rule, rail.reason
                ),
            ));
        }
    }
    // ... and MCP tools.
    for (conn, patterns) in &role.tools {
        let conn_path = classes::tool_conn_path(conn);
        for (i, p) in patterns.iter().enumerate() {
            if classes::is_decision_tool(conn, p) {
                continue;
            }
            if let Some((rail, g)) = policies.rails.tool_grant_refusal(p) {
                problems.push(Problem::new(
                    file,
                    diag::index(&conn_path, i),
                    format!(
                        "rail {}: this tool pattern could reach tools matching `{g}`; {}",
                        rail.rule, rail.reason
                    ),
                ));
            }
        }
    }

    // Protected authority follows the canonical class alone.
    problems.extend(policies.classes.check_powers(&folder, role, file));

    // A role's writes stay within what its own level permits.
    let def = policies.levels.permits(role.level);
    for (i, a) in role.writes.issues.iter().enumerate() {
        if !def.issues.contains(a) {
            problems.push(Problem::new(
                file,
                diag::index("writes.issues", i),
                format!(
                    "{} is not permitted at level {} (permits: {})",
                    named(a, &levels::ISSUE_ACTIONS),
                    role.level,
                    list_or_none(&def.issues)
                ),
            ));
        }
    }
    for (i, a) in role.writes.pull_requests.iter().enumerate() {
        let ok = if a == classes::MERGE_ACTION {
            def.land != Landing::Never
        } else {
            def.pull_requests.contains(a)
        };
        if !ok {
            problems.push(Problem::new(
                file,
                diag::index("writes.pull_requests", i),
                format!(
                    "{} is not permitted at level {} (permits: {}; landing: {})",
                    named(
                        a,
                        &[&levels::PR_ACTIONS[..], &[classes::MERGE_ACTION]].concat()
                    ),
                    role.level,
                    list_or_none(&def.pull_requests),
                    def.land.as_str()
                ),
            ));
        }
    }
    if role.writes.workflows && !def.workflow_files {
        problems.push(Problem::new(
            file,
            "writes.workflows",
            format!("workflow changes are not permitted at level {}", role.level),
        ));
    }
    problems
}

/// A known action by name; anything else without repeating it (it may not be an action).
fn named(value: &str, known: &[&str]) -> String {
    if known.contains(&value) {
        format!("`{value}`")
    } else {
        "this value".to_string()
    }
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_overlap_cases() {
        assert!(bash_overlaps("sudo", "sudo"));
        assert!(bash_overlaps("sudo -u x", "sudo"));
        assert!(bash_overlaps("/usr/bin/sudo", "sudo"));
        assert!(bash_overlaps("git", "git push"));
        assert!(bash_overlaps("gi", "git push"));
        assert!(bash_overlaps("git push origin main", "git push"));
        assert!(bash_overlaps("git  'push'", "git push"));
        assert!(bash_overlaps("", "git push"));
        assert!(bash_overlaps("git pu", "git push"));
        assert!(!bash_overlaps("git log", "git push"));
        assert!(!bash_overlaps("git pushx", "git push"));
        assert!(!bash_overlaps("sha256sum", "sh"));
        assert!(!bash_overlaps("cargo test", "cargo publish"));
    }

    #[test]
    fn glob_cases() {
        assert!(glob_match("*hire*", "airlock_HIRE_instance"));
        assert!(glob_match("airlock_*", "airlock_fire"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(!glob_match("airlock_*", "board_post"));
        assert!(glob_match("*", ""));
        assert!(glob_match("**a**b**", "xxaxxbxx"));
    }

    /// Plain recursive matcher, the reference for the DP one.
    fn naive(p: &[u8], s: &[u8]) -> bool {
        match (p.first(), s.first()) {
            (None, _) => s.is_empty(),
            (Some(b'*'), _) => naive(&p[1..], s) || (!s.is_empty() && naive(p, &s[1..])),
            (Some(_), None) => false,
            (Some(b'?'), Some(_)) => naive(&p[1..], &s[1..]),
            (Some(a), Some(b)) => a == b && naive(&p[1..], &s[1..]),
        }
    }

    proptest::proptest! {
        #[test]
        fn dp_matches_reference(p in "[ab*?]{0,8}", s in "[ab]{0,8}") {
            proptest::prop_assert_eq!(
                wildcard(p.as_bytes(), s.as_bytes(), false, false),
                naive(p.as_bytes(), s.as_bytes())
            );
        }

        #[test]
        fn star_only_globs_match_the_reference(p in "[ab*]{0,10}", s in "[ab]{0,10}") {
            proptest::prop_assert_eq!(
                wildcard(p.as_bytes(), s.as_bytes(), false, false),
                naive(p.as_bytes(), s.as_bytes())
            );
            proptest::prop_assert_eq!(
                wildcard(p.as_bytes(), s.as_bytes(), false, true),
                wildcard_dp(p.as_bytes(), s.as_bytes(), false, true)
            );
        }

        #[test]
        fn prefix_only_means_some_completion_matches(p in "[ab*?]{0,6}", s in "[ab]{0,4}") {
            // Over this alphabet a completion of at most |p| more characters suffices.
            let mut any = false;
            for n in 0..=p.len() {
                for bits in 0..(1u32 << n) {
                    let mut t = s.clone().into_bytes();
                    t.extend((0..n).map(|i| if bits >> i & 1 == 1 { b'a' } else { b'b' }));
                    any |= naive(p.as_bytes(), &t);
                }
            }
            proptest::prop_assert_eq!(wildcard(p.as_bytes(), s.as_bytes(), false, true), any);
        }
    }

    #[test]
    fn forbidden_argv_compares_whole_words() {
        let rails = Rails {
            bash: vec![BashRail {
                rule: "hard-wait-push".into(),
                reason: "r".into(),
                prefixes: vec!["git push origin".into(), "sudo".into()],
            }],
            tools: vec![],
        };
        let argv = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert!(rails
            .forbidden_argv(&argv("git push origin main"))
            .is_some());
        assert!(rails.forbidden_argv(&argv("git push origin")).is_some());
        assert!(rails.forbidden_argv(&argv("git push")).is_none());
        assert!(rails.forbidden_argv(&argv("git pushy origin")).is_none());
        assert!(rails.forbidden_argv(&argv("sudo -i")).is_some());
        assert!(rails.forbidden_argv(&argv("sudoedit x")).is_none());
        assert!(rails.forbidden_argv(&[]).is_none());
    }

    #[test]
    fn reach_cases() {
        assert!(tool_reaches("hire_agent", "*hire*"));
        assert!(tool_reaches("hire*", "*hire*"));
        assert!(tool_reaches("airlock_hire*", "*hire*"));
        assert!(!tool_reaches("board_*", "*hire*"));
        assert!(tool_reaches("air*", "airlock_*"));
        assert!(tool_reaches("*", "airlock_*"));
        assert!(tool_reaches("airlock_status*", "airlock_*"));
        assert!(!tool_reaches("board_*", "airlock_*"));
        assert!(!tool_reaches("board_post", "airlock_*"));
        assert!(tool_reaches("merge*", "merge_pull_request"));
        assert!(!tool_reaches("github_*", "merge_pull_request"));
    }
}
