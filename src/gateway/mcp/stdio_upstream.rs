//! A stdio connector's upstream: newline-delimited JSON-RPC over the socket that is the
//! connector jail's stdin and stdout. One reader task routes responses to their callers
//! by id, answers the server's own requests as [`crate::gateway::mcp::upstream::answer_server_request`]
//! does, and drops its notifications. A stdio server has one session: the first
//! `initialize` is sent, later ones get its answer again. Every agent session shares it,
//! and each numbers its own requests, so a request goes out under an id of this upstream's
//! own and its answer comes back under the caller's: two sessions' equal ids must never
//! meet (one would get the other's answer).
//!
//! Nothing the server sends stays here beyond its use: a line is at most
//! [`MAX_ANSWER_BYTES`] (longer, and the connector is taken for one not speaking MCP) and
//! [`strict_json::MAX_ANSWER_VALUES`] values; of its own requests only the last
//! [`MAX_SERVER_REQUESTS`] method names are kept, each cut to
//! [`MAX_METHOD_BYTES`](crate::gateway::mcp::upstream::MAX_METHOD_BYTES); a
//! request that saw more than [`MAX_SERVER_REQUESTS`] of them fails; at most
//! [`MAX_PENDING`] requests wait for an answer at once.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::gateway::mcp::upstream::{
    answer_server_request, asked as asked_name, Exchange, UpstreamError, MAX_ANSWER_BYTES,
    MAX_SERVER_REQUESTS, TIMEOUT,
};
use crate::gateway::strict_json;

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>;

/// Most requests waiting for the server's answer at once (the proxy sends at most
/// [`crate::gateway::mcp::proxy::MAX_IN_FLIGHT`]; this bounds any other caller too).
pub const MAX_PENDING: usize = 16;

/// The server's own requests, as the journal names them: how many came, and the last
/// [`MAX_SERVER_REQUESTS`] names (each numbered by its arrival).
#[derive(Debug, Default)]
struct Asked {
    total: u64,
    recent: VecDeque<(u64, &'static str)>,
}

impl Asked {
    fn push(&mut self, method: Option<&str>) {
        self.total += 1;
        if self.recent.len() >= MAX_SERVER_REQUESTS {
            self.recent.pop_front();
        }
        self.recent.push_back((self.total, asked_name(method)));
    }

