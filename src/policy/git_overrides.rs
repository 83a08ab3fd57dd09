//! What the bash tool gives `git` so that an allowed git command starts no program the
//! agent configured. A workspace's `.git/config`, `.gitattributes`, the config of every
//! submodule (`.git/modules/<name>/config`), the home's `~/.gitconfig` and `~/.gnupg` and
//! every file they include are the agent's to write, and git runs programs from dozens of
//! keys (a pager, an editor, hooks, `diff.external`, a textconv or filter driver that
//! `.gitattributes` points at, credential helpers, `uploadpack.packObjectsHook` in a local
//! fetch, gpg's own `agent-program`...), in child gits too (a submodule's diff and status
//! run git there, with that repository's config).
//!
//! Soundness rests on one layer that depends on no name and no re-read of any file:
//! - **the exec limit** ([`EXEC`]): a git command, and everything it starts, may execute
//!   only git's own programs, gpg and the loader (Landlock, in the runner), so a driver, a
//!   hook, a helper or a gpg option naming `sh -c ...` or a file of the workspace fails to
//!   start, whichever config file named it and whenever it was written. (An earlier
//!   design read the config's driver names first and overrode each; a config rewritten
//!   between that read and the command's named a driver the read did not see.)
//!
//! - **the mount view** ([`crate::sandbox::noexec_view`]): git commands run where every
//!   mount is noexec but read-only binds of [`EXEC`] and [`LIBRARIES`], so the loader,
//!   which git may execute, maps nothing else: not a file the run wrote, nor a system
//!   program outside the exec limit that a path the run chose leads to (an interpreter
//!   would read the run's files as scripts).
//!
//! The loader being executable leaves one way to reach it with a path the agent chose: a
//! program key set to the loader itself (textconv and external diff drivers: the blob's
//! temporary file, the work tree's path; fsmonitor: a path relative to the work tree).
//! The view makes that harmless; they are also kept from being started:
//! - `--no-textconv --no-ext-diff` after every subcommand that takes them (the argument
//!   guards refuse `--textconv`/`--ext-diff` themselves), and no child git that diffs:
//!   `diff.submodule=short`, `--submodule=diff` and `range-diff`/`--range-diff` (whose child
//!   `git log -p` textconvs) refused, `submodule.recurse=false`;
//! - fixed overrides ([`FIXED`]) of every key with a fixed name that names a program, given
//!   as command-line config (`GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`,
//!   read after every config file and kept by git for a submodule's child gits), and the
//!   environment variables that beat config ([`ENV`]).
//!
//! The rest keeps git from even trying: every transport but http(s) (the gateway's) is
//! `never` (`protocol.allow`), so a local fetch never starts `upload-pack` (whose child
//! loses the overrides: git clears config variables for another repository's process);
//! `GIT_NO_LAZY_FETCH=1` (git 2.44 and later; on older git a partial clone's lazy fetch
//! can only go over http(s) to the gateway, which checks it like any fetch); gpg runs with
//! `GNUPGHOME` where nothing can be (`/dev/null/...`), so it reads no `gpg.conf` of the
//! agent's: signatures show as unverifiable ("No public key"), never verified against a
//! keyring the agent wrote. `git bisect run` is refused (it runs a program by design).
//!
//! Hooks never run: `core.hooksPath` is `/dev/null` for every git command, `git commit`
//! included. A hook is a file in the workspace the agent writes, so running it would make
//! a `git commit` grant a grant of any program; checks that must hold belong where the
//! agent cannot edit them (CI, the GitHub route's rules). Git commands implemented as
//! scripts (`git submodule`, `git filter-branch`, `git difftool`, `git mergetool`,
//! `git send-email`) do not run from the bash tool: their interpreter is not git's.

/// What a git command may execute, at or beneath each path (those missing on this system
/// are left out): git and its helper programs where Debian and a source build put them,
/// gpg for signature display, and the ELF loader every dynamically linked program needs.
pub const EXEC: &[&str] = &[
    "/usr/bin/git",
    "/usr/local/bin/git",
    "/usr/lib/git-core",
    "/usr/libexec/git-core",
    "/usr/local/libexec/git-core",
    "/usr/bin/gpg",
    "/usr/bin/gpgsm",
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/ld-linux-aarch64.so.1",
];

