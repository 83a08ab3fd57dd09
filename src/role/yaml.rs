//! Safe loading of a role file's YAML.
//!
//! A role file is operator input and may be hostile, so before serde_yaml builds a value we
//! walk the raw event stream of the same parser (libyaml, which serde_yaml wraps) and refuse:
//! more than one document, anchors and aliases (no expansion, so no "billion laughs"), tags,
//! duplicate keys, non-scalar keys, deep nesting, huge scalars and too many nodes. Only a
//! document that passes is handed to serde_yaml, which then has nothing left to expand.
//! Problems carry a key path and a line/column, never a value and never serde_yaml's text.
//!
//! serde_yaml is archived upstream (0.9.34+deprecated); no advisory names it as of this
//! writing and it stays, as the mission names it. Swapping it for a maintained parser:
//! `serde_norway` (a maintained fork with the same API over `unsafe-libyaml-norway`) is
//! a rename of the crate in Cargo.toml and in the `serde_yaml::Value` imports (role/,
//! policy/, config.rs), with this module's scan ported to the fork's libyaml bindings
//! (the same C API); a pure-Rust parser (`saphyr`, `serde-saphyr`) would mean rewriting
//! the event scan below over its event stream and re-deriving line/column marks, and
//! re-running the hostile-role corpus (tests/role_hostile.rs) and the role_file fuzz
//! target to show both readers still refuse the same documents. `serde_yml` is not a
//! candidate (RUSTSEC-2025-0068, unsound).

use crate::diag::{self, Problem};
use serde_yaml::Value;
use std::collections::HashSet;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::path::Path;
use unsafe_libyaml as unsafe_sys;

/// Largest role file accepted, in bytes.
pub const MAX_FILE_BYTES: usize = 256 * 1024;
/// Deepest nesting of lists and mappings accepted (the schema needs 6).
pub const MAX_DEPTH: usize = 32;
/// Largest single scalar accepted, in bytes.
pub const MAX_SCALAR_BYTES: usize = 16 * 1024;
/// Most nodes (scalars, lists, mappings) accepted in one file.
pub const MAX_NODES: usize = 20_000;
/// Most problems reported from one scan; the rest would only repeat the same mistake.
const MAX_PROBLEMS: usize = 50;

/// Keys that may be named in a path as they are: the schema's own property names. Any other
/// key is named if it looks like a connector name or is a plain identifier not shaped like a
/// secret ([`diag::shows_key`], the rule validation uses too), else by its position.
const SCHEMA_KEYS: &[&str] = &[
    "schema",
    "role",
    "level",
    "brief",
    "goals",
    "judge",
    "metric",
    "source",
    "pass",
    "check",
    "repo",
    "workflow",
    "branch",
    "issue_label",
    "max_age_days",
    "identity",
    "github_login",
    "app_id",
    "board_name",
    "key_store",
    "writes",
    "repos",
    "issues",
    "pull_requests",
    "board",
    "workflows",
    "reads",
    "dispatch",
    "tools",
    "resources",
    "deny",
    "args",
    "enum",
    "const",
    "min",
    "max",
    "maxLength",
    "pattern",
    "budget",
    "runs_per_week",
    "minutes_per_run",
    "github_writes_per_run",
    "spend_usd",
    "digest",
    "floors",
    "kind",
    "run",
    "schedule",
    "model",
    "provider",
    "max_turns",
    "clone",
    "bash",
    "mcp",
    "via",
    "url",
    "header",
    "scopes",
    "capcom",
    "houston",
    "agents",
    "ops",
];

/// The path segment for a mapping key met during the scan (`n` counts from 1).
fn scan_key(parent: &str, key: &str, n: usize) -> String {
    if SCHEMA_KEYS.contains(&key) || crate::names::is_connector(key) || diag::shows_key(key) {
        diag::key(parent, key)
    } else {
        diag::key(parent, &format!("<key #{n}>"))
    }
}

