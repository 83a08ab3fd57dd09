//! The organization's GitHub App, as airlockd uses it: an App JWT (RS256, ten minutes)
//! signed with the App's private key, installation tokens minted per run and narrowed to
//! the run's repositories and the permissions its role implies, and their revocation
//! (`DELETE /installation/token`) when the run's lease ends.
//!
//! Minted tokens live in this process's memory ([`Held`]), by lease id, until their
//! revocation is confirmed, and in one root-only file per lease under the state directory
//! (`leases/held/`, 0600 in a 0700 directory, as the App's own key is kept) so that the
//! next start can revoke at GitHub what a crash left alive; never in the journal, the
//! ledger or an error. A token whose file is lost too dies at GitHub's own expiry (an
//! hour), which the lease records so the start-up sweep can say when it is really over.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, StatusCode};
use serde_json::{json, Value};

use super::Secret;
use crate::urls::ProviderUrl;

/// The App's private key, parsed once.
pub struct AppKey(ring::signature::RsaKeyPair);

impl std::fmt::Debug for AppKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AppKey(<withheld>)")
    }
}

impl AppKey {
    /// A PEM private key: PKCS#1 (`BEGIN RSA PRIVATE KEY`, what GitHub hands out) or
    /// PKCS#8 (`BEGIN PRIVATE KEY`). Errors say what is wrong, never what is there.
    pub fn from_pem(pem: &str) -> Result<AppKey, String> {
        let (label, der) = pem_block(pem).ok_or("not a PEM private key")?;
        let pair = match label {
            "RSA PRIVATE KEY" => ring::signature::RsaKeyPair::from_der(&der),
            "PRIVATE KEY" => ring::signature::RsaKeyPair::from_pkcs8(&der),
            _ => return Err("not an RSA private key (BEGIN RSA PRIVATE KEY)".into()),
        }
        .map_err(|_| "not a usable RSA private key".to_string())?;
        Ok(AppKey(pair))
    }

    /// The App's JWT: issued a minute ago (clock skew), good for nine minutes more.
    pub fn jwt(&self, app_id: u64, now_s: u64) -> Result<String, String> {
        let header = b64url(br#"{"alg":"RS256","typ":"JWT"}"#);
        let claims =
            json!({"iat": now_s.saturating_sub(60), "exp": now_s + 540, "iss": app_id.to_string()});
        let signing = format!("{header}.{}", b64url(claims.to_string().as_bytes()));
        let mut sig = vec![0u8; self.0.public().modulus_len()];
        self.0
            .sign(
                &ring::signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                signing.as_bytes(),
                &mut sig,
            )
            .map_err(|_| "the App JWT could not be signed".to_string())?;
        Ok(format!("{signing}.{}", b64url(&sig)))
    }
}

/// The first PEM block: its label and its bytes.
fn pem_block(text: &str) -> Option<(&str, Vec<u8>)> {
    let start = text.find("-----BEGIN ")?;
    let rest = &text[start + 11..];
    let label_end = rest.find("-----")?;
    let label = &rest[..label_end];
    let body = &rest[label_end + 5..];
    let end = body.find(&format!("-----END {label}-----"))?;
    let b64: String = body[..end]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    Some((label, b64_decode(&b64)?))
}

fn b64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        match chunk.len() {
            4 => out.extend_from_slice(&bytes[1..4]),
            3 => out.extend_from_slice(&bytes[1..3]),
            2 => out.push(bytes[1]),
            _ => return None,
        }
    }
    Some(out)
}

/// Base64url without padding (JWT's alphabet).
pub fn b64url(b: &[u8]) -> String {
    b64(
        b,
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
        false,
    )
}

/// Standard base64 with padding (HTTP Basic).
pub fn b64std(b: &[u8]) -> String {
    b64(
        b,
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        true,
    )
}

