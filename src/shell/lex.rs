//! The bash lexer: a deliberately tiny language. A command is plain words separated by
//! spaces or tabs; a word may contain single-quoted parts and double-quoted parts without
//! `$`, backtick, backslash or `!`. Everything bash would treat specially (operators,
//! redirection, substitution, expansion, globs, braces, tilde, history, comments, escapes)
//! is refused rather than interpreted, so the argv we decide on is exactly the argv bash
//! would build from the same string. Where bash's meaning depends on the position (`~`,
//! `#`, `^`, `{`, `}`), the character is refused only where bash would give it that meaning
//! and kept literally elsewhere (`HEAD~1`, `a#b`, `HEAD^`, `@{u}`); `!` stays refused
//! outside single quotes, as an interactive shell would expand it.
//!
//! Tab: accepted as a word separator outside quotes only (bash splits on it the same way as
//! on a space); inside quotes it is a control character and refused.
//!
//! Non-ASCII: refused outside quotes. Inside quotes a non-ASCII character is kept only when
//! it is visible text: controls (Cc), format characters (Cf: zero-width, bidi, BOM, soft
//! hyphen, tags), every space and separator other than U+0020 (Zs/Zl/Zp), private use,
//! noncharacters, variation selectors, blank-looking fillers, and the fullwidth/halfwidth
//! forms block (lookalikes of `;`, `|`, quotes) are refused. Words compared against role
//! prefixes are compared byte for byte, so a lookalike letter (Cyrillic `і` in `gіt`)
//! never matches an ASCII prefix.

use std::fmt;

/// Longest command accepted, in bytes.
pub const MAX_COMMAND_BYTES: usize = 4096;
/// Most words accepted in one command.
pub const MAX_WORDS: usize = 256;

/// Which construct made the lexer refuse a command. Never carries the command text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LexError {
    Empty,
    TooLong,
    TooManyWords,
    CommandSeparator,
    ControlOperator,
    Pipe,
    Redirection,
    Subshell,
    CommandSubstitution,
    Expansion,
    Glob,
    Brace,
    Tilde,
    History,
    Comment,
    Backslash,
    Newline,
    ControlChar,
    NonAsciiOutsideQuotes,
    InvisibleChar,
    LookalikeChar,
    UnterminatedQuote,
    EnvAssignment,
}

impl LexError {
    /// Short name of the refused construct, used in rule strings (`lexer: <construct>`).
    pub fn construct(self) -> &'static str {
        match self {
            LexError::Empty => "empty command",
            LexError::TooLong => "command too long",
            LexError::TooManyWords => "too many words",
            LexError::CommandSeparator => "command separator",
            LexError::ControlOperator => "control operator",
            LexError::Pipe => "pipe",
            LexError::Redirection => "redirection",
            LexError::Subshell => "subshell or grouping",
            LexError::CommandSubstitution => "command substitution",
            LexError::Expansion => "parameter expansion",
            LexError::Glob => "glob",
            LexError::Brace => "brace expansion",
            LexError::Tilde => "tilde",
            LexError::History => "history expansion",
            LexError::Comment => "comment",
            LexError::Backslash => "backslash",
            LexError::Newline => "newline",
            LexError::ControlChar => "control character",
            LexError::NonAsciiOutsideQuotes => "non-ASCII outside quotes",
            LexError::InvisibleChar => "invisible or format character",
            LexError::LookalikeChar => "lookalike character",
            LexError::UnterminatedQuote => "unterminated quote",
            LexError::EnvAssignment => "environment assignment",
        }
    }

    /// What the agent can do instead, in one sentence.
    pub fn hint(self) -> &'static str {
        match self {
            LexError::Empty => "send a command",
            LexError::TooLong => "commands are limited to 4096 bytes",
            LexError::TooManyWords => "commands are limited to 256 words",
            LexError::UnterminatedQuote => "close every quote",
            LexError::EnvAssignment => {
                "variable assignments are not allowed; the program word must not contain '='"
            }
            LexError::NonAsciiOutsideQuotes
            | LexError::InvisibleChar
            | LexError::LookalikeChar
            | LexError::ControlChar
            | LexError::Newline => "use plain ASCII outside quotes and visible text inside them",
            _ => "send one plain command with plain or quoted arguments",
        }
    }
}

impl fmt::Display for LexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "refused: {} ({})", self.construct(), self.hint())
    }
}

impl std::error::Error for LexError {}

