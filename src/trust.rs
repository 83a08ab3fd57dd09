//! Files that decide who may do what on the host (the config, the roles, the policies)
//! are trusted only when no one but root could have written them: the file and every
//! directory above it owned by root and writable by neither group nor others. A directory
//! others may write is accepted only with its sticky bit (like /tmp), and then only if the
//! next name in the path is root's, since only an entry's owner may then replace it.
//! Credentials get a stricter check of their own (see [`crate::credentials`]).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::config::Config;

/// How many files one tree may hold before the check gives up (and refuses): a role
/// directory is a few files each.
const MAX_ENTRIES: usize = 100_000;

/// Whether `path` and the directories above it could only have been written by root.
/// Both the path as named (a link on the way could be replaced by whoever may write the
/// directory holding it) and where it leads are checked.
pub fn check_path(path: &Path) -> Result<(), String> {
    let real = path
        .canonicalize()
        .map_err(|e| format!("{}: cannot resolve: {e}", path.display()))?;
    let named = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("{}: cannot resolve: {e}", path.display()))?
            .join(path)
    };
    check_chain(&named, path)?;
    check_chain(&real, path)
}

fn check_chain(full: &Path, asked: &Path) -> Result<(), String> {
    let mut chain: Vec<PathBuf> = full.ancestors().map(Path::to_path_buf).collect();
    chain.reverse();
    for (i, p) in chain.iter().enumerate() {
        let m = std::fs::symlink_metadata(p)
            .map_err(|e| format!("{}: cannot stat: {e}", p.display()))?;
        if m.file_type().is_symlink() {
            // A link itself cannot be changed, only replaced through its directory, which
            // was checked; where it leads is the other chain.
            continue;
        }
        let mode = m.mode() & 0o7777;
        let writable = mode & 0o022 != 0;
        // A sticky directory (/tmp): others may write, but not replace the next entry if
        // root owns it.
        let sticky_ok = m.is_dir()
            && mode & 0o1000 != 0
            && chain
                .get(i + 1)
                .and_then(|n| std::fs::symlink_metadata(n).ok())
                .is_some_and(|n| n.uid() == 0);
        if m.uid() != 0 || (writable && !sticky_ok) {
            return Err(refusal(p, m.uid(), mode, asked));
        }
    }
    Ok(())
}

fn refusal(p: &Path, uid: u32, mode: u32, asked: &Path) -> String {
    let what = if p == asked {
        String::new()
    } else {
        format!(" (a directory above {})", asked.display())
    };
    format!(
        "{}{what}: owned by uid {uid} with mode {mode:04o}; it decides who may do what, so it must be owned by root and writable by neither group nor others (chown root, chmod go-w)",
        p.display()
    )
}

/// [`check_path`] of `root` and of every file and directory under it (a missing `root` is
/// no problem: a layer may be absent). Never follows a link inside the tree.
pub fn check_tree(root: &Path) -> Vec<String> {
    if std::fs::symlink_metadata(root).is_err() {
        return Vec::new();
    }
    if let Err(e) = check_path(root) {
        return vec![e];
    }
    let mut problems = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            problems.push(format!("{}: cannot list", dir.display()));
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                problems.push(format!(
                    "{}: more than {MAX_ENTRIES} entries; not a role or policy tree",
                    root.display()
                ));
                return problems;
            }
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            let mode = m.mode() & 0o7777;
            if m.file_type().is_symlink() {
                // Where a link leads is checked as a path of its own.
                if let Err(why) = check_path(&p) {
                    problems.push(why);
                }
            } else if m.uid() != 0 || mode & 0o022 != 0 {
                problems.push(refusal(&p, m.uid(), mode, &p));
            } else if m.is_dir() {
                todo.push(p);
            }
        }
    }
    problems
}

/// Every file airlockd takes who-may-do-what from: the config file, its role layers and
/// its policies. Each problem names the file and its owner and mode.
pub fn check_config_set(cfg: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    if cfg.file.is_absolute() || cfg.file.exists() {
        if let Err(e) = check_path(&cfg.file) {
            problems.push(e);
        }
    }
    for dir in cfg.roles.iter().chain(std::iter::once(&cfg.policies)) {
        problems.extend(check_tree(dir));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn a_file_anyone_may_write_is_refused_naming_it_and_its_mode() {
        if !nix::unistd::geteuid().is_root() {
            panic!("needs root: run the tests as root (scripts/test)");
        }
        let t = tempfile::tempdir().expect("tempdir");
        let f = t.path().join("airlock.yaml");
        std::fs::write(&f, "x").expect("write");
        chmod(&f, 0o644);
        assert_eq!(check_path(&f), Ok(()));
        chmod(&f, 0o666);
        let e = check_path(&f).expect_err("refused");
        assert!(e.contains("airlock.yaml") && e.contains("0666"), "{e}");
        chmod(&f, 0o644);
        chmod(t.path(), 0o777);
        let e = check_path(&f).expect_err("refused");
        assert!(e.contains("a directory above") && e.contains("0777"), "{e}");
        // Sticky and root's: like /tmp.
        chmod(t.path(), 0o1777);
        assert_eq!(check_path(&f), Ok(()));
        chmod(t.path(), 0o700);

        let roles = t.path().join("roles");
        std::fs::create_dir_all(roles.join("code")).expect("mkdir");
        std::fs::write(roles.join("code/role.yaml"), "x").expect("write");
        assert!(check_tree(&roles).is_empty());
        chmod(&roles.join("code"), 0o775);
        let p = check_tree(&roles);
        assert!(p.len() == 1 && p[0].contains("0775"), "{p:?}");
        assert!(check_tree(&t.path().join("absent")).is_empty());
    }
}
