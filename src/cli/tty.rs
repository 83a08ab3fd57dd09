//! `airlockctl launch --tty` and `airlockctl attach`: this terminal, in raw mode, relayed
//! to a run's pseudo-terminal through airlockd. Keys go as they are (Ctrl-C reaches the
//! agent as a character; its pty makes it SIGINT), window sizes follow SIGWINCH, and the
//! run's exit code is ours at the end. `Ctrl-]` then `d` detaches: the run goes on.
//! What airlockd sends was filtered already (`terminal::filter`): no OSC, DCS, APC and no
//! request that would make this terminal answer into the agent's input.

use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::remote::{self, Ctx};
use super::table::clean;
use crate::control::protocol::{to_hex, ErrorCode, Frame, Op, Request, Response, TtyMsg, TtySize};

/// `--tty` (or `attach`) without a terminal on stdin and stdout.
pub const EXIT_NO_TERMINAL: i32 = 5;
/// `attach` for writing while another person holds the keyboard.
pub const EXIT_WRITER_BUSY: i32 = 6;
/// The detach key: `Ctrl-]`, then `d`.
pub const DETACH_PREFIX: u8 = 0x1d;

/// What the keys read so far mean: bytes for the agent, or a detach.
#[derive(Debug, Default)]
pub struct Keys {
    prefix: bool,
}

impl Keys {
    /// Split `input` into what goes to the agent and whether `Ctrl-]` `d` was typed (what
    /// follows it is not sent). `Ctrl-]` followed by anything else sends both.
    pub fn feed(&mut self, input: &[u8]) -> (Vec<u8>, bool) {
        let mut out = Vec::with_capacity(input.len());
        for &b in input {
            if self.prefix {
                self.prefix = false;
                if b == b'd' {
                    return (out, true);
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
        (out, false)
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
    session(ctx, op, "launch")
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
    session(ctx, op, "attach")
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

fn session(ctx: &Ctx, op: Op, what: &str) -> i32 {
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
    loop {
        let mut l = Vec::new();
        let n = reader.read_until(b'\n', &mut l).unwrap_or(0);
        if n == 0 {
            drop(raw.take());
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
            drop(raw.take());
            eprintln!("\r\nairlockctl {what}: airlockd sent something that is not an answer");
            return super::output::ERROR;
        };
        if !resp.ok {
            drop(raw.take());
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
                start_input(writer.clone(), detached.clone());
                start_resizes(writer.clone());
                run = Some(id);
            }
            Frame::Output { data, .. } => {
                let _ = out.write_all(data.as_bytes());
                let _ = out.flush();
            }
            Frame::Exited {
                run: id,
                exit_code,
                outcome,
                reason,
            } => {
                drop(raw.take());
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
/// ends the main loop) or end of input.
fn start_input(w: Arc<Mutex<UnixStream>>, detached: Arc<AtomicBool>) {
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
                let (bytes, detach) = keys.feed(&buf[..n]);
                if !bytes.is_empty()
                    && !send_msg(
                        &w,
                        &TtyMsg::Keys {
                            hex: to_hex(&bytes),
                        },
                    )
                {
                    return;
                }
                if detach {
                    detached.store(true, Ordering::SeqCst);
                    let s = w.lock().unwrap_or_else(|e| e.into_inner());
                    let _ = s.shutdown(std::net::Shutdown::Both);
                    return;
                }
            }
        });
}

/// The window's new size to airlockd on every SIGWINCH.
fn start_resizes(w: Arc<Mutex<UnixStream>>) {
    let Ok(mut signals) = signal_hook::iterator::Signals::new([signal_hook::consts::SIGWINCH])
    else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("winch".into())
        .spawn(move || {
            for _ in signals.forever() {
                let s = window_size();
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
        let mut k = Keys::default();
        assert_eq!(k.feed(b"ab\x03"), (b"ab\x03".to_vec(), false));
        assert_eq!(k.feed(b"x\x1d"), (b"x".to_vec(), false));
        assert_eq!(k.feed(b"dzz"), (Vec::new(), true));
        let mut k = Keys::default();
        assert_eq!(k.feed(b"\x1dq"), (b"\x1dq".to_vec(), false));
        assert_eq!(k.feed(b"\x1d\x1dd"), (b"\x1d".to_vec(), true));
    }
}
