//! Credential leases: every credential a run may use, as a record with a state, and the
//! random run tokens that stand for them inside the jail.
//!
//! A lease is issued when a run is prepared and revoked when it ends (exit, deadline,
//! stop, fire, daemon shutdown), or at airlockd's next start for a run a crash left open.
//! Its record lives under `<state>/leases/<run>.json` while any lease of the run is not yet
//! revoked, and moves to `<state>/leases/done/` once all are: a start-up sweep reads only
//! the first folder. Each issue and each revocation is also a ledger record.
//!
//! Tokens are never written anywhere: they live in airlockd's memory (as SHA-256 digests)
//! and in the run's environment, and they die with the run. A token works only through its
//! own run's gateway, which only that run's network namespace reaches.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a lease grants the use of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseKind {
    /// The model provider's key, used by the gateway's provider route.
    Provider,
    /// An MCP connector's credential, used by the gateway on the run's behalf.
    Connector,
    /// GitHub App installation tokens minted for the run, used by the gateway's GitHub
    /// route; revoked at GitHub too (`DELETE /installation/token`).
    Github,
}

impl LeaseKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseKind::Provider => "provider",
            LeaseKind::Connector => "connector",
            LeaseKind::Github => "github",
        }
    }

    /// Whether its credential lives on at its source until revoked there.
    pub fn revoked_upstream(self) -> bool {
        self == LeaseKind::Github
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    Active,
    /// Revoked here; its revocation at the credential's source has not been confirmed
    /// yet and is retried.
    RevokePending,
    Revoked,
}

impl LeaseState {
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseState::Active => "active",
            LeaseState::RevokePending => "revoke-pending",
            LeaseState::Revoked => "revoked",
        }
    }
}

/// One lease, as kept in the state directory and shown by `show` and `instances`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lease {
    /// `run/<run>/<kind>/<n>`.
    pub id: String,
    pub run: String,
    pub instance: String,
    pub kind: LeaseKind,
    /// What it grants, for people: `provider claude: model claude-sonnet-4-5 at
    /// https://api.anthropic.com`. Never a secret.
    pub grants: String,
    /// Unix milliseconds.
    pub issued_at: u64,
    /// When it stops working even if nothing revokes it (the run's deadline), if ever.
    pub expires_at: Option<u64>,
    pub state: LeaseState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoke_reason: Option<String>,
    /// When the credential dies at its source on its own (a GitHub token's expiry), for
    /// leases revoked upstream: past it, a revocation that could not be confirmed is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_expires_at: Option<u64>,
}

/// What a run asks for: one lease per credential it will use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Want {
    pub kind: LeaseKind,
    /// The credential's use within its kind: the provider or connector name.
    pub name: String,
    pub grants: String,
}

/// A run token. Shown to nobody: Debug withholds it.
#[derive(Clone, PartialEq, Eq)]
pub struct RunToken(String);

impl RunToken {
    /// For the one place it goes: the run's environment.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for RunToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunToken(<withheld>)")
    }
}

/// Prefix of every run token: recognisable in a leak report, and not any provider's key
/// shape, so a client library that checks key shapes lets it through unchanged.
pub const TOKEN_PREFIX: &str = "airlock-run-";

/// Why the gateway refused a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRefusal {
    /// No token, or not one of this run's.
    Unknown,
    /// Its lease was revoked.
    Revoked,
    /// Its lease expired (the run's deadline passed).
    Expired,
}

impl std::fmt::Display for TokenRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TokenRefusal::Unknown => "not a token of this run",
            TokenRefusal::Revoked => "the token's lease was revoked",
            TokenRefusal::Expired => "the token's lease expired",
        })
    }
}

/// A run's leases as its gateway checks them: digests of the tokens and a revoked flag per
/// lease, flipped at once by a revocation (before its record is written).
#[derive(Debug)]
pub struct LiveLeases {
    entries: Vec<LiveLease>,
}

#[derive(Debug)]
struct LiveLease {
    id: String,
    kind: LeaseKind,
    name: String,
    digest: [u8; 32],
    expires_at: Option<u64>,
    revoked: AtomicBool,
}

