//! What an MCP connector's OAuth 2.1 discovery reads, checked (pure): the upstream's 401
//! challenge (`WWW-Authenticate: Bearer resource_metadata="..."`), its protected resource
//! metadata (RFC 9728), its authorization server's metadata (RFC 8414, or OpenID's), and a
//! token response. Each refusal names the server (an origin) and never a token: what a
//! server sends may be anything, and an error goes to the journal and to the agent.

use serde_json::Value;

pub use crate::urls::endpoint_url;
use crate::urls::HttpUrl;

/// Largest metadata document or token response read.
pub const MAX_DOCUMENT_BYTES: usize = 64 << 10;

/// The `resource_metadata` URL of a Bearer challenge, if it names one.
pub fn resource_metadata_of(www_authenticate: &str) -> Option<String> {
    let lower = www_authenticate.to_ascii_lowercase();
    let at = lower.find("resource_metadata=")?;
    let rest = &www_authenticate[at + "resource_metadata=".len()..];
    let value = match rest.strip_prefix('"') {
        Some(q) => &q[..q.find('"')?],
        None => rest.split([',', ' ']).next()?,
    };
    Some(value.to_string())
}

/// RFC 9728's default metadata URL of a resource: `/.well-known/oauth-protected-resource`
/// inserted before its path.
pub fn default_resource_metadata(resource: &HttpUrl) -> String {
    let path = resource.path.trim_end_matches('/');
    format!(
        "{}/.well-known/oauth-protected-resource{path}",
        resource.origin()
    )
}

/// Where an authorization server's metadata may be, in the order asked: RFC 8414's
/// (`/.well-known/oauth-authorization-server` before the issuer's path), then OpenID's
/// (`/.well-known/openid-configuration` after it).
pub fn server_metadata_urls(issuer: &HttpUrl) -> [String; 2] {
    let path = issuer.path.trim_end_matches('/');
    [
        format!(
            "{}/.well-known/oauth-authorization-server{path}",
            issuer.origin()
        ),
        format!("{}{path}/.well-known/openid-configuration", issuer.origin()),
    ]
}

fn json_object(
    body: &[u8],
    what: &str,
    server: &str,
) -> Result<serde_json::Map<String, Value>, String> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(format!("{server}: its {what} is not a JSON object")),
    }
}

/// The authorization servers a resource's metadata names, checked: it is JSON, from the
/// resource's own origin, and it describes `resource` itself (RFC 9728 §3.3: a document
/// for another resource is not to be used).
pub fn check_resource_metadata(
    body: &[u8],
    metadata_url: &HttpUrl,
    resource: &HttpUrl,
) -> Result<Vec<HttpUrl>, String> {
    let server = resource.origin();
    if metadata_url.origin() != server {
        return Err(format!(
            "{server}: its resource_metadata is on another origin ({})",
            metadata_url.origin()
        ));
    }
    let m = json_object(body, "protected resource metadata", &server)?;
    let named = m
        .get("resource")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    if !same(named, &format!("{server}{}", resource.path)) {
        return Err(format!(
            "{server}: its protected resource metadata describes another resource"
        ));
    }
    let servers: Vec<HttpUrl> = m
        .get("authorization_servers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .filter_map(endpoint_url)
                .collect()
        })
        .unwrap_or_default();
    if servers.is_empty() {
        return Err(format!(
            "{server}: its protected resource metadata names no authorization server (https, or http on this host)"
        ));
    }
    Ok(servers)
}

/// The authorization server to ask, of those a resource's metadata names: the configured
/// issuer (`oauth.issuer`), which must be among them, else the first.
pub fn pinned_issuer(
    servers: &[HttpUrl],
    configured: Option<&HttpUrl>,
    origin: &str,
) -> Result<HttpUrl, String> {
    let same = |a: &HttpUrl, b: &HttpUrl| {
        a.origin() == b.origin() && a.path.trim_end_matches('/') == b.path.trim_end_matches('/')
    };
    match configured {
        None => servers
            .first()
            .cloned()
            .ok_or_else(|| format!("{origin}: its protected resource metadata names no authorization server")),
        Some(want) => servers
            .iter()
            .find(|s| same(s, want))
            .map(|_| want.clone())
            .ok_or_else(|| {
                format!(
                    "{origin}: its protected resource metadata does not name the configured issuer {} (oauth.issuer); nothing was sent to the server it names",
                    want.url().trim_end_matches('/')
                )
            }),
    }
}

