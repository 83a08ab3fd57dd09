//! What the supervisor asks the jail helper to build. Serialized as JSON and handed to the
//! single-threaded helper process (`airlock-jail`), never interpreted by the agent.

use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};

use super::SandboxError;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// Run id, e.g. `r-20261129-1a2b3c`. Also the jail's hostname.
    pub run_id: String,
    pub role: String,
    pub instance: String,
    /// The instance's uid and gid on the host.
    pub uid: u32,
    pub gid: u32,
    /// The instance's persistent home on the host (read-write, mode 0700, owned by uid).
    /// Inside the jail it is mounted at [`RunSpec::jail_home`].
    pub home: PathBuf,
    /// The run's workspace on the host (read-write, the cwd, `AIRLOCK_WORKSPACE`). Inside
    /// the jail it is at [`RunSpec::jail_workspace`].
    pub workspace: PathBuf,
    /// Program and arguments. The program is resolved on the jail's trusted PATH.
    pub argv: Vec<String>,
    /// Extra environment of the agent, on top of the fixed variables the jail sets;
    /// nothing is inherited from the launcher.
    pub env: Vec<(String, String)>,
    /// Host paths that must not be visible inside the jail (state dir, other homes, sockets).
    /// The jail's root is built from an allowlist, so these are only used to refuse binds
    /// that would expose them.
    pub hide: Vec<PathBuf>,
    /// Loopback TCP ports the run may connect to (its gateway endpoints).
    pub connect_tcp: Vec<u16>,
    pub limits: Limits,
    /// A delegated cgroup v2 directory to create the run's cgroup under, if any.
    pub cgroup_parent: Option<PathBuf>,
    /// Files the jail shows read-only, owned by root: the agent's brief and its generated
    /// configuration. Absent in older specs.
    #[serde(default)]
    pub files: Vec<JailFile>,
    /// The run has a gateway: pid 1 listens on 127.0.0.1:[`GATEWAY_PORT`] in the run's
    /// network namespace, starts the command runner, and hands both to the launcher over
    /// the helper's `--gateway-fd`. Absent in older specs.
    ///
    /// [`GATEWAY_PORT`]: super::runner::GATEWAY_PORT
    #[serde(default)]
    pub gateway: bool,
    /// The agent side's exec containment: the agent program and whatever it forks may
    /// execute only these files, from a view where every other mount is noexec. `None`:
    /// the argv runs on the command side (a workflow role, or an older spec).
    #[serde(default)]
    pub exec: Option<ExecAllow>,
    /// The program's stdin and stdout are the helper's `--stdio-fd` (a socket to the
    /// launcher: an MCP connector speaking JSON-RPC over stdio) instead of /dev/null and
    /// the output pipe. Absent in older specs.
    #[serde(default)]
    pub stdio: bool,
    /// `launch --tty`: the agent runs on a pseudo-terminal of the run's own devpts; its
    /// master goes to the launcher over the helper's `--stdio-fd`. Absent in older specs.
    #[serde(default)]
    pub tty: bool,
    /// Filesystems of fixed size that pid 1 mounts over the workspace or home before
    /// binding them (see [`super::disk`]): the kernel bounds the run's bytes and inodes
    /// there. Absent in older specs: nothing is mounted, the host's own limits apply.
    #[serde(default)]
    pub disks: Vec<DiskMount>,
    /// The command side's root from an OCI image (and a workflow role's command's): see
    /// [`super::image_root`]. Absent: the host's system folders, as for the agent side.
    #[serde(default)]
    pub image: Option<ImageRoot>,
    /// An agent's state file in the home, merged with a seed before the agent starts
    /// (`launch --tty` of Claude Code: its first-run screens answered). Absent in older
    /// specs.
    #[serde(default)]
    pub home_state: Option<HomeState>,
}

