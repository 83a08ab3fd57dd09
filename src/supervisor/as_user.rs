//! Doing file work as someone else: on a thread of its own whose filesystem identity
//! (fsuid, fsgid, supplementary groups) is that user's. Linux keeps credentials per thread
//! and the raw syscalls change only the calling one (glibc's wrappers would change every
//! thread of airlockd), so the kernel checks each path step, open and create of that thread
//! exactly as for the user: ACLs included, and with the capabilities that bypass file
//! permissions gone (the kernel drops them from a thread whose fsuid is not 0). Its real and
//! effective uids stay root, so no process of that user can ptrace or signal the thread.
//!
//! Used where root would otherwise act on paths a user or a run controls: a workspace is
//! looked up as the peer that asked for it; a home is copied as its instance.

use std::io;

/// A user's filesystem identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (a peer's, from SO_PEERGROUPS; none for an instance).
    pub groups: Vec<u32>,
}

/// Run `f` on a new thread acting on files as `ids`; the thread ends with `f`.
pub fn run_as<R: Send>(ids: &Ids, f: impl FnOnce() -> R + Send) -> io::Result<R> {
    std::thread::scope(|s| {
        s.spawn(|| {
            become_fs(ids)?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("a thread acting as another user panicked")))
    })
}

/// Switch the calling thread's filesystem identity to `ids`, and check it took.
pub fn become_fs(ids: &Ids) -> io::Result<()> {
    // SAFETY: raw credential syscalls on this thread only, with a valid groups buffer.
    unsafe {
        if libc::syscall(libc::SYS_setgroups, ids.groups.len(), ids.groups.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        libc::syscall(libc::SYS_setfsgid, ids.gid);
        libc::syscall(libc::SYS_setfsuid, ids.uid);
        // setfs[ug]id answers with the previous id and never fails loudly: ask again.
        let gid = libc::syscall(libc::SYS_setfsgid, ids.gid);
        let uid = libc::syscall(libc::SYS_setfsuid, ids.uid);
        if gid != i64::from(ids.gid) || uid != i64::from(ids.uid) {
            return Err(io::Error::other(
                "the kernel did not switch this thread's file identity",
            ));
        }
    }
    Ok(())
}

/// Back to root's filesystem identity (fsuid 0 brings the file capabilities back) on a
/// thread that called [`become_fs`].
pub fn become_root_fs() -> io::Result<()> {
    become_fs(&Ids {
        uid: 0,
        gid: 0,
        groups: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_thread_as_a_user_is_refused_what_the_user_is_refused() {
        crate::require_root("this test needs root");
        let dir = tempfile::tempdir().expect("tempdir");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root's").expect("write");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let nobody = Ids {
            uid: 1_880_099_990,
            gid: 1_880_099_990,
            groups: Vec::new(),
        };
        let read = run_as(&nobody, || std::fs::read(&secret)).expect("thread");
        assert_eq!(
            read.expect_err("refused").kind(),
            io::ErrorKind::PermissionDenied
        );
        // The rest of the process stays root.
        assert_eq!(std::fs::read(&secret).expect("root reads"), b"root's");
        let made = dir.path().join("made");
        run_as(&nobody, || {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
        })
        .expect("thread")
        .expect_err("not the owner");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        run_as(&nobody, || std::fs::write(&made, "x"))
            .expect("thread")
            .expect("writes");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&made).expect("stat").uid(), nobody.uid);
    }
}