/// Where the shared libraries of the programs in [`EXEC`] are (and the modules they load:
/// gconv, NSS, PKCS #11): the command side's noexec runner keeps these folders, and the
/// programs of [`EXEC`], on the only executable mounts its git commands see
/// ([`crate::sandbox::noexec_view`]). `/lib/...` is `/usr/lib/...` on a merged-/usr system.
pub const LIBRARIES: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/usr/lib64",
];

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
    // Every transport but the gateway's: a local one runs upload-pack without these
    // overrides, ssh and ext run programs, a remote helper's name is the agent's.
    ("protocol.allow", "never"),
    ("protocol.file.allow", "never"),
    ("protocol.git.allow", "never"),
    ("protocol.ssh.allow", "never"),
    ("protocol.ext.allow", "never"),
    ("protocol.http.allow", "always"),
    ("protocol.https.allow", "always"),
    // No child git that diffs or recurses into a submodule, with its own config.
    ("diff.submodule", "short"),
    ("submodule.recurse", "false"),
    ("status.submoduleSummary", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("push.recurseSubmodules", "no"),
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
    // A partial clone's missing objects are not fetched behind the command's back.
    ("GIT_NO_LAZY_FETCH", "1"),
    // gpg reads no gpg.conf (which names programs: agent-program, dirmngr-program...).
    ("GNUPGHOME", "/dev/null/airlock-no-gnupg"),
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
];

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
    /// What the command may execute ([`EXEC`]).
    pub exec: Vec<String>,
}

/// The plan for `argv`: None when it is not a git command, an error (naming the option or
/// subcommand, which are git's words) when it is one the bash tool does not run.
pub fn plan(argv: &[String]) -> Result<Option<Plan>, String> {
    if argv.first().map(String::as_str) != Some("git") {
        return Ok(None);
    }
    refused(argv)?;
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
    Ok(Some(Plan {
        argv,
        env: ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        config,
        exec: EXEC.iter().map(|p| p.to_string()).collect(),
    }))
}

/// Git commands that would run a child git diffing with textconv on (`range-diff`,
/// `format-patch --range-diff`, `--submodule=diff`) or that run a program by design
/// (`bisect run`). Options as git's parser reads them: a long option before `--` by any
/// unambiguous abbreviation (parse-options takes those), with its value after `=`.
fn refused(argv: &[String]) -> Result<(), String> {
    let Some(i) = subcommand(argv) else {
        return Ok(());
    };
    let sub = argv[i].as_str();
    if sub == "range-diff" {
        return Err("`git range-diff` is not run from the bash tool (its child `git log -p` would run diff drivers)".into());
    }
    if sub == "bisect" && argv.get(i + 1).map(String::as_str) == Some("run") {
        return Err("`git bisect run` is not run from the bash tool (it runs a program)".into());
    }
    for w in argv[i + 1..].iter().take_while(|w| *w != "--") {
        let (name, value) = match w.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (w.as_str(), None),
        };
        let abbreviates = |full: &str, min: usize| name.len() >= min && full.starts_with(name);
        if abbreviates("--range-diff", 5) {
            return Err("`--range-diff` is not run from the bash tool (its child `git log -p` would run diff drivers)".into());
        }
        if abbreviates("--submodule", 5) && value == Some("diff") {
            return Err("`--submodule=diff` is not run from the bash tool (it runs git in the submodule, with the submodule's config); use `--submodule=log` or `short`".into());
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn diffing_subcommands_get_no_drivers() {
        let argv = |s: &str| plan(&words(s)).unwrap().unwrap().argv.join(" ");
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
        assert!(plan(&words("ls -la")).unwrap().is_none());
    }

    #[test]
    fn every_program_key_is_overridden_and_hooks_are_off() {
        let p = plan(&words("git commit -m x")).unwrap().unwrap();
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
    fn commands_that_would_start_a_diffing_child_or_a_program_are_refused() {
        for bad in [
            "git range-diff a...b",
            "git format-patch --range-diff=x HEAD~1",
            "git format-patch --range-d=x HEAD~1",
            "git log -p --submodule=diff",
            "git diff --submodule=diff",
            "git bisect run make",
        ] {
            assert!(plan(&words(bad)).is_err(), "{bad}");
        }
        for ok in [
            "git log -p --submodule=log",
            "git diff --submodule",
            "git log -- --submodule=diff",
            "git bisect start",
        ] {
            assert!(plan(&words(ok)).unwrap().is_some(), "{ok}");
        }
        let p = plan(&words("git status")).unwrap().unwrap();
        assert!(p.exec.iter().any(|e| e == "/usr/lib/git-core"));
        assert!(!p.exec.iter().any(|e| e.ends_with("/sh") || e == "/usr/bin"));
        assert!(p.env.contains(&("GIT_NO_LAZY_FETCH".into(), "1".into())));
        assert!(p
            .config
            .contains(&("protocol.allow".into(), "never".into())));
        assert!(p
            .config
            .contains(&("diff.submodule".into(), "short".into())));
    }
}
