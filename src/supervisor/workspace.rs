//! The operator's `--workspace DIR`: checked before anything starts. The directory is bound
//! read-write into the jail, so it must be exactly the directory the operator named: an
//! absolute path with no symlink anywhere (an agent that owned part of the path on an
//! earlier run could have planted one), and nothing Airlock or the host needs kept apart.

use std::fs;
use std::path::{Component, Path, PathBuf};

/// Host trees never handed to a run read-write, whoever asks.
const SYSTEM_TREES: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root",
    "/run", "/sbin", "/sys", "/usr", "/var/lib", "/var/log", "/var/run",
];

/// Why a workspace is refused, in words that name the option, never echo file contents.
pub fn check(path: &Path, state_dir: &Path) -> Result<PathBuf, String> {
    if !path.is_absolute() {
        return Err("--workspace: give an absolute path".into());
    }
    let mut walked = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::RootDir => continue,
            Component::Normal(part) => walked.push(part),
            Component::CurDir | Component::ParentDir | Component::Prefix(_) => {
                return Err("--workspace: give a path without `.` or `..`".into())
            }
        }
        let meta = fs::symlink_metadata(&walked)
            .map_err(|_| "--workspace: the directory does not exist".to_string())?;
        if meta.file_type().is_symlink() {
            return Err(format!(
                "--workspace: {} is a symbolic link; name the real directory (a link could be an agent's)",
                walked.display()
            ));
        }
        if !meta.is_dir() {
            return Err("--workspace: not a directory".into());
        }
    }
    if walked == Path::new("/") {
        return Err("--workspace: the root directory cannot be a workspace".into());
    }
    let under = |tree: &Path| walked.starts_with(tree);
    if under(state_dir) {
        return Err(format!(
            "--workspace: inside airlockd's state directory {}; leave out --workspace for a fresh one",
            state_dir.display()
        ));
    }
    if let Some(tree) = SYSTEM_TREES.iter().find(|t| under(Path::new(t))) {
        return Err(format!(
            "--workspace: inside the host's {tree}, which no run may write"
        ));
    }
    Ok(walked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_links_system_trees_and_the_state_dir() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().canonicalize().expect("canonical");
        let state = root.join("state");
        let ws = root.join("ws");
        fs::create_dir_all(state.join("homes/max")).expect("mkdir");
        fs::create_dir_all(ws.join("src")).expect("mkdir");
        std::os::unix::fs::symlink("/var/log", ws.join("link")).expect("symlink");

        assert_eq!(check(&ws.join("src"), &state), Ok(ws.join("src")));
        assert!(check(&ws.join("link"), &state)
            .expect_err("link")
            .contains("symbolic link"));
        assert!(check(&ws.join("link/apt"), &state).is_err());
        assert!(check(&state.join("homes/max"), &state)
            .expect_err("state")
            .contains("state directory"));
        assert!(check(Path::new("/etc"), &state).is_err());
        assert!(check(Path::new("/usr/share"), &state).is_err());
        assert!(check(Path::new("/"), &state).is_err());
        assert!(check(Path::new("relative"), &state).is_err());
        assert!(check(&ws.join("src/../src"), &state).is_err());
        assert!(check(&ws.join("missing"), &state).is_err());
    }
}
