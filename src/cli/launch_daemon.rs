//! `airlockctl launch` through airlockd (without `--standalone`): ask for the run, then
//! either print its id, or stream its output and exit with its exit code. While it waits,
//! signals are decided by [`detach`](super::detach): Ctrl-C detaches (twice: stops).

use crate::cli::output::outln;
use crate::terminal::{Show, TerminalSafe};
use std::io::{BufWriter, Write};
use std::time::Instant;

use super::detach::{self, Action, Phase};
use super::interrupt::{self, Signals};
use super::launch::LaunchArgs;
use super::output;
use super::remote::{self, Ctx};
use super::table::clean;
use crate::control::client::{Client, ClientError};
use crate::control::protocol::{ErrorCode, Frame, Op, Request};

pub fn run(ctx: &Ctx, args: &LaunchArgs) -> i32 {
    let workspace = match &args.workspace {
        None => None,
        // airlockd resolves paths in its own working directory: send an absolute one.
        Some(w) => match std::fs::canonicalize(w) {
            Ok(abs) => match abs.into_os_string().into_string() {
                Ok(s) => Some(s),
                Err(_) => {
                    eprintln!("airlockctl launch: --workspace must be a UTF-8 path");
                    return output::ERROR;
                }
            },
            Err(e) => {
                eprintln!("airlockctl launch: --workspace {}: {e}", w.display());
                return output::ERROR;
            }
        },
    };
    if args.tty {
        return super::tty::launch(ctx, args, workspace);
    }
    let op = Op::Launch {
        role: args.role.clone(),
        instance: args.instance.clone(),
        workspace,
        max_seconds: args.max_seconds,
        command: (!args.command.is_empty()).then(|| args.command.clone()),
        wait: args.wait,
        tty: None,
    };
    let socket = match ctx.socket_path() {
        Ok(s) => s,
        Err(code) => return code,
    };
    // Taken before anything else can start a thread; without them (they cannot fail on a
    // sane host) the signals keep their default and end this process, detaching silently.
    let mut signals = if args.wait {
        Signals::take().ok()
    } else {
        None
    };
    let mut client = match Client::connect(&socket) {
        Ok(c) => c,
        Err(ClientError::NotRunning { socket }) => {
            return remote::not_running(
                "launch",
                &socket,
                ", or launch with --standalone to supervise the run in this process",
            )
        }
        Err(e) => return remote::client_error(&e),
    };
    if let Err(e) = client.send(&Request::new(op)) {
        return remote::client_error(&e);
    }
    let stop = |run: &str| {
        let op = Op::Stop { run: run.into() };
        match ctx.request(&op) {
            Ok(_) => true,
            // No longer active: it is ending already, and its exit is on its way.
            Err(remote::Failed::Refused(Some(e))) if e.code == ErrorCode::NotFound => true,
            Err(f) => {
                remote::report(&op, &f);
                false
            }
        }
    };
    match follow(&mut client, args.wait, args.show(), signals.as_mut(), &stop) {
        Ok(code) => code,
        Err(e) => remote::client_error(&e),
    }
}

/// What to do about a signal, once the run is known; `Some(code)`: leave with it.
fn decide(phase: &mut Phase, sig: i32, run: &str, stop: &dyn Fn(&str) -> bool) -> Option<i32> {
    let (next, action) = detach::on_signal(*phase, sig, Instant::now());
    *phase = next;
    let id = run;
    let run = clean(run);
    match action {
        Action::Detach { then_leave: false } => {
            eprintln!(
                "airlockctl: detached; the run goes on: airlockctl stop {run} (Ctrl-C again within {} s stops it now)",
                detach::AGAIN_WITHIN.as_secs()
            );
            None
        }
        Action::Detach { then_leave: true } => {
            eprintln!("airlockctl: detached; the run goes on: airlockctl stop {run}");
            Some(interrupt::exit_code(sig))
        }
        Action::Stop => {
            eprintln!("airlockctl: stopping run {run} (SIGTERM, then kill after the grace period); Ctrl-C again stops waiting");
            if !stop(id) {
                eprintln!("airlockctl: the run goes on; still waiting for it");
            }
            None
        }
        Action::Leave => {
            eprintln!("airlockctl: no longer waiting; the run goes on under airlockd: `airlockctl show {run}` tells how it ends");
            Some(interrupt::exit_code(sig))
        }
    }
}

