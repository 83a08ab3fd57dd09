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

/// The second attack: the loader as a textconv driver, given a path that resolves to a
/// system program outside git's exec set. The work tree's `d` is swapped for a link to
/// the system's bin folder after `d/python3.N` (a file of the run's, with the system
/// program's size and mtime) was staged; under `core.checkStat=minimal` git finds the
/// staged entry up to date and hands `d/python3.N` itself to the driver. The loader then
/// maps the system's Python from a read-only executable mount (noexec on the run's
/// mounts does not touch it), and Python reads the `.pth` file the run left in the
/// persistent home's user site-packages and runs its code: the run's program, read as a
/// script by an interpreter git never named. It must not run.
#[test]
fn git_runs_no_system_interpreter_through_the_loader_on_a_path_the_run_chose() {
    require_journald();
    assert!(
        std::path::Path::new(LOADER).exists(),
        "{LOADER} is missing: this test is for x86-64 hosts"
    );
    let python = std::fs::canonicalize("/usr/bin/python3").expect("python3 on this host");
    let name = python.file_name().unwrap().to_str().unwrap().to_string();
    let bin = python.parent().unwrap();
    let h = Host::new(&[("tess", "code")], "");
    let ws = h.root.join("ws");
    std::fs::create_dir_all(ws.join("d")).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README"), "x\n").unwrap();
    git(&ws, &["add", "README"]);
    git(&ws, &["commit", "-q", "-m", "first"]);
    // A file of the run's that looks, to a minimal stat check, like the system's Python.
    let meta = std::fs::metadata(&python).unwrap();
    let fake = ws.join("d").join(&name);
    std::fs::write(&fake, vec![b'#'; meta.len() as usize]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&fake)
        .unwrap()
        .set_modified(meta.modified().unwrap())
        .unwrap();
    std::fs::write(ws.join(".gitattributes"), "d/* diff=x\n").unwrap();
    git(&ws, &["add", "-A"]);
    let mut config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    config.push_str(&format!(
        "[user]\n\tname = T\n\temail = t@example.invalid\n\
         [core]\n\tcheckStat = minimal\n\ttrustctime = false\n\
         [diff \"x\"]\n\ttextconv = {LOADER}\n"
    ));
    std::fs::write(ws.join(".git/config"), config).unwrap();
    std::fs::rename(ws.join("d"), ws.join("d2")).unwrap();
    std::os::unix::fs::symlink(bin, ws.join("d")).unwrap();
    chown_tree(&ws, h.uids[0]);
    let site = format!("/home/tess/.local/lib/{name}/site-packages");
    let steps = json!([
        {"js": format!(
            "fs.mkdirSync('{site}', {{recursive: true}});\
             fs.writeFileSync('{site}/x.pth', 'import os; os.write(1, b\"AGENT-PY-RAN\\\\n\")\\n');\
             return 'planted';"
        )},
        {"call": "bash", "args": {"command": "git status -v"}},
        {"call": "bash", "args": {"command": "git commit -v"}},
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
    assert_eq!(step(&lines, 0)["value"], "planted", "{lines:#?}");
    let msg = std::fs::read_to_string(ws.join(".git/COMMIT_EDITMSG")).unwrap_or_default();
    let ran: Vec<&str> = [
        ("git status -v", printed(&lines, 1)),
        ("git commit -v", printed(&lines, 2)),
        ("git commit -v's template", msg),
    ]
    .iter()
    .filter(|(_, out)| out.contains("AGENT-PY-RAN"))
    .map(|(what, _)| *what)
    .collect();
    assert!(
        ran.is_empty(),
        "the run's .pth ran in the system's Python, loaded by the loader: {ran:?}\n{lines:#?}"
    );
    // It held for the reason meant: the loader could not map the program.
    assert!(
        printed(&lines, 1).contains("failed to map segment"),
        "{:?}",
        step(&lines, 1)
    );
    // git still did its work: status saw the staged file.
    assert!(
        printed(&lines, 1).contains(&format!("d/{name}")),
        "{:?}",
        step(&lines, 1)
    );
}

/// The second attack's other paths, each through the bash tool as the agent would: a
/// textconv that is the run's own `#!` script named without a shell (git executes it
/// itself), a textconv that is a system interpreter outside git's exec set given the
/// run's blob (Python would run it as a script), and a clean filter that is the run's
/// script, set in a file the persistent home's `~/.gitconfig` includes. None may run.
/// Then what git itself sees of the mounts (`/proc/self/mountinfo`, read by
/// `git commit -F`): nothing executable but read-only binds of git's programs and
/// library folders.
#[test]
fn git_runs_no_script_interpreter_or_included_filter_and_sees_no_other_exec_mount() {
    require_journald();
    let h = Host::new(&[("tess", "code")], "");
    let ws = h.root.join("ws");
    std::fs::create_dir_all(ws.join("d")).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README"), "x\n").unwrap();
    git(&ws, &["add", "README"]);
    git(&ws, &["commit", "-q", "-m", "first"]);
    let script = ws.join("d/x.sh");
    std::fs::write(&script, "#!/bin/sh\necho RAN-SCRIPT\ncat \"$1\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(ws.join("one.a"), "a\n").unwrap();
    std::fs::write(ws.join("two.b"), "print('RAN-PY')\n").unwrap();
    std::fs::write(ws.join("three.c"), "c\n").unwrap();
    std::fs::write(
        ws.join(".gitattributes"),
        "*.a diff=a\n*.b diff=b\n*.c filter=c\n",
    )
    .unwrap();
    let mut config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    config.push_str(
        "[user]\n\tname = T\n\temail = t@example.invalid\n\
         [diff \"a\"]\n\ttextconv = d/x.sh\n\
         [diff \"b\"]\n\ttextconv = /usr/bin/python3\n",
    );
    std::fs::write(ws.join(".git/config"), config).unwrap();
    chown_tree(&ws, h.uids[0]);
    let home = "/home/tess";
    let w = ws.display();
    let steps = json!([
        {"js": format!(
            "fs.mkdirSync('{home}/.config', {{recursive: true}});\
             fs.writeFileSync('{home}/.gitconfig', '[include]\\n\\tpath = {home}/.config/inc\\n');\
             fs.writeFileSync('{home}/.config/inc', '[filter \"c\"]\\n\\tclean = d/x.sh\\n\\tsmudge = d/x.sh\\n');\
             return 'planted';"
        )},
        {"call": "bash", "args": {"command": "git add one.a two.b three.c .gitattributes"}},
        {"js": format!("fs.writeFileSync('{w}/.gitattributes', '*.a diff=a\\n'); return 'a';")},
        {"call": "bash", "args": {"command": "git status -v"}},
        {"js": format!("fs.writeFileSync('{w}/.gitattributes', '*.b diff=b\\n'); return 'b';")},
        {"call": "bash", "args": {"command": "git status -v"}},
        {"call": "bash", "args": {"command": "git commit -q -F /proc/self/mountinfo"}},
        {"call": "bash", "args": {"command": "git log -1 --format=%B"}},
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
    assert_eq!(step(&lines, 0)["value"], "planted", "{lines:#?}");
    let ran: Vec<usize> = [1, 3, 5, 6]
        .into_iter()
        .filter(|i| {
            let out = printed(&lines, *i);
            out.contains("RAN-SCRIPT") || out.contains("RAN-PY")
        })
        .collect();
    assert!(ran.is_empty(), "a program ran in steps {ran:?}\n{lines:#?}");
    // Each failed to start, and git said so; git's own work went on.
    for (i, what, said) in [
        (1, "the included clean filter", "cannot exec 'd/x.sh'"),
        (3, "the run's script", "cannot exec 'd/x.sh'"),
        (5, "the system's Python", "cannot exec '/usr/bin/python3'"),
    ] {
        let out = printed(&lines, i);
        assert!(out.contains(said), "{what}: {out}");
    }
    // A filter that is not required is skipped: the add goes on, the file as it is.
    assert_eq!(step(&lines, 1)["structured"]["exit_code"], 0, "{lines:#?}");
    assert_eq!(step(&lines, 6)["structured"]["exit_code"], 0, "{lines:#?}");
    let info = printed(&lines, 7);
    assert!(info.contains(" / "), "no mountinfo: {info}");
    let kept: Vec<String> = airlock::policy::git_overrides::EXEC
        .iter()
        .chain(airlock::policy::git_overrides::LIBRARIES)
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .map(|p| p.display().to_string())
        .collect();
    let exec: Vec<String> = info
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (point, options) = (f.get(4)?, f.get(5)?);
            let options: Vec<&str> = options.split(',').collect();
            let exec = !options.contains(&"noexec");
            let own = options.contains(&"ro") && kept.iter().any(|k| k == point);
            (exec && !own).then(|| l.to_string())
        })
        .collect();
    assert!(
        exec.is_empty(),
        "git sees executable mounts other than its own read-only ones: {exec:#?}"
    );
}

/// Run `commands` through the bash tool as `instance` of `role` in `ws`: each one's
/// exit code and what it printed.
fn run_git(
    h: &Host,
    role: &str,
    instance: &str,
    ws: &std::path::Path,
    commands: &[&str],
) -> Vec<(i64, String)> {
    let steps: Vec<Value> = commands
        .iter()
        .map(|c| json!({"call": "bash", "args": {"command": c}}))
        .collect();
    let argv = mcp_agent(&Value::Array(steps));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h
        .launch(
            role,
            instance,
            &["--workspace", ws.to_str().unwrap()],
            &argv,
        )
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let lines = agent_lines(&o);
    (0..commands.len())
        .map(|i| {
            let code = step(&lines, i)["structured"]["exit_code"]
                .as_i64()
                .unwrap_or(-1);
            (code, printed(&lines, i))
        })
        .collect()
}

/// Every git subcommand a shipped role grants (add, commit, diff, grep, log, ls-files,
/// show, status, switch) still does its work in the noexec view, with git's dynamically
/// loaded modules too: a commit message in ISO-8859-15 shown as UTF-8 needs iconv's gconv
/// module (ISO-8859-1 would be built into glibc), mapped from the library folder.
#[test]
fn every_git_subcommand_a_shipped_role_grants_works_in_the_noexec_view() {
    require_journald();
    let h = Host::new(&[("tess", "code"), ("sam", "code-scout")], "");
    for (uid, name) in [(h.uids[0], "ws-code"), (h.uids[1], "ws-scout")] {
        let ws = h.root.join(name);
        std::fs::create_dir_all(&ws).unwrap();
        git(&ws, &["init", "-q", "-b", "main"]);
        std::fs::write(ws.join("README"), "hello\n").unwrap();
        git(&ws, &["add", "README"]);
        git(&ws, &["commit", "-q", "-m", "first"]);
        std::fs::write(ws.join("README"), "hello\nworld\n").unwrap();
        std::fs::write(ws.join("msg"), b"caf\xe9 \xa4\n").unwrap();
        git(
            &ws,
            &[
                "-c",
                "i18n.commitEncoding=ISO-8859-15",
                "commit",
                "-q",
                "-a",
                "-F",
                "msg",
            ],
        );
        std::fs::remove_file(ws.join("msg")).unwrap();
        let mut config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
        config.push_str("[user]\n\tname = T\n\temail = t@example.invalid\n");
        std::fs::write(ws.join(".git/config"), config).unwrap();
        chown_tree(&ws, uid);
    }
    let code = [
        "git status",
        "git diff HEAD~1",
        "git log --oneline",
        "git log -1 --format=%s",
        "git show --stat HEAD",
        "git log -p -1",
        "git switch --create feature",
        "git add README",
        "git commit -q --allow-empty -m second",
        "git diff --cached",
        "git switch main",
        // switch's own -c (the argument guard reads -c as git's only before a subcommand).
        "git switch -c topic",
        "git switch main",
    ];
    let out = run_git(&h, "code", "tess", &h.root.join("ws-code"), &code);
    let scout = ["git grep -n world", "git ls-files", "git show HEAD:README"];
    let out2 = run_git(&h, "code-scout", "sam", &h.root.join("ws-scout"), &scout);
    let failed: Vec<String> = code
        .iter()
        .chain(&scout)
        .zip(out.iter().chain(&out2))
        .filter(|(_, (c, _))| *c != 0)
        .map(|(cmd, (c, o))| format!("{cmd}: exit {c}: {o}"))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert!(out[3].1.contains("café €"), "iconv: {:?}", out[3].1);
    assert!(out[1].1.contains("+world"), "{:?}", out[1].1);
    assert!(out2[0].1.contains("README:2:world"), "{:?}", out2[0].1);
}

/// The git subcommands the battery below is granted, beyond the code role's own.
const MORE_GIT: &[&str] = &[
    "git init",
    "git clone",
    "git fetch",
    "git ls-remote",
    "git merge",
    "git checkout",
    "git restore",
    "git stash",
    "git rebase",
    "git cherry-pick",
    "git gc",
    "git maintenance",
    "git worktree",
    "git tag",
    "git verify-commit",
    "git archive",
    "git notes",
    "git st",
    "git x",
    "git difftool",
    "git mergetool",
    "git submodule",
    "git help",
];

/// Issue 43's second attack on git, through the bash tool as the agent would: every key,
/// attribute, include, template, hook and alias by which git starts a program, pointed at
/// the run's own ELF (a copy of `id`) or `#!` script (which runs `id` and leaves a file),
/// in the repository's config, a file it includes, the persistent home's `~/.gitconfig`,
/// `~/.config/git/config` and `~/.config/git/attributes`, and a template directory; then
/// the subcommands that would start each (status -v, diff, add, commit, commit -v, log
/// --show-signature, switch, checkout, merge with a merge driver, stash, rebase, gc,
/// maintenance, worktree, signed tag, verify-commit, archive with a tar filter, notes,
/// fetch, ls-remote and clone over ext::, a remote helper and file://, init from the
/// template, aliases, difftool, mergetool, submodule, help through a man viewer), and
/// the options and environment that would set one (`-c`, `--config-env`, `--exec-path`,
/// `GIT_PAGER=`, the loader as a command). Nothing of the run's may run: no `uid=` in any
/// output, no file left by a script, no blob cleaned by a filter.
#[test]
fn no_git_path_of_the_second_attack_runs_a_program_of_the_runs() {
    require_journald();
    let h = Host::new(&[("tess", "code")], "");
    let prefixes: String = MORE_GIT.iter().map(|p| format!("    - {p}\n")).collect();
    h.local_role("code", |t| {
        t.replacen("  bash:\n", &format!("  bash:\n{prefixes}"), 1)
    });
    let ws = h.root.join("ws");
    let w = ws.display().to_string();
    std::fs::create_dir_all(ws.join("d/hooks")).unwrap();
    std::fs::create_dir_all(ws.join("tmpl/hooks")).unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("README"), "x\n").unwrap();
    std::fs::write(ws.join("file.x"), "base\n").unwrap();
    git(&ws, &["add", "README", "file.x"]);
    git(&ws, &["commit", "-q", "-m", "first"]);
    git(&ws, &["branch", "b"]);
    git(&ws, &["switch", "-q", "b"]);
    std::fs::write(ws.join("file.x"), "theirs\n").unwrap();
    git(&ws, &["commit", "-q", "-am", "theirs"]);
    git(&ws, &["switch", "-q", "main"]);
    std::fs::write(ws.join("file.x"), "ours\n").unwrap();
    git(&ws, &["commit", "-q", "-am", "ours"]);
    // Another repository for file:// and a clone.
    let other = ws.join("other");
    std::fs::create_dir_all(&other).unwrap();
    git(&other, &["init", "-q", "-b", "main"]);
    std::fs::write(other.join("o"), "o\n").unwrap();
    git(&other, &["add", "o"]);
    git(&other, &["commit", "-q", "-m", "o"]);
    // The run's programs: an ELF and a script, as hooks too, and a link to the system's
    // id named as git's help would name a page (for the loader as a man viewer's path).
    use std::os::unix::fs::PermissionsExt;
    let exe = |p: &std::path::Path| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap()
    };
    std::fs::copy("/usr/bin/id", ws.join("d/id-elf")).unwrap();
    let script = format!("#!/bin/sh\nid\ntouch {w}/RAN-$(basename $0)\ncat\n");
    std::fs::write(ws.join("d/id.sh"), &script).unwrap();
    exe(&ws.join("d/id.sh"));
    for hook in [
        "pre-commit",
        "prepare-commit-msg",
        "commit-msg",
        "post-commit",
        "post-checkout",
        "post-merge",
        "pre-rebase",
        "post-rewrite",
        "post-index-change",
        "reference-transaction",
        "pre-auto-gc",
        "pre-merge-commit",
        "fsmonitor-watchman",
        "push-to-checkout",
    ] {
        for dir in ["d/hooks", ".git/hooks", "tmpl/hooks"] {
            std::fs::write(ws.join(dir).join(hook), &script).unwrap();
            exe(&ws.join(dir).join(hook));
        }
        std::fs::copy(
            "/usr/bin/id",
            ws.join("d/hooks").join(format!("{hook}.elf")),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("/usr/bin/id", ws.join("git-status")).unwrap();
    std::fs::write(ws.join("new.x"), "new\n").unwrap();
    std::fs::write(
        ws.join(".gitattributes"),
        "*.x diff=x merge=m filter=f\n*.tar export-subst\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("inc"),
        format!("[diff \"x\"]\n\tcommand = {w}/d/id-elf\n[core]\n\tpager = {w}/d/id.sh\n"),
    )
    .unwrap();
    let keys = format!(
        "[user]\n\tname = T\n\temail = t@example.invalid\n\
         [core]\n\tfsmonitor = {w}/d/id-elf\n\thooksPath = {w}/d/hooks\n\tpager = {w}/d/id.sh\n\
         \teditor = {w}/d/id.sh\n\tsshCommand = {w}/d/id.sh\n\taskPass = {w}/d/id.sh\n\
         \talternateRefsCommand = {w}/d/id.sh\n\tgitProxy = {w}/d/id.sh\n\
         [sequence]\n\teditor = {w}/d/id.sh\n\
         [credential]\n\thelper = !{w}/d/id.sh\n\
         [credential \"https://github.com\"]\n\thelper = {w}/d/id-elf\n\
         [gpg]\n\tprogram = {w}/d/id-elf\n[gpg \"ssh\"]\n\tprogram = {w}/d/id-elf\n\
         [commit]\n\tgpgSign = true\n\tverbose = true\n[tag]\n\tgpgSign = true\n\
         [log]\n\tshowSignature = true\n\
         [alias]\n\tst = !id\n\tx = !{w}/d/id.sh\n\
         [pager]\n\tstatus = {w}/d/id.sh\n\tlog = {w}/d/id.sh\n\
         [uploadpack]\n\tpackObjectsHook = {w}/d/id.sh\n\
         [protocol]\n\tallow = always\n[protocol \"ext\"]\n\tallow = always\n\
         [remote \"evil\"]\n\turl = ext::{w}/d/id.sh\n\
         [remote \"helper\"]\n\turl = x\n\tvcs = id\n\
         [remote \"file\"]\n\turl = file://{w}/other\n\tuploadpack = {w}/d/id.sh\n\
         [include]\n\tpath = {w}/inc\n[includeIf \"gitdir:{w}/\"]\n\tpath = {w}/inc\n\
         [diff]\n\texternal = {w}/d/id-elf\n\ttool = t\n[difftool \"t\"]\n\tcmd = {w}/d/id.sh\n\
         [merge]\n\ttool = t\n[mergetool \"t\"]\n\tcmd = {w}/d/id.sh\n\
         [diff \"x\"]\n\ttextconv = {w}/d/id-elf\n\
         [filter \"f\"]\n\tclean = {w}/d/id.sh\n\tsmudge = {w}/d/id-elf\n\tprocess = {w}/d/id-elf\n\
         [merge \"m\"]\n\tname = m\n\tdriver = {w}/d/id-elf %O %A %B\n\
         [init]\n\ttemplateDir = {w}/tmpl\n\
         [gc]\n\tauto = 1\n\tautoDetach = false\n[maintenance]\n\tauto = true\n\
         [interactive]\n\tdiffFilter = {w}/d/id-elf\n\
         [tar \"evil\"]\n\tcommand = {w}/d/id-elf\n\
         [help]\n\tformat = man\n[man]\n\tviewer = v\n[man \"v\"]\n\tcmd = {w}/d/id.sh\n\
         [man \"man\"]\n\tpath = /lib64/ld-linux-x86-64.so.2\n\
         [submodule]\n\trecurse = true\n"
    );
    let mut config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    config.push_str(&keys);
    std::fs::write(ws.join(".git/config"), config).unwrap();
    chown_tree(&ws, h.uids[0]);
    // The persistent home's config and attributes, as the run would leave them.
    let home_steps = {
        let home = "/home/tess";
        let gc = keys
            .replace('\n', "\\n")
            .replace('\t', "\\t")
            .replace('"', "\\\"");
        format!(
            "fs.mkdirSync('{home}/.config/git', {{recursive: true}});\
             fs.writeFileSync('{home}/.gitconfig', \"{gc}\");\
             fs.writeFileSync('{home}/.config/git/config', \"{gc}\");\
             fs.writeFileSync('{home}/.config/git/attributes', '* diff=x merge=m filter=f\\n');\
             return 'planted';"
        )
    };
    let commands = [
        "git status -v",
        "git diff",
        "git diff --cached",
        "git add new.x file.x",
        "git commit -m staged",
        "git commit -v --allow-empty",
        "git log -p -2",
        "git show HEAD",
        "git switch -c c",
        "git switch main",
        "git checkout b -- file.x",
        "git restore --source=b file.x",
        "git merge b",
        "git merge --abort",
        "git stash",
        "git stash show -p",
        "git stash pop",
        "git rebase b",
        "git rebase --abort",
        "git cherry-pick b",
        "git cherry-pick --abort",
        "git gc",
        "git maintenance run",
        "git worktree add ../wt-x b",
        "git tag -s -m t t1",
        "git verify-commit HEAD",
        "git archive --format=evil HEAD",
        "git notes add -m n HEAD",
        "git fetch evil",
        "git fetch helper",
        "git fetch file",
        "git ls-remote evil",
        "git clone other cl",
        "git clone ext::sh cl2",
        "git init fresh",
        "git st",
        "git x",
        "git difftool HEAD~1",
        "git mergetool",
        "git submodule status",
        "git help status",
        "git status --help",
        "git -c core.pager=d/id.sh status",
        "git --config-env=core.pager=HOME status",
        "git --exec-path=d status",
        "GIT_PAGER=d/id.sh git status",
        "env GIT_PAGER=d/id.sh git status",
        "/lib64/ld-linux-x86-64.so.2 d/id-elf",
        "git status",
    ];
    let mut steps = vec![json!({"js": home_steps})];
    steps.extend(
        commands
            .iter()
            .map(|c| json!({"call": "bash", "args": {"command": c}})),
    );
    // The tool takes no environment of the caller's: an `env` argument is refused.
    steps.push(json!({"call": "bash", "args": {"command": "git status", "env": {"GIT_PAGER": format!("{w}/d/id.sh"), "GIT_EXEC_PATH": format!("{w}/d")}}}));
    let argv = mcp_agent(&Value::Array(steps));
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
    assert_eq!(step(&lines, 0)["value"], "planted", "{lines:#?}");
    let mut ran = Vec::new();
    let mut report = String::new();
    for (i, c) in commands.iter().enumerate() {
        let s = step(&lines, i + 1);
        let text = printed(&lines, i + 1);
        let said = if text.is_empty() {
            s.to_string()
        } else {
            text.clone()
        };
        let code = s["structured"]["exit_code"].as_i64().unwrap_or(-1);
        report.push_str(&format!(
            "{c} => {code} {}\n",
            said.chars()
                .take(300)
                .collect::<String>()
                .replace('\n', " | ")
        ));
        if said.contains("uid=") {
            ran.push(c.to_string());
        }
    }
    eprintln!("{report}");
    let left: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("RAN-"))
        .collect();
    assert!(
        ran.is_empty() && left.is_empty(),
        "a program of the run's ran through git: {ran:?}, files left: {left:?}\n{report}"
    );
    // No blob was cleaned by the filter (its output would be id's).
    let blob = std::process::Command::new("git")
        .args(["cat-file", "-p", ":new.x"])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(!stdout(&blob).contains("uid="), "{}", stdout(&blob));
    // git still did its work: the last plain status answered.
    let last = step(&lines, commands.len());
    assert_eq!(last["structured"]["exit_code"], 0, "{last}\n{report}");
    let env = step(&lines, commands.len() + 1);
    assert_eq!(env["isError"], true, "{env}");
    assert!(env.to_string().contains("arguments.env: unknown"), "{env}");
}