/// A JSON state file of the agent's own, directly in the instance's home.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HomeState {
    /// A plain name starting with `.` (`.claude.json`).
    pub file: String,
    /// What is merged in (see [`crate::policy::agent_config::claude_state::merged`]).
    pub seed: serde_json::Value,
}

/// The largest seed a spec may carry.
pub const MAX_HOME_SEED_BYTES: usize = 64 << 10;

/// An image the command side is rooted in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageRoot {
    /// The image's name in `images` and its manifest digest (for the run's records).
    pub name: String,
    pub digest: String,
    /// Its unpacked tree on the host (the image store's, root's and read-only).
    pub tree: PathBuf,
    /// The image config's `Env` (`NAME=value`), applied to the command side under the
    /// variables Airlock sets itself.
    #[serde(default)]
    pub env: Vec<String>,
}

/// Which of the run's writable trees a [`DiskMount`] bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskTarget {
    Workspace,
    Home,
}

impl DiskTarget {
    pub fn as_str(self) -> &'static str {
        match self {
            DiskTarget::Workspace => "workspace",
            DiskTarget::Home => "home",
        }
    }
}

/// An ext4 filesystem on a loop device that the supervisor attached (and keeps open for
/// the run), mounted by pid 1 over [`RunSpec::workspace`] or [`RunSpec::home`] in the
/// run's own mount namespace: the mount dies with the run, and the loop device (attached
/// with autoclear) with its last user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskMount {
    pub target: DiskTarget,
    /// `/dev/loopN`.
    pub device: PathBuf,
    /// The filesystem's size and inode count, for the run log.
    pub bytes: u64,
    pub inodes: u64,
}

/// `/dev/loopN`, N decimal: the only devices a spec may ask pid 1 to mount.
pub fn valid_loop_device(p: &Path) -> bool {
    p.to_str()
        .and_then(|s| s.strip_prefix("/dev/loop"))
        .is_some_and(|n| !n.is_empty() && n.len() <= 7 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// What the agent side may execute or map executable. Every path is a root-owned system
/// file, absolute and plain, in one of the [`SYSTEM_DIRS`] but /etc.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecAllow {
    /// Files the kernel may execute (Landlock EXECUTE): the program, its script
    /// interpreter, the ELF interpreter.
    pub programs: Vec<PathBuf>,
    /// Shared libraries mapped executable: no Landlock right, but each gets an exec mount.
    pub libraries: Vec<PathBuf>,
    /// Folders of an interpreter's runtime whose modules it maps executable (Python's
    /// lib-dynload): an exec mount each, read-only, no Landlock execute right.
    #[serde(default)]
    pub trees: Vec<PathBuf>,
}

/// Most files an [`ExecAllow`] names.
pub const MAX_EXEC_FILES: usize = 256;

/// One file written into the jail's generated /etc while the jail is built. See
/// [`JAIL_FILE_DIRS`] for where it may go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JailFile {
    /// Absolute path inside the jail.
    pub path: PathBuf,
    pub contents: String,
    /// Permission bits: a subset of 0644 that includes world-read (see [`RunSpec::validate`]).
    pub mode: u32,
}

pub use crate::config::limits::{Limits, DEFAULT_CPU_WEIGHT, DEFAULT_GRACE_MS, DEFAULT_IO_WEIGHT};

/// The folders a [`JailFile`] may be written under. Each is a configuration folder that the
/// jail's /etc never takes from the host (none is in the rootfs's host allowlist), so a
/// generated file can never shadow a host file the jail relies on (passwd, ld.so.cache,
/// nsswitch.conf, ssl...). Host /etc/airlock (airlockd's own config and policies) is never
/// shown to the jail either; inside it, /etc/airlock holds only what the spec puts there.
pub const JAIL_FILE_DIRS: &[&str] = &["/etc/airlock", "/etc/claude-code", "/etc/codex"];

