//! `mcp_connectors`: each connector's upstream (streamable HTTP, or a stdio server in a jail
//! of its own), its credential or OAuth client.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_yaml::Value;

use super::credentials::CredentialSource;
use super::Parser;
use crate::diag::key;
use crate::names::valid_name;

/// An environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
fn env_name(n: &str) -> bool {
    !n.is_empty()
        && !n.starts_with(|c: char| c.is_ascii_digit())
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn header_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// One MCP connector's upstream, as airlockd's config declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorConf {
    pub upstream: UpstreamConf,
    /// A `credentials` name sent only upstream.
    pub credential: Option<String>,
    /// OAuth 2.1 instead of a static credential (a URL upstream only).
    pub oauth: Option<OAuthConf>,
}

/// `mcp_connectors.<name>.oauth`: the client airlockd is at the connector's authorization
/// server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthConf {
    /// Pre-registered; `None`: registered at `airlockctl connector login` (RFC 7591).
    pub client_id: Option<String>,
    /// A `credentials` name: a confidential client's secret.
    pub client_secret: Option<String>,
    pub grant: OAuthGrant,
    pub scopes: Vec<String>,
    /// Where the authorization code grant's browser is sent back to (a loopback URL,
    /// nothing listens there: the operator pastes the URL it was sent to).
    pub redirect_uri: String,
    /// The authorization server discovery must arrive at (its RFC 8414 `issuer`): the
    /// only one the client's secret goes to, and the only one outside the public internet
    /// token requests may reach. Required for `client_credentials` with a `client_secret`.
    pub issuer: Option<String>,
}

/// How airlockd gets a connector's access tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OAuthGrant {
    /// An operator authorizes once (`airlockctl connector login`); airlockd keeps the
    /// refresh token.
    AuthorizationCode,
    /// Machine to machine: the client's own credentials.
    ClientCredentials,
}

/// The redirect URI of the authorization code grant when the config names none.
pub const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1:8976/callback";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamConf {
    /// A streamable-HTTP MCP endpoint (`https://host[:port]/path`, or `http://` to this
    /// host only); the credential goes in `header`: `Authorization` (as `Bearer <secret>`,
    /// the default) or another name (as is). `ca_file`: PEM CAs trusted for an https
    /// upstream instead of the system's.
    Url {
        url: String,
        header: String,
        ca_file: Option<PathBuf>,
    },
    /// A stdio MCP server, started for each run in a jail of its own as `uid` (never root,
    /// never the instance's); the credential, if any, in its environment as `credential_env`.
    Command {
        argv: Vec<String>,
        uid: u32,
        credential_env: Option<String>,
        /// More environment for it (no secrets: those go through `credential`).
        env: Vec<(String, String)>,
    },
}

const CONNECTOR_KEYS: &[&str] = &[
    "url",
    "ca_file",
    "oauth",
    "command",
    "credential",
    "header",
    "credential_env",
    "uid",
    "env",
];

