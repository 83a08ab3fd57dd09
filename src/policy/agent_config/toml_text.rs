//! Just enough TOML writing for the Codex configuration: basic strings, arrays of strings,
//! keys and table headers, each escaped so no value can end its string early or start a new
//! line of its own.

use std::fmt::Write;

/// A TOML basic string (`"..."`) holding exactly `value`.
pub fn string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            // Other control characters (and DEL) are not allowed raw in a basic string.
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML array of basic strings on one line.
pub fn string_array<'a>(values: impl IntoIterator<Item = &'a str>) -> String {
    let items: Vec<String> = values.into_iter().map(string).collect();
    format!("[{}]", items.join(", "))
}

/// A key: bare when it is only `A-Za-z0-9_-` (and not empty), quoted otherwise.
pub fn key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        name.to_string()
    } else {
        string(name)
    }
}

/// `key = value` followed by a newline; `value` is already TOML text.
pub fn line(out: &mut String, name: &str, value: &str) {
    out.push_str(&key(name));
    out.push_str(" = ");
    out.push_str(value);
    out.push('\n');
}

/// A table header such as `[mcp_servers.github]`, preceded by a blank line.
pub fn table(out: &mut String, path: &[&str]) {
    let keys: Vec<String> = path.iter().map(|k| key(k)).collect();
    out.push('\n');
    out.push('[');
    out.push_str(&keys.join("."));
    out.push_str("]\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_escape_quotes_backslashes_and_controls() {
        assert_eq!(string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(string("x\ny\tz"), r#""x\ny\tz""#);
        assert_eq!(string("\u{1}\u{7f}"), r#""\u0001\u007F""#);
        assert_eq!(string("é"), "\"é\"");
    }

    #[test]
    fn keys_are_bare_only_when_safe() {
        assert_eq!(key("mcp_servers"), "mcp_servers");
        assert_eq!(key("code-scout"), "code-scout");
        assert_eq!(key("a.b"), "\"a.b\"");
        assert_eq!(key(""), "\"\"");
    }
}