/// Most bytes of all [`JailFile`] contents together. A brief and goals are at most 1 MiB
/// each; the generated configuration is a few KiB. The jail's /etc tmpfs is sized to fit.
pub const MAX_JAIL_FILES_BYTES: usize = 4 << 20;

/// Most [`JailFile`]s in one spec.
pub const MAX_JAIL_FILES: usize = 16;

/// Largest spec the helper reads: serde_json escapes a control character in six bytes, so
/// the files' worst case is six times their bound, plus 1 MiB for everything else.
pub const MAX_SPEC_JSON_BYTES: u64 = (1 << 20) + 6 * MAX_JAIL_FILES_BYTES as u64;

/// Host paths that the jail shows read-only (when they exist). Never bind targets.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// Strictly inside one of the system directories the jail shows executable (all of
/// [`SYSTEM_DIRS`] but /etc): where an agent's exec set may come from.
pub fn in_exec_system_dirs(p: &Path) -> bool {
    SYSTEM_DIRS
        .iter()
        .filter(|d| **d != "/etc")
        .any(|d| p.starts_with(d) && p != Path::new(d))
}

/// Host paths a workspace or home may never be at or under: the system view, kernel
/// interfaces, and the helper's own mount point.
const FORBIDDEN_BIND_ROOTS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys",
    "/dev", "/boot", "/run",
];

/// Environment names the jail sets itself; a spec may not override them.
pub const RESERVED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "LANG",
    "AIRLOCK_WORKSPACE",
    "AIRLOCK_RUN",
    "AIRLOCK_ROLE",
    "AIRLOCK_INSTANCE",
    "AIRLOCK_GATEWAY",
];

pub use crate::names::{valid_name, valid_run_id};

/// A parent for run cgroups: a plain path under /sys/fs/cgroup. Checked in the spec and in
/// the helper's `--cgroup-parent`, which it creates cgroups under before any spec comes.
pub fn valid_cgroup_parent(p: &Path) -> bool {
    plain_absolute(p) && p.starts_with("/sys/fs/cgroup")
}

/// Absolute, no `.`/`..`, no empty components, not `/` itself.
fn plain_absolute(p: &Path) -> bool {
    p.is_absolute()
        && p.components().count() > 1
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && !p.as_os_str().as_encoded_bytes().contains(&0)
}

/// A path in plain form: `/`-separated names, none empty, `.` or `..`, each of
/// `A-Za-z0-9._-` (so the text is exactly what the kernel will walk, with nothing to
/// normalize), at most 255 bytes per name and 1024 in all.
fn normalized_absolute(p: &Path) -> bool {
    let Some(s) = p.to_str() else {
        return false;
    };
    let Some(rest) = s.strip_prefix('/') else {
        return false;
    };
    s.len() <= 1024
        && rest.split('/').all(|c| {
            !c.is_empty()
                && c != "."
                && c != ".."
                && c.len() <= 255
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        })
}

