//! Hired instances and their Unix identities. Each instance has a stable uid (explicit in
//! the config, or allocated once from `uid_range` and recorded in `<state_dir>/instances.json`)
//! with a group of the same number, and a persistent home `<state_dir>/homes/<name>`
//! (owned by the instance, mode 0700). A uid or gid that any existing account or group
//! uses is refused: the agent must never share an identity with anything else on the host.
//!
//! Instances come from two places: the config's `instances` map, and `airlockctl hire`
//! (admins, through airlockd), recorded in the registry's `hired` map. Firing marks an
//! instance fired in the registry, for either kind: a fired instance never launches again,
//! and its name is never hired again, so the trail of a name stays unambiguous. Its uid stays
//! recorded and is never handed to another instance.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{chown, Gid, Group, Uid, User};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::sandbox::command_userns;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub name: String,
    pub role: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InstanceError {
    #[error("instance `{0}` is not hired: no `instances.{0}` in the config and not hired through airlockd (`airlockctl hire`)")]
    Unknown(String),
    #[error(
        "instance `{0}` was fired and can never run again; hire a new instance under a new name"
    )]
    Fired(String),
    #[error("instance name `{0}` is taken (declared in the config, hired, or fired before); names are never reused, pick another")]
    NameTaken(String),
    #[error("instance names match [a-z][a-z0-9_-]{{0,31}}")]
    BadName,
    #[error("instances.{0}.uid: belongs to an existing account or group; pick a uid no account or group uses")]
    UidTaken(String),
    #[error("instances.{0}.uid: another instance already uses this uid")]
    UidShared(String),
    #[error("instances.{0}.uid: inside {1}; pick a uid in Airlock's uid_range")]
    UidReserved(String, &'static str),
    #[error("instances.{0}: no free uid left in uid_range")]
    RangeFull(String),
    #[error("{0}")]
    State(String),
}

/// `<state_dir>/instances.json`. Every field defaults, so registries written before hiring
/// existed still load.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Registry {
    /// uids allocated for config-declared instances without an explicit uid.
    #[serde(default)]
    uids: BTreeMap<String, u32>,
    /// Instances hired through airlockd.
    #[serde(default)]
    hired: BTreeMap<String, Hired>,
    /// Config-declared instances fired through airlockd.
    #[serde(default)]
    fired: BTreeSet<String>,
    /// Every uid ever issued, to the instance it was issued to (config and hired, fired ones
    /// included): a uid is never handed to another instance, even after its first holder
    /// was fired and removed from the config. Filled in from `uids` and `hired` for
    /// registries written before it existed.
    #[serde(default)]
    issued: BTreeMap<u32, String>,
}

impl Registry {
    /// Record `uid` as issued to `name`; whether that changed the registry.
    fn issue(&mut self, uid: u32, name: &str) -> bool {
        if self.issued.contains_key(&uid) {
            return false;
        }
        self.issued.insert(uid, name.to_string());
        true
    }

    /// Registries written before `issued` existed: what they recorded was issued.
    fn backfill(&mut self) {
        let known: Vec<(u32, String)> = self
            .uids
            .iter()
            .map(|(n, u)| (*u, n.clone()))
            .chain(self.hired.iter().map(|(n, h)| (h.uid, n.clone())))
            .collect();
        for (uid, name) in known {
            self.issue(uid, &name);
        }
    }
}

/// One instance hired through airlockd.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hired {
    pub role: String,
    pub uid: u32,
    pub fired: bool,
    /// Unix milliseconds.
    #[serde(default)]
    pub hired_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired_at: Option<u64>,
}

/// Where an instance is declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Config,
    Hired,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Config => "config",
            Source::Hired => "hired",
        }
    }
}

/// An instance as declared, before its identity is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub role: String,
    /// Explicit or recorded uid; `None` until a config instance first runs.
    pub uid: Option<u32>,
    pub source: Source,
    pub fired: bool,
}