fn b64(b: &[u8], alpha: &[u8; 64], pad: bool) -> String {
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..=chunk.len() {
            out.push(alpha[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
        if pad {
            for _ in chunk.len()..3 {
                out.push('=');
            }
        }
    }
    out
}

/// Decode standard base64 (HTTP Basic credentials).
pub fn b64std_decode(s: &str) -> Option<Vec<u8>> {
    b64_decode(s)
}

/// What a token is asked for: one owner's repositories and the role's permissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenScope {
    pub owner: String,
    /// Repository names (without the owner).
    pub repos: Vec<String>,
    /// GitHub permission name -> `read` or `write`.
    pub permissions: BTreeMap<String, String>,
}

impl TokenScope {
    /// The body of `POST /app/installations/{id}/access_tokens`.
    pub fn request_body(&self) -> Value {
        json!({"repositories": self.repos, "permissions": self.permissions})
    }
}

/// The scopes of a run's tokens: `writes.repos` and `run.clone`, grouped by owner (one
/// installation each), with `permissions` (GitHub's names, `name: level`).
pub fn scopes(repos: &[String], permissions: &[String]) -> Vec<TokenScope> {
    let mut perms = BTreeMap::new();
    for p in permissions {
        if let Some((k, v)) = p.split_once(": ") {
            perms.insert(k.to_string(), v.to_string());
        }
    }
    let mut by_owner: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for r in repos {
        if let Some((o, n)) = r.split_once('/') {
            let v = by_owner.entry(o).or_default();
            if !v.iter().any(|x| x == n) {
                v.push(n.to_string());
            }
        }
    }
    by_owner
        .into_iter()
        .map(|(owner, repos)| TokenScope {
            owner: owner.to_string(),
            repos,
            permissions: perms.clone(),
        })
        .collect()
}

/// Where the App's API is and how to reach it.
#[derive(Clone)]
pub struct AppClient {
    pub api: ProviderUrl,
    pub tls: Arc<rustls::ClientConfig>,
}

/// One minted installation token.
#[derive(Clone)]
pub struct Minted {
    pub owner: String,
    pub token: Secret,
    /// Unix milliseconds: GitHub's own expiry of the token.
    pub expires_at: u64,
    pub client: AppClient,
}

impl std::fmt::Debug for Minted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Minted")
            .field("owner", &self.owner)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// Time for one call to the App's API.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Run `fut` to its end on a thread of its own (the caller may be on a runtime or not).
fn blocking<T: Send + 'static>(
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    std::thread::Builder::new()
        .name("github-app".into())
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(fut))
                .map_err(|e| format!("no runtime for the GitHub App's call: {e}"))
        })
        .map_err(|e| format!("no thread for the GitHub App's call: {e}"))?
        .join()
        .map_err(|_| "the GitHub App's call failed".to_string())?
}

/// One call to the App's API: status and JSON body (at most 1 MiB).
async fn call(
    client: &AppClient,
    method: Method,
    path: &str,
    auth: &str,
    body: Option<Value>,
) -> Result<(StatusCode, Value), String> {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(CALL_TIMEOUT));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*client.tls).clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let c: hyper_util::client::legacy::Client<_, Full<Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https);
    let scheme = if client.api.https { "https" } else { "http" };
    let url = format!(
        "{scheme}://{}{}{path}",
        client.api.authority, client.api.base_path
    );
    let mut auth = hyper::header::HeaderValue::from_str(auth)
        .map_err(|_| "the App's credential is not a valid header".to_string())?;
    auth.set_sensitive(true);
    let req = Request::builder()
        .method(method)
        .uri(&url)
        .header(hyper::header::AUTHORIZATION, auth)
        .header(hyper::header::ACCEPT, "application/vnd.github+json")
        .header(hyper::header::USER_AGENT, "airlockd")
        .header("x-github-api-version", "2022-11-28")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        )))
        .map_err(|_| "the App's request could not be built".to_string())?;
    let resp = tokio::time::timeout(CALL_TIMEOUT, c.request(req))
        .await
        .map_err(|_| format!("{url}: no answer in {} s", CALL_TIMEOUT.as_secs()))?
        .map_err(|_| format!("{url}: could not be reached"))?;
    let status = resp.status();
    let bytes = Limited::new(resp.into_body(), 1 << 20)
        .collect()
        .await
        .map_err(|_| format!("{url}: the answer could not be read"))?
        .to_bytes();
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