/// An authorization server's token endpoint, from its metadata, checked: JSON, its
/// `issuer` the server asked, the endpoint on the issuer's origin (a document naming
/// endpoints elsewhere would send the client's secret there).
pub fn check_server_metadata(body: &[u8], issuer: &HttpUrl) -> Result<ServerMeta, String> {
    let server = issuer.origin();
    let m = json_object(body, "authorization server metadata", &server)?;
    let want = format!("{server}{}", issuer.path);
    let named = m.get("issuer").and_then(Value::as_str).unwrap_or_default();
    if named.trim_end_matches('/') != want.trim_end_matches('/') {
        return Err(format!(
            "{server}: its authorization server metadata names another issuer"
        ));
    }
    let endpoint = |k: &str| -> Result<Option<HttpUrl>, String> {
        match m.get(k) {
            None => Ok(None),
            Some(v) => match v.as_str().and_then(endpoint_url) {
                Some(u) if u.origin() == server => Ok(Some(u)),
                _ => Err(format!(
                    "{server}: its metadata names {k} on another origin than the issuer's"
                )),
            },
        }
    };
    let token = endpoint("token_endpoint")?
        .ok_or_else(|| format!("{server}: its metadata names no token_endpoint"))?;
    let words = |k: &str| -> Vec<String> {
        m.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(ServerMeta {
        issuer: issuer.clone(),
        token_endpoint: token,
        revocation_endpoint: endpoint("revocation_endpoint")?,
        authorization_endpoint: endpoint("authorization_endpoint")?,
        device_authorization_endpoint: endpoint("device_authorization_endpoint")?,
        registration_endpoint: endpoint("registration_endpoint")?,
        grants: words("grant_types_supported"),
        pkce_s256: words("code_challenge_methods_supported")
            .iter()
            .any(|m| m == "S256"),
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerMeta {
    pub issuer: HttpUrl,
    pub token_endpoint: HttpUrl,
    pub revocation_endpoint: Option<HttpUrl>,
    pub authorization_endpoint: Option<HttpUrl>,
    pub device_authorization_endpoint: Option<HttpUrl>,
    pub registration_endpoint: Option<HttpUrl>,
    /// `grant_types_supported` (empty: not said).
    pub grants: Vec<String>,
    /// Whether it says it takes PKCE's S256 (OAuth 2.1 clients must not guess it does).
    pub pkce_s256: bool,
}

/// RFC 8628's grant type.
pub const DEVICE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";

impl ServerMeta {
    /// Whether it offers `grant` (a server that lists none is taken to offer the usual).
    pub fn offers(&self, grant: &str) -> bool {
        self.grants.is_empty() || self.grants.iter().any(|g| g == grant)
    }
}

/// A token response: the access token, its lifetime in seconds (if said), and a refresh
/// token (new or rotated), if one came.
pub struct TokenAnswer {
    pub access_token: String,
    pub expires_in: Option<u64>,
    pub refresh_token: Option<String>,
}

impl std::fmt::Debug for TokenAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenAnswer")
            .field("expires_in", &self.expires_in)
            .finish_non_exhaustive()
    }
}

/// Read a token endpoint's answer (`status` its HTTP status): a Bearer `access_token`, or
/// an error naming the server and, when it sent one, its OAuth `error` code (a short
/// ASCII word, clipped), never anything else of the body.
pub fn check_token_response(status: u16, body: &[u8], server: &str) -> Result<TokenAnswer, String> {
    if !(200..300).contains(&status) {
        let code = error_code(body).unwrap_or_else(|| "no OAuth error code".into());
        return Err(format!(
            "{server}: its token endpoint refused the request (HTTP {status}, {code})"
        ));
    }
    let m = json_object(body, "token response", server)?;
    let token = match m.get("access_token").and_then(Value::as_str) {
        Some(t) if is_token(t) => t.to_string(),
        _ => return Err(format!("{server}: its token response has no access_token")),
    };
    let bearer = m
        .get("token_type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.eq_ignore_ascii_case("bearer"));
    if !bearer {
        return Err(format!(
            "{server}: its token response is not for a Bearer token"
        ));
    }
    let refresh_token = match m.get("refresh_token") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if is_token(t) => Some(t.clone()),
        Some(_) => {
            return Err(format!(
                "{server}: its token response has a refresh_token that is not a token"
            ))
        }
    };
    Ok(TokenAnswer {
        access_token: token,
        expires_in: m.get("expires_in").and_then(Value::as_u64),
        refresh_token,
    })
}

/// A token as a header or a form may carry it: printable ASCII, not empty, bounded.
fn is_token(t: &str) -> bool {
    !t.is_empty() && t.len() <= 8192 && t.bytes().all(|b| b.is_ascii_graphic())
}

/// The OAuth `error` code of an error answer (RFC 6749 §5.2), when it is a short ASCII
/// word (anything else could be anything: it is not repeated).
pub fn error_code(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("error")?
        .as_str()
        .filter(|c| {
            !c.is_empty()
                && c.len() <= 40
                && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
        .map(str::to_string)
}

/// A device authorization answer (RFC 8628 §3.2), checked.
#[derive(Clone)]
pub struct DeviceStart {
    pub device_code: String,
    pub user_code: String,
    pub verification_uri: String,
    pub verification_uri_complete: Option<String>,
    pub expires_in: u64,
    pub interval: u64,
}

impl std::fmt::Debug for DeviceStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceStart")
            .field("user_code", &self.user_code)
            .field("verification_uri", &self.verification_uri)
            .finish_non_exhaustive()
    }
}

/// A URL shown to the operator to open: http(s), printable, bounded.
fn shown_url(v: Option<&Value>) -> Option<String> {
    let u = v?.as_str()?;
    (u.len() <= 2048
        && (u.starts_with("https://") || u.starts_with("http://"))
        && u.bytes().all(|b| b.is_ascii_graphic()))
    .then(|| u.to_string())
}

pub fn check_device_response(
    status: u16,
    body: &[u8],
    server: &str,
) -> Result<DeviceStart, String> {
    if status != 200 {
        let code = error_code(body).unwrap_or_else(|| "no OAuth error code".into());
        return Err(format!(
            "{server}: its device authorization endpoint refused the request (HTTP {status}, {code})"
        ));
    }
    let m = json_object(body, "device authorization answer", server)?;
    let text = |k: &str| m.get(k).and_then(Value::as_str).filter(|t| is_token(t));
    let (Some(device_code), Some(user_code), Some(verification_uri)) = (
        text("device_code"),
        text("user_code").filter(|c| c.len() <= 64),
        shown_url(m.get("verification_uri")),
    ) else {
        return Err(format!(
            "{server}: its device authorization answer lacks device_code, user_code or verification_uri"
        ));
    };
    Ok(DeviceStart {
        device_code: device_code.to_string(),
        user_code: user_code.to_string(),
        verification_uri,
        verification_uri_complete: shown_url(m.get("verification_uri_complete")),
        expires_in: m
            .get("expires_in")
            .and_then(Value::as_u64)
            .unwrap_or(600)
            .clamp(1, 1800),
        interval: m
            .get("interval")
            .and_then(Value::as_u64)
            .unwrap_or(5)
            .clamp(1, 60),
    })
}

/// A dynamic client registration answer (RFC 7591 §3.2.1): the client's id, and its
/// secret if it was made a confidential client.
pub fn check_registration(
    status: u16,
    body: &[u8],
    server: &str,
) -> Result<(String, Option<String>), String> {
    if !(200..300).contains(&status) {
        let code = error_code(body).unwrap_or_else(|| "no OAuth error code".into());
        return Err(format!(
            "{server}: its registration endpoint refused to register airlockd (HTTP {status}, {code}); give mcp_connectors.<name>.oauth.client_id"
        ));
    }
    let m = json_object(body, "registration answer", server)?;
    let id = m
        .get("client_id")
        .and_then(Value::as_str)
        .filter(|t| is_token(t) && t.len() <= 256)
        .ok_or_else(|| format!("{server}: its registration answer has no client_id"))?;
    let secret = m
        .get("client_secret")
        .and_then(Value::as_str)
        .filter(|t| is_token(t))
        .map(str::to_string);
    Ok((id.to_string(), secret))
}

/// The authorization request URL (authorization code grant with PKCE S256, RFC 8707
/// `resource`).
pub fn authorization_url(
    endpoint: &HttpUrl,
    client_id: &str,
    redirect_uri: &str,
    scopes: &[String],
    state: &str,
    challenge: &str,
    resource: &str,
) -> String {
    let scope = scopes.join(" ");
    let mut pairs = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect_uri),
        ("state", state),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
        ("resource", resource),
    ];
    if !scope.is_empty() {
        pairs.push(("scope", scope.as_str()));
    }
    let sep = if endpoint.path.contains('?') {
        '&'
    } else {
        '?'
    };
    format!(
        "{}{}{sep}{}",
        endpoint.origin(),
        endpoint.path,
        form(&pairs)
    )
}

