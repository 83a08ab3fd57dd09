//! Argument guards: options that make an allowed program run other code, read or write
//! outside the workspace, or switch toolchains. A guard denies even when a role prefix
//! allows the command. Built-in guards can be extended by `policies/bash-guards.yaml`,
//! never reduced.
//!
//! Matching, on the dequoted argv (words after the program):
//! - `options`: a word equal to the option or starting with `option=`. Options spelled with
//!   `--` also match any abbreviation (`--exec-pa` for `--exec-path`), because GNU
//!   getopt_long and git's parser accept unambiguous abbreviations.
//! - `short`: letters denied anywhere in a short cluster (`-xvC/etc` holds `C`). Deliberately
//!   coarse: an option value glued to a cluster may trip it, which fails closed.
//! - `word_prefixes`: any word starting with the text (`+` for `cargo +nightly`).
//! - `words`: any word equal to the text (`gh extension`).
//! - `subcommands`: when present, the guard applies only if the first word after the
//!   program that does not start with `-` or `+` is one of them.
//! - `old_style_first_arg`: the first argument is also read as a short cluster even without
//!   a leading `-` (`tar xIf`).
//! - `short_free_after` (built-in only): subcommands after which `short` is no longer read,
//!   because there the letters are the subcommand's own (`git switch -c`).
//!
//! Wrappers are programs that run another command (`env`, `sudo`, `xargs`, shells); no
//! prefix can allow them as the program word.

use crate::diag::{index, key, Problem};
use serde_yaml::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// One guard over one program.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Guard {
    pub subcommands: Vec<String>,
    pub options: Vec<String>,
    pub short: Vec<char>,
    pub word_prefixes: Vec<String>,
    pub words: Vec<String>,
    pub old_style_first_arg: bool,
    /// Subcommands after which `short` is not read (their own options of those letters
    /// mean something else: `git switch -c` creates a branch, `git -c` sets config).
    pub short_free_after: Vec<String>,
}

/// The guard list: wrapper programs and per-program guards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArgGuards {
    wrappers: BTreeSet<String>,
    guards: HashMap<String, Vec<Guard>>,
}

/// Which guard fired: the program and the guard's own spelling (never the agent's word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardHit {
    pub program: String,
    /// `-c`, `--git-dir`, `+`, or `wrapper`.
    pub what: String,
}

/// Programs that run another command, open a shell, or change who or where it runs.
const WRAPPERS: &[&str] = &[
    "env",
    "timeout",
    "nice",
    "nohup",
    "command",
    "exec",
    "eval",
    "source",
    ".",
    "builtin",
    "time",
    "coproc",
    "sudo",
    "su",
    "doas",
    "pkexec",
    "runuser",
    "setpriv",
    "capsh",
    "chroot",
    "unshare",
    "nsenter",
    "setsid",
    "stdbuf",
    "ionice",
    "taskset",
    "chrt",
    "flock",
    "watch",
    "script",
    "xargs",
    "parallel",
    "busybox",
    "toybox",
    "bash",
    "sh",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "fish",
    "csh",
    "tcsh",
    "rbash",
    "strace",
    "ltrace",
    "gdb",
    "valgrind",
    "firejail",
    "systemd-run",
    "at",
    "batch",
    "fakeroot",
    "proot",
    "expect",
    "ssh-agent",
    "dbus-run-session",
];

struct BuiltinGuard {
    program: &'static str,
    subcommands: &'static [&'static str],
    options: &'static [&'static str],
    short: &'static str,
    word_prefixes: &'static [&'static str],
    words: &'static [&'static str],
    old_style_first_arg: bool,
    short_free_after: &'static [&'static str],
}

const NONE: &[&str] = &[];

