//! A connector's OAuth 2.1 client: discovery from the upstream's 401 (its
//! `resource_metadata`, RFC 9728, then the authorization server's RFC 8414 or OpenID
//! metadata, [`crate::gateway::mcp::oauth_meta`]), a token request with the connector's URL as
//! `resource` (RFC 8707), and one access token per connector in this process, shared by its
//! runs, replaced before it expires and once when the upstream refuses it. The token comes
//! from the client's own credentials (`client_credentials`) or from the refresh token an
//! operator's login left (`authorization_code`, see [`crate::gateway::mcp::oauth_login`]); a refresh
//! token the server rotates is kept at once. Access tokens go only to the connector's URL;
//! the client's secret and refresh token only to its authorization server. No error names
//! a token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::credentials::oauth_grant;
use crate::credentials::Secret;
use crate::gateway::mcp::oauth_meta::{self as meta, ServerMeta, MAX_DOCUMENT_BYTES};
use crate::gateway::mcp::oauth_reach as reach;
use crate::gateway::mcp::upstream::HttpUrl;

/// How long one request to a metadata or token endpoint may take.
const TIMEOUT: Duration = Duration::from_secs(15);
/// Tokens remembered for withholding (an upstream echoing one must not hand it on).
const RECENT: usize = 4;
/// After the upstream refused a token, the soonest another refusal may ask the
/// authorization server for a new one: an upstream refusing every token must not make
/// the gateway call the server (which may be a company's shared one) at its calls' rate.
const REFUSED_REFETCH: Duration = Duration::from_secs(2);

/// A connector's OAuth client, as airlockd's config gives it.
#[derive(Clone)]
pub struct OAuthPlan {
    /// `oauth.issuer`: the authorization server discovery must arrive at, the only one
    /// the client's secret may go to; else whichever the connector's metadata names, if
    /// it is on the public internet.
    pub issuer: Option<HttpUrl>,
    /// `None`: registered at login (RFC 7591; authorization_code only).
    pub client_id: Option<String>,
    /// A confidential client's secret (`client_secret_basic`), else a public client.
    pub client_secret: Option<Secret>,
    pub grant: GrantPlan,
    pub scopes: Vec<String>,
    /// How an https metadata or token endpoint is verified (the connector's store).
    pub tls: Arc<rustls::ClientConfig>,
}

/// Where the access tokens come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantPlan {
    ClientCredentials,
    /// The refresh token an operator's login left at `store`.
    AuthorizationCode {
        store: std::path::PathBuf,
        redirect_uri: String,
    },
}

pub(super) struct Live {
    pub(super) header: HeaderValue,
    /// When it stops being used (before the server's expiry), if the server said.
    renew_at: Option<Instant>,
    /// When the server said it expires (ms since the epoch), for `connector status`.
    expires_at_ms: Option<u64>,
}

impl Live {
    fn fresh(&self) -> bool {
        self.renew_at.map_or(true, |at| Instant::now() < at)
    }
}

#[derive(Default)]
pub(super) struct State {
    pub(super) server: Option<ServerMeta>,
    pub(super) token: Option<Live>,
    /// When a refusal last asked for a token (whether or not one came).
    refused_at: Option<Instant>,
}

/// One connector's access token, shared by its runs in this process.
pub struct TokenSource {
    pub(super) connector: String,
    pub(super) resource: HttpUrl,
    pub(super) plan: OAuthPlan,
    pub(super) client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    pub(super) state: tokio::sync::Mutex<State>,
    recent: Mutex<Vec<String>>,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("connector", &self.connector)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

/// The token source of `connector` at `resource` for this client: the one its other runs
/// use, or a new one. Keyed by the client's secret too, so a rotated secret starts afresh.
pub fn shared(connector: &str, resource: &HttpUrl, plan: OAuthPlan) -> Arc<TokenSource> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let grant = format!("{:?}", plan.grant);
    for part in [
        connector,
        &resource.origin(),
        &resource.path,
        plan.client_id.as_deref().unwrap_or(""),
        plan.client_secret
            .as_ref()
            .map(|s| s.expose())
            .unwrap_or(""),
        &plan.scopes.join(" "),
        &grant,
        &plan.issuer.as_ref().map(HttpUrl::url).unwrap_or_default(),
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let mut all = sources();
    all.entry(key)
        .or_insert_with(|| Arc::new(TokenSource::new(connector, resource.clone(), plan)))
        .clone()
}

fn sources() -> std::sync::MutexGuard<'static, HashMap<String, Arc<TokenSource>>> {
    static ALL: OnceLock<Mutex<HashMap<String, Arc<TokenSource>>>> = OnceLock::new();
    ALL.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Every source of `connector` in this process (more than one after its client changed).
pub(super) fn sources_of(connector: &str) -> Vec<Arc<TokenSource>> {
    sources()
        .values()
        .filter(|s| s.connector == connector)
        .cloned()
        .collect()
}

impl TokenSource {
    fn new(connector: &str, resource: HttpUrl, plan: OAuthPlan) -> TokenSource {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        // Plain http is possible only for endpoints on this host (`endpoint_url`).
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*plan.tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        TokenSource {
            connector: connector.to_string(),
            resource,
            plan,
            client: Client::builder(TokioExecutor::new()).build(https),
            state: tokio::sync::Mutex::default(),
            recent: Mutex::default(),
        }
    }