impl LiveLeases {
    /// The lease whose token `presented` is, if it is live and of `kind` and `name`.
    pub fn check(
        &self,
        kind: LeaseKind,
        name: &str,
        presented: &str,
        now_ms: u64,
    ) -> Result<&str, TokenRefusal> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        // Digests compared whole (no early exit on the first differing byte).
        let e = self
            .entries
            .iter()
            .find(|e| {
                e.kind == kind
                    && e.name == name
                    && e.digest
                        .iter()
                        .zip(&digest)
                        .fold(0u8, |a, (x, y)| a | (x ^ y))
                        == 0
            })
            .ok_or(TokenRefusal::Unknown)?;
        live(e, now_ms).map(|_| e.id.as_str())
    }

    /// Whether the lease for `kind`/`name` (one the gateway uses without a token: a
    /// connector's credential) is live.
    pub fn usable(&self, kind: LeaseKind, name: &str, now_ms: u64) -> Result<(), TokenRefusal> {
        match self
            .entries
            .iter()
            .find(|e| e.kind == kind && e.name == name)
        {
            Some(e) => live(e, now_ms),
            None => Err(TokenRefusal::Unknown),
        }
    }

    /// Stop every token of the run now.
    pub fn revoke_all(&self) {
        for e in &self.entries {
            e.revoked.store(true, Ordering::SeqCst);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many leases of `kind` are live (neither revoked nor expired).
    pub fn live(&self, kind: LeaseKind, now_ms: u64) -> usize {
        self.entries
            .iter()
            .filter(|e| e.kind == kind && live(e, now_ms).is_ok())
            .count()
    }
}

fn live(e: &LiveLease, now_ms: u64) -> Result<(), TokenRefusal> {
    if e.revoked.load(Ordering::SeqCst) {
        Err(TokenRefusal::Revoked)
    } else if e.expires_at.is_some_and(|t| now_ms >= t) {
        Err(TokenRefusal::Expired)
    } else {
        Ok(())
    }
}

/// A run's freshly issued leases: the records, the gateway's view, and each want's token
/// (in the order of the wants).
#[derive(Debug)]
pub struct Issued {
    pub records: Vec<Lease>,
    pub live: std::sync::Arc<LiveLeases>,
    pub tokens: Vec<RunToken>,
}

/// Issue one lease per want. Fails only when the kernel has no randomness to give.
pub fn issue(
    run: &str,
    instance: &str,
    wants: &[Want],
    now_ms: u64,
    expires_at: Option<u64>,
) -> std::io::Result<Issued> {
    let mut records = Vec::new();
    let mut entries = Vec::new();
    let mut tokens = Vec::new();
    let mut per_kind: std::collections::BTreeMap<&str, u32> = Default::default();
    for w in wants {
        let n = per_kind.entry(w.kind.as_str()).or_insert(0);
        *n += 1;
        let id = format!("run/{run}/{}/{n}", w.kind.as_str());
        let token = RunToken(format!("{TOKEN_PREFIX}{}", hex(&random::<24>()?)));
        entries.push(LiveLease {
            id: id.clone(),
            kind: w.kind,
            name: w.name.clone(),
            digest: Sha256::digest(token.0.as_bytes()).into(),
            expires_at,
            revoked: AtomicBool::new(false),
        });
        records.push(Lease {
            id,
            run: run.to_string(),
            instance: instance.to_string(),
            kind: w.kind,
            grants: w.grants.clone(),
            issued_at: now_ms,
            expires_at,
            state: LeaseState::Active,
            revoked_at: None,
            revoke_reason: None,
            upstream_expires_at: None,
        });
        tokens.push(token);
    }
    Ok(Issued {
        records,
        live: std::sync::Arc::new(LiveLeases { entries }),
        tokens,
    })
}

/// N bytes from the kernel's random source.
pub(crate) fn random<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    let mut filled = 0;
    while filled < N {
        // SAFETY: getrandom writes at most N - filled bytes at b[filled..].
        let n = unsafe { libc::getrandom(b[filled..].as_mut_ptr().cast(), N - filled, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        filled += n as usize;
    }
    Ok(b)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Revoke every lease of `leases` not yet revoked; returns those whose state changed (so
/// each change is recorded once). Provider keys and connector credentials are Airlock's
/// own, so a local revocation is the whole of it. A lease revoked upstream
/// ([`LeaseKind::revoked_upstream`]) is revoked only when `upstream` confirms its
/// credential is dead at its source (asked again for a pending one); until then it is
/// [`LeaseState::RevokePending`], never shown revoked.
pub fn revoke(
    leases: &mut [Lease],
    now_ms: u64,
    reason: &str,
    upstream: &mut dyn FnMut(&Lease) -> bool,
) -> Vec<Lease> {
    let mut changed = Vec::new();
    for l in leases.iter_mut().filter(|l| l.state != LeaseState::Revoked) {
        let state = if !l.kind.revoked_upstream() || upstream(l) {
            LeaseState::Revoked
        } else {
            LeaseState::RevokePending
        };
        if state == l.state {
            continue;
        }
        l.state = state;
        if l.revoked_at.is_none() || state == LeaseState::Revoked {
            l.revoked_at = Some(now_ms);
        }
        l.revoke_reason = Some(reason.to_string());
        changed.push(l.clone());
    }
    changed
}

/// Where leases are kept: `<state>/leases/` (runs with a lease not yet revoked) and
/// `<state>/leases/done/` (runs whose leases are all revoked).
#[derive(Debug, Clone)]
pub struct LeaseStore {
    dir: PathBuf,
}

impl LeaseStore {
    pub fn new(state_dir: &Path) -> LeaseStore {
        LeaseStore {
            dir: state_dir.join("leases"),
        }
    }

    fn open_path(&self, run: &str) -> PathBuf {
        self.dir.join(format!("{run}.json"))
    }

    fn done_path(&self, run: &str) -> PathBuf {
        self.dir.join("done").join(format!("{run}.json"))
    }

    /// Write a run's leases durably: in the open folder while any is not revoked, else in
    /// `done/` (and the open file goes).
    pub fn save(&self, run: &str, leases: &[Lease]) -> std::io::Result<()> {
        let done = leases.iter().all(|l| l.state == LeaseState::Revoked);
        let path = if done {
            self.done_path(run)
        } else {
            self.open_path(run)
        };
        let parent = path.parent().unwrap_or(&self.dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
        let text = serde_json::to_vec_pretty(leases).map_err(std::io::Error::other)?;
        write_atomic(&path, &text)?;
        if done {
            match std::fs::remove_file(self.open_path(run)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => sync_dir(&self.dir),
            }
        }
        Ok(())
    }

    /// A run's leases, wherever they are; `None` when it had none.
    pub fn load(&self, run: &str) -> std::io::Result<Option<Vec<Lease>>> {
        for path in [self.open_path(run), self.done_path(run)] {
            match std::fs::read(&path) {
                Ok(b) => {
                    return serde_json::from_slice(&b).map(Some).map_err(|_| {
                        std::io::Error::other(format!(
                            "{}: not a valid lease record",
                            path.display()
                        ))
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("{}: {e}", path.display()),
                    ))
                }
            }
        }
        Ok(None)
    }

    /// The runs with a lease not yet revoked (the start-up sweep's work).
    pub fn open_runs(&self) -> std::io::Result<Vec<String>> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut runs: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let run = name.strip_suffix(".json")?;
                crate::sandbox::spec::valid_run_id(run).then(|| run.to_string())
            })
            .collect();
        runs.sort();
        Ok(runs)
    }
}

/// tmp file (0600) + fsync + rename + fsync of the directory: a record is whole or absent.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return result;
    }
    sync_dir(dir);
    Ok(())
}

