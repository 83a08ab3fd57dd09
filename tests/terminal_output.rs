//! A run's output on the operator's terminal (a real pty): `launch --wait` (standalone and
//! through airlockd) and `logs` show the agent's control sequences escaped, so an agent can
//! neither write the operator's clipboard (OSC 52) nor retitle or clear the screen;
//! `--raw` passes the bytes as they are. Into a pipe, `launch --wait` gives the exact bytes.

mod common;

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};

use common::*;

/// What an adversarial agent writes: OSC 52 (clipboard), OSC 0 (title), clear screen, on
/// both streams, raw and inside a JSON event (as a model's text would be).
const AGENT: &str = r#"
import os
os.write(1, b"A\x1b]52;c;cHduZWQ=\x07B\x1b]0;owned\x07C\x1b[2J\n")
os.write(2, b"E\x1b]52;c;cHduZWQ=\x07F\n")
os.write(1, b'{"type":"assistant","message":{"content":[{"type":"text","text":"T\\u001b]52;c;cHduZWQ=\\u0007U"}]}}\n')
"#;

/// Run `cmd` with its stdout and stderr on the slave of a fresh pty; what the terminal
/// got, once the command exited.
fn on_a_terminal(mut cmd: Command) -> (Vec<u8>, std::process::ExitStatus) {
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(slave(&pty.slave))
        .stderr(slave(&pty.slave))
        .spawn()
        .unwrap();
    // Every slave end but the child's closed here, so the master reads EIO once it is done.
    drop(cmd);
    drop(pty.slave);
    let mut got = Vec::new();
    let mut master = std::fs::File::from(pty.master);
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            // EIO: every slave end is closed (the command and what it started are gone).
            Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
            Err(e) => panic!("read pty: {e}"),
        }
    }
    (got, child.wait().unwrap())
}

fn assert_escaped(got: &[u8], what: &str) {
    let text = String::from_utf8_lossy(got);
    assert!(
        !got.contains(&0x1b) && !got.contains(&0x07),
        "{what}: a control character reached the terminal:\n{text:?}"
    );
    // Shown escaped (the journal reader writes `\u{001b}`, a terminal-safe writer `\u{1b}`).
    assert!(
        text.contains("\\u{1b}]52;c;") || text.contains("\\u{001b}]52;c;"),
        "{what}: {text:?}"
    );
}

fn agent_argv() -> [&'static str; 3] {
    ["/usr/bin/python3", "-c", AGENT]
}

#[test]
fn launch_wait_on_a_terminal_escapes_the_agents_control_sequences() {
    let h = Host::new(&[("tess", "code")], "");
    let (got, st) = on_a_terminal(h.launch("code", "tess", &[], &agent_argv()));
    assert!(st.success(), "{}", String::from_utf8_lossy(&got));
    assert_escaped(&got, "launch --standalone --wait");
    let run = String::from_utf8_lossy(&got)
        .split_whitespace()
        .find(|w| w.starts_with("r-") && airlock::sandbox::spec::valid_run_id(w))
        .expect("a run id")
        .to_string();

    // `logs` shows the agent's JSON event as a readable line: escaped too.
    let mut logs = Command::new(env!("CARGO_BIN_EXE_airlockctl"));
    logs.arg("--config").arg(&h.cfg).args(["logs", &run]);
    let (got, st) = on_a_terminal(logs);
    assert!(st.success(), "{}", String::from_utf8_lossy(&got));
    assert_escaped(&got, "logs");
    assert!(
        String::from_utf8_lossy(&got).contains("agent: says: T\\u{1b}]52;c;"),
        "{}",
        String::from_utf8_lossy(&got)
    );

    // Through airlockd, the same; with --raw the bytes as they are.
    let _d = Airlockd::start(&h);
    let through = |extra: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_airlockctl"));
        c.arg("--config")
            .arg(&h.cfg)
            .args(["launch", "code", "--instance", "tess", "--wait"])
            .args(extra)
            .arg("--")
            .args(agent_argv());
        on_a_terminal(c)
    };
    let (got, st) = through(&[]);
    assert!(st.success(), "{}", String::from_utf8_lossy(&got));
    assert_escaped(&got, "launch --wait");
    let (got, st) = through(&["--raw"]);
    assert!(st.success(), "{}", String::from_utf8_lossy(&got));
    assert!(
        got.windows(7).any(|w| w == b"\x1b]52;c;"),
        "--raw: {:?}",
        String::from_utf8_lossy(&got)
    );
}

#[test]
fn launch_wait_into_a_pipe_gives_the_exact_bytes() {
    let h = Host::new(&[("tess", "code")], "");
    let o = h
        .launch("code", "tess", &[], &agent_argv())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        o.stdout.windows(7).any(|w| w == b"\x1b]52;c;"),
        "{:?}",
        stdout(&o)
    );
}
