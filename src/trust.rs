//! Files that decide who may do what on the host (the config, the roles, the policies)
//! are trusted only when no one but root could have written them: the file and every
//! directory on the way to it owned by root and writable by neither group nor others. A
//! directory others may write is accepted only with its sticky bit (like /tmp), and then
//! only if the next entry in the path (a link included) is root's, since only an entry's
//! owner may then replace it. That is sshd's StrictModes, applied to what is really read:
//!
//! - a path is resolved here one component at a time from `/`, each opened with
//!   `O_NOFOLLOW` relative to the directory before it and checked on its descriptor; a
//!   link is read and followed by hand, so every directory the kernel would pass through
//!   is checked, the link's own and its target's;
//! - a tree (a role layer, the policies) is walked through descriptors, and a link in it
//!   is resolved the same way and, when it leads to a directory, that directory's tree is
//!   checked too (a role folder that is a link to a directory someone else may write is
//!   refused, and so are the files in a linked directory).
//!
//! Once all of that is root's and closed to others, no one but root can change a name or a
//! byte on those paths, so reading them afterwards by name (in one open, see
//! [`read_bounded`]) reads exactly what was checked. Credentials get a
//! stricter check of their own (see [`crate::credentials`]).

use std::collections::{HashSet, VecDeque};
use std::ffi::{CStr, CString, OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use crate::tree;
use std::fs::File;
use std::io::Read;

/// How many files one tree may hold before the check gives up (and refuses): a role
/// directory is a few files each.
const MAX_ENTRIES: usize = 100_000;

/// Links followed on the way to one path at most (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// What a descriptor is, from `fstat`.
#[derive(Clone, Copy)]
struct Seen {
    uid: u32,
    mode: u32,
    kind: u32,
    id: (u64, u64),
}

impl Seen {
    fn of(fd: BorrowedFd<'_>) -> std::io::Result<Seen> {
        let st = tree::stat_at(fd, c"")?;
        Ok(Seen {
            uid: st.st_uid,
            mode: st.st_mode & 0o7777,
            kind: st.st_mode & libc::S_IFMT,
            id: (st.st_dev, st.st_ino),
        })
    }

    fn is_dir(&self) -> bool {
        self.kind == libc::S_IFDIR
    }

    fn is_link(&self) -> bool {
        self.kind == libc::S_IFLNK
    }

    /// Others may add and remove names in it (allowed only when sticky).
    fn others_write(&self) -> bool {
        self.mode & 0o022 != 0
    }

    /// Root's, and no one else may change it: a sticky directory others may write passes,
    /// its entries being checked on their own.
    fn trusted(&self) -> bool {
        self.uid == 0 && (!self.others_write() || (self.is_dir() && self.mode & 0o1000 != 0))
    }
}

fn cstr(name: &OsStr) -> Result<CString, String> {
    CString::new(name.as_bytes()).map_err(|_| "a name with a NUL byte".to_string())
}

/// Open `path` as the kernel resolves it, checking every step (see the module's words):
/// the descriptor reached (`O_PATH`) and what it is. `Err` names the step and why.
fn open_checked(path: &Path) -> Result<(OwnedFd, Seen, PathBuf), String> {
    let full = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("{}: cannot resolve: {e}", path.display()))?
            .join(path)
    };
    let cannot =
        |p: &Path, what: &str, e: std::io::Error| format!("{}: cannot {what}: {e}", p.display());
    let root_fd = tree::open_at(
        std::fs::File::open("/")
            .map_err(|e| cannot(Path::new("/"), "open", e))?
            .as_fd(),
        c".",
        libc::O_PATH | libc::O_DIRECTORY,
    )
    .map_err(|e| cannot(Path::new("/"), "open", e))?;
    let root_seen = Seen::of(root_fd.as_fd()).map_err(|e| cannot(Path::new("/"), "stat", e))?;
    if !root_seen.trusted() {
        return Err(refusal(Path::new("/"), &root_seen, path));
    }
    // The directories resolved so far, `/` first: `..` goes back one, as the kernel does
    // from where the path has really got to.
    let mut dirs: Vec<(OwnedFd, PathBuf, Seen)> = vec![(root_fd, PathBuf::from("/"), root_seen)];
    let mut todo: VecDeque<OsString> = components(&full);
    let mut links = 0usize;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            if dirs.len() > 1 {
                dirs.pop();
            }
            continue;
        }
        let (dir, dir_path, dir_seen) = dirs.last().expect("never empty: `/` stays");
        let here = dir_path.join(&name);
        let c = cstr(&name).map_err(|why| format!("{}: {why}", here.display()))?;
        let fd =
            tree::open_at(dir.as_fd(), &c, libc::O_PATH).map_err(|e| cannot(&here, "open", e))?;
        let seen = Seen::of(fd.as_fd()).map_err(|e| cannot(&here, "stat", e))?;
        // In a directory others may write (sticky), only the entry's owner may replace
        // it: that must be root, a link too.
        if dir_seen.others_write() && seen.uid != 0 {
            return Err(refusal(&here, &seen, path));
        }
        if seen.is_link() {
            links += 1;
            if links > MAX_LINKS {
                return Err(format!("{}: more than {MAX_LINKS} links", path.display()));
            }
            let target = tree::read_link_at(fd.as_fd(), c"")
                .map_err(|e| cannot(&here, "read the link", e))?;
            let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
            if target.is_absolute() {
                dirs.truncate(1);
            }
            for (i, n) in components(&target).into_iter().enumerate() {
                todo.insert(i, n);
            }
            continue;
        }
        if !seen.trusted() {
            return Err(refusal(&here, &seen, path));
        }
        if seen.is_dir() {
            dirs.push((fd, here, seen));
        } else if todo.is_empty() {
            return Ok((fd, seen, here));
        } else {
            return Err(format!(
                "{}: not a directory, on the way to {}",
                here.display(),
                path.display()
            ));
        }
    }
    let (fd, real, seen) = dirs.pop().expect("never empty: `/` stays");
    Ok((fd, seen, real))
}

