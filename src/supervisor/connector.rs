//! A stdio MCP connector's jail: one per run and connector, started with the run's gateway
//! and stopped with it, never in the agent's jail. It runs as the connector's own uid (the
//! config's `mcp_connectors.<name>.uid`, never root, never the run's instance), with no
//! capabilities, under the same namespaces, Landlock and seccomp as a command side, no
//! network but its own loopback, a home that persists under the state directory and a
//! fresh workspace per run. Its stdin and stdout are a socket to the gateway; its stderr
//! goes to the run's journal.

use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::socket::SockType;
use nix::unistd::{chown, Gid, Uid};

use super::launch::LaunchError;
use super::process::{self, OutputSink, RunControl};
use crate::config::Config;
use crate::credentials::Secret;
use crate::sandbox::helper::Ahead;
use crate::sandbox::spec::{valid_run_id, RunSpec};
use crate::sandbox::{fdpass, SandboxError};

/// Grace between SIGTERM and SIGKILL when a connector is stopped.
const GRACE: Duration = Duration::from_secs(2);

fn refused(m: impl Into<String>) -> LaunchError {
    LaunchError::Refused(m.into())
}

/// The spec of connector `name`'s jail for `run`: its home (made once, owned by `uid`)
/// and its workspace (made for this run), the run's limits and cgroup parent.
pub fn prepare(
    cfg: &Config,
    run: &RunSpec,
    name: &str,
    argv: &[String],
    uid: u32,
    env: &[(String, String)],
) -> Result<RunSpec, LaunchError> {
    if uid == run.uid {
        return Err(refused(
            ".uid: the connector's uid is the instance's; give the connector a uid of its own",
        ));
    }
    if cfg.instances.values().any(|i| i.uid == Some(uid)) {
        return Err(refused(".uid: an instance of this host has that uid"));
    }
    let run_id = format!("{}-{name}", run.run_id);
    if !valid_run_id(&run_id) {
        return Err(refused(": the connector's name makes too long a run id"));
    }
    let made = |p: &std::path::Path| -> Result<(), LaunchError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(p)
            .map_err(|e| LaunchError::Io(format!("{}: {e}", p.display())))?;
        chown(p, Some(Uid::from_raw(uid)), Some(Gid::from_raw(uid)))
            .map_err(|e| LaunchError::Io(format!("{}: {e}", p.display())))
    };
    let home = cfg.state_dir.join("connectors").join(name);
    made(&home)?;
    let workspace = cfg.state_dir.join("runs").join(&run_id).join("workspace");
    made(&workspace)?;
    let spec = RunSpec {
        run_id,
        role: run.role.clone(),
        instance: name.to_string(),
        uid,
        gid: uid,
        home,
        workspace,
        argv: argv.to_vec(),
        env: env.to_vec(),
        hide: run.hide.clone(),
        connect_tcp: Vec::new(),
        limits: run.limits.clone(),
        cgroup_parent: run.cgroup_parent.clone(),
        files: Vec::new(),
        gateway: false,
        exec: None,
        stdio: true,
        tty: false,
        disks: Vec::new(),
        image: None,
        home_state: None,
    };
    spec.validate()
        .map_err(|e| refused(format!(": the connector's jail: {e}")))?;
    Ok(spec)
}

/// A running connector jail, supervised by a task of the runtime. [`ConnectorJail::stop`]
/// stops it (SIGTERM, grace, SIGKILL) and waits; dropping it only asks for the stop.
pub struct ConnectorJail {
    ctl: Arc<RunControl>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ConnectorJail {
    /// Stop the jail and wait until nothing of it is left.
    pub async fn stop(mut self) {
        self.ctl.request_stop("its run ended");
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for ConnectorJail {
    fn drop(&mut self) {
        self.ctl.request_stop("its run ended");
    }
}

/// Sink for a connector's stdout pipe: its stdout is the socket, so nothing comes here.
struct Nothing;

impl OutputSink for Nothing {
    fn data(&mut self, _bytes: &[u8]) {}
}

/// Start the jail of `spec` (from [`prepare`]) on the current runtime; `env`: its
/// credential's variable. Returns the jail and the gateway's end of its stdio.
pub fn start(
    mut spec: RunSpec,
    env: Option<(String, Secret)>,
    stderr: Box<dyn OutputSink>,
) -> Result<(ConnectorJail, OwnedFd), LaunchError> {
    if let Some((k, v)) = env {
        spec.env.push((k, v.expose().to_string()));
    }
    let (ours, theirs) = fdpass::pair(SockType::Stream).map_err(|e| {
        LaunchError::Io(format!(
            "connector socket: {}",
            SandboxError::errno("socketpair", e)
        ))
    })?;
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| LaunchError::Io(format!("connector: no runtime to supervise it: {e}")))?;
    let ahead = Ahead {
        run_id: spec.run_id.clone(),
        cgroup_parent: spec.cgroup_parent.clone(),
    };
    let helper = process::spawn_helper(Some(&ahead), Some(&theirs))?;
    drop(theirs);
    let ctl = Arc::new(RunControl::new(None, GRACE));
    let c = ctl.clone();
    let task = runtime.spawn(async move {
        let _ = process::supervise(&spec, helper, &c, Box::new(Nothing), stderr, &mut |_| {}).await;
    });
    Ok((
        ConnectorJail {
            ctl,
            task: Some(task),
        },
        ours,
    ))
}
