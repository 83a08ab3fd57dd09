//! The agents' own TUIs in `launch --tty` runs (no `-- CMD`: the role's own agent in its
//! interactive form), in tmux panes, against the scripted stand-in model
//! (tests/agents/standin_provider.py). Claude Code: the brief is its first message, a
//! person types a request, the model asks for a bash command the role lacks, the ask shows
//! on the terminal's status line (Claude Code's own egress asks are denied there with
//! Ctrl-] n), `airlockctl allow` from another process lets it run, the answer shows; its
//! `/copy` (OSC 52) never reaches the pane; detach and attach redraw the screen, a resize
//! reaches the TUI, `/exit` ends the run with its ledger record closed. Codex: the brief,
//! an ask allowed, `/quit`.

mod common;

use std::path::Path;

use common::tmux::{run_id, wrapper, Tmux};
use common::*;
use serde_json::{json, Value};

/// These tests drive terminals in real time (tmux, TUIs, resizes): one at a time, so a
/// loaded machine does not make one starve another.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const CLAUDE: &str =
    "/usr/local/lib/airlock-agents/node_modules/@anthropic-ai/claude-code-linux-x64/claude";

/// The ask waiting for `what`, once `airlockctl asks --json` lists it.
fn ask_for(h: &Host, what: &str) -> Value {
    let list = || -> Vec<Value> {
        let o = h.ctl(&["--json", "asks"]);
        serde_json::from_str::<Value>(&stdout(&o))
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    };
    poll(90, || list().into_iter().find(|a| a["what"] == what))
        .unwrap_or_else(|| panic!("no ask for {what}: {:?}", list()))
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

/// The ask a status line shows (`[notice · ]ask a-N: what...`): its id and the rest.
fn shown_ask(line: &str) -> Option<(String, &str)> {
    let mut from = 0;
    while let Some(i) = line[from..].find("ask a-") {
        let digits = &line[from + i + 6..];
        let n = digits.bytes().take_while(u8::is_ascii_digit).count();
        if n > 0 {
            if let Some(rest) = digits[n..].strip_prefix(": ") {
                return Some((format!("a-{}", &digits[..n]), rest));
            }
        }
        from += i + 6;
    }
    None
}

/// A line of the visible screen that is a rule exactly `cols` wide (Claude Code draws its
/// prompt box's rules across the whole window).
fn has_rule(screen: &str, cols: usize) -> bool {
    screen
        .lines()
        .any(|l| l.trim_end().chars().count() == cols && l.trim_end().chars().all(|c| c == '─'))
}

#[test]
fn claude_codes_own_tui_works_through_launch_tty_asks_detach_attach_resize_and_exit() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_journald();
    assert!(
        Path::new(CLAUDE).is_file(),
        "{CLAUDE} is missing: run scripts/install-agents.sh (scripts/install-deps.sh runs it)"
    );
    let si = StandIn::scripted(&json!([
        {"text": "READY-FOR-WORK"},
        {"tool": "bash", "input": {"command": "touch asked-file"}},
        {"text": "MADE-THE-FILE"}
    ]));
    let h = Host::new(
        &[("tess", "code")],
        &format!(
            "{}asks: {{roles: [code], wait_seconds: 120}}\n",
            si.config()
        ),
    );
    // The GitHub identity is left to GitHub: this test is of the terminal.
    h.local_role("code", |t| {
        t.replacen("key_store: airlock", "key_store: github", 1)
    });
    let ws = h.workspace("ws", h.uids[0]);
    let _d = Airlockd::start(&h);
    let t = Tmux::new("claude");
    let launch = wrapper(
        &h,
        "launch.sh",
        &[
            "launch",
            "code",
            "--instance",
            "tess",
            "--tty",
            "--workspace",
            ws.to_str().unwrap(),
        ],
    );
    t.session("t", 120, 40, &launch);
    t.ok(&["set-option", "-g", "status", "off"]);

    // No first-run screen stands in the way: the brief is the first message, answered.
    let s = t.wait_secs("t", "READY-FOR-WORK", 90);
    assert!(
        s.contains("Your standing brief is in the file /etc/airlock/brief.md"),
        "{s}"
    );
    // The TUI cleared the line airlockctl printed; the run is the host's only one.
    let run = run_id(&stdout(&h.ctl(&["ps"])));

    // The person types a request; the model asks for a command no run.bash prefix grants.
    t.ok(&["send-keys", "-t", "t", "-l", "please make the file"]);
    t.ok(&["send-keys", "-t", "t", "Enter"]);
    let a = ask_for(&h, "touch asked-file");
    assert_eq!(a["run"], run.as_str(), "{a}");
    assert!(!ws.join("asked-file").exists(), "it ran before the answer");
    // The ask is on the terminal's status line too (the last row, below Claude Code's
    // screen). Claude Code's own tries at its vendor's hosts come first, as egress asks:
    // the person denies those there, with Ctrl-] n.
    let mut denied: Vec<String> = Vec::new();
    let line = poll(60, || {
        let l = last_line(&t, "t");
        let (id, what) = shown_ask(&l)?;
        if what.starts_with("bash `touch asked-file`") {
            return Some(l);
        }
        if what.starts_with("egress `") && !denied.contains(&id) {
            denied.push(id);
            t.ok(&["send-keys", "-t", "t", "C-]", "n"]);
        }
        None
    })
    .unwrap_or_else(|| {
        panic!(
            "the ask never showed on the status line:\n{}",
            t.visible("t")
        )
    });
    assert!(
        line.contains("Ctrl-] a allow, r for the run, n deny"),
        "{line}"
    );
    let o = h.ctl(&["allow", a["id"].as_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    t.wait_secs("t", "MADE-THE-FILE", 60);
    assert!(
        ws.join("asked-file").exists(),
        "the allowed command did not run"
    );
    // The line went with the ask (Claude Code's later tries, if any, may show again).
    poll(10, || {
        (!last_line(&t, "t").contains("touch asked-file")).then_some(())
    })
    .unwrap_or_else(|| panic!("the answered ask stayed:\n{}", t.visible("t")));

    // Claude Code's /copy writes its last answer to the clipboard with OSC 52: it never
    // reaches the pane (tmux, told to take the clipboard, would make a buffer of it).
    t.ok(&["set-option", "-g", "set-clipboard", "on"]);
    t.ok(&["send-keys", "-t", "t", "-l", "/copy"]);
    t.ok(&["send-keys", "-t", "t", "Enter"]);
    t.wait_for("t", "Sent to your terminal's clipboard");
    // (Without the filter, tmux holds a buffer of "MADE-THE-FILE" at this point.)
    assert_eq!(
        t.ok(&["list-buffers"]).trim(),
        "",
        "OSC 52 reached the pane"
    );

    // Detach: the run goes on.
    t.ok(&["send-keys", "-t", "t", "C-]", "d"]);
    let s = t.wait_for("t", "EXIT=0");
    assert!(s.contains(&format!("airlockctl attach {run}")), "{s}");

    // Attach from another terminal: the screen is drawn again, the answer on it.
    let attach = wrapper(&h, "attach.sh", &["attach", &run]);
    t.session("a", 120, 40, &attach);
    poll(30, || {
        t.visible("a").contains("MADE-THE-FILE").then_some(())
    })
    .unwrap_or_else(|| panic!("no redraw on attach:\n{}", t.visible("a")));
    poll(30, || has_rule(&t.visible("a"), 120).then_some(()))
        .unwrap_or_else(|| panic!("no prompt box on attach:\n{}", t.visible("a")));

    // A resize reaches the TUI: it draws its prompt box to the new width.
    t.ok(&["resize-window", "-t", "a", "-x", "140", "-y", "40"]);
    assert_eq!(t.size("a"), "40x140");
    poll(30, || has_rule(&t.visible("a"), 140).then_some(()))
        .unwrap_or_else(|| panic!("the TUI never drew at 140 columns:\n{}", t.visible("a")));

    // `/exit` ends the run; the attached terminal says so and the ledger record closes.
    t.ok(&["send-keys", "-t", "a", "-l", "/exit"]);
    t.ok(&["send-keys", "-t", "a", "Enter"]);
    let s = t.wait_secs("a", "EXIT=", 60);
    assert!(s.contains("EXIT=0"), "{s}");
    let shown = poll(30, || {
        let s = h.show(&run);
        s.lines().any(|l| l.starts_with("ended")).then_some(s)
    })
    .unwrap_or_else(|| panic!("the run's record never closed:\n{}", h.show(&run)));
    // Claude Code's own tries at hosts no grant names (its downloads host) are asks too,
    // left unanswered here: what was asked is what was answered or not.
    let asks = shown
        .lines()
        .find(|l| l.starts_with("asks"))
        .unwrap_or_else(|| panic!("{shown}"));
    let n: Vec<u64> = asks
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        n.len() == 4 && n[1] == 1 && n[2] == denied.len() as u64 && n[0] == n[1] + n[2] + n[3],
        "{asks} (denied on the terminal: {denied:?})"
    );
    // The terminal's denials and the allow are the run's, journaled with who answered.
    let recs = events(&run, "ask", 2 + 2 * denied.len());
    for id in &denied {
        assert!(
            recs.iter().any(|r| r["AIRLOCK_ASK"] == id.as_str()
                && r["AIRLOCK_ASK_STATE"] == "denied"
                && r["AIRLOCK_ANSWERED_BY"] == "uid 0"),
            "{id}: {recs:?}"
        );
    }
    assert!(
        recs.iter().any(|r| r["AIRLOCK_ASK"] == a["id"]
            && r["AIRLOCK_ASK_STATE"] == "allowed"
            && r["AIRLOCK_ANSWERED_BY"] == "uid 0"),
        "{recs:?}"
    );
}

const CODEX: &str = "/usr/local/lib/airlock-agents/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex";

/// Codex's own TUI in a `launch --tty` run (it starts with `--no-daemon`: its shared
/// background server would be a program of its own, which the jail refuses): the brief is
/// its first message, a typed request's bash command waits as an ask, `airlockctl allow`
/// lets it run, the answer shows, `/quit` ends the run with its record closed.
#[test]
fn codexs_own_tui_works_through_launch_tty_and_an_ask() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    require_journald();
    assert!(
        Path::new(CODEX).is_file(),
        "{CODEX} is missing: run scripts/install-agents.sh (scripts/install-deps.sh runs it)"
    );
    let si = StandIn::scripted(&json!([
        {"text": "CODEX-READY"},
        {"tool": "bash", "input": {"command": "touch codex-asked"}},
        {"text": "CODEX-MADE-IT"}
    ]));
    let h = Host::new(
        &[("rex", "review")],
        &format!(
            "{}asks: {{roles: [review], wait_seconds: 120}}\n",
            si.config()
        ),
    );
    h.local_role("review", |t| {
        t.replacen("key_store: airlock", "key_store: github", 1)
    });
    let ws = h.workspace("ws", h.uids[0]);
    let _d = Airlockd::start(&h);
    let t = Tmux::new("codex");
    let launch = wrapper(
        &h,
        "launch.sh",
        &[
            "launch",
            "review",
            "--instance",
            "rex",
            "--tty",
            "--workspace",
            ws.to_str().unwrap(),
        ],
    );
    t.session("t", 120, 40, &launch);
    t.ok(&["set-option", "-g", "status", "off"]);
    let s = t.wait_secs("t", "CODEX-READY", 90);
    assert!(
        s.contains("Your standing brief is in the file /etc/airlock/brief.md"),
        "{s}"
    );
    let run = run_id(&stdout(&h.ctl(&["ps"])));
    // Codex takes keys that come in a burst as a paste (an Enter in it is a newline): the
    // request is typed, seen in its composer, then sent with Enter.
    t.ok(&["send-keys", "-t", "t", "-l", "please make the file"]);
    t.wait_for("t", "› please make the file");
    t.ok(&["send-keys", "-t", "t", "Enter"]);
    let a = ask_for(&h, "touch codex-asked");
    assert_eq!(a["run"], run.as_str(), "{a}");
    assert!(!ws.join("codex-asked").exists(), "it ran before the answer");
    let o = h.ctl(&["allow", a["id"].as_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    t.wait_secs("t", "CODEX-MADE-IT", 60);
    assert!(
        ws.join("codex-asked").exists(),
        "the allowed command did not run"
    );
    t.ok(&["send-keys", "-t", "t", "-l", "/quit"]);
    t.wait_for("t", "› /quit");
    t.ok(&["send-keys", "-t", "t", "Enter"]);
    let s = t.wait_secs("t", "EXIT=", 60);
    assert!(s.contains("EXIT=0"), "{s}");
    poll(30, || {
        h.show(&run)
            .lines()
            .any(|l| l.starts_with("ended"))
            .then_some(())
    })
    .unwrap_or_else(|| panic!("the run's record never closed:\n{}", h.show(&run)));
}
