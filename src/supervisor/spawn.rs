//! Starting a child with `posix_spawn`: exactly the fds named (dup2'd to their numbers),
//! an empty environment, default signal dispositions and an empty signal mask. glibc
//! starts the child with `CLONE_VM | CLONE_VFORK`, so a large multi-threaded caller (the
//! daemon) pays no page-table copy; std's `Command` would fork, as mapping extra fds needs
//! `pre_exec`.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

/// A started child process, reaped at most once (its pid is never signalled after).
pub struct Child {
    pid: libc::pid_t,
    status: Option<ExitStatus>,
}

impl Child {
    pub fn id(&self) -> u32 {
        self.pid as u32
    }

    /// SIGKILL, unless already reaped.
    pub fn kill(&self) {
        if self.status.is_none() {
            // SAFETY: kill with our own unreaped child's pid.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }

    fn waitpid(&mut self, flags: libc::c_int) -> std::io::Result<Option<ExitStatus>> {
        if let Some(st) = self.status {
            return Ok(Some(st));
        }
        let mut raw: libc::c_int = 0;
        loop {
            // SAFETY: waitpid on our own child with a valid out pointer.
            let rc = unsafe { libc::waitpid(self.pid, &mut raw, flags) };
            match rc {
                0 => return Ok(None),
                pid if pid == self.pid => {
                    let st = ExitStatus::from_raw(raw);
                    self.status = Some(st);
                    return Ok(Some(st));
                }
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EINTR) {
                        return Err(e);
                    }
                }
            }
        }
    }

    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.waitpid(0)?
            .ok_or_else(|| std::io::Error::other("waitpid returned no status"))
    }

    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.waitpid(libc::WNOHANG)
    }
}

/// Start `prog` with `args` in a process group of its own, an empty environment, default
/// signal dispositions, an empty signal mask and the fds in `fds` (source, number in the child); every other fd of ours
/// must be close-on-exec.
pub fn spawn_process(prog: &Path, args: &[&str], fds: &[(RawFd, RawFd)]) -> std::io::Result<Child> {
    let cstr = |b: &[u8]| CString::new(b).map_err(|_| std::io::Error::other("NUL in argument"));
    let prog_c = cstr(prog.as_os_str().as_bytes())?;
    let mut argv_c = vec![prog_c.clone()];
    for a in args {
        argv_c.push(cstr(a.as_bytes())?);
    }
    let mut argv: Vec<*mut libc::c_char> = argv_c.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
    // Sources moved clear of every target first, so no dup2 can clobber a later source.
    let mut high = Vec::with_capacity(fds.len());
    for &(src, _) in fds {
        // SAFETY: F_DUPFD_CLOEXEC on a caller-owned fd; the result is owned right away.
        let fd = unsafe { libc::fcntl(src, libc::F_DUPFD_CLOEXEC, 10) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        high.push(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(rc))
        }
    };
    // SAFETY: the posix_spawn objects are initialised before use and destroyed on every
    // path; every pointer passed stays alive until posix_spawn returns.
    unsafe {
        let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        check(libc::posix_spawn_file_actions_init(&mut actions))?;
        if let Err(e) = check(libc::posix_spawnattr_init(&mut attr)) {
            libc::posix_spawn_file_actions_destroy(&mut actions);
            return Err(e);
        }
        let result = (|| {
            for (fd, &(_, target)) in high.iter().zip(fds) {
                // dup2 clears close-on-exec on the target.
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions,
                    fd.as_raw_fd(),
                    target,
                ))?;
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigfillset(&mut all);
            check(libc::posix_spawnattr_setsigmask(&mut attr, &none))?;
            check(libc::posix_spawnattr_setsigdefault(&mut attr, &all))?;
            // A process group of its own (pgroup 0: its pid): a terminal's Ctrl-C goes to
            // the foreground group only, so it reaches the launcher, which decides what
            // it means for the run, and never the helper (which would pass it to the
            // agent).
            check(libc::posix_spawnattr_setpgroup(&mut attr, 0))?;
            check(libc::posix_spawnattr_setflags(
                &mut attr,
                (libc::POSIX_SPAWN_SETSIGMASK
                    | libc::POSIX_SPAWN_SETSIGDEF
                    | libc::POSIX_SPAWN_SETPGROUP) as libc::c_short,
            ))?;
            let mut pid: libc::pid_t = 0;
            check(libc::posix_spawn(
                &mut pid,
                prog_c.as_ptr(),
                &actions,
                &attr,
                argv.as_ptr(),
                envp.as_ptr(),
            ))?;
            Ok(pid)
        })();
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attr);
        result.map(|pid| Child { pid, status: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    fn output(prog: &str, args: &[&str], extra: Option<RawFd>) -> String {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let mut fds = vec![(w.as_raw_fd(), 1)];
        fds.extend(extra.map(|fd| (fd, 7)));
        let mut child = spawn_process(Path::new(prog), args, &fds).unwrap();
        drop(w);
        let mut out = String::new();
        std::fs::File::from(r).read_to_string(&mut out).unwrap();
        let st = child.wait().unwrap();
        assert!(st.success(), "{out}");
        assert_eq!(
            child.try_wait().unwrap(),
            Some(st),
            "reaped once, status kept"
        );
        out
    }

    #[test]
    fn the_child_gets_no_environment() {
        assert_eq!(output("/usr/bin/env", &[], None), "");
    }

    #[test]
    fn the_child_gets_the_mapped_fds_and_no_other_of_ours() {
        let (_r, stray) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let stray_ino = std::fs::File::from(stray.try_clone().unwrap())
            .metadata()
            .unwrap()
            .ino();
        let (_r7, seven) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let out = output(
            "/bin/sh",
            &[
                "-c",
                "test -e /proc/self/fd/7 && echo has-7; ls -l /proc/self/fd",
            ],
            Some(seven.as_raw_fd()),
        );
        assert!(out.starts_with("has-7\n"), "{out}");
        assert!(!out.contains(&format!("pipe:[{stray_ino}]")), "{out}");
    }
}