/// Split a command into its dequoted argv, or say which construct is refused.
///
/// Position matters where it matters to bash: `~` is refused only where bash would expand
/// it (at the start of a word, or after `=` or `:` in a word shaped like an assignment),
/// `#` only at the start of a word (a comment), `^` only as the first character of the
/// command (quick substitution), `{`/`}` only when a word holds an unquoted `{...}` with an
/// unquoted `,` or `..` inside (brace expansion) or in the program word (a reserved word).
pub fn lex(cmd: &str) -> Result<Vec<String>, LexError> {
    if cmd.len() > MAX_COMMAND_BYTES {
        return Err(LexError::TooLong);
    }
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    // The current word with every quoted character masked, for the brace check.
    let mut shadow: Vec<char> = Vec::new();
    // A word exists once any character or quote pair was seen (so `''` is an empty word).
    let mut in_word = false;
    let mut chars = cmd.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    end_word(&mut words, &mut word, &mut shadow)?;
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        None => return Err(LexError::UnterminatedQuote),
                        Some('\'') => break,
                        Some(q) => {
                            quoted_char_ok(q)?;
                            word.push(q);
                            shadow.push(QUOTED);
                        }
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        None => return Err(LexError::UnterminatedQuote),
                        Some('"') => break,
                        Some('$') => {
                            return Err(if chars.peek() == Some(&'(') {
                                LexError::CommandSubstitution
                            } else {
                                LexError::Expansion
                            })
                        }
                        Some('`') => return Err(LexError::CommandSubstitution),
                        Some('\\') => return Err(LexError::Backslash),
                        Some('!') => return Err(LexError::History),
                        Some(q) => {
                            quoted_char_ok(q)?;
                            word.push(q);
                            shadow.push(QUOTED);
                        }
                    }
                }
            }
            c if is_plain(c) => {
                in_word = true;
                word.push(c);
                shadow.push(c);
            }
            '$' => {
                return Err(if chars.peek() == Some(&'(') {
                    LexError::CommandSubstitution
                } else {
                    LexError::Expansion
                })
            }
            // Tilde expansion: at the start of a word, or after `=` or `:` in an
            // assignment-shaped word (`name=~`, `name=a:~`); anywhere else it is literal.
            '~' if !in_word || tilde_expands_after(&word) => return Err(LexError::Tilde),
            '~' => {
                word.push(c);
                shadow.push(c);
            }
            // A comment starts only where a word could start.
            '#' if !in_word => return Err(LexError::Comment),
            // Quick substitution (`^old^new`) is only the first character of a line.
            '^' if !in_word && words.is_empty() => return Err(LexError::History),
            // `{` and `}` are reserved words in the command position; elsewhere only a
            // brace expansion (checked when the word ends) is refused.
            '{' | '}' if words.is_empty() => return Err(LexError::Brace),
            '#' | '^' | '{' | '}' | ']' => {
                in_word = true;
                word.push(c);
                shadow.push(c);
            }
            other => return Err(classify_unquoted(other)),
        }
    }
    if in_word {
        end_word(&mut words, &mut word, &mut shadow)?;
    }
    match words.first() {
        None => Err(LexError::Empty),
        Some(first) if first.contains('=') => Err(LexError::EnvAssignment),
        Some(_) => Ok(words),
    }
}

/// Stands for a quoted character in a word's shadow: never special.
const QUOTED: char = '\0';

fn end_word(
    words: &mut Vec<String>,
    word: &mut String,
    shadow: &mut Vec<char>,
) -> Result<(), LexError> {
    if brace_expands(shadow) {
        return Err(LexError::Brace);
    }
    shadow.clear();
    push_word(words, word)
}

/// Whether bash could brace-expand a word (its shadow, quoted characters masked): an
/// unquoted `{` followed by an unquoted `}` with an unquoted `,` or `..` between them. A
/// superset of bash's rule (which also wants a well-formed sequence), so never too lax.
fn brace_expands(shadow: &[char]) -> bool {
    for (i, &c) in shadow.iter().enumerate() {
        if c != '{' {
            continue;
        }
        let mut seen = false;
        let mut prev = c;
        for &d in shadow.iter().skip(i + 1) {
            if d == ',' || (d == '.' && prev == '.') {
                seen = true;
            }
            if d == '}' && seen {
                return true;
            }
            prev = d;
        }
    }
    false
}

