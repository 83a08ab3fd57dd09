//! The layers of ../shared/DESIGN.md ("The layers"), written once and checked from the
//! source: every `crate::` path (and `airlock::`, and `super::` that climbs to the crate
//! root) outside `#[cfg(test)]` items, comments and string literals is an import of one
//! top-level module by another. A module may use what ranks below it, and modules of one
//! rank may use each other; no import may point up, and no two folders may use each other
//! (directly or round a circle). The same holds between the folders of one top-level
//! module (the gateway's routes, the supervisor's parts). No exceptions list: an import
//! that breaks the rule is named with its file and line, and fixed.
//!
//! `cargo test --test architecture -- --nocapture` prints the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom. A module not named here is a leaf (rank 0): it may use only other leaves.
const RANKS: &[(&str, u32)] = &[
    ("cli", 9),
    ("daemon", 8),
    ("control", 7),
    ("supervisor", 6),
    ("gateway", 5),
    ("store", 4),
    ("metrics", 4),
    ("credentials", 4),
    ("images", 4),
    ("sandbox", 3),
    ("policy", 2),
    ("role", 2),
    ("catalog", 2),
    ("config", 1),
];

fn rank(m: &str) -> u32 {
    RANKS.iter().find(|(n, _)| *n == m).map_or(0, |(_, r)| *r)
}

/// One import: which file and line.
#[derive(Debug, Clone)]
struct At {
    file: PathBuf,
    line: usize,
}

/// `from -> to -> where`.
type Graph = BTreeMap<String, BTreeMap<String, Vec<At>>>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under src/: `gateway/mcp/proxy.rs` -> `[gateway, mcp, proxy]`,
/// `gateway/mod.rs` -> `[gateway]`; `lib.rs` and binaries -> `[]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") || parts == ["lib.rs"] {
        return Vec::new();
    }
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs").to_string();
        if stem != "mod" {
            parts.push(stem);
        }
    }
    parts
}

