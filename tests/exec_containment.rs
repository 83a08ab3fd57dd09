//! The agent side can start no program but its own (DESIGN.md, "Two sides in every run").
//! Each route to running another program is tried from inside a real run of an agent role,
//! whose agent program is the Debian python3 (an interpreter with exec, memfd and dlopen at
//! hand): every one must fail, and the agent's own program must still start. The same
//! programs run fine on the command side (tests/gateway.rs, tests/jail_escape.rs).

mod common;

use common::*;
use serde_json::Value;

const PROBES: &str = r#"
import ctypes, json, os, shutil, subprocess, sys
r = {}
def attempt(name, f):
    try:
        r[name] = f()
    except OSError as e:
        r[name] = "errno:" + (os.strerror(e.errno) if e.errno else str(e))
    except Exception as e:
        r[name] = "error:" + type(e).__name__ + ":" + str(e)[:200]
def run(argv, fds=()):
    p = subprocess.run(argv, capture_output=True, timeout=20, pass_fds=fds)
    return "exit:%d" % p.returncode
ldso = "/lib64/ld-linux-x86-64.so.2"
attempt("git", lambda: run(["/usr/bin/git", "--version"]))
attempt("true_by_name", lambda: run(["true"]))
attempt("loader_on_git", lambda: run([ldso, "/usr/bin/git", "--version"]))
attempt("loader_on_true", lambda: run([ldso, "/bin/true"]))
places = {"workspace": os.environ["AIRLOCK_WORKSPACE"], "home": os.environ["HOME"], "tmp": "/tmp", "shm": "/dev/shm"}
for name, d in places.items():
    def copy_and_run(d=d):
        p = os.path.join(d, "mytrue")
        shutil.copyfile("/bin/true", p)
        os.chmod(p, 0o755)
        return run([p])
    attempt("written:" + name, copy_and_run)
    def loader_on_copy(d=d):
        return run([ldso, os.path.join(d, "mytrue")])
    attempt("loader_on_written:" + name, loader_on_copy)
def memfd():
    fd = os.memfd_create("x", 0)
    with open("/bin/true", "rb") as f:
        os.write(fd, f.read())
    return run(["/proc/self/fd/%d" % fd], (fd,))
attempt("memfd", memfd)
# The loader run on a memfd copy of a program (the kernel's memfd mount is not noexec, and
# vm.memfd_noexec stops only execve), with a library it lacks preloaded from a memfd too.
def memfd_loader():
    fd = os.memfd_create("git", 0)
    with open("/usr/bin/git", "rb") as f:
        os.write(fd, f.read())
    pcre = os.memfd_create("pcre", 0)
    with open("/lib/x86_64-linux-gnu/libpcre2-8.so.0", "rb") as f:
        os.write(pcre, f.read())
    p = subprocess.run([ldso, "/proc/self/fd/%d" % fd, "--version"], capture_output=True,
                       timeout=20, pass_fds=(fd, pcre), env={"LD_PRELOAD": "/proc/self/fd/%d" % pcre})
    return "exit:%d %s" % (p.returncode, p.stdout[:40])
attempt("memfd_loader", memfd_loader)
def dlopen_memfd():
    fd = os.memfd_create("z", 0)
    with open("/lib/x86_64-linux-gnu/libz.so.1", "rb") as f:
        os.write(fd, f.read())
    ctypes.CDLL("/proc/self/fd/%d" % fd)
    return "loaded"
attempt("dlopen_memfd", dlopen_memfd)
MFD_EXEC = 0x10
attempt("memfd_exec_flag", lambda: str(os.memfd_create("y", MFD_EXEC)))
def proc_fd():
    fd = os.open("/usr/bin/git", os.O_RDONLY)
    return run(["/proc/self/fd/%d" % fd, "--version"], (fd,))
attempt("proc_self_fd", proc_fd)
def dlopen_written():
    shutil.copyfile("/lib/x86_64-linux-gnu/libz.so.1", "/tmp/libmine.so")
    ctypes.CDLL("/tmp/libmine.so")
    return "loaded"
attempt("dlopen_written", dlopen_written)
def dlopen_system():
    ctypes.CDLL("/lib/x86_64-linux-gnu/libpam.so.0")
    return "loaded"
attempt("dlopen_unlisted_system_lib", dlopen_system)
attempt("own_program", lambda: run([sys.executable, "-c", "import sys; sys.exit(7)"]))
# Every other process of the run (pid 1, the command side's runner): none may be traced.
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
attached = []
for pid in range(1, 300):
    if pid != os.getpid() and libc.ptrace(PTRACE_ATTACH, pid, 0, 0) == 0:
        attached.append(pid)
        libc.ptrace(PTRACE_DETACH, pid, 0, 0)
