//! `airlockctl timers [--output DIR]`: systemd timers for the roles' `run.schedule`.
//!
//! For each instance hired in the config whose role has a schedule, writes
//! `airlock-run@<instance>.timer` and the drop-in `airlock-run@<instance>.service.d/role.conf`
//! that tells the `airlock-run@.service` template which role to launch. Files are written
//! atomically (temporary file, then rename). Timers this command wrote earlier for instances
//! that no longer have a schedule are removed; files it did not write are never touched.

use crate::cli::output::outln;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::output;
use super::remote::Ctx;
use super::sources::{self, SourceArgs};
use crate::config::Config;
use crate::diag::{key, Problem};
use crate::schedule;
use crate::supervisor::instances;

pub const DEFAULT_OUTPUT: &str = "/etc/systemd/system";

/// First line of every file this command writes; only files carrying it are replaced or
/// removed.
const MARKER: &str = "# Written by `airlockctl timers`; edit the role's run.schedule instead.";

/// One instance's timer, ready to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub instance: String,
    pub role: String,
    pub on_calendar: Vec<String>,
}

impl Planned {
    pub fn timer_name(&self) -> String {
        format!("airlock-run@{}.timer", self.instance)
    }

    pub fn timer_text(&self) -> String {
        let mut t = format!(
            "{MARKER}\n[Unit]\nDescription=Airlock schedule of instance {} (role {}, UTC)\n\n[Timer]\n",
            self.instance, self.role
        );
        for cal in &self.on_calendar {
            t.push_str(&format!("OnCalendar={cal}\n"));
        }
        t.push_str(&format!(
            "Persistent=true\nUnit=airlock-run@{}.service\n\n[Install]\nWantedBy=timers.target\n",
            self.instance
        ));
        t
    }

    pub fn dropin_dir(&self) -> String {
        format!("airlock-run@{}.service.d", self.instance)
    }

    pub fn dropin_text(&self) -> String {
        format!(
            "{MARKER}\n[Service]\nEnvironment=AIRLOCK_ROLE={}\n",
            self.role
        )
    }
}