/// Whether a `~` after the word read so far would be expanded: the word so far ends in `=`
/// or `:` and opens with `name=` (bash expands tildes in assignment-shaped words even when
/// they are arguments).
fn tilde_expands_after(word: &str) -> bool {
    if !(word.ends_with('=') || word.ends_with(':')) {
        return false;
    }
    let Some((name, _)) = word.split_once('=') else {
        return false;
    };
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn push_word(words: &mut Vec<String>, word: &mut String) -> Result<(), LexError> {
    if words.len() >= MAX_WORDS {
        return Err(LexError::TooManyWords);
    }
    words.push(std::mem::take(word));
    Ok(())
}

/// Characters taken literally outside quotes. Everything else is refused.
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(c, '-' | '_' | '.' | '/' | ':' | ',' | '@' | '%' | '+' | '=')
}

fn classify_unquoted(c: char) -> LexError {
    match c {
        ';' => LexError::CommandSeparator,
        '&' => LexError::ControlOperator,
        '|' => LexError::Pipe,
        '<' | '>' => LexError::Redirection,
        '(' | ')' => LexError::Subshell,
        '`' => LexError::CommandSubstitution,
        '*' | '?' | '[' | ']' => LexError::Glob,
        '{' | '}' => LexError::Brace,
        '~' => LexError::Tilde,
        '!' | '^' => LexError::History,
        '#' => LexError::Comment,
        '\\' => LexError::Backslash,
        '\n' | '\r' => LexError::Newline,
        c if c.is_ascii_control() => LexError::ControlChar,
        c if !c.is_ascii() => match refused_non_ascii(c) {
            Some(e) => e,
            None => LexError::NonAsciiOutsideQuotes,
        },
        // Unreachable for printable ASCII (every one is classified above), kept fail-closed.
        _ => LexError::ControlChar,
    }
}

