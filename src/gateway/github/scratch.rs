//! What a push changes, known before it is passed on: the run's scratch repository
//! (under its run directory, outside the jail) is brought up to date from GitHub with the
//! installation token, the push's pack is indexed into it by git itself (`index-pack
//! --fix-thin`, so thin packs resolve against what GitHub has), and then git answers
//! whether each update is a fast-forward (`merge-base --is-ancestor`) and which paths it
//! changes (`diff-tree` against the old tip, or for a new branch against where it left the
//! default branch). The token goes to git in its environment, never its arguments.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::push::RefUpdate;

/// Longest a git step may take.
const STEP: Duration = Duration::from_secs(300);

/// The run's scratch repository; one push checked at a time.
pub struct Scratch {
    pub dir: PathBuf,
    lock: tokio::sync::Mutex<()>,
}

/// What one update does, as git sees it.
#[derive(Debug)]
pub struct Checked {
    pub fast_forward: bool,
    pub paths: Vec<String>,
}

impl Scratch {
    pub fn new(dir: PathBuf) -> Scratch {
        Scratch {
            dir,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    async fn git(
        &self,
        args: &[&str],
        auth: Option<&str>,
        stdin: Option<&[u8]>,
    ) -> Result<Vec<u8>, String> {
        let mut c = tokio::process::Command::new(GIT);
        c.arg("--git-dir")
            .arg(&self.dir)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &self.dir)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        if let Some(a) = auth {
            c.env("GIT_CONFIG_COUNT", "1")
                .env("GIT_CONFIG_KEY_0", "http.extraHeader")
                .env("GIT_CONFIG_VALUE_0", format!("Authorization: {a}"));
        }
        let mut child = c.spawn().map_err(|e| format!("git: {}", e.kind()))?;
        if let (Some(bytes), Some(mut w)) = (stdin, child.stdin.take()) {
            w.write_all(bytes)
                .await
                .map_err(|e| format!("git: {}", e.kind()))?;
        }
        let out = tokio::time::timeout(STEP, child.wait_with_output())
            .await
            .map_err(|_| "git took too long".to_string())?
            .map_err(|e| format!("git: {}", e.kind()))?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(format!("git {} failed", args.first().unwrap_or(&"")))
        }
    }

    /// Check `updates` of a push whose pack is `pack`, against `upstream` (the
    /// repository's git URL) reached with `auth`; `default` is its default branch.
    pub async fn check(
        &self,
        upstream: &str,
        auth: &str,
        pack: &[u8],
        updates: &[RefUpdate],
        default: &str,
    ) -> Result<Vec<Checked>, String> {
        let _one = self.lock.lock().await;
        if !self.dir.join("HEAD").exists() {
            let parent = self.dir.parent().ok_or("no scratch directory")?;
            let name = self.dir.file_name().ok_or("no scratch directory")?;
            let out = tokio::process::Command::new(GIT)
                .arg("init")
                .arg("-q")
                .arg("--bare")
                .arg(name)
                .current_dir(parent)
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await
                .map_err(|e| format!("git init: {}", e.kind()))?;
            if !out.success() {
                return Err("git init failed".into());
            }
        }
        self.git(
            &[
                "fetch",
                "-q",
                "--no-tags",
                "--no-write-fetch-head",
                upstream,
                "+refs/heads/*:refs/remotes/u/*",
            ],
            Some(auth),
            None,
        )
        .await
        .map_err(|e| format!("the repository could not be read from GitHub ({e})"))?;
        if !pack.is_empty() {
            self.git(&["index-pack", "--stdin", "--fix-thin"], None, Some(pack))
                .await
                .map_err(|e| format!("the push's pack is not valid ({e})"))?;
        }
        let mut out = Vec::new();
        for u in updates {
            let fast_forward = u.is_create()
                || self
                    .git(&["merge-base", "--is-ancestor", &u.old, &u.new], None, None)
                    .await
                    .is_ok();
            let base = if u.is_create() {
                let default_ref = format!("refs/remotes/u/{default}");
                self.git(&["merge-base", &u.new, &default_ref], None, None)
                    .await
                    .ok()
                    .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            } else {
                Some(u.old.clone())
            };
            // A branch with no history in common with the default one: every path is new.
            let empty_tree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
            let base = base.filter(|b| !b.is_empty());
            let base = base.as_deref().unwrap_or(empty_tree);
            let names = self
                .git(
                    &[
                        "diff-tree",
                        "-r",
                        "-z",
                        "--no-commit-id",
                        "--name-only",
                        base,
                        &u.new,
                    ],
                    None,
                    None,
                )
                .await
                .map_err(|e| format!("what the push changes could not be read ({e})"))?;
            let paths = names
                .split(|&b| b == 0)
                .filter(|p| !p.is_empty())
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect();
            out.push(Checked {
                fast_forward,
                paths,
            });
        }
        Ok(out)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The git airlockd runs (the host's, never one from the run).
const GIT: &str = "/usr/bin/git";
