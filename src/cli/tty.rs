//! `airlockctl launch --tty` and `airlockctl attach`: this terminal, in raw mode, relayed
//! to a run's pseudo-terminal through airlockd. Keys go as they are (Ctrl-C reaches the
//! agent as a character; its pty makes it SIGINT), window sizes follow SIGWINCH, and the
//! run's exit code is ours at the end. `Ctrl-]` then `d` detaches: the run goes on. An
//! ask of the run shows on the status line ([`super::tty_status`]); `Ctrl-]` then `a`, `r`
//! or `n` answers it.
//! What airlockd sends was filtered already (`terminal::filter`): no OSC, DCS, APC and no
//! request that would make this terminal answer into the agent's input.

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::remote::{self, Ctx};
use super::table::clean;
use super::tty_status;
use crate::control::protocol::{
    to_hex, AskHow, AskShown, ErrorCode, Frame, Op, Request, Response, TtyMsg, TtySize,
};

/// `--tty` (or `attach`) without a terminal on stdin and stdout.
pub const EXIT_NO_TERMINAL: i32 = 5;
/// `attach` for writing while another person holds the keyboard.
pub const EXIT_WRITER_BUSY: i32 = 6;
/// The detach key: `Ctrl-]`, then `d`.
pub const DETACH_PREFIX: u8 = 0x1d;

/// What the person typed, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum KeyEvent {
    /// For the agent.
    Bytes(Vec<u8>),
    /// `Ctrl-]` `d`: what follows is not read.
    Detach,
    /// `Ctrl-]` `a` (allow), `r` (allow for the run), `n` (deny): for the ask on the
    /// status line; with none there, `key` goes to the agent after `Ctrl-]`.
    Answer { how: AskHow, key: u8 },
}

/// What the keys read so far mean: bytes for the agent, a detach, or an answer.
#[derive(Debug, Default)]
pub struct Keys {
    prefix: bool,
}

impl Keys {
    /// Split `input` into events. `Ctrl-]` followed by anything but `d`, `a`, `r`, `n`
    /// sends both keys; a `Ctrl-]` at the end of `input` waits for the next key.
    pub fn feed(&mut self, input: &[u8]) -> Vec<KeyEvent> {
        let mut events = Vec::new();
        let mut out = Vec::with_capacity(input.len());
        let flush = |out: &mut Vec<u8>, events: &mut Vec<KeyEvent>| {
            if !out.is_empty() {
                events.push(KeyEvent::Bytes(std::mem::take(out)));
            }
        };
        for &b in input {
            if self.prefix {
                self.prefix = false;
                let how = match b {
                    b'd' => {
                        flush(&mut out, &mut events);
                        events.push(KeyEvent::Detach);
                        return events;
                    }
                    b'a' => Some(AskHow::Allow),
                    b'r' => Some(AskHow::AllowForRun),
                    b'n' => Some(AskHow::Deny),
                    _ => None,
                };
                if let Some(how) = how {
                    flush(&mut out, &mut events);
                    events.push(KeyEvent::Answer { how, key: b });
                    continue;
                }
                out.push(DETACH_PREFIX);
                if b == DETACH_PREFIX {
                    self.prefix = true;
                    continue;
                }
                out.push(b);
            } else if b == DETACH_PREFIX {
                self.prefix = true;
            } else {
                out.push(b);
            }
        }
        flush(&mut out, &mut events);
        events
    }
}

/// This terminal's window size (80x24 when it cannot be read).
pub fn window_size() -> TtySize {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one winsize.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_row > 0 && ws.ws_col > 0 {
        TtySize {
            rows: ws.ws_row,
            cols: ws.ws_col,
        }
    } else {
        TtySize { rows: 24, cols: 80 }
    }
}

fn have_terminal(what: &str) -> Result<(), i32> {
    if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
        return Ok(());
    }
    eprintln!("airlockctl {what}: stdin and stdout must both be a terminal (the agent draws its interface on it and reads your keys from it); run it from a terminal, or launch with --wait for a run without one");
    Err(EXIT_NO_TERMINAL)
}

