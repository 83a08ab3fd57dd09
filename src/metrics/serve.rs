//! `GET /metrics` on loopback TCP or a unix socket, on airlockd's runtime: the Prometheus
//! text format (0.0.4), or OpenMetrics when the scraper's `Accept` asks for it. Both are
//! the crate's own encoders.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::Metrics;
use crate::config::metrics::{MetricsConf, MetricsListen};

/// Called before each scrape to bring the scrape-time gauges up to date.
pub type Refresh = Arc<dyn Fn() + Send + Sync>;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 16;

/// Whether an `Accept` header asks for OpenMetrics (Prometheus sends it first, weighted).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|part| {
            let mut it = part.split(';');
            let ty = it.next().unwrap_or("").trim();
            let q_zero = it.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .is_some_and(|q| q.trim().parse::<f64>().is_ok_and(|q| q <= 0.0))
            });
            ty.eq_ignore_ascii_case("application/openmetrics-text") && !q_zero
        })
    })
}

/// The body and content type of one scrape.
pub fn render(metrics: &Metrics, openmetrics: bool) -> (String, &'static str) {
    let mut out = String::with_capacity(8 << 10);
    let encoded = if openmetrics {
        prometheus_client::encoding::text::encode(&mut out, metrics.registry())
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, metrics.registry())
    };
    if encoded.is_err() {
        out.clear();
    }
    let ty = if openmetrics {
        OPENMETRICS
    } else {
        prometheus_client::encoding::prometheus_text::CONTENT_TYPE
    };
    (out, ty)
}

fn respond(status: StatusCode, ty: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ty));
    r
}

async fn handle(
    metrics: Arc<Metrics>,
    refresh: Refresh,
    req: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    if req.uri().path() != "/metrics" {
        return respond(
            StatusCode::NOT_FOUND,
            "text/plain",
            "only /metrics\n".into(),
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    let om = wants_openmetrics(req.headers().get(ACCEPT).and_then(|v| v.to_str().ok()));
    // The refresh reads /proc and the daemon's tables: off the runtime's workers.
    let body = tokio::task::spawn_blocking(move || {
        refresh();
        metrics.process.refresh();
        render(&metrics, om)
    })
    .await;
    match body {
        Ok((b, ty)) => respond(StatusCode::OK, ty, b),
        Err(_) => respond(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            "scrape failed\n".into(),
        ),
    }
}

fn serve_conn<S>(
    io: S,
    metrics: &Arc<Metrics>,
    refresh: &Refresh,
    slots: &Arc<tokio::sync::Semaphore>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Ok(slot) = slots.clone().try_acquire_owned() else {
        return;
    };
    let (m, r) = (metrics.clone(), refresh.clone());
    tokio::spawn(async move {
        let service = hyper::service::service_fn(move |req| {
            let (m, r) = (m.clone(), r.clone());
            async move { Ok::<_, Infallible>(handle(m, r, req).await) }
        });
        // A scraper that stalls is cut off rather than holding a slot.
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            hyper::server::conn::http1::Builder::new()
                .max_buf_size(16 << 10)
                .serve_connection(TokioIo::new(io), service),
        )
        .await;
        drop(slot);
    });
}

/// Bind what the config names (a unix socket gets its mode and group before it appears
/// under its name). Call on the runtime.
pub async fn bind(conf: &MetricsConf) -> Result<Listener, String> {
    match &conf.listen {
        MetricsListen::Tcp(addr) => tokio::net::TcpListener::bind(addr)
            .await
            .map(Listener::Tcp)
            .map_err(|e| format!("metrics.listen: cannot listen on {addr}: {e}")),
        MetricsListen::Unix(path) => {
            let gid = match &conf.group {
                Some(g) => Some(g.resolve().map_err(|e| format!("metrics.group: {e}"))?),
                None => None,
            };
            bind_unix(path, conf.mode, gid)
                .map(Listener::Unix)
                .map_err(|e| format!("metrics.listen: {}: {e}", path.display()))
        }
    }
}

fn bind_unix(
    path: &Path,
    mode: u32,
    gid: Option<u32>,
) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    // A socket left by an earlier airlockd is replaced; anything else is not ours to remove.
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            return Err(std::io::Error::other("exists and is not a socket"));
        }
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let l = std::os::unix::net::UnixListener::bind(&tmp)?;
    let done = (|| {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        if let Some(g) = gid {
            std::os::unix::fs::chown(&tmp, None, Some(g))?;
        }
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = done {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    l.set_nonblocking(true)?;
    tokio::net::UnixListener::from_std(l)
}

pub enum Listener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// Serve scrapes until the task is dropped or aborted.
pub async fn serve(listener: Listener, metrics: Arc<Metrics>, refresh: Refresh) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        match &listener {
            Listener::Tcp(l) => match l.accept().await {
                Ok((s, _)) => serve_conn(s, &metrics, &refresh, &slots),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            },
            Listener::Unix(l) => match l.accept().await {
                Ok((s, _)) => serve_conn(s, &metrics, &refresh, &slots),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_when_asked() {
        assert!(!wants_openmetrics(None));
        assert!(!wants_openmetrics(Some("text/plain;version=0.0.4")));
        assert!(wants_openmetrics(Some(
            "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        )));
        assert!(!wants_openmetrics(Some(
            "application/openmetrics-text;q=0, text/plain"
        )));
    }

    #[test]
    fn both_formats_come_from_the_crate() {
        let m = Metrics::new();
        m.bash_commands
            .get_or_create(&super::super::RoleDecision {
                role: "code".into(),
                decision: "deny",
            })
            .inc_by(3);
        let (text, ty) = render(&m, false);
        assert!(ty.starts_with("text/plain"));
        assert!(text.contains("airlock_bash_commands_total{role=\"code\",decision=\"deny\"} 3"));
        assert!(!text.contains("# EOF"));
        let (om, ty) = render(&m, true);
        assert!(ty.starts_with("application/openmetrics-text"));
        assert!(om.ends_with("# EOF\n"));
    }
}