pub(crate) fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wants() -> Vec<Want> {
        vec![
            Want {
                kind: LeaseKind::Provider,
                name: "claude".into(),
                grants: "provider claude".into(),
            },
            Want {
                kind: LeaseKind::Connector,
                name: "web".into(),
                grants: "connector web".into(),
            },
            Want {
                kind: LeaseKind::Connector,
                name: "git".into(),
                grants: "connector git".into(),
            },
        ]
    }

    #[test]
    fn tokens_work_for_their_own_lease_until_revoked_or_expired() {
        let i = issue("r-20261201-00000001", "tess", &wants(), 1000, Some(5000)).unwrap();
        let ids: Vec<&str> = i.records.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "run/r-20261201-00000001/provider/1",
                "run/r-20261201-00000001/connector/1",
                "run/r-20261201-00000001/connector/2"
            ]
        );
        let t = i.tokens[0].expose();
        assert!(t.starts_with(TOKEN_PREFIX) && t.len() == TOKEN_PREFIX.len() + 48);
        assert_ne!(i.tokens[0], i.tokens[1]);
        assert_eq!(format!("{:?}", i.tokens[0]), "RunToken(<withheld>)");
        let p = LeaseKind::Provider;
        assert_eq!(i.live.check(p, "claude", t, 1001), Ok(ids[0]));
        assert_eq!(
            i.live.check(p, "codex", t, 1001),
            Err(TokenRefusal::Unknown)
        );
        assert_eq!(
            i.live.check(p, "claude", i.tokens[1].expose(), 1001),
            Err(TokenRefusal::Unknown),
            "a connector lease's token is not a provider token"
        );
        assert_eq!(
            i.live.check(p, "claude", &t[..t.len() - 1], 1001),
            Err(TokenRefusal::Unknown)
        );
        assert_eq!(
            i.live.check(p, "claude", t, 5000),
            Err(TokenRefusal::Expired)
        );
        assert!(i.live.usable(LeaseKind::Connector, "git", 1001).is_ok());
        i.live.revoke_all();
        assert_eq!(
            i.live.check(p, "claude", t, 1001),
            Err(TokenRefusal::Revoked)
        );
        assert_eq!(
            i.live.usable(LeaseKind::Connector, "git", 1001),
            Err(TokenRefusal::Revoked)
        );
    }

    #[test]
    fn the_store_keeps_open_runs_apart_until_every_lease_is_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let store = LeaseStore::new(dir.path());
        let run = "r-20261201-0000000a";
        let mut i = issue(run, "tess", &wants(), 1, None).unwrap();
        store.save(run, &i.records).unwrap();
        assert_eq!(store.open_runs().unwrap(), vec![run.to_string()]);
        assert_eq!(store.load(run).unwrap().unwrap(), i.records);
        let text =
            std::fs::read_to_string(dir.path().join("leases").join(format!("{run}.json"))).unwrap();
        for t in &i.tokens {
            assert!(!text.contains(t.expose()), "tokens are never written");
        }
        let changed = revoke(&mut i.records, 9, "the run ended", &mut |_| false);
        assert_eq!(changed.len(), 3);
        assert!(
            revoke(&mut i.records, 10, "again", &mut |_| true).is_empty(),
            "once only"
        );
        store.save(run, &i.records).unwrap();
        assert!(store.open_runs().unwrap().is_empty());
        let back = store.load(run).unwrap().unwrap();
        assert!(back.iter().all(|l| l.state == LeaseState::Revoked
            && l.revoked_at == Some(9)
            && l.revoke_reason.as_deref() == Some("the run ended")));
        assert!(store.load("r-20261201-0000000b").unwrap().is_none());
    }

    #[test]
    fn an_upstream_lease_stays_pending_until_its_revocation_is_confirmed() {
        let want = Want {
            kind: LeaseKind::Github,
            name: "github".into(),
            grants: "github".into(),
        };
        let mut i = issue("r-20261201-0000000c", "tess", &[want], 1, None).unwrap();
        let changed = revoke(&mut i.records, 5, "the run ended", &mut |_| false);
        assert_eq!(changed[0].state, LeaseState::RevokePending);
        // A failed retry changes nothing (no second record).
        assert!(revoke(&mut i.records, 6, "retry", &mut |_| false).is_empty());
        let changed = revoke(&mut i.records, 7, "retry", &mut |_| true);
        assert_eq!(changed[0].state, LeaseState::Revoked);
        assert_eq!(changed[0].revoked_at, Some(7));
    }
}
