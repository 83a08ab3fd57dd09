//! Bash command decisions. A command is lexed into a dequoted argv by a deliberately small
//! lexer ([`lex`]), checked against argument guards ([`ArgGuards`]), then matched word for
//! word against the role's `run.bash` prefixes. The argv is what counts: `'git' log` is
//! `git log`; `"git log"` is one word and matches nothing. The gateway must execute this
//! argv directly (no shell), so what was decided is what runs.
//!
//! What an allowed program then does (a build script under `cargo test`, a pager or hook
//! set in the workspace's git config) is contained by the jail, not by this check.

pub use crate::shell::guards::{ArgGuards, Guard, GuardHit};
pub use crate::shell::lex::{lex, LexError, MAX_COMMAND_BYTES, MAX_WORDS};
pub use crate::shell::{dead_prefix, guards, lex, matcher};

use super::Decision;
use guards::is_program_name;
use matcher::PrefixTable;

/// Longest program name echoed in a reason; longer names are not repeated back.
const MAX_ECHOED_PROGRAM: usize = 32;

/// A role's bash policy, compiled once.
#[derive(Debug, Clone)]
pub struct BashPolicy {
    prefixes: PrefixTable,
    guards: ArgGuards,
    dead: Vec<usize>,
}

impl BashPolicy {
    pub fn compile(prefixes: &[String], guards: &ArgGuards) -> BashPolicy {
        let dead = prefixes
            .iter()
            .enumerate()
            .filter(|(_, p)| dead_prefix(p, guards).is_some())
            .map(|(i, _)| i)
            .collect();
        BashPolicy {
            prefixes: PrefixTable::compile(prefixes),
            guards: guards.clone(),
            dead,
        }
    }

    /// Indices of `run.bash` entries that can never allow a command ([`dead_prefix`]).
    pub fn invalid_prefixes(&self) -> &[usize] {
        &self.dead
    }

    pub fn decide(&self, cmd: &str) -> Decision {
        match lex(cmd) {
            Ok(argv) => self.decide_argv(&argv),
            Err(e) => Decision::deny(
                format!("lexer: {}", e.construct()),
                format!("refused construct: {}; {}", e.construct(), e.hint()),
            ),
        }
    }

    /// Decide an argv that [`lex`] produced (never empty).
    pub fn decide_argv(&self, argv: &[String]) -> Decision {
        let Some(program) = argv.first() else {
            return Decision::deny("lexer: empty command", "send a command");
        };
        if !is_program_name(program) {
            let why = if program.contains('/') {
                "the program must be a bare command name, not a path"
            } else {
                "the program must be a bare command name (ASCII letters, digits, '.', '_', '+', '-')"
            };
            return Decision::deny("program: not a bare name", why);
        }
        let shown = if program.len() <= MAX_ECHOED_PROGRAM {
            program.as_str()
        } else {
            "(long program name)"
        };
        if let Some(hit) = self.guards.check(argv) {
            if hit.what == "wrapper" {
                return Decision::deny(
                    format!("guard: wrapper {shown}"),
                    format!("{shown} runs other commands; no prefix can allow it as the program"),
                );
            }
            return Decision::deny(
                format!("guard: {shown} {}", hit.what),
                format!(
                    "{shown} {} can run other code or reach outside the workspace; it is refused even when a prefix allows {shown}",
                    hit.what
                ),
            );
        }
        match self.prefixes.find(argv) {
            Some(m) => Decision::allow(
                format!("run.bash[{}]", m.index),
                format!("allowed by the prefix \"{}\"", m.text),
            ),
            None => Decision::deny(
                "default: no prefix matches",
                format!("no run.bash prefix allows {shown} with these arguments"),
            ),
        }
    }
}

/// One-off decision; compile a [`BashPolicy`] when deciding more than once.
pub fn decide(cmd: &str, prefixes: &[String], guards: &ArgGuards) -> Decision {
    BashPolicy::compile(prefixes, guards).decide(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> BashPolicy {
        let p: Vec<String> = ["git log", "cargo test", "ls", "sudo ls"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        BashPolicy::compile(&p, &ArgGuards::builtin())
    }

    #[test]
    fn rules_name_what_decided() {
        let p = policy();
        assert_eq!(p.decide("git log -p").rule, "run.bash[0]");
        assert!(p.decide("git log -p").allow);
        assert_eq!(p.decide("ls -la /tmp").rule, "run.bash[2]");
        assert_eq!(p.decide("git -c a=b log").rule, "guard: git -c");
        assert_eq!(p.decide("ls $(id)").rule, "lexer: command substitution");
        assert_eq!(p.decide("git push").rule, "default: no prefix matches");
        assert_eq!(
            p.decide("/usr/bin/git log").rule,
            "program: not a bare name"
        );
        // A prefix naming a wrapper never allows it.
        assert_eq!(p.decide("sudo ls").rule, "guard: wrapper sudo");
        assert!(!p.decide("sudo ls").allow);
    }

    #[test]
    fn reasons_never_echo_arguments() {
        let p = policy();
        let secret = "ghp_abcdefSECRET0123456789";
        for cmd in [
            format!("git push {secret}"),
            format!("git -c x={secret} log"),
            format!("ls {secret};"),
            format!("{secret}=1 ls"),
            format!("/x/{secret} log"),
            format!("git log {secret}"),
            format!("git log --output={secret}"),
        ] {
            let d = p.decide(&cmd);
            assert!(!d.reason.contains("SECRET"), "{cmd}: {}", d.reason);
            assert!(!d.rule.contains("SECRET"), "{cmd}: {}", d.rule);
        }
    }

    #[test]
    fn convenience_matches_compiled() {
        let prefixes = vec!["git status".to_string()];
        let g = ArgGuards::builtin();
        assert!(decide("git status -sb", &prefixes, &g).allow);
        assert!(!decide("git statu", &prefixes, &g).allow);
    }
}
