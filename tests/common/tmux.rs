//! A tmux server of a test's own: a real terminal emulator whose panes run airlockctl
//! (`send-keys` types, `capture-pane` reads the screen).

use std::process::{Command, Output, Stdio};

use super::{poll, stderr, stdout, Host};

pub struct Tmux {
    name: String,
}

impl Tmux {
    pub fn new(tag: &str) -> Tmux {
        let name = format!("airlock-{tag}-{}", std::process::id());
        Tmux { name }
    }

    pub fn cmd(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.name, "-f", "/dev/null"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("tmux runs (scripts/install-deps.sh installs it)")
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.cmd(args);
        assert!(o.status.success(), "tmux {args:?}: {}", stderr(&o));
        stdout(&o)
    }

    /// The pane's screen and what scrolled off it (200 lines), wrapped lines joined.
    pub fn screen(&self, target: &str) -> String {
        self.ok(&["capture-pane", "-p", "-J", "-S", "-200", "-t", target])
    }

    /// The visible screen only, as it is drawn now.
    pub fn visible(&self, target: &str) -> String {
        self.ok(&["capture-pane", "-p", "-t", target])
    }

    /// Wait (at most `secs`) until the pane shows `want`; the screen on failure.
    pub fn wait_secs(&self, target: &str, want: &str, secs: u64) -> String {
        poll(secs, || {
            let s = self.screen(target);
            s.contains(want).then_some(s)
        })
        .unwrap_or_else(|| {
            panic!(
                "{want:?} never showed in {target}:\n{}",
                self.screen(target)
            )
        })
    }

    /// Wait until the pane shows `want`; the screen on failure.
    pub fn wait_for(&self, target: &str, want: &str) -> String {
        self.wait_secs(target, want, 30)
    }

    /// `rows`x`cols` of the pane, as tmux says.
    pub fn size(&self, target: &str) -> String {
        self.ok(&[
            "display-message",
            "-p",
            "-t",
            target,
            "#{pane_height}x#{pane_width}",
        ])
        .trim()
        .to_string()
    }

    /// A detached session `name` of `cols`x`rows` running `program`.
    pub fn session(&self, name: &str, cols: u16, rows: u16, program: &str) {
        self.ok(&[
            "new-session",
            "-d",
            "-s",
            name,
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            program,
        ]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn quoted(args: &[String]) -> String {
    args.iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A shell script that runs airlockctl with `args`, then says its exit code and stays.
pub fn wrapper(h: &Host, name: &str, args: &[&str]) -> String {
    let mut argv = vec![
        env!("CARGO_BIN_EXE_airlockctl").to_string(),
        "--config".into(),
        h.cfg.display().to_string(),
    ];
    argv.extend(args.iter().map(|s| s.to_string()));
    let path = h.root.join(name);
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n{}\necho \"EXIT=$?\"\nexec sleep 600\n",
            quoted(&argv)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

/// The first run id on a screen.
pub fn run_id(screen: &str) -> String {
    screen
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .find(|w| w.starts_with("r-") && airlock::sandbox::spec::valid_run_id(w))
        .unwrap_or_else(|| panic!("no run id on the screen:\n{screen}"))
        .to_string()
}
