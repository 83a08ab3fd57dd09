//! `credentials`: the secrets airlockd holds, by name, and where each is read from (a
//! root-only file or a systemd credential).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_yaml::Value;

use super::Parser;
use crate::diag::key;

/// A credential's name: `[A-Za-z0-9_.-]{1,64}`, not `.` or `..`.
pub fn credential_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Where a secret is read from: a root-only file, or a systemd credential
/// (`LoadCredential=NAME`, read from `$CREDENTIALS_DIRECTORY/NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    File(PathBuf),
    Systemd(String),
}

impl Parser<'_> {
    pub(super) fn credentials(&mut self, v: &Value) -> BTreeMap<String, CredentialSource> {
        let mut out = BTreeMap::new();
        let Some(m) = self.mapping(v, "credentials", &[]) else {
            return out;
        };
        for (k, v) in m {
            let Some(name) = k.as_str().filter(|n| credential_name(n)) else {
                self.problem(
                    &key("credentials", "<invalid name>"),
                    "credential names are [A-Za-z0-9_.-]{1,64}",
                );
                continue;
            };
            let at = key("credentials", name);
            // Never echo the value: an operator may have pasted the secret itself.
            if v.as_str()
                .is_some_and(|s| crate::secret_shapes::find_secret(s).is_some())
            {
                self.problem(
                    &at,
                    "looks like a secret itself; put the secret in a root-only file and name the file here",
                );
                continue;
            }
            match v.as_str() {
                Some(s) if s.starts_with('/') && !s.contains('\0') => {
                    out.insert(name.to_string(), CredentialSource::File(PathBuf::from(s)));
                }
                Some(s) if credential_name(s) => {
                    out.insert(name.to_string(), CredentialSource::Systemd(s.to_string()));
                }
                _ => self.problem(
                    &at,
                    "must be an absolute path to a root-only file, or the name of a systemd credential (LoadCredential=NAME)",
                ),
            }
        }
        out
    }

    /// `<at>.credential`: absent, or the name of a `credentials` entry.
    pub(super) fn credential_ref(
        &mut self,
        at: &str,
        v: Option<&Value>,
        credentials: &BTreeMap<String, CredentialSource>,
    ) -> Result<Option<String>, ()> {
        match v {
            None => Ok(None),
            Some(Value::String(c)) if credentials.contains_key(c) => Ok(Some(c.clone())),
            Some(_) => {
                self.problem(&key(at, "credential"), "must name an entry of credentials");
                Err(())
            }
        }
    }
}
