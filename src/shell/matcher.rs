//! Role prefixes, compiled: each `run.bash` entry is lexed with the same lexer as commands
//! and matched word for word against the command's dequoted argv.

use super::guards::is_program_name;
use super::lex::{lex, LexError};
use std::collections::HashMap;

#[derive(Debug, Clone)]
struct Prefix {
    /// Position in `run.bash`, for the rule string.
    index: usize,
    /// Words after the program.
    rest: Vec<String>,
    /// The prefix as the role wrote it (operator text, safe to show).
    text: String,
}

/// Prefixes grouped by program word, each group in role order.
#[derive(Debug, Clone, Default)]
pub struct PrefixTable {
    by_program: HashMap<String, Vec<Prefix>>,
    invalid: Vec<usize>,
}

/// The prefix that allowed a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixMatch<'a> {
    pub index: usize,
    pub text: &'a str,
}

/// Why a `run.bash` prefix can never match a command, or `None` when it can. The same test
/// [`PrefixTable::compile`] applies: a command matches a prefix only when it lexes, so a
/// prefix the lexer refuses (shell syntax, operators, expansions, an empty string) or whose
/// program is not a bare name is a dead grant. The reason names the construct, never the
/// prefix text.
pub fn prefix_problem(prefix: &str) -> Option<String> {
    match lex(prefix) {
        Err(e) => Some(match e {
            LexError::Empty => {
                "is empty, so it can never match a command; give a program name and \
                                optional leading arguments, like `git log`"
                    .to_string()
            }
            e => format!(
                "can never match a command: commands with a {} are refused before prefixes are \
                 compared; a prefix is plain or quoted words, like `git log`",
                e.construct()
            ),
        }),
        Ok(words) if words.first().is_some_and(|w| is_program_name(w)) => None,
        Ok(_) => Some(
            "can never match a command: its program must be a bare command name (ASCII letters, \
             digits, '.', '_', '+', '-'; no path, no spaces), like `git log`"
                .to_string(),
        ),
    }
}

impl PrefixTable {
    /// Compile prefixes. A prefix that [`prefix_problem`] refuses matches nothing; its index
    /// is kept in `invalid` so callers can report it.
    pub fn compile(prefixes: &[String]) -> PrefixTable {
        let mut t = PrefixTable::default();
        for (index, p) in prefixes.iter().enumerate() {
            match lex(p) {
                Ok(mut words) if prefix_problem(p).is_none() && !words.is_empty() => {
                    let rest = words.split_off(1);
                    let program = words.swap_remove(0);
                    t.by_program.entry(program).or_default().push(Prefix {
                        index,
                        rest,
                        text: p.clone(),
                    });
                }
                _ => t.invalid.push(index),
            }
        }
        t
    }

    /// Indices of `run.bash` entries that match nothing.
    pub fn invalid(&self) -> &[usize] {
        &self.invalid
    }

    /// The first prefix (in role order) whose words open the argv.
    pub fn find(&self, argv: &[String]) -> Option<PrefixMatch<'_>> {
        let (program, args) = argv.split_first()?;
        let group = self.by_program.get(program.as_str())?;
        group
            .iter()
            .find(|p| args.len() >= p.rest.len() && p.rest.iter().zip(args).all(|(a, b)| a == b))
            .map(|p| PrefixMatch {
                index: p.index,
                text: &p.text,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn word_by_word() {
        let t = PrefixTable::compile(&v(&[
            "git log",
            "ls",
            "",
            "a;b",
            "/usr/bin/git log",
            "'gh' pr",
        ]));
        assert_eq!(t.invalid(), &[2, 3, 4]);
        assert_eq!(t.find(&v(&["git", "log", "-p"])).map(|m| m.index), Some(0));
        assert_eq!(t.find(&v(&["git", "log"])).map(|m| m.index), Some(0));
        assert_eq!(t.find(&v(&["git", "logs"])), None);
        assert_eq!(t.find(&v(&["git"])), None);
        assert_eq!(t.find(&v(&["ls"])).map(|m| m.text), Some("ls"));
        assert_eq!(t.find(&v(&["gh", "pr", "list"])).map(|m| m.index), Some(5));
        assert_eq!(t.find(&v(&["/usr/bin/git", "log"])), None);
    }

    #[test]
    fn problems_agree_with_compile() {
        let all = v(&[
            "git log",
            "",
            "a;b",
            "/usr/bin/git log",
            "'gh' pr",
            "ls ~",
            "x=1 ls",
        ]);
        let t = PrefixTable::compile(&all);
        let dead: Vec<usize> = (0..all.len())
            .filter(|&i| prefix_problem(&all[i]).is_some())
            .collect();
        assert_eq!(t.invalid(), dead.as_slice());
        assert_eq!(dead, [1, 2, 3, 5, 6]);
    }
}
