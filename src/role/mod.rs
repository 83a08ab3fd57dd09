//! Role files: `roles/<role>/role.yaml` read safely, validated to the letter of the schema,
//! and turned into a typed [`Role`].

pub mod model;

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
}

/// Parse and validate one role document. Pure: no file system access.
/// `file` is only used to name the file in problems.
pub fn parse_role(file: &Path, text: &str) -> Result<(Role, serde_yaml::Value), Vec<Problem>> {
    // Placeholder until the validator lands: serde alone, problems without values.
    let doc: serde_yaml::Value = serde_yaml::from_str(text)
        .map_err(|_| vec![Problem::new(file, "", "not a valid YAML document")])?;
    let role: Role = serde_yaml::from_value(doc.clone())
        .map_err(|_| vec![Problem::new(file, "", "does not match the role schema")])?;
    Ok((role, doc))
}

/// Load `dir/role.yaml`, validate it, and read the brief and goals it names.
pub fn load_role_dir(dir: &Path) -> Result<LoadedRole, Vec<Problem>> {
    let file = dir.join("role.yaml");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| vec![Problem::new(&file, "", format!("cannot read: {e}"))])?;
    let (role, doc) = parse_role(&file, &text)?;
    let brief_text = std::fs::read_to_string(dir.join(&role.brief)).map_err(|_| {
        vec![Problem::new(
            &file,
            "brief",
            "the brief file cannot be read",
        )]
    })?;
    let goals_text = match &role.goals {
        Some(g) => Some(std::fs::read_to_string(dir.join(g)).map_err(|_| {
            vec![Problem::new(
                &file,
                "goals",
                "the goals file cannot be read",
            )]
        })?),
        None => None,
    };
    Ok(LoadedRole {
        role,
        dir: dir.to_path_buf(),
        file,
        doc,
        brief_text,
        goals_text,
    })
}
