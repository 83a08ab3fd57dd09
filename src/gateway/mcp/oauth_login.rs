//! An operator's login for a `grant: authorization_code` connector, done by airlockd
//! (`airlockctl connector login`; the admin group): discovery, dynamic client registration
//! (RFC 7591) when no client is configured, then the device authorization grant (RFC
//! 8628) when the server offers it, else the authorization code grant with PKCE S256 and a
//! loopback redirect URI whose URL the operator pastes back. The refresh token it ends with
//! is kept by airlockd ([`crate::credentials::oauth_grant`]) and never reaches airlockctl;
//! the access token becomes the one the connector's runs share. `connector logout` revokes
//! the refresh token at the server (RFC 7009) and forgets it.
//!
//! A login is two requests: `begin` answers what the operator must do and a login id;
//! `finish` (with the pasted URL, for the code grant) waits for the server and keeps the
//! grant. What is between them is held here, bounded in number and time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hyper::header::{CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::Method;
use serde_json::{json, Value};

use crate::credentials::oauth_grant::{self, Grant};
use crate::credentials::Secret;
use crate::gateway::mcp::oauth::{GrantPlan, TokenSource};
use crate::gateway::mcp::oauth_meta::{self as meta, ServerMeta, DEVICE_GRANT};

/// Logins begun and not finished, at most (a newer one pushes out the oldest).
const MAX_PENDING: usize = 16;
/// How long the code grant's pasted URL is waited for.
const CODE_LOGIN_TTL: Duration = Duration::from_secs(600);

enum Flow {
    Device {
        device_code: String,
        interval: Duration,
    },
    Code {
        verifier: String,
        state: String,
        redirect_uri: String,
    },
}

struct Pending {
    connector: String,
    source: Arc<TokenSource>,
    server: ServerMeta,
    client_id: String,
    /// A registered confidential client's secret.
    registered_secret: Option<String>,
    flow: Flow,
    expires: Instant,
}

fn pending() -> std::sync::MutexGuard<'static, HashMap<String, Pending>> {
    static ALL: OnceLock<Mutex<HashMap<String, Pending>>> = OnceLock::new();
    ALL.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn random_hex() -> Result<String, String> {
    crate::credentials::leases::random::<16>()
        .map(|b| b.iter().map(|x| format!("{x:02x}")).collect())
        .map_err(|e| format!("no random bytes from the kernel: {e}"))
}

fn nothing_to_log_in(connector: &str) -> String {
    format!(
        "connector {connector}: its grant is client_credentials: airlockd authorizes it itself, there is nothing to log in to"
    )
}

fn store_of(src: &TokenSource) -> Result<std::path::PathBuf, String> {
    match &src.plan.grant {
        GrantPlan::AuthorizationCode { store, .. } => Ok(store.clone()),
        GrantPlan::ClientCredentials => Err(nothing_to_log_in(&src.connector)),
    }
}

impl TokenSource {
    /// The client a login acts as: the configured secret, else the one registered with
    /// `client_id`, if any.
    fn login_client(&self, client_id: &str, registered: Option<&str>) -> (String, Option<Secret>) {
        let secret = self
            .plan
            .client_secret
            .clone()
            .or_else(|| registered.map(|s| Secret::new(s.to_string())));
        (client_id.to_string(), secret)
    }

    /// Discovery for a login: the 401 of a request without a token names the metadata
    /// (RFC 9728 §5.1); a server that does not say is asked at the default place.
    async fn discover_for_login(&self) -> Result<ServerMeta, String> {
        let probe = br#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#.to_vec();
        let challenge = match self.probe(probe).await {
            Ok((401, Some(c))) => Some(c),
            Ok(_) => None,
            Err(e) => return Err(e),
        };
        let server = self.discover(challenge.as_deref()).await?;
        self.state.lock().await.server = Some(server.clone());
        Ok(server)
    }