/// A character inside quotes: visible text only.
fn quoted_char_ok(c: char) -> Result<(), LexError> {
    if c == '\n' || c == '\r' {
        return Err(LexError::Newline);
    }
    if c.is_ascii_control() {
        return Err(LexError::ControlChar);
    }
    if c.is_ascii() {
        return Ok(());
    }
    match refused_non_ascii(c) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Non-ASCII characters refused even inside quotes, and why.
pub(crate) fn refused_non_ascii(c: char) -> Option<LexError> {
    let u = c as u32;
    // C1 controls.
    if (0x80..=0x9F).contains(&u) {
        return Some(LexError::ControlChar);
    }
    const INVISIBLE: &[(u32, u32)] = &[
        (0x00A0, 0x00A0), // no-break space
        (0x00AD, 0x00AD), // soft hyphen
        (0x034F, 0x034F), // combining grapheme joiner
        (0x0600, 0x0605), // Arabic number signs (Cf)
        (0x061C, 0x061C), // Arabic letter mark
        (0x06DD, 0x06DD),
        (0x070F, 0x070F),
        (0x0890, 0x0891),
        (0x08E2, 0x08E2),
        (0x115F, 0x1160), // Hangul fillers
        (0x1680, 0x1680), // Ogham space
        (0x17B4, 0x17B5), // Khmer invisible vowels
        (0x180B, 0x180F), // Mongolian variation selectors and vowel separator
        (0x2000, 0x200F), // spaces, zero-width, LRM/RLM
        (0x2028, 0x202F), // line/paragraph separators, bidi embeddings, narrow nbsp
        (0x205F, 0x206F), // math space, word joiner, invisible operators, bidi isolates
        (0x2800, 0x2800), // braille blank
        (0x3000, 0x3000), // ideographic space
        (0x3164, 0x3164), // Hangul filler
        (0xD800, 0xDFFF), // surrogates (not chars in Rust, kept for completeness)
        (0xE000, 0xF8FF), // private use
        (0xFDD0, 0xFDEF), // noncharacters
        (0xFE00, 0xFE0F), // variation selectors
        (0xFEFF, 0xFEFF), // BOM / zero-width no-break space
        (0xFFA0, 0xFFA0), // halfwidth Hangul filler
        (0xFFF0, 0xFFFB), // interlinear annotation, specials
        (0x110BD, 0x110BD),
        (0x110CD, 0x110CD),
        (0x13430, 0x1343F),  // Egyptian format controls
        (0x1BCA0, 0x1BCA3),  // shorthand format controls
        (0x1D173, 0x1D17A),  // musical format controls
        (0xE0000, 0xE0FFF),  // tags and variation selectors supplement
        (0xF0000, 0x10FFFF), // supplementary private use
    ];
    if INVISIBLE.iter().any(|&(lo, hi)| (lo..=hi).contains(&u)) || (u & 0xFFFE) == 0xFFFE {
        return Some(LexError::InvisibleChar);
    }
    // Fullwidth and halfwidth forms: lookalikes of ASCII punctuation and letters.
    if (0xFF00..=0xFFEF).contains(&u) {
        return Some(LexError::LookalikeChar);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(cmd: &str) -> Vec<String> {
        lex(cmd).unwrap_or_else(|e| panic!("{cmd:?} refused: {e}"))
    }

    #[test]
    fn splits_plain_words_and_dequotes() {
        assert_eq!(ok("git log --oneline"), ["git", "log", "--oneline"]);
        assert_eq!(ok("  git\tlog  "), ["git", "log"]);
        assert_eq!(ok("'git' log"), ["git", "log"]);
        assert_eq!(ok("git' 'log"), ["git log"]);
        assert_eq!(ok("\"git log\""), ["git log"]);
        assert_eq!(ok("git l'o'g"), ["git", "log"]);
        assert_eq!(ok("echo ''"), ["echo", ""]);
        assert_eq!(ok("rg 'a;b|c$d`e'"), ["rg", "a;b|c$d`e"]);
        assert_eq!(
            ok("git commit -m \"café ok\""),
            ["git", "commit", "-m", "café ok"]
        );
        assert_eq!(ok("git log --format=%h"), ["git", "log", "--format=%h"]);
    }

    #[test]
    fn refuses_each_construct() {
        let cases: &[(&str, LexError)] = &[
            ("", LexError::Empty),
            ("   ", LexError::Empty),
            ("ls; id", LexError::CommandSeparator),
            ("ls && id", LexError::ControlOperator),
            ("ls & id", LexError::ControlOperator),
            ("ls | id", LexError::Pipe),
            ("ls > x", LexError::Redirection),
            ("ls <x", LexError::Redirection),
            ("(ls)", LexError::Subshell),
            ("ls $(id)", LexError::CommandSubstitution),
            ("ls \"$(id)\"", LexError::CommandSubstitution),
            ("ls `id`", LexError::CommandSubstitution),
            ("ls \"`id`\"", LexError::CommandSubstitution),
            ("ls $HOME", LexError::Expansion),
            ("ls \"$HOME\"", LexError::Expansion),
            ("ls *", LexError::Glob),
            ("ls a?", LexError::Glob),
            ("ls [ab]", LexError::Glob),
            ("ls {a,b}", LexError::Brace),
            ("ls ~", LexError::Tilde),
            ("ls x=~", LexError::Tilde),
            ("ls !!", LexError::History),
            ("ls \"!x\"", LexError::History),
            ("ls # x", LexError::Comment),
            ("ls a\\ b", LexError::Backslash),
            ("ls \"a\\b\"", LexError::Backslash),
            ("ls\nid", LexError::Newline),
            ("ls\rid", LexError::Newline),
            ("ls 'a\nb'", LexError::Newline),
            ("ls\0", LexError::ControlChar),
            ("ls 'a\tb'", LexError::ControlChar),
            ("ls é", LexError::NonAsciiOutsideQuotes),
            ("ls \u{200B}", LexError::InvisibleChar),
            ("ls '\u{202E}x'", LexError::InvisibleChar),
            ("ls '\u{FEFF}'", LexError::InvisibleChar),
            ("ls 'a\u{00A0}b'", LexError::InvisibleChar),
            ("ls '\u{FF1B}'", LexError::LookalikeChar),
            ("ls 'abc", LexError::UnterminatedQuote),
            ("ls \"abc", LexError::UnterminatedQuote),
            ("FOO=bar ls", LexError::EnvAssignment),
            ("'FOO=bar' ls", LexError::EnvAssignment),
        ];
        for (cmd, want) in cases {
            assert_eq!(lex(cmd), Err(*want), "{cmd:?}");
        }
    }

    #[test]
    fn bounds() {
        assert_eq!(
            lex(&"a".repeat(MAX_COMMAND_BYTES + 1)),
            Err(LexError::TooLong)
        );
        assert!(lex(&"a".repeat(MAX_COMMAND_BYTES)).is_ok());
        let many = vec!["a"; MAX_WORDS + 1].join(" ");
        assert_eq!(lex(&many), Err(LexError::TooManyWords));
        let enough = vec!["a"; MAX_WORDS].join(" ");
        assert_eq!(lex(&enough).map(|w| w.len()), Ok(MAX_WORDS));
    }

    #[test]
    fn errors_never_carry_text() {
        let secret = "ghp_0123456789abcdefSECRET";
        let e = lex(&format!("echo {secret}; id")).unwrap_err();
        assert!(!e.to_string().contains(secret));
        assert!(!format!("{e:?}").contains(secret));
    }
}
