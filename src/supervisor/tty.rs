//! A run on a pseudo-terminal (`launch --tty`, `attach`). The jail sends the pty's master
//! over the helper's stdio socket (see `sandbox::pty`); from then on airlockd alone holds
//! it. [`relay`] reads the agent's output into the run's journal (as it wrote it; `logs`
//! shows it escaped) and, through one [`Filter`] per run, into a bounded ring and to the
//! attached people; it writes the one writer's keys and window sizes to the master.
//!
//! The [`TtyHub`] is what the control server sees: attach (one writer, any number of
//! readers), keys, sizes, detach. When nobody is attached the ring keeps the last
//! [`RING_BYTES`] of filtered output, sent first to whoever attaches next.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;

use crate::sandbox::fdpass;
use crate::supervisor::process::OutputSink;
use crate::terminal::filter::Filter;

/// Filtered output kept for the next attach: a few screens of a busy TUI.
pub const RING_BYTES: usize = 64 * 1024;
/// Chunks queued for one attached person; one that falls this far behind is let go (it
/// may attach again and gets the ring).
pub const CLIENT_QUEUE: usize = 256;
/// Keys and sizes queued for the pty.
const INPUT_QUEUE: usize = 64;

/// What the writer sends to the agent's terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Keys(Vec<u8>),
    Resize { rows: u16, cols: u16 },
}

struct Client {
    id: u64,
    uid: u32,
    writer: bool,
    tx: mpsc::Sender<Vec<u8>>,
}

#[derive(Default)]
struct State {
    ring: VecDeque<u8>,
    clients: Vec<Client>,
    next_id: u64,
    ended: bool,
}

/// One run's terminal as the control server sees it.
pub struct TtyHub {
    state: Mutex<State>,
    input: mpsc::Sender<Input>,
    input_rx: Mutex<Option<mpsc::Receiver<Input>>>,
}

/// Why an attach was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Someone else holds the keyboard: their uid.
    Writer(u32),
    /// The run's terminal is gone.
    Ended,
}

/// One attached person: output comes on `output` (the ring first), keys go through
/// [`TtyHub::input`]. Dropping it detaches.
pub struct Session {
    pub id: u64,
    pub writer: bool,
    pub output: mpsc::Receiver<Vec<u8>>,
    hub: Arc<TtyHub>,
}

impl Session {
    /// Send keys or a size to the agent's terminal; false for a reader, or once the
    /// terminal is gone.
    pub async fn send(&self, input: Input) -> bool {
        self.writer && self.hub.input.send(input).await.is_ok()
    }
}