/// Bound, scan and load one role document into a value.
pub fn load(file: &Path, text: &str) -> Result<Value, Vec<Problem>> {
    if text.len() > MAX_FILE_BYTES {
        return Err(vec![Problem::new(
            file,
            "",
            format!(
                "is {} bytes; a role file may be at most {MAX_FILE_BYTES} bytes",
                text.len()
            ),
        )]);
    }
    let problems = scan(file, text);
    if !problems.is_empty() {
        return Err(problems);
    }
    serde_yaml::from_str::<Value>(text).map_err(|e| {
        vec![Problem::new(
            file,
            "",
            format!("is not a valid YAML document{}", at(e.location())),
        )]
    })
}

fn at(loc: Option<serde_yaml::Location>) -> String {
    match loc {
        Some(l) => format!(" (line {}, column {})", l.line(), l.column()),
        None => String::new(),
    }
}

/// Where one event starts, 1-based.
#[derive(Clone, Copy)]
struct Mark {
    line: u64,
    column: u64,
}

impl Mark {
    fn text(self) -> String {
        format!("line {}, column {}", self.line, self.column)
    }
}

/// The parts of a libyaml event the scan needs, copied out of libyaml's memory.
enum Event {
    StreamEnd,
    DocumentStart,
    Alias,
    Scalar {
        value: Vec<u8>,
        anchor: bool,
        tag: bool,
    },
    SequenceStart {
        anchor: bool,
        tag: bool,
    },
    MappingStart {
        anchor: bool,
        tag: bool,
    },
    End,
    Other,
}

/// A libyaml parser reading a borrowed string. Boxed because libyaml keeps a pointer to the
/// parser itself for its read handler, so it must not move after initialisation.
struct Parser<'a> {
    raw: Box<MaybeUninit<unsafe_sys::yaml_parser_t>>,
    _input: PhantomData<&'a [u8]>,
}

impl<'a> Parser<'a> {
    fn new(input: &'a [u8]) -> Option<Parser<'a>> {
        let mut raw = Box::new(MaybeUninit::<unsafe_sys::yaml_parser_t>::uninit());
        let p = raw.as_mut_ptr();
        // SAFETY: `p` points at boxed, writable memory that libyaml initialises; the input
        // slice outlives the parser (lifetime 'a) and is only read.
        unsafe {
            if unsafe_sys::yaml_parser_initialize(p).fail {
                return None;
            }
            unsafe_sys::yaml_parser_set_encoding(p, unsafe_sys::YAML_UTF8_ENCODING);
            unsafe_sys::yaml_parser_set_input_string(p, input.as_ptr(), input.len() as u64);
        }
        Some(Parser {
            raw,
            _input: PhantomData,
        })
    }

    /// The next event, or `None` on a syntax error (after which the parser is not used).
    fn next(&mut self) -> Option<(Event, Mark)> {
        let p = self.raw.as_mut_ptr();
        let mut ev = MaybeUninit::<unsafe_sys::yaml_event_t>::uninit();
        // SAFETY: the parser was initialised in `new`; on success libyaml fully initialises
        // the event, we copy what we need out of it and then free it exactly once.
        unsafe {
            if unsafe_sys::yaml_parser_parse(p, ev.as_mut_ptr()).fail {
                return None;
            }
            let e = ev.as_mut_ptr();
            let mark = Mark {
                line: (*e).start_mark.line + 1,
                column: (*e).start_mark.column + 1,
            };
            let out = match (*e).type_ {
                unsafe_sys::YAML_STREAM_END_EVENT => Event::StreamEnd,
                unsafe_sys::YAML_DOCUMENT_START_EVENT => Event::DocumentStart,
                unsafe_sys::YAML_ALIAS_EVENT => Event::Alias,
                unsafe_sys::YAML_SCALAR_EVENT => {
                    let s = (*e).data.scalar;
                    let value = if s.value.is_null() {
                        Vec::new()
                    } else {
                        std::slice::from_raw_parts(s.value, s.length as usize).to_vec()
                    };
                    Event::Scalar {
                        value,
                        anchor: !s.anchor.is_null(),
                        tag: !s.tag.is_null(),
                    }
                }
                unsafe_sys::YAML_SEQUENCE_START_EVENT => {
                    let s = (*e).data.sequence_start;
                    Event::SequenceStart {
                        anchor: !s.anchor.is_null(),
                        tag: !s.tag.is_null(),
                    }
                }
                unsafe_sys::YAML_MAPPING_START_EVENT => {
                    let s = (*e).data.mapping_start;
                    Event::MappingStart {
                        anchor: !s.anchor.is_null(),
                        tag: !s.tag.is_null(),
                    }
                }
                unsafe_sys::YAML_SEQUENCE_END_EVENT | unsafe_sys::YAML_MAPPING_END_EVENT => {
                    Event::End
                }
                _ => Event::Other,
            };
            unsafe_sys::yaml_event_delete(e);
            Some((out, mark))
        }
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        // SAFETY: a `Parser` only exists once libyaml initialised it; deleted exactly once.
        unsafe { unsafe_sys::yaml_parser_delete(self.raw.as_mut_ptr()) }
    }
}

/// An open list or mapping during the scan.
enum Frame {
    Seq {
        path: String,
        next: usize,
    },
    Map {
        path: String,
        seen: HashSet<Vec<u8>>,
        keys: usize,
        /// The path of the value that comes next, once its key has been read.
        value_path: Option<String>,
    },
}

struct Scan<'f> {
    file: &'f Path,
    problems: Vec<Problem>,
}

