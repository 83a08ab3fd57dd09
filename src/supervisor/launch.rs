//! The standalone launch path: role + instance + workspace -> run spec -> `airlock-jail`
//! (spawned, never forked from this process) -> output streamed, deadline enforced, the
//! whole run killed at the end, exit code returned.

use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::OFlag;
use nix::unistd::{chown, Gid, Uid};

use crate::config::Config;
use crate::policy::classes::canonicalize;
use crate::role::{LoadedRole, Provider, Role};
use crate::sandbox::spec::{valid_name, RunSpec};
use crate::sandbox::{limits, status};
use crate::supervisor::instances::{self, Instance};

/// Time between SIGTERM and SIGKILL when a run hits its deadline.
pub const GRACE: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Default)]
pub struct LaunchRequest {
    pub role: String,
    pub instance: String,
    pub workspace: Option<PathBuf>,
    pub max_seconds: Option<u64>,
    /// Replaces the role's agent command when not empty.
    pub command: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Bad input: nothing was started.
    #[error("{0}")]
    Refused(String),
    /// The jail could not be built (names the step); the agent never ran.
    #[error("jail setup failed: {0}")]
    Jail(String),
    #[error("{0}")]
    Io(String),
}

/// Everything decided before anything starts.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub spec: RunSpec,
    pub run_dir: PathBuf,
    pub deadline: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    pub run_id: String,
    /// The agent's exit code, 128 + signal if it was killed.
    pub exit_code: i32,
    pub deadline_hit: bool,
}

fn refused(msg: impl Into<String>) -> LaunchError {
    LaunchError::Refused(msg.into())
}

fn io_err(what: &str, path: &Path, e: impl std::fmt::Display) -> LaunchError {
    LaunchError::Io(format!("{}: {what}: {e}", path.display()))
}

/// A fresh run id: `r-YYYYMMDD-xxxxxxxx` (UTC date, 32 random bits).
pub fn new_run_id() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let mut rnd = [0u8; 4];
    // SAFETY: getrandom writes at most rnd.len() bytes into rnd.
    let n = unsafe { libc::getrandom(rnd.as_mut_ptr().cast(), rnd.len(), 0) };
    if n != rnd.len() as isize {
        // Fall back to time and pid: still unique enough for a run directory, which is
        // created with create_dir (never reused).
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        rnd = (t ^ std::process::id()).to_le_bytes();
    }
    format!("r-{y:04}{m:02}{d:02}-{:08x}", u32::from_le_bytes(rnd))
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The role's own agent command, when `-- CMD` does not replace it.
fn agent_command(role: &Role, brief: &str) -> Result<Vec<String>, LaunchError> {
    let run = role.run.as_ref().ok_or_else(|| {
        refused("the role has no `run` section, so it has no agent command; pass -- CMD ARGS")
    })?;
    Ok(match run.provider {
        Provider::Claude => vec![
            "claude".into(),
            "--print".into(),
            "--model".into(),
            run.model.clone(),
            brief.to_string(),
        ],
        Provider::Codex => vec![
            "codex".into(),
            "exec".into(),
            "--model".into(),
            run.model.clone(),
            brief.to_string(),
        ],
    })
}

/// The run's deadline: the role's minutes_per_run, narrowed (never widened) by --max-seconds.
pub fn deadline(role_secs: Option<u64>, max_seconds: Option<u64>) -> Option<Duration> {
    let secs = match (role_secs, max_seconds) {
        (Some(r), Some(m)) => Some(r.min(m)),
        (r, m) => r.or(m),
    };
    secs.map(Duration::from_secs)
}

