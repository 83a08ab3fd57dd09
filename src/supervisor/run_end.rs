//! A run's end as its helper tells it on the end pipe (`airlock-jail --end-fd`): once pid 1
//! is reaped (its pid namespace, so every process of the run, is gone) the helper writes
//! `EXIT N` and lets go of the run's output, then removes the run's cgroups and exits. The
//! launcher can record and answer the run's end at `EXIT`, and finish the rest (the
//! helper's exit, the cgroup backstop) afterwards as the run's [`Teardown`]: the removal of
//! namespaces and cgroups is no longer on the path of the client waiting for its exit code.

use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use super::spawn::Child;
use crate::sandbox::helper::END_EXIT;
use crate::sandbox::spec::RunSpec;

/// Most bytes read from the end pipe; the helper writes two or three short lines.
pub const MAX_END: usize = 4096;

/// The exit code an `EXIT N` line tells, once the line is complete (ends in `\n`).
/// Anything else tells nothing: the launcher then waits for the helper's exit.
pub fn told_exit(text: &str) -> Option<i32> {
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .find_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next(), w.next()) {
                (Some(END_EXIT), Some(n), None) => n.parse::<i32>().ok().filter(|c| *c >= 0),
                _ => None,
            }
        })
}

/// The end pipe, read as it comes while the run is supervised.
pub struct EndPipe {
    /// `None` at end of file, after an error, or once [`MAX_END`] bytes are read.
    pipe: Option<pipe::Receiver>,
    pub text: String,
}

impl EndPipe {
    pub fn new(pipe: Option<pipe::Receiver>) -> EndPipe {
        EndPipe {
            pipe,
            text: String::new(),
        }
    }

    pub fn open(&self) -> bool {
        self.pipe.is_some()
    }

    /// The pipe as a plain descriptor, for a read that must not wait (the helper exited).
    pub fn take_fd(&mut self) -> Option<OwnedFd> {
        self.pipe.take()?.into_nonblocking_fd().ok()
    }

    /// Read what is there (waiting for it); the exit code once an `EXIT` line is complete.
    pub async fn read_some(&mut self) -> Option<i32> {
        let p = self.pipe.as_mut()?;
        if p.readable().await.is_err() {
            self.pipe = None;
            return None;
        }
        let mut buf = [0u8; 512];
        match p.try_read(&mut buf) {
            Ok(0) => self.pipe = None,
            Ok(n) => {
                // The helper writes ASCII; anything else is not its word.
                self.text.push_str(&String::from_utf8_lossy(&buf[..n]));
                if self.text.len() >= MAX_END {
                    self.pipe = None;
                }
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::Interrupted
                    || e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => self.pipe = None,
        }
        told_exit(&self.text)
    }
}

/// What is left of a run whose end its helper told before exiting: the helper's exit and
/// the backstop on the run's cgroups. Nothing of the run is running any more.
pub struct Teardown {
    pub(super) spec: RunSpec,
    pub(super) child: Child,
    pub(super) pidfd: Option<AsyncFd<OwnedFd>>,
    pub(super) end: EndPipe,
    /// Held until the helper has exited, as during the run.
    pub(super) lifeline: OwnedFd,
}

/// How often a helper without a pidfd is looked at.
const TICK: Duration = Duration::from_millis(20);

impl Teardown {
    /// Wait for the helper to exit, then make sure the run's cgroups are gone. `Err` says
    /// what could not be removed (for the journal: the run's record is closed already).
    pub async fn finish(self) -> Result<(), String> {
        let Teardown {
            spec,
            mut child,
            pidfd,
            end,
            lifeline,
        } = self;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) => {}
                Err(e) => return Err(format!("wait for the jail helper: {e}")),
            }
            match &pidfd {
                Some(fd) => {
                    if let Ok(mut g) = fd.readable().await {
                        // Readable stays so once the helper exited; try_wait above decides.
                        if !matches!(child.try_wait(), Ok(Some(_))) {
                            g.clear_ready();
                        }
                    }
                }
                None => tokio::time::sleep(TICK).await,
            }
        }
        drop((lifeline, end));
        // The helper removed the cgroups; this finds them gone, or removes what it left.
        super::process::cleanup(&spec).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_whole_exit_line_tells_the_end() {
        assert_eq!(told_exit("OOM_KILL run=0\nEXIT 0\n"), Some(0));
        assert_eq!(told_exit("EXIT 137\n"), Some(137));
        // Not yet complete, or not the line: nothing told.
        for text in [
            "",
            "EXIT 0",
            "EXIT\n",
            "EXIT -1\n",
            "EXIT 1 2\n",
            "EXITED 0\n",
            "OOM_KILL run=1\n",
        ] {
            assert_eq!(told_exit(text), None, "{text:?}");
        }
    }
}
