//! The control socket: taken from systemd (socket activation, `LISTEN_FDS`) when airlockd
//! runs under `airlockd.socket`, or created at the configured path with mode 0660 and the
//! configured group.

use std::io;
use std::os::fd::FromRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;

/// Take the first socket systemd passed, if any. Call before any thread starts: it reads
/// and clears `LISTEN_PID`/`LISTEN_FDS`.
pub fn from_systemd() -> io::Result<Option<UnixListener>> {
    let mut fds = sd_notify::listen_fds()?;
    match fds.next() {
        // SAFETY: systemd passed this descriptor to us and nothing else owns it; it is a
        // listening stream socket by the unit's ListenStream=.
        Some(fd) => Ok(Some(unsafe { UnixListener::from_raw_fd(fd) })),
        None => Ok(None),
    }
}

/// Bind `path` with mode 0660 owned by root and `gid`. A stale socket file left by a
/// crashed daemon is replaced; any other kind of file at the path is refused.
pub fn bind(path: &Path, gid: Option<u32>) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists and is not a socket; remove it or set `socket` elsewhere",
                        path.display()
                    ),
                ));
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another airlockd is listening on {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::os::unix::fs::chown(path, Some(0), gid)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    Ok(listener)
}