/// The source with comments and string and character literals blanked (newlines kept, so
/// lines still count).
fn code_only(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat(b'#').take(hashes))
                .collect();
            let end = b[j + 1..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| j + 1 + p + close.len());
            for &x in &b[i..end] {
                blank(&mut out, x);
            }
            i = end;
        } else if c == b'"' {
            blank(&mut out, c);
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                blank(&mut out, b[i]);
                i += 1;
            }
            if i < b.len() {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| i + 3 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 3)
            } else {
                std::str::from_utf8(&b[i + 1..])
                    .ok()
                    .and_then(|t| t.chars().next())
                    .filter(|ch| !ch.is_ascii())
                    .map(|ch| i + 1 + ch.len_utf8())
                    .filter(|&e| b.get(e) == Some(&b'\''))
                    .map(|e| e + 1)
            };
            match end {
                Some(e) => {
                    for &x in &b[i..e] {
                        blank(&mut out, x);
                    }
                    i = e;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8 boundaries")
}

/// `code` with every `#[cfg(test)]` item blanked (the attribute and the item after it).
fn without_tests(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    let mut from = 0;
    while let Some(k) = code[from..].find("#[cfg(test)]").map(|k| k + from) {
        let b = code.as_bytes();
        let mut j = k + "#[cfg(test)]".len();
        let mut depth = 0usize;
        let mut end = b.len();
        while j < b.len() {
            match b[j] {
                b';' if depth == 0 => {
                    end = j + 1;
                    break;
                }
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = j + 1;
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        for x in &mut out[k..end] {
            if *x != b'\n' {
                *x = b' ';
            }
        }
        from = end;
    }
    String::from_utf8(out).expect("blanking keeps UTF-8 boundaries")
}

fn ident_at(s: &str, i: usize) -> Option<&str> {
    let t = &s[i..];
    let n = t
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(t.len());
    (n > 0).then(|| &t[..n])
}

fn skip_space(s: &str, mut i: usize) -> usize {
    while s[i..].starts_with(char::is_whitespace) {
        i += s[i..].chars().next().map_or(1, char::len_utf8);
    }
    i
}

/// The first segment of each path a `::` group names: `{a, b::c, d::{e}}` -> a, b, d.
fn group_heads(s: &str, open: usize) -> Vec<(usize, String)> {
    let b = s.as_bytes();
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut expect = true;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            b'{' => {
                depth += 1;
                expect = depth == 1;
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            b',' if depth == 1 => expect = true,
            c if expect && depth == 1 && (c.is_ascii_alphabetic() || c == b'_') => {
                if let Some(id) = ident_at(s, i) {
                    heads.push((i, id.to_string()));
                    i += id.len();
                    expect = false;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    heads
}

/// The modules (paths below the crate root) a file's code names, with their offsets:
/// `crate::a::b` -> `[a, b]`.
fn named_paths(code: &str, here: &[String]) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let word_start = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let Some(id) = word_start.then(|| ident_at(code, i)).flatten() else {
            i += 1;
            continue;
        };
        let after = i + id.len();
        let base: Option<Vec<String>> = match id {
            "crate" | "airlock" if code[after..].starts_with("::") => Some(Vec::new()),
            "super" if code[after..].starts_with("::") && !here.is_empty() => {
                let mut up = 1;
                let mut j = after + 2;
                while code[j..].starts_with("super::") {
                    up += 1;
                    j += "super::".len();
                }
                let base = here[..here.len().saturating_sub(up)].to_vec();
                found.extend(paths_from(code, j, &base));
                i = j;
                continue;
            }
            _ => None,
        };
        if let Some(base) = base {
            found.extend(paths_from(code, after + 2, &base));
        }
        i = after;
    }
    found
}

/// The path (or group of paths) starting at `i`, after `base::`.
fn paths_from(code: &str, i: usize, base: &[String]) -> Vec<(usize, Vec<String>)> {
    let i = skip_space(code, i);
    if code[i..].starts_with('{') {
        return group_heads(code, i)
            .into_iter()
            .map(|(at, h)| {
                let mut p = base.to_vec();
                p.push(h);
                // One more segment when the group names `x::y`: enough for folders.
                let after = at + p.last().map_or(0, String::len);
                if code[after..].starts_with("::") {
                    if let Some(next) = ident_at(code, after + 2) {
                        p.push(next.to_string());
                    }
                }
                (at, p)
            })
            .collect();
    }
    let mut p = base.to_vec();
    let mut j = i;
    while let Some(id) = ident_at(code, j) {
        p.push(id.to_string());
        j += id.len();
        if !code[j..].starts_with("::") || p.len() >= base.len() + 2 {
            break;
        }
        j += 2;
        if code[j..].starts_with('{') {
            return group_heads(code, j)
                .into_iter()
                .map(|(_, h)| {
                    let mut q = p.clone();
                    q.push(h);
                    (i, q)
                })
                .collect();
        }
    }
    if p.len() > base.len() {
        vec![(i, p)]
    } else {
        Vec::new()
    }
}

/// The import graph at `depth` (1: top-level modules; 2: the folders inside one), only
/// between modules that exist as files or folders (at depth 2, folders only: the files
/// of one folder are one unit).
fn graph(depth: usize) -> Graph {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let exists = |m: &[String]| {
        let mut p = root.clone();
        for s in m {
            p.push(s);
        }
        p.is_dir() || (depth == 1 && p.with_extension("rs").is_file())
    };
    let mut g: Graph = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&root).expect("under src").to_path_buf();
        let here = module_path(&rel);
        if here.len() < depth {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let code = without_tests(&code_only(&text));
        let from = here[..depth].to_vec();
        if !exists(&from) {
            continue;
        }
        for (at, path) in named_paths(&code, &here) {
            if path.len() < depth || path[..depth - 1] != from[..depth - 1] {
                continue;
            }
            let to = path[..depth].to_vec();
            if to == from || !exists(&to) {
                continue;
            }
            let line = code[..at].matches('\n').count() + 1;
            g.entry(from.join("::"))
                .or_default()
                .entry(to.join("::"))
                .or_default()
                .push(At {
                    file: Path::new("src").join(&rel),
                    line,
                });
        }
    }
    g
}

/// Tarjan's strongly connected components with more than one member: the circles.
fn circles(g: &Graph) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.g.get(v) {
            for w in ws.keys() {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low[v];
                    t.low.insert(v, lv.min(lw));
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low[v];
                    t.low.insert(v, lv.min(iw));
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    let nodes: BTreeSet<&str> = g
        .iter()
        .flat_map(|(a, bs)| std::iter::once(a.as_str()).chain(bs.keys().map(String::as_str)))
        .collect();
    for v in nodes {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn describe_circle(g: &Graph, c: &[String]) -> String {
    let mut lines = vec![format!("circle: {}", c.join(", "))];
    for a in c {
        for (b, at) in g.get(a).into_iter().flatten() {
            if c.contains(b) {
                let at = &at[0];
                lines.push(format!("  {a} -> {b} at {}:{}", at.file.display(), at.line));
            }
        }
    }
    lines.join("\n")
}

fn print(g: &Graph, title: &str) {
    let edges: usize = g.values().map(BTreeMap::len).sum();
    println!("{title}: {} modules import, {edges} imports", g.len());
    for (a, bs) in g {
        let to: Vec<&str> = bs.keys().map(String::as_str).collect();
        println!("  {a} -> {}", to.join(" "));
    }
}

#[test]
fn no_import_points_up_the_layers() {
    let g = graph(1);
    print(&g, "top-level modules");
    let mut wrong = Vec::new();
    for (a, bs) in &g {
        for (b, ats) in bs {
            if rank(b) > rank(a) {
                for at in ats {
                    wrong.push(format!(
                        "{}:{}: {a} (rank {}) uses {b} (rank {}), which is above it",
                        at.file.display(),
                        at.line,
                        rank(a),
                        rank(b)
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_top_level_modules_use_each_other() {
    let g = graph(1);
    let found: Vec<String> = circles(&g).iter().map(|c| describe_circle(&g, c)).collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn no_two_folders_of_one_module_use_each_other() {
    let g = graph(2);
    print(&g, "the folders inside each top-level module");
    let found: Vec<String> = circles(&g).iter().map(|c| describe_circle(&g, c)).collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The reader itself: an import the rule forbids, in each form the source uses, is seen
/// (so a passing run means the source has none, not that the reader missed them).
#[test]
fn the_reader_sees_imports_in_every_form_and_skips_tests_comments_and_strings() {
    let here = vec!["config".to_string(), "limits".to_string()];
    let src = r##"
use crate::supervisor::disk;
use crate::{gateway::http, store};
fn f() { let _ = crate::daemon::x(); let _ = airlock::cli::y; }
use super::super::control::Thing;
// use crate::images::nothing;
/* use crate::metrics::nothing; */
const S: &str = "crate::credentials::nothing";
const R: &str = r#"crate::sandbox::nothing"#;
#[cfg(test)]
mod tests { use crate::role::x; }
fn g<'a>(c: char) -> bool { c == '{' || c == '"' }
use crate::policy::Decision;
"##;
    let code = without_tests(&code_only(src));
    let heads: BTreeSet<String> = named_paths(&code, &here)
        .into_iter()
        .map(|(_, p)| p[0].clone())
        .collect();
    let want: BTreeSet<String> = [
        "supervisor",
        "gateway",
        "store",
        "daemon",
        "cli",
        "control",
        "policy",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(heads, want);
    // Lines are kept: the import on the fourth line is found there.
    let at = named_paths(&code, &here)
        .into_iter()
        .find(|(_, p)| p[0] == "daemon")
        .map(|(at, _)| code[..at].matches('\n').count() + 1);
    assert_eq!(at, Some(4));
}
