//! What the bash tool gives `git` so that an allowed git command starts no program the
//! repository's config names. A workspace's `.git/config`, `.gitattributes`, the home's
//! `~/.gitconfig` and every file they include are the agent's to write, and git runs
//! programs from dozens of keys (a pager, an editor, hooks, `diff.external`, a textconv or
//! filter driver that `.gitattributes` points at, credential helpers, aliases starting with
//! `!`...): without this, `git log -p` in a read-only role runs whatever the agent wrote.
//!
//! Three layers, all decided here (pure) and applied by the bash tool:
//! - fixed overrides ([`FIXED`]) of every key that names a program, given as command-line
//!   config (`GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`, which git reads
//!   after every config file), and the environment variables that beat config ([`ENV`]);
//! - the same for the keys whose name holds a name the agent picks (`filter.<driver>.*`,
//!   `diff.<driver>.textconv`, `merge.<driver>.driver`, `alias.<name>`,
//!   `remote.<name>.uploadpack`, `credential.<url>.helper`, ...): the names are read from
//!   the repository's config as git sees it (`git config --list --name-only`, run first as
//!   the instance in its jail) and each gets its override ([`Plan::add_config_names`]);
//! - `--no-textconv` and `--no-ext-diff` after the subcommands that take them, so no
//!   diff driver runs whatever its name.
//!
//! Hooks never run: `core.hooksPath` is `/dev/null` for every git command, `git commit`
//! included. A hook is a file in the workspace the agent writes, so running it would make
//! a `git commit` grant a grant of any program; checks that must hold belong where the
//! agent cannot edit them (CI, the GitHub route's rules).

