//! Whether this process's mount table changed: a jail built ahead of its run (a warm
//! jail) has a copy of the host's mounts from when it was built, and opens its run's
//! workspace and home through it, so after a mount or unmount on the host it would bind
//! what the host no longer shows there (the directory under a new mount, a file system
//! the host has let go) instead of what the launch checked.

use std::fs::File;
use std::os::fd::AsRawFd;

/// This process's mount table, read for its change events only.
pub struct MountWatch(File);

impl MountWatch {
    /// Watch from now on (a change before this call is not reported).
    pub fn open() -> std::io::Result<MountWatch> {
        File::open("/proc/self/mountinfo").map(MountWatch)
    }

    /// Whether a mount or unmount happened since [`MountWatch::open`] or the last call
    /// that said so: the kernel marks the table's open file with POLLPRI (and POLLERR)
    /// once per change, and the poll that sees it takes the mark. A poll that fails
    /// counts as a change (fail closed: the caller throws away what it built before).
    pub fn changed(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLPRI,
            revents: 0,
        };
        loop {
            // SAFETY: poll on one valid pollfd with a zero timeout.
            let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
            if rc < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return rc < 0 || pfd.revents & (libc::POLLPRI | libc::POLLERR) != 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unchanged_table_is_not_a_change() {
        let w = MountWatch::open().unwrap();
        assert!(!w.changed());
        assert!(!w.changed());
    }

    /// In a child of its own mount namespace (the test's host keeps its table): a mount is
    /// one change, seen once.
    #[test]
    fn a_mount_is_a_change_seen_once() {
        crate::require_root("a mount in a namespace of its own");
        let dir = tempfile::tempdir().unwrap();
        let target = std::ffi::CString::new(dir.path().to_str().unwrap()).unwrap();
        // SAFETY: the child only makes syscalls and leaves by _exit.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let code = (|| {
                    use nix::mount::{mount, MsFlags};
                    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).ok()?;
                    let private = MsFlags::MS_REC | MsFlags::MS_PRIVATE;
                    mount(None::<&str>, "/", None::<&str>, private, None::<&str>).ok()?;
                    let w = MountWatch::open().ok()?;
                    let before = w.changed();
                    let t = target.as_c_str();
                    mount(Some("t"), t, Some("tmpfs"), MsFlags::empty(), None::<&str>).ok()?;
                    let seen = w.changed();
                    let again = w.changed();
                    Some(u8::from(before) | u8::from(!seen) << 1 | u8::from(again) << 2)
                })()
                .map_or(99, i32::from);
                // SAFETY: leave the forked child without running the harness's code.
                unsafe { libc::_exit(code) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let st = nix::sys::wait::waitpid(child, None).unwrap();
                // 0: no change before the mount, one after it, none on the second look.
                assert_eq!(st, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
    }
}
