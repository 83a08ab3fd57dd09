//! Each host's Ed25519 key: made at its first start with a fleet store
//! (`state_dir/fleet/host-key.pk8`, PKCS#8, 0600), its public half registered in
//! `airlock_hosts.public_key`. Every record a host writes to the ledgers' mirror is signed,
//! so `verify-ledger --fleet` can tell a host's own rows from rows another host (or anyone
//! with database access) wrote under its name, even with a valid hash chain.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};

/// One host's signing key.
pub struct HostKey {
    pair: Ed25519KeyPair,
}

/// Where a host keeps its key.
pub fn key_path(state_dir: &Path) -> PathBuf {
    state_dir.join("fleet").join("host-key.pk8")
}

/// What a row's signature covers: the host, the record's place and its hash (which covers
/// its line and, through `prev`, every record before it).
fn message(host_id: &str, seq: u64, hash: &str) -> Vec<u8> {
    format!("airlock ledger mirror v1\n{host_id}\n{seq}\n{hash}").into_bytes()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

impl HostKey {
    /// A new key, kept nowhere (tests, and [`HostKey::load_or_create`]'s first start).
    pub fn generate() -> Result<(HostKey, Vec<u8>), String> {
        let rng = ring::rand::SystemRandom::new();
        let doc = Ed25519KeyPair::generate_pkcs8(&rng)
            .map_err(|_| "cannot make an Ed25519 key (no randomness?)".to_string())?;
        let pair = Ed25519KeyPair::from_pkcs8(doc.as_ref())
            .map_err(|_| "cannot read the Ed25519 key just made".to_string())?;
        Ok((HostKey { pair }, doc.as_ref().to_vec()))
    }

    /// This host's key from `state_dir`, made (and fsync'd) at the first start. A key file
    /// others can read or that is not root's is refused, naming it.
    pub fn load_or_create(state_dir: &Path) -> Result<HostKey, String> {
        let path = key_path(state_dir);
        let say = |what: &str, p: &Path, e: std::io::Error| format!("{what} {}: {e}", p.display());
        match fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(mut f) => {
                let meta = f.metadata().map_err(|e| say("cannot read", &path, e))?;
                if meta.mode() & 0o077 != 0 || meta.uid() != nix::unistd::geteuid().as_raw() {
                    return Err(format!(
                        "{}: this host's fleet signing key must be owned by airlockd's user and mode 0600",
                        path.display()
                    ));
                }
                let mut doc = Vec::new();
                f.read_to_end(&mut doc)
                    .map_err(|e| say("cannot read", &path, e))?;
                let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&doc).map_err(|_| {
                    format!(
                        "{}: not an Ed25519 key in PKCS#8 (this host's fleet signing key)",
                        path.display()
                    )
                })?;
                Ok(HostKey { pair })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let (key, doc) = HostKey::generate()?;
                let dir = path.parent().unwrap_or(state_dir);
                super::private_file::write(dir, &path, &doc)?;
                Ok(key)
            }
            Err(e) => Err(say("cannot read", &path, e)),
        }
    }

    /// The public half, as registered (hex).
    pub fn public_hex(&self) -> String {
        hex(self.pair.public_key().as_ref())
    }

    /// The signature of record `seq` (hash `hash`) of `host_id`'s ledger (hex).
    pub fn sign(&self, host_id: &str, seq: u64, hash: &str) -> String {
        hex(self.pair.sign(&message(host_id, seq, hash)).as_ref())
    }
}

/// Whether `sig` (hex) is `public` (hex)'s signature of record `seq` with `hash` of
/// `host_id`. Pure; anything malformed is `false`.
pub fn verify(public: &str, host_id: &str, seq: u64, hash: &str, sig: &str) -> bool {
    let (Some(pk), Some(sig)) = (unhex(public), unhex(sig)) else {
        return false;
    };
    UnparsedPublicKey::new(&ED25519, pk)
        .verify(&message(host_id, seq, hash), &sig)
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_binds_host_seq_and_hash() {
        let (k, _) = HostKey::generate().unwrap();
        let (other, _) = HostKey::generate().unwrap();
        let pk = k.public_hex();
        let s = k.sign("node-a", 3, "abc");
        assert!(verify(&pk, "node-a", 3, "abc", &s));
        assert!(!verify(&pk, "node-b", 3, "abc", &s));
        assert!(!verify(&pk, "node-a", 4, "abc", &s));
        assert!(!verify(&pk, "node-a", 3, "abd", &s));
        assert!(!verify(&other.public_hex(), "node-a", 3, "abc", &s));
        assert!(!verify(&pk, "node-a", 3, "abc", "zz"));
        assert!(!verify("", "node-a", 3, "abc", &s));
    }

    #[test]
    fn the_key_is_made_once_0600_and_read_back() {
        let d = tempfile::tempdir().unwrap();
        let a = HostKey::load_or_create(d.path()).unwrap();
        let b = HostKey::load_or_create(d.path()).unwrap();
        assert_eq!(a.public_hex(), b.public_hex());
        let mode = fs::metadata(key_path(d.path())).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(key_path(d.path()), fs::Permissions::from_mode(0o644)).unwrap();
        let e = HostKey::load_or_create(d.path()).err().unwrap();
        assert!(e.contains("0600"), "{e}");
    }
}
