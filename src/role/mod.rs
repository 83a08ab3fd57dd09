//! Role files: `roles/<role>/role.yaml` read safely, validated to the letter of the schema,
//! and turned into a typed [`Role`].
//!
//! - [`yaml`]: bounded, alias-free, tag-free, duplicate-free YAML loading.
//! - [`validate`] and [`grants`]: every schema rule and the rules it implies.
//! - [`files`]: the role folder on disk (brief, goals, folder name).

mod check;
pub mod files;
mod grants;
pub mod model;
mod validate;
pub mod yaml;

pub use model::*;

use crate::diag::Problem;
use std::path::{Path, PathBuf};

/// A role file that passed schema validation, with the texts it points at.
#[derive(Debug, Clone)]
pub struct LoadedRole {
    pub role: Role,
    /// The role's folder (`roles/<role>`).
    pub dir: PathBuf,
    /// The role file (`roles/<role>/role.yaml`).
    pub file: PathBuf,
    /// The document as parsed, for checks that walk every string (rails).
    pub doc: serde_yaml::Value,
    pub brief_text: String,
    pub goals_text: Option<String>,
    /// A workflow role's own command: the text of [`WORKFLOW_FILE`] beside its `role.yaml`,
    /// run by `/bin/sh` on the command side when a launch gives no `-- CMD`. `None` for an
    /// agent role, and for a workflow role without the file (launched only with `-- CMD`).
    pub workflow_text: Option<String>,
}

/// A workflow role's own command: a shell script beside `role.yaml` (the schema is closed,
/// so the role file cannot name one). Read with the role, under the same rules as the brief.
pub const WORKFLOW_FILE: &str = "workflow.sh";

/// Parse and validate one role document. Pure: no file system access. `file` is only used
/// to name the file in problems. Every problem found is returned at once.
pub fn parse_role(file: &Path, text: &str) -> Result<(Role, serde_yaml::Value), Vec<Problem>> {
    let doc = yaml::load(file, text)?;
    let mut c = check::Ctx::new(file);
    validate::document(&mut c, &doc);
    if !c.problems.is_empty() {
        return Err(c.problems);
    }
    // The document passed every rule, so this cannot fail unless the model and the
    // validator disagree; serde's text would quote values, so it is not shown.
    let role: Role = serde_yaml::from_value(doc.clone()).map_err(|_| {
        vec![Problem::new(
            file,
            "",
            "passed validation but could not be read into a role (an Airlock bug; please report it)",
        )]
    })?;
    Ok((role, doc))
}

/// Load `dir/role.yaml`, validate it, check that `role` matches the folder's name, and read
/// the brief and goals it names (regular files inside the folder, symlinks resolved).
pub fn load_role_dir(dir: &Path) -> Result<LoadedRole, Vec<Problem>> {
    let file = dir.join("role.yaml");
    let text = files::read_bounded(&file, yaml::MAX_FILE_BYTES as u64)
        .map_err(|m| vec![Problem::new(&file, "", m)])?;
    let (role, doc) = parse_role(&file, &text)?;
    let mut problems = Vec::new();
    match dir.file_name().and_then(|n| n.to_str()) {
        Some(name) if name == role.role => {}
        _ => problems.push(Problem::new(
            &file,
            "role",
            "does not match the name of the role's folder; a role lives in roles/<role>/role.yaml",
        )),
    }
    let brief_text = files::read_text(dir, &file, "brief", &role.brief)
        .map_err(|p| problems.push(p))
        .ok();
    let goals_text = match &role.goals {
        Some(g) => files::read_text(dir, &file, "goals", g)
            .map_err(|p| problems.push(p))
            .ok(),
        None => None,
    };
    let workflow_text = workflow_text(dir, &file, &role).map_err(|p| problems.push(p));
    match (brief_text, workflow_text) {
        (Some(brief_text), Ok(workflow_text)) if problems.is_empty() => Ok(LoadedRole {
            role,
            dir: dir.to_path_buf(),
            file,
            doc,
            brief_text,
            goals_text,
            workflow_text,
        }),
        _ => Err(problems),
    }
}

/// The role's [`WORKFLOW_FILE`], when its folder has one: a regular UTF-8 file inside the
/// folder (symlinks resolved), at most [`files::MAX_TEXT_BYTES`]. Only a workflow role runs
/// one; an agent role holding one is refused rather than left with a file that never runs.
fn workflow_text(dir: &Path, file: &Path, role: &Role) -> Result<Option<String>, Problem> {
    let path = dir.join(WORKFLOW_FILE);
    if std::fs::symlink_metadata(&path).is_err() {
        return Ok(None);
    }
    if role.kind != Kind::Workflow {
        return Err(Problem::new(
            file,
            "kind",
            format!(
                "is agent (the default), but the role's folder holds {WORKFLOW_FILE}, which only a \
                 workflow role runs; set kind: workflow or remove {WORKFLOW_FILE}"
            ),
        ));
    }
    let real = files::inside(dir, WORKFLOW_FILE).map_err(|m| Problem::new(&path, "", m))?;
    files::read_bounded(&real, files::MAX_TEXT_BYTES)
        .map(Some)
        .map_err(|m| Problem::new(&path, "", format!("the workflow script {m}")))
}
