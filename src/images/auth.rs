//! A registry's authentication, as the distribution spec and every registry in use have it:
//! a request answered 401 carries `WWW-Authenticate: Bearer realm="...",service="...",
//! scope="..."` (ask the realm, with the credential as Basic, for a token) or `Basic
//! realm="..."` (send the credential itself). Pure: the requests are made by `pull`.

/// What a registry's 401 asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

/// The challenge of a `WWW-Authenticate` value, or `None` for a scheme Airlock does not
/// speak.
pub fn parse_challenge(h: &str) -> Option<Challenge> {
    let h = h.trim();
    let (scheme, rest) = h.split_once(char::is_whitespace).unwrap_or((h, ""));
    let params = params(rest);
    let get = |k: &str| {
        params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.clone())
    };
    if scheme.eq_ignore_ascii_case("basic") {
        Some(Challenge::Basic)
    } else if scheme.eq_ignore_ascii_case("bearer") {
        Some(Challenge::Bearer {
            realm: get("realm")?,
            service: get("service"),
            scope: get("scope"),
        })
    } else {
        None
    }
}

/// `k="v", k2=v2` (quoted strings may hold commas and `\"`).
fn params(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        let mut k = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' {
                break;
            }
            k.push(c);
            chars.next();
        }
        if chars.next() != Some('=') {
            return out;
        }
        let mut v = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => v.extend(chars.next()),
                    '"' => break,
                    c => v.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                v.push(c);
                chars.next();
            }
        }
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
}

/// The token request: the realm with `service` and `scope` added to its query. The realm
/// must be https: the credential goes there.
pub fn token_url(realm: &str, service: Option<&str>, scope: &str) -> Result<String, String> {
    if !realm.starts_with("https://") || realm.contains(['#', ' ']) {
        return Err("its token service (the realm of its challenge) is not an https URL".into());
    }
    let mut url = realm.to_string();
    let mut sep = if realm.contains('?') { '&' } else { '?' };
    if let Some(s) = service {
        url.push(sep);
        url.push_str("service=");
        url.push_str(&encode(s));
        sep = '&';
    }
    url.push(sep);
    url.push_str("scope=");
    url.push_str(&encode(scope));
    Ok(url)
}

/// The token of a token service's answer (`token`, or OAuth's `access_token`).
pub fn token_of(answer: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(answer).ok()?;
    let t = v.get("token").or_else(|| v.get("access_token"))?.as_str()?;
    // A header value: printable, no spaces.
    (!t.is_empty() && t.len() <= 64 << 10 && t.bytes().all(|b| b.is_ascii_graphic()))
        .then(|| t.to_string())
}

/// `Basic <base64(user:password)>`.
pub fn basic(user_password: &str) -> String {
    format!("Basic {}", base64(user_password.as_bytes()))
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn base64(b: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_as_registries_send_them() {
        assert_eq!(
            parse_challenge(
                r#"Bearer realm="https://auth.registry.example/token",service="registry.example",scope="repository:acme/a,b:pull""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.registry.example/token".into(),
                service: Some("registry.example".into()),
                scope: Some("repository:acme/a,b:pull".into()),
            })
        );
        assert_eq!(
            parse_challenge(r#"Basic realm="x""#),
            Some(Challenge::Basic)
        );
        assert_eq!(parse_challenge("Negotiate abc"), None);
        assert_eq!(parse_challenge(r#"Bearer service="x""#), None);
    }

    #[test]
    fn token_requests_go_to_https_realms_only() {
        assert_eq!(
            token_url(
                "https://a.example/token",
                Some("r.example"),
                "repository:acme/x:pull"
            )
            .unwrap(),
            "https://a.example/token?service=r.example&scope=repository%3Aacme%2Fx%3Apull"
        );
        assert!(token_url("http://a.example/token", None, "s").is_err());
        assert_eq!(
            token_of(br#"{"token":"abc.def"}"#).as_deref(),
            Some("abc.def")
        );
        assert_eq!(token_of(br#"{"access_token":"t"}"#).as_deref(), Some("t"));
        assert_eq!(token_of(br#"{"token":"a b"}"#), None);
    }

    #[test]
    fn basic_is_base64_of_user_and_password() {
        assert_eq!(
            basic("Aladdin:open sesame"),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        assert_eq!(basic("a:b"), "Basic YTpi");
        assert_eq!(basic("ab:c"), "Basic YWI6Yw==");
    }
}
