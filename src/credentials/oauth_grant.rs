//! The OAuth grants airlockd holds for `grant: authorization_code` connectors: one file
//! per connector, `<state_dir>/oauth/<connector>.json` (root, 0600, in a 0700 folder),
//! written whole or not at all (tmp + fsync + rename + fsync of the folder), so a crash
//! during a refresh-token rotation leaves the old grant or the new, never half of one.
//! What it holds is a secret: its Debug shows no token.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::leases::write_atomic;
use super::Secret;

/// Largest grant file read.
const MAX_BYTES: u64 = 64 << 10;

/// One connector's authorization, as `airlockctl connector login` obtained it.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// The authorization server's issuer (an https origin and path, or http on this host).
    pub issuer: String,
    /// The client the grant belongs to: the config's, or the one registered at login.
    pub client_id: String,
    /// A registered confidential client's secret (RFC 7591), if the server gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub refresh_token: String,
    /// When the login was made, and when the refresh token was last replaced (ms).
    pub authorized_at_ms: u64,
    pub rotated_at_ms: u64,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("authorized_at_ms", &self.authorized_at_ms)
            .finish_non_exhaustive()
    }
}

impl Grant {
    pub fn client_secret(&self) -> Option<Secret> {
        self.client_secret.clone().map(Secret::new)
    }
}

/// Where `connector`'s grant is kept (connector names are `[a-z0-9_-]`, checked by the
/// config).
pub fn path(state_dir: &Path, connector: &str) -> PathBuf {
    state_dir.join("oauth").join(format!("{connector}.json"))
}

/// One writer at a time in this process (a login and a rotation may meet).
static WRITING: Mutex<()> = Mutex::new(());

/// The grant at `path`, if there is one. A file others could read or write is refused
/// (its token may be known, or replaced, by someone else).
pub fn load(path: &Path) -> Result<Option<Grant>, String> {
    use std::io::Read;
    let shown = path.display();
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{shown}: cannot be read: {e}")),
    };
    let md = f
        .metadata()
        .map_err(|e| format!("{shown}: cannot be read: {e}"))?;
    if md.uid() != nix::unistd::geteuid().as_raw() || md.mode() & 0o077 != 0 {
        return Err(format!(
            "{shown}: must be owned by airlockd's user and readable by it alone (mode 0600); it is not used"
        ));
    }
    let mut text = String::new();
    f.take(MAX_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| format!("{shown}: cannot be read: {e}"))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|_| format!("{shown}: is not a grant this airlockd wrote (not the JSON it writes); `airlockctl connector login` writes a new one"))
}

/// Keep `grant` at `path`, replacing what was there at once.
pub fn save(path: &Path, grant: &Grant) -> Result<(), String> {
    let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .and_then(|_| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| format!("{}: cannot be made: {e}", dir.display()))?;
    let bytes = serde_json::to_vec(grant).map_err(|_| "the grant cannot be written".to_string())?;
    write_atomic(path, &bytes).map_err(|e| format!("{}: cannot be written: {e}", path.display()))
}

/// Held while a grant is read, used at its server and replaced: a refresh token the server
/// rotates must not be spent twice (a server may take that for a stolen token and revoke
/// the grant), and after a reload that changed a connector's client, two token sources of
/// it may refresh at once.
pub struct GrantLock(#[allow(dead_code)] nix::fcntl::Flock<std::fs::File>);

/// Take the lock of the grant at `path` (`<path>.lock`, made if missing), waiting for
/// another holder. Blocking: call it off the async runtime's workers.
pub fn lock(path: &Path) -> Result<GrantLock, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("{}: cannot be made: {e}", dir.display()))?;
    let at = path.with_extension("lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&at)
        .map_err(|e| format!("{}: cannot be opened: {e}", at.display()))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map(GrantLock)
        .map_err(|(_, e)| format!("{}: cannot be locked: {e}", at.display()))
}

/// Forget the grant at `path`; whether there was one.
pub fn forget(path: &Path) -> Result<bool, String> {
    let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    match std::fs::remove_file(path) {
        Ok(()) => {
            super::leases::sync_dir(path.parent().unwrap_or(Path::new(".")));
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("{}: cannot be removed: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(rt: &str) -> Grant {
        Grant {
            issuer: "https://as.example".into(),
            client_id: "c-1".into(),
            client_secret: None,
            refresh_token: rt.into(),
            authorized_at_ms: 1,
            rotated_at_ms: 2,
        }
    }

    #[test]
    fn a_grant_is_kept_private_replaced_whole_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "linear");
        assert_eq!(load(&p).unwrap(), None);
        save(&p, &grant("rt-1")).unwrap();
        save(&p, &grant("rt-2")).unwrap();
        assert_eq!(load(&p).unwrap().unwrap().refresh_token, "rt-2");
        assert_eq!(
            std::fs::metadata(&p).unwrap().mode() & 0o777,
            0o600,
            "the file"
        );
        assert_eq!(
            std::fs::metadata(p.parent().unwrap()).unwrap().mode() & 0o777,
            0o700
        );
        // Nothing but the grant is left in the folder (no temporary file).
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
        assert!(!format!("{:?}", grant("rt-secret")).contains("rt-secret"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load(&p).unwrap_err().contains("mode 0600"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&p, "{not json").unwrap();
        let e = load(&p).unwrap_err();
        assert!(
            e.contains("connector login") && !e.contains("not json"),
            "{e}"
        );
        // The lock is exclusive between holders (here two open files in one process).
        let held = lock(&p).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let p2 = p.clone();
        let waiter = std::thread::spawn(move || {
            let _l = lock(&p2).unwrap();
            tx.send(()).unwrap();
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(200))
            .is_err());
        drop(held);
        rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
        waiter.join().unwrap();
        assert!(forget(&p).unwrap());
        assert!(!forget(&p).unwrap());
        assert_eq!(load(&p).unwrap(), None);
    }
}
