//! The registry client's transport: HTTPS only (verified against the system's CAs or the
//! registry's `ca_file`), the host's own resolver, redirects followed a few times (blob
//! stores answer from elsewhere) without the credential when the host changes, every wait
//! bounded. Synchronous to its caller: `pull` reads bodies as `Read`, so blobs go through
//! the same store code as an import.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{HeaderMap, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as Legacy;
use hyper_util::rt::TokioExecutor;

/// Longest wait for an answer's head, and between two pieces of a body.
const WAIT: Duration = Duration::from_secs(60);
const MAX_REDIRECTS: usize = 5;

pub struct Client {
    rt: tokio::runtime::Runtime,
    client: Legacy<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Incoming,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Client {
    pub fn new(ca_file: Option<&Path>) -> Result<Client, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the client: {e}"))?;
        let tls = tls_config(ca_file)?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(20)));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .wrap_connector(http);
        Ok(Client {
            rt,
            client: Legacy::builder(TokioExecutor::new()).build(https),
        })
    }

    /// GET `url` with `headers`; `auth` is sent to `url`'s host only (not after a redirect
    /// to another).
    pub fn get(
        &self,
        url: &str,
        auth: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Result<Response, String> {
        let mut uri: Uri = url.parse().map_err(|_| "not a URL".to_string())?;
        let first_host = uri.authority().map(|a| a.as_str().to_ascii_lowercase());
        for _ in 0..=MAX_REDIRECTS {
            if uri.scheme_str() != Some("https") {
                return Err("an answer sent it to a URL that is not https".into());
            }
            let same = uri.authority().map(|a| a.as_str().to_ascii_lowercase()) == first_host;
            let mut req = hyper::Request::get(uri.clone());
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            if let (Some(a), true) = (auth, same) {
                req = req.header("authorization", a);
            }
            let req = req
                .body(Empty::new())
                .map_err(|_| "cannot build the request".to_string())?;
            let resp = self
                .rt
                .block_on(async { tokio::time::timeout(WAIT, self.client.request(req)).await })
                .map_err(|_| "no answer in time".to_string())?
                .map_err(describe)?;
            let status = resp.status();
            if status.is_redirection() {
                let loc = resp
                    .headers()
                    .get("location")
                    .and_then(|v| v.to_str().ok())
                    .ok_or("a redirect without a Location")?;
                uri = next_uri(&uri, loc)?;
                continue;
            }
            let (parts, body) = resp.into_parts();
            return Ok(Response {
                status,
                headers: parts.headers,
                body,
            });
        }
        Err(format!("more than {MAX_REDIRECTS} redirects"))
    }

    /// The body as a reader.
    pub fn reader(&self, resp: Response) -> BodyReader<'_> {
        BodyReader {
            rt: &self.rt,
            body: resp.body,
            buf: Bytes::new(),
        }
    }

    /// The whole body, at most `max` bytes (an error past that).
    pub fn read_small(&self, resp: Response, max: u64) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        self.reader(resp)
            .take(max + 1)
            .read_to_end(&mut out)
            .map_err(|e| format!("cannot read the answer: {e}"))?;
        if out.len() as u64 > max {
            return Err(format!("an answer larger than {max} bytes"));
        }
        Ok(out)
    }
}

/// Where a redirect goes: an absolute https URL or a path on the same origin.
fn next_uri(from: &Uri, loc: &str) -> Result<Uri, String> {
    let s = if loc.starts_with("https://") {
        loc.to_string()
    } else if loc.starts_with('/') && !loc.starts_with("//") {
        let auth = from
            .authority()
            .ok_or("a redirect from a URL without a host")?;
        format!("https://{auth}{loc}")
    } else {
        return Err("a redirect to a URL that is not https".into());
    };
    s.parse()
        .map_err(|_| "a redirect to something not a URL".into())
}

/// A transport error in words (the chain's innermost cause says most: a certificate, a
/// refused connection, a name that does not resolve).
fn describe(e: hyper_util::client::legacy::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(inner) = src {
        s = format!("{s}: {inner}");
        src = inner.source();
    }
    s
}

/// A body read synchronously, each piece waited for at most [`WAIT`].
pub struct BodyReader<'a> {
    rt: &'a tokio::runtime::Runtime,
    body: Incoming,
    buf: Bytes,
}

impl Read for BodyReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while !self.buf.has_remaining() {
            let next = self
                .rt
                .block_on(async { tokio::time::timeout(WAIT, self.body.frame()).await })
                .map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the registry stopped sending",
                    )
                })?;
            match next {
                None => return Ok(0),
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf = data;
                    }
                }
            }
        }
        let n = out.len().min(self.buf.remaining());
        self.buf.copy_to_slice(&mut out[..n]);
        Ok(n)
    }
}

/// TLS with the system's CAs, or with `ca_file`'s alone.
fn tls_config(ca_file: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err("no CA certificates found on this host (install ca-certificates, or set the registry's ca_file)".into());
            }
        }
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("{}: cannot read CA certificates: {e}", path.display()))?;
            for c in certs {
                let c =
                    c.map_err(|_| format!("{}: not a PEM file of certificates", path.display()))?;
                roots
                    .add(c)
                    .map_err(|_| format!("{}: a certificate is not a valid CA", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("{}: holds no certificate", path.display()));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_stay_on_https() {
        let from: Uri = "https://r.example:5000/v2/a/blobs/x".parse().unwrap();
        assert_eq!(
            next_uri(&from, "/elsewhere?x=1").unwrap().to_string(),
            "https://r.example:5000/elsewhere?x=1"
        );
        assert_eq!(
            next_uri(&from, "https://cdn.example/b")
                .unwrap()
                .to_string(),
            "https://cdn.example/b"
        );
        assert!(next_uri(&from, "http://cdn.example/b").is_err());
        assert!(next_uri(&from, "//cdn.example/b").is_err());
        assert!(next_uri(&from, "relative").is_err());
    }
}
