//! The blocking client side of the control socket, for `airlockctl`: connect, send one
//! request line, read response lines. Errors say what to do next, because the person
//! reading them is usually an operator whose daemon is down or whose groups are wrong.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::protocol::{ErrorBody, Request, Response, VERSION};

/// Longest response line read, in bytes. Output frames carry one agent line each; anything
/// longer than this is a broken or hostile peer, not a reason to exhaust memory.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// How long a one-shot request may wait for its answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach airlockd at {}: airlockd is not running (start it with `systemctl start airlockd`)", socket.display())]
    NotRunning { socket: PathBuf },
    #[error("permission denied on {}: you are in no group that may connect ({groups}; ask an admin: usermod -aG GROUP $USER, then log in again)", socket.display())]
    PermissionDenied { socket: PathBuf, groups: String },
    #[error("control socket {}: cannot {op}: {source}", socket.display())]
    Io {
        socket: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    #[error("airlockd did not answer within {} s; check `systemctl status airlockd` and `journalctl -u airlockd`", timeout.as_secs())]
    Timeout { timeout: Duration },
    #[error("airlockd closed the connection before answering; check `journalctl -u airlockd`")]
    Closed,
    #[error("airlockd sent a line over {MAX_RESPONSE_BYTES} bytes; refusing it")]
    TooLong,
    #[error("airlockd sent something that is not a protocol response; airlockctl and airlockd may be from different builds")]
    Malformed,
    #[error("airlockd speaks protocol version {0}, this airlockctl speaks {VERSION}; upgrade so they match")]
    Version(u32),
}

/// One connection to airlockd.
#[derive(Debug)]
pub struct Client {
    socket: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    timeout: Option<Duration>,
    /// The line being read, kept to reuse its allocation.
    line: Vec<u8>,
}

impl Client {
    /// Connect to the socket at `path`, with [`DEFAULT_TIMEOUT`] on reads and writes.
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path).map_err(|e| connect_error(path, e))?;
        let writer = stream.try_clone().map_err(|e| ClientError::Io {
            socket: path.to_path_buf(),
            op: "clone the connection",
            source: e,
        })?;
        let mut client = Client {
            socket: path.to_path_buf(),
            reader: BufReader::new(stream),
            writer,
            timeout: None,
            line: Vec::new(),
        };
        client.set_timeout(Some(DEFAULT_TIMEOUT))?;
        Ok(client)
    }

    /// Bound each read and write; `None` waits as long as it takes (streaming a run).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), ClientError> {
        self.timeout = timeout;
        self.writer
            .set_read_timeout(timeout)
            .and_then(|_| self.writer.set_write_timeout(timeout))
            .map_err(|e| self.io("set a timeout", e))
    }

    /// True when response bytes are already read and waiting: the next `recv` will not
    /// block on the socket for them.
    pub fn has_buffered(&self) -> bool {
        !self.reader.buffer().is_empty()
    }

    /// The socket connected to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The connection's fd, to wait on it together with something else (signals). Only
    /// when [`Client::has_buffered`] is false does readable mean a new answer is coming.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.writer.as_fd()
    }

    /// Send one request line. A connection airlockd closed already is no error here: it
    /// answers some peers (busy, not in any group) without reading their request, and that
    /// answer is still there for [`Client::recv`] (which says `Closed` when there is none).
    pub fn send(&mut self, request: &Request) -> Result<(), ClientError> {
        let mut line = request.to_line();
        line.push('\n');
        match self
            .writer
            .write_all(line.as_bytes())
            .and_then(|_| self.writer.flush())
            .map_err(|e| self.classify("send the request", e))
        {
            Err(ClientError::Closed) => Ok(()),
            r => r,
        }
    }

    /// The next response line; `None` when airlockd closed the connection cleanly.
    pub fn recv(&mut self) -> Result<Option<Response>, ClientError> {
        Ok(self.recv_as::<serde_json::Value>()?.map(|r| Response {
            v: r.v,
            ok: r.ok,
            error: r.error,
            data: r.data,
        }))
    }

    /// The next response line with `data` parsed straight into `T` (one parse per line,
    /// for streams of frames). `data` of another shape is [`ClientError::Malformed`].
    pub fn recv_as<T: DeserializeOwned>(&mut self) -> Result<Option<Typed<T>>, ClientError> {
        self.line.clear();
        let line = &mut self.line;
        let limit = MAX_RESPONSE_BYTES as u64 + 1;
        let read = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', line)
            .map_err(|e| classify(&self.socket, self.timeout, "read the answer", e))?;
        let line = &self.line;
        if read == 0 {
            return Ok(None);
        }
        if line.last() != Some(&b'\n') {
            // Either over the limit, or the peer hung up mid-line.
            return Err(if line.len() > MAX_RESPONSE_BYTES {
                ClientError::TooLong
            } else {
                ClientError::Closed
            });
        }
        let response: Typed<T> =
            serde_json::from_slice(line).map_err(|_| ClientError::Malformed)?;
        if response.v != VERSION {
            return Err(ClientError::Version(response.v));
        }
        if !response.ok && response.error.is_none() {
            return Err(ClientError::Malformed);
        }
        Ok(Some(response))
    }

    /// Send `request` and read its one answer.
    pub fn call(&mut self, request: &Request) -> Result<Response, ClientError> {
        self.send(request)?;
        self.recv()?.ok_or(ClientError::Closed)
    }

    fn io(&self, op: &'static str, source: io::Error) -> ClientError {
        ClientError::Io {
            socket: self.socket.clone(),
            op,
            source,
        }
    }

    fn classify(&self, op: &'static str, e: io::Error) -> ClientError {
        classify(&self.socket, self.timeout, op, e)
    }
}

