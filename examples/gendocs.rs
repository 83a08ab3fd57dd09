//! Man pages and shell completions, generated from the binaries' own clap definitions so
//! they cannot drift from what the binaries parse. Used by `scripts/build-deb`; the
//! binaries themselves link neither clap_mangen nor clap_complete.
//!
//! ```text
//! cargo run --example gendocs -- OUT_DIR
//! ```
//!
//! writes OUT_DIR/man/{airlockd.8, airlockctl.1, airlockctl-SUBCOMMAND.1...} and
//! OUT_DIR/completions/{airlockctl.bash, _airlockctl, airlockctl.fish} (and the same for
//! airlockd).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

// The binaries' argument definitions, compiled here as modules: their `main` and the
// wiring are unused in this program.
#[allow(dead_code)]
#[path = "../src/bin/airlockctl.rs"]
mod airlockctl;
#[allow(dead_code)]
#[path = "../src/bin/airlockd.rs"]
mod airlockd;

const SEE_ALSO_CTL: &str = "airlockd(8), airlock.yaml(5), airlock\\-jail(8), journalctl(1)";
const SEE_ALSO_D: &str = "airlockctl(1), airlock.yaml(5), airlock\\-jail(8), systemd.service(5)";

const FILES: &str = "\
.TP
\\fI/etc/airlock/airlock.yaml\\fR
The configuration, see \\fBairlock.yaml\\fR(5).
.TP
\\fI/usr/share/airlock/roles/\\fR
The shipped roles (vendor layer, replaced on upgrade).
.TP
\\fI/etc/airlock/roles.local/\\fR
The operator's roles; a role here overrides the shipped one of the same name.
.TP
\\fI/etc/airlock/policies/\\fR
Rails, classes, levels, autonomy and bash argument guards.
.TP
\\fI/var/lib/airlock/\\fR
State: the ledger (ledger.jsonl), the instance registry, instance homes, per\\-run files.
.TP
\\fI/run/airlock/airlockd.sock\\fR
The control socket (group airlock\\-operators).
";

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: gendocs OUT_DIR");
        return ExitCode::from(2);
    };
    match generate(&out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gendocs: {}: {e}", out.display());
            ExitCode::FAILURE
        }
    }
}

fn generate(out: &Path) -> io::Result<()> {
    let man = out.join("man");
    let comp = out.join("completions");
    fs::create_dir_all(&man)?;
    fs::create_dir_all(&comp)?;

    let ctl = airlockctl::Cli::command();
    // One page per subcommand (airlockctl-launch(1), ...), as git does: clap_mangen's top
    // page lists subcommands by name only, without their options.
    for sub in ctl.clone().disable_help_subcommand(true).get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        write_subpages(sub, &man, "airlockctl", "airlockctl")?;
    }
    page(ctl.clone(), "1", &man, SEE_ALSO_CTL)?;
    page(airlockd::Cli::command(), "8", &man, SEE_ALSO_D)?;

    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        for cmd in [ctl.clone(), airlockd::Cli::command()] {
            let name = cmd.get_name().to_string();
            let file = match shell {
                Shell::Bash => format!("{name}.bash"),
                Shell::Zsh => format!("_{name}"),
                _ => format!("{name}.fish"),
            };
            let mut cmd = cmd;
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, &name, &mut buf);
            fs::write(comp.join(file), buf)?;
        }
    }
    Ok(())
}

/// A subcommand's page and, recursively, its subcommands' (`airlockctl-check-bash(1)`).
/// `parent_usage` is how the synopsis spells the parent, with its positionals
/// (`airlockctl check <ROLE>`), which clap_mangen does not carry into a subcommand's page.
fn write_subpages(
    cmd: &clap::Command,
    dir: &Path,
    parent: &str,
    parent_usage: &str,
) -> io::Result<()> {
    let full = format!("{parent}-{}", cmd.get_name());
    let usage = format!("{parent_usage} {}", cmd.get_name());
    let cmd = cmd
        .clone()
        .display_name(full.clone())
        .bin_name(usage.clone());
    let mut child_usage = usage;
    for a in cmd.get_positionals() {
        child_usage.push_str(&format!(" <{}>", a.get_id().as_str().to_uppercase()));
    }
    for sub in cmd.get_subcommands() {
        if sub.get_name() != "help" {
            write_subpages(sub, dir, &full, &child_usage)?;
        }
    }
    page(cmd, "1", dir, "airlockctl(1), airlock.yaml(5)")
}

/// One page: clap_mangen's sections, then FILES (top-level pages) and SEE ALSO.
fn page(cmd: clap::Command, section: &str, dir: &Path, see_also: &str) -> io::Result<()> {
    let top = !cmd.get_display_name().is_some_and(|n| n.contains('-'));
    let man = clap_mangen::Man::new(cmd)
        .section(section)
        .manual("Airlock")
        .source(format!("Airlock {}", env!("CARGO_PKG_VERSION")));
    let mut buf = Vec::new();
    man.render(&mut buf)?;
    if top {
        buf.write_all(b".SH FILES\n")?;
        buf.write_all(FILES.as_bytes())?;
    }
    writeln!(buf, ".SH \"SEE ALSO\"\n{see_also}")?;
    fs::write(dir.join(man.get_filename()), buf)
}