/// The names of `p` in order (`.` dropped, `..` kept), without the leading `/`.
fn components(p: &Path) -> VecDeque<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect()
}

/// The text of the file at `path` (at most `limit` bytes) once [`check_path`] passes for
/// it, read from the very file that was checked (its descriptor reopened for reading, never
/// the name looked up again).
pub fn read_checked(path: &Path, limit: u64) -> Result<String, String> {
    use std::os::fd::AsRawFd;
    let (fd, seen, _) = open_checked(path)?;
    if seen.kind != libc::S_IFREG {
        return Err(format!("{}: is not a regular file", path.display()));
    }
    let f = std::fs::File::open(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|e| format!("{}: cannot be opened ({})", path.display(), e.kind()))?;
    read_open(f, limit).map_err(|why| format!("{}: {why}", path.display()))
}

/// Whether `path` and every directory on the way to it, as the kernel resolves it (each
/// link's directory and where it leads), could only have been written by root.
pub fn check_path(path: &Path) -> Result<(), String> {
    open_checked(path).map(|_| ())
}

fn refusal(p: &Path, seen: &Seen, asked: &Path) -> String {
    let what = if p == asked {
        String::new()
    } else {
        format!(" (a directory above {}, as it resolves)", asked.display())
    };
    let kind = if seen.is_link() { "a link " } else { "" };
    format!(
        "{}{what}: {kind}owned by uid {} with mode {:04o}; it decides who may do what, so it must be owned by root and writable by neither group nor others (chown root, chmod go-w)",
        p.display(),
        seen.uid,
        seen.mode,
    )
}

/// [`check_path`] of `root` and of every file and directory under it, through
/// descriptors; a link in the tree is checked as a path of its own and, when it leads to a
/// directory, what that holds is checked too. A missing `root` is no problem: a layer may
/// be absent.
pub fn check_tree(root: &Path) -> Vec<String> {
    if std::fs::symlink_metadata(root).is_err() {
        return Vec::new();
    }
    let (fd, seen, _) = match open_checked(root) {
        Ok(r) => r,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    if !seen.is_dir() {
        return problems;
    }
    let mut visited: HashSet<(u64, u64)> = HashSet::new();
    let mut todo: Vec<(OwnedFd, PathBuf, Seen)> = vec![(fd, root.to_path_buf(), seen)];
    let mut count = 0usize;
    while let Some((dir, dir_path, dir_seen)) = todo.pop() {
        // A link back up the tree is checked once.
        if !visited.insert(dir_seen.id) {
            continue;
        }
        let listed = tree::open_at(dir.as_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY)
            .and_then(|d| tree::names(d.as_fd()));
        let names = match listed {
            Ok(n) => n,
            Err(e) => {
                problems.push(format!("{}: cannot list: {e}", dir_path.display()));
                continue;
            }
        };
        for name in names {
            count += 1;
            if count > MAX_ENTRIES {
                problems.push(format!(
                    "{}: more than {MAX_ENTRIES} entries; not a role or policy tree",
                    root.display()
                ));
                return problems;
            }
            let p = dir_path.join(OsStr::from_bytes(name.as_bytes()));
            match entry(dir.as_fd(), &name, &p) {
                Ok(Some((fd, seen, real))) => todo.push((fd, real, seen)),
                Ok(None) => {}
                Err(why) => problems.push(why),
            }
        }
    }
    problems
}

/// One entry of a checked tree: refused, or a directory to check next (`Some`, with the
/// path it really has, so a problem under it names where to fix it), or a file that passed.
fn entry(
    dir: BorrowedFd<'_>,
    name: &CStr,
    p: &Path,
) -> Result<Option<(OwnedFd, Seen, PathBuf)>, String> {
    let fd = tree::open_at(dir, name, libc::O_PATH)
        .map_err(|e| format!("{}: cannot open: {e}", p.display()))?;
    let seen = Seen::of(fd.as_fd()).map_err(|e| format!("{}: cannot stat: {e}", p.display()))?;
    if seen.is_link() {
        // Where it leads, resolved in full: the link's target and every directory on the
        // way, and the target's own tree when it is a directory.
        let (fd, seen, real) = open_checked(p)?;
        return Ok(seen.is_dir().then_some((fd, seen, real)));
    }
    // Inside a tree nothing may be writable by others, sticky or not: every name in it is
    // read.
    if seen.uid != 0 || seen.others_write() {
        return Err(refusal(p, &seen, p));
    }
    Ok(seen.is_dir().then_some((fd, seen, p.to_path_buf())))
}

/// Every file airlockd takes who-may-do-what from: the config `file`, and the `trees` of
/// its role layers and its policies. Each problem names the file and its owner and mode.
pub fn check_config_set<'a>(
    file: &Path,
    trees: impl IntoIterator<Item = &'a PathBuf>,
) -> Vec<String> {
    let mut problems = Vec::new();
    if file.is_absolute() || file.exists() {
        if let Err(e) = check_path(file) {
            problems.push(e);
        }
    }
    for dir in trees {
        problems.extend(check_tree(dir));
    }
    problems
}