const BUILTIN: &[BuiltinGuard] = &[
    BuiltinGuard {
        program: "git",
        subcommands: NONE,
        options: &[
            "--exec-path",
            "--git-dir",
            "--work-tree",
            "--namespace",
            "--config-env",
            "--super-prefix",
            "--output",
            "--output-directory",
            "--ext-diff",
            "--textconv",
            "--upload-pack",
            "--receive-pack",
            "--exec",
            "--template",
            "--config",
            "--open-files-in-pager",
            "--separate-git-dir",
            "--reference",
            "--server-option",
            "--upload-archive",
            "--remote",
            // Take their value as the next word: refused (as are -c, -C and the ones
            // above), so the first word that is no option is always the subcommand, which
            // short_free_after relies on.
            "--attr-source",
            "--shallow-file",
        ],
        // `-c` and `-C` before the subcommand are git's own (config, directory). After
        // these subcommands they are theirs: create a branch, reuse a commit's message
        // (its editor, like any program a run names, cannot run in the noexec view), find
        // copies, context lines.
        short: "cC",
        word_prefixes: &["!"],
        words: NONE,
        old_style_first_arg: false,
        short_free_after: &[
            "switch", "commit", "diff", "log", "show", "blame", "apply", "am",
        ],
    },
    // `git grep -O` opens the matching files in a pager program.
    BuiltinGuard {
        program: "git",
        subcommands: &["grep"],
        options: NONE,
        short: "O",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    // Short options that only mean "run a program" or "write elsewhere" in some subcommands.
    BuiltinGuard {
        program: "git",
        subcommands: &[
            "fetch",
            "clone",
            "pull",
            "ls-remote",
            "archive",
            "submodule",
            "push",
        ],
        options: NONE,
        short: "u",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "git",
        subcommands: &[
            "format-patch",
            "bundle",
            "rebase",
            "bisect",
            "difftool",
            "mergetool",
        ],
        options: &["--tool", "--extcmd", "--run"],
        short: "ox",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "cargo",
        subcommands: NONE,
        options: &[
            "--config",
            "--manifest-path",
            "--target-dir",
            "--out-dir",
            "--artifact-dir",
            "--lockfile-path",
            "--root",
            "--index",
            "--registry",
            "--git",
            "--path",
        ],
        short: "CZ",
        word_prefixes: &["+"],
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "rustup",
        subcommands: NONE,
        options: NONE,
        short: "",
        word_prefixes: &["+"],
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "find",
        subcommands: NONE,
        options: &[
            "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf",
            "-fls",
        ],
        short: "",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "rg",
        subcommands: NONE,
        // `--pre` and `--search-zip` run a program per file; ripgrep runs
        // `--hostname-bin`'s program on every search (for hyperlinks, asked or not).
        options: &["--pre", "--pre-glob", "--search-zip", "--hostname-bin"],
        short: "z",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "sed",
        subcommands: NONE,
        options: &["--in-place"],
        short: "i",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "tar",
        subcommands: NONE,
        options: &[
            "--to-command",
            "--checkpoint-action",
            "--use-compress-program",
            "--info-script",
            "--new-volume-script",
            "--rsh-command",
            "--rmt-command",
            "--directory",
        ],
        short: "IFC",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: true,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "sort",
        subcommands: NONE,
        options: &["--compress-program", "--output"],
        short: "o",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "make",
        subcommands: NONE,
        options: &["--directory", "--eval", "--file", "--makefile"],
        short: "CEf",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "go",
        subcommands: NONE,
        options: &[
            "-exec",
            "--exec",
            "-toolexec",
            "--toolexec",
            "-overlay",
            "--overlay",
            "-modfile",
            "--modfile",
        ],
        short: "",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "rsync",
        subcommands: NONE,
        options: &["--rsh", "--rsync-path"],
        short: "e",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "ssh",
        subcommands: NONE,
        options: NONE,
        short: "oFS",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "scp",
        subcommands: NONE,
        options: NONE,
        short: "oFS",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "curl",
        subcommands: NONE,
        options: &[
            "--output",
            "--output-dir",
            "--remote-name",
            "--remote-name-all",
            "--config",
            "--dump-header",
            "--trace",
            "--trace-ascii",
            "--stderr",
            "--libcurl",
            "--cookie-jar",
            "--upload-file",
        ],
        short: "oOKDcT",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "wget",
        subcommands: NONE,
        options: &[
            "--output-document",
            "--output-file",
            "--append-output",
            "--directory-prefix",
            "--execute",
            "--input-file",
            "--config",
            "--use-askpass",
        ],
        short: "OoaPei",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "man",
        subcommands: NONE,
        options: &["--pager", "--html", "--preprocessor", "--config-file"],
        short: "PHpC",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "less",
        subcommands: NONE,
        options: &["--log-file", "--LOG-FILE"],
        short: "oO",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "zip",
        subcommands: NONE,
        options: &["--unzip-command", "--test"],
        short: "T",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "npm",
        subcommands: NONE,
        options: &[
            "--prefix",
            "--script-shell",
            "--userconfig",
            "--globalconfig",
            "--global",
        ],
        short: "g",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    // Inline code from the command line; a role that means to run scripts names them.
    BuiltinGuard {
        program: "python",
        subcommands: NONE,
        options: &["--command"],
        short: "c",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    // Inline code from the command line; a role that means to run scripts names them.
    BuiltinGuard {
        program: "python3",
        subcommands: NONE,
        options: &["--command"],
        short: "c",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    // Inline code from the command line; a role that means to run scripts names them.
    BuiltinGuard {
        program: "perl",
        subcommands: NONE,
        options: NONE,
        short: "eE",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    // Inline code from the command line; a role that means to run scripts names them.
    BuiltinGuard {
        program: "ruby",
        subcommands: NONE,
        options: NONE,
        short: "e",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    // Inline code from the command line; a role that means to run scripts names them.
    BuiltinGuard {
        program: "node",
        subcommands: NONE,
        options: &["--eval", "--print", "--require", "--import"],
        short: "epr",
        word_prefixes: NONE,
        words: NONE,
        old_style_first_arg: false,
        short_free_after: NONE,
    },
    BuiltinGuard {
        program: "gh",
        subcommands: NONE,
        // `--web` starts a browser program (BROWSER, gh's `browser` setting).
        options: &["--web"],
        short: "w",
        word_prefixes: NONE,
        // `gh extension exec`, `gh alias set --shell`: both run arbitrary code.
        words: &["extension", "extensions", "ext", "alias"],
        old_style_first_arg: false,
        short_free_after: NONE,
    },
];

impl ArgGuards {
    /// The built-in guard list.
    pub fn builtin() -> ArgGuards {
        let mut g = ArgGuards::default();
        for w in WRAPPERS {
            g.wrappers.insert((*w).to_string());
        }
        for b in BUILTIN {
            g.add(
                b.program,
                Guard {
                    subcommands: b.subcommands.iter().map(|s| s.to_string()).collect(),
                    options: b.options.iter().map(|s| s.to_string()).collect(),
                    short: b.short.chars().collect(),
                    word_prefixes: b.word_prefixes.iter().map(|s| s.to_string()).collect(),
                    words: b.words.iter().map(|s| s.to_string()).collect(),
                    old_style_first_arg: b.old_style_first_arg,
                    short_free_after: b.short_free_after.iter().map(|s| s.to_string()).collect(),
                },
            );
        }
        g
    }

    /// Built-in guards extended by an operator file (`policies/bash-guards.yaml`).
    /// Unknown keys, wrong types and malformed entries are refused; messages name the key
    /// path and never quote a value.
    pub fn from_yaml(file: &Path, text: &str) -> Result<ArgGuards, Vec<Problem>> {
        let doc = crate::diag::parse_yaml(file, text)?;
        let mut out = ArgGuards::builtin();
        let mut problems = Vec::new();
        let Value::Mapping(map) = doc else {
            return Err(vec![Problem::new(
                file,
                "",
                "must be a mapping with keys version, wrappers, guards",
            )]);
        };
        let mut saw_version = false;
        for (k, v) in &map {
            let Some(k) = k.as_str() else {
                problems.push(Problem::new(
                    file,
                    "",
                    "keys must be strings: version, wrappers, guards",
                ));
                continue;
            };
            match k {
                "version" => {
                    saw_version = true;
                    if v.as_u64() != Some(1) {
                        problems.push(Problem::new(file, "version", "must be 1"));
                    }
                }
                "wrappers" => {
                    for (i, name) in string_list(file, "wrappers", v, &mut problems) {
                        if is_program_name(&name) {
                            out.wrappers.insert(name);
                        } else {
                            problems.push(Problem::new(
                                file,
                                index("wrappers", i),
                                "must be a bare program name: letters, digits, '.', '_', '+', '-'; at most 64 bytes",
                            ));
                        }
                    }
                }
                "guards" => parse_guards(file, v, &mut out, &mut problems),
                _ => problems.push(Problem::new(
                    file,
                    "",
                    "unknown key; allowed keys are version, wrappers, guards",
                )),
            }
        }
        if !saw_version {
            problems.push(Problem::new(file, "version", "is required and must be 1"));
        }
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }

    fn add(&mut self, program: &str, guard: Guard) {
        self.guards
            .entry(program.to_string())
            .or_default()
            .push(guard);
    }

    /// True when the program may never be the program word.
    pub fn is_wrapper(&self, program: &str) -> bool {
        self.wrappers.contains(program)
    }

    /// The first guard the argv trips, if any. `argv[0]` is the program.
    pub fn check(&self, argv: &[String]) -> Option<GuardHit> {
        let program = argv.first()?;
        if self.is_wrapper(program) {
            return Some(GuardHit {
                program: program.clone(),
                what: "wrapper".to_string(),
            });
        }
        let guards = self.guards.get(program.as_str())?;
        let args = &argv[1..];
        let sub_at = args
            .iter()
            .position(|w| !w.starts_with('-') && !w.starts_with('+'));
        let sub = sub_at.map(|i| args[i].as_str());
        for g in guards {
            if !g.subcommands.is_empty()
                && !sub.is_some_and(|s| g.subcommands.iter().any(|c| c == s))
            {
                continue;
            }
            // Where the short letters stop being read: after a subcommand of short_free_after.
            let short_until = match (sub_at, sub) {
                (Some(i), Some(s)) if g.short_free_after.iter().any(|c| c == s) => i,
                _ => args.len(),
            };
            if let Some(what) = g.trips(args, short_until) {
                return Some(GuardHit {
                    program: program.clone(),
                    what,
                });
            }
        }
        None
    }
}

impl Guard {
    /// The first word of `args` that trips this guard; short clusters are read only in
    /// `args[..short_until]`.
    fn trips(&self, args: &[String], short_until: usize) -> Option<String> {
        for (i, w) in args.iter().enumerate() {
            for p in &self.word_prefixes {
                if w.starts_with(p.as_str()) {
                    return Some(p.clone());
                }
            }
            if let Some(x) = self.words.iter().find(|x| *x == w) {
                return Some(x.clone());
            }
            // Exact spellings first, so `--exec` names itself rather than `--exec-path`.
            if let Some(opt) = self
                .options
                .iter()
                .find(|o| option_exact(o, w))
                .or_else(|| self.options.iter().find(|o| option_abbrev(o, w)))
            {
                return Some(opt.clone());
            }
            let cluster = if w.len() >= 2 && w.starts_with('-') && !w.starts_with("--") {
                Some(&w[1..])
            } else if i == 0 && self.old_style_first_arg && !w.starts_with('-') {
                Some(w.as_str())
            } else {
                None
            };
            if let Some(cluster) = cluster.filter(|_| i < short_until) {
                if let Some(c) = cluster.chars().find(|c| self.short.contains(c)) {
                    return Some(format!("-{c}"));
                }
            }
        }
        None
    }
}

fn option_exact(opt: &str, word: &str) -> bool {
    word.strip_prefix(opt)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
}

/// Abbreviated long options: `--exec-pa` or `--exec-pa=x` for `--exec-path`.
fn option_abbrev(opt: &str, word: &str) -> bool {
    if !opt.starts_with("--") || !word.starts_with("--") {
        return false;
    }
    let name = word.split('=').next().unwrap_or(word);
    name.len() > 2 && opt.starts_with(name)
}

/// A program name as the program word must be: bare, ASCII, no path.
pub fn is_program_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s != "."
        && s != ".."
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'))
}

fn string_list(
    file: &Path,
    path: &str,
    v: &Value,
    problems: &mut Vec<Problem>,
) -> Vec<(usize, String)> {
    let Value::Sequence(items) = v else {
        problems.push(Problem::new(file, path, "must be a list of strings"));
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(s) => out.push((i, s.to_string())),
            None => problems.push(Problem::new(file, index(path, i), "must be a string")),
        }
    }
    out
}

fn is_option(s: &str) -> bool {
    s.len() >= 2
        && s.len() <= 64
        && s.starts_with('-')
        && s != "--"
        && s[1..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn parse_guards(file: &Path, v: &Value, out: &mut ArgGuards, problems: &mut Vec<Problem>) {
    let Value::Sequence(items) = v else {
        problems.push(Problem::new(
            file,
            "guards",
            "must be a list of guard entries",
        ));
        return;
    };
    for (i, item) in items.iter().enumerate() {
        let at = index("guards", i);
        let Value::Mapping(m) = item else {
            problems.push(Problem::new(file, &at, "must be a mapping with key program and at least one of options, short, word_prefixes, words"));
            continue;
        };
        let mut program = None;
        let mut guard = Guard::default();
        let before = problems.len();
        for (k, val) in m {
            let Some(k) = k.as_str() else {
                problems.push(Problem::new(file, &at, "keys must be strings"));
                continue;
            };
            let here = key(&at, k);
            match k {
                "program" => match val.as_str() {
                    Some(p) if is_program_name(p) => program = Some(p.to_string()),
                    _ => problems.push(Problem::new(
                        file,
                        &here,
                        "must be a bare program name: letters, digits, '.', '_', '+', '-'; at most 64 bytes",
                    )),
                },
                "subcommands" => {
                    for (j, s) in string_list(file, &here, val, problems) {
                        if is_program_name(&s) {
                            guard.subcommands.push(s);
                        } else {
                            problems.push(Problem::new(file, index(&here, j), "must be a bare subcommand name: letters, digits, '.', '_', '+', '-'"));
                        }
                    }
                }
                "options" => {
                    for (j, s) in string_list(file, &here, val, problems) {
                        if is_option(&s) {
                            guard.options.push(s);
                        } else {
                            problems.push(Problem::new(file, index(&here, j), "must be an option name starting with '-' (letters, digits, '-', '_'; at most 64 bytes)"));
                        }
                    }
                }
                "short" => match val.as_str() {
                    Some(s) if !s.is_empty() && s.len() <= 52 && s.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                        guard.short = s.chars().collect();
                    }
                    _ => problems.push(Problem::new(file, &here, "must be a string of option letters or digits, e.g. \"cC\"")),
                },
                "word_prefixes" => {
                    for (j, s) in string_list(file, &here, val, problems) {
                        if !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_graphic()) {
                            guard.word_prefixes.push(s);
                        } else {
                            problems.push(Problem::new(file, index(&here, j), "must be 1 to 32 printable ASCII characters without spaces"));
                        }
                    }
                }
                "words" => {
                    for (j, s) in string_list(file, &here, val, problems) {
                        if !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_graphic()) {
                            guard.words.push(s);
                        } else {
                            problems.push(Problem::new(file, index(&here, j), "must be 1 to 64 printable ASCII characters without spaces"));
                        }
                    }
                }
                "old_style_first_arg" => match val.as_bool() {
                    Some(b) => guard.old_style_first_arg = b,
                    None => problems.push(Problem::new(file, &here, "must be true or false")),
                },
                _ => problems.push(Problem::new(
                    file,
                    &at,
                    "unknown key; allowed keys are program, subcommands, options, short, word_prefixes, words, old_style_first_arg",
                )),
            }
        }
        if problems.len() > before {
            continue;
        }
        let Some(program) = program else {
            problems.push(Problem::new(file, key(&at, "program"), "is required"));
            continue;
        };
        if guard.options.is_empty()
            && guard.short.is_empty()
            && guard.word_prefixes.is_empty()
            && guard.words.is_empty()
        {
            problems.push(Problem::new(
                file,
                &at,
                "must list at least one of options, short, word_prefixes, words",
            ));
            continue;
        }
        out.add(&program, guard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    fn hit(g: &ArgGuards, s: &str) -> Option<String> {
        g.check(&argv(s))
            .map(|h| format!("{} {}", h.program, h.what))
    }

    #[test]
    fn builtin_git_and_cargo() {
        let g = ArgGuards::builtin();
        assert_eq!(
            hit(&g, "git -c core.pager=x log").as_deref(),
            Some("git -c")
        );
        assert_eq!(hit(&g, "git -C/etc log").as_deref(), Some("git -C"));
        assert_eq!(
            hit(&g, "git --git-dir=/x log").as_deref(),
            Some("git --git-dir")
        );
        assert_eq!(
            hit(&g, "git --git-d=/x log").as_deref(),
            Some("git --git-dir")
        );
        assert_eq!(
            hit(&g, "git log --output=/tmp/x").as_deref(),
            Some("git --output")
        );
        assert_eq!(hit(&g, "git fetch -u origin").as_deref(), Some("git -u"));
        assert_eq!(hit(&g, "git status -uno"), None);
        assert_eq!(hit(&g, "git log --oneline -n 5"), None);
        assert_eq!(hit(&g, "git diff --no-ext-diff"), None);
        // After these subcommands -c and -C are theirs; before any subcommand, git's.
        assert_eq!(hit(&g, "git switch -c topic"), None);
        assert_eq!(hit(&g, "git --no-pager switch -C topic main"), None);
        assert_eq!(hit(&g, "git commit -C HEAD --amend"), None);
        assert_eq!(hit(&g, "git diff -C HEAD~1"), None);
        assert_eq!(hit(&g, "git log -O order.txt"), None);
        assert_eq!(hit(&g, "git -c x=y switch -c t").as_deref(), Some("git -c"));
        assert_eq!(hit(&g, "git -cx=y switch").as_deref(), Some("git -c"));
        assert_eq!(
            hit(&g, "git -C /etc switch -c t").as_deref(),
            Some("git -C")
        );
        assert_eq!(hit(&g, "git status -c").as_deref(), Some("git -c"));
        assert_eq!(
            hit(&g, "git clone -c core.pager=x u").as_deref(),
            Some("git -c")
        );
        // Options whose value is the next word cannot make git's subcommand another word
        // than the one the guard reads.
        assert_eq!(
            hit(&g, "git --shallow-file switch -c core.pager=x log").as_deref(),
            Some("git --shallow-file")
        );
        assert_eq!(
            hit(&g, "git --attr-source switch -c core.pager=x log").as_deref(),
            Some("git --attr-source")
        );
        assert_eq!(hit(&g, "git grep -O todo").as_deref(), Some("git -O"));
        assert_eq!(hit(&g, "cargo +nightly test").as_deref(), Some("cargo +"));
        assert_eq!(
            hit(&g, "cargo test -Zbuild-std").as_deref(),
            Some("cargo -Z")
        );
        assert_eq!(
            hit(&g, "cargo --config x test").as_deref(),
            Some("cargo --config")
        );
        assert_eq!(hit(&g, "cargo test --release -- --nocapture"), None);
        assert_eq!(hit(&g, "tar xIf a.tar").as_deref(), Some("tar -I"));
        assert_eq!(hit(&g, "tar tvf a.tar"), None);
        assert_eq!(hit(&g, "find . -name x -exec"), Some("find -exec".into()));
        assert_eq!(hit(&g, "sudo ls").as_deref(), Some("sudo wrapper"));
        assert_eq!(
            hit(&g, "gh extension exec x").as_deref(),
            Some("gh extension")
        );
        assert_eq!(hit(&g, "gh pr view 3"), None);
        assert_eq!(
            hit(&g, "rg --hostname-bin=make x").as_deref(),
            Some("rg --hostname-bin")
        );
        assert_eq!(
            hit(&g, "rg --hostname-bin ./build.sh x").as_deref(),
            Some("rg --hostname-bin")
        );
        assert_eq!(hit(&g, "rg -n --hidden todo src"), None);
        assert_eq!(hit(&g, "gh pr view 3 --web").as_deref(), Some("gh --web"));
        assert_eq!(hit(&g, "gh pr view -w 3").as_deref(), Some("gh -w"));
    }

    #[test]
    fn yaml_extends_and_refuses_unknown_keys() {
        let f = Path::new("policies/bash-guards.yaml");
        let g = ArgGuards::from_yaml(
            f,
            "version: 1\nwrappers: [myrun]\nguards:\n  - program: mytool\n    options: [--hook]\n    short: h\n",
        )
        .unwrap();
        assert_eq!(hit(&g, "myrun ls").as_deref(), Some("myrun wrapper"));
        assert_eq!(hit(&g, "mytool --hook=x").as_deref(), Some("mytool --hook"));
        assert_eq!(hit(&g, "mytool -vh").as_deref(), Some("mytool -h"));
        // Builtins are still there.
        assert_eq!(hit(&g, "git -c x log").as_deref(), Some("git -c"));

        let secret = "ghp_SECRETVALUE123";
        for text in [
            format!("version: 1\nbogus: {secret}\n"),
            format!("version: 1\nguards:\n  - program: x\n    options: [{secret}]\n"),
            format!("version: 1\nguards:\n  - program: 'a/{secret}'\n    short: x\n"),
            format!("version: 1\nguards:\n  - program: x\n    when: {secret}\n"),
            format!("version: 2\nwrappers: [{secret}/x]\n"),
            format!("wrappers: [{secret}]\n"),
            format!("version: [\n{secret}"),
            "version: 1\nguards:\n  - program: x\n".to_string(),
        ] {
            let problems = ArgGuards::from_yaml(f, &text).unwrap_err();
            assert!(!problems.is_empty());
            for p in problems {
                assert!(!p.to_string().contains(secret), "{p}");
                assert!(!p.to_string().contains("SECRET"), "{p}");
            }
        }
    }
}