/// Read frames until the run is started (without wait) or has exited (with wait), or a
/// signal says to leave. Signals that arrive before the run is started wait for it.
fn follow(
    client: &mut Client,
    wait: bool,
    show: Show,
    mut signals: Option<&mut Signals>,
    stop: &dyn Fn(&str) -> bool,
) -> Result<i32, ClientError> {
    // The agent's output: escaped when shown on a terminal, exact into a pipe.
    let mut stdout = BufWriter::new(TerminalSafe::stdout(show));
    let mut stderr = BufWriter::new(TerminalSafe::stderr(show));
    let mut run: Option<String> = None;
    let mut phase = Phase::Following;
    // Output goes where the run wrote it; a closed stdout (`| head`) must not stop us from
    // reading on to the exit code, so write errors are ignored.
    loop {
        if let (Some(sigs), Some(id)) = (signals.as_deref_mut(), &run) {
            if !client.has_buffered() {
                let patience = detach::patience(phase, Instant::now());
                let (readable, signalled) = interrupt::wait_either(client.as_fd(), sigs, patience)
                    .map_err(|e| ClientError::Io {
                        socket: client.socket().to_path_buf(),
                        op: "wait for the run",
                        source: e,
                    })?;
                if signalled {
                    let _ = stdout.flush();
                    let _ = stderr.flush();
                    if let Some(code) = sigs
                        .wait()
                        .and_then(|sig| decide(&mut phase, sig, id, stop))
                    {
                        return Ok(code);
                    }
                    continue;
                }
                if !readable {
                    // The detach's window passed without a second Ctrl-C.
                    let _ = stdout.flush();
                    return Ok(interrupt::exit_code(libc::SIGINT));
                }
            }
        }
        let Some(resp) = client.recv_as::<Frame>()? else {
            let _ = stdout.flush();
            let _ = stderr.flush();
            return Ok(match &run {
                Some(id) => {
                    eprintln!("airlockctl: lost airlockd before run {id} ended; the run is still supervised: `airlockctl show {id}`");
                    output::ERROR
                }
                None => return Err(ClientError::Closed),
            });
        };
        if !resp.ok {
            let _ = stdout.flush();
            let _ = stderr.flush();
            return Ok(remote::daemon_error("launch", resp.error.as_ref()));
        }
        let frame = resp.data.ok_or(ClientError::Malformed)?;
        match frame {
            Frame::Started { run: id } => {
                if !wait {
                    outln!("{}", clean(&id));
                    return Ok(output::OK);
                }
                let _ = writeln!(stderr, "{}", clean(&id));
                let _ = stderr.flush();
                // From here the run may be silent for as long as its budget allows (up to
                // minutes_per_run): the connection's read timeout must not end the wait.
                client.set_timeout(None)?;
                run = Some(id);
            }
            // A terminal session's frames: not sent to a `--wait` launch.
            Frame::Asks { .. } | Frame::Notice { .. } => {}
            Frame::Output { stream, data } => {
                if stream == "stderr" {
                    let _ = stdout.flush();
                    let _ = stderr.write_all(data.as_bytes());
                } else {
                    let _ = stderr.flush();
                    let _ = stdout.write_all(data.as_bytes());
                }
                // Flush once nothing more is waiting, so a quiet run still shows its lines
                // at once and a chatty one is written in large blocks.
                if !client.has_buffered() {
                    let _ = stdout.flush();
                    let _ = stderr.flush();
                }
            }
            Frame::Exited {
                run: id,
                exit_code,
                outcome,
                reason,
            } => {
                let _ = stdout.flush();
                if outcome != "exited" {
                    let _ = writeln!(
                        stderr,
                        "airlockctl: run {} {}: {}",
                        clean(&id),
                        clean(&outcome),
                        clean(&reason)
                    );
                }
                let _ = stderr.flush();
                return Ok(exit_code);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixListener;
    use std::time::Duration;

    /// A run that stays silent for longer than the client's request timeout is still
    /// waited for: once the run has started, only its end (or airlockd closing) ends the
    /// wait.
    #[test]
    fn a_silent_run_outlasts_the_request_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("fake.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut line = String::new();
            BufReader::new(conn.try_clone().unwrap())
                .read_line(&mut line)
                .unwrap();
            let frame = |data: serde_json::Value| {
                format!(
                    "{}\n",
                    serde_json::json!({"v": 1, "ok": true, "data": data})
                )
            };
            conn.write_all(
                frame(serde_json::json!({"frame": "started", "run": "r-20260101-00000001"}))
                    .as_bytes(),
            )
            .unwrap();
            // Silent for several times the client's timeout below.
            std::thread::sleep(Duration::from_millis(900));
            conn.write_all(
                frame(serde_json::json!({"frame": "exited", "run": "r-20260101-00000001", "exit_code": 7, "outcome": "exited", "reason": "exited with code 7"}))
                    .as_bytes(),
            )
            .unwrap();
        });
        let mut client = Client::connect(&socket).unwrap();
        // Stands in for the 60 s default, so the test does not take a minute.
        client
            .set_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        client
            .send(&Request::new(Op::Launch {
                role: "code".into(),
                instance: "tess".into(),
                workspace: None,
                max_seconds: None,
                command: None,
                wait: true,
                tty: None,
            }))
            .unwrap();
        let code = follow(&mut client, true, Show::Safe, None, &|_| true).unwrap();
        assert_eq!(code, 7);
        server.join().unwrap();
    }
}
