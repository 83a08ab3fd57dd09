//! An agent's own state file in the instance's home, prepared before the agent starts
//! (see [`crate::policy::agent_config::claude_state`]): read, merged with the run's seed,
//! and put back whole by a rename. Done as the instance, in the jail, on descriptors held
//! from the home down, so a link the instance left there is never followed.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use super::fds::openat;
use super::spec::HomeState;
use crate::policy::agent_config::claude_state::merged;

/// A bigger state file is left as it is.
pub const MAX_STATE_BYTES: u64 = 8 << 20;

/// Merge `state` into its file under `home`. The error says what failed, for the run's
/// status (the agent starts anyway: only its first-run screens are at stake).
pub fn apply(home: &Path, state: &HomeState) -> Result<(), String> {
    let home_c = CString::new(home.as_os_str().as_encoded_bytes())
        .map_err(|_| "the home's path has a NUL".to_string())?;
    // SAFETY: open with a NUL-terminated path; the fd is owned right away.
    let fd = unsafe {
        libc::open(
            home_c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(format!(
            "open the home: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a fresh fd owned here alone.
    let dir: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    let name = CString::new(state.file.as_bytes()).map_err(|_| "a NUL in the name")?;
    let tmp = CString::new(format!("{}.airlock-new", state.file)).map_err(|_| "a NUL")?;
    let existing = match openat(
        &dir,
        &name,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
    ) {
        Ok(f) => {
            let mut f = std::fs::File::from(f);
            let meta = f
                .metadata()
                .map_err(|e| format!("stat {}: {e}", state.file))?;
            if !meta.is_file() || meta.len() > MAX_STATE_BYTES {
                return Err(format!(
                    "{} is not a regular file of at most {MAX_STATE_BYTES} bytes; left as it is",
                    state.file
                ));
            }
            let mut b = Vec::new();
            Read::by_ref(&mut f)
                .take(MAX_STATE_BYTES)
                .read_to_end(&mut b)
                .map_err(|e| format!("read {}: {e}", state.file))?;
            Some(b)
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
        Err(e) => return Err(format!("open {}: {e}", state.file)),
    };
    let bytes = merged(existing.as_deref(), &state.seed);
    // SAFETY: unlinkat on a held directory with a NUL-terminated name; ENOENT is fine.
    unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
    // SAFETY: openat on a held directory with a NUL-terminated name and the mode a
    // created file needs; the fd is owned right away.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            tmp.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(format!(
            "create {}: {}",
            tmp.to_string_lossy(),
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a fresh fd owned here alone.
    let mut out = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    out.write_all(&bytes)
        .and_then(|()| out.sync_all())
        .map_err(|e| format!("write {}: {e}", tmp.to_string_lossy()))?;
    // SAFETY: renameat within one held directory, NUL-terminated names.
    let rc = unsafe {
        libc::renameat(
            dir.as_raw_fd(),
            tmp.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: as above.
        unsafe { libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0) };
        return Err(format!("replace {}: {e}", state.file));
    }
    Ok(())
}