    /// An MCP request to the connector without a token: its status and challenge.
    async fn probe(&self, body: Vec<u8>) -> Result<(u16, Option<String>), String> {
        let origin = self.resource.origin();
        let req = hyper::Request::builder()
            .method(Method::POST)
            .uri(self.resource.url())
            .header(hyper::header::HOST, &self.resource.authority)
            .header(CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json, text/event-stream")
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .map_err(|_| format!("{origin}: the request could not be made"))?;
        let resp = tokio::time::timeout(Duration::from_secs(15), self.client.request(req))
            .await
            .map_err(|_| format!("{origin}: did not answer in time"))?
            .map_err(|_| {
                format!("{origin}: could not be reached (or its TLS certificate was refused)")
            })?;
        let challenge = resp
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Ok((resp.status().as_u16(), challenge))
    }

    /// RFC 7591: register airlockd as a public client of `server`.
    async fn register(
        &self,
        server: &ServerMeta,
        redirect_uri: &str,
        device: bool,
    ) -> Result<(String, Option<String>), String> {
        let at = server.registration_endpoint.as_ref().ok_or_else(|| {
            format!(
                "{}: mcp_connectors.{}.oauth has no client_id and the server offers no dynamic client registration (RFC 7591): register a client there and give its client_id",
                server.issuer.origin(),
                self.connector
            )
        })?;
        let mut grants = vec!["authorization_code", "refresh_token"];
        if device {
            grants.push(DEVICE_GRANT);
        }
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .filter(|h| h.bytes().all(|b| b.is_ascii_graphic()))
            .unwrap_or_default();
        let doc = json!({
            "client_name": format!("Airlock {host} ({})", self.connector),
            "redirect_uris": [redirect_uri],
            "grant_types": grants,
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "native",
        });
        let (status, body) = self
            .exchange(
                Method::POST,
                at,
                Some(("application/json", doc.to_string())),
                None,
            )
            .await?;
        meta::check_registration(status, &body, &at.origin())
    }

    /// Start a login: what the operator is to do (JSON for airlockctl) and its id.
    pub async fn begin_login(self: &Arc<Self>) -> Result<Value, String> {
        let GrantPlan::AuthorizationCode { redirect_uri, .. } = &self.plan.grant else {
            return Err(nothing_to_log_in(&self.connector));
        };
        let server = self.discover_for_login().await?;
        let origin = server.issuer.origin();
        let device = server
            .device_authorization_endpoint
            .clone()
            .filter(|_| server.offers(DEVICE_GRANT));
        let code = server
            .authorization_endpoint
            .clone()
            .filter(|_| server.pkce_s256 && server.offers("authorization_code"));
        // The device grant when offered (nothing to paste), else the code grant.
        let (at, use_device) = match (device, code) {
            (Some(at), _) => (at, true),
            (None, Some(at)) => (at, false),
            (None, None) => {
                return Err(format!(
                    "{origin}: offers neither the device authorization grant (RFC 8628) nor the authorization code grant with PKCE S256"
                ))
            }
        };
        let (client_id, registered_secret) = match &self.plan.client_id {
            Some(id) => (id.clone(), None),
            None => self.register(&server, redirect_uri, use_device).await?,
        };
        let login = random_hex()?;
        let (flow, life, answer) = match use_device {
            true => {
                let mut pairs = vec![("resource", self.resource_param())];
                let scope = self.plan.scopes.join(" ");
                if !scope.is_empty() {
                    pairs.push(("scope", scope));
                }
                let client = self.login_client(&client_id, registered_secret.as_deref());
                let (status, body) = self.token_request(&at, pairs, &client).await?;
                let d = meta::check_device_response(status, &body, &at.origin())?;
                let answer = json!({
                    "connector": self.connector, "login": login, "flow": "device",
                    "verification_uri": d.verification_uri,
                    "verification_uri_complete": d.verification_uri_complete,
                    "user_code": d.user_code, "expires_in": d.expires_in,
                });
                let flow = Flow::Device {
                    device_code: d.device_code,
                    interval: Duration::from_secs(d.interval),
                };
                (flow, Duration::from_secs(d.expires_in), answer)
            }
            false => {
                let random = crate::credentials::leases::random::<32>()
                    .map_err(|e| format!("no random bytes from the kernel: {e}"))?;
                let verifier = meta::pkce_verifier(random);
                let state = random_hex()?;
                let url = meta::authorization_url(
                    &at,
                    &client_id,
                    redirect_uri,
                    &self.plan.scopes,
                    &state,
                    &meta::pkce_challenge(&verifier),
                    &self.resource_param(),
                );
                let answer = json!({
                    "connector": self.connector, "login": login, "flow": "code",
                    "authorize_url": url, "redirect_uri": redirect_uri,
                    "expires_in": CODE_LOGIN_TTL.as_secs(),
                });
                let flow = Flow::Code {
                    verifier,
                    state,
                    redirect_uri: redirect_uri.clone(),
                };
                (flow, CODE_LOGIN_TTL, answer)
            }
        };
        let p = Pending {
            connector: self.connector.clone(),
            source: self.clone(),
            server,
            client_id,
            registered_secret,
            flow,
            expires: Instant::now() + life,
        };
        let mut all = pending();
        let now = Instant::now();
        all.retain(|_, p| p.expires > now);
        while all.len() >= MAX_PENDING {
            let Some(oldest) = all
                .iter()
                .min_by_key(|(_, p)| p.expires)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            all.remove(&oldest);
        }
        all.insert(login, p);
        Ok(answer)
    }

    /// Forget this connector's grant: revoked at the server first when it offers
    /// revocation (a grant the server did not revoke is kept, and said so).
    pub async fn logout(&self) -> Result<Value, String> {
        let store = store_of(self)?;
        let Some(g) = oauth_grant::load(&store)? else {
            for s in crate::gateway::mcp::oauth::sources_of(&self.connector) {
                s.drop_token().await;
            }
            return Ok(
                json!({"connector": self.connector, "forgotten": false, "revoked_at_server": false}),
            );
        };
        let known = self.state.lock().await.server.clone();
        let server = match known {
            Some(s) => s,
            None => self.discover_for_login().await?,
        };
        let mut revoked = false;
        if let Some(at) = &server.revocation_endpoint {
            if server.issuer.url() != g.issuer {
                return Err(format!(
                    "{}: is not the server this grant came from; it is kept (remove {} by hand once revoked there)",
                    server.issuer.origin(),
                    store.display()
                ));
            }
            let client = self.login_client(&g.client_id, g.client_secret.as_deref());
            let pairs = vec![
                ("token", g.refresh_token.clone()),
                ("token_type_hint", "refresh_token".to_string()),
            ];
            let (status, _) = self
                .token_request(at, pairs, &client)
                .await
                .map_err(|e| format!("{e}; the grant is kept, try again"))?;
            if status != 200 {
                return Err(format!(
                    "{}: its revocation endpoint answered HTTP {status}; the grant is kept, try again",
                    at.origin()
                ));
            }
            revoked = true;
        }
        let forgotten = oauth_grant::forget(&store)?;
        for s in crate::gateway::mcp::oauth::sources_of(&self.connector) {
            s.drop_token().await;
        }
        Ok(
            json!({"connector": self.connector, "forgotten": forgotten, "revoked_at_server": revoked}),
        )
    }

    /// What `connector status` shows of this connector: never a token.
    pub async fn status(&self) -> Value {
        let expires = self.access_expires_at_ms().await;
        let mut v = json!({
            "connector": self.connector,
            "url": self.resource.url(),
            "grant": match self.plan.grant {
                GrantPlan::ClientCredentials => "client_credentials",
                GrantPlan::AuthorizationCode { .. } => "authorization_code",
            },
            "access_token_expires_at_ms": expires,
        });
        if let GrantPlan::AuthorizationCode { store, .. } = &self.plan.grant {
            match oauth_grant::load(store) {
                Ok(Some(g)) => {
                    v["authorized"] = json!(true);
                    v["issuer"] = json!(g.issuer);
                    v["client_id"] = json!(g.client_id);
                    v["authorized_at_ms"] = json!(g.authorized_at_ms);
                    v["rotated_at_ms"] = json!(g.rotated_at_ms);
                }
                Ok(None) => v["authorized"] = json!(false),
                Err(e) => {
                    v["authorized"] = json!(false);
                    v["error"] = json!(e);
                }
            }
        } else {
            v["authorized"] = json!(expires.is_some());
        }
        v
    }
}

/// Finish login `login` of `connector`: wait for the operator's approval (device grant)
/// or take the pasted redirect URL (code grant), then keep the grant and share its access
/// token with the connector's runs.
pub async fn finish(
    connector: &str,
    login: &str,
    redirected: Option<&str>,
) -> Result<Value, String> {
    let p = {
        let mut all = pending();
        match all.remove(login) {
            Some(p) if p.connector == connector && p.expires > Instant::now() => p,
            Some(p) if p.connector != connector => {
                all.insert(login.to_string(), p);
                return Err(format!("login {login} is not of connector {connector}"));
            }
            _ => {
                return Err(format!(
                    "no login {login} is waiting (it expired or was finished): start again with `airlockctl connector login {connector}`"
                ))
            }
        }
    };
    let src = p.source.clone();
    let store = store_of(&src)?;
    let endpoint = p.server.token_endpoint.clone();
    let client = src.login_client(&p.client_id, p.registered_secret.as_deref());
    let issued;
    let answer = match &p.flow {
        Flow::Code {
            verifier,
            state,
            redirect_uri,
        } => {
            let pasted = redirected.ok_or_else(|| {
                "this login is the authorization code grant: paste the URL the browser was sent to".to_string()
            })?;
            let code =
                match meta::code_of_redirect(pasted, redirect_uri, state, &p.server.issuer.url()) {
                    Ok(c) => c,
                    Err(e) => {
                        // A wrong paste does not end the login: the right one may follow.
                        pending().insert(login.to_string(), p);
                        return Err(e);
                    }
                };
            let pairs = vec![
                ("grant_type", "authorization_code".to_string()),
                ("code", code),
                ("redirect_uri", redirect_uri.clone()),
                ("code_verifier", verifier.clone()),
                ("resource", src.resource_param()),
            ];
            issued = Instant::now();
            let (status, body) = src.token_request(&endpoint, pairs, &client).await?;
            meta::check_token_response(status, &body, &endpoint.origin())?
        }
        Flow::Device {
            device_code,
            interval,
        } => {
            let mut every = *interval;
            loop {
                if Instant::now() + every > p.expires {
                    return Err(format!(
                        "the login was not approved before its code expired: start again with `airlockctl connector login {connector}`"
                    ));
                }
                tokio::time::sleep(every).await;
                let pairs = vec![
                    ("grant_type", DEVICE_GRANT.to_string()),
                    ("device_code", device_code.clone()),
                    ("resource", src.resource_param()),
                ];
                let at = Instant::now();
                let (status, body) = src.token_request(&endpoint, pairs, &client).await?;
                if (200..300).contains(&status) {
                    issued = at;
                    break meta::check_token_response(status, &body, &endpoint.origin())?;
                }
                match meta::error_code(&body).as_deref() {
                    Some("authorization_pending") => {}
                    Some("slow_down") => every += Duration::from_secs(5),
                    Some("access_denied") => return Err("the login was denied at the authorization server".into()),
                    Some("expired_token") => {
                        return Err(format!(
                            "the login was not approved before its code expired: start again with `airlockctl connector login {connector}`"
                        ))
                    }
                    _ => {
                        return Err(meta::check_token_response(status, &body, &endpoint.origin())
                            .err()
                            .unwrap_or_default())
                    }
                }
            }
        }
    };
    let Some(refresh_token) = answer.refresh_token.clone() else {
        return Err(format!(
            "{}: gave no refresh token, so airlockd could not renew the access token; let the client have the refresh_token grant (or ask for the scope the server gives it for, often offline_access)",
            endpoint.origin()
        ));
    };
    let now = crate::clock::now_ms();
    let grant = Grant {
        issuer: p.server.issuer.url(),
        client_id: p.client_id.clone(),
        client_secret: p.registered_secret.clone(),
        refresh_token,
        authorized_at_ms: now,
        rotated_at_ms: now,
    };
    oauth_grant::save(&store, &grant)?;
    // Every source of the connector drops what it had; this one starts with the new token.
    for s in crate::gateway::mcp::oauth::sources_of(connector) {
        s.drop_token().await;
    }
    let expires_in = answer.expires_in;
    {
        let mut st = src.state.lock().await;
        st.server = Some(p.server.clone());
        src.keep(&mut st, answer, issued)?;
    }
    Ok(
        json!({"connector": connector, "authorized": true, "access_expires_in": expires_in, "client_id": p.client_id}),
    )
}