impl Session {
    /// Whether the run's terminal is gone (else this session was let go, or left).
    pub fn ended(&self) -> bool {
        lock(&self.hub.state).ended
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.hub.detach(self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl TtyHub {
    pub fn new() -> Arc<TtyHub> {
        let (tx, rx) = mpsc::channel(INPUT_QUEUE);
        Arc::new(TtyHub {
            state: Mutex::new(State::default()),
            input: tx,
            input_rx: Mutex::new(Some(rx)),
        })
    }

    /// Attach `uid`, as the writer or as a reader. A second writer is refused naming the
    /// first.
    pub fn attach(self: &Arc<Self>, uid: u32, writer: bool) -> Result<Session, Refused> {
        let mut st = lock(&self.state);
        if st.ended {
            return Err(Refused::Ended);
        }
        if writer {
            if let Some(w) = st.clients.iter().find(|c| c.writer) {
                return Err(Refused::Writer(w.uid));
            }
        }
        let (tx, rx) = mpsc::channel(CLIENT_QUEUE);
        if !st.ring.is_empty() {
            let (a, b) = st.ring.as_slices();
            let _ = tx.try_send([a, b].concat());
        }
        st.next_id += 1;
        let id = st.next_id;
        st.clients.push(Client {
            id,
            uid,
            writer,
            tx,
        });
        Ok(Session {
            id,
            writer,
            output: rx,
            hub: self.clone(),
        })
    }

    /// The uid holding the keyboard, if any.
    pub fn writer(&self) -> Option<u32> {
        lock(&self.state)
            .clients
            .iter()
            .find(|c| c.writer)
            .map(|c| c.uid)
    }

    fn detach(&self, id: u64) {
        lock(&self.state).clients.retain(|c| c.id != id);
    }

    /// Filtered output: into the ring and to everyone attached.
    fn output(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut st = lock(&self.state);
        st.ring.extend(bytes);
        let over = st.ring.len().saturating_sub(RING_BYTES);
        st.ring.drain(..over);
        // One that cannot keep up is let go: its channel closes and its connection ends.
        st.clients.retain(|c| c.tx.try_send(bytes.to_vec()).is_ok());
    }

    fn end(&self) {
        let mut st = lock(&self.state);
        st.ended = true;
        st.clients.clear();
    }
}

/// A terminal's output as the journal keeps it: text, with every control character but
/// newline and tab escaped (`\u{1b}`), as `launch --wait` shows output on a terminal, and
/// carriage returns left out (a pty ends its lines with CR LF).
pub struct EscapedSink {
    inner: Box<dyn OutputSink>,
    pending: Vec<u8>,
}

impl EscapedSink {
    pub fn new(inner: Box<dyn OutputSink>) -> EscapedSink {
        EscapedSink {
            inner,
            pending: Vec::new(),
        }
    }
}

impl OutputSink for EscapedSink {
    fn data(&mut self, bytes: &[u8]) {
        self.pending.extend(bytes.iter().filter(|b| **b != b'\r'));
        let mut out = Vec::with_capacity(self.pending.len());
        let held = crate::terminal::escape_into(&self.pending, &mut out);
        self.pending.drain(..self.pending.len() - held);
        self.inner.data(&out);
    }

    fn finish(&mut self) {
        if !self.pending.is_empty() {
            let rest = String::from_utf8_lossy(&self.pending).into_owned();
            self.inner.data(crate::terminal::escaped(&rest).as_bytes());
            self.pending.clear();
        }
        self.inner.finish();
    }
}

/// The run's end of the helper's stdio socket, for a `--tty` run.
pub struct TtySocket(OwnedFd);

/// What a `--tty` run's supervision needs: the jail's socket, the hub, the first size.
pub struct TtyRun {
    pub sock: TtySocket,
    pub hub: Arc<TtyHub>,
    pub size: Option<(u16, u16)>,
}

/// The socket a `--tty` run's pty master comes back on: ours, and the helper's
/// `--stdio-fd`.
pub fn socket_pair() -> Result<(TtySocket, OwnedFd), String> {
    fdpass::pair(nix::sys::socket::SockType::Stream)
        .map(|(ours, theirs)| (TtySocket(ours), theirs))
        .map_err(|e| format!("the run's terminal socket: {e}"))
}

/// Take the pty's master from the jail, then relay until the agent's side closes: output
/// into `sink` (the journal, exact) and, filtered, to `hub`; keys and sizes from `hub` into
/// the master. `size`: the launcher's window, set before the first output.
pub async fn relay(
    sock: TtySocket,
    hub: Arc<TtyHub>,
    sink: Box<dyn OutputSink>,
    size: Option<(u16, u16)>,
) -> Result<(), String> {
    let mut sink: Box<dyn OutputSink> = Box::new(EscapedSink::new(sink));
    let received = tokio::task::spawn_blocking(move || receive_master(sock.0)).await;
    let result = match received {
        Ok(Ok(master)) => pump(master, &hub, sink.as_mut(), size).await,
        Ok(Err(e)) => Err(e),
        Err(_) => Err("the pty's master was not received".into()),
    };
    sink.finish();
    hub.end();
    result
}

/// The master, and only a master: the socket's first message, checked to be a pty master
/// of a devpts (TIOCGPTN answers only on one).
fn receive_master(sock: OwnedFd) -> Result<OwnedFd, String> {
    let mut buf = [0u8; 64];
    let (n, mut fds) =
        fdpass::recv(sock.as_fd(), &mut buf).map_err(|e| format!("the jail's pty socket: {e}"))?;
    if n == 0 && fds.is_empty() {
        return Err("the run ended before its terminal was made".into());
    }
    if &buf[..n] != crate::sandbox::pty::MASTER_TAG || fds.len() != 1 {
        return Err("the jail's pty socket carried something else than the pty".into());
    }
    let master = fds.remove(0);
    let mut n: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes one unsigned int.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut n) } != 0 {
        return Err("the jail's pty socket carried something else than a pty master".into());
    }
    let fl = nix::fcntl::fcntl(master.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)
        .map_err(|e| format!("pty master: {e}"))?;
    let fl = nix::fcntl::OFlag::from_bits_truncate(fl) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(master.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(fl))
        .map_err(|e| format!("pty master: {e}"))?;
    Ok(master)
}

/// Set the window size of the terminal on `fd` (the kernel signals SIGWINCH to its
/// foreground group when it changes).
pub fn set_size(fd: &impl AsRawFd, rows: u16, cols: u16) -> bool {
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one winsize.
    unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) == 0 }
}

