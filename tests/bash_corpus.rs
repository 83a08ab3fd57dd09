//! Adversarial corpus for the bash decision: each command string with its expected verdict
//! against one fixed prefix list. Quoting is decided on the dequoted argv: `'git' log` is
//! `git log` (allowed); `"git log"` is one word (denied).

use airlock::policy::bash::{ArgGuards, BashPolicy};

const PREFIXES: &[&str] = &[
    "git log",
    "git status",
    "git diff",
    "cargo test",
    "cargo build",
    "ls",
    "cat",
    "rg",
    "gh pr view",
];

const A: bool = true;
const D: bool = false;

/// (command, allowed?, expected rule prefix or "" for any).
const CORPUS: &[(&str, bool, &str)] = &[
    // Plain allowed commands.
    ("git log", A, "run.bash[0]"),
    ("git log --oneline", A, "run.bash[0]"),
    ("git log --oneline -n 20", A, "run.bash[0]"),
    ("git log -p -- src/main.rs", A, "run.bash[0]"),
    ("git log --format=%h:%an", A, "run.bash[0]"),
    ("git status", A, "run.bash[1]"),
    ("git status -sb", A, "run.bash[1]"),
    ("git status -uno", A, "run.bash[1]"),
    ("git diff HEAD~1", A, "run.bash[2]"),
    ("git diff HEAD~1..HEAD", A, "run.bash[2]"),
    ("git diff HEAD^", A, "run.bash[2]"),
    ("git log --format=%h~%s", A, "run.bash[0]"),
    ("git log @{u}..", A, "run.bash[0]"),
    ("git log --grep=a#b", A, "run.bash[0]"),
    ("git log --format={%h}", A, "run.bash[0]"),
    ("cargo test -- --nocapture", A, "run.bash[3]"),
    ("git diff main..feature", A, "run.bash[2]"),
    ("git diff --stat", A, "run.bash[2]"),
    ("git diff --no-ext-diff", A, "run.bash[2]"),
    ("cargo test", A, "run.bash[3]"),
    ("cargo test --release", A, "run.bash[3]"),
    ("cargo test -p airlock -- --nocapture", A, "run.bash[3]"),
    ("cargo build --all-targets", A, "run.bash[4]"),
    ("ls", A, "run.bash[5]"),
    ("ls -la src", A, "run.bash[5]"),
    ("ls\t-la", A, "run.bash[5]"),
    ("   ls   -l   ", A, "run.bash[5]"),
    ("cat Cargo.toml", A, "run.bash[6]"),
    ("cat 'file with spaces.txt'", A, "run.bash[6]"),
    ("cat \"file with spaces.txt\"", A, "run.bash[6]"),
    ("rg -n 'fn main' src", A, "run.bash[7]"),
    ("rg 'a|b;c&d>e$f`g'", A, "run.bash[7]"),
    ("rg \"plain text\" src", A, "run.bash[7]"),
    ("rg 'naïve café'", A, "run.bash[7]"),
    ("gh pr view 42", A, "run.bash[8]"),
    ("gh pr view 42 --comments", A, "run.bash[8]"),
    // Quoting decided on the dequoted argv.
    ("'git' log", A, "run.bash[0]"),
    ("\"git\" log", A, "run.bash[0]"),
    ("g'i't l\"o\"g", A, "run.bash[0]"),
    ("\"git log\"", D, "program: not a bare name"),
    ("git' 'log", D, "program: not a bare name"),
    ("'git log' --oneline", D, "program: not a bare name"),
    ("git 'log '", D, "default: no prefix matches"),
    ("'' git log", D, "program: not a bare name"),
    // Prefix boundaries.
    ("git", D, "default: no prefix matches"),
    ("git logs", D, "default: no prefix matches"),
    ("git push origin main", D, "default: no prefix matches"),
    ("git reset --hard", D, "default: no prefix matches"),
    ("gh pr", D, "default: no prefix matches"),
    ("gh pr merge 42", D, "default: no prefix matches"),
    ("cargo publish", D, "default: no prefix matches"),
    ("cargo", D, "default: no prefix matches"),
    ("rm -rf /", D, "default: no prefix matches"),
    ("curl https://example.com", D, "default: no prefix matches"),
    ("GIT log", D, "default: no prefix matches"),
    // Operators and redirection.
    ("git log; rm -rf /", D, "lexer: command separator"),
    ("git log;rm -rf /", D, "lexer: command separator"),
    ("git log && rm -rf /", D, "lexer: control operator"),
    ("git log || id", D, "lexer: pipe"),
    ("git log & id", D, "lexer: control operator"),
    ("git log | sh", D, "lexer: pipe"),
    ("git log > /etc/passwd", D, "lexer: redirection"),
    ("git log >> out", D, "lexer: redirection"),
    ("cat < /etc/shadow", D, "lexer: redirection"),
    ("cat <<EOF", D, "lexer: redirection"),
    ("cat <(id)", D, "lexer: redirection"),
    ("git log 2>&1", D, "lexer: redirection"),
    ("(git log)", D, "lexer: subshell or grouping"),
    ("{ git log; }", D, "lexer: brace expansion"),
    // Newlines, CRs, NUL, controls.
    ("git log\nrm -rf /", D, "lexer: newline"),
    ("git log\r\nid", D, "lexer: newline"),
    ("git log\rid", D, "lexer: newline"),
    ("git log\0id", D, "lexer: control character"),
    ("git log \u{1b}[2J", D, "lexer: control character"),
    ("cat 'a\nb'", D, "lexer: newline"),
    ("cat 'a\u{7f}'", D, "lexer: control character"),
    // Substitution and expansion.
    ("git log $(id)", D, "lexer: command substitution"),
    ("git log `id`", D, "lexer: command substitution"),
    ("git log \"$(id)\"", D, "lexer: command substitution"),
    ("git log \"`id`\"", D, "lexer: command substitution"),
    ("git log $HOME", D, "lexer: parameter expansion"),
    ("git log ${HOME}", D, "lexer: parameter expansion"),
    ("git log \"$HOME\"", D, "lexer: parameter expansion"),
    ("git log $'\\x41'", D, "lexer: parameter expansion"),
    ("ls *", D, "lexer: glob"),
    ("ls src/*.rs", D, "lexer: glob"),
    ("ls ?", D, "lexer: glob"),
    ("ls [a-z]", D, "lexer: glob"),
    ("ls {a,b}", D, "lexer: brace expansion"),
    ("ls ~", D, "lexer: tilde"),
    ("ls ~root", D, "lexer: tilde"),
    ("cat a~b", A, "run.bash[6]"),
    ("cat --x=~", A, "run.bash[6]"),
    ("cat x=~/.ssh/id_rsa", D, "lexer: tilde"),
    ("cat X=a:~/.ssh", D, "lexer: tilde"),
    ("cat x{a,b}y", D, "lexer: brace expansion"),
    ("cat {1..3}", D, "lexer: brace expansion"),
    ("{cat,/etc/shadow}", D, "lexer: brace expansion"),
    ("^git^rm", D, "lexer: history expansion"),
    ("cat #x", D, "lexer: comment"),
    ("git log !!", D, "lexer: history expansion"),
    ("git log \"!-1\"", D, "lexer: history expansion"),
    ("git log # comment", D, "lexer: comment"),
    ("git log \\; id", D, "lexer: backslash"),
    ("git\\ log", D, "lexer: backslash"),
    ("cat \"a\\\"b\"", D, "lexer: backslash"),
    ("git log 'unterminated", D, "lexer: unterminated quote"),
    ("git log \"unterminated", D, "lexer: unterminated quote"),
    ("", D, "lexer: empty command"),
    ("   \t ", D, "lexer: empty command"),
    // Environment prefixes.
    ("FOO=bar git log", D, "lexer: environment assignment"),
    ("GIT_DIR=/etc git log", D, "lexer: environment assignment"),
    ("PAGER=sh git log", D, "lexer: environment assignment"),
    (
        "'LD_PRELOAD=/x.so' git log",
        D,
        "lexer: environment assignment",
    ),
    ("git=1 log", D, "lexer: environment assignment"),
    // Wrappers: no prefix can allow them.
    ("env git log", D, "guard: wrapper env"),
    ("env -i git log", D, "guard: wrapper env"),
    ("timeout 5 git log", D, "guard: wrapper timeout"),
    ("command git log", D, "guard: wrapper command"),
    ("exec git log", D, "guard: wrapper exec"),
    ("nice git log", D, "guard: wrapper nice"),
    ("nohup git log", D, "guard: wrapper nohup"),
    ("sudo git log", D, "guard: wrapper sudo"),
    ("su -c 'git log'", D, "guard: wrapper su"),
    ("bash -c 'git log'", D, "guard: wrapper bash"),
    ("sh -c 'git log; id'", D, "guard: wrapper sh"),
    ("xargs git log", D, "guard: wrapper xargs"),
    ("busybox sh", D, "guard: wrapper busybox"),
    ("eval 'git log'", D, "guard: wrapper eval"),
    ("time git log", D, "guard: wrapper time"),
    (". ./script", D, "program: not a bare name"),
    ("strace git log", D, "guard: wrapper strace"),
    // Unicode lookalikes and invisible characters.
    ("g\u{0456}t log", D, "lexer: non-ASCII outside quotes"),
    ("'g\u{0456}t' log", D, "program: not a bare name"),
    ("git l\u{043e}g", D, "lexer: non-ASCII outside quotes"),
    ("git\u{200B} log", D, "lexer: invisible or format character"),
    ("git log\u{200B}", D, "lexer: invisible or format character"),
    ("\u{FEFF}git log", D, "lexer: invisible or format character"),
    (
        "git log '\u{202E}gol'",
        D,
        "lexer: invisible or format character",
    ),
    (
        "git log \u{2066}x",
        D,
        "lexer: invisible or format character",
    ),
    ("git\u{00A0}log", D, "lexer: invisible or format character"),
    ("git\u{3000}log", D, "lexer: invisible or format character"),
    (
        "git log '\u{00AD}'",
        D,
        "lexer: invisible or format character",
    ),
    (
        "git log '\u{E0041}'",
        D,
        "lexer: invisible or format character",
    ),
    ("git log '\u{FF1B} id'", D, "lexer: lookalike character"),
    ("git log\u{FF1B}id", D, "lexer: lookalike character"),
    // Global options before a subcommand (and the same options anywhere).
    ("git -c core.pager=sh log", D, "guard: git -c"),
    ("git -c alias.log=!sh log", D, "lexer: history expansion"),
    ("git -c 'alias.x=!sh' log", D, "guard: git -c"),
    ("git --git-dir=/etc log", D, "guard: git --git-dir"),
    ("git --git-dir /etc log", D, "guard: git --git-dir"),
    ("git --work-tree=/ status", D, "guard: git --work-tree"),
    ("git -C /etc log", D, "guard: git -C"),
    ("git -C/etc log", D, "guard: git -C"),
    ("git --exec-path=/tmp log", D, "guard: git --exec-path"),
    ("git --exec-pa=/tmp log", D, "guard: git --exec-path"),
    (
        "git --config-env=core.pager=X log",
        D,
        "guard: git --config-env",
    ),
    ("git --namespace=x log", D, "guard: git --namespace"),
    ("git log --output=/etc/passwd", D, "guard: git --output"),
    ("git diff --output /tmp/x", D, "guard: git --output"),
    ("git diff --ext-diff", D, "guard: git --ext-diff"),
    ("git diff --textconv", D, "guard: git --textconv"),
    ("git '-c' core.pager=x log", D, "guard: git -c"),
    // After the subcommand, log's own -c (combined diff), never git's config.
    ("git log '-c'", A, "run.bash[0]"),
    ("git log \"--git-dir=/x\"", D, "guard: git --git-dir"),
    // Path programs.
    ("/usr/bin/git log", D, "program: not a bare name"),
    ("./git log", D, "program: not a bare name"),
    ("../bin/git log", D, "program: not a bare name"),
    ("bin/ls", D, "program: not a bare name"),
    ("'/bin/ls'", D, "program: not a bare name"),
    ("-git log", D, "program: not a bare name"),
    // Cargo toolchains and config.
    ("cargo +nightly test", D, "guard: cargo +"),
    ("cargo test +nightly", D, "guard: cargo +"),
    (
        "cargo --config build.rustc=/tmp/x test",
        D,
        "guard: cargo --config",
    ),
    ("cargo test --config=x", D, "guard: cargo --config"),
    (
        "cargo test --manifest-path /etc/Cargo.toml",
        D,
        "guard: cargo --manifest-path",
    ),
    ("cargo test -Zbuild-std", D, "guard: cargo -Z"),
    ("cargo -Z unstable-options test", D, "guard: cargo -Z"),
    (
        "cargo build --target-dir /tmp/x",
        D,
        "guard: cargo --target-dir",
    ),
    ("cargo -C /etc build", D, "guard: cargo -C"),
    // Other tools' guards (rg is allowed by prefix).
    ("rg --pre sh x", D, "guard: rg --pre"),
    ("rg --pre=./x.sh pattern", D, "guard: rg --pre"),
    // ripgrep runs --hostname-bin's program on every search, hyperlinks asked for or not.
    ("rg --hostname-bin=make x", D, "guard: rg --hostname-bin"),
    (
        "rg --hostname-bin ./scripts/build.sh x",
        D,
        "guard: rg --hostname-bin",
    ),
    ("rg --hostname x", D, "guard: rg --hostname-bin"),
    ("gh pr view 3 --web", D, "guard: gh --web"),
    ("gh pr view -w 3", D, "guard: gh -w"),
    ("rg -z pattern", D, "guard: rg -z"),
    ("rg -iz pattern", D, "guard: rg -z"),
];

