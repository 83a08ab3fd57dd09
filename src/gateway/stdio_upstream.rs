//! A stdio connector's upstream: newline-delimited JSON-RPC over the socket that is the
//! connector jail's stdin and stdout. One reader task routes responses to their callers
//! by id, answers the server's own requests as [`super::upstream::answer_server_request`]
//! does, and drops its notifications. A stdio server has one session: the first
//! `initialize` is sent, later ones get its answer again.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::strict_json;
use super::upstream::{answer_server_request, Exchange, UpstreamError, MAX_ANSWER_BYTES, TIMEOUT};

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>;

pub struct StdioUpstream {
    writer: Arc<tokio::sync::Mutex<tokio::net::unix::OwnedWriteHalf>>,
    pending: Pending,
    /// The answer to the first `initialize`, and whether `initialized` was sent.
    init: tokio::sync::Mutex<(Option<Value>, bool)>,
    /// Requests the server made of its client, answered here, by method.
    asked: Arc<Mutex<Vec<String>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for StdioUpstream {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn write_line(
    w: &tokio::sync::Mutex<tokio::net::unix::OwnedWriteHalf>,
    msg: &Value,
) -> Result<(), UpstreamError> {
    let mut line = serde_json::to_vec(msg).map_err(|_| UpstreamError::Malformed)?;
    line.push(b'\n');
    w.lock()
        .await
        .write_all(&line)
        .await
        .map_err(|_| UpstreamError::Unreachable)
}

impl StdioUpstream {
    /// Serve `sock` (the gateway's end of the connector's stdio). Must be called inside a
    /// tokio runtime.
    pub fn new(sock: OwnedFd) -> std::io::Result<StdioUpstream> {
        let std_sock = std::os::unix::net::UnixStream::from(sock);
        std_sock.set_nonblocking(true)?;
        let (mut rd, wr) = tokio::net::UnixStream::from_std(std_sock)?.into_split();
        let writer = Arc::new(tokio::sync::Mutex::new(wr));
        let pending: Pending = Arc::default();
        let asked: Arc<Mutex<Vec<String>>> = Arc::default();
        let (w, p, a) = (writer.clone(), pending.clone(), asked.clone());
        let reader = tokio::spawn(async move {
            let mut buf: Vec<u8> = Vec::new();
            let mut chunk = vec![0u8; 64 << 10];
            loop {
                while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=nl).collect();
                    let Ok(v) = strict_json::parse(&line[..line.len() - 1]) else {
                        continue; // Not a message (a stray log line): nothing to route.
                    };
                    if v.get("method").is_some() && v.get("id").is_some() {
                        lock(&a).push(v["method"].as_str().unwrap_or("?").to_string());
                        let _ = write_line(&w, &answer_server_request(&v)).await;
                    } else if let Some(id) = v.get("id") {
                        if let Some(tx) = lock(&p).remove(&id.to_string()) {
                            let _ = tx.send(v);
                        }
                    }
                }
                if buf.len() > MAX_ANSWER_BYTES {
                    break; // A line past every bound: the connector is not speaking MCP.
                }
                match rd.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            // Every caller still waiting learns the upstream is gone.
            lock(&p).clear();
        });
        Ok(StdioUpstream {
            writer,
            pending,
            init: tokio::sync::Mutex::new((None, false)),
            asked,
            reader,
        })
    }

    /// Send one message; with `id`, wait for its response.
    pub async fn post(&self, msg: &Value, id: Option<&Value>) -> Result<Exchange, UpstreamError> {
        let method = msg.get("method").and_then(Value::as_str);
        if method == Some("initialize") {
            let mut init = self.init.lock().await;
            if let (Some(answer), Some(id)) = (&init.0, id) {
                let mut r = answer.clone();
                r["id"] = id.clone();
                return Ok(Exchange {
                    status: 200,
                    response: Some(r),
                    ..Exchange::default()
                });
            }
            let ex = self.request(msg, id).await?;
            init.0 = ex.response.clone();
            return Ok(ex);
        }
        if method == Some("notifications/initialized") {
            let mut init = self.init.lock().await;
            if init.1 {
                return Ok(Exchange::default());
            }
            init.1 = true;
        }
        self.request(msg, id).await
    }

    async fn request(&self, msg: &Value, id: Option<&Value>) -> Result<Exchange, UpstreamError> {
        let Some(id) = id else {
            write_line(&self.writer, msg).await?;
            return Ok(Exchange::default());
        };
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id.to_string(), tx);
        let before = lock(&self.asked).len();
        if let Err(e) = write_line(&self.writer, msg).await {
            lock(&self.pending).remove(&id.to_string());
            return Err(e);
        }
        let response = match tokio::time::timeout(TIMEOUT, rx).await {
            Ok(Ok(v)) => v,
            Ok(Err(_)) => return Err(UpstreamError::Unreachable),
            Err(_) => {
                lock(&self.pending).remove(&id.to_string());
                return Err(UpstreamError::Timeout);
            }
        };
        let asked = lock(&self.asked)
            .get(before..)
            .map(<[String]>::to_vec)
            .unwrap_or_default();
        Ok(Exchange {
            status: 200,
            session: None,
            response: Some(response),
            asked,
        })
    }
}