/// Read a regular file of at most `limit` bytes as UTF-8. The error says what is wrong, never
/// what the file holds.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, String> {
    let f = File::open(path).map_err(|e| format!("cannot be opened ({})", e.kind()))?;
    read_open(f, limit)
}

/// [`read_bounded`] of a file already open.
pub fn read_open(f: File, limit: u64) -> Result<String, String> {
    let meta = f
        .metadata()
        .map_err(|e| format!("cannot be inspected ({})", e.kind()))?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    let mut buf = Vec::new();
    f.take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot be read ({})", e.kind()))?;
    if buf.len() as u64 > limit {
        return Err(format!("is larger than the {limit} bytes allowed"));
    }
    String::from_utf8(buf).map_err(|_| "is not UTF-8 text".into())
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
        crate::require_root("this test needs root");
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

    #[test]
    fn a_link_is_checked_where_it_leads_with_everything_under_it() {
        crate::require_root("this test needs root");
        let t = tempfile::tempdir().expect("tempdir");
        let roles = t.path().join("roles");
        let elsewhere = t.path().join("elsewhere/code");
        std::fs::create_dir_all(&roles).expect("mkdir");
        std::fs::create_dir_all(elsewhere.join("sub")).expect("mkdir");
        std::fs::write(elsewhere.join("role.yaml"), "x").expect("write");
        std::fs::write(elsewhere.join("sub/brief.md"), "x").expect("write");
        std::os::unix::fs::symlink("../elsewhere/code", roles.join("code")).expect("link");
        // A link back up: checked once, no loop.
        std::os::unix::fs::symlink("..", elsewhere.join("up")).expect("link");
        assert_eq!(check_tree(&roles), Vec::<String>::new());
        // A file in the linked directory, and one below it: each someone else's.
        std::os::unix::fs::chown(elsewhere.join("role.yaml"), Some(4321), None).expect("chown");
        let p = check_tree(&roles);
        assert!(
            p.len() == 1 && p[0].contains("elsewhere/code/role.yaml") && p[0].contains("uid 4321"),
            "{p:?}"
        );
        std::os::unix::fs::chown(elsewhere.join("role.yaml"), Some(0), None).expect("chown");
        chmod(&elsewhere.join("sub/brief.md"), 0o666);
        let p = check_tree(&roles);
        assert!(p.len() == 1 && p[0].contains("sub/brief.md"), "{p:?}");
        chmod(&elsewhere.join("sub/brief.md"), 0o644);
        // The linked directory's parent someone else's: the link's way is refused there.
        std::os::unix::fs::chown(t.path().join("elsewhere"), Some(4321), None).expect("chown");
        let p = check_tree(&roles);
        assert!(
            p.len() == 1
                && p[0].contains("elsewhere (a directory above")
                && p[0].contains("uid 4321"),
            "{p:?}"
        );
        std::os::unix::fs::chown(t.path().join("elsewhere"), Some(0), None).expect("chown");
        // A link in a sticky directory anyone may write: only root's link may stand there.
        let tmp = t.path().join("tmp");
        std::fs::create_dir(&tmp).expect("mkdir");
        chmod(&tmp, 0o1777);
        std::os::unix::fs::symlink(&roles, tmp.join("layer")).expect("link");
        assert_eq!(check_tree(&tmp.join("layer")), Vec::<String>::new());
        std::os::unix::fs::lchown(tmp.join("layer"), Some(4321), None).expect("lchown");
        let p = check_tree(&tmp.join("layer"));
        assert!(
            p.len() == 1 && p[0].contains("a link owned by uid 4321"),
            "{p:?}"
        );
        // The config file is read from the descriptor that was checked.
        let f = t.path().join("airlock.yaml");
        std::fs::write(&f, "state_dir: x\n").expect("write");
        assert_eq!(read_checked(&f, 100).as_deref(), Ok("state_dir: x\n"));
        chmod(&f, 0o646);
        assert!(read_checked(&f, 100).expect_err("refused").contains("0646"));
    }
}