fn state_err(what: &str, path: &Path, e: impl std::fmt::Display) -> InstanceError {
    InstanceError::State(format!("{}: {what}: {e}", path.display()))
}

/// Whether any account or group on the host (NSS: files, LDAP, systemd...) has this id.
pub fn id_in_use(id: u32) -> bool {
    !matches!(User::from_uid(Uid::from_raw(id)), Ok(None))
        || !matches!(Group::from_gid(Gid::from_raw(id)), Ok(None))
}

/// Ranges other parts of the host hand out on their own, without an NSS entry: an
/// instance sharing one would share an identity with whatever gets it.
pub fn reserved_range(id: u32) -> Option<&'static str> {
    reserved_in(id, &sub_ranges_text())
}

/// `/etc/subuid` and `/etc/subgid` together, read once per check (an allocation may test
/// many candidate ids against them).
fn sub_ranges_text() -> String {
    ["/etc/subuid", "/etc/subgid"]
        .iter()
        .filter_map(|f| fs::read_to_string(f).ok())
        .collect::<Vec<_>>()
        .join("\n")
}

fn reserved_in(id: u32, sub_ranges: &str) -> Option<&'static str> {
    if id < 1000 {
        return Some("the system accounts' range (below 1000)");
    }
    if (61184..=65519).contains(&id) {
        return Some("systemd's DynamicUser range (61184-65519)");
    }
    if (524_288..=1_879_048_191).contains(&id) {
        return Some("systemd's container range (524288-1879048191)");
    }
    if (2_147_352_576..=2_147_418_111).contains(&id) {
        return Some("systemd's foreign range");
    }
    if id >= 0x8000_0000 {
        return Some("the ids above 2^31 that some tools read as negative");
    }
    if in_sub_ranges(sub_ranges, id) {
        return Some("a subordinate id range of /etc/subuid or /etc/subgid");
    }
    None
}

/// `/etc/subuid` lines are `owner:first:count`.
fn in_sub_ranges(text: &str, id: u32) -> bool {
    text.lines().any(|line| {
        let mut f = line.trim().split(':').skip(1);
        match (
            f.next().and_then(|v| v.parse::<u64>().ok()),
            f.next().and_then(|v| v.parse::<u64>().ok()),
        ) {
            (Some(first), Some(count)) => {
                (first..first.saturating_add(count)).contains(&u64::from(id))
            }
            _ => false,
        }
    })
}

/// Create a root-owned directory with `mode` if missing, and fix its mode if present.
fn ensure_root_dir(p: &Path, mode: u32) -> Result<(), InstanceError> {
    let current = match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() && !m.file_type().is_symlink() => {
            if m.uid() != 0 {
                return Err(state_err("must be owned by root", p, "it is not"));
            }
            Some(m.mode() & 0o7777)
        }
        Ok(_) => return Err(state_err("must be a directory", p, "it is not")),
        Err(_) => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(mode)
                .create(p)
                .map_err(|e| state_err("cannot create", p, e))?;
            None
        }
    };
    set_mode(p, current, mode, "chmod")
}

/// chmod unless the mode already is `mode` (every launch checks these directories; a
/// needless chmod is an inode write each time). `None`: just created, umask applied.
fn set_mode(p: &Path, current: Option<u32>, mode: u32, what: &str) -> Result<(), InstanceError> {
    if current == Some(mode) {
        return Ok(());
    }
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).map_err(|e| state_err(what, p, e))
}

/// Where airlockd's locks live: a directory only root can open, so no other user can take
/// one of them (`flock` works on any descriptor, a read-only one included).
const LOCKS: &str = "locks";
/// The registry: instance names, roles and uids, for root alone.
const REGISTRY: &str = "instances.json";

