//! `providers`: where a run's model traffic goes, by `run.provider`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_yaml::Value;

use super::credentials::CredentialSource;
use super::Parser;
use crate::diag::key;

/// A model provider's endpoint, as airlockd's config declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConf {
    /// `https://HOST[:PORT][/BASE]`, or `http://` to this host only.
    pub url: String,
    /// A `credentials` name: the provider's key, sent only to `url`.
    pub credential: Option<String>,
    /// PEM CA certificates trusted for `url` instead of the system's (a private gateway).
    pub ca_file: Option<PathBuf>,
}

/// The providers a role's `run.provider` may name.
pub const PROVIDER_NAMES: &[&str] = &["claude", "codex"];

const PROVIDER_KEYS: &[&str] = &["url", "credential", "ca_file"];

impl Parser<'_> {
    pub(super) fn providers(
        &mut self,
        v: &Value,
        credentials: &BTreeMap<String, CredentialSource>,
    ) -> BTreeMap<String, ProviderConf> {
        let mut out = BTreeMap::new();
        let Some(m) = self.mapping(v, "providers", PROVIDER_NAMES) else {
            return out;
        };
        for (k, v) in m {
            let Some(name) = k.as_str() else { continue };
            let at = key("providers", name);
            let Some(c) = self.mapping(v, &at, PROVIDER_KEYS) else {
                continue;
            };
            let get = |k: &str| c.get(Value::from(k));
            let Ok(credential) = self.credential_ref(&at, get("credential"), credentials) else {
                continue;
            };
            let url = match get("url").and_then(Value::as_str) {
                Some(u) => match crate::urls::ProviderUrl::parse(u) {
                    Ok(_) => u.to_string(),
                    Err(why) => {
                        self.problem(&key(&at, "url"), why);
                        continue;
                    }
                },
                None => {
                    self.problem(
                        &key(&at, "url"),
                        "required: the provider's API base, https://HOST[:PORT][/PATH]",
                    );
                    continue;
                }
            };
            let ca_file = match get("ca_file") {
                None => None,
                Some(Value::String(p)) if p.starts_with('/') && !p.contains('\0') => {
                    Some(PathBuf::from(p))
                }
                Some(_) => {
                    self.problem(
                        &key(&at, "ca_file"),
                        "must be an absolute path to a PEM file of CA certificates",
                    );
                    continue;
                }
            };
            out.insert(
                name.to_string(),
                ProviderConf {
                    url,
                    credential,
                    ca_file,
                },
            );
        }
        out
    }
}