/// `launch ... --tty`.
pub fn launch(ctx: &Ctx, args: &super::launch::LaunchArgs, workspace: Option<String>) -> i32 {
    if let Err(code) = have_terminal("launch --tty") {
        return code;
    }
    let op = Op::Launch {
        role: args.role.clone(),
        instance: args.instance.clone(),
        workspace,
        max_seconds: args.max_seconds,
        command: (!args.command.is_empty()).then(|| args.command.clone()),
        wait: false,
        tty: Some(window_size()),
    };
    session(ctx, op, "launch", false)
}

/// `attach RUN [--read-only]`.
pub fn attach(ctx: &Ctx, run: &str, read_only: bool) -> i32 {
    if let Err(code) = have_terminal("attach") {
        return code;
    }
    let op = Op::Attach {
        run: run.to_string(),
        read_only,
        tty: Some(window_size()),
    };
    session(ctx, op, "attach", read_only)
}

/// Raw mode while it lives.
struct Raw(nix::sys::termios::Termios);

impl Raw {
    fn enter() -> Option<Raw> {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let stdin = std::io::stdin();
        let saved = tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(stdin.as_fd(), SetArg::TCSADRAIN, &raw).ok()?;
        Some(Raw(saved))
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        use nix::sys::termios::{tcsetattr, SetArg};
        let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSADRAIN, &self.0);
    }
}

fn send_msg(w: &Mutex<UnixStream>, msg: &TtyMsg) -> bool {
    let Ok(mut line) = serde_json::to_vec(msg) else {
        return false;
    };
    line.push(b'\n');
    let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
    w.write_all(&line).is_ok()
}

fn refused(what: &str, run: Option<&str>, resp: &Response) -> i32 {
    let Some(e) = &resp.error else {
        return remote::daemon_error(what, None);
    };
    match e.code {
        ErrorCode::Busy if what == "attach" => {
            eprintln!("airlockctl attach: {}", clean(&e.message));
            EXIT_WRITER_BUSY
        }
        ErrorCode::Busy if run.is_some() => {
            eprintln!("airlockctl {what}: {}", clean(&e.message));
            super::output::ERROR
        }
        _ => remote::daemon_error(what, Some(e)),
    }
}

/// What the keys and resize threads need of the status line.
#[derive(Debug, Default)]
struct Shared {
    /// The ask the keys answer: the first on the status line.
    ask: Option<String>,
    /// Whether the last row is the status line's (the agent is told one row less).
    reserved: bool,
}

/// The status line (see [`tty_status`]), drawn by the thread that writes the screen.
struct Status {
    asks: Vec<AskShown>,
    notice: Option<String>,
    read_only: bool,
    shared: Arc<Mutex<Shared>>,
}

impl Status {
    fn reserved(&self) -> bool {
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reserved
    }

    /// Draw the line, taking the last row (and telling the agent) when an ask first
    /// shows, giving it back when none is left.
    fn show(&mut self, out: &mut impl Write, w: &Mutex<UnixStream>) {
        let size = window_size();
        let line = tty_status::text(
            &self.asks,
            self.notice.as_deref(),
            size.cols,
            self.read_only,
        );
        let mut sh = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        sh.ask = self.asks.first().map(|a| a.id.clone());
        let was = sh.reserved;
        sh.reserved = line.is_some();
        drop(sh);
        match line {
            Some(text) => {
                let _ = out.write_all(&tty_status::draw(size, &text));
                if !was {
                    resize(w, tty_status::agent_size(size, true));
                }
            }
            None if was => {
                let _ = out.write_all(&tty_status::clear(size));
                resize(w, size);
            }
            None => {}
        }
    }
}

fn resize(w: &Mutex<UnixStream>, s: TtySize) {
    send_msg(
        w,
        &TtyMsg::Resize {
            rows: s.rows,
            cols: s.cols,
        },
    );
}

