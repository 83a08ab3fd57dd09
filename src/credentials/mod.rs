//! The secrets airlockd holds (MCP connector credentials; model provider keys and the
//! GitHub App key come with the credentials issue). A secret is read from a root-only file
//! or a systemd credential when a run needs it, kept in airlockd's memory, and sent only
//! upstream by the run's gateway: never to the jail, a log, the journal, the ledger or an
//! error message ([`Secret`]'s Debug and Display say nothing of it).

pub mod github_app;
pub mod leases;
pub mod oauth_grant;

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use crate::config::CredentialSource;

/// Largest secret read.
pub const MAX_SECRET_BYTES: u64 = 64 << 10;

/// A secret's bytes, never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret obtained at run time (an OAuth grant), not read from the config.
    pub fn new(s: String) -> Secret {
        Secret(s)
    }

    /// The secret itself, for the one place that sends it upstream.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<withheld>)")
    }
}

/// Read credential `name` from where the config says. Errors name the credential and the
/// file and say what to change; never the contents.
pub fn read(name: &str, src: &CredentialSource) -> Result<Secret, String> {
    let (text, path) = read_text(name, src)?;
    let secret = text.trim_end_matches(['\n', '\r']);
    if secret.is_empty() || secret.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(format!(
            "credentials.{name}: {}: must be one line of printable text",
            path.display()
        ));
    }
    Ok(Secret(secret.to_string()))
}

/// Read credential `name` as a PEM document (several lines: the GitHub App's key), with
/// the same checks on the file as [`read`].
pub fn read_pem(name: &str, src: &CredentialSource) -> Result<Secret, String> {
    let (text, path) = read_text(name, src)?;
    if !text.contains("-----BEGIN ")
        || text
            .bytes()
            .any(|b| b != b'\n' && b != b'\r' && (b < 0x20 || b == 0x7f))
    {
        return Err(format!(
            "credentials.{name}: {}: must be a PEM private key (-----BEGIN RSA PRIVATE KEY-----)",
            path.display()
        ));
    }
    Ok(Secret(text))
}

fn read_text(name: &str, src: &CredentialSource) -> Result<(String, PathBuf), String> {
    let path = match src {
        CredentialSource::File(p) => p.clone(),
        CredentialSource::Systemd(n) => match std::env::var_os("CREDENTIALS_DIRECTORY") {
            Some(d) => PathBuf::from(d).join(n),
            None => {
                return Err(format!(
                    "credentials.{name}: a systemd credential, but airlockd was started without $CREDENTIALS_DIRECTORY (add LoadCredential={n}:FILE to its unit)"
                ))
            }
        },
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("credentials.{name}: {}: {}", path.display(), e.kind()))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("credentials.{name}: {}: {}", path.display(), e.kind()))?;
    if !meta.is_file() {
        return Err(format!(
            "credentials.{name}: {}: not a regular file",
            path.display()
        ));
    }
    if meta.uid() != 0 || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "credentials.{name}: {}: anyone but root may read it (owner uid {}, mode {:o}); chown root and chmod 0600 it, and rotate the secret if others could have read it",
            path.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    let mut bytes = Vec::new();
    f.take(MAX_SECRET_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("credentials.{name}: {}: {}", path.display(), e.kind()))?;
    if bytes.len() as u64 > MAX_SECRET_BYTES {
        return Err(format!(
            "credentials.{name}: {}: larger than {MAX_SECRET_BYTES} bytes",
            path.display()
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| format!("credentials.{name}: {}: not UTF-8 text", path.display()))?;
    Ok((text, path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_secret_anyone_else_may_read_is_refused_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "s3cr3t-value\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let src = CredentialSource::File(f.clone());
        let e = read("x", &src).unwrap_err();
        assert!(e.contains("anyone but root may read it"), "{e}");
        assert!(!e.contains("s3cr3t"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        if nix::unistd::geteuid().is_root() {
            let s = read("x", &src).unwrap();
            assert_eq!(s.expose(), "s3cr3t-value");
            assert_eq!(format!("{s:?}"), "Secret(<withheld>)");
        }
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert!(read("x", &CredentialSource::File(link)).is_err());
    }
}