/// Check everything and create the run directory and workspace. Nothing runs yet.
/// `role` is the role as the catalog resolved it (validated, rails and class checked).
pub fn prepare(
    cfg: &Config,
    req: &LaunchRequest,
    role: &LoadedRole,
) -> Result<Prepared, LaunchError> {
    if !valid_name(&req.instance) {
        return Err(refused(
            "--instance: instance names match [a-z][a-z0-9_-]{0,31}",
        ));
    }
    if req.max_seconds == Some(0) {
        return Err(refused("--max-seconds: must be at least 1"));
    }
    // Unknown instance first: nothing is created for it.
    let conf = cfg.instances.get(&req.instance).ok_or_else(|| {
        refused(format!(
            "{}: instances.{}: not hired (no such instance in the config)",
            cfg.file.display(),
            req.instance
        ))
    })?;
    // The instance is hired for a class; compare canonical names so `implementer` and
    // `code` are the same role and nothing else is.
    if canonicalize(&conf.role) != role.role.role {
        return Err(refused(format!(
            "{}: instances.{}.role: the instance is hired for another role",
            cfg.file.display(),
            req.instance
        )));
    }
    let loaded = role;
    let workspace = match &req.workspace {
        Some(w) => {
            let canon = fs::canonicalize(w)
                .map_err(|_| refused("--workspace: the directory does not exist"))?;
            if !canon.is_dir() {
                return Err(refused("--workspace: not a directory"));
            }
            Some(canon)
        }
        None => None,
    };
    let argv = if req.command.is_empty() {
        agent_command(&loaded.role, &loaded.brief_text)?
    } else {
        req.command.clone()
    };
    let inst: Instance = instances::resolve(cfg, &req.instance)
        .map_err(|e| refused(format!("{}: {e}", cfg.file.display())))?;

    let run_id = new_run_id();
    let run_dir = cfg.state_dir.join("runs").join(&run_id);
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&run_dir)
        .map_err(|e| io_err("cannot create run directory", &run_dir, e))?;
    let workspace = match workspace {
        Some(w) => w,
        None => {
            let w = run_dir.join("workspace");
            fs::DirBuilder::new()
                .mode(0o700)
                .create(&w)
                .map_err(|e| io_err("cannot create workspace", &w, e))?;
            chown(
                &w,
                Some(Uid::from_raw(inst.uid)),
                Some(Gid::from_raw(inst.gid)),
            )
            .map_err(|e| io_err("cannot chown workspace", &w, e))?;
            w
        }
    };
    let spec = RunSpec {
        run_id,
        role: loaded.role.role.clone(),
        instance: inst.name.clone(),
        uid: inst.uid,
        gid: inst.gid,
        home: inst.home.clone(),
        workspace,
        argv,
        env: Vec::new(),
        hide: vec![cfg.state_dir.clone(), cfg.socket.clone()],
        connect_tcp: Vec::new(),
        limits: cfg.limits.clone(),
        cgroup_parent: limits::prepare_parent(),
    };
    spec.validate()
        .map_err(|e| refused(format!("run spec refused before start: {e}")))?;
    Ok(Prepared {
        deadline: deadline(loaded.role.max_run_seconds(), req.max_seconds),
        spec,
        run_dir,
    })
}

fn jail_binary() -> Result<PathBuf, LaunchError> {
    let exe = std::env::current_exe().map_err(|e| LaunchError::Io(format!("current_exe: {e}")))?;
    let jail = exe
        .parent()
        .map(|d| d.join("airlock-jail"))
        .ok_or_else(|| LaunchError::Io("cannot locate airlock-jail".into()))?;
    if !jail.is_file() {
        return Err(io_err(
            "the jail helper is not installed next to this binary",
            &jail,
            "missing",
        ));
    }
    Ok(jail)
}

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: raw syscall with integer arguments; the returned fd is owned right away.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn pidfd_signal(fd: &OwnedFd, sig: libc::c_int) {
    // SAFETY: raw syscall on a pidfd we own; a dead process yields ESRCH, ignored.
    unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        );
    }
}

/// Wait until the pidfd is readable (the process exited) or the timeout passes.
fn exited_within(fd: &OwnedFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    loop {
        // SAFETY: poll on one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc >= 0 {
            return rc > 0;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return false;
        }
    }
}

fn copy_thread(
    mut from: impl Read + Send + 'static,
    mut to: Box<dyn Write + Send>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        // Keep draining so the agent never blocks on a full pipe.
                        continue;
                    }
                    let _ = to.flush();
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    })
}

fn append_log(run_dir: &Path, line: &str) {
    if let Ok(mut f) = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run_dir.join("run.log"))
    {
        let _ = writeln!(f, "{line}");
    }
}

/// Kill anything of the run that is still alive: the cgroup if there is one, else every
/// process of the instance uid on the host.
fn backstop(spec: &RunSpec) {
    if let Some(parent) = &spec.cgroup_parent {
        let _ = limits::kill_and_remove(&parent.join(&spec.run_id));
        return;
    }
    for _ in 0..50 {
        let pids = pids_of_uid(spec.uid);
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Host pids whose real uid is `uid`.
pub fn pids_of_uid(uid: u32) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Uid:"))
                        .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok())
                })
                == Some(uid)
        })
        .collect()
}

