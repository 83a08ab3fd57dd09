//! The operator's `--workspace DIR`: checked before anything starts. The directory is bound
//! read-write into the jail, which bypasses the permissions of the directories above it,
//! so it must be one the requester may hand over:
//!
//! - looked up as the requester (see [`as_user`](super::as_user)): each step with the
//!   requester's own permissions, so a path they cannot reach is refused with the same words
//!   as one that does not exist (root's view of the host is never probed for them);
//! - never through a link (each component opened with `O_NOFOLLOW` from its parent's
//!   descriptor: an agent that owned part of the path on an earlier run could have planted
//!   one);
//! - owned by the requester, unless the requester is root or an admin;
//! - neither airlockd's state directory (nor one of its homes and runs) nor a host system
//!   tree, nor inside one, compared by device and inode on every directory of the path (so
//!   a second way to the same directory, a bind mount, is the same directory).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::as_user::{self, Ids};
use crate::tree;

/// Host trees never handed to a run read-write, whoever asks.
const SYSTEM_TREES: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root",
    "/run", "/sbin", "/sys", "/usr", "/var/lib", "/var/log", "/var/run",
];

/// Said for a path that does not exist and for one the requester cannot reach alike.
pub const NOT_VISIBLE: &str =
    "--workspace: no such directory that you can reach (it does not exist, or a directory on the way is closed to you)";

/// Who asks for a workspace.
#[derive(Debug, Clone)]
pub struct Requester {
    pub ids: Ids,
    /// Root or an admin: may hand over a directory someone else owns.
    pub privileged: bool,
}

impl Requester {
    /// This process (a standalone launch): root is privileged, anyone else is not.
    pub fn this_process() -> Requester {
        let uid = nix::unistd::getuid().as_raw();
        Requester {
            ids: Ids {
                uid,
                gid: nix::unistd::getgid().as_raw(),
                groups: nix::unistd::getgroups()
                    .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
                    .unwrap_or_default(),
            },
            privileged: uid == 0,
        }
    }
}

/// Why a workspace is refused, in words that name the option, never echo file contents.
pub fn check(path: &Path, state_dir: &Path) -> Result<PathBuf, String> {
    check_for(path, &Requester::this_process(), state_dir)
}

/// [`check`] for `who` (a control-socket peer).
pub fn check_for(path: &Path, who: &Requester, state_dir: &Path) -> Result<PathBuf, String> {
    let names = components(path)?;
    let walked = if who.ids.uid == 0 {
        walk(&names)
    } else {
        as_user::run_as(&who.ids, || walk(&names))
            .map_err(|e| format!("--workspace: cannot look the path up as you: {e}"))?
    }?;
    let last = walked
        .last()
        .ok_or("--workspace: the root directory cannot be a workspace")?;
    if !who.privileged && last.uid != who.ids.uid {
        return Err(format!(
            "--workspace: the directory must be owned by you (uid {}); only root and admins may hand over someone else's",
            who.ids.uid
        ));
    }
    let ids: Vec<(u64, u64)> = walked.iter().map(|s| s.id).collect();
    if ids.iter().any(|id| state_ids(state_dir).contains(id)) {
        return Err(format!(
            "--workspace: inside airlockd's state directory {} (by any path to it); leave out --workspace for a fresh one",
            state_dir.display()
        ));
    }
    for tree in SYSTEM_TREES {
        if let Some(id) = dir_id(Path::new(tree)) {
            if ids.contains(&id) {
                return Err(format!(
                    "--workspace: inside the host's {tree} (by any path to it), which no run may write"
                ));
            }
        }
    }
    let mut out = PathBuf::from("/");
    out.extend(
        names
            .iter()
            .map(|n| std::ffi::OsStr::from_bytes(n.as_bytes())),
    );
    Ok(out)
}

fn components(path: &Path) -> Result<Vec<CString>, String> {
    if !path.is_absolute() {
        return Err("--workspace: give an absolute path".into());
    }
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(part) => out.push(
                CString::new(part.as_bytes())
                    .map_err(|_| "--workspace: the path holds a NUL byte".to_string())?,
            ),
            Component::CurDir | Component::ParentDir | Component::Prefix(_) => {
                return Err("--workspace: give a path without `.` or `..`".into())
            }
        }
    }
    Ok(out)
}

/// One directory of the path as it was opened.
struct Step {
    id: (u64, u64),
    uid: u32,
}

/// Open every component from its parent's descriptor, never following a link; the
/// directories below `/`, in order.
fn walk(names: &[CString]) -> Result<Vec<Step>, String> {
    // SAFETY: open(2) of a static NUL-terminated path; the fd is owned right away.
    let fd = unsafe {
        libc::open(
            c"/".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(format!(
            "--workspace: cannot open /: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: just returned by open, owned by nobody else.
    let mut cur = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut walked = Vec::new();
    let mut at = PathBuf::from("/");
    for name in names {
        at.push(std::ffi::OsStr::from_bytes(name.as_bytes()));
        let next =
            tree::open_at(cur.as_fd(), name, libc::O_PATH).map_err(|_| NOT_VISIBLE.to_string())?;
        let st = stat(next.as_fd()).map_err(|_| NOT_VISIBLE.to_string())?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {}
            libc::S_IFLNK => {
                return Err(format!(
                    "--workspace: {} is a symbolic link; name the real directory (a link could be an agent's)",
                    at.display()
                ))
            }
            _ => return Err("--workspace: not a directory".into()),
        }
        walked.push(Step {
            id: (st.st_dev, st.st_ino),
            uid: st.st_uid,
        });
        cur = next;
    }
    Ok(walked)
}

fn stat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    tree::stat_at(fd, c"")
}

fn dir_id(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| (m.dev(), m.ino()))
}

/// The state directory, its directories and theirs (`homes/<instance>`, `runs/<run>`) and
/// each run's workspace: a bind mount of any of them elsewhere is still refused.
fn state_ids(state: &Path) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = dir_id(state).into_iter().collect();
    let subdirs = |p: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(p)
            .map(|it| {
                it.flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    };
    for top in subdirs(state) {
        out.extend(dir_id(&top));
        for d in subdirs(&top) {
            out.extend(dir_id(&d));
            out.extend(dir_id(&d.join("workspace")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn root() -> Requester {
        Requester {
            ids: Ids {
                uid: 0,
                gid: 0,
                groups: Vec::new(),
            },
            privileged: true,
        }
    }

    #[test]
    fn refuses_links_system_trees_and_the_state_dir() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root_dir = tmp.path().canonicalize().expect("canonical");
        let state = root_dir.join("state");
        let ws = root_dir.join("ws");
        fs::create_dir_all(state.join("homes/max")).expect("mkdir");
        fs::create_dir_all(ws.join("src")).expect("mkdir");
        std::os::unix::fs::symlink("/var/log", ws.join("link")).expect("symlink");
        let check = |p: &Path| check_for(p, &root(), &state);

        assert_eq!(check(&ws.join("src")), Ok(ws.join("src")));
        assert!(check(&ws.join("link"))
            .expect_err("link")
            .contains("symbolic link"));
        assert!(check(&ws.join("link/apt")).is_err());
        assert!(check(&state.join("homes/max"))
            .expect_err("state")
            .contains("state directory"));
        assert!(check(Path::new("/etc")).is_err());
        assert!(check(Path::new("/usr/share")).is_err());
        assert!(check(Path::new("/")).is_err());
        assert!(check(Path::new("relative")).is_err());
        assert!(check(&ws.join("src/../src")).is_err());
        assert_eq!(check(&ws.join("missing")), Err(NOT_VISIBLE.to_string()));
    }
}