/// Each construct is refused only where bash would expand it or treat it as syntax;
/// elsewhere it is a literal character and the word passes with it.
#[test]
fn lexer_refuses_by_position_as_bash_does() {
    use airlock::policy::bash::{lex, LexError};
    let ok = |s: &[&str]| Ok(s.iter().map(|w| w.to_string()).collect::<Vec<_>>());
    let cases: &[(&str, Result<Vec<String>, LexError>)] = &[
        // Tilde: only at a word's start or after `=`/`:` in an assignment-shaped word.
        ("git diff HEAD~1", ok(&["git", "diff", "HEAD~1"])),
        (
            "git log --format=%h~%s",
            ok(&["git", "log", "--format=%h~%s"]),
        ),
        ("ls a~b", ok(&["ls", "a~b"])),
        ("ls --dir=~", ok(&["ls", "--dir=~"])),
        ("ls a:~", ok(&["ls", "a:~"])),
        ("ls ''~", ok(&["ls", "~"])),
        ("ls ~", Err(LexError::Tilde)),
        ("ls ~/x", Err(LexError::Tilde)),
        ("ls x=~", Err(LexError::Tilde)),
        ("ls x=a:~/b", Err(LexError::Tilde)),
        ("ls _X1=~", Err(LexError::Tilde)),
        // Comment: only where a word starts.
        ("ls a#b", ok(&["ls", "a#b"])),
        ("ls ''#b", ok(&["ls", "#b"])),
        ("ls #b", Err(LexError::Comment)),
        ("ls a #b", Err(LexError::Comment)),
        // Quick substitution: only the command's first character.
        ("git diff HEAD^", ok(&["git", "diff", "HEAD^"])),
        ("git log ^main", ok(&["git", "log", "^main"])),
        ("^a^b", Err(LexError::History)),
        // History expansion stays refused outside single quotes (an agent may expect it).
        ("ls !!", Err(LexError::History)),
        ("ls 'a!'", ok(&["ls", "a!"])),
        // Braces: reserved words in the command position, expansion needs `,` or `..`.
        ("git log @{u}", ok(&["git", "log", "@{u}"])),
        ("git show HEAD@{1}", ok(&["git", "show", "HEAD@{1}"])),
        ("ls {}", ok(&["ls", "{}"])),
        ("ls {a}", ok(&["ls", "{a}"])),
        ("ls a} {b", ok(&["ls", "a}", "{b"])),
        ("ls a,b", ok(&["ls", "a,b"])),
        ("ls '{a,b}'", ok(&["ls", "{a,b}"])),
        ("ls {a',b'}", ok(&["ls", "{a,b}"])),
        ("ls {1'..'3}", ok(&["ls", "{1..3}"])),
        ("ls {a,b}", Err(LexError::Brace)),
        ("ls x{a,b}y", Err(LexError::Brace)),
        ("ls {1..3}", Err(LexError::Brace)),
        ("ls {a,{b}}", Err(LexError::Brace)),
        ("ls {'a',b}", Err(LexError::Brace)),
        ("{ls,id}", Err(LexError::Brace)),
        ("{ ls; }", Err(LexError::Brace)),
        ("} ls", Err(LexError::Brace)),
        // A lone `]` is literal; globs stay refused.
        ("ls a]", ok(&["ls", "a]"])),
        ("ls [a]", Err(LexError::Glob)),
        // Common git and cargo arguments.
        (
            "cargo test -- --nocapture",
            ok(&["cargo", "test", "--", "--nocapture"]),
        ),
        ("git diff main...HEAD", ok(&["git", "diff", "main...HEAD"])),
    ];
    let mut failures = Vec::new();
    for (cmd, want) in cases {
        let got = lex(cmd);
        if &got != want {
            failures.push(format!("{cmd:?}: want {want:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn policy() -> BashPolicy {
    let prefixes: Vec<String> = PREFIXES.iter().map(|s| s.to_string()).collect();
    BashPolicy::compile(&prefixes, &ArgGuards::builtin())
}

#[test]
fn corpus_is_large_enough() {
    assert!(CORPUS.len() >= 80, "corpus has {} entries", CORPUS.len());
    let denied = CORPUS.iter().filter(|c| !c.1).count();
    let allowed = CORPUS.len() - denied;
    assert!(
        allowed >= 25 && denied >= 80,
        "allowed {allowed}, denied {denied}"
    );
}

#[test]
fn corpus_verdicts_and_rules() {
    let p = policy();
    let mut failures = Vec::new();
    for (cmd, allow, rule) in CORPUS {
        let d = p.decide(cmd);
        if d.allow != *allow || (!rule.is_empty() && d.rule != *rule) {
            failures.push(format!(
                "{cmd:?}: want allow={allow} rule={rule:?}, got allow={} rule={:?}",
                d.allow, d.rule
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn quoting_is_consistent() {
    let p = policy();
    // Any quoting of the same argv decides the same way.
    let same = [
        "git log -n 3",
        "'git' 'log' '-n' '3'",
        "\"git\" \"log\" -n 3",
        "gi't' lo\"g\" -n 3",
    ];
    let first = p.decide(same[0]);
    for cmd in same {
        assert_eq!(p.decide(cmd), first, "{cmd:?}");
    }
}

#[test]
fn prefixes_that_cannot_match_match_nothing() {
    let prefixes: Vec<String> = [
        "",
        "   ",
        "git log; id",
        "/usr/bin/git log",
        "FOO=1 ls",
        "sudo ls",
        "git -c core.pager=sh log",
        "git log",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let p = BashPolicy::compile(&prefixes, &ArgGuards::builtin());
    assert_eq!(p.invalid_prefixes(), &[0, 1, 2, 3, 4, 5, 6]);
    for cmd in ["ls", "sudo ls", "git", "git -c core.pager=sh log"] {
        assert!(!p.decide(cmd).allow, "{cmd}");
    }
    assert_eq!(p.decide("git log").rule, "run.bash[7]");
}

#[test]
fn guards_hold_even_for_broad_prefixes() {
    let prefixes: Vec<String> = ["git", "cargo", "find", "tar", "sed"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let p = BashPolicy::compile(&prefixes, &ArgGuards::builtin());
    for (cmd, rule) in [
        ("git fetch -u x origin", "guard: git -u"),
        ("git clone --upload-pack=x repo", "guard: git --upload-pack"),
        ("git push --receive-pack=x", "guard: git --receive-pack"),
        ("git format-patch -o /tmp HEAD~1", "guard: git -o"),
        ("git format-patch -o /tmp HEAD", "guard: git -o"),
        ("git rebase --exec id main", "guard: git --exec"),
        ("git clone --template=/x r", "guard: git --template"),
        ("find . -exec id", "guard: find -exec"),
        ("find . -execdir id", "guard: find -execdir"),
        ("find . -delete", "guard: find -delete"),
        ("find . -fprintf /x y", "guard: find -fprintf"),
        ("tar --to-command=id -xf a.tar", "guard: tar --to-command"),
        (
            "tar --checkpoint-action=exec=id -xf a",
            "guard: tar --checkpoint-action",
        ),
        ("tar xIf id a.tar", "guard: tar -I"),
        ("tar -I id -xf a.tar", "guard: tar -I"),
        ("sed -i s/a/b/ f", "guard: sed -i"),
        ("sed -ni p f", "guard: sed -i"),
        ("sed --in-place s/a/b/ f", "guard: sed --in-place"),
    ] {
        let d = p.decide(cmd);
        assert!(!d.allow, "{cmd}");
        assert_eq!(d.rule, rule, "{cmd}");
    }
    for cmd in [
        "git status -uno",
        "git log -n 3",
        "find . -name x",
        "tar tvf a.tar",
        "sed -n p f",
    ] {
        assert!(p.decide(cmd).allow, "{cmd}");
    }
}

#[test]
fn operator_guards_extend_builtins() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/policies/bash-guards.yaml"
    ))
    .unwrap();
    let shipped =
        ArgGuards::from_yaml(std::path::Path::new("policies/bash-guards.yaml"), &text).unwrap();
    let extended = ArgGuards::from_yaml(
        std::path::Path::new("x.yaml"),
        "version: 1\nwrappers: [myexec]\nguards:\n  - program: git\n    words: [filter-branch]\n",
    )
    .unwrap();
    let prefixes: Vec<String> = ["git", "myexec"].iter().map(|s| s.to_string()).collect();
    for g in [&shipped, &extended] {
        let p = BashPolicy::compile(&prefixes, g);
        assert_eq!(p.decide("git -c x log").rule, "guard: git -c");
        assert!(p.decide("git log").allow);
    }
    let p = BashPolicy::compile(&prefixes, &extended);
    assert_eq!(
        p.decide("git filter-branch x").rule,
        "guard: git filter-branch"
    );
    assert_eq!(p.decide("myexec ls").rule, "guard: wrapper myexec");
}

#[test]
fn inline_code_flags_of_interpreters() {
    let prefixes: Vec<String> = ["python3", "perl", "node"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let p = BashPolicy::compile(&prefixes, &ArgGuards::builtin());
    for (cmd, rule) in [
        ("python3 -c 'import os'", "guard: python3 -c"),
        ("python3 -Ic 'x'", "guard: python3 -c"),
        ("perl -e 'system 1'", "guard: perl -e"),
        ("node --eval=x", "guard: node --eval"),
        ("node -p x", "guard: node -p"),
    ] {
        assert_eq!(p.decide(cmd).rule, rule, "{cmd}");
    }
    assert!(p.decide("python3 -m pytest -q").allow);
}

mod common;

/// The gateway decides exactly as `airlockctl check` does: a role whose `run.bash` is this
/// corpus's prefix list, every corpus command checked with the CLI and sent to a real run's
/// bash tool, and the two verdicts and rules (the gateway's from its journal) compared.
#[test]
fn airlockctl_check_and_the_gateway_agree_on_the_whole_corpus() {
    use serde_json::{json, Value};
    common::require_journald();
    let h = common::Host::new(&[("tess", "code")], "");
    let list: String = PREFIXES.iter().map(|p| format!("    - {p}\n")).collect();
    h.local_role("code", |t| {
        let start = t.find("  bash:\n").unwrap();
        let end = start + t[start..].find("  mcp:\n").unwrap();
        format!("{}  bash:\n{list}{}", &t[..start], &t[end..])
    });
    let layer = h.root.join("roles.local");
    // The policy core as `check` loads it, for the commands no argv can carry (a NUL).
    let policies =
        airlock::policy::Policies::load(&std::path::Path::new(common::REPO).join("policies"))
            .unwrap();
    let role = airlock::role::load_role_dir(&layer.join("code"))
        .unwrap()
        .role;
    let core = airlock::policy::RolePolicy::compile(&role, &policies);
    let check = |cmd: &str| -> (bool, String) {
        if cmd.contains('\0') {
            let d = core.bash(cmd);
            return (d.allow, d.rule);
        }
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_airlockctl"))
            .args(["--config"])
            .arg(&h.cfg)
            .args([
                "check",
                "code",
                "--roles",
                &format!("{}/roles", common::REPO),
            ])
            .arg("--roles")
            .arg(&layer)
            .args(["--json", "bash", "--", cmd])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|_| panic!("{cmd:?}: {}", String::from_utf8_lossy(&o.stderr)));
        (v["allow"] == true, v["rule"].as_str().unwrap().to_string())
    };
    let steps: Vec<Value> = CORPUS
        .iter()
        .map(|(cmd, _, _)| json!({"call": "bash", "args": {"command": cmd, "timeout_ms": 5000}}))
        .collect();
    let argv = common::mcp_agent(&json!(steps));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let o = h.launch("code", "tess", &[], &argv).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let run = common::run_id_of(&o);
    let calls = common::events(&run, "tool_call", CORPUS.len());
    assert_eq!(calls.len(), CORPUS.len());
    let mut disagree = Vec::new();
    for ((cmd, _, _), call) in CORPUS.iter().zip(&calls) {
        let (allow, rule) = check(cmd);
        let g_allow = call["AIRLOCK_DECISION"] == "allow";
        let g_rule = call["AIRLOCK_RULE"].as_str().unwrap_or_default();
        if allow != g_allow || rule != g_rule {
            disagree.push(format!(
                "{cmd:?}: check {allow} {rule}, gateway {g_allow} {g_rule}"
            ));
        }
    }
    assert!(disagree.is_empty(), "{}", disagree.join("\n"));
}
