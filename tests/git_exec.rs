//! Issue 43, finding 1: git through the bash tool executes no file whose bytes a run could
//! have written, whatever the configuration names. The agent's own ELF (a copy of `id`,
//! written into the workspace) is set up as a textconv driver's input with the loader as
//! the driver, as the review did it from inside a jail, and reached by `git status -v`,
//! `git commit -v`, a plain `git commit` under `commit.verbose=true`, and a driver
//! planted in the persistent home's `~/.gitconfig` and `~/.config/git/attributes`. Had the
//! ELF run, its output (`uid=...`) would be in the command's output or in the commit
//! message template git leaves in `.git/COMMIT_EDITMSG`.

mod common;

use std::process::Stdio;

use common::*;
use serde_json::{json, Value};

const LOADER: &str = "/lib64/ld-linux-x86-64.so.2";

fn git(dir: &std::path::Path, args: &[&str]) {
    let st = std::process::Command::new("git")
        .args(["-c", "user.name=T", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "git {args:?}");
}

/// What a bash step printed, both streams.
fn printed(lines: &[Value], i: usize) -> String {
    let s = &step(lines, i)["structured"];
    format!(
        "{}{}",
        s["stdout"].as_str().unwrap_or_default(),
        s["stderr"].as_str().unwrap_or_default()
    )
}

#[test]
fn git_runs_no_elf_of_the_runs_through_the_loader_as_a_textconv() {
    require_journald();
    assert!(
        std::path::Path::new(LOADER).exists(),
        "{LOADER} is missing: this test is for x86-64 hosts"
    );
    let h = Host::new(&[("tess", "code")], "");
    let ws = h.root.join("ws");
    std::fs::create_dir_all(ws.join("d")).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README"), "x\n").unwrap();
    git(&ws, &["add", "README"]);
    git(&ws, &["commit", "-q", "-m", "first"]);
    // The agent's own ELF (its bytes are the run's, wherever they came from).
    std::fs::copy("/usr/bin/id", ws.join("d/a.bin")).unwrap();
    std::fs::copy("/usr/bin/id", ws.join("d/b.elf")).unwrap();
    std::fs::write(ws.join(".gitattributes"), "*.bin diff=x\n").unwrap();
    let mut config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    config.push_str(&format!(
        "[user]\n\tname = T\n\temail = t@example.invalid\n[diff \"x\"]\n\ttextconv = {LOADER}\n"
    ));
    std::fs::write(ws.join(".git/config"), config).unwrap();
    chown_tree(&ws, h.uids[0]);
    let w = ws.display();
    let read_msg = format!(
        "const m = fs.readFileSync('{w}/.git/COMMIT_EDITMSG', 'utf8'); return m.includes('uid=') ? 'RAN: ' + m : 'clean';"
    );
    let home = "/home/tess";
    let steps = json!([
        {"call": "bash", "args": {"command": "git add d/a.bin .gitattributes"}},
        {"call": "bash", "args": {"command": "git status -v"}},
        {"call": "bash", "args": {"command": "git commit -v"}},
        {"js": read_msg},
        {"js": format!("fs.unlinkSync('{w}/.git/COMMIT_EDITMSG'); fs.appendFileSync('{w}/.git/config', '[commit]\\n\\tverbose = true\\n'); return 'set';")},
        {"call": "bash", "args": {"command": "git commit"}},
        {"js": read_msg},
        {"js": format!(
            "fs.writeFileSync('{home}/.gitconfig', '[diff \"y\"]\\n\\ttextconv = {LOADER}\\n');\
             fs.mkdirSync('{home}/.config/git', {{recursive: true}});\
             fs.writeFileSync('{home}/.config/git/attributes', '*.elf diff=y\\n');\
             fs.appendFileSync('{w}/.git/config', '[commit]\\n\\tverbose = false\\n');\
             return 'planted';"
        )},
        {"call": "bash", "args": {"command": "git add d/b.elf"}},
        {"call": "bash", "args": {"command": "git status -v"}},
    ]);
    let argv = mcp_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h
        .launch(
            "code",
            "tess",
            &["--workspace", ws.to_str().unwrap()],
            &argv,
        )
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    // Every way in is checked before any assertion, so a failure names them all.
    let mut ran = Vec::new();
    for (i, what) in [
        (1, "git status -v"),
        (2, "git commit -v"),
        (5, "git commit with commit.verbose"),
        (9, "git status -v with the home's driver"),
    ] {
        if printed(&lines, i).contains("uid=") {
            ran.push(what);
        }
    }
    for (i, what) in [
        (3, "git commit -v's template"),
        (6, "commit.verbose's template"),
    ] {
        if step(&lines, i)["value"] != "clean" {
            ran.push(what);
        }
    }
    assert!(
        ran.is_empty(),
        "the run's ELF ran through the loader: {ran:?}\n{lines:#?}"
    );
    // git still did its work: the adds staged both files, status saw them.
    assert_eq!(
        step(&lines, 0)["structured"]["exit_code"],
        0,
        "{:?}",
        step(&lines, 0)
    );
    assert_eq!(
        step(&lines, 8)["structured"]["exit_code"],
        0,
        "{:?}",
        step(&lines, 8)
    );
    assert!(
        printed(&lines, 1).contains("d/a.bin"),
        "{:?}",
        step(&lines, 1)
    );
    assert!(
        printed(&lines, 9).contains("d/b.elf"),
        "{:?}",
        step(&lines, 9)
    );
}