/// Leave the session's screen: the last row given back, raw mode off.
fn leave(raw: &mut Option<Raw>, status: &mut Status, out: &mut impl Write, w: &Mutex<UnixStream>) {
    if status.reserved() {
        status.asks.clear();
        status.show(out, w);
    }
    let _ = out.flush();
    drop(raw.take());
}

fn session(ctx: &Ctx, op: Op, what: &str, read_only: bool) -> i32 {
    let socket = match ctx.socket_path() {
        Ok(s) => s,
        Err(code) => return code,
    };
    let stream = match UnixStream::connect(&socket) {
        Ok(s) => s,
        Err(_) => return remote::not_running(what, &socket, ""),
    };
    let mut line = Request::new(op).to_line();
    line.push('\n');
    let writer = match stream.try_clone() {
        Ok(w) => Arc::new(Mutex::new(w)),
        Err(e) => {
            eprintln!("airlockctl {what}: {e}");
            return super::output::ERROR;
        }
    };
    if let Err(e) = writer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .write_all(line.as_bytes())
    {
        eprintln!("airlockctl {what}: cannot send the request to airlockd: {e}");
        return super::output::ERROR;
    }
    let mut reader = BufReader::new(stream);
    let detached = Arc::new(AtomicBool::new(false));
    let mut run: Option<String> = None;
    let mut raw: Option<Raw> = None;
    let mut out = std::io::stdout().lock();
    let mut status = Status {
        asks: Vec::new(),
        notice: None,
        read_only,
        shared: Arc::new(Mutex::new(Shared::default())),
    };
    loop {
        let mut l = Vec::new();
        let n = reader.read_until(b'\n', &mut l).unwrap_or(0);
        if n == 0 {
            leave(&mut raw, &mut status, &mut out, &writer);
            let _ = out.flush();
            return match &run {
                Some(id) if detached.load(Ordering::SeqCst) => {
                    eprintln!("\r\nairlockctl: detached; run {id} goes on: `airlockctl attach {id}` to return, `airlockctl stop {id}` to stop it");
                    super::output::OK
                }
                Some(id) if what == "attach" => {
                    eprintln!("\r\nairlockctl: run {id}'s terminal closed (the run ended): `airlockctl show {id}` tells how");
                    super::output::OK
                }
                Some(id) => {
                    eprintln!("\r\nairlockctl: lost airlockd before run {id} ended; it is still supervised: `airlockctl show {id}`");
                    super::output::ERROR
                }
                None => {
                    eprintln!(
                        "airlockctl {what}: airlockd closed the connection without an answer"
                    );
                    super::output::ERROR
                }
            };
        }
        let Ok(resp) = serde_json::from_slice::<Response>(&l) else {
            leave(&mut raw, &mut status, &mut out, &writer);
            eprintln!("\r\nairlockctl {what}: airlockd sent something that is not an answer");
            return super::output::ERROR;
        };
        if !resp.ok {
            leave(&mut raw, &mut status, &mut out, &writer);
            let _ = out.flush();
            if run.is_some() {
                eprint!("\r\n");
            }
            return refused(what, run.as_deref(), &resp);
        }
        let Some(frame) = resp
            .data
            .and_then(|d| serde_json::from_value::<Frame>(d).ok())
        else {
            continue;
        };
        match frame {
            Frame::Started { run: id } => {
                let id = clean(&id);
                eprintln!("airlockctl: run {id} on this terminal; Ctrl-] then d detaches");
                raw = Raw::enter();
                start_input(writer.clone(), detached.clone(), status.shared.clone());
                start_resizes(writer.clone(), status.shared.clone());
                run = Some(id);
            }
            Frame::Output { data, .. } => {
                let _ = out.write_all(data.as_bytes());
                // Whatever the agent wrote may have covered the status line.
                if status.reserved() {
                    status.show(&mut out, &writer);
                }
                let _ = out.flush();
            }
            Frame::Asks { asks } => {
                if asks.first().map(|a| &a.id) != status.asks.first().map(|a| &a.id) {
                    status.notice = None;
                }
                status.asks = asks;
                status.show(&mut out, &writer);
                let _ = out.flush();
            }
            Frame::Notice { text } => {
                status.notice = Some(text);
                status.show(&mut out, &writer);
                let _ = out.flush();
            }
            Frame::Exited {
                run: id,
                exit_code,
                outcome,
                reason,
            } => {
                leave(&mut raw, &mut status, &mut out, &writer);
                let _ = out.flush();
                if outcome != "exited" {
                    eprintln!(
                        "\r\nairlockctl: run {} {}: {}",
                        clean(&id),
                        clean(&outcome),
                        clean(&reason)
                    );
                }
                return exit_code;
            }
        }
    }
}

