//! Interactive runs for real: `airlockctl launch --tty` and `attach` in tmux panes (a real
//! terminal emulator: `send-keys` types, `capture-pane` reads the screen), through a real
//! airlockd, the agent on a pty of its jail's own devpts.

mod common;

use std::process::{Command, Stdio};

use common::tmux::{run_id, wrapper, Tmux};
use common::{poll, require_journald, Airlockd, Host};

/// These tests drive terminals in real time (tmux, TUIs, resizes): one at a time, so a
/// loaded machine does not make one starve another.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The agent: says what its terminal is, tries the clipboard and the title, then echoes
/// lines until `quit` (exit 7). SIGWINCH and SIGINT are reported, not fatal.
const AGENT: &str = r#"
import os, sys, signal, termios, fcntl, struct
def size():
    r = fcntl.ioctl(1, termios.TIOCGWINSZ, b"\0" * 8)
    rows, cols = struct.unpack("HHHH", r)[:2]
    return f"{rows}x{cols}"
signal.signal(signal.SIGWINCH, lambda s, f: print("WINCH " + size(), flush=True))
signal.signal(signal.SIGINT, lambda s, f: print("GOT-SIGINT", flush=True))
print(f"ISATTY {os.isatty(0)} {os.isatty(1)} {os.isatty(2)} SIZE {size()}", flush=True)
sys.stdout.write("\x1b]52;c;U0VDUkVU\x07\x1b]2;PWNED-TITLE\x07\x1b[6n\x1b[cCLIP-DONE\n")
sys.stdout.flush()
for line in sys.stdin:
    line = line.strip()
    print("ECHO " + line, flush=True)
    if line == "size":
        print("SIZE-NOW " + size(), flush=True)
    if line == "quit":
        sys.exit(7)
"#;