/// Prepare the state dir layout: `<state>` 0711, `homes/`, `runs/` and `locks/` 0700, the
/// registry 0600, all root.
pub fn ensure_state_dir(state: &Path) -> Result<(), InstanceError> {
    ensure_root_dir(state, 0o711)?;
    ensure_root_dir(&state.join("homes"), 0o700)?;
    ensure_root_dir(&state.join("runs"), 0o700)?;
    ensure_root_dir(&state.join(LOCKS), 0o700)?;
    // Builds before these modes kept a lock file and the registry readable by anyone: the
    // lock goes (a descriptor someone opened then would hold it for ever), the registry
    // becomes root's.
    let _ = fs::remove_file(state.join("instances.lock"));
    private_file(&state.join(REGISTRY))
}

/// Make an existing state file 0600 (never following a link); a missing one is fine.
fn private_file(p: &Path) -> Result<(), InstanceError> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(p)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(state_err("cannot open", p, e)),
    };
    let m = f.metadata().map_err(|e| state_err("cannot stat", p, e))?;
    if !m.is_file() || m.uid() != 0 {
        return Err(state_err(
            "must be a regular file owned by root",
            p,
            "it is not",
        ));
    }
    if m.mode() & 0o7777 != 0o600 {
        f.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|e| state_err("chmod", p, e))?;
    }
    Ok(())
}

fn load_registry(path: &Path) -> Result<Registry, InstanceError> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(|mut r: Registry| {
                r.backfill();
                r
            })
            .map_err(|_| state_err("not a valid instance registry", path, "refusing to guess")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Registry::default()),
        Err(e) => Err(state_err("cannot read", path, e)),
    }
}

/// tmp file + fsync + rename + fsync of the directory: the registry is never half-written.
fn save_registry(path: &Path, reg: &Registry) -> Result<(), InstanceError> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(reg).map_err(|e| state_err("encode", path, e))?;
    // 0600 from its creation; a tmp file left by a crash is replaced, never followed.
    let _ = fs::remove_file(&tmp);
    let mut f = {
        use std::os::unix::fs::OpenOptionsExt;
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| state_err("write", &tmp, e))?
    };
    f.write_all(&text)
        .map_err(|e| state_err("write", &tmp, e))?;
    f.sync_all().map_err(|e| state_err("fsync", &tmp, e))?;
    fs::rename(&tmp, path).map_err(|e| state_err("rename", path, e))?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Take an exclusive lock on the registry for the duration of an allocation.