r["ptrace_attached"] = attached
r["runner_seen"] = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
print(json.dumps(r))
"#;

#[test]
fn the_agent_side_can_start_no_program_but_its_own() {
    let h = Host::new(&[("tess", "code")], "");
    let o = h
        .launch("code", "tess", &[], &["/usr/bin/python3", "-c", PROBES])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    let r: Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
    let denied = |k: &str| {
        let v = r[k].as_str().unwrap_or_default();
        assert!(
            v.starts_with("errno:Permission denied")
                || v.starts_with("errno:Operation not permitted"),
            "{k}: {v}\n{r}"
        );
    };
    denied("git");
    denied("true_by_name");
    denied("memfd");
    denied("memfd_exec_flag");
    // No memfd at all on the agent side: mapping one executable needs no execve.
    denied("memfd_loader");
    denied("dlopen_memfd");
    denied("proc_self_fd");
    for place in ["workspace", "home", "tmp", "shm"] {
        denied(&format!("written:{place}"));
    }
    // The loader itself may run (it is part of the agent's own program), but it cannot map
    // another program, a file the agent wrote, or anything on a noexec mount.
    for k in r
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("loader_on"))
    {
        assert_eq!(r[k], "exit:127", "{k}: {r}");
    }
    for k in ["dlopen_written", "dlopen_unlisted_system_lib"] {
        let v = r[k].as_str().unwrap();
        assert!(v.contains("failed to map"), "{k}: {v}");
    }
    assert_eq!(r["ptrace_attached"], serde_json::json!([]), "{r}");
    // hidepid shows only what one may trace: the runner is not even visible.
    assert_eq!(r["runner_seen"], serde_json::json!([]), "{r}");
    // Its own program starts (Claude Code re-executes itself this way).
    assert_eq!(r["own_program"], "exit:7", "{r}");
}

/// The escape battery on the agent side itself, so that what it tries stays tested under
/// the agent side's own filter, namespaces and limits (DESIGN.md, "keep every escape test
/// meaningful"): the agent program is python3 running it. Every check holds there too, but
/// the two that start a program, which the agent side may not (they hold on the command
/// side: tests/jail_escape.rs, tests/real_agents.rs), and the daemon (a started program).
#[test]
fn the_escape_battery_holds_on_the_agent_side() {
    let h = Host::new(&[("tess", "code")], "");
    let uid = h.uids[0];
    let ws = h.workspace("ws", uid);
    battery_into(&ws, uid);
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port().to_string();
    let state = h.state.display().to_string();
    let skipped = ["daemon_started", "setuid_binary"];
    let mut argv = vec![
        "/usr/bin/python3",
        "escape_battery.py",
        "--side",
        "agent",
        "--host-port",
        &port,
        "--host-path",
        &state,
        "--max-procs",
        "64",
    ];
    for s in skipped {
        argv.extend(["--skip", s]);
    }
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
    assert_battery_held(&stdout(&o), &skipped);
}

#[test]
fn the_jail_reports_the_agent_sides_containment() {
    let h = Host::new(&[("tess", "code")], "");
    let o = h
        .launch("code", "tess", &[], &["/usr/bin/python3", "-c", "pass"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let run = run_id_of(&o);
    let text = journal_text(&run);
    assert!(text.contains("agent side: landlock"), "{text}");
    assert!(
        text.contains("every other mount noexec, no memfd, memfd exec off; its own pid, mount and IPC namespaces"),
        "{text}"
    );
    assert!(text.contains("command side: runner ready"), "{text}");
    // Which limits hold each side.
    assert!(
        text.contains("sides: agent side: 64 processes by cgroup")
            && text.contains("command side: 48 processes by cgroup"),
        "{text}"
    );
}

#[test]
fn a_fresh_workspace_shows_at_slash_workspace_and_no_state_directory_path() {
    let h = Host::new(&[("tess", "code")], "");
    // The state directory's first component that the jail has no reason to show.
    let state = h.state.to_string_lossy().into_owned();
    let probe = format!(
        "import os, sys\n\
         print(os.getcwd()); print(os.environ['AIRLOCK_WORKSPACE'])\n\
         print('state-visible' if os.path.lexists({state:?}) else 'state-absent')\n\
         open('/workspace/made', 'w').write('x')\n"
    );
    let o = h
        .launch("code", "tess", &[], &["/usr/bin/python3", "-c", &probe])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.get(..3),
        Some(&["/workspace", "/workspace", "state-absent"][..]),
        "{out}"
    );
}