impl Parser<'_> {
    pub(super) fn connectors(
        &mut self,
        v: &Value,
        credentials: &BTreeMap<String, CredentialSource>,
    ) -> BTreeMap<String, ConnectorConf> {
        let mut out = BTreeMap::new();
        let Some(m) = self.mapping(v, "mcp_connectors", &[]) else {
            return out;
        };
        for (k, v) in m {
            let Some(name) = k.as_str().filter(|n| valid_name(n)) else {
                self.problem(
                    &key("mcp_connectors", "<invalid name>"),
                    "connector names match [a-z][a-z0-9_-]{0,31}",
                );
                continue;
            };
            let at = key("mcp_connectors", name);
            let Some(c) = self.mapping(v, &at, CONNECTOR_KEYS) else {
                continue;
            };
            let get = |k: &str| c.get(Value::from(k));
            let Ok(credential) = self.credential_ref(&at, get("credential"), credentials) else {
                continue;
            };
            if let Some(cmd) = get("command") {
                if get("oauth").is_some() {
                    self.problem(&key(&at, "oauth"), "only for a url connector");
                    continue;
                }
                if let Some(upstream) = self.command_upstream(&at, c, cmd, credential.is_some()) {
                    out.insert(
                        name.to_string(),
                        ConnectorConf {
                            upstream,
                            credential,
                            oauth: None,
                        },
                    );
                }
                continue;
            }
            let oauth = match get("oauth") {
                None => None,
                Some(_) if credential.is_some() => {
                    self.problem(
                        &key(&at, "oauth"),
                        "a connector has either a static credential or oauth",
                    );
                    continue;
                }
                Some(v) => match self.oauth(&key(&at, "oauth"), v, credentials) {
                    Some(o) => Some(o),
                    None => continue,
                },
            };
            let Some(url) = self.upstream_url(&at, get("url")) else {
                continue;
            };
            let ca_file = match get("ca_file") {
                None => None,
                Some(_) if !url.starts_with("https://") => {
                    self.problem(&key(&at, "ca_file"), "only for an https:// url");
                    continue;
                }
                Some(v) => match self.ca_file(&at, v) {
                    Some(p) => Some(p),
                    None => continue,
                },
            };
            let header = match get("header") {
                None => "Authorization".to_string(),
                Some(Value::String(h)) if header_name(h) => h.clone(),
                Some(_) => {
                    self.problem(
                        &key(&at, "header"),
                        "must be an HTTP header name (letters, digits and -)",
                    );
                    continue;
                }
            };
            out.insert(
                name.to_string(),
                ConnectorConf {
                    upstream: UpstreamConf::Url {
                        url,
                        header,
                        ca_file,
                    },
                    credential,
                    oauth,
                },
            );
        }
        out
    }

    /// `oauth: {client_id?, client_secret?, grant?, scopes?, redirect_uri?, issuer?}` at `at`.
    pub(super) fn oauth(
        &mut self,
        at: &str,
        v: &Value,
        credentials: &BTreeMap<String, CredentialSource>,
    ) -> Option<OAuthConf> {
        let m = self.mapping(
            v,
            at,
            &[
                "client_id",
                "client_secret",
                "grant",
                "scopes",
                "redirect_uri",
                "issuer",
            ],
        )?;
        let get = |k: &str| m.get(Value::from(k));
        let grant = match get("grant").map(|g| g.as_str()) {
            Some(Some("client_credentials")) => OAuthGrant::ClientCredentials,
            None | Some(Some("authorization_code")) => OAuthGrant::AuthorizationCode,
            Some(_) => {
                self.problem(
                    &key(at, "grant"),
                    "must be authorization_code (the default: airlockctl connector login) or client_credentials",
                );
                return None;
            }
        };
        let client_id = match get("client_id") {
            None if grant == OAuthGrant::AuthorizationCode => None,
            Some(Value::String(id))
                if !id.is_empty()
                    && id.len() <= 256
                    && id.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Some(id.to_string())
            }
            None => {
                self.problem(
                    &key(at, "client_id"),
                    "required with grant: client_credentials: the client's id at the authorization server",
                );
                return None;
            }
            Some(_) => {
                self.problem(
                    &key(at, "client_id"),
                    "must be the client's id at the authorization server, printable ASCII (leave it out to register at login, RFC 7591)",
                );
                return None;
            }
        };
        let redirect_uri = match get("redirect_uri") {
            None => DEFAULT_REDIRECT_URI.to_string(),
            Some(Value::String(u))
                if crate::urls::parse_http_url(u).is_some_and(|p| !p.https && p.is_loopback())
                    && !crate::urls::has_userinfo(u)
                    && !u.contains(['?', '#']) =>
            {
                u.clone()
            }
            Some(_) => {
                self.problem(
                    &key(at, "redirect_uri"),
                    "must be a loopback http URL without a query (http://127.0.0.1:PORT/PATH)",
                );
                return None;
            }
        };
        let client_secret = match get("client_secret") {
            None => None,
            Some(Value::String(n)) if credentials.contains_key(n) => Some(n.clone()),
            Some(_) => {
                self.problem(
                    &key(at, "client_secret"),
                    "must name an entry in credentials",
                );
                return None;
            }
        };
        let scopes = match get("scopes") {
            None => Vec::new(),
            Some(v) => {
                let list: Option<Vec<String>> = v.as_sequence().and_then(|s| {
                    s.iter()
                        .map(|x| {
                            x.as_str()
                                .filter(|t| {
                                    !t.is_empty()
                                        && t.bytes().all(|b| {
                                            b.is_ascii_graphic() && b != b'"' && b != b'\\'
                                        })
                                })
                                .map(str::to_string)
                        })
                        .collect()
                });
                match list {
                    Some(l) => l,
                    None => {
                        self.problem(
                            &key(at, "scopes"),
                            "must be a list of scope names (printable ASCII, no spaces)",
                        );
                        return None;
                    }
                }
            }
        };
        let issuer = match get("issuer") {
            None => None,
            Some(Value::String(u))
                if crate::urls::endpoint_url(u).is_some()
                    && !crate::urls::has_userinfo(u)
                    && !u.contains(['?', '#']) =>
            {
                Some(u.clone())
            }
            Some(_) => {
                self.problem(
                    &key(at, "issuer"),
                    "must be the authorization server's issuer URL (https, or http on this host), without a user, query or fragment",
                );
                return None;
            }
        };
        if grant == OAuthGrant::ClientCredentials && client_secret.is_some() && issuer.is_none() {
            self.problem(
                &key(at, "issuer"),
                "required with grant: client_credentials and a client_secret: the authorization server (its issuer URL) the secret may be sent to; otherwise the connector's server would choose it",
            );
            return None;
        }
        if grant == OAuthGrant::ClientCredentials && get("redirect_uri").is_some() {
            self.problem(
                &key(at, "redirect_uri"),
                "only the authorization_code grant has a redirect URI",
            );
            return None;
        }
        Some(OAuthConf {
            client_id,
            client_secret,
            grant,
            scopes,
            redirect_uri,
            issuer,
        })
    }

    /// A connector's `url`: https, or plain http to this host. A URL with a user or
    /// password in it is refused without being repeated (it is likely a secret).
    pub(super) fn upstream_url(&mut self, at: &str, v: Option<&Value>) -> Option<String> {
        use crate::urls::{has_userinfo, parse_http_url};
        let at = key(at, "url");
        let u = match v.and_then(Value::as_str) {
            Some(u) => u,
            None => {
                self.problem(
                    &at,
                    "required: the upstream's streamable-HTTP endpoint, https://HOST[:PORT]/PATH (or http:// to this host)",
                );
                return None;
            }
        };
        if has_userinfo(u) {
            self.problem(
                &at,
                "must not carry a user or password (not repeated here): put the token in credentials and name it in credential",
            );
            return None;
        }
        match parse_http_url(u) {
            Some(p) if p.https || p.is_loopback() => Some(u.to_string()),
            Some(_) => {
                self.problem(
                    &at,
                    "plain http goes only to this host (127.0.0.1, ::1, localhost): a credential must not cross a network in clear; use https://",
                );
                None
            }
            None => {
                self.problem(
                    &at,
                    "must be https://HOST[:PORT]/PATH (or http:// to this host), without query or fragment",
                );
                None
            }
        }
    }

    /// A `ca_file` at `at`: an absolute path to a regular file that only root (or airlockd's
    /// own user) can write, since whoever writes it decides which servers are trusted.
    pub(super) fn ca_file(&mut self, at: &str, v: &Value) -> Option<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        let at = key(at, "ca_file");
        let p = match v {
            Value::String(p) if p.starts_with('/') && !p.contains('\0') => PathBuf::from(p),
            _ => {
                self.problem(
                    &at,
                    "must be an absolute path to a PEM file of CA certificates",
                );
                return None;
            }
        };
        let meta = match std::fs::metadata(&p) {
            Ok(m) => m,
            Err(e) => {
                self.problem(&at, &format!("{}: {}", p.display(), e.kind()));
                return None;
            }
        };
        let owner_ok = meta.uid() == 0 || meta.uid() == nix::unistd::geteuid().as_raw();
        if !meta.is_file() || !owner_ok || meta.mode() & 0o022 != 0 {
            self.problem(
                &at,
                &format!(
                    "{}: others may write it (owner uid {}, mode {:o}), and so choose which servers are trusted; chown root and chmod 0644 it",
                    p.display(),
                    meta.uid(),
                    meta.mode() & 0o7777
                ),
            );
            return None;
        }
        Some(p)
    }

    /// `command`, `uid` and `credential_env` of a stdio connector at `at`.
    pub(super) fn command_upstream(
        &mut self,
        at: &str,
        c: &serde_yaml::Mapping,
        cmd: &Value,
        has_credential: bool,
    ) -> Option<UpstreamConf> {
        let get = |k: &str| c.get(Value::from(k));
        for k in ["url", "header", "ca_file"] {
            if get(k).is_some() {
                self.problem(&key(at, k), "a connector has either url or command");
                return None;
            }
        }
        let argv: Option<Vec<String>> = cmd.as_sequence().and_then(|items| {
            items
                .iter()
                .map(|v| v.as_str().filter(|s| !s.contains('\0')).map(str::to_string))
                .collect()
        });
        let argv = match argv {
            Some(a) if a.first().is_some_and(|p| p.starts_with('/')) => a,
            _ => {
                self.problem(
                    &key(at, "command"),
                    "must be a list of strings, the program first as an absolute path",
                );
                return None;
            }
        };
        let uid = match get("uid").and_then(Value::as_u64) {
            Some(n) if (1000..1 << 31).contains(&n) && n != 65534 => n as u32,
            _ => {
                self.problem(
                    &key(at, "uid"),
                    "required for a command: the uid its jail runs as, from 1000 to 2147483647, not nobody, and no instance's",
                );
                return None;
            }
        };
        let credential_env = match get("credential_env") {
            None => None,
            Some(Value::String(n)) if has_credential && env_name(n) => Some(n.clone()),
            Some(_) => {
                self.problem(
                    &key(at, "credential_env"),
                    "an environment variable name ([A-Za-z_][A-Za-z0-9_]*), and only with credential",
                );
                return None;
            }
        };
        let mut env = Vec::new();
        if let Some(v) = get("env") {
            let at = key(at, "env");
            let m = self.mapping(v, &at, &[])?;
            for (k, v) in m {
                let name = k.as_str().filter(|n| env_name(n));
                match (name, v.as_str()) {
                    (Some(n), Some(val)) if !val.contains('\0') => {
                        if crate::secret_shapes::find_secret(val).is_some() {
                            self.problem(
                                &key(&at, n),
                                "looks like a secret; give it as the connector's credential (credential_env)",
                            );
                            return None;
                        }
                        env.push((n.to_string(), val.to_string()));
                    }
                    _ => {
                        self.problem(&at, "names are [A-Za-z_][A-Za-z0-9_]*, values strings");
                        return None;
                    }
                }
            }
        }
        Some(UpstreamConf::Command {
            argv,
            uid,
            credential_env,
            env,
        })
    }
}
