//! What an MCP connector's OAuth 2.1 discovery reads, checked (pure): the upstream's 401
//! challenge (`WWW-Authenticate: Bearer resource_metadata="..."`), its protected resource
//! metadata (RFC 9728), its authorization server's metadata (RFC 8414, or OpenID's), and a
//! token response. Each refusal names the server (an origin) and never a token: what a
//! server sends may be anything, and an error goes to the journal and to the agent.

use serde_json::Value;

use super::upstream::{parse_http_url, HttpUrl};

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

/// A URL an OAuth document may name: https, or plain http to this host (a token must not
/// cross a network in clear).
pub fn endpoint_url(u: &str) -> Option<HttpUrl> {
    parse_http_url(u).filter(|p| p.https || p.is_loopback())
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
    let grants: Vec<String> = m
        .get("grant_types_supported")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Ok(ServerMeta {
        token_endpoint: token,
        revocation_endpoint: endpoint("revocation_endpoint")?,
        grants,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerMeta {
    pub token_endpoint: HttpUrl,
    pub revocation_endpoint: Option<HttpUrl>,
    /// `grant_types_supported` (empty: not said).
    pub grants: Vec<String>,
}

/// A token response: the access token and its lifetime in seconds (if said).
pub struct TokenAnswer {
    pub access_token: String,
    pub expires_in: Option<u64>,
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
    let m = json_object(body, "token response", server);
    if !(200..300).contains(&status) {
        let code = m
            .ok()
            .and_then(|m| m.get("error").and_then(Value::as_str).map(str::to_string))
            .filter(|c| c.len() <= 40 && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            .unwrap_or_else(|| "no OAuth error code".into());
        return Err(format!(
            "{server}: its token endpoint refused the request (HTTP {status}, {code})"
        ));
    }
    let m = m?;
    let token = match m.get("access_token").and_then(Value::as_str) {
        Some(t) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()) => t.to_string(),
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
    Ok(TokenAnswer {
        access_token: token,
        expires_in: m.get("expires_in").and_then(Value::as_u64),
    })
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

    fn url(u: &str) -> HttpUrl {
        parse_http_url(u).unwrap()
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
    }
}