fn lock(state: &Path) -> Result<fs::File, InstanceError> {
    use std::os::unix::fs::OpenOptionsExt;
    let p = state.join(LOCKS).join("instances.lock");
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&p)
        .map_err(|e| state_err("cannot open", &p, e))?;
    // SAFETY: flock on an fd we own; the lock is released when `f` is closed.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX) } != 0 {
        return Err(state_err(
            "cannot lock",
            &p,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(f)
}

/// Resolve a hired instance to its identity, allocating and recording a uid on first use,
/// and make sure its home exists with the right owner and mode.
/// Refuses fired instances.
pub fn resolve(cfg: &Config, name: &str) -> Result<Instance, InstanceError> {
    let state = &cfg.state_dir;
    let Live {
        _guard,
        reg_path,
        mut reg,
        entry,
    } = live(cfg, name)?;
    let others = uids_held(cfg, &reg, Some(name));
    let uid = match entry.uid {
        Some(uid) => uid,
        None => {
            let uid =
                free_uid(cfg, &others).ok_or_else(|| InstanceError::RangeFull(name.to_string()))?;
            reg.uids.insert(name.to_string(), uid);
            reg.issue(uid, name);
            save_registry(&reg_path, &reg)?;
            uid
        }
    };
    if let Some(range) = reserved_range(uid) {
        return Err(InstanceError::UidReserved(name.to_string(), range));
    }
    if id_in_use(uid) {
        return Err(InstanceError::UidTaken(name.to_string()));
    }
    if others.contains(&uid) {
        return Err(InstanceError::UidShared(name.to_string()));
    }
    // An explicit uid is recorded on its first run, so it stays this instance's alone.
    if reg.issue(uid, name) {
        save_registry(&reg_path, &reg)?;
    }
    let home = state.join("homes").join(name);
    ensure_home(&home, uid, uid)?;
    Ok(Instance {
        name: name.to_string(),
        role: entry.role,
        uid,
        gid: uid,
        home,
    })
}

/// A hired, not fired, instance with the registry locked for a change.
struct Live {
    _guard: fs::File,
    reg_path: PathBuf,
    reg: Registry,
    entry: Entry,
}

fn live(cfg: &Config, name: &str) -> Result<Live, InstanceError> {
    let state = &cfg.state_dir;
    ensure_state_dir(state)?;
    let guard = lock(state)?;
    let reg_path = state.join(REGISTRY);
    let reg = load_registry(&reg_path)?;
    let entry =
        entry_of(cfg, &reg, name).ok_or_else(|| InstanceError::Unknown(name.to_string()))?;
    if entry.fired {
        return Err(InstanceError::Fired(name.to_string()));
    }
    Ok(Live {
        _guard: guard,
        reg_path,
        reg,
        entry,
    })
}

/// The declaration of `name`: the config first, then the hired registry.
fn entry_of(cfg: &Config, reg: &Registry, name: &str) -> Option<Entry> {
    if let Some(c) = cfg.instances.get(name) {
        // A hired record under the same name (config edited later) still carries its
        // fired flag: firing is never undone by editing the config.
        let fired = reg.fired.contains(name) || reg.hired.get(name).is_some_and(|h| h.fired);
        return Some(Entry {
            name: name.to_string(),
            role: c.role.clone(),
            uid: c.uid.or_else(|| reg.uids.get(name).copied()),
            source: Source::Config,
            fired,
        });
    }
    reg.hired.get(name).map(|h| Entry {
        name: name.to_string(),
        role: h.role.clone(),
        uid: Some(h.uid),
        source: Source::Hired,
        fired: h.fired,
    })
}

/// Every uid held by an instance other than `except`: explicit, recorded, hired or ever
/// issued (fired ones included, also once gone from the config: never reused).
fn uids_held(cfg: &Config, reg: &Registry, except: Option<&str>) -> Vec<u32> {
    let not = |n: &str| except != Some(n);
    let mut out: Vec<u32> = cfg
        .instances
        .iter()
        .filter(|(n, _)| not(n))
        .filter_map(|(n, c)| c.uid.or_else(|| reg.uids.get(n).copied()))
        .collect();
    out.extend(reg.uids.iter().filter(|(n, _)| not(n)).map(|(_, u)| *u));
    out.extend(reg.hired.iter().filter(|(n, _)| not(n)).map(|(_, h)| h.uid));
    out.extend(reg.issued.iter().filter(|(_, n)| not(n)).map(|(u, _)| *u));
    out
}

/// Config instances whose explicit uid was issued to another instance before (one fired
/// and removed from the config, or a hired one): refused when the config is loaded, each
/// naming the key. A registry that cannot be read refuses nothing here; every launch
/// reads it again and fails closed.
pub fn check_config(cfg: &Config) -> Vec<String> {
    let file = cfg.file.display();
    let mut problems = Vec::new();
    // Airlock makes no account for an instance: an id any account or group of the host
    // has is someone else's, and a run as it would be that someone (its files, its
    // processes). The allocator skips such ids one by one; a range holding accounts of
    // the files below is where the host hands out users, so later ones would collide.
    let accounts = ["/etc/passwd", "/etc/group"]
        .iter()
        .filter_map(|f| fs::read_to_string(f).ok())
        .collect::<Vec<_>>()
        .join("\n");
    if let Some(id) = account_in_range(&accounts, cfg.uid_range.first, cfg.uid_range.last) {
        problems.push(format!(
            "{file}: uid_range: holds id {id}, which an account or group of this host (/etc/passwd, /etc/group) has; instance uids must belong to no account: pick a range clear of the host's users and groups"
        ));
    }
    // Each instance's command side runs in a user namespace owned by its uid with the top
    // bit set (sandbox::command_userns): an account with such an id would hold every
    // capability over the commands of that instance's runs.
    let owners = command_userns::owner_of(cfg.uid_range.first)
        .zip(command_userns::owner_of(cfg.uid_range.last));
    if let Some(id) = owners.and_then(|(first, last)| account_in_range(&accounts, first, last)) {
        problems.push(format!(
            "{file}: uid_range: an account or group of this host has id {id}, the owner of some instance's command-side user namespace (instance uid + 2147483648); remove that account or pick another range"
        ));
    }
    let sub = sub_ranges_text();
    let mut seen: BTreeMap<u32, &str> = BTreeMap::new();
    for (name, c) in &cfg.instances {
        let Some(uid) = c.uid else { continue };
        if let Some(range) = reserved_in(uid, &sub) {
            problems.push(format!(
                "{file}: instances.{name}.uid: inside {range}; pick a uid in Airlock's uid_range (never 0, never an account's)"
            ));
        } else if id_in_use(uid) {
            problems.push(format!(
                "{file}: instances.{name}.uid: belongs to an existing account or group of this host; an instance's uid must be its own: pick one no account or group uses"
            ));
        } else if command_userns::owner_of(uid).is_some_and(id_in_use) {
            problems.push(format!(
                "{file}: instances.{name}.uid: an account or group of this host has this uid + 2147483648, the owner of the instance's command-side user namespace; pick another uid"
            ));
        } else if let Some(other) = seen.insert(uid, name) {
            problems.push(format!(
                "{file}: instances.{name}.uid: instance `{other}` has the same uid; each instance has a uid of its own"
            ));
        }
    }
    if let Ok(reg) = load_registry(&cfg.state_dir.join(REGISTRY)) {
        problems.extend(cfg.instances.iter().filter_map(|(name, c)| {
            let uid = c.uid?;
            let holder = reg.issued.get(&uid).filter(|h| *h != name)?;
            Some(format!(
                "{file}: instances.{name}.uid: was issued to instance `{holder}` before (uids are never handed to another instance, fired ones included); pick another uid"
            ))
        }));
    }
    problems
}

/// The first id of an `/etc/passwd` or `/etc/group` text (third field) in `first..=last`.
fn account_in_range(text: &str, first: u32, last: u32) -> Option<u32> {
    text.lines()
        .filter_map(|l| l.split(':').nth(2)?.trim().parse::<u32>().ok())
        .find(|id| (first..=last).contains(id))
}

fn free_uid(cfg: &Config, held: &[u32]) -> Option<u32> {
    let sub = sub_ranges_text();
    (cfg.uid_range.first..=cfg.uid_range.last)
        .find(|u| !held.contains(u) && reserved_in(*u, &sub).is_none() && !id_in_use(*u))
}

/// The declaration of one instance, without allocating anything.
pub fn lookup(cfg: &Config, name: &str) -> Result<Entry, InstanceError> {
    let reg = load_registry(&cfg.state_dir.join(REGISTRY))?;
    entry_of(cfg, &reg, name).ok_or_else(|| InstanceError::Unknown(name.to_string()))
}

/// Every instance: the config's, then the hired ones, each once.
pub fn list(cfg: &Config) -> Result<Vec<Entry>, InstanceError> {
    let reg = load_registry(&cfg.state_dir.join(REGISTRY))?;
    let names: BTreeSet<&String> = cfg.instances.keys().chain(reg.hired.keys()).collect();
    Ok(names
        .into_iter()
        .filter_map(|n| entry_of(cfg, &reg, n))
        .collect())
}

/// Hire `name` for `role` (a canonical role name the caller checked against the catalog):
/// allocate a fresh uid from `uid_range`, record it, create the home.
pub fn hire(cfg: &Config, name: &str, role: &str, now_ms: u64) -> Result<Instance, InstanceError> {
    hire_with(cfg, name, role, now_ms, None)
}

/// How a fleet allocates a hire's uid: given whether a uid is usable on this host (free
/// here, no account's, not reserved), the uid the fleet's registry recorded for the name.
pub type FleetAlloc<'a> = &'a dyn Fn(&dyn Fn(u32) -> bool) -> Result<u32, InstanceError>;

/// [`hire`], with the uid allocated by `fleet` when there is one (under this host's
/// registry lock, so the local record follows the fleet's at once).
pub fn hire_with(
    cfg: &Config,
    name: &str,
    role: &str,
    now_ms: u64,
    fleet: Option<FleetAlloc<'_>>,
) -> Result<Instance, InstanceError> {
    if !crate::sandbox::spec::valid_name(name) {
        return Err(InstanceError::BadName);
    }
    let state = &cfg.state_dir;
    ensure_state_dir(state)?;
    let _guard = lock(state)?;
    let reg_path = state.join(REGISTRY);
    let mut reg = load_registry(&reg_path)?;
    if cfg.instances.contains_key(name)
        || reg.hired.contains_key(name)
        || reg.fired.contains(name)
        || reg.uids.contains_key(name)
    {
        return Err(InstanceError::NameTaken(name.to_string()));
    }
    let held = uids_held(cfg, &reg, None);
    let uid = match fleet {
        None => free_uid(cfg, &held).ok_or_else(|| InstanceError::RangeFull(name.to_string()))?,
        Some(alloc) => {
            let sub = sub_ranges_text();
            alloc(&|u| !held.contains(&u) && reserved_in(u, &sub).is_none() && !id_in_use(u))?
        }
    };
    let home = state.join("homes").join(name);
    // A leftover home of the same name belongs to nobody we know: refuse, never adopt it.
    if fs::symlink_metadata(&home).is_ok() {
        return Err(state_err(
            "a home of this name already exists",
            &home,
            "move it away or pick another name",
        ));
    }
    reg.issue(uid, name);
    reg.hired.insert(
        name.to_string(),
        Hired {
            role: role.to_string(),
            uid,
            fired: false,
            hired_at: now_ms,
            fired_at: None,
        },
    );
    save_registry(&reg_path, &reg)?;
    ensure_home(&home, uid, uid)?;
    Ok(Instance {
        name: name.to_string(),
        role: role.to_string(),
        uid,
        gid: uid,
        home,
    })
}

/// Record here an instance the fleet's registry holds (hired on another host): same name,
/// role and uid. Nothing changes for a name this host already has with that uid; a name
/// or uid this host has otherwise is refused (the fleet and this host disagree: never guess).
pub fn adopt(
    cfg: &Config,
    name: &str,
    role: &str,
    uid: u32,
    fired: bool,
    hired_at: u64,
) -> Result<(), InstanceError> {
    if !crate::sandbox::spec::valid_name(name) {
        return Err(InstanceError::BadName);
    }
    let state = &cfg.state_dir;
    ensure_state_dir(state)?;
    let _guard = lock(state)?;
    let reg_path = state.join(REGISTRY);
    let mut reg = load_registry(&reg_path)?;
    if let Some(e) = entry_of(cfg, &reg, name) {
        if e.uid == Some(uid) {
            // A fire the fleet recorded is recorded here too.
            if fired && !e.fired {
                match e.source {
                    Source::Config => {
                        reg.fired.insert(name.to_string());
                    }
                    Source::Hired => {
                        if let Some(h) = reg.hired.get_mut(name) {
                            h.fired = true;
                        }
                    }
                }
                save_registry(&reg_path, &reg)?;
            }
            return Ok(());
        }
        return Err(InstanceError::State(format!(
            "instance `{name}`: the fleet store records another uid for it than this host does; fix the registries before it runs"
        )));
    }
    if uids_held(cfg, &reg, None).contains(&uid) {
        return Err(InstanceError::UidShared(name.to_string()));
    }
    if let Some(range) = reserved_range(uid) {
        return Err(InstanceError::UidReserved(name.to_string(), range));
    }
    if id_in_use(uid) {
        return Err(InstanceError::UidTaken(name.to_string()));
    }
    reg.issue(uid, name);
    reg.hired.insert(
        name.to_string(),
        Hired {
            role: role.to_string(),
            uid,
            fired,
            hired_at,
            fired_at: None,
        },
    );
    save_registry(&reg_path, &reg)
}

/// Fire `name`: recorded before anything else, so no new run can start from here on.
/// Returns the entry as it was (its uid, if any, for killing what is left).
pub fn fire(cfg: &Config, name: &str, now_ms: u64) -> Result<Entry, InstanceError> {
    let Live {
        _guard,
        reg_path,
        mut reg,
        entry,
    } = live(cfg, name)?;
    // Its uid stays taken after it leaves the config.
    if let Some(uid) = entry.uid {
        reg.issue(uid, name);
    }
    match entry.source {
        Source::Config => {
            reg.fired.insert(name.to_string());
        }
        Source::Hired => {
            if let Some(h) = reg.hired.get_mut(name) {
                h.fired = true;
                h.fired_at = Some(now_ms);
            }
        }
    }
    save_registry(&reg_path, &reg)?;
    Ok(entry)
}

/// The home: a real directory (not a symlink), owned by the instance, mode 0700.
fn ensure_home(home: &Path, uid: u32, gid: u32) -> Result<(), InstanceError> {
    let current = match fs::symlink_metadata(home) {
        Ok(m) if m.is_dir() && !m.file_type().is_symlink() => {
            if m.uid() != uid {
                return Err(state_err(
                    "home is owned by another uid",
                    home,
                    "refusing to hand it to this instance",
                ));
            }
            Some(m.mode() & 0o7777)
        }
        Ok(_) => return Err(state_err("home must be a directory", home, "it is not")),
        Err(_) => {
            fs::DirBuilder::new()
                .mode(0o700)
                .create(home)
                .map_err(|e| state_err("cannot create home", home, e))?;
            chown(home, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))
                .map_err(|e| state_err("cannot chown home", home, e))?;
            None
        }
    };
    set_mode(home, current, 0o700, "chmod home")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_ranges_are_refused() {
        for id in [
            0,
            999,
            61184,
            65519,
            524_288,
            1_000_000,
            2_147_400_000,
            3_000_000_000,
        ] {
            assert!(reserved_range(id).is_some(), "{id}");
        }
        assert_eq!(reserved_range(1_880_000_000), None);
        assert!(in_sub_ranges(
            "alice:100000:65536\nbob:165536:65536\n",
            170_000
        ));
        assert!(!in_sub_ranges("alice:100000:65536\n", 165_536));
        assert!(!in_sub_ranges("garbage\n::\n", 5));
    }

    #[test]
    fn state_dirs_and_homes_get_their_mode_back() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        ensure_state_dir(&state).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&state), 0o711);
        fs::set_permissions(state.join("runs"), fs::Permissions::from_mode(0o755)).unwrap();
        ensure_state_dir(&state).unwrap();
        assert_eq!(mode(&state.join("runs")), 0o700);
        assert_eq!(mode(&state.join("homes")), 0o700);
        let home = state.join("homes/h");
        ensure_home(&home, 0, 0).unwrap();
        fs::set_permissions(&home, fs::Permissions::from_mode(0o4777)).unwrap();
        ensure_home(&home, 0, 0).unwrap();
        assert_eq!(mode(&home), 0o700);
    }

    #[test]
    fn accounts_in_a_range_are_found() {
        let text = "root:x:0:0::/root:/bin/sh\nal:x:1001:1001::/:/bin/sh\nbad line\nusers:x:100:\n";
        assert_eq!(account_in_range(text, 1000, 2000), Some(1001));
        assert_eq!(account_in_range(text, 1002, 2000), None);
        assert_eq!(account_in_range(text, 0, 0), Some(0));
    }

    #[test]
    fn existing_accounts_are_in_use() {
        assert!(id_in_use(0));
        // An id in the default range is normally free.
        assert!(!id_in_use(1_880_000_000));
    }
}
