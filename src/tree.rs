//! Copying and emptying a directory tree that a run controls, entirely through directory
//! descriptors: every name is looked up relative to an open directory with `O_NOFOLLOW`, a
//! symlink is copied as a symlink and removed as one, and what was opened is checked again
//! on the descriptor (a name swapped for a link or a fifo between a look and an open is
//! refused, never followed). The caller runs these as the tree's owner (see
//! [`as_user`](crate::supervisor::as_user)), so even a link the kernel did follow could reach nothing the
//! owner could not.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

/// How deep a copied tree may nest (each level holds two descriptors).
const MAX_DEPTH: usize = 256;

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC)`.
pub fn open_at(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: openat on a live directory fd with a NUL-terminated name; the fd is owned.
    let fd = cvt(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    })?;
    // SAFETY: just returned by openat, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A directory below `dir`, never through a link.
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    open_at(dir, name, libc::O_RDONLY | libc::O_DIRECTORY)
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; an empty name stats `dir` itself.
pub fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: an all-zero stat is a valid value for fstatat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let flags = if name.is_empty() {
        libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH
    } else {
        libc::AT_SYMLINK_NOFOLLOW
    };
    // SAFETY: valid fd, NUL-terminated name, `st` is writable.
    cvt(unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, flags) })?;
    Ok(st)
}

fn kind(st: &libc::stat) -> libc::mode_t {
    st.st_mode & libc::S_IFMT
}

/// The names in a directory (not `.` and `..`), read from its descriptor.
pub fn names(dir: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    // A descriptor of its own: readdir moves the offset of the one it reads.
    let fd = open_dir_at(dir, c".")?;
    // Dir owns the descriptor from here (and closes it on failure too).
    let mut d = nix::dir::Dir::from_fd(fd.into_raw_fd()).map_err(io::Error::from)?;
    let mut out = Vec::new();
    for e in d.iter() {
        let e = e.map_err(io::Error::from)?;
        let n = e.file_name();
        if n != c"." && n != c".." {
            out.push(n.to_owned());
        }
    }
    Ok(out)
}

fn times(st: &libc::stat) -> [libc::timespec; 2] {
    [
        libc::timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec,
        },
        libc::timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec,
        },
    ]
}

/// Mode (permission and sticky bits, never set-id) and times of `st` onto `fd`.
fn finish(fd: BorrowedFd<'_>, st: &libc::stat) -> io::Result<()> {
    // SAFETY: fchmod and futimens on a live fd; `t` outlives the call.
    unsafe {
        cvt(libc::fchmod(fd.as_raw_fd(), st.st_mode & 0o1777))?;
        let t = times(st);
        cvt(libc::futimens(fd.as_raw_fd(), t.as_ptr()))?;
    }
    Ok(())
}

/// What a copy left out: entries the copying user could not read, or that changed kind
/// while being copied (a run racing the copy), and sockets and devices (nothing to copy).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Skipped(pub u64);

/// Copy what `src` holds into `dst` (an empty directory): directories, regular files
/// (contents, mode, times), symlinks (as links) and fifos. Hard links become separate
/// files.
pub fn copy_tree(src: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> io::Result<Skipped> {
    let mut skipped = Skipped::default();
    copy_dir(src, dst, 0, &mut skipped)?;
    Ok(skipped)
}

fn gone(e: &io::Error) -> bool {
    // Removed, swapped for a link (ELOOP, or ENOTDIR for a directory), or not readable by
    // the copying user: skipped.
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR | libc::EACCES | libc::ENXIO)
    )
}

fn copy_dir(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    depth: usize,
    skipped: &mut Skipped,
) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!(
            "nested deeper than {MAX_DEPTH} directories"
        )));
    }
    for name in names(src)? {
        let st = match stat_at(src, &name) {
            Ok(st) => st,
            Err(e) if gone(&e) => {
                skipped.0 += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let r = match kind(&st) {
            libc::S_IFDIR => copy_subdir(src, dst, &name, depth, skipped),
            libc::S_IFREG => copy_file(src, dst, &name),
            libc::S_IFLNK => copy_link(src, dst, &name),
            libc::S_IFIFO => {
                // SAFETY: mkfifoat on a live fd with a NUL-terminated name.
                cvt(unsafe { libc::mkfifoat(dst.as_raw_fd(), name.as_ptr(), st.st_mode & 0o777) })
                    .map(|_| ())
            }
            _ => Err(io::Error::from_raw_os_error(libc::ENXIO)),
        };
        match r {
            Ok(()) => {}
            Err(e) if gone(&e) => skipped.0 += 1,
            Err(e) => return Err(entry_err(&name, e)),
        }
    }
    Ok(())
}

fn entry_err(name: &CStr, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "{}: {e}",
            OsStr::from_bytes(name.to_bytes()).to_string_lossy()
        ),
    )
}

fn copy_subdir(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    name: &CStr,
    depth: usize,
    skipped: &mut Skipped,
) -> io::Result<()> {
    let from = open_dir_at(src, name)?;
    let st = stat_at(from.as_fd(), c"")?;
    // SAFETY: mkdirat on a live fd with a NUL-terminated name.
    cvt(unsafe { libc::mkdirat(dst.as_raw_fd(), name.as_ptr(), 0o700) })?;
    let to = open_dir_at(dst, name)?;
    copy_dir(from.as_fd(), to.as_fd(), depth + 1, skipped)?;
    finish(to.as_fd(), &st)
}

fn copy_file(src: BorrowedFd<'_>, dst: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // O_NONBLOCK: a name swapped for a fifo does not hang the copy; checked below.
    let from = open_at(
        src,
        name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
    )?;
    let st = stat_at(from.as_fd(), c"")?;
    if kind(&st) != libc::S_IFREG {
        return Err(io::Error::from_raw_os_error(libc::ENXIO));
    }
    let to = open_at(
        dst,
        name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY,
    )?;
    let mut r = File::from(from);
    let mut w = File::from(to);
    io::copy(&mut r, &mut w)?;
    finish(w.as_fd(), &st)
}

/// Where the link `name` in `dir` leads (`readlinkat`); an empty `name` reads `dir` itself
/// (an `O_PATH` descriptor of a link). Not a link (any more): `ENXIO`.
pub fn read_link_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<CString> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: readlinkat writes at most `buf.len()` bytes into `buf`.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).map_err(|_| {
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // No longer a link (swapped since the look): changed kind.
            Some(libc::EINVAL) => io::Error::from_raw_os_error(libc::ENXIO),
            _ => e,
        }
    })?;
    buf.truncate(n);
    CString::new(buf).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn copy_link(src: BorrowedFd<'_>, dst: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let target = read_link_at(src, name)?;
    // SAFETY: symlinkat with NUL-terminated strings on a live fd.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dst.as_raw_fd(), name.as_ptr()) }).map(|_| ())
}

/// Give `dir` and everything under it to `uid:gid`: each entry chowned relative to its
/// directory's descriptor without following a link (a link itself is chowned), each
/// directory descended through a descriptor opened with `O_NOFOLLOW`.
pub fn chown_tree(dir: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: fchown on a live fd.
    cvt(unsafe { libc::fchown(dir.as_raw_fd(), uid, gid) })?;
    chown_in(dir, uid, gid, 0)
}

fn chown_in(dir: BorrowedFd<'_>, uid: u32, gid: u32, depth: usize) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!(
            "nested deeper than {MAX_DEPTH} directories"
        )));
    }
    for name in names(dir)? {
        match open_dir_at(dir, &name) {
            Ok(sub) => {
                // SAFETY: fchown on a live fd.
                cvt(unsafe { libc::fchown(sub.as_raw_fd(), uid, gid) })?;
                chown_in(sub.as_fd(), uid, gid, depth + 1)?;
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
                // SAFETY: fchownat on a live fd with a NUL-terminated name.
                cvt(unsafe {
                    libc::fchownat(
                        dir.as_raw_fd(),
                        name.as_ptr(),
                        uid,
                        gid,
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                })
                .map_err(|e| entry_err(&name, e))?;
            }
            Err(e) => return Err(entry_err(&name, e)),
        }
    }
    Ok(())
}

/// Remove everything in `dir`, keeping `dir`: each name is unlinked relative to its
/// directory's descriptor, a directory emptied through one opened without following links.
pub fn empty_tree(dir: BorrowedFd<'_>) -> io::Result<()> {
    empty_dir(dir, 0)
}

fn empty_dir(dir: BorrowedFd<'_>, depth: usize) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(format!(
            "nested deeper than {MAX_DEPTH} directories"
        )));
    }
    for name in names(dir)? {
        remove_at(dir, &name, depth).map_err(|e| entry_err(&name, e))?;
    }
    Ok(())
}

fn remove_at(dir: BorrowedFd<'_>, name: &CStr, depth: usize) -> io::Result<()> {
    let unlink = |flags| {
        // SAFETY: unlinkat on a live fd with a NUL-terminated name.
        cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(|_| ())
    };
    match unlink(0) {
        Ok(()) => return Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
        Err(e) if e.raw_os_error() != Some(libc::EISDIR) => return Err(e),
        Err(_) => {}
    }
    match open_dir_at(dir, name) {
        Ok(sub) => {
            // The owner may need to let itself write in a directory it made read-only.
            // SAFETY: fchmod on a live fd.
            let _ = unsafe { libc::fchmod(sub.as_raw_fd(), 0o700) };
            empty_dir(sub.as_fd(), depth + 1)?;
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT)) => return Ok(()),
        // Swapped for something else since: unlink that instead.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            return remove_at(dir, name, depth + 1)
        }
        Err(e) => return Err(e),
    }
    match unlink(libc::AT_REMOVEDIR) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt};

    fn dir_fd(p: &std::path::Path) -> OwnedFd {
        File::open(p).expect("open dir").into()
    }

    #[test]
    fn a_copy_keeps_links_as_links_and_empties_without_following() {
        let t = tempfile::tempdir().expect("tempdir");
        let (src, dst, outside) = (t.path().join("s"), t.path().join("d"), t.path().join("o"));
        for d in [&src, &dst, &outside] {
            std::fs::create_dir(d).expect("mkdir");
        }
        std::fs::write(outside.join("keep"), "outside").expect("write");
        std::fs::create_dir_all(src.join("sub/deeper")).expect("mkdir");
        std::fs::write(src.join("sub/deeper/f"), "data").expect("write");
        symlink(outside.join("keep"), src.join("to-file")).expect("symlink");
        symlink(&outside, src.join("sub/to-dir")).expect("symlink");
        nix::unistd::mkfifo(&src.join("fifo"), nix::sys::stat::Mode::S_IRWXU).expect("fifo");

        let s = dir_fd(&src);
        let skipped = copy_tree(s.as_fd(), dir_fd(&dst).as_fd()).expect("copy");
        assert_eq!(skipped, Skipped(0));
        assert_eq!(
            std::fs::read_to_string(dst.join("sub/deeper/f")).expect("copied"),
            "data"
        );
        assert!(std::fs::symlink_metadata(dst.join("to-file"))
            .expect("link")
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::read_link(dst.join("sub/to-dir")).expect("link"),
            outside
        );
        assert_eq!(
            std::fs::metadata(dst.join("sub/deeper/f"))
                .expect("f")
                .mtime(),
            std::fs::metadata(src.join("sub/deeper/f"))
                .expect("f")
                .mtime()
        );

        empty_tree(s.as_fd()).expect("empty");
        assert_eq!(std::fs::read_dir(&src).expect("src").count(), 0);
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).expect("kept"),
            "outside"
        );
    }
}