async fn pump(
    master: OwnedFd,
    hub: &Arc<TtyHub>,
    sink: &mut dyn OutputSink,
    size: Option<(u16, u16)>,
) -> Result<(), String> {
    if let Some((rows, cols)) = size {
        set_size(&master, rows, cols);
    }
    let Some(mut input) = lock(&hub.input_rx).take() else {
        return Err("the run's terminal is relayed already".into());
    };
    // SAFETY: `master` is owned by the AsyncFd for as long as it is registered.
    let afd = unsafe { AsyncFd::register(master) }.map_err(|e| format!("pty master: {e}"))?;
    let mut filter = Filter::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut shown = Vec::with_capacity(buf.len());
    let mut pending: VecDeque<u8> = VecDeque::new();
    let mut input_open = true;
    loop {
        tokio::select! {
            r = afd.readable() => {
                let mut guard = r.map_err(|e| format!("pty: {e}"))?;
                match guard.try_io(|fd| {
                    nix::unistd::read(fd.get_ref().as_raw_fd(), &mut buf).map_err(std::io::Error::from)
                }) {
                    Err(_would_block) => continue,
                    // EIO: every slave fd is closed (the agent and its children are gone).
                    Ok(Ok(0)) | Ok(Err(_)) => return Ok(()),
                    Ok(Ok(n)) => {
                        sink.data(&buf[..n]);
                        shown.clear();
                        filter.push(&buf[..n], &mut shown);
                        hub.output(&shown);
                    }
                }
            }
            w = afd.writable(), if !pending.is_empty() => {
                let mut guard = w.map_err(|e| format!("pty: {e}"))?;
                let (a, _) = pending.as_slices();
                let chunk = a.to_vec();
                match guard.try_io(|fd| {
                    nix::unistd::write(fd.get_ref(), &chunk).map_err(std::io::Error::from)
                }) {
                    Err(_would_block) => continue,
                    Ok(Ok(n)) => { pending.drain(..n); }
                    Ok(Err(_)) => pending.clear(),
                }
            }
            i = input.recv(), if input_open => match i {
                Some(Input::Keys(k)) => {
                    // Bounded: a writer faster than the agent reads waits, then loses keys.
                    if pending.len() < 64 * 1024 {
                        pending.extend(k);
                    }
                }
                Some(Input::Resize { rows, cols }) => {
                    set_size(afd.get_ref(), rows, cols);
                }
                None => input_open = false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_writer_and_the_ring_on_attach() {
        let hub = TtyHub::new();
        hub.output(b"hello ");
        let mut a = hub.attach(1000, true).unwrap();
        assert_eq!(a.output.try_recv().unwrap(), b"hello ");
        assert_eq!(hub.attach(1001, true).err(), Some(Refused::Writer(1000)));
        let mut r = hub.attach(1001, false).unwrap();
        hub.output(b"world");
        assert_eq!(a.output.try_recv().unwrap(), b"world");
        assert_eq!(r.output.try_recv().unwrap(), b"hello ");
        assert_eq!(r.output.try_recv().unwrap(), b"world");
        drop(a);
        assert_eq!(hub.writer(), None);
        let b = hub.attach(1001, true).unwrap();
        assert!(b.writer);
        hub.end();
        assert_eq!(hub.attach(1002, false).err(), Some(Refused::Ended));
    }

    struct Collect(std::sync::Arc<Mutex<Vec<u8>>>);
    impl OutputSink for Collect {
        fn data(&mut self, bytes: &[u8]) {
            lock(&self.0).extend_from_slice(bytes);
        }
    }

    #[test]
    fn the_journal_gets_text_with_escapes_escaped() {
        let got = std::sync::Arc::new(Mutex::new(Vec::new()));
        let mut s = EscapedSink::new(Box::new(Collect(got.clone())));
        s.data(b"\x1b]52;c;eA==\x07ok \xe2");
        s.data(b"\x86\x92\r\n");
        s.finish();
        assert_eq!(
            String::from_utf8(lock(&got).clone()).unwrap(),
            "\\u{1b}]52;c;eA==\\u{7}ok →\n"
        );
    }

    #[test]
    fn the_ring_is_bounded() {
        let hub = TtyHub::new();
        for _ in 0..(RING_BYTES / 1000 + 10) {
            hub.output(&[b'x'; 1000]);
        }
        let mut a = hub.attach(0, false).unwrap();
        assert_eq!(a.output.try_recv().unwrap().len(), RING_BYTES);
    }
}
