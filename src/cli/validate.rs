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
                    "kind": e.loaded.role.kind,
                    "file": e.loaded.file.display().to_string(),
                    "workflow": workflow_file(&e.loaded).map(|p| p.display().to_string()),
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
        // A workflow role's own command is its script; without one it needs `-- CMD`.
        for e in loaded.catalog.entries() {
            if e.loaded.role.kind != crate::role::Kind::Workflow {
                continue;
            }
            match workflow_file(&e.loaded) {
                Some(f) => outln!(
                    "workflow role {}: runs {} on the command side",
                    e.loaded.role.role,
                    f.display()
                ),
                None => outln!(
                    "workflow role {}: has no {}, so it is launched only with -- CMD ARGS",
                    e.loaded.role.role,
                    e.loaded.dir.join(crate::role::WORKFLOW_FILE).display()
                ),
            }
        }
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

/// The script a workflow role runs when launched without `-- CMD`, when it has one.
fn workflow_file(loaded: &crate::role::LoadedRole) -> Option<std::path::PathBuf> {
    loaded
        .workflow_text
        .as_ref()
        .map(|_| loaded.dir.join(crate::role::WORKFLOW_FILE))
}