/// Absolute, `/`-separated names, none empty, `.` or `..`, no NUL, at most 4096 bytes:
/// what a system file's path may be (names may hold any other byte, e.g. `+`).
fn normalized_absolute_loose(p: &Path) -> bool {
    let Some(s) = p.to_str() else {
        return false;
    };
    let Some(rest) = s.strip_prefix('/') else {
        return false;
    };
    s.len() <= 4096
        && !s.contains('\0')
        && rest
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Strictly below one of [`JAIL_FILE_DIRS`] (component-wise, so `/etc/airlockx` is not).
fn in_jail_file_dirs(p: &Path) -> bool {
    JAIL_FILE_DIRS
        .iter()
        .any(|d| p.starts_with(d) && p != Path::new(d))
}

fn invalid(step: &'static str, why: impl Into<String>) -> SandboxError {
    SandboxError::Invalid {
        step,
        why: why.into(),
    }
}

/// Where a run's fresh workspace shows in the jail ([`RunSpec::jail_workspace`]).
pub const JAIL_WORKSPACE: &str = "/workspace";

impl RunSpec {
    /// The workspace's mount point is created and bound by root (pid 1) inside the jail's
    /// new root, at the workspace's own path. That walk must never pass through a directory
    /// the agent controls, or a symlink the agent planted there would redirect root's
    /// mkdir and bind (onto a system directory of the jail, or onto a host path):
    /// - not at or under the instance's home, on the host or at its jail path
    ///   (`/home/<instance>`, where the agent-owned home is mounted);
    /// - not containing the home either (the two binds would overlap);
    /// - not at or under a hidden path (the state dir: other instances' homes, run
    ///   records), except the launcher's own fresh per-run workspace
    ///   `<hidden>/runs/<run_id>/workspace`.
    fn check_workspace_placement(&self) -> Result<(), SandboxError> {
        const STEP: &str = "validate spec";
        let ws = &self.workspace;
        if ws.starts_with(&self.home) || ws.starts_with(self.jail_home()) {
            return Err(invalid(
                STEP,
                "workspace must not be at or under the instance's home",
            ));
        }
        if self.home.starts_with(ws) {
            return Err(invalid(
                STEP,
                "workspace must not contain the instance's home",
            ));
        }
        for h in &self.hide {
            let own_run = h.join("runs").join(&self.run_id).join("workspace");
            if ws.starts_with(h) && *ws != own_run {
                return Err(invalid(
                    STEP,
                    "workspace must not be at or under a path hidden from the jail (the state directory)",
                ));
            }
        }
        Ok(())
    }

    /// Where the workspace is mounted inside the jail: [`JAIL_WORKSPACE`] for the
    /// launcher's own fresh per-run workspace (its host path lies in the state directory,
    /// whose layout the jail must not show, and nothing in it was recorded with a path
    /// yet); any other workspace at its own path, so absolute paths recorded in it keep
    /// working.
    pub fn jail_workspace(&self) -> PathBuf {
        let fresh = self
            .hide
            .iter()
            .any(|h| self.workspace == h.join("runs").join(&self.run_id).join("workspace"));
        if fresh {
            PathBuf::from(JAIL_WORKSPACE)
        } else {
            self.workspace.clone()
        }
    }

    /// Where the home is mounted inside the jail.
    pub fn jail_home(&self) -> PathBuf {
        PathBuf::from("/home").join(&self.instance)
    }

    /// Pure checks on the spec: names, paths, ids, environment, limits. The helper also
    /// checks the paths on the file system (no symlinks, directories) before binding them.
    pub fn validate(&self) -> Result<(), SandboxError> {
        const STEP: &str = "validate spec";
        if !valid_run_id(&self.run_id) {
            return Err(invalid(STEP, "run_id must match [a-z][a-z0-9-]{0,63}"));
        }
        if !valid_name(&self.instance) {
            return Err(invalid(STEP, "instance must match [a-z][a-z0-9_-]{0,31}"));
        }
        if !valid_name(&self.role) {
            return Err(invalid(STEP, "role must match [a-z][a-z0-9_-]{0,31}"));
        }
        // Never run an agent as root or as a system account.
        // Below 2^31 - 1: the command side's user namespace is owned by the uid with the
        // top bit set (command_userns::owner_of), which must not be -1.
        if self.uid < 1000 || self.gid < 1000 || self.uid >= (1 << 31) - 1 || self.gid >= 1 << 31 {
            return Err(invalid(
                STEP,
                "uid must be between 1000 and 2147483646, gid between 1000 and 2147483647",
            ));
        }
        if self.uid == 65534 || self.gid == 65534 {
            return Err(invalid(STEP, "uid and gid must not be the nobody account"));
        }
        if let Some(h) = &self.home_state {
            let plain = h.file.len() <= 64
                && h.file.starts_with('.')
                && h.file != "."
                && h.file != ".."
                && h.file
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !plain {
                return Err(invalid(
                    STEP,
                    "home_state.file must be a plain name starting with . (A-Za-z0-9._-, at most 64)",
                ));
            }
            if !h.seed.is_object() || h.seed.to_string().len() > MAX_HOME_SEED_BYTES {
                return Err(invalid(
                    STEP,
                    "home_state.seed must be a JSON object of at most 64 KiB",
                ));
            }
        }
        if let Some(image) = &self.image {
            if !plain_absolute(&image.tree) {
                return Err(invalid(
                    STEP,
                    "image.tree must be an absolute path without . or .. components",
                ));
            }
            if image.env.len() > 256
                || image
                    .env
                    .iter()
                    .any(|kv| !kv.contains('=') || kv.contains('\0'))
            {
                return Err(invalid(
                    STEP,
                    "image.env must be at most 256 NAME=value entries",
                ));
            }
        }
        for (key, p) in [("workspace", &self.workspace), ("home", &self.home)] {
            if !plain_absolute(p) {
                return Err(invalid(
                    STEP,
                    format!("{key} must be an absolute path without . or .. components"),
                ));
            }
            if FORBIDDEN_BIND_ROOTS.iter().any(|r| p.starts_with(r)) {
                return Err(invalid(
                    STEP,
                    format!("{key} must not be at or under a system or kernel directory"),
                ));
            }
            for h in &self.hide {
                if h.starts_with(p) {
                    return Err(invalid(
                        STEP,
                        format!("{key} contains a path that must stay hidden from the jail"),
                    ));
                }
            }
        }
        for h in &self.hide {
            if !plain_absolute(h) {
                return Err(invalid(STEP, "hide entries must be absolute plain paths"));
            }
        }
        self.check_workspace_placement()?;
        if self.argv.is_empty() || self.argv[0].is_empty() {
            return Err(invalid(STEP, "argv must name a program"));
        }
        if self.argv.iter().any(|a| a.contains('\0')) {
            return Err(invalid(STEP, "argv must not contain NUL bytes"));
        }
        for (i, (k, v)) in self.env.iter().enumerate() {
            let ok_name = !k.is_empty()
                && !k.starts_with(|c: char| c.is_ascii_digit())
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok_name || v.contains('\0') {
                return Err(invalid(
                    STEP,
                    format!("env[{i}]: names are [A-Za-z_][A-Za-z0-9_]*, values without NUL"),
                ));
            }
            if RESERVED_ENV.contains(&k.as_str()) {
                return Err(invalid(
                    STEP,
                    format!("env[{i}]: this name is set by the jail and cannot be overridden"),
                ));
            }
        }
        let l = &self.limits;
        if l.max_procs == 0 || l.nofile < 16 || l.tmp_bytes == 0 || l.shm_bytes == 0 {
            return Err(invalid(
                STEP,
                "limits: max_procs >= 1, nofile >= 16, tmp_bytes and shm_bytes > 0",
            ));
        }
        if l.deadline_ms == Some(0) {
            return Err(invalid(STEP, "limits: deadline_ms must be at least 1"));
        }
        // Kept well below what poll's int millisecond timeout and Instant can take.
        const MAX_MS: u64 = 1 << 40;
        if l.deadline_ms.unwrap_or(0) > MAX_MS || l.grace_ms.unwrap_or(0) > MAX_MS {
            return Err(invalid(
                STEP,
                "limits: deadline_ms and grace_ms must be below 2^40",
            ));
        }
        if l.cpu_weight.is_some_and(|w| !(1..=10_000).contains(&w))
            || l.io_weight.is_some_and(|w| !(1..=10_000).contains(&w))
            || l.cpu_max_millis
                .is_some_and(|m| !(10..=1_000_000).contains(&m))
        {
            return Err(invalid(
                STEP,
                "limits: cpu_weight and io_weight 1-10000, cpu_max_millis 10-1000000",
            ));
        }
        let mut seen = Vec::new();
        for d in &self.disks {
            if !valid_loop_device(&d.device) || seen.contains(&d.target) || d.bytes == 0 {
                return Err(invalid(
                    STEP,
                    "disks: one per target, each a /dev/loopN device of a nonzero size",
                ));
            }
            seen.push(d.target);
        }
        if let Some(p) = &self.cgroup_parent {
            if !valid_cgroup_parent(p) {
                return Err(invalid(
                    STEP,
                    "cgroup_parent must be a plain path under /sys/fs/cgroup",
                ));
            }
        }
        self.check_files()?;
        self.check_exec()
    }

    /// The exec set: few, plain paths inside the system directories the jail shows.
    fn check_exec(&self) -> Result<(), SandboxError> {
        const STEP: &str = "validate spec";
        let Some(x) = &self.exec else {
            return Ok(());
        };
        if x.programs.is_empty()
            || x.programs.len() + x.libraries.len() + x.trees.len() > MAX_EXEC_FILES
        {
            return Err(invalid(
                STEP,
                format!("exec: 1 to {MAX_EXEC_FILES} files, at least one program"),
            ));
        }
        for (list, paths) in [
            ("programs", &x.programs),
            ("libraries", &x.libraries),
            ("trees", &x.trees),
        ] {
            for (i, p) in paths.iter().enumerate() {
                if !normalized_absolute_loose(p) || !in_exec_system_dirs(p) {
                    return Err(invalid(
                        STEP,
                        format!("exec.{list}[{i}]: a plain absolute path inside a system directory (/usr, /lib...)"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The jail's files: few, small, read-only to the agent, and only in the folders of
    /// [`JAIL_FILE_DIRS`]. Messages name the entry, never its path or contents.
    fn check_files(&self) -> Result<(), SandboxError> {
        const STEP: &str = "validate spec";
        if self.files.len() > MAX_JAIL_FILES {
            return Err(invalid(
                STEP,
                format!("files: at most {MAX_JAIL_FILES} entries"),
            ));
        }
        let mut total: usize = 0;
        for (i, f) in self.files.iter().enumerate() {
            if !normalized_absolute(&f.path) {
                return Err(invalid(
                    STEP,
                    format!(
                        "files[{i}].path: must be an absolute path of names made of A-Za-z0-9._- \
                         (no `.` or `..`, no empty names, no trailing /)"
                    ),
                ));
            }
            if !in_jail_file_dirs(&f.path) {
                return Err(invalid(
                    STEP,
                    format!(
                        "files[{i}].path: jail files go under {}",
                        JAIL_FILE_DIRS.join("/, ") + "/"
                    ),
                ));
            }
            // No exec, setuid or write bits for anyone but root (and the mount is read-only
            // anyway); world-read, since the agent is neither root nor in root's group.
            if f.mode & !0o644 != 0 || f.mode & 0o004 == 0 {
                return Err(invalid(
                    STEP,
                    format!("files[{i}].mode: permission bits within 0644, world-readable"),
                ));
            }
            if let Some(j) = self.files[..i]
                .iter()
                .position(|g| g.path.starts_with(&f.path) || f.path.starts_with(&g.path))
            {
                return Err(invalid(
                    STEP,
                    format!("files[{i}].path: is, or is a folder of or inside, files[{j}].path"),
                ));
            }
            total = total.saturating_add(f.contents.len());
        }
        if total > MAX_JAIL_FILES_BYTES {
            return Err(invalid(
                STEP,
                format!("files: contents total at most {MAX_JAIL_FILES_BYTES} bytes"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid spec for unit tests across the sandbox; tests override what they need.
    pub(crate) fn sample() -> RunSpec {
        RunSpec {
            run_id: "r-20260101-abcdef".into(),
            role: "code".into(),
            instance: "tess".into(),
            uid: 1879900000,
            gid: 1879900000,
            home: "/var/lib/airlock/homes/tess".into(),
            workspace: "/srv/work/ws".into(),
            argv: vec!["/bin/true".into()],
            env: vec![("FOO".into(), "bar".into())],
            hide: vec!["/var/lib/airlock".into()],
            connect_tcp: vec![],
            limits: Limits::default(),
            cgroup_parent: None,
            files: vec![JailFile {
                path: "/etc/airlock/brief.md".into(),
                contents: "Do the work.\n".into(),
                mode: 0o444,
            }],
            gateway: false,
            exec: None,
            stdio: false,
            tty: false,
            disks: Vec::new(),
            image: None,
            home_state: None,
        }
    }

    #[test]
    fn sample_is_valid() {
        sample().validate().unwrap();
    }

    #[test]
    fn refuses_root_and_nobody() {
        let mut s = sample();
        s.uid = 0;
        assert!(s.validate().is_err());
        let mut s = sample();
        s.gid = 65534;
        assert!(s.validate().is_err());
    }

    #[test]
    fn refuses_workspace_exposing_hidden_or_system_paths() {
        for ws in [
            "/var",
            "/var/lib",
            "/usr/src",
            "/etc/x",
            "/proc/1",
            "/",
            "/srv/../etc",
        ] {
            let mut s = sample();
            s.workspace = ws.into();
            assert!(s.validate().is_err(), "{ws} accepted");
        }
    }

    #[test]
    fn a_home_state_file_is_a_plain_dot_name_and_its_seed_an_object() {
        let with = |file: &str, seed: serde_json::Value| {
            let mut s = sample();
            s.home_state = Some(HomeState {
                file: file.into(),
                seed,
            });
            s.validate()
        };
        assert!(with(".claude.json", serde_json::json!({"a": 1})).is_ok());
        for bad in ["claude.json", "..", ".", "../.x", ".a/b", ".x\0"] {
            assert!(with(bad, serde_json::json!({})).is_err(), "{bad}");
        }
        assert!(with(".x", serde_json::json!([1])).is_err());
        let big = "x".repeat(MAX_HOME_SEED_BYTES);
        assert!(with(".x", serde_json::json!({ "a": big })).is_err());
    }

    #[test]
    fn refuses_workspace_in_home_or_state_dir() {
        for ws in [
            "/var/lib/airlock/homes/tess",
            "/var/lib/airlock/homes/tess/proj",
            "/home/tess",
            "/home/tess/proj",
            "/var/lib/airlock/homes/max",
            "/var/lib/airlock/runs/r-other/workspace",
            "/var/lib/airlock/runs/r-20260101-abcdef",
            "/var/lib/airlock",
        ] {
            let mut s = sample();
            s.workspace = ws.into();
            assert!(s.validate().is_err(), "{ws} accepted");
        }
        // The home inside the workspace.
        let mut s = sample();
        s.home = "/srv/work/ws/home".into();
        assert!(s.validate().is_err());
        // The launcher's own fresh workspace of this run is fine, and so is /home/other.
        for ws in [
            "/var/lib/airlock/runs/r-20260101-abcdef/workspace",
            "/home/max/proj",
        ] {
            let mut s = sample();
            s.workspace = ws.into();
            s.validate().unwrap();
        }
    }

    #[test]
    fn refuses_reserved_env_and_bad_names() {
        let mut s = sample();
        s.env = vec![("PATH".into(), "/tmp".into())];
        assert!(s.validate().is_err());
        let mut s = sample();
        s.env = vec![("A=B".into(), "x".into())];
        assert!(s.validate().is_err());
        let mut s = sample();
        s.instance = "../x".into();
        assert!(s.validate().is_err());
        let mut s = sample();
        s.run_id = "R/1".into();
        assert!(s.validate().is_err());
    }

    fn with_file(path: &str, contents: String, mode: u32) -> RunSpec {
        let mut s = sample();
        s.files = vec![JailFile {
            path: path.into(),
            contents,
            mode,
        }];
        s
    }

    #[test]
    fn jail_files_only_in_the_allowlisted_folders() {
        for ok in [
            "/etc/airlock/brief.md",
            "/etc/claude-code/managed-settings.json",
            "/etc/codex/config.toml",
            "/etc/codex/home/config.toml",
        ] {
            with_file(ok, String::new(), 0o444).validate().unwrap();
        }
        for bad in [
            "/etc/passwd",
            "/etc/airlock",
            "/etc/airlock/",
            "/etc/airlockx/brief.md",
            "/etc/ld.so.preload",
            "/etc/ssl/certs/evil.pem",
            "/usr/bin/claude",
            "/tmp/brief.md",
            "etc/airlock/brief.md",
            "/etc/airlock/../passwd",
            "/etc/airlock/./brief.md",
            "/etc/airlock//brief.md",
            "/etc/airlock/sub/../../shadow",
            "/etc/airlock/bad name",
            "/etc/airlock/..",
        ] {
            let err = with_file(bad, String::new(), 0o444)
                .validate()
                .expect_err(bad)
                .to_string();
            assert!(err.contains("files[0].path"), "{bad}: {err}");
            assert!(
                !err.contains("passwd") && !err.contains("brief.md"),
                "{err}"
            );
        }
    }

    #[test]
    fn jail_files_are_bounded_in_size_count_and_mode() {
        let big = "x".repeat(MAX_JAIL_FILES_BYTES);
        with_file("/etc/airlock/brief.md", big.clone(), 0o444)
            .validate()
            .unwrap();
        let err = with_file("/etc/airlock/brief.md", big.clone() + "x", 0o444)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("contents total"), "{err}");
        // The bound is on the total, not per file.
        let mut s = with_file("/etc/airlock/brief.md", big, 0o444);
        s.files.push(JailFile {
            path: "/etc/airlock/goals.md".into(),
            contents: "y".into(),
            mode: 0o444,
        });
        assert!(s.validate().is_err());
        for mode in [0o755, 0o4644, 0o666, 0o640, 0o000, 0o1444] {
            assert!(
                with_file("/etc/airlock/brief.md", String::new(), mode)
                    .validate()
                    .is_err(),
                "{mode:o}"
            );
        }
        let mut s = sample();
        s.files = (0..=MAX_JAIL_FILES)
            .map(|i| JailFile {
                path: format!("/etc/airlock/f{i}").into(),
                contents: String::new(),
                mode: 0o444,
            })
            .collect();
        assert!(s.validate().is_err());
        s.files.pop();
        s.validate().unwrap();
        // The same path twice, or a file where another needs a folder.
        for second in ["/etc/airlock/brief.md", "/etc/airlock/brief.md/x"] {
            let mut s = sample();
            s.files.push(JailFile {
                path: second.into(),
                contents: String::new(),
                mode: 0o444,
            });
            assert!(s.validate().is_err(), "{second}");
        }
    }

    #[test]
    fn older_specs_without_files_still_parse() {
        let mut s = sample();
        s.files.clear();
        let mut j: serde_json::Value = serde_json::to_value(&s).unwrap();
        j.as_object_mut().unwrap().remove("files");
        assert_eq!(serde_json::from_value::<RunSpec>(j).unwrap(), s);
    }

    #[test]
    fn the_largest_valid_spec_fits_what_the_helper_reads() {
        // Worst-case escaping: every byte a control character.
        let s = with_file(
            "/etc/airlock/brief.md",
            "\u{1}".repeat(MAX_JAIL_FILES_BYTES),
            0o444,
        );
        s.validate().unwrap();
        let n = serde_json::to_vec(&s).unwrap().len() as u64;
        assert!(n <= MAX_SPEC_JSON_BYTES, "{n}");
    }

    #[test]
    fn round_trips_through_json() {
        let s = sample();
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<RunSpec>(&j).unwrap(), s);
    }
}