    /// What to withhold from an upstream's answers: the tokens issued lately and the
    /// client's secret (an upstream could have had it, should it pose as the server).
    pub fn withheld(&self) -> Vec<String> {
        let mut all = self
            .recent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        all.extend(
            self.plan
                .client_secret
                .iter()
                .map(|s| s.expose().to_string()),
        );
        all
    }

    /// The Authorization header to send now: the shared token while it is fresh, a new
    /// one when it is about to expire; `None` before discovery (the first request goes
    /// without, and its 401 says where the authorization server is).
    pub async fn current(&self) -> Result<Option<HeaderValue>, String> {
        let mut st = self.state.lock().await;
        if let Some(t) = &st.token {
            if t.fresh() {
                return Ok(Some(t.header.clone()));
            }
        }
        if st.server.is_none() {
            return Ok(None);
        }
        self.fetch(&mut st).await.map(Some)
    }

    /// The upstream answered 401 to a request that carried `sent` (or none): discover the
    /// authorization server if not yet (from `challenge`), and get a new token, unless
    /// another call already replaced the one refused.
    pub async fn after_refusal(
        &self,
        challenge: Option<&str>,
        sent: Option<&HeaderValue>,
    ) -> Result<HeaderValue, String> {
        let mut st = self.state.lock().await;
        if let Some(t) = &st.token {
            if Some(&t.header) != sent && t.fresh() {
                return Ok(t.header.clone());
            }
        }
        if st
            .refused_at
            .is_some_and(|at| at.elapsed() < REFUSED_REFETCH)
        {
            return Err(format!(
                "the upstream refused the access token, and one was asked for under {} s ago: no other is asked for so soon (the grant may be revoked: check the client at its authorization server)",
                REFUSED_REFETCH.as_secs()
            ));
        }
        st.refused_at = Some(Instant::now());
        st.token = None;
        if st.server.is_none() {
            st.server = Some(self.discover(challenge).await?);
        }
        self.fetch(&mut st).await
    }

    /// When the access token its runs share expires (ms since the epoch), if there is one
    /// and the server said.
    pub async fn access_expires_at_ms(&self) -> Option<u64> {
        self.state
            .lock()
            .await
            .token
            .as_ref()
            .and_then(|t| t.expires_at_ms)
    }

    /// Drop the access token its runs share (its grant was forgotten or replaced).
    pub(super) async fn drop_token(&self) {
        self.state.lock().await.token = None;
    }

    /// An error of this source, as the agent and the journal get it (after the connector's
    /// name, which the proxy puts first): naming the server, never a token.
    pub fn failed(&self, e: &str) -> String {
        format!("OAuth authorization failed: {e}")
    }

    pub(super) fn who(&self) -> String {
        format!("connector {} ({})", self.connector, self.resource.origin())
    }

    /// What an authorization_code connector's error ends with: how to mend it.
    pub(super) fn login_needed(&self, why: &str) -> String {
        format!(
            "{why}: an admin must run `airlockctl connector login {}`",
            self.connector
        )
    }

    /// The connector's URL, as the `resource` parameter names it (RFC 8707).
    pub(super) fn resource_param(&self) -> String {
        self.resource.url()
    }