    /// How many came after the `before`th, and the names kept of them.
    fn since(&self, before: u64) -> (u64, Vec<&'static str>) {
        let names = self
            .recent
            .iter()
            .filter(|(n, _)| *n > before)
            .map(|(_, m)| *m)
            .collect();
        (self.total - before, names)
    }
}

pub struct StdioUpstream {
    writer: Arc<tokio::sync::Mutex<tokio::net::unix::OwnedWriteHalf>>,
    pending: Pending,
    /// The answer to the first `initialize`, and whether `initialized` was sent.
    init: tokio::sync::Mutex<(Option<Value>, bool)>,
    /// Requests the server made of its client, answered here.
    asked: Arc<Mutex<Asked>>,
    /// The id the next request goes out under.
    next_id: AtomicU64,
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
        let asked: Arc<Mutex<Asked>> = Arc::default();
        let (w, p, a) = (writer.clone(), pending.clone(), asked.clone());
        let reader = tokio::spawn(async move {
            let mut buf: Vec<u8> = Vec::new();
            // Lines are read from `start` on, and the buffer compacted once per read;
            // `searched` bytes of it are known to hold no newline.
            let mut searched = 0;
            let mut chunk = vec![0u8; 64 << 10];
            loop {
                let mut start = 0;
                while let Some(off) = buf[searched..].iter().position(|b| *b == b'\n') {
                    let nl = searched + off;
                    let line = &buf[start..nl];
                    (start, searched) = (nl + 1, nl + 1);
                    let v = match strict_json::parse_answer(line) {
                        Ok(v) => v,
                        Err(strict_json::StrictError::TooMany) => {
                            // Too big to read: its caller learns why, nobody else waits.
                            fail_too_many(line, &p);
                            continue;
                        }
                        // Not a message (a stray log line): nothing to route.
                        Err(_) => continue,
                    };
                    if v.get("method").is_some() && v.get("id").is_some() {
                        lock(&a).push(v["method"].as_str());
                        let _ = write_line(&w, &answer_server_request(&v)).await;
                    } else if let Some(id) = v.get("id") {
                        if let Some(tx) = lock(&p).remove(&id.to_string()) {
                            let _ = tx.send(v);
                        }
                    }
                }
                buf.drain(..start);
                searched = buf.len();
                if buf.len() > MAX_ANSWER_BYTES {
                    break; // A line past every bound: the connector is not speaking MCP.
                }
                // A long line read once leaves no long buffer behind.
                if buf.capacity() > 4 * chunk.len() && buf.len() <= chunk.len() {
                    buf.shrink_to(chunk.len());
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
            next_id: AtomicU64::new(1),
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
        if lock(&self.pending).len() >= MAX_PENDING {
            return Err(UpstreamError::Busy);
        }
        let wire = Value::from(self.next_id.fetch_add(1, Ordering::Relaxed));
        let key = wire.to_string();
        let mut out = msg.clone();
        let Some(o) = out.as_object_mut() else {
            return Err(UpstreamError::Malformed);
        };
        o.insert("id".into(), wire);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(key.clone(), tx);
        let before = lock(&self.asked).total;
        if let Err(e) = write_line(&self.writer, &out).await {
            lock(&self.pending).remove(&key);
            return Err(e);
        }
        let mut response = match tokio::time::timeout(TIMEOUT, rx).await {
            Ok(Ok(v)) if v.get(TOO_MANY).is_some() => return Err(UpstreamError::TooManyValues),
            Ok(Ok(v)) => v,
            Ok(Err(_)) => return Err(UpstreamError::Unreachable),
            Err(_) => {
                lock(&self.pending).remove(&key);
                return Err(UpstreamError::Timeout);
            }
        };
        // Routed by its id, so an object.
        if let Some(o) = response.as_object_mut() {
            o.insert("id".into(), id.clone());
        }
        let (count, asked) = lock(&self.asked).since(before);
        if count > MAX_SERVER_REQUESTS as u64 {
            return Err(UpstreamError::TooManyRequests);
        }
        Ok(Exchange {
            status: 200,
            session: None,
            response: Some(response),
            asked,
        })
    }
}

/// Marks an answer that was too big to read (a key no JSON-RPC message has).
const TOO_MANY: &str = "airlock: too many values";

/// An answer of more values than are read: its caller gets an error. Only its `id` is
/// read (the rest is skipped as it is parsed, nothing of it built).
fn fail_too_many(line: &[u8], pending: &Pending) {
    #[derive(serde::Deserialize)]
    struct IdOnly {
        id: Option<Value>,
    }
    let Ok(IdOnly { id: Some(id) }) = serde_json::from_slice::<IdOnly>(line) else {
        return;
    };
    if let Some(tx) = lock(pending).remove(&id.to_string()) {
        let _ = tx.send(serde_json::json!({ TOO_MANY: true }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::AsyncBufReadExt;

    /// A server that answers its requests in the reverse order they came, each with the
    /// `which` of its params.
    async fn reversing_server(sock: tokio::net::UnixStream, n: usize) {
        let (rd, mut wr) = sock.into_split();
        let mut lines = tokio::io::BufReader::new(rd).lines();
        let mut got = Vec::new();
        while got.len() < n {
            let Ok(Some(l)) = lines.next_line().await else {
                return;
            };
            got.push(serde_json::from_str::<Value>(&l).expect("json"));
        }
        for m in got.iter().rev() {
            let a =
                json!({"jsonrpc": "2.0", "id": m["id"], "result": {"which": m["params"]["which"]}});
            let mut line = serde_json::to_vec(&a).expect("json");
            line.push(b'\n');
            wr.write_all(&line).await.expect("write");
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn two_sessions_with_the_same_request_id_each_get_their_own_answer() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("pair");
        theirs.set_nonblocking(true).expect("nonblocking");
        let server = tokio::spawn(reversing_server(
            tokio::net::UnixStream::from_std(theirs).expect("tokio"),
            2,
        ));
        let up = StdioUpstream::new(OwnedFd::from(ours)).expect("upstream");
        let call = |which: &str| json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"which": which}});
        let (a, b) = (call("a"), call("b"));
        let id = json!(2);
        let (ra, rb) = tokio::join!(up.post(&a, Some(&id)), up.post(&b, Some(&id)));
        let (ra, rb) = (
            ra.expect("a").response.expect("a"),
            rb.expect("b").response.expect("b"),
        );
        assert_eq!(ra["result"]["which"], "a", "{ra}");
        assert_eq!(rb["result"]["which"], "b", "{rb}");
        // Each answer comes back under the caller's own id.
        assert_eq!((ra["id"].clone(), rb["id"].clone()), (json!(2), json!(2)));
        server.await.expect("server");
    }
}
