//! The status pipe from the jail back to the launcher. Every process of the setup (helper,
//! init, agent child) holds the write end until it execs or exits; the launcher reads lines
//! until end-of-file. End-of-file with no `ERR` line means the agent was exec'd. Lines are
//! short (< PIPE_BUF), so each write is atomic even with several writers.

use std::io::Write;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use super::SandboxError;

/// Prefix of an informational line (what the jail could enforce).
pub const INFO: &str = "INFO ";
/// Prefix of the line that says the jail could not be built, and at which step.
pub const ERR: &str = "ERR ";

/// The write end, by fd number (it crosses fork boundaries).
#[derive(Debug, Clone, Copy)]
pub struct StatusFd(pub RawFd);

impl StatusFd {
    fn write_line(&self, line: &str) {
        // Keep each message in one write; strip newlines so the reader's framing holds.
        let mut msg: String = line.chars().filter(|c| *c != '\n').take(3800).collect();
        msg.push('\n');
        // SAFETY: the fd is owned by this process for its whole setup; we only borrow it
        // for this write and a dup that is closed right after.
        let fd = unsafe { BorrowedFd::borrow_raw(self.0) };
        if let Ok(owned) = fd.try_clone_to_owned() {
            let mut f = std::fs::File::from(owned);
            // Nobody is left to tell if the launcher is gone; the run fails closed anyway.
            let _ = f.write_all(msg.as_bytes());
        }
    }

    pub fn info(&self, what: &str) {
        self.write_line(&format!("{INFO}{what}"));
    }

    pub fn error(&self, e: &SandboxError) {
        self.write_line(&format!("{ERR}{e}"));
    }

    pub fn raw(&self) -> RawFd {
        self.0
    }
}

impl AsRawFd for StatusFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// What the launcher learned from the status pipe.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StatusReport {
    pub infos: Vec<String>,
    /// The first error line (the failing step and why), if setup failed.
    pub error: Option<String>,
}

/// Parse everything read from the pipe.
pub fn parse(text: &str) -> StatusReport {
    let mut r = StatusReport::default();
    for line in text.lines() {
        if let Some(i) = line.strip_prefix(INFO) {
            r.infos.push(i.to_string());
        } else if let Some(e) = line.strip_prefix(ERR) {
            if r.error.is_none() {
                r.error = Some(e.to_string());
            }
        } else if !line.is_empty() && r.error.is_none() {
            // Anything unexpected counts as a failure: fail closed.
            r.error = Some("the jail helper sent an unexpected status line".to_string());
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_infos_and_first_error() {
        let r = parse("INFO a\nERR mount /proc: denied\nERR later\nINFO b\n");
        assert_eq!(r.infos, vec!["a", "b"]);
        assert_eq!(r.error.as_deref(), Some("mount /proc: denied"));
        assert_eq!(parse("").error, None);
        assert!(parse("garbage\n").error.is_some());
    }
}