    /// RFC 9728 then RFC 8414 / OpenID: the token endpoint of the resource's server.
    pub(super) async fn discover(&self, challenge: Option<&str>) -> Result<ServerMeta, String> {
        let origin = self.resource.origin();
        let at = challenge
            .and_then(meta::resource_metadata_of)
            .unwrap_or_else(|| meta::default_resource_metadata(&self.resource));
        let at = meta::endpoint_url(&at).ok_or_else(|| {
            format!("{origin}: its resource_metadata is not an https URL (nor http on this host)")
        })?;
        // Asked of the resource's own origin only: a challenge must not aim a request
        // anywhere else.
        if at.origin() != origin {
            return Err(format!(
                "{origin}: its resource_metadata is on another origin ({})",
                at.origin()
            ));
        }
        let (status, body) = self.exchange(Method::GET, &at, None, None).await?;
        if status != 200 {
            return Err(format!(
                "{origin}: its protected resource metadata answered HTTP {status}"
            ));
        }
        let servers = meta::check_resource_metadata(&body, &at, &self.resource)?;
        let issuer = &meta::pinned_issuer(&servers, self.plan.issuer.as_ref(), &origin)?;
        for u in meta::server_metadata_urls(issuer) {
            let Some(u) = meta::endpoint_url(&u) else {
                continue;
            };
            let (status, body) = self.exchange(Method::GET, &u, None, None).await?;
            if status == 200 {
                let m = meta::check_server_metadata(&body, issuer)?;
                let needs = match self.plan.grant {
                    GrantPlan::ClientCredentials => "client_credentials",
                    GrantPlan::AuthorizationCode { .. } => "refresh_token",
                };
                if !m.offers(needs) {
                    return Err(format!(
                        "{}: does not offer the {needs} grant",
                        issuer.origin()
                    ));
                }
                return Ok(m);
            }
        }
        Err(format!(
            "{}: serves no authorization server metadata (RFC 8414 or OpenID)",
            issuer.origin()
        ))
    }

    /// A token request for the runs (`resource` = the connector's URL): with the client's
    /// credentials, or the kept refresh token (replaced when the server rotates it).
    async fn fetch(&self, st: &mut State) -> Result<HeaderValue, String> {
        let server = st
            .server
            .clone()
            .ok_or_else(|| format!("{}: no authorization server known", self.who()))?;
        let resource = self.resource_param();
        let scope = self.plan.scopes.join(" ");
        let endpoint = &server.token_endpoint;
        let mut held = None;
        let (mut pairs, client, grant) = match &self.plan.grant {
            GrantPlan::ClientCredentials => {
                let id = self.plan.client_id.clone().unwrap_or_default();
                (
                    vec![("grant_type", "client_credentials".to_string())],
                    (id, self.plan.client_secret.clone()),
                    None,
                )
            }
            GrantPlan::AuthorizationCode { store, .. } => {
                // Held until the rotated refresh token is kept (or the request failed).
                let at = store.clone();
                held = Some(
                    tokio::task::spawn_blocking(move || oauth_grant::lock(&at))
                        .await
                        .map_err(|_| format!("{}: the grant could not be locked", self.who()))??,
                );
                let g = oauth_grant::load(store)?
                    .ok_or_else(|| self.login_needed("it has not been authorized on this host"))?;
                // The refresh token goes only to the server that issued it.
                if g.issuer != server.issuer.url() {
                    return Err(self.login_needed(&format!(
                        "its authorization server is now {}, not the one it was authorized at",
                        server.issuer.origin()
                    )));
                }
                let secret = self
                    .plan
                    .client_secret
                    .clone()
                    .or_else(|| g.client_secret());
                (
                    vec![
                        ("grant_type", "refresh_token".to_string()),
                        ("refresh_token", g.refresh_token.clone()),
                    ],
                    (g.client_id.clone(), secret),
                    Some((g, store)),
                )
            }
        };
        pairs.push(("resource", resource));
        if !scope.is_empty() {
            pairs.push(("scope", scope));
        }
        let issued = Instant::now();
        let (status, body) = self.token_request(endpoint, pairs, &client).await?;
        if let Some((g, store)) = &grant {
            if matches!(status, 400 | 401)
                && meta::error_code(&body).as_deref() == Some("invalid_grant")
            {
                return Err(self.login_needed(&format!(
                    "{}: its authorization was revoked or has expired (invalid_grant)",
                    endpoint.origin()
                )));
            }
            let t = meta::check_token_response(status, &body, &endpoint.origin())?;
            if let Some(rotated) = t.refresh_token.as_ref().filter(|r| **r != g.refresh_token) {
                let mut kept = g.clone();
                kept.refresh_token = rotated.clone();
                kept.rotated_at_ms = crate::clock::now_ms();
                // Not kept, the old one is spent at a server that rotates: the runs keep
                // this access token while it lives, and the next refresh asks for a login.
                if let Err(e) = oauth_grant::save(store, &kept) {
                    tracing::warn!(
                        connector = %self.connector,
                        "its rotated refresh token could not be kept ({e}); once this access token expires, an admin must run `airlockctl connector login`"
                    );
                }
            }
            drop(held);
            return self.keep(st, t, issued);
        }
        let t = meta::check_token_response(status, &body, &endpoint.origin())?;
        self.keep(st, t, issued)
    }