/// The code in the URL the browser was sent back to (pasted by the operator): it must be
/// the redirect URI with this login's `state`, and name `issuer` if it names one (RFC
/// 9207: a code from another server is not sent to this one); an `error` there is said
/// (its code only).
pub fn code_of_redirect(
    pasted: &str,
    redirect_uri: &str,
    state: &str,
    issuer: &str,
) -> Result<String, String> {
    let pasted = pasted.trim();
    let (base, query) = pasted.split_once('?').unwrap_or((pasted, ""));
    let query = query.split('#').next().unwrap_or("");
    if base.trim_end_matches('/') != redirect_uri.trim_end_matches('/') {
        return Err(format!(
            "the pasted URL is not the redirect URI ({redirect_uri}): paste the whole address the browser was sent to"
        ));
    }
    let mut code = None;
    let mut got_state = None;
    let mut error = None;
    let mut iss = None;
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = form_decode(v);
        match k {
            "code" => code = v,
            "state" => got_state = v,
            "error" => error = v,
            "iss" => iss = v,
            _ => {}
        }
    }
    if got_state.as_deref() != Some(state) {
        return Err(
            "the pasted URL is not the answer to this login (its state differs): start again with `airlockctl connector login`".into(),
        );
    }
    if iss.is_some_and(|i| i.trim_end_matches('/') != issuer.trim_end_matches('/')) {
        return Err(
            "the pasted URL comes from another authorization server (its iss differs)".into(),
        );
    }
    if let Some(e) = error {
        let e = if e.len() <= 40 && e.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            e
        } else {
            "no OAuth error code".into()
        };
        return Err(format!("the authorization server refused the login ({e})"));
    }
    code.filter(|c| is_token(c))
        .ok_or_else(|| "the pasted URL has no authorization code".into())
}