/// Keys from stdin to airlockd until `Ctrl-]` `d` (then the connection is shut, which
/// ends the main loop) or end of input; an answer key for the ask on the status line.
fn start_input(w: Arc<Mutex<UnixStream>>, detached: Arc<AtomicBool>, shared: Arc<Mutex<Shared>>) {
    let _ = std::thread::Builder::new()
        .name("keys".into())
        .spawn(move || {
            let mut keys = Keys::default();
            let mut buf = [0u8; 4096];
            let mut stdin = std::io::stdin().lock();
            loop {
                let n = match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                for event in keys.feed(&buf[..n]) {
                    let msg = match event {
                        KeyEvent::Bytes(bytes) => TtyMsg::Keys {
                            hex: to_hex(&bytes),
                        },
                        KeyEvent::Answer { how, key } => {
                            let ask = shared.lock().unwrap_or_else(|e| e.into_inner()).ask.clone();
                            match ask {
                                Some(ask) => TtyMsg::Answer { ask, how },
                                None => TtyMsg::Keys {
                                    hex: to_hex(&[DETACH_PREFIX, key]),
                                },
                            }
                        }
                        KeyEvent::Detach => {
                            detached.store(true, Ordering::SeqCst);
                            let s = w.lock().unwrap_or_else(|e| e.into_inner());
                            let _ = s.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                    };
                    if !send_msg(&w, &msg) {
                        return;
                    }
                }
            }
        });
}

/// The window's new size to airlockd on every SIGWINCH (a row less while the status
/// line holds the last).
fn start_resizes(w: Arc<Mutex<UnixStream>>, shared: Arc<Mutex<Shared>>) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGWINCH])
    else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("winch".into())
        .spawn(move || {
            for _ in signals.forever() {
                let reserved = shared.lock().unwrap_or_else(|e| e.into_inner()).reserved;
                let s = tty_status::agent_size(window_size(), reserved);
                if !send_msg(
                    &w,
                    &TtyMsg::Resize {
                        rows: s.rows,
                        cols: s.cols,
                    },
                ) {
                    return;
                }
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_bracket_d_detaches_and_anything_else_passes() {
        use KeyEvent::*;
        let mut k = Keys::default();
        assert_eq!(k.feed(b"ab\x03"), vec![Bytes(b"ab\x03".to_vec())]);
        assert_eq!(k.feed(b"x\x1d"), vec![Bytes(b"x".to_vec())]);
        assert_eq!(k.feed(b"dzz"), vec![Detach]);
        let mut k = Keys::default();
        assert_eq!(k.feed(b"\x1dq"), vec![Bytes(b"\x1dq".to_vec())]);
        assert_eq!(k.feed(b"\x1d\x1dd"), vec![Bytes(b"\x1d".to_vec()), Detach]);
    }

    #[test]
    fn ctrl_bracket_a_r_n_answer_in_order_with_the_keys_around_them() {
        use KeyEvent::*;
        let mut k = Keys::default();
        assert_eq!(
            k.feed(b"x\x1day\x1drz\x1dn"),
            vec![
                Bytes(b"x".to_vec()),
                Answer {
                    how: AskHow::Allow,
                    key: b'a'
                },
                Bytes(b"y".to_vec()),
                Answer {
                    how: AskHow::AllowForRun,
                    key: b'r'
                },
                Bytes(b"z".to_vec()),
                Answer {
                    how: AskHow::Deny,
                    key: b'n'
                },
            ]
        );
    }
}
