//! `github`: the organization's Airlock GitHub App.

use std::collections::BTreeMap;

use serde_yaml::Value;

use super::credentials::CredentialSource;
use super::Parser;
use crate::diag::key;

/// The GitHub App airlockd mints installation tokens with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubConf {
    pub api_url: String,
    pub git_url: String,
    pub app_id: u64,
    /// A `credentials` name: the App's private key (PEM).
    pub private_key: String,
    /// Owner -> installation id, where configured (looked up otherwise).
    pub installations: BTreeMap<String, u64>,
}

const GITHUB_KEYS: &[&str] = &[
    "api_url",
    "git_url",
    "app_id",
    "private_key",
    "installations",
];

impl Parser<'_> {
    pub(super) fn github(
        &mut self,
        v: &Value,
        credentials: &BTreeMap<String, CredentialSource>,
    ) -> Option<GithubConf> {
        let m = self.mapping(v, "github", GITHUB_KEYS)?;
        let get = |k: &str| m.get(Value::from(k));
        let url = |p: &mut Self, k: &str, default: &str| -> Option<String> {
            match get(k) {
                None => Some(default.to_string()),
                Some(Value::String(u)) if crate::urls::ProviderUrl::parse(u).is_ok() => {
                    Some(u.trim_end_matches('/').to_string())
                }
                Some(_) => {
                    p.problem(
                        &key("github", k),
                        "must be an https:// URL (or http:// to this host)",
                    );
                    None
                }
            }
        };
        let api_url = url(self, "api_url", "https://api.github.com");
        let git_url = url(self, "git_url", "https://github.com");
        let app_id = match get("app_id").and_then(Value::as_u64) {
            Some(n) if n > 0 => Some(n),
            _ => {
                self.problem(&key("github", "app_id"), "required: the App's numeric id");
                None
            }
        };
        let private_key = match get("private_key") {
            Some(Value::String(c)) if credentials.contains_key(c) => Some(c.clone()),
            _ => {
                self.problem(
                    &key("github", "private_key"),
                    "required: the name of the credentials entry holding the App's private key",
                );
                None
            }
        };
        let mut installations = BTreeMap::new();
        if let Some(v) = get("installations") {
            if let Some(im) = self.mapping(v, &key("github", "installations"), &[]) {
                for (k, v) in im {
                    match (k.as_str(), v.as_u64()) {
                        (Some(owner), Some(id))
                            if id > 0 && crate::secret_shapes::is_plain_key(owner) =>
                        {
                            installations.insert(owner.to_string(), id);
                        }
                        _ => self.problem(
                            &key("github", "installations"),
                            "maps an owner (user or organization) to its installation id",
                        ),
                    }
                }
            }
        }
        Some(GithubConf {
            api_url: api_url?,
            git_url: git_url?,
            app_id: app_id?,
            private_key: private_key?,
            installations,
        })
    }
}