/// `application/x-www-form-urlencoded` decoding of one value (`None`: not valid UTF-8 or a
/// bad escape).
fn form_decode(v: &str) -> Option<String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// PKCE (RFC 7636): a verifier of 256 random bits.
pub fn pkce_verifier(random: [u8; 32]) -> String {
    crate::credentials::github_app::b64url(&random)
}

/// The S256 challenge of a PKCE verifier.
pub fn pkce_challenge(verifier: &str) -> String {
    use sha2::Digest;
    crate::credentials::github_app::b64url(&sha2::Sha256::digest(verifier.as_bytes()))
}

/// One value, `application/x-www-form-urlencoded` (also how RFC 6749 §2.3.1 has a client's
/// id and secret encoded before they are joined for Basic authentication).
pub fn form_value(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `application/x-www-form-urlencoded` of `pairs`.
pub fn form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", form_value(k), form_value(v)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::urls::parse_http_url;

    fn url(u: &str) -> HttpUrl {
        parse_http_url(u).unwrap()
    }

    #[test]
    fn a_configured_issuer_must_be_among_those_named() {
        let named = [url("https://evil.example/"), url("https://as.example/t1")];
        let o = "https://mcp.example";
        assert_eq!(pinned_issuer(&named, None, o), Ok(named[0].clone()));
        let want = url("https://as.example/t1/");
        assert_eq!(pinned_issuer(&named, Some(&want), o), Ok(want.clone()));
        for other in [
            "https://as.example/t2",
            "http://as.example/t1",
            "https://as.example:444/t1",
        ] {
            let e = pinned_issuer(&named, Some(&url(other)), o).unwrap_err();
            assert!(e.contains("does not name the configured issuer"), "{e}");
        }
        assert!(pinned_issuer(&[], None, o).is_err());
    }

    #[test]
    fn the_challenge_names_the_metadata() {
        assert_eq!(
            resource_metadata_of(
                r#"Bearer error="invalid_token", resource_metadata="https://mcp.example/.well-known/oauth-protected-resource/mcp""#
            )
            .as_deref(),
            Some("https://mcp.example/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            resource_metadata_of("Bearer Resource_Metadata=https://a.example/x, scope=\"r\"")
                .as_deref(),
            Some("https://a.example/x")
        );
        assert_eq!(resource_metadata_of("Bearer realm=\"x\""), None);
        let r = url("https://mcp.example/mcp");
        assert_eq!(
            default_resource_metadata(&r),
            "https://mcp.example/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            server_metadata_urls(&url("https://as.example/t1")),
            [
                "https://as.example/.well-known/oauth-authorization-server/t1".to_string(),
                "https://as.example/t1/.well-known/openid-configuration".to_string()
            ]
        );
    }

    #[test]
    fn resource_metadata_must_be_json_for_this_resource_from_its_origin() {
        let r = url("https://mcp.example/mcp");
        let at = url("https://mcp.example/.well-known/oauth-protected-resource/mcp");
        let ok = br#"{"resource":"https://mcp.example/mcp","authorization_servers":["https://as.example"]}"#;
        assert_eq!(
            check_resource_metadata(ok, &at, &r).unwrap()[0].authority,
            "as.example"
        );
        let cases: [(&[u8], &HttpUrl, &str); 5] = [
            (b"<html>", &at, "not a JSON object"),
            (br#"{"resource":"https://evil.example/mcp","authorization_servers":["https://as.example"]}"#, &at, "another resource"),
            (br#"{"resource":"https://mcp.example/mcp","authorization_servers":["http://as.example"]}"#, &at, "no authorization server"),
            (br#"{"resource":"https://mcp.example/mcp"}"#, &at, "no authorization server"),
            (ok, &url("https://evil.example/m"), "another origin"),
        ];
        for (body, at, want) in cases {
            let e = check_resource_metadata(body, at, &r).unwrap_err();
            assert!(
                e.starts_with("https://mcp.example: ") && e.contains(want),
                "{e}"
            );
        }
    }

    #[test]
    fn server_metadata_must_name_its_issuer_and_endpoints_on_its_origin() {
        let iss = url("https://as.example");
        let ok = br#"{"issuer":"https://as.example","token_endpoint":"https://as.example/token","revocation_endpoint":"https://as.example/revoke","grant_types_supported":["client_credentials"]}"#;
        let m = check_server_metadata(ok, &iss).unwrap();
        assert_eq!(m.token_endpoint.path, "/token");
        assert_eq!(m.grants, vec!["client_credentials".to_string()]);
        for (body, want) in [
            (&b"not json"[..], "not a JSON object"),
            (br#"{"issuer":"https://other.example","token_endpoint":"https://as.example/token"}"#, "another issuer"),
            (br#"{"issuer":"https://as.example","token_endpoint":"https://evil.example/token"}"#, "token_endpoint on another origin"),
            (br#"{"issuer":"https://as.example","token_endpoint":"https://as.example/t","revocation_endpoint":"https://evil.example/r"}"#, "revocation_endpoint on another origin"),
            (br#"{"issuer":"https://as.example"}"#, "no token_endpoint"),
            (br#"{"issuer":"https://as.example","token_endpoint":"https://as.example/t","device_authorization_endpoint":"https://evil.example/d"}"#, "device_authorization_endpoint on another origin"),
            (br#"{"issuer":"https://as.example","token_endpoint":"https://as.example/t","registration_endpoint":"https://evil.example/r"}"#, "registration_endpoint on another origin"),
            (br#"{"issuer":"https://as.example","token_endpoint":"https://as.example/t","authorization_endpoint":"http://as.example/a"}"#, "authorization_endpoint on another origin"),
        ] {
            let e = check_server_metadata(body, &iss).unwrap_err();
            assert!(e.starts_with("https://as.example: ") && e.contains(want), "{e}");
        }
    }

    #[test]
    fn a_token_response_needs_a_bearer_access_token_and_errors_show_no_body() {
        let t = check_token_response(
            200,
            br#"{"access_token":"tok-1","token_type":"Bearer","expires_in":60}"#,
            "https://as.example",
        )
        .unwrap();
        assert_eq!((t.access_token.as_str(), t.expires_in), ("tok-1", Some(60)));
        assert!(!format!("{t:?}").contains("tok-1"));
        for (status, body, want) in [
            (200, &br#"{"token_type":"Bearer"}"#[..], "no access_token"),
            (
                200,
                br#"{"access_token":"t","token_type":"mac"}"#,
                "not for a Bearer",
            ),
            (200, b"access_token=t", "not a JSON object"),
            (
                400,
                br#"{"error":"invalid_client","error_description":"secret-ish"}"#,
                "HTTP 400, invalid_client",
            ),
            (
                401,
                br#"{"error":"sneaky token-abc in a code"}"#,
                "no OAuth error code",
            ),
        ] {
            let e = check_token_response(status, body, "https://as.example").unwrap_err();
            assert!(
                e.contains(want) && !e.contains("secret-ish") && !e.contains("token-abc"),
                "{e}"
            );
        }
        assert_eq!(form(&[("a b", "c&d=é")]), "a%20b=c%26d%3D%C3%A9");
        let t = check_token_response(
            200,
            br#"{"access_token":"a","token_type":"bearer","refresh_token":"r-2"}"#,
            "https://as.example",
        )
        .unwrap();
        assert_eq!(t.refresh_token.as_deref(), Some("r-2"));
        assert_eq!(
            error_code(br#"{"error":"invalid_grant"}"#).as_deref(),
            Some("invalid_grant")
        );
    }

    #[test]
    fn a_device_answer_and_a_registration_are_checked_and_shown_without_their_secrets() {
        let d = check_device_response(
            200,
            br#"{"device_code":"dc-1","user_code":"ABCD-EFGH","verification_uri":"https://as.example/device","expires_in":600}"#,
            "https://as.example",
        )
        .unwrap();
        assert_eq!((d.user_code.as_str(), d.interval), ("ABCD-EFGH", 5));
        for (status, body, want) in [
            (
                200,
                &br#"{"device_code":"dc-1","user_code":"A"}"#[..],
                "lacks",
            ),
            (
                200,
                br#"{"device_code":"dc-1","user_code":"A","verification_uri":"javascript:x"}"#,
                "lacks",
            ),
            (
                400,
                br#"{"error":"invalid_client"}"#,
                "HTTP 400, invalid_client",
            ),
        ] {
            let e = check_device_response(status, body, "https://as.example").unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        assert_eq!(
            check_registration(201, br#"{"client_id":"c-9","client_secret":"s-9"}"#, "x").unwrap(),
            ("c-9".to_string(), Some("s-9".to_string()))
        );
        let e = check_registration(
            400,
            br#"{"error":"invalid_redirect_uri","error_description":"s-9"}"#,
            "x",
        )
        .unwrap_err();
        assert!(
            e.contains("invalid_redirect_uri") && e.contains("client_id") && !e.contains("s-9"),
            "{e}"
        );
    }

    #[test]
    fn the_pasted_redirect_must_be_this_logins_and_its_code_is_taken() {
        let r = "http://127.0.0.1:8976/callback";
        assert_eq!(
            code_of_redirect(
                &format!(" {r}?code=c%2D1&state=s1&iss=https%3A%2F%2Fas.example\n"),
                r,
                "s1",
                "https://as.example"
            )
            .unwrap(),
            "c-1"
        );
        for (pasted, want) in [
            (format!("{r}?code=c&state=s2"), "state differs"),
            (
                format!("{r}?state=s1&error=access_denied"),
                "refused the login (access_denied)",
            ),
            (
                format!("{r}?state=s1&error=%3Cscript%3E"),
                "no OAuth error code",
            ),
            (
                "https://evil.example/callback?code=c&state=s1".to_string(),
                "not the redirect URI",
            ),
            (format!("{r}?state=s1"), "no authorization code"),
            (
                format!("{r}?code=c&state=s1&iss=https%3A%2F%2Fevil.example"),
                "another authorization server",
            ),
        ] {
            let e = code_of_redirect(&pasted, r, "s1", "https://as.example").unwrap_err();
            assert!(e.contains(want), "{pasted}: {e}");
        }
        let u = authorization_url(
            &url("https://as.example/auth"),
            "c 1",
            r,
            &["read".into(), "write".into()],
            "s1",
            "ch",
            "https://mcp.example/mcp",
        );
        assert!(u.starts_with("https://as.example/auth?response_type=code&client_id=c%201&redirect_uri=http%3A%2F%2F127.0.0.1%3A8976%2Fcallback"), "{u}");
        assert!(
            u.contains("code_challenge_method=S256")
                && u.contains("scope=read%20write")
                && u.contains("resource=https%3A%2F%2Fmcp.example%2Fmcp"),
            "{u}"
        );
        // RFC 7636 appendix B.
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        assert_eq!(pkce_verifier([7u8; 32]).len(), 43);
    }
}