/// Mint one installation token per scope: the installation from `installations`, else
/// looked up from the owner's first repository. Fails (and revokes what it minted) when
/// any cannot be minted: a run gets all its tokens or none.
pub fn mint_all(
    client: &AppClient,
    key: &AppKey,
    app_id: u64,
    installations: &BTreeMap<String, u64>,
    scopes: &[TokenScope],
    now_ms: u64,
) -> Result<Vec<Minted>, String> {
    let jwt = format!("Bearer {}", key.jwt(app_id, now_ms / 1000)?);
    let (client2, installations, scopes) = (client.clone(), installations.clone(), scopes.to_vec());
    let minted = blocking(async move {
        let mut out: Vec<Minted> = Vec::new();
        for s in &scopes {
            match mint_one(&client2, &jwt, &installations, s).await {
                Ok(m) => out.push(m),
                Err(e) => {
                    for m in &out {
                        let _ = delete(m).await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(out)
    })??;
    Ok(minted)
}

async fn mint_one(
    client: &AppClient,
    jwt: &str,
    installations: &BTreeMap<String, u64>,
    s: &TokenScope,
) -> Result<Minted, String> {
    let id = match installations.get(&s.owner) {
        Some(id) => *id,
        None => {
            let first = s
                .repos
                .first()
                .ok_or("no repository to scope the token to")?;
            let path = format!("/repos/{}/{first}/installation", s.owner);
            let (st, v) = call(client, Method::GET, &path, jwt, None).await?;
            match v.get("id").and_then(Value::as_u64) {
                Some(id) if st.is_success() => id,
                _ => {
                    return Err(format!(
                        "the App has no installation for {} (GET {path}: HTTP {}); install it there or set github.installations.{}",
                        s.owner,
                        st.as_u16(),
                        s.owner
                    ))
                }
            }
        }
    };
    let path = format!("/app/installations/{id}/access_tokens");
    let (st, v) = call(client, Method::POST, &path, jwt, Some(s.request_body())).await?;
    let token = v
        .get("token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()));
    match token {
        Some(t) if st.is_success() => Ok(Minted {
            owner: s.owner.clone(),
            token: Secret(t.to_string()),
            expires_at: v
                .get("expires_at")
                .and_then(Value::as_str)
                .and_then(crate::calendar::parse_utc_ms)
                // Unknown: GitHub's documented lifetime.
                .unwrap_or_else(|| crate::clock::now_ms() + 3_600_000),
            client: client.clone(),
        }),
        _ => Err(format!(
            "POST {path}: HTTP {}: no installation token for {} (the App may lack a permission the role's writes imply, or a repository)",
            st.as_u16(),
            s.owner
        )),
    }
}

/// `DELETE /installation/token`: done when GitHub says so (204), or when the token no
/// longer authenticates (401: expired or already revoked).
async fn delete(m: &Minted) -> Result<(), String> {
    let auth = format!("token {}", m.token.expose());
    let (st, _) = call(
        &m.client,
        Method::DELETE,
        "/installation/token",
        &auth,
        None,
    )
    .await?;
    if st == StatusCode::NO_CONTENT || st == StatusCode::UNAUTHORIZED {
        Ok(())
    } else {
        Err(format!("DELETE /installation/token: HTTP {}", st.as_u16()))
    }
}

/// Tokens minted and not yet confirmed revoked, by lease id, with when their DELETE was
/// last tried and the file that keeps them for a restart.
static HELD: Mutex<BTreeMap<String, HeldTokens>> = Mutex::new(BTreeMap::new());
type HeldTokens = (Vec<Minted>, Option<std::time::Instant>, Option<PathBuf>);

/// Where tokens are kept for their revocation after a crash.
pub fn held_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("leases").join("held")
}

/// The file of `lease` (`run/R/github/1`) in `dir`.
fn held_file(dir: &Path, lease: &str) -> PathBuf {
    dir.join(format!("{}.json", lease.replace('/', "+")))
}

/// What a held file keeps of each token: enough to DELETE it.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeptToken {
    owner: String,
    token: String,
    expires_at: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Kept {
    lease: String,
    tokens: Vec<KeptToken>,
}
/// Leases whose tokens GitHub confirmed revoked, until their lease record says so, with
/// the file that keeps their tokens: it goes only once the record is written, so a crash in
/// between leaves the tokens to be DELETEd again at the next start (a dead token's DELETE
/// is answered 401, which confirms it), not a lease pending for the tokens' hour.
static CONFIRMED: Mutex<BTreeMap<String, Option<PathBuf>>> = Mutex::new(BTreeMap::new());

/// A DELETE that just failed is not tried again sooner than this (so a caller holding the
/// ledger lock after a failed attempt outside it does not wait on GitHub again).
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The tokens of leases, as held here.
pub struct Held;

impl Held {
    /// Hold `lease`'s tokens, kept first in their file under `dir` ([`held_dir`]) so a
    /// crash cannot leave them alive unknown to the next start. Refused (the tokens are
    /// then the caller's to revoke) when the file cannot be written.
    pub fn put(lease: &str, minted: Vec<Minted>, dir: &Path) -> Result<(), String> {
        let kept = Kept {
            lease: lease.to_string(),
            tokens: minted
                .iter()
                .map(|m| KeptToken {
                    owner: m.owner.clone(),
                    token: m.token.expose().to_string(),
                    expires_at: m.expires_at,
                })
                .collect(),
        };
        let file = held_file(dir, lease);
        let keep = || -> std::io::Result<()> {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            let text = serde_json::to_vec(&kept).map_err(std::io::Error::other)?;
            super::leases::write_atomic(&file, &text)
        };
        let stored = keep().map_err(|e| {
            format!(
                "{}: the run's GitHub tokens could not be kept for their revocation: {e}",
                file.display()
            )
        });
        if let Ok(mut h) = HELD.lock() {
            // Held either way: a token that was minted is revoked by this process.
            h.insert(
                lease.to_string(),
                (minted, None, stored.is_ok().then_some(file)),
            );
        }
        stored
    }

    /// Take back the tokens a crashed process kept in `dir` (each lease this process does
    /// not hold, and whose run `skip` does not name as still supervised elsewhere), so the
    /// start-up sweep revokes them at GitHub. Files that cannot be read are left alone
    /// (named in the answer); tokens past GitHub's expiry are forgotten with their file.
    pub fn reload(
        dir: &Path,
        client: &AppClient,
        now_ms: u64,
        skip: &dyn Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut unread = Vec::new();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return unread;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            let Some(kept) = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Kept>(&b).ok())
            else {
                unread.push(path.display().to_string());
                continue;
            };
            let run = kept.lease.split('/').nth(1).unwrap_or("");
            if skip(run) || Held::holds(&kept.lease) {
                continue;
            }
            let minted: Vec<Minted> = kept
                .tokens
                .into_iter()
                .filter(|t| t.expires_at > now_ms)
                .map(|t| Minted {
                    owner: t.owner,
                    token: Secret(t.token),
                    expires_at: t.expires_at,
                    client: client.clone(),
                })
                .collect();
            if minted.is_empty() {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            if let Ok(mut h) = HELD.lock() {
                h.insert(kept.lease, (minted, None, Some(path)));
            }
        }
        unread
    }

    /// Whether this process still holds tokens for `lease`.
    pub fn holds(lease: &str) -> bool {
        HELD.lock().is_ok_and(|h| h.contains_key(lease))
    }

    /// Revoke the tokens of `lease` at GitHub (each tried twice); true when none is left
    /// alive (GitHub confirmed, now or before). Tokens whose DELETE failed stay held for
    /// the next try, which waits [`RETRY_AFTER`].
    pub fn revoke(lease: &str) -> bool {
        if CONFIRMED.lock().is_ok_and(|c| c.contains_key(lease)) {
            return true;
        }
        let taken = HELD.lock().ok().and_then(|mut h| {
            let recent = h
                .get(lease)
                .and_then(|(_, t, _)| *t)
                .is_some_and(|t| t.elapsed() < RETRY_AFTER);
            if recent {
                None
            } else {
                h.remove(lease).map(|(m, _, f)| (m, f))
            }
        });
        let Some((all, file)) = taken else {
            return false;
        };
        let left = blocking(async move {
            let mut left = Vec::new();
            for m in all {
                let mut ok = false;
                for attempt in 0..2 {
                    if attempt > 0 {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    if delete(&m).await.is_ok() {
                        ok = true;
                        break;
                    }
                }
                if !ok {
                    left.push(m);
                }
            }
            left
        });
        match left {
            Ok(left) if left.is_empty() => {
                if let Ok(mut c) = CONFIRMED.lock() {
                    c.insert(lease.to_string(), file);
                }
                true
            }
            Ok(left) => {
                if let Ok(mut h) = HELD.lock() {
                    h.insert(
                        lease.to_string(),
                        (left, Some(std::time::Instant::now()), file),
                    );
                }
                false
            }
            Err(_) => false,
        }
    }

    /// Revoke every held token of `run` at GitHub: for callers to do before they take the
    /// ledger lock, so the lease records that follow need no network.
    pub fn revoke_run(run: &str) {
        let prefix = format!("run/{run}/");
        let leases: Vec<String> = HELD
            .lock()
            .map(|h| {
                h.keys()
                    .filter(|k| k.starts_with(&prefix))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        for l in leases {
            Held::revoke(&l);
        }
    }

    /// The lease's revocation is recorded (or, for a run that never started, there is
    /// nothing to record): forget it, and its file.
    pub fn recorded(lease: &str) {
        let file = CONFIRMED
            .lock()
            .ok()
            .and_then(|mut c| c.remove(lease))
            .flatten();
        if let Some(f) = file {
            let _ = std::fs::remove_file(&f);
            if let Some(d) = f.parent() {
                super::leases::sync_dir(d);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_scopes_group_by_owner() {
        for s in [&b""[..], b"a", b"ab", b"abc", b"abcd", &[0xff, 0xfe, 0x00]] {
            assert_eq!(b64_decode(&b64std(s)).as_deref(), Some(s));
            assert_eq!(b64_decode(&b64url(s)).as_deref(), Some(s));
        }
        assert_eq!(b64std(b"x-access-token:t"), "eC1hY2Nlc3MtdG9rZW46dA==");
        let sc = scopes(
            &["o/a".into(), "p/b".into(), "o/c".into(), "o/a".into()],
            &["contents: write".into(), "issues: write".into()],
        );
        assert_eq!(sc.len(), 2);
        assert_eq!(sc[0].repos, ["a", "c"]);
        assert_eq!(
            sc[0].request_body(),
            json!({"repositories": ["a", "c"], "permissions": {"contents": "write", "issues": "write"}})
        );
    }

    #[test]
    fn a_bad_key_is_refused_without_its_text() {
        for bad in [
            "",
            "secret-ish",
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        ] {
            let e = AppKey::from_pem(bad).unwrap_err();
            assert!(!e.contains("AAAA") && !e.contains("secret"), "{e}");
        }
    }
}