#[test]
fn a_tty_run_gets_a_terminal_its_size_resizes_and_ctrl_c_and_no_osc_reaches_the_pane() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_journald();
    let h = Host::new(&[("tess", "code")], "");
    let _d = Airlockd::start(&h);
    let t = Tmux::new("tty");
    let launch = wrapper(
        &h,
        "launch.sh",
        &[
            "launch",
            "code",
            "--instance",
            "tess",
            "--tty",
            "--",
            "/usr/bin/python3",
            "-c",
            AGENT,
        ],
    );
    t.ok(&[
        "new-session",
        "-d",
        "-s",
        "ctl",
        "-x",
        "100",
        "-y",
        "30",
        "sleep 600",
    ]);
    // OSC 52 from an application would make a tmux buffer (and OSC 2 the pane's title).
    t.ok(&["set-option", "-g", "set-clipboard", "on"]);
    t.ok(&["set-option", "-g", "status", "off"]);
    t.ok(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "100",
        "-y",
        "30",
        &launch,
    ]);
    let s = t.wait_for("t", "CLIP-DONE");
    let size = t.ok(&[
        "display-message",
        "-p",
        "-t",
        "t",
        "#{pane_height}x#{pane_width}",
    ]);
    assert!(
        s.contains(&format!("ISATTY True True True SIZE {}", size.trim())),
        "{s}"
    );
    let run = run_id(&s);
    assert_eq!(t.ok(&["list-buffers"]).trim(), "", "OSC 52 reached tmux");
    let title = t.ok(&["display-message", "-p", "-t", "t", "#{pane_title}"]);
    assert!(!title.contains("PWNED"), "the agent set the title: {title}");

    // The check above can fail: the same bytes from a program outside Airlock do.
    let probe = h.root.join("osc52.sh");
    std::fs::write(
        &probe,
        "#!/bin/sh\nprintf '\\033]52;c;U0VDUkVU\\007'\nexec sleep 600\n",
    )
    .unwrap();
    std::fs::set_permissions(&probe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    t.ok(&[
        "new-session",
        "-d",
        "-s",
        "control",
        &probe.display().to_string(),
    ]);
    let reached = poll(10, || {
        let b = t.ok(&["list-buffers"]);
        (!b.trim().is_empty()).then_some(b)
    });
    assert!(reached.is_some(), "tmux takes OSC 52 from a plain program");
    t.ok(&["delete-buffer"]);

    // A resize reaches the agent's terminal: the size it reads afterwards is the pane's.
    // (The kernel signals SIGWINCH on the change, which the agent prints; tests/tty_agents
    // shows a real TUI redrawing on it. Asserted here is the size, read on demand: once in
    // CI under load the WINCH line alone did not show.)
    t.ok(&["resize-window", "-t", "t", "-x", "90", "-y", "25"]);
    let size = t.ok(&[
        "display-message",
        "-p",
        "-t",
        "t",
        "#{pane_height}x#{pane_width}",
    ]);
    let want = format!("SIZE-NOW {}", size.trim());
    let seen = poll(30, || {
        t.ok(&["send-keys", "-t", "t", "size", "Enter"]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        t.ok(&["capture-pane", "-p", "-t", "t"])
            .contains(&want)
            .then_some(())
    });
    assert!(
        seen.is_some(),
        "{want} never showed: {}",
        t.ok(&["capture-pane", "-p", "-t", "t"])
    );
    // Ctrl-C is a character for the agent's pty, which makes it SIGINT; airlockctl lives on.
    t.ok(&["send-keys", "-t", "t", "C-c"]);
    t.wait_for("t", "GOT-SIGINT");
    t.ok(&["send-keys", "-t", "t", "hello", "Enter"]);
    t.wait_for("t", "ECHO hello");

    // Detach: the run goes on, airlockctl exits 0 saying how to attach.
    t.ok(&["send-keys", "-t", "t", "C-]", "d"]);
    let s = t.wait_for("t", "EXIT=0");
    assert!(s.contains(&format!("airlockctl attach {run}")), "{s}");
    let ps = h.ctl(&["ps"]);
    assert!(
        common::stdout(&ps).contains(&run),
        "{}",
        common::stdout(&ps)
    );

    // Attach again: the ring redraws what the agent wrote; a second writer is refused
    // naming the first; a reader may watch.
    let attach = wrapper(&h, "attach.sh", &["attach", &run]);
    t.ok(&[
        "new-session",
        "-d",
        "-s",
        "a",
        "-x",
        "100",
        "-y",
        "30",
        &attach,
    ]);
    t.wait_for("a", "ECHO hello");
    let second = wrapper(&h, "second.sh", &["attach", &run]);
    t.ok(&[
        "new-session",
        "-d",
        "-s",
        "b",
        "-x",
        "100",
        "-y",
        "30",
        &second,
    ]);
    let s = t.wait_for("b", "EXIT=6");
    assert!(s.contains("uid 0") && s.contains("holds"), "{s}");
    let reader = wrapper(&h, "reader.sh", &["attach", &run, "--read-only"]);
    t.ok(&[
        "new-session",
        "-d",
        "-s",
        "r",
        "-x",
        "100",
        "-y",
        "30",
        &reader,
    ]);
    t.wait_for("r", "ECHO hello");
    // Keys from the reader are not the agent's.
    t.ok(&["send-keys", "-t", "r", "ignored", "Enter"]);
    t.ok(&["send-keys", "-t", "a", "quit", "Enter"]);
    t.wait_for("a", "ECHO quit");
    let s = t.wait_for("a", "EXIT=0");
    assert!(!s.contains("ECHO ignored"), "{s}");
    assert_eq!(
        t.ok(&["list-buffers"]).trim(),
        "",
        "OSC 52 reached tmux on attach"
    );

    // The run's record: exit 7. The journal has the text, its escapes escaped.
    let closed = poll(30, || {
        let s = h.show(&run);
        s.contains("exit").then_some(s)
    })
    .unwrap();
    assert!(closed.contains('7'), "{closed}");
    let journal = common::journal_text(&run);
    assert!(journal.contains("\"MESSAGE\":\"ECHO hello\""), "{journal}");
    assert!(journal.contains("\\\\u{1b}]52;c;"), "{journal}");
    assert!(!journal.contains("ECHO ignored"), "{journal}");

    // An ended run cannot be attached. The closing record is in the ledger's file before
    // its sync returns, and the run leaves airlockd's live table after it: until then an
    // attach hears "the run is ending", so wait for `ps` to no longer list it.
    let gone = poll(30, || {
        let o = h.ctl(&["ps"]);
        (o.status.success() && !common::stdout(&o).contains(run.as_str())).then_some(())
    });
    assert!(
        gone.is_some(),
        "run {run} stayed live after its record closed"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&h.cfg)
        .args(["attach", &run])
        .output()
        .unwrap();
    // Without a terminal first of all.
    assert_eq!(o.status.code(), Some(5), "{}", common::stderr(&o));
    let ended = wrapper(&h, "ended.sh", &["attach", &run]);
    t.ok(&["new-session", "-d", "-s", "e", &ended]);
    let s = t.wait_for("e", "EXIT=1");
    assert!(s.contains("not running"), "{s}");
}

#[test]
fn launch_tty_without_a_terminal_is_refused_with_its_own_exit_code() {
    let h = Host::new(&[("tess", "code")], "");
    let o = Command::new(env!("CARGO_BIN_EXE_airlockctl"))
        .arg("--config")
        .arg(&h.cfg)
        .args([
            "launch",
            "code",
            "--instance",
            "tess",
            "--tty",
            "--",
            "/bin/true",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains("terminal"),
        "{}",
        common::stderr(&o)
    );
}

/// The last line of the pane's visible screen that holds anything.
fn last_line(t: &Tmux, target: &str) -> String {
    t.visible(target)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .to_string()
}

/// Wait until the pane's last line holds `want`.
fn wait_last_line(t: &Tmux, target: &str, want: &str) -> String {
    poll(60, || {
        let l = last_line(t, target);
        l.contains(want).then_some(l)
    })
    .unwrap_or_else(|| {
        panic!(
            "{want:?} never on the last line of {target}:\n{}",
            t.visible(target)
        )
    })
}

#[test]
fn an_ask_shows_on_the_status_line_and_the_writer_answers_it_there() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_journald();
    let h = Host::new(
        &[("tess", "code")],
        "asks: {roles: [code], wait_seconds: 120}\n",
    );
    let _d = Airlockd::start(&h);
    let ws = h.workspace("ws", h.uids[0]);
    let steps = serde_json::json!([
        {"call": "bash", "args": {"command": "touch from-tty"}},
        {"call": "bash", "args": {"command": "touch denied-tty"}},
    ]);
    let mut args = vec![
        "launch".to_string(),
        "code".into(),
        "--instance".into(),
        "tess".into(),
        "--tty".into(),
        "--workspace".into(),
        ws.display().to_string(),
        "--".into(),
    ];
    args.extend(common::mcp_agent(&steps));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let launch = wrapper(&h, "launch.sh", &args);
    let t = Tmux::new("asks");
    t.session("t", 120, 30, &launch);
    t.ok(&["set-option", "-g", "status", "off"]);

    // The ask is on the writer's last line, with the keys that answer it.
    let line = wait_last_line(&t, "t", "touch from-tty");
    assert!(
        line.contains("ask a-") && line.contains("Ctrl-] a allow"),
        "{line}"
    );
    assert!(line.contains("default: no prefix matches"), "{line}");
    let run = run_id(&t.screen("t"));

    // A reader sees it too, and may not answer it.
    let reader = wrapper(&h, "reader.sh", &["attach", &run, "--read-only"]);
    t.session("r", 120, 30, &reader);
    let line = wait_last_line(&t, "r", "touch from-tty");
    assert!(
        line.contains("read-only: airlockctl allow|deny a-"),
        "{line}"
    );
    t.ok(&["send-keys", "-t", "r", "C-]", "a"]);
    wait_last_line(&t, "r", "a read-only terminal cannot answer");
    assert!(
        !ws.join("from-tty").exists(),
        "a reader's key answered the ask"
    );

    // The writer allows it with Ctrl-] a; the next ask takes the line, Ctrl-] n denies it.
    t.ok(&["send-keys", "-t", "t", "C-]", "a"]);
    wait_last_line(&t, "t", "touch denied-tty");
    assert!(
        ws.join("from-tty").exists(),
        "the allowed command did not run"
    );
    t.ok(&["send-keys", "-t", "t", "C-]", "n"]);
    let s = t.wait_for("t", "EXIT=");
    assert!(s.contains("EXIT=0"), "{s}");
    assert!(!ws.join("denied-tty").exists());
    // The agent got both answers: the first ran, the second was refused by uid 0.
    assert!(s.contains("\"exit_code\":0"), "{s}");
    assert!(s.contains("denied by uid 0"), "{s}");
    // The status line is gone with the asks.
    assert!(!last_line(&t, "t").contains("ask a-"), "{}", t.visible("t"));

    // Journaled as `airlockctl allow|deny` would be: who answered.
    let recs = common::events(&run, "ask", 4);
    let states: Vec<(&str, &str)> = recs
        .iter()
        .map(|r| {
            (
                r["AIRLOCK_ASK_STATE"].as_str().unwrap_or_default(),
                r["AIRLOCK_ANSWERED_BY"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("waiting", ""),
            ("allowed", "uid 0"),
            ("waiting", ""),
            ("denied", "uid 0")
        ],
        "{recs:?}"
    );
}
