//! A connector's OAuth 2.1 client, `grant: client_credentials`: discovery from the
//! upstream's 401 (its `resource_metadata`, RFC 9728, then the authorization server's RFC
//! 8414 or OpenID metadata, [`super::oauth_meta`]), a token request with the connector's
//! URL as `resource` (RFC 8707), and one access token per connector in this process,
//! shared by its runs, replaced before it expires and once when the upstream refuses it.
//! Tokens go only to the connector's URL; the client's secret only to the token endpoint.
//! No error names a token.

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

use super::oauth_meta::{self as meta, ServerMeta, MAX_DOCUMENT_BYTES};
use super::upstream::HttpUrl;
use crate::credentials::Secret;

/// How long one request to a metadata or token endpoint may take.
const TIMEOUT: Duration = Duration::from_secs(15);
/// Tokens remembered for withholding (an upstream echoing one must not hand it on).
const RECENT: usize = 4;

/// A connector's OAuth client, as airlockd's config gives it.
#[derive(Clone)]
pub struct OAuthPlan {
    pub client_id: String,
    /// A confidential client's secret (`client_secret_basic`), else a public client.
    pub client_secret: Option<Secret>,
    pub scopes: Vec<String>,
    /// How an https metadata or token endpoint is verified (the connector's store).
    pub tls: Arc<rustls::ClientConfig>,
}

struct Live {
    header: HeaderValue,
    /// When it stops being used (before the server's expiry), if the server said.
    renew_at: Option<Instant>,
}

impl Live {
    fn fresh(&self) -> bool {
        self.renew_at.map_or(true, |at| Instant::now() < at)
    }
}

#[derive(Default)]
struct State {
    server: Option<ServerMeta>,
    token: Option<Live>,
}

/// One connector's access token, shared by its runs in this process.
pub struct TokenSource {
    connector: String,
    resource: HttpUrl,
    plan: OAuthPlan,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    state: tokio::sync::Mutex<State>,
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
    static ALL: OnceLock<Mutex<HashMap<String, Arc<TokenSource>>>> = OnceLock::new();
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for part in [
        connector,
        &resource.origin(),
        &resource.path,
        &plan.client_id,
        plan.client_secret
            .as_ref()
            .map(|s| s.expose())
            .unwrap_or(""),
        &plan.scopes.join(" "),
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let mut all = ALL
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    all.entry(key)
        .or_insert_with(|| Arc::new(TokenSource::new(connector, resource.clone(), plan)))
        .clone()
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

    /// The tokens issued lately (to withhold from what an upstream answers).
    pub fn recent_tokens(&self) -> Vec<String> {
        self.recent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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
        st.token = None;
        if st.server.is_none() {
            st.server = Some(self.discover(challenge).await?);
        }
        self.fetch(&mut st).await
    }

    /// An error of this source, as the agent and the journal get it: naming the connector
    /// and the server, never a token.
    pub fn failed(&self, e: &str) -> String {
        format!(
            "connector {}: OAuth authorization failed: {e}",
            self.connector
        )
    }

    fn who(&self) -> String {
        format!("connector {} ({})", self.connector, self.resource.origin())
    }

    /// RFC 9728 then RFC 8414 / OpenID: the token endpoint of the resource's server.
    async fn discover(&self, challenge: Option<&str>) -> Result<ServerMeta, String> {
        let origin = self.resource.origin();
        let at = challenge
            .and_then(meta::resource_metadata_of)
            .unwrap_or_else(|| meta::default_resource_metadata(&self.resource));
        let at = meta::endpoint_url(&at).ok_or_else(|| {
            format!("{origin}: its resource_metadata is not an https URL (nor http on this host)")
        })?;
        let (status, body) = self.exchange(Method::GET, &at, None, None).await?;
        if status != 200 {
            return Err(format!(
                "{origin}: its protected resource metadata answered HTTP {status}"
            ));
        }
        let servers = meta::check_resource_metadata(&body, &at, &self.resource)?;
        let issuer = &servers[0];
        for u in meta::server_metadata_urls(issuer) {
            let Some(u) = meta::endpoint_url(&u) else {
                continue;
            };
            let (status, body) = self.exchange(Method::GET, &u, None, None).await?;
            if status == 200 {
                let m = meta::check_server_metadata(&body, issuer)?;
                if !m.grants.is_empty() && !m.grants.iter().any(|g| g == "client_credentials") {
                    return Err(format!(
                        "{}: does not offer the client_credentials grant",
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

    /// A token request (client_credentials, `resource` = the connector's URL).
    async fn fetch(&self, st: &mut State) -> Result<HeaderValue, String> {
        let server = st
            .server
            .clone()
            .ok_or_else(|| format!("{}: no authorization server known", self.who()))?;
        let resource = format!("{}{}", self.resource.origin(), self.resource.path);
        let scope = self.plan.scopes.join(" ");
        let mut pairs = vec![
            ("grant_type", "client_credentials"),
            ("resource", resource.as_str()),
        ];
        if !scope.is_empty() {
            pairs.push(("scope", scope.as_str()));
        }
        let basic = match &self.plan.client_secret {
            Some(s) => {
                let joined = format!(
                    "{}:{}",
                    meta::form_value(&self.plan.client_id),
                    meta::form_value(s.expose())
                );
                let mut v = HeaderValue::from_str(&format!(
                    "Basic {}",
                    crate::credentials::github_app::b64std(joined.as_bytes())
                ))
                .map_err(|_| format!("{}: the client secret is not a header value", self.who()))?;
                v.set_sensitive(true);
                Some(v)
            }
            None => {
                pairs.push(("client_id", self.plan.client_id.as_str()));
                None
            }
        };
        let endpoint = &server.token_endpoint;
        let issued = Instant::now();
        let (status, body) = self
            .exchange(Method::POST, endpoint, Some(meta::form(&pairs)), basic)
            .await?;
        let t = meta::check_token_response(status, &body, &endpoint.origin())?;
        let mut header =
            HeaderValue::from_str(&format!("Bearer {}", t.access_token)).map_err(|_| {
                format!(
                    "{}: its access token is not a header value",
                    endpoint.origin()
                )
            })?;
        header.set_sensitive(true);
        // Renewed at four fifths of its life (at most a minute early).
        let renew_at = t.expires_in.map(|s| {
            let life = Duration::from_secs(s);
            issued + life - (life / 5).min(Duration::from_secs(60))
        });
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
        });
        Ok(header)
    }

    /// One request to a metadata or token endpoint: its status and body (bounded), no
    /// redirect followed.
    async fn exchange(
        &self,
        method: Method,
        url: &HttpUrl,
        form: Option<String>,
        auth: Option<HeaderValue>,
    ) -> Result<(u16, Bytes), String> {
        let origin = url.origin();
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{origin}{}", url.path))
            .header(HOST, &url.authority)
            .header(ACCEPT, "application/json");
        if form.is_some() {
            b = b.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
        }
        if let Some(a) = auth {
            b = b.header(AUTHORIZATION, a);
        }
        let req = b
            .body(Full::new(Bytes::from(form.unwrap_or_default())))
            .map_err(|_| format!("{origin}: the request could not be made"))?;
        let go = async {
            let resp = self.client.request(req).await.map_err(|_| {
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
