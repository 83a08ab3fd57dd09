//! The per-run fallback file `<dir>/<run>.journal`, used while journald cannot take records.
//!
//! One JSON object per line holding every field of the record, including `AIRLOCK_SEQ` and
//! `AIRLOCK_TIME_US`. Values follow `journalctl -o json`'s convention so one decoder reads
//! both sources: a value that is valid UTF-8 is a JSON string (JSON escapes newlines and
//! control characters losslessly); any other value is an array of byte values (`[255,10]`).
//! A record is either here or in journald, never both: the writer sends it to exactly one.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// `<dir>/<run>.journal`.
pub fn path_for(dir: &Path, run: &str) -> PathBuf {
    dir.join(format!("{run}.journal"))
}

/// Create the fallback directory (owner and group only: it holds agent output).
pub fn ensure_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
}

/// Append-only writer, opened on first use so a run that never falls back leaves no file.
#[derive(Debug)]
pub struct FallbackFile {
    path: PathBuf,
    file: Option<File>,
    /// Where the file ends after its last whole record.
    len: u64,
    line: Vec<u8>,
    /// Written since the last sync (a sync with nothing to flush costs a disk trip all
    /// the same).
    dirty: bool,
}

impl FallbackFile {
    pub fn new(path: PathBuf) -> FallbackFile {
        FallbackFile {
            path,
            file: None,
            len: 0,
            line: Vec::new(),
            dirty: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one record as a single `write` of one complete line. A record that does not
    /// fit (a full disk) is cut off again, so the file never ends in half a record.
    pub fn append(&mut self, fields: &[(&str, &[u8])]) -> io::Result<()> {
        self.line.clear();
        encode_line(&mut self.line, fields);
        if self.file.is_none() {
            // O_NOFOLLOW: never write agent output through a planted symlink.
            let file = OpenOptions::new()
                .append(true)
                .create(true)
                .mode(0o640)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&self.path)?;
            self.len = file.metadata()?.len();
            self.file = Some(file);
        }
        let Some(f) = self.file.as_mut() else {
            return Err(io::Error::other("fallback file not open"));
        };
        self.dirty = true;
        match f.write_all(&self.line) {
            Ok(()) => {
                self.len += self.line.len() as u64;
                Ok(())
            }
            Err(e) => {
                let _ = f.set_len(self.len);
                Err(e)
            }
        }
    }

    /// Flush to stable storage (events and close; not every output line).
    pub fn sync(&mut self) -> io::Result<()> {
        match self.file.as_ref() {
            Some(f) if self.dirty => {
                f.sync_data()?;
                self.dirty = false;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Encode one record as a JSON line (with the trailing newline).
pub fn encode_line(out: &mut Vec<u8>, fields: &[(&str, &[u8])]) {
    out.push(b'{');
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Names are validated journald names ([A-Z0-9_]): no escaping needed.
        out.push(b'"');
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":");
        match std::str::from_utf8(value) {
            Ok(s) => {
                // Writing a &str into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, s);
            }
            Err(_) => {
                out.push(b'[');
                for (j, b) in value.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    // Writing into a Vec cannot fail.
                    let _ = write!(out, "{b}");
                }
                out.push(b']');
            }
        }
    }
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_and_bytes() {
        let mut out = Vec::new();
        encode_line(
            &mut out,
            &[("MESSAGE", b"a\nb\"c"), ("X", &[0xff, 0x00, b'a'])],
        );
        assert_eq!(out, b"{\"MESSAGE\":\"a\\nb\\\"c\",\"X\":[255,0,97]}\n");
    }
}
