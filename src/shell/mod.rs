//! The bash command language as Airlock reads it: a deliberately small lexer into a
//! dequoted argv ([`mod@lex`]), prefix matching word for word ([`matcher`]) and the argument
//! guards ([`guards`]). Pure, and it knows nothing of roles: the role model checks a
//! role's `run.bash` prefixes with it, and the policy decides commands with it
//! ([`crate::policy::bash`]).

pub mod guards;
pub mod lex;
pub mod matcher;

use guards::ArgGuards;
use lex::lex;

/// Why a `run.bash` prefix can never allow a command under these guards, or `None` when
/// it can: the lexer refuses it, its program is not a bare name
/// ([`matcher::prefix_problem`]), its program is a wrapper, or its own words already trip
/// an argument guard (every command it would match carries the same words, so trips it
/// too). Names the construct or the guard, never the prefix text.
pub fn dead_prefix(prefix: &str, guards: &ArgGuards) -> Option<String> {
    if let Some(why) = matcher::prefix_problem(prefix) {
        return Some(why);
    }
    let words = lex(prefix).ok()?;
    let hit = guards.check(&words)?;
    Some(if hit.what == "wrapper" {
        "can never match a command: its program runs other commands (a wrapper), which no \
         prefix can allow; name the program the wrapper would run instead"
            .to_string()
    } else {
        format!(
            "can never match a command: it uses {}, which the argument guards refuse in every \
             command; drop that word from the prefix",
            hit.what
        )
    })
}