    /// A token endpoint's answer made the access token the runs share.
    pub(super) fn keep(
        &self,
        st: &mut State,
        t: meta::TokenAnswer,
        issued: Instant,
    ) -> Result<HeaderValue, String> {
        let mut header = HeaderValue::from_str(&format!("Bearer {}", t.access_token))
            .map_err(|_| format!("{}: its access token is not a header value", self.who()))?;
        header.set_sensitive(true);
        // Renewed at four fifths of its life (at most a minute early).
        let renew_at = t.expires_in.map(|s| {
            let life = Duration::from_secs(s);
            issued + life - (life / 5).min(Duration::from_secs(60))
        });
        let expires_at_ms = t
            .expires_in
            .map(|s| crate::clock::now_ms().saturating_add(s.saturating_mul(1000)));
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            recent.push(t.access_token);
            if recent.len() > RECENT {
                recent.remove(0);
            }
        }
        st.token = Some(Live {
            header: header.clone(),
            renew_at,
            expires_at_ms,
        });
        Ok(header)
    }

    /// POST `pairs` to a token-like endpoint as `client` (id, secret): a confidential
    /// client authenticates with Basic (RFC 6749 §2.3.1), a public one names itself.
    pub(super) async fn token_request(
        &self,
        endpoint: &HttpUrl,
        mut pairs: Vec<(&str, String)>,
        client: &(String, Option<Secret>),
    ) -> Result<(u16, Bytes), String> {
        let (id, secret) = client;
        let basic = match secret {
            Some(s) => {
                let joined = format!("{}:{}", meta::form_value(id), meta::form_value(s.expose()));
                let mut v = HeaderValue::from_str(&format!(
                    "Basic {}",
                    crate::credentials::github_app::b64std(joined.as_bytes())
                ))
                .map_err(|_| format!("{}: the client secret is not a header value", self.who()))?;
                v.set_sensitive(true);
                Some(v)
            }
            None => {
                pairs.push(("client_id", id.clone()));
                None
            }
        };
        let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.exchange(
            Method::POST,
            endpoint,
            Some(("application/x-www-form-urlencoded", meta::form(&refs))),
            basic,
        )
        .await
    }

    /// One request to a metadata or token endpoint: its status and body (bounded), no
    /// redirect followed. Only the connector's own origin and the configured issuer's may
    /// be on this host or a private network; any other is reached at an address checked
    /// public, the one connected to ([`reach::public_address`]).
    pub(super) async fn exchange(
        &self,
        method: Method,
        url: &HttpUrl,
        body: Option<(&str, String)>,
        auth: Option<HeaderValue>,
    ) -> Result<(u16, Bytes), String> {
        let origin = url.origin();
        let configured = origin == self.resource.origin()
            || self
                .plan
                .issuer
                .as_ref()
                .is_some_and(|i| i.origin() == origin);
        let (target, pinned) = if configured {
            (origin.clone(), None)
        } else {
            let addr = reach::public_address(url).await?;
            let client = reach::client_to(url, &self.plan.tls)?;
            (format!("https://{addr}"), Some(client))
        };
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{target}{}", url.path))
            .header(HOST, &url.authority)
            .header(ACCEPT, "application/json");
        if let Some((kind, _)) = &body {
            b = b.header(CONTENT_TYPE, *kind);
        }
        if let Some(a) = auth {
            b = b.header(AUTHORIZATION, a);
        }
        let req = b
            .body(Full::new(Bytes::from(
                body.map(|(_, b)| b).unwrap_or_default(),
            )))
            .map_err(|_| format!("{origin}: the request could not be made"))?;
        let go = async {
            let sent = match &pinned {
                Some(c) => c.request(req).await,
                None => self.client.request(req).await,
            };
            let resp = sent.map_err(|_| {
                format!("{origin}: could not be reached (or its TLS certificate was refused)")
            })?;
            let status = resp.status().as_u16();
            if (300..400).contains(&status) {
                return Err(format!(
                    "{origin}: answered a redirect (HTTP {status}), which is not followed"
                ));
            }
            let body = Limited::new(resp.into_body(), MAX_DOCUMENT_BYTES)
                .collect()
                .await
                .map_err(|_| format!("{origin}: sent more than 64 KiB"))?
                .to_bytes();
            Ok((status, body))
        };
        tokio::time::timeout(TIMEOUT, go)
            .await
            .map_err(|_| format!("{origin}: did not answer in time"))?
    }
}