/// Work out every timer from the config and the role catalog. Pure apart from reading
/// roles and policies; problems name the config key or role file, never a value.
pub fn plan(args: &SourceArgs, cfg: &Config) -> Result<Vec<Planned>, Vec<Problem>> {
    let loaded = sources::load(args, cfg);
    if loaded.policies.is_none() {
        return Err(loaded.problems);
    }
    // Every hired instance: declared in the config or hired through airlockd; a fired one
    // never runs again, so it gets no timer (and an earlier one of ours is removed).
    let instances = instances::list(cfg).map_err(|e| {
        vec![Problem::new(
            &cfg.state_dir.join("instances.json"),
            "",
            e.to_string(),
        )]
    })?;
    let mut problems = Vec::new();
    let mut out = Vec::new();
    for inst in instances.iter().filter(|i| !i.fired) {
        let name = &inst.name;
        let at = key(&key("instances", name), "role");
        let Some(entry) = loaded.catalog.resolve(&inst.role) else {
            problems.push(Problem::new(
                &cfg.file,
                &at,
                "names no valid role in the role directories (`airlockctl validate` lists them)",
            ));
            continue;
        };
        let role = &entry.loaded.role;
        let Some(expr) = role.run.as_ref().and_then(|r| r.schedule.as_deref()) else {
            continue;
        };
        match schedule::parse(expr) {
            Ok(s) => out.push(Planned {
                instance: name.clone(),
                role: role.role.clone(),
                on_calendar: s.on_calendar(),
            }),
            Err(why) => problems.push(Problem::new(&entry.loaded.file, "run.schedule", why)),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

pub fn run(ctx: &Ctx, args: &SourceArgs, output_dir: Option<&Path>) -> i32 {
    let cfg = match ctx.load_config() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let planned = match plan(args, &cfg) {
        Ok(p) => p,
        Err(problems) => {
            output::problems(&problems);
            eprintln!("airlockctl timers: nothing written; fix the problems above");
            return output::NO;
        }
    };
    let dir = output_dir.unwrap_or(Path::new(DEFAULT_OUTPUT));
    let mut written = Vec::new();
    for p in &planned {
        let timer = dir.join(p.timer_name());
        let dropin_dir = dir.join(p.dropin_dir());
        let dropin = dropin_dir.join("role.conf");
        let result = fs::create_dir_all(dir)
            .and_then(|_| refuse_foreign(&timer))
            .and_then(|_| refuse_foreign(&dropin))
            .and_then(|_| write_atomic(&timer, &p.timer_text()))
            .and_then(|_| fs::create_dir_all(&dropin_dir))
            .and_then(|_| write_atomic(&dropin, &p.dropin_text()));
        if let Err(e) = result {
            eprintln!("airlockctl timers: {}: {e}", dir.display());
            return output::ERROR;
        }
        written.push((p, timer, dropin));
    }
    let removed = match remove_stale(dir, &planned) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("airlockctl timers: {}: {e}", dir.display());
            return output::ERROR;
        }
    };
    if ctx.json {
        let w: Vec<_> = written
            .iter()
            .map(|(p, t, d)| {
                json!({
                    "instance": p.instance,
                    "role": p.role,
                    "on_calendar": p.on_calendar,
                    "timer": t.display().to_string(),
                    "dropin": d.display().to_string(),
                })
            })
            .collect();
        let r: Vec<_> = removed.iter().map(|p| p.display().to_string()).collect();
        return output::json(
            &json!({"output": dir.display().to_string(), "written": w, "removed": r}),
        );
    }
    for (p, timer, dropin) in &written {
        outln!("wrote {} ({})", timer.display(), p.on_calendar.join("; "));
        outln!("wrote {}", dropin.display());
    }
    for r in &removed {
        outln!("removed {}", r.display());
    }
    if written.is_empty() && removed.is_empty() {
        outln!("no hired instance has a role with run.schedule; nothing to write");
    } else {
        outln!("now run: systemctl daemon-reload");
        for (p, _, _) in &written {
            outln!("  and enable it: systemctl enable --now {}", p.timer_name());
        }
    }
    output::OK
}

/// A file at `path` that this command did not write belongs to the operator.
fn refuse_foreign(path: &Path) -> std::io::Result<()> {
    match fs::read_to_string(path) {
        Ok(text) if !text.starts_with(MARKER) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and was not written by airlockctl timers; move it away first",
                path.display()
            ),
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn ours(path: &Path) -> bool {
    fs::read_to_string(path).is_ok_and(|t| t.starts_with(MARKER))
}

/// Remove timers (and their drop-ins) this command wrote before for instances not planned now.
fn remove_stale(dir: &Path, planned: &[Planned]) -> std::io::Result<Vec<PathBuf>> {
    let keep: Vec<String> = planned.iter().map(Planned::timer_name).collect();
    let mut removed = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(instance) = name
            .strip_prefix("airlock-run@")
            .and_then(|n| n.strip_suffix(".timer"))
        else {
            continue;
        };
        if keep.iter().any(|k| k == name) || !ours(&entry.path()) {
            continue;
        }
        fs::remove_file(entry.path())?;
        removed.push(entry.path());
        let dropin_dir = dir.join(format!("airlock-run@{instance}.service.d"));
        let dropin = dropin_dir.join("role.conf");
        if ours(&dropin) {
            fs::remove_file(&dropin)?;
            removed.push(dropin);
            // Only if empty: the operator may keep their own drop-ins there.
            let _ = fs::remove_dir(&dropin_dir);
        }
    }
    Ok(removed)
}

/// Write `text` to `path` through a temporary file in the same directory and a rename, so
/// systemd never reads half a unit.
fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_timer_and_its_dropin() {
        let p = Planned {
            instance: "tess".into(),
            role: "code".into(),
            on_calendar: vec!["Mon..Fri *-*-* 06:30:00 UTC".into()],
        };
        let t = p.timer_text();
        assert!(t.starts_with(MARKER));
        assert!(t.contains("\nOnCalendar=Mon..Fri *-*-* 06:30:00 UTC\n"));
        assert!(t.contains("\nPersistent=true\n"));
        assert!(t.contains("\nUnit=airlock-run@tess.service\n"));
        assert_eq!(p.dropin_dir(), "airlock-run@tess.service.d");
        assert!(p
            .dropin_text()
            .contains("\n[Service]\nEnvironment=AIRLOCK_ROLE=code\n"));
    }
}