/// `(key, value)`: every config key with a fixed name that names a program, and what it is
/// set to (empty: nothing to run; `:` for an editor and `cat` for a pager are git's own
/// words for "none"; gpg programs at git's defaults, which are system programs).
pub const FIXED: &[(&str, &str)] = &[
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("core.sshCommand", ""),
    ("core.askPass", ""),
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.alternateRefsCommand", ""),
    ("diff.external", ""),
    ("diff.tool", ""),
    ("diff.guitool", ""),
    ("merge.tool", ""),
    ("merge.guitool", ""),
    ("interactive.diffFilter", ""),
    // The empty helper clears every helper configured before it, URL-scoped ones too.
    ("credential.helper", ""),
    ("gpg.format", "openpgp"),
    ("gpg.program", "gpg"),
    ("gpg.openpgp.program", "gpg"),
    ("gpg.x509.program", "gpgsm"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("gpg.ssh.defaultKeyCommand", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("tag.forceSignAnnotated", "false"),
    ("push.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("merge.verifySignatures", "false"),
    ("protocol.ext.allow", "never"),
    ("protocol.ssh.allow", "never"),
    ("uploadpack.packObjectsHook", "exec"),
    ("gc.auto", "0"),
    ("gc.recentObjectsHook", ""),
    ("maintenance.auto", "false"),
    ("sendemail.smtpServer", ""),
    ("sendemail.toCmd", ""),
    ("sendemail.ccCmd", ""),
    ("sendemail.headerCmd", ""),
    ("imap.tunnel", ""),
    ("help.browser", ""),
    ("web.browser", ""),
    ("instaweb.browser", ""),
    ("instaweb.httpd", ""),
];

/// Environment variables that git reads before (or instead of) the config keys above.
pub const ENV: &[(&str, &str)] = &[
    ("GIT_EDITOR", ":"),
    ("GIT_SEQUENCE_EDITOR", ":"),
    ("GIT_PAGER", "cat"),
    ("GIT_ASKPASS", ""),
    ("SSH_ASKPASS", ""),
    // Set (even empty), it stops git reading core.gitProxy, where the first entry wins.
    ("GIT_PROXY_COMMAND", ""),
    ("GIT_TERMINAL_PROMPT", "0"),
];

/// Subcommands that take `--no-textconv` and `--no-ext-diff` (git 2.47), and `grep`, which
/// takes the first only.
const DIFFING: &[&str] = &[
    "diff",
    "log",
    "show",
    "whatchanged",
    "format-patch",
    "diff-tree",
    "diff-index",
    "diff-files",
    "blame",
    "annotate",
    "range-diff",
];

/// Most overrides a repository's own config may add (each driver, alias or remote it
/// names); past it the command is refused.
pub const MAX_CONFIG_NAMES: usize = 512;

/// The argv that lists the config keys git sees (names only, NUL-terminated).
pub const LIST_CONFIG: &[&str] = &["git", "config", "--null", "--list", "--name-only"];

/// How one git command runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The argv with `--no-textconv`/`--no-ext-diff` after the subcommand where it takes
    /// them.
    pub argv: Vec<String>,
    /// Environment variables to set ([`ENV`]).
    pub env: Vec<(String, String)>,
    /// Command-line config, in order, after any the run already has.
    pub config: Vec<(String, String)>,
}

/// The plan for `argv`, or None when it is not a git command.
pub fn plan(argv: &[String]) -> Option<Plan> {
    if argv.first().map(String::as_str) != Some("git") {
        return None;
    }
    let mut config: Vec<(String, String)> = FIXED
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut argv = argv.to_vec();
    if let Some(i) = subcommand(&argv) {
        let sub = argv[i].clone();
        // An alias of that name (git never takes one for a builtin) runs nothing.
        config.push((format!("alias.{sub}"), String::new()));
        config.push((format!("pager.{sub}"), "false".into()));
        let at = match sub.as_str() {
            "stash" if argv.get(i + 1).map(String::as_str) == Some("show") => Some(i + 2),
            s if DIFFING.contains(&s) || s == "grep" => Some(i + 1),
            _ => None,
        };
        if let Some(at) = at {
            let mut flags = vec!["--no-textconv".to_string()];
            if sub != "grep" {
                flags.push("--no-ext-diff".to_string());
            }
            argv.splice(at..at, flags);
        }
    }
    Some(Plan {
        argv,
        env: ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        config,
    })
}

/// The index of git's subcommand in `argv`: the first word after `git` that is not one
/// of git's own options (`--attr-source` takes the next word; the guards refuse the other
/// options that do).
fn subcommand(argv: &[String]) -> Option<usize> {
    let mut i = 1;
    while let Some(w) = argv.get(i) {
        if !w.starts_with('-') {
            return Some(i);
        }
        i += if w == "--attr-source" { 2 } else { 1 };
    }
    None
}

impl Plan {
    /// Add the overrides for the config keys the repository's config names (`names`, as
    /// [`LIST_CONFIG`] prints them), or say why the command is refused.
    pub fn add_config_names<'a>(
        &mut self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), String> {
        let mut added: Vec<(String, String)> = Vec::new();
        for name in names {
            for o in overrides_for(name) {
                if !added.contains(&o) && !self.config.contains(&o) {
                    added.push(o);
                }
            }
            if added.len() > MAX_CONFIG_NAMES {
                return Err(format!(
                    "the repository's git config names more than {MAX_CONFIG_NAMES} drivers, aliases, remotes and helpers; git is not run with it"
                ));
            }
        }
        self.config.extend(added);
        Ok(())
    }
}

/// The overrides one config key calls for: those of every program-naming key of its
/// driver, tool, alias, remote or URL (a section and a name the agent chose).
fn overrides_for(name: &str) -> Vec<(String, String)> {
    let Some((section, rest)) = name.split_once('.') else {
        return Vec::new();
    };
    let section = section.to_ascii_lowercase();
    // Three-level keys: section.<subsection>.key; the subsection is the agent's name.
    let sub = rest.rsplit_once('.').map(|(s, _)| s);
    let set = |keys: &[(&str, &str)], sub: &str| -> Vec<(String, String)> {
        keys.iter()
            .map(|(k, v)| (format!("{section}.{sub}.{k}"), v.to_string()))
            .collect()
    };
    match (section.as_str(), sub) {
        ("filter", Some(d)) => set(
            &[
                ("clean", ""),
                ("smudge", ""),
                ("process", ""),
                ("required", "false"),
            ],
            d,
        ),
        ("diff", Some(d)) => set(&[("textconv", ""), ("command", "")], d),
        ("merge", Some(d)) => set(&[("driver", "")], d),
        ("difftool" | "mergetool" | "browser" | "man", Some(t)) => {
            set(&[("cmd", ""), ("path", "")], t)
        }
        ("guitool", Some(t)) => set(&[("cmd", "")], t),
        ("remote", Some(r)) => set(
            &[
                ("uploadpack", "git-upload-pack"),
                ("receivepack", "git-receive-pack"),
            ],
            r,
        ),
        ("credential", Some(u)) => set(&[("helper", "")], u),
        ("submodule", Some(m)) => set(&[("update", "checkout")], m),
        ("alias", None) => vec![(format!("alias.{rest}"), String::new())],
        ("pager", None) => vec![(format!("pager.{rest}"), "false".into())],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn diffing_subcommands_get_no_drivers() {
        let argv = |s: &str| plan(&words(s)).unwrap().argv.join(" ");
        assert_eq!(argv("git log -p"), "git log --no-textconv --no-ext-diff -p");
        assert_eq!(
            argv("git --no-pager show HEAD"),
            "git --no-pager show --no-textconv --no-ext-diff HEAD"
        );
        assert_eq!(
            argv("git --attr-source HEAD diff -- a"),
            "git --attr-source HEAD diff --no-textconv --no-ext-diff -- a"
        );
        assert_eq!(argv("git grep -n x"), "git grep --no-textconv -n x");
        assert_eq!(
            argv("git stash show -p"),
            "git stash show --no-textconv --no-ext-diff -p"
        );
        assert_eq!(argv("git stash list"), "git stash list");
        assert_eq!(argv("git status -sb"), "git status -sb");
        assert_eq!(argv("git --version"), "git --version");
        assert!(plan(&words("ls -la")).is_none());
    }

    #[test]
    fn every_program_key_is_overridden_and_hooks_are_off() {
        let p = plan(&words("git commit -m x")).unwrap();
        let get = |k: &str| {
            p.config
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("core.hooksPath"), Some("/dev/null"));
        assert_eq!(get("core.fsmonitor"), Some("false"));
        assert_eq!(get("diff.external"), Some(""));
        assert_eq!(get("credential.helper"), Some(""));
        assert_eq!(get("alias.commit"), Some(""));
        assert_eq!(get("pager.commit"), Some("false"));
        assert!(p.env.contains(&("GIT_EDITOR".into(), ":".into())));
    }

    #[test]
    fn names_the_agent_picked_get_their_overrides() {
        let mut p = plan(&words("git status")).unwrap();
        let before = p.config.len();
        p.add_config_names([
            "core.bare",
            "filter.evil.clean",
            "filter.evil.smudge",
            "diff.Pdf Driver.textconv",
            "merge.ours.driver",
            "alias.st",
            "remote.origin.url",
            "credential.https://host.example/x.helper",
            "user.name",
        ])
        .unwrap();
        let added: Vec<(String, String)> = p.config[before..].to_vec();
        for want in [
            ("filter.evil.clean", ""),
            ("filter.evil.process", ""),
            ("filter.evil.required", "false"),
            ("diff.Pdf Driver.textconv", ""),
            ("diff.Pdf Driver.command", ""),
            ("merge.ours.driver", ""),
            ("alias.st", ""),
            ("remote.origin.uploadpack", "git-upload-pack"),
            ("credential.https://host.example/x.helper", ""),
        ] {
            assert!(
                added.contains(&(want.0.to_string(), want.1.to_string())),
                "{want:?} in {added:?}"
            );
        }
        // Each once, and nothing for keys that name no program.
        assert_eq!(added.len(), 4 + 2 + 1 + 1 + 2 + 1);
        let many: Vec<String> = (0..MAX_CONFIG_NAMES)
            .map(|i| format!("alias.a{i}"))
            .collect();
        let mut p = plan(&words("git status")).unwrap();
        assert!(p
            .add_config_names(many.iter().map(String::as_str).chain(["alias.z"]))
            .is_err());
    }
}
