//! A file of this host's fleet state (a queued fire, the signing key) written so that a
//! crash leaves either the old file or the whole new one: a temporary file made anew
//! (0600, never through a link), fsync'd, renamed over the file, and its directory
//! (made 0700 when missing) fsync'd.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Write `bytes` to `path` in `dir` durably; the error names the path and the step.
pub fn write(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), String> {
    let say = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| say("cannot create", dir, e))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = Path::new(&tmp);
    let _ = fs::remove_file(tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(tmp)
        .map_err(|e| say("cannot write", tmp, e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| say("cannot write", tmp, e))?;
    fs::rename(tmp, path).map_err(|e| say("cannot rename", path, e))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| say("cannot fsync", dir, e))
}