impl Scan<'_> {
    fn add(&mut self, path: &str, message: String) {
        self.problems.push(Problem::new(self.file, path, message));
    }
    fn full(&self) -> bool {
        self.problems.len() >= MAX_PROBLEMS
    }
}

/// Walk the event stream and report every structural problem (up to a bound).
fn scan(file: &Path, text: &str) -> Vec<Problem> {
    let mut s = Scan {
        file,
        problems: Vec::new(),
    };
    let Some(mut parser) = Parser::new(text.as_bytes()) else {
        s.add("", "could not be parsed (out of memory)".into());
        return s.problems;
    };
    let mut stack: Vec<Frame> = Vec::new();
    let mut documents = 0usize;
    let mut nodes = 0usize;
    loop {
        if s.full() {
            s.add(
                "",
                format!("has more problems; only the first {MAX_PROBLEMS} are shown"),
            );
            break;
        }
        let Some((event, mark)) = parser.next() else {
            let loc = serde_yaml::from_str::<serde::de::IgnoredAny>(text)
                .err()
                .and_then(|e| e.location());
            s.add("", format!("is not valid YAML{}", at(loc)));
            break;
        };
        // Where a node met now sits, and whether it is a mapping key.
        let (anchor, tag, is_node) = match &event {
            Event::Scalar { anchor, tag, .. }
            | Event::SequenceStart { anchor, tag }
            | Event::MappingStart { anchor, tag } => (*anchor, *tag, true),
            Event::Alias => (false, false, true),
            _ => (false, false, false),
        };
        let mut path = String::new();
        if is_node {
            nodes += 1;
            if nodes > MAX_NODES {
                s.add(
                    "",
                    format!("has more than {MAX_NODES} values; a role file is far smaller"),
                );
                break;
            }
            match stack.last_mut() {
                None => {}
                Some(Frame::Seq { path: p, next }) => {
                    path = diag::index(p, *next);
                    *next += 1;
                }
                Some(Frame::Map {
                    path: p,
                    seen,
                    keys,
                    value_path,
                }) => match value_path.take() {
                    Some(vp) => path = vp,
                    None => {
                        *keys += 1;
                        let n = *keys;
                        let Event::Scalar { value, .. } = &event else {
                            let kp = diag::key(p, &format!("<key #{n}>"));
                            s.add(
                                &kp,
                                format!(
                                    "is not a plain string key ({}); keys in a role file are strings",
                                    mark.text()
                                ),
                            );
                            break;
                        };
                        let shown = std::str::from_utf8(value)
                            .map(|k| scan_key(p, k, n))
                            .unwrap_or_else(|_| diag::key(p, &format!("<key #{n}>")));
                        if !seen.insert(value.clone()) {
                            s.add(
                                &shown,
                                format!(
                                    "appears more than once in the same mapping ({}); each key may appear once",
                                    mark.text()
                                ),
                            );
                        }
                        *value_path = Some(shown.clone());
                        path = shown;
                    }
                },
            }
        }
        if anchor {
            s.add(
                &path,
                format!(
                    "has an anchor (&name) at {}; anchors and aliases are not allowed in role files, write each value out",
                    mark.text()
                ),
            );
        }
        if tag {
            s.add(
                &path,
                format!(
                    "has a YAML tag (!name) at {}; tags are not allowed in role files",
                    mark.text()
                ),
            );
        }
        match event {
            Event::StreamEnd => break,
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    s.add(
                        "",
                        format!(
                            "holds a second YAML document at {}; a role file is one document",
                            mark.text()
                        ),
                    );
                    break;
                }
            }
            Event::Alias => s.add(
                &path,
                format!(
                    "is an alias (*name) at {}; anchors and aliases are not allowed in role files, write each value out",
                    mark.text()
                ),
            ),
            Event::Scalar { value, .. } => {
                if value.len() > MAX_SCALAR_BYTES {
                    s.add(
                        &path,
                        format!(
                            "is a value of {} bytes at {}; values may be at most {MAX_SCALAR_BYTES} bytes",
                            value.len(),
                            mark.text()
                        ),
                    );
                }
            }
            Event::SequenceStart { .. } | Event::MappingStart { .. } => {
                if stack.len() >= MAX_DEPTH {
                    s.add(
                        &path,
                        format!(
                            "nests lists and mappings more than {MAX_DEPTH} deep at {}; a role file needs far less",
                            mark.text()
                        ),
                    );
                    break;
                }
                let frame = if matches!(event, Event::SequenceStart { .. }) {
                    Frame::Seq { path, next: 0 }
                } else {
                    Frame::Map {
                        path,
                        seen: HashSet::new(),
                        keys: 0,
                        value_path: None,
                    }
                };
                stack.push(frame);
            }
            Event::End => {
                stack.pop();
            }
            Event::Other => {}
        }
    }
    s.problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_err(text: &str) -> Vec<String> {
        load(Path::new("r.yaml"), text)
            .expect_err("refused")
            .iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn plain_documents_load() {
        let v = load(Path::new("r.yaml"), "a: 1\nb: [x, 'y']\n").expect("loads");
        assert!(v.is_mapping());
    }

    #[test]
    fn refuses_anchor_alias_tag_duplicate() {
        let e = load_err("a: &x 1\nb: *x\n");
        assert!(
            e.iter().any(|m| m.contains("r.yaml: a: has an anchor")),
            "{e:?}"
        );
        assert!(
            e.iter().any(|m| m.contains("r.yaml: b: is an alias")),
            "{e:?}"
        );
        let e = load_err("a: !secret 1\n");
        assert!(e.iter().any(|m| m.contains("a: has a YAML tag")), "{e:?}");
        let e = load_err("tools:\n  gh: []\n  gh: []\n");
        assert!(
            e.iter()
                .any(|m| m.contains("tools.gh: appears more than once")),
            "{e:?}"
        );
        let e = load_err("? [a]\n: 1\n");
        assert!(
            e.iter()
                .any(|m| m.contains("<key #1>: is not a plain string key")),
            "{e:?}"
        );
    }

    #[test]
    fn refuses_depth_size_documents_and_syntax() {
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        assert!(load_err(&deep)[0].contains("deep"));
        assert!(load_err(&"x".repeat(MAX_FILE_BYTES + 1))[0].contains("at most"));
        assert!(load_err("a: 1\n---\nb: 2\n")[0].contains("second YAML document"));
        let e = load_err("a: [1, 2\n");
        assert!(e[0].contains("is not valid YAML (line"), "{e:?}");
    }

    #[test]
    fn secret_shaped_keys_are_named_by_position() {
        let k = "ghp_zzSECRETKEYMARKER0123456789abcdefghij";
        let e = load_err(&format!("{k}: 1\n{k}: 2\n"));
        assert!(e[0].contains("<key #2>"), "{e:?}");
        assert!(!e[0].contains("SECRET"), "{e:?}");
        let e = load_err("colour: 1\ncolour: 2\n");
        assert!(
            e[0].contains("r.yaml: colour: appears more than once"),
            "{e:?}"
        );
    }
}
