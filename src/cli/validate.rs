//! `airlockctl validate`: every role file under the role directories and every policy file,
//! checked offline. Exit 0 when all are valid, 1 when any is not.

use super::output;
use super::sources::{self, SourceArgs};
use crate::cli::output::outln;
use crate::config::Config;
use serde_json::json;

pub fn run(args: &SourceArgs, config: &Config, as_json: bool) -> i32 {
    let loaded = sources::load(args, config);
    let valid = loaded.policies.is_some() && loaded.problems.is_empty();
    if as_json {
        let roles: Vec<_> = loaded
            .catalog
            .entries()
            .map(|e| {
                json!({
                    "role": e.loaded.role.role,
                    "class": e.class,
                    "level": e.loaded.role.level,
                    "file": e.loaded.file.display().to_string(),
                })
            })
            .collect();
        let code = output::json(&json!({
            "valid": valid,
            "roles": roles,
            "problems": output::problems_json(&loaded.problems),
        }));
        return if code != output::OK {
            code
        } else if valid {
            output::OK
        } else {
            output::NO
        };
    }
    output::problems(&loaded.problems);
    if valid {
        let dirs: Vec<String> = loaded
            .role_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        outln!(
            "{} roles valid (from {})",
            loaded.catalog.len(),
            dirs.join(", ")
        );
        output::OK
    } else {
        let files: std::collections::BTreeSet<_> =
            loaded.problems.iter().map(|p| &p.file).collect();
        eprintln!(
            "{} problem(s) in {} file(s); fix them and run `airlockctl validate` again",
            loaded.problems.len(),
            files.len()
        );
        output::NO
    }
}