/// Run a prepared launch. `stream`: the agent's stdout/stderr go to ours; otherwise to
/// `<run_dir>/output.log`. Blocks until the run is over.
pub fn execute(p: &Prepared, stream: bool) -> Result<RunOutcome, LaunchError> {
    let jail = jail_binary()?;
    let spec_json =
        serde_json::to_vec(&p.spec).map_err(|e| LaunchError::Io(format!("encode spec: {e}")))?;
    let (st_r, st_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
        .map_err(|e| LaunchError::Io(format!("status pipe: {e}")))?;
    let st_w_raw = st_w.as_raw_fd();
    let mut cmd = Command::new(&jail);
    cmd.arg("--status-fd")
        .arg("3")
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls (dup2, fcntl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if st_w_raw == 3 {
                if libc::fcntl(3, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(st_w_raw, 3) != 3 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| io_err("cannot start the jail helper", &jail, e))?;
    drop(st_w);
    let pidfd = pidfd_open(child.id());

    // Deadline watcher: SIGTERM (forwarded to every process of the run), grace, SIGKILL.
    let deadline_hit = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = match (p.deadline, &pidfd) {
        (Some(limit), Some(fd)) => {
            let fd = fd
                .try_clone()
                .map_err(|e| LaunchError::Io(format!("pidfd: {e}")))?;
            let hit = deadline_hit.clone();
            Some(std::thread::spawn(move || {
                if !exited_within(&fd, limit) {
                    hit.store(true, std::sync::atomic::Ordering::SeqCst);
                    pidfd_signal(&fd, libc::SIGTERM);
                    if !exited_within(&fd, GRACE) {
                        pidfd_signal(&fd, libc::SIGKILL);
                    }
                }
            }))
        }
        _ => None,
    };

    if let Some(mut stdin) = child.stdin.take() {
        // A helper that died early closes its end; its status line says why.
        let _ = stdin.write_all(&spec_json);
    }
    let (out, err): (Box<dyn Write + Send>, Box<dyn Write + Send>) = if stream {
        (Box::new(std::io::stdout()), Box::new(std::io::stderr()))
    } else {
        let path = p.run_dir.join("output.log");
        let f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io_err("cannot open output log", &path, e))?;
        let _ = f.set_permissions(fs::Permissions::from_mode(0o600));
        let f2 = f
            .try_clone()
            .map_err(|e| io_err("cannot open output log", &path, e))?;
        (Box::new(f), Box::new(f2))
    };
    let mut copiers = Vec::new();
    if let Some(o) = child.stdout.take() {
        copiers.push(copy_thread(o, out));
    }
    if let Some(e) = child.stderr.take() {
        copiers.push(copy_thread(e, err));
    }

    // Blocks until the agent is exec'd (EOF) or setup failed.
    let mut text = String::new();
    let _ = fs::File::from(st_r).read_to_string(&mut text);
    let report = status::parse(&text);
    for info in &report.infos {
        append_log(&p.run_dir, &format!("jail: {info}"));
    }

    let waited = child.wait();
    for c in copiers {
        let _ = c.join();
    }
    if let Some(w) = watcher {
        let _ = w.join();
    }
    backstop(&p.spec);

    if let Some(e) = report.error {
        append_log(&p.run_dir, &format!("jail setup failed: {e}"));
        return Err(LaunchError::Jail(e));
    }
    let status = waited.map_err(|e| LaunchError::Io(format!("wait for the jail helper: {e}")))?;
    let exit_code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 125,
    };
    let hit = deadline_hit.load(std::sync::atomic::Ordering::SeqCst);
    append_log(
        &p.run_dir,
        &format!(
            "run ended: exit code {exit_code}{}",
            if hit { " (deadline reached)" } else { "" }
        ),
    );
    Ok(RunOutcome {
        run_id: p.spec.run_id.clone(),
        exit_code,
        deadline_hit: hit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_only_narrows() {
        let s = |n| Some(Duration::from_secs(n));
        assert_eq!(deadline(Some(600), Some(2)), s(2));
        assert_eq!(deadline(Some(60), Some(600)), s(60));
        assert_eq!(deadline(None, Some(5)), s(5));
        assert_eq!(deadline(Some(60), None), s(60));
        assert_eq!(deadline(None, None), None);
    }

    #[test]
    fn run_ids_are_valid_and_dated() {
        let id = new_run_id();
        assert!(crate::sandbox::spec::valid_run_id(&id), "{id}");
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
        assert_ne!(new_run_id(), new_run_id());
    }
}