fn classify(
    socket: &Path,
    timeout: Option<Duration>,
    op: &'static str,
    e: io::Error,
) -> ClientError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => ClientError::Timeout {
            timeout: timeout.unwrap_or_default(),
        },
        io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::UnexpectedEof => ClientError::Closed,
        _ => ClientError::Io {
            socket: socket.to_path_buf(),
            op,
            source: e,
        },
    }
}

/// A response whose `data` has a known shape.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Typed<T> {
    pub v: u32,
    pub ok: bool,
    #[serde(default)]
    pub error: Option<ErrorBody>,
    #[serde(default = "none")]
    pub data: Option<T>,
}

fn none<T>() -> Option<T> {
    None
}

/// Connect, send one request, read one answer.
pub fn call(path: &Path, request: &Request) -> Result<Response, ClientError> {
    Client::connect(path)?.call(request)
}

/// The groups the socket admits, as airlockd set them from its config: the socket's own
/// group and those its ACL adds (`admin_group`).
fn socket_groups(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let name = |gid: u32| match nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)) {
        Ok(Some(g)) => format!("`{}`", g.name),
        _ => format!("gid {gid}"),
    };
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return "the socket's groups could not be read".into();
    };
    let mut groups = vec![name(meta.gid())];
    groups.extend(super::socket_acl::admitted(path).into_iter().map(name));
    format!("the socket admits group {}", groups.join(" and "))
}

fn connect_error(path: &Path, e: io::Error) -> ClientError {
    let socket = path.to_path_buf();
    match e.kind() {
        // No socket file, or a stale one nobody listens on.
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
            ClientError::NotRunning { socket }
        }
        io::ErrorKind::PermissionDenied => ClientError::PermissionDenied {
            groups: socket_groups(path),
            socket,
        },
        _ => ClientError::Io {
            socket,
            op: "connect",
            source: e,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::protocol::{parse_request, Op};
    use std::os::unix::net::UnixListener;

    #[test]
    fn missing_socket_says_how_to_start_the_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let err = Client::connect(&dir.path().join("nope.sock")).unwrap_err();
        assert!(matches!(err, ClientError::NotRunning { .. }));
        assert!(err.to_string().contains("systemctl start airlockd"));
        // Only launch has a way without the daemon; it says so itself.
        assert!(!err.to_string().contains("--standalone"));
    }

    #[test]
    fn stale_socket_is_not_running() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stale.sock");
        drop(UnixListener::bind(&path).unwrap());
        let err = Client::connect(&path).unwrap_err();
        assert!(matches!(err, ClientError::NotRunning { .. }), "{err:?}");
    }

    fn serve(replies: &'static [&'static str]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.sock");
        let listener = UnixListener::bind(&path).unwrap();
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut line = Vec::new();
            BufReader::new(conn.try_clone().unwrap())
                .read_until(b'\n', &mut line)
                .unwrap();
            parse_request(line.trim_ascii_end()).unwrap();
            for r in replies {
                conn.write_all(r.as_bytes()).unwrap();
            }
        });
        (dir, path)
    }

    #[test]
    fn reads_one_answer_and_refuses_garbage() {
        let (_d, path) = serve(&["{\"v\":1,\"ok\":true,\"data\":{\"x\":1}}\n"]);
        let resp = call(&path, &Request::new(Op::Status)).unwrap();
        assert!(resp.ok);
        assert_eq!(resp.data.unwrap()["x"], 1);

        let (_d, path) = serve(&["hello\n"]);
        let err = call(&path, &Request::new(Op::Status)).unwrap_err();
        assert!(matches!(err, ClientError::Malformed), "{err:?}");

        let (_d, path) = serve(&["{\"v\":7,\"ok\":true}\n"]);
        let err = call(&path, &Request::new(Op::Status)).unwrap_err();
        assert!(matches!(err, ClientError::Version(7)), "{err:?}");

        let (_d, path) = serve(&["{\"v\":1,\"ok\":true"]);
        let err = call(&path, &Request::new(Op::Status)).unwrap_err();
        assert!(matches!(err, ClientError::Closed), "{err:?}");

        let (_d, path) = serve(&[]);
        let err = call(&path, &Request::new(Op::Status)).unwrap_err();
        assert!(matches!(err, ClientError::Closed), "{err:?}");
    }
}
