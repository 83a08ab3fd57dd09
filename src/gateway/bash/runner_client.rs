//! The supervisor's end of the run's command runner: one request message per command,
//! carrying a fresh socket on which the command's shepherd writes the result, and the
//! command's own cgroup ([`CommandCgroups`]), made ahead: after a call's reply (a task of
//! the run's gateway), the next command's. Dropping a call (its HTTP request went away,
//! the gateway stopped) closes that socket, and the shepherd kills the command and
//! everything it started; whatever happened, the call's end kills its cgroup from here.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;

use nix::sys::socket::SockType;
use tokio::io::AsyncReadExt;

use crate::gateway::scope::Scope;
use crate::sandbox::command_cgroup::{CommandCgroup, CommandCgroups};
use crate::sandbox::fdpass;
use crate::sandbox::runner::{CommandRequest, CommandResult, MAX_REQUEST_BYTES, MAX_STREAM_BYTES};

/// Commands of one run that may run at once; more wait their turn.
pub const MAX_CONCURRENT: usize = 4;

/// Largest result read back: both streams at their cap, each byte escaped in JSON at worst
/// as six, plus room for the rest.
const MAX_RESULT_BYTES: u64 = (2 * 6 * MAX_STREAM_BYTES as u64) + (64 << 10);

pub struct RunnerClient {
    channel: OwnedFd,
    permits: tokio::sync::Semaphore,
    cgroups: Arc<CommandCgroups>,
    /// The run's gateway tasks: the next command's cgroup is made in one of them.
    scope: Scope,
}

/// A command's cgroup, ended when its call is over however it ends (a dropped future too).
struct Ended<'a>(&'a CommandCgroups, Option<CommandCgroup>);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        if let Some(cg) = self.1.take() {
            self.0.end(cg);
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("the run's command runner is gone")]
    Gone,
    #[error("the command is too large to send")]
    TooLarge,
    #[error("the command runner sent no valid result")]
    BadResult,
    #[error("the command outlived its timeout; it was killed")]
    Overran,
    #[error("the command's cgroup could not be made")]
    Cgroup,
}

/// How long past its timeout a command's result may take (its shepherd kills it at the
/// timeout; this bounds a shepherd that could not).
const RESULT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

impl RunnerClient {
    pub fn new(channel: OwnedFd, cgroups: CommandCgroups, scope: Scope) -> RunnerClient {
        // The first command's cgroup, made before any call comes.
        cgroups.prepare();
        RunnerClient {
            channel,
            permits: tokio::sync::Semaphore::new(MAX_CONCURRENT),
            cgroups: Arc::new(cgroups),
            scope,
        }
    }

    /// Make the next command's cgroup (and remove ended ones) in a task of its own: it
    /// runs once this call's task yields, after its reply is written, not while the
    /// command starts (they would share the cores).
    fn prepare_later(&self) {
        let cgroups = self.cgroups.clone();
        self.scope.spawn(async move { cgroups.prepare() });
    }

    /// Run one command on the command side and wait for its result.
    pub async fn run(&self, req: &CommandRequest) -> Result<CommandResult, RunnerError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| RunnerError::Gone)?;
        let bytes = serde_json::to_vec(req).map_err(|_| RunnerError::TooLarge)?;
        if bytes.len() > MAX_REQUEST_BYTES {
            return Err(RunnerError::TooLarge);
        }
        let (ours, theirs) = fdpass::pair(SockType::Stream).map_err(|_| RunnerError::Gone)?;
        // Fail closed: where the command side has cgroups, no command runs outside its own.
        let cgroup = self.cgroups.command().map_err(|_| RunnerError::Cgroup)?;
        let mut fds = vec![theirs.as_raw_fd()];
        fds.extend(cgroup.iter().flat_map(CommandCgroup::fds));
        let ended = Ended(&self.cgroups, cgroup);
        let before = self.cgroups.refusals();
        // A seqpacket send of a few KiB to a runner that reads all the time: it does not
        // block for long.
        fdpass::send(self.channel.as_fd(), &bytes, &fds).map_err(|e| {
            if e == nix::errno::Errno::EMSGSIZE {
                RunnerError::TooLarge
            } else {
                RunnerError::Gone
            }
        })?;
        drop(theirs);
        // However the call ends (a dropped future too), the next command's cgroup.
        struct Later<'a>(&'a RunnerClient);
        impl Drop for Later<'_> {
            fn drop(&mut self) {
                self.0.prepare_later();
            }
        }
        let _later = Later(self);
        let std_stream = std::os::unix::net::UnixStream::from(ours);
        std_stream
            .set_nonblocking(true)
            .map_err(|_| RunnerError::Gone)?;
        let stream = tokio::net::UnixStream::from_std(std_stream).map_err(|_| RunnerError::Gone)?;
        // Most results are small: one read, not three growing ones.
        let mut out = Vec::with_capacity(4096);
        let limit = std::time::Duration::from_millis(req.timeout_ms) + RESULT_GRACE;
        // Dropping the socket on overrun tells the shepherd (if alive) to kill the command.
        tokio::time::timeout(limit, stream.take(MAX_RESULT_BYTES).read_to_end(&mut out))
            .await
            .map_err(|_| RunnerError::Overran)?
            .map_err(|_| RunnerError::Gone)?;
        drop(ended);
        if out.is_empty() {
            return Err(RunnerError::Gone);
        }
        let mut result: CommandResult =
            serde_json::from_slice(&out).map_err(|_| RunnerError::BadResult)?;
        // What the command side's limits did meanwhile (with commands at once, to one of
        // them), said where the agent reads the command's errors.
        for what in self.cgroups.refusals().since(&before) {
            result.stderr.push_str(&format!("\n[airlock: {what}]\n"));
        }
        Ok(result)
    }
}
