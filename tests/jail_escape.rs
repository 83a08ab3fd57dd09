//! Escape tests of the jail, run for real as root through the built binaries: each test
//! launches `airlockctl launch --standalone --wait` with its own config, state dir and
//! instance uids, and checks from inside (and outside) that an escape class is closed.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};

mod common;
use nix::unistd::Pid;

/// Each test gets its own uids so parallel tests never share an instance identity.
static NEXT_UID: AtomicU32 = AtomicU32::new(0);

fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the jail escape tests must run as root (they build real jails)"
    );
}

struct Env {
    _dir: tempfile::TempDir,
    root: PathBuf,
    cfg: PathBuf,
    state: PathBuf,
}

impl Env {
    /// A config with `names` hired for the workflow role `probe` (its command runs on the
    /// command side, where a shell may start the probes' tools), each with a fresh uid.
    fn new(names: &[&str]) -> (Env, Vec<u32>) {
        let hires: Vec<(&str, &str)> = names.iter().map(|n| (*n, "probe")).collect();
        Env::hire(&hires)
    }

    /// A config with each `(instance, role)` hired, each with a fresh explicit uid, and a
    /// roles.local layer over the shipped roles holding `probe` (tests add more there).
    fn hire(hires: &[(&str, &str)]) -> (Env, Vec<u32>) {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        // The shipped roles and policies: launches go through the same catalog as validate.
        let repo = env!("CARGO_MANIFEST_DIR");
        let base = 1_880_095_000 + (std::process::id() % 200) * 20;
        let mut uids = Vec::new();
        let mut inst = String::new();
        for (n, role) in hires {
            let uid = base + NEXT_UID.fetch_add(1, Ordering::SeqCst);
            uids.push(uid);
            inst.push_str(&format!("  {n}: {{role: {role}, uid: {uid}}}\n"));
        }
        common::write_probe_role(&root.join("roles.local"));
        let layers = format!("{repo}/roles, {}", root.join("roles.local").display());
        let cfg = root.join("airlock.yaml");
        std::fs::write(
            &cfg,
            format!(
                "roles: [{layers}]\npolicies: {repo}/policies\nstate_dir: state\nuid_range: 1880096000-1880096999\nlimits: {{max_procs: 64, tmp_bytes: 8388608}}\ninstances:\n{inst}"
            ),
        )
        .unwrap();
        let state = root.join("state");
        (
            Env {
                _dir: dir,
                root,
                cfg,
                state,
            },
            uids,
        )
    }

    fn cmd(&self, instance: &str, extra: &[&str], argv: &[&str]) -> Command {
        self.cmd_role("probe", instance, extra, argv)
    }

    fn cmd_role(&self, role: &str, instance: &str, extra: &[&str], argv: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_airlockctl"));
        c.arg("--config")
            .arg(&self.cfg)
            .args([
                "launch",
                role,
                "--instance",
                instance,
                "--standalone",
                "--wait",
            ])
            .args(extra)
            .arg("--")
            .args(argv)
            .stdin(Stdio::null());
        c
    }

    fn run(&self, instance: &str, extra: &[&str], argv: &[&str]) -> Output {
        self.cmd(instance, extra, argv).output().unwrap()
    }

    fn sh(&self, instance: &str, script: &str) -> Output {
        self.run(instance, &[], &["/bin/sh", "-c", script])
    }
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_ok(o: &Output) {
    assert_eq!(
        o.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        text(o),
        err(o)
    );
}

/// Host processes whose real uid is `uid`.
fn pids_of_uid(uid: u32) -> Vec<i32> {
    airlock::supervisor::launch::pids_of_uid(uid)
}

#[test]
fn identity_is_the_instance_with_no_privileges() {
    let (env, uids) = Env::new(&["tess"]);
    let uid = uids[0];
    let o = env.sh(
        "tess",
        "id -u; id -g; id -G; grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status",
    );
    assert_ok(&o);
    let out = text(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], uid.to_string());
    assert_eq!(lines[1], uid.to_string());
    assert_eq!(lines[2], uid.to_string(), "supplementary groups present");
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let line = lines.iter().find(|l| l.starts_with(cap)).unwrap();
        assert!(line.ends_with("0000000000000000"), "{line}");
    }
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("Seccomp:\t2"), "{out}");
}

#[test]
fn network_is_only_loopback_and_host_sockets_are_unreachable() {
    let (env, _) = Env::new(&["tess"]);
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    use std::os::linux::net::SocketAddrExt;
    let name = format!("airlock-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _abs = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let script = format!(
        r#"
import socket
print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))
import fcntl, struct
req = struct.pack('16sH', b'lo', 0) + bytes(22)
flags = struct.unpack('16sH', fcntl.ioctl(socket.socket(), 0x8913, req)[:18])[1]
print('lo-up' if flags & 1 else 'lo-down')
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('tcp-connected')
except OSError: print('tcp-failed')
s = socket.socket(socket.AF_UNIX)
try:
    s.connect('\0{name}'); print('abstract-connected')
except OSError: print('abstract-failed')
try:
    srv = socket.socket(); srv.bind(('127.0.0.1', 0)); print('bound')
except OSError: print('bind-denied')
"#
    );
    let o = env.run("tess", &[], &["/usr/bin/python3", "-c", &script]);
    assert_ok(&o);
    let out = text(&o);
    assert!(out.contains("['lo']"), "{out}");
    assert!(out.contains("lo-up"), "{out}");
    assert!(out.contains("tcp-failed"), "{out}");
    assert!(out.contains("abstract-failed"), "{out}");
    // No bind ports granted: Landlock denies listening even on the jail's own lo.
    assert!(out.contains("bind-denied"), "{out}");
    let o2 = env.sh(
        "tess",
        "test ! -e /run/systemd/journal/socket && test ! -e /run/dbus && test ! -e /var/run && echo nosock",
    );
    assert!(text(&o2).contains("nosock"), "{}{}", text(&o2), err(&o2));
}

#[test]
fn vsock_and_other_socket_families_are_refused_in_the_jail() {
    let (env, _) = Env::new(&["tess"]);
    let script = r#"
import errno, socket
def try_family(name, fam, ty):
    try:
        s = socket.socket(fam, ty); s.close(); print(name, 'OPENED')
    except OSError as e:
        print(name, 'eafnosupport' if e.errno == errno.EAFNOSUPPORT else 'other-%d' % e.errno)
try_family('vsock', socket.AF_VSOCK, socket.SOCK_STREAM)
try_family('vsock-dgram', socket.AF_VSOCK, socket.SOCK_DGRAM)
try_family('packet', socket.AF_PACKET, socket.SOCK_RAW)
try_family('alg', socket.AF_ALG, socket.SOCK_SEQPACKET)
try_family('bluetooth', 31, socket.SOCK_STREAM)
for fam, ty in ((socket.AF_UNIX, socket.SOCK_STREAM), (socket.AF_UNIX, socket.SOCK_DGRAM), (socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET6, socket.SOCK_STREAM)):
    socket.socket(fam, ty).close()
socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()
print('allowed-ok')
# No UDP (nothing to bind, for Landlock has no UDP rules here), no raw or ping sockets.
for fam, ty in ((socket.AF_INET, socket.SOCK_DGRAM), (socket.AF_INET6, socket.SOCK_DGRAM), (socket.AF_INET, socket.SOCK_RAW)):
    try:
        socket.socket(fam, ty).close(); print('inet', fam, ty, 'OPENED')
    except OSError as e:
        print('inet', 'eperm' if e.errno == errno.EPERM else 'other-%d' % e.errno)
"#;
    let o = env.run("tess", &[], &["/usr/bin/python3", "-c", script]);
    assert_ok(&o);
    let out = text(&o);
    assert_eq!(out.matches("eafnosupport").count(), 5, "{out}{}", err(&o));
    assert!(out.contains("allowed-ok"), "{out}");
    assert_eq!(out.matches("inet eperm").count(), 3, "{out}");
}

#[test]
fn setuid_binaries_do_not_give_root() {
    let (env, _) = Env::new(&["tess"]);
    let meta = std::fs::metadata("/usr/bin/passwd").expect("package passwd must be installed");
    assert!(
        meta.permissions().mode() & 0o4000 != 0,
        "passwd is not setuid"
    );
    let o = env.sh("tess", "passwd -S root; echo rc=$?");
    let out = text(&o);
    assert!(
        out.contains("rc=") && !out.contains("rc=0"),
        "{out}{}",
        err(&o)
    );
    assert!(!out.lines().any(|l| l.starts_with("root ")), "{out}");
}

#[test]
fn fork_bomb_hits_the_process_limit_and_the_run_ends() {
    let (env, uids) = Env::new(&["tess"]);
    let script = r#"
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60); os._exit(0)
    n += 1
print('forked', n)
"#;
    let o = env.run("tess", &[], &["/usr/bin/python3", "-c", script]);
    assert_ok(&o);
    let n: u32 = text(&o)
        .trim()
        .strip_prefix("forked ")
        .unwrap()
        .parse()
        .unwrap();
    assert!(n < 64, "forked {n} processes with max_procs 64");
    // The classic bomb: the deadline ends it, and nothing of the uid survives.
    let start = Instant::now();
    let o = env.run(
        "tess",
        &["--max-seconds", "3"],
        &["/bin/bash", "-c", ":(){ :|:& };:; sleep 60"],
    );
    assert_ne!(o.status.code(), Some(0));
    assert!(start.elapsed() < Duration::from_secs(30));
    assert!(
        pids_of_uid(uids[0]).is_empty(),
        "processes of the uid survived"
    );
}

#[test]
fn writes_outside_workspace_home_and_tmp_fail() {
    let (env, _) = Env::new(&["tess"]);
    let o = env.sh(
        "tess",
        "for p in /usr/x /etc/x /var/tmp/x /x /home/x /bin/x /dev/x /proc/x; do touch $p 2>/dev/null && echo WROTE $p; done; \
         touch \"$AIRLOCK_WORKSPACE/ok\" \"$HOME/ok\" /tmp/ok /dev/shm/ok && echo inside-ok",
    );
    let out = text(&o);
    assert!(!out.contains("WROTE"), "{out}");
    assert!(out.contains("inside-ok"), "{out}{}", err(&o));
}

#[test]
fn state_dir_and_other_homes_are_invisible() {
    let (env, _) = Env::new(&["tess", "max"]);
    assert_ok(&env.sh("max", "echo secret > $HOME/note"));
    let state = env.state.display().to_string();
    let o = env.sh(
        "tess",
        &format!(
            "test ! -e {state} && echo state-absent; cat /home/max/note 2>/dev/null || echo no-note"
        ),
    );
    let out = text(&o);
    // Not even the path: the run's fresh workspace is at /workspace.
    assert_eq!(out.lines().next(), Some("state-absent"), "{out}{}", err(&o));
    assert!(out.contains("no-note"), "{out}");
}

#[test]
fn proc_sys_read_only_and_sysrq_not_writable() {
    let (env, _) = Env::new(&["tess"]);
    let o = env.sh(
        "tess",
        "grep ' /proc ' /proc/self/mountinfo | cut -d' ' -f6 | cut -d, -f1; \
         echo x > /proc/sys/kernel/hostname 2>/dev/null && echo WROTE-SYS; \
         echo h > /proc/sysrq-trigger 2>/dev/null && echo WROTE-SYSRQ; \
         echo 1000 > /proc/self/oom_score_adj 2>/dev/null && echo WROTE-SELF; \
         cat /proc/1/status 2>/dev/null && echo SAW-INIT; \
         grep -q '^Uid:' /proc/self/status && echo read-self; echo done",
    );
    let out = text(&o);
    // All of /proc is mounted read-only, /proc/sys and sysrq-trigger with it.
    assert_eq!(out.lines().next(), Some("ro"), "{out}{}", err(&o));
    assert!(!out.contains("WROTE") && !out.contains("SAW-INIT"), "{out}");
    // Read-only, still readable.
    assert!(out.contains("read-self"), "{out}{}", err(&o));
    assert!(out.contains("done"));
}

/// The mount flags themselves, independent of Landlock: every mount in /etc is read-only,
/// nosuid, nodev and noexec; every mount in /dev nosuid and noexec, /dev itself read-only
/// with its device nodes still usable.
#[test]
fn etc_and_dev_mounts_carry_their_flags() {
    let (env, _) = Env::new(&["tess"]);
    let o = env.sh(
        "tess",
        r#"has() { case ",$1," in *",$2,"*) return 0;; esac; return 1; }
n_etc=0; n_dev=0
while read -r _ _ _ _ mp opts _; do
  case "$mp" in
    /etc|/etc/*) n_etc=$((n_etc+1)); for f in ro nosuid nodev noexec; do has "$opts" $f || echo "BAD $mp $f"; done;;
    /dev) for f in ro nosuid noexec; do has "$opts" $f || echo "BAD $mp $f"; done;;
    /dev/*) n_dev=$((n_dev+1)); for f in nosuid noexec; do has "$opts" $f || echo "BAD $mp $f"; done;;
  esac
done < /proc/self/mountinfo
echo "etc=$n_etc dev=$n_dev"; echo x > /dev/null && echo null-writable
for n in null zero full random urandom tty; do test -c /dev/$n || echo "NOT-CHAR $n"; done"#,
    );
    let out = text(&o);
    assert!(!out.contains("BAD"), "{out}{}", err(&o));
    let counts = out
        .lines()
        .find_map(|l| l.strip_prefix("etc="))
        .unwrap_or_else(|| panic!("no counts: {out}{}", err(&o)));
    let (etc, dev) = counts.split_once(" dev=").unwrap();
    // /etc itself plus the host's folders (ssl at least: host files are copies, not
    // mounts); /dev/shm and /dev/pts (the device nodes are made on /dev itself).
    assert!(etc.parse::<u32>().unwrap() >= 2, "{out}");
    assert!(dev.parse::<u32>().unwrap() >= 2, "{out}");
    assert!(out.contains("null-writable"), "{out}");
    assert!(!out.contains("NOT-CHAR"), "{out}");
}

/// The host's /etc files reach the jail as copies: the same bytes, owner, mode and
/// modification time as on the host, read-only, and no mount of their own (each would be
/// copied into every mount namespace of the run).
#[test]
fn host_etc_files_are_read_only_copies_as_the_host_has_them() {
    use sha2::Digest;
    use std::os::unix::fs::MetadataExt;
    let (env, _) = Env::new(&["tess"]);
    let names: Vec<&str> = ["os-release", "nsswitch.conf", "ld.so.cache", "host.conf"]
        .into_iter()
        .filter(|n| std::fs::metadata(format!("/etc/{n}")).is_ok_and(|m| m.is_file()))
        .collect();
    assert!(
        names.len() >= 2,
        "this host has too few of the /etc files probed"
    );
    let mut script = String::new();
    for n in &names {
        script.push_str(&format!(
            "echo \"{n} $(stat -L -c '%s %a %u %g %Y' /etc/{n}) $(sha256sum < /etc/{n} | cut -c1-64)\"; \
             (echo x >> /etc/{n}) 2>/dev/null && echo WROTE {n}; \
             grep -q ' /etc/{n} ' /proc/self/mountinfo && echo MOUNTED {n}; "
        ));
    }
    let o = env.sh("tess", &format!("{script}echo done"));
    let out = text(&o);
    assert!(out.contains("done"), "{out}{}", err(&o));
    assert!(!out.contains("WROTE") && !out.contains("MOUNTED"), "{out}");
    for n in names {
        let host = std::fs::metadata(format!("/etc/{n}")).unwrap();
        let bytes = std::fs::read(format!("/etc/{n}")).unwrap();
        let sum: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let want = format!(
            "{n} {} {:o} {} {} {} {sum}",
            host.len(),
            host.mode() & 0o7777,
            host.uid(),
            host.gid(),
            host.mtime()
        );
        assert!(out.lines().any(|l| l == want), "want {want}\n{out}");
    }
}

#[test]
fn dev_is_minimal_and_cgroupfs_is_absent() {
    let (env, _) = Env::new(&["tess"]);
    let o = env.sh(
        "tess",
        "find /dev -type b | wc -l; for d in /dev/kmsg /dev/mem /dev/kmem /dev/port /dev/vda /dev/sda /sys/fs/cgroup; do test -e $d && echo HAS $d; done; \
         mkdir /sys/fs 2>/dev/null && echo MKDIR; mount -t cgroup2 none /tmp 2>/dev/null && echo MOUNTED; \
         ls /sys | wc -l; echo done",
    );
    let out = text(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "0", "{out}{}", err(&o));
    assert!(
        !out.contains("HAS") && !out.contains("MKDIR") && !out.contains("MOUNTED"),
        "{out}"
    );
    assert!(out.contains("done"));
}

#[test]
fn leaked_fds_and_environment_do_not_reach_the_jail() {
    let (env, _) = Env::new(&["tess"]);
    let secret = env.root.join("secret.txt");
    std::fs::write(&secret, "token").unwrap();
    let path = std::ffi::CString::new(secret.to_str().unwrap()).unwrap();
    // Opened without O_CLOEXEC: the launcher inherits them; the jail must not.
    let f = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
    let d = unsafe { libc::open(c"/".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(f > 2 && d > 2);
    let mut c = env.cmd(
        "tess",
        &[],
        &[
            "/bin/sh",
            "-c",
            "ls /proc/self/fd | wc -l; ls -l /proc/self/fd; env",
        ],
    );
    c.env("AIRLOCK_TEST_SECRET", "hunter2");
    let o = c.output().unwrap();
    unsafe {
        libc::close(f);
        libc::close(d);
    }
    assert_ok(&o);
    let out = text(&o);
    // 0, 1, 2 and the fd ls uses to read the directory.
    assert_eq!(out.lines().next(), Some("4"), "{out}");
    assert!(!out.contains("secret.txt"), "{out}");
    assert!(
        !out.contains("hunter2") && !out.contains("AIRLOCK_TEST_SECRET"),
        "{out}"
    );
    assert!(out.contains("PATH=/usr/local/bin:/usr/bin:/bin"), "{out}");
}

#[test]
fn instances_cannot_signal_each_other_and_runs_do_not_share_tmp() {
    let (env, _) = Env::new(&["tess", "max"]);
    let a = env
        .cmd(
            "tess",
            &[],
            &[
                "/bin/sh",
                "-c",
                "echo mine > /tmp/m; sleep 3; cat /tmp/m; echo alive",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    // Another instance tries to kill everything it can, and to see the first run.
    let b = env.sh(
        "max",
        "kill -9 -1 2>/dev/null; ls /proc | grep -c '^[0-9]'; test -e /tmp/m && echo SHARED; echo b-done",
    );
    // Another run of the same instance does not see its /tmp either.
    let c = env.sh("tess", "test -e /tmp/m && echo SHARED; echo c-done");
    let a = a.wait_with_output().unwrap();
    assert_ok(&a);
    assert!(text(&a).contains("mine\nalive"), "{}", text(&a));
    assert!(
        !text(&b).contains("SHARED") && text(&b).contains("b-done"),
        "{}",
        text(&b)
    );
    assert!(
        !text(&c).contains("SHARED") && text(&c).contains("c-done"),
        "{}",
        text(&c)
    );
}

#[test]
fn double_forked_daemons_do_not_outlive_the_run() {
    let (env, uids) = Env::new(&["tess"]);
    let o = env.sh(
        "tess",
        "(setsid sleep 120 >/dev/null 2>&1 &); (nohup sleep 121 >/dev/null 2>&1 &); sleep 0.3; exit 0",
    );
    assert_ok(&o);
    assert!(
        pids_of_uid(uids[0]).is_empty(),
        "a process of the instance uid outlived the run"
    );
}

#[test]
fn init_cannot_be_signalled_or_traced_by_the_agent() {
    let (env, _) = Env::new(&["tess"]);
    let script = r#"
import ctypes, os, signal
try:
    os.kill(1, signal.SIGKILL); print('KILLED-INIT')
except OSError: print('kill-denied')
libc = ctypes.CDLL(None, use_errno=True)
print('ptrace', libc.ptrace(16, 1, None, None))
print('alive')
"#;
    let o = env.run("tess", &[], &["/usr/bin/python3", "-c", script]);
    assert_ok(&o);
    let out = text(&o);
    assert!(
        out.contains("kill-denied") && out.contains("ptrace -1") && out.contains("alive"),
        "{out}"
    );
}

#[test]
fn namespaces_mounts_and_terminal_injection_are_denied() {
    let (env, _) = Env::new(&["tess"]);
    let script = r#"
import os, fcntl, termios, ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, flag in (('user', 0x10000000), ('mnt', 0x00020000), ('net', 0x40000000)):
    if libc.unshare(flag) == 0: print('UNSHARED', name)
    else: print('unshare-denied', name)
try:
    fcntl.ioctl(1, termios.TIOCSTI, b'x'); print('TIOCSTI-OK')
except OSError: print('tiocsti-denied')
try:
    os.open('/dev/tty', os.O_RDWR); print('TTY-OPEN')
except OSError: print('no-tty')
"#;
    let o = env.run("tess", &[], &["/usr/bin/python3", "-c", script]);
    let out = text(&o);
    assert!(
        !out.contains("UNSHARED") && !out.contains("TIOCSTI-OK") && !out.contains("TTY-OPEN"),
        "{out}{}",
        err(&o)
    );
    assert_eq!(out.matches("unshare-denied").count(), 3, "{out}");
    let o = env.sh("tess", "unshare -Ur true 2>/dev/null && echo NESTED; mount -t tmpfs none /tmp 2>/dev/null && echo MOUNTED; echo done");
    assert_eq!(text(&o).trim(), "done");
}

#[test]
fn bad_input_is_refused_before_anything_starts() {
    let (env, _) = Env::new(&["tess"]);
    // Missing workspace.
    let o = env.run("tess", &["--workspace", "/nonexistent/ws"], &["/bin/true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("--workspace"), "{}", err(&o));
    // Unknown instance: nothing is created for it.
    let o = env.run("nobody-here", &[], &["/bin/true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("not hired"), "{}", err(&o));
    assert!(!env.state.join("homes/nobody-here").exists());
    // A uid that belongs to an existing account: root and nobody.
    // The whole config is refused at load while it holds one: each is tried alone.
    let good = std::fs::read_to_string(&env.cfg).unwrap();
    for (name, uid) in [("rooty", 0u32), ("nob", 65534)] {
        let cfg = good.clone() + &format!("  {name}: {{role: probe, uid: {uid}}}\n");
        std::fs::write(&env.cfg, cfg).unwrap();
        let o = env.run(name, &[], &["/bin/true"]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", err(&o));
        assert!(
            err(&o).contains(&format!("instances.{name}.uid")),
            "{}",
            err(&o)
        );
        assert!(!env.state.join("homes").join(name).exists());
    }
    std::fs::write(&env.cfg, &good).unwrap();
    // A program that does not exist: the jail reports the failing step, exit 2.
    let o = env.run("tess", &[], &["no-such-program-xyz"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("exec agent program"), "{}", err(&o));
    // For an agent role the program is looked up before anything starts (its exec set).
    let cfg = std::fs::read_to_string(&env.cfg).unwrap() + "  carl: {role: code}\n";
    std::fs::write(&env.cfg, cfg).unwrap();
    let runs = || std::fs::read_dir(env.state.join("runs")).map_or(0, |d| d.count());
    let before = runs();
    let o = env
        .cmd_role("code", "carl", &[], &["no-such-program-xyz"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(err(&o).contains("no such agent program"), "{}", err(&o));
    assert_eq!(runs(), before, "a refused launch left a run directory");
}

fn shipped_role(name: &str) -> airlock::role::LoadedRole {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("roles")
        .join(name);
    airlock::role::load_role_dir(&dir).unwrap()
}

/// A run of the shipped `code` role (an agent, so its program runs contained) whose agent
/// is the scripted MCP client, running in-process probes (`{"js": ...}` steps).
fn agent_probe(env: &Env, role: &str, instance: &str, steps: serde_json::Value) -> Output {
    let argv = common::mcp_agent(&steps);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    env.cmd_role(role, instance, &[], &argv).output().unwrap()
}

fn probe_value(o: &Output, step: usize) -> serde_json::Value {
    let lines = common::agent_lines(o);
    common::step(&lines, step)["value"].clone()
}

#[test]
fn the_brief_and_the_claude_configuration_are_in_the_jail() {
    use airlock::policy::agent_config::{self, GatewayEndpoints};
    let (env, _) = Env::hire(&[("tess", "code")]);
    let o = agent_probe(
        &env,
        "code",
        "tess",
        serde_json::json!([{"js": "return ['/etc/claude-code/managed-settings.json', '/etc/claude-code/managed-mcp.json', '/etc/airlock/brief.md'].map((f) => fs.readFileSync(f, 'utf8')).concat([process.env.CODEX_HOME || 'unset', process.env.AIRLOCK_GATEWAY]);"}]),
    );
    assert_ok(&o);
    let v = probe_value(&o, 0);
    let got = |i: usize| v[i].as_str().unwrap().to_string();
    let loaded = shipped_role("code");
    // Exactly what agent_config generates for this run (its gateway's endpoints).
    let gateway = GatewayEndpoints::at(&airlock::sandbox::env::gateway_url(), &loaded.role);
    let settings: serde_json::Value = serde_json::from_str(&got(0)).unwrap();
    assert_eq!(settings["permissions"]["defaultMode"], "dontAsk");
    assert_eq!(
        settings,
        agent_config::claude_settings(&loaded.role, &gateway).unwrap()
    );
    let mcp: serde_json::Value = serde_json::from_str(&got(1)).unwrap();
    assert_eq!(
        mcp,
        agent_config::claude_mcp_config(&loaded.role, &gateway).unwrap()
    );
    // The brief, then the role's floors (seed 000).
    assert_eq!(
        got(2),
        airlock::policy::brief::with_floors(&loaded.brief_text, &loaded.role.floors)
    );
    assert_eq!(got(3), "unset");
    assert_eq!(got(4), airlock::sandbox::env::gateway_url());
    assert_eq!(
        mcp["mcpServers"]["airlock"]["url"],
        format!("{}/mcp/airlock", airlock::sandbox::env::gateway_url())
    );
}

#[test]
fn the_agent_cannot_change_its_configuration_or_brief() {
    let (env, _) = Env::hire(&[("tess", "code")]);
    let js = r#"
const files = ['/etc/claude-code/managed-settings.json', '/etc/claude-code/managed-mcp.json', '/etc/airlock/brief.md'];
const r = {};
for (const f of files) {
  const st = fs.statSync(f);
  r[f] = {
    owner: `${st.uid}:${st.gid}`, mode: (st.mode & 0o7777).toString(8),
    write: try_(() => fs.writeFileSync(f, 'x')), append: try_(() => fs.appendFileSync(f, 'x')),
    unlink: try_(() => fs.unlinkSync(f)), chmod: try_(() => fs.chmodSync(f, 0o666)),
    rename: try_(() => fs.renameSync(f, f + '.x')), truncate: try_(() => fs.truncateSync(f, 0)),
  };
}
for (const d of ['/etc/claude-code', '/etc/airlock', '/etc/codex']) {
  r[d] = { create: try_(() => fs.writeFileSync(d + '/new', 'x')), mkdir: try_(() => fs.mkdirSync(d + '/sub')) };
  try { const st = fs.statSync(d); r[d].owner = `${st.uid}:${st.gid}`; r[d].mode = (st.mode & 0o7777).toString(8); } catch (e) { r[d].owner = e.code; }
}
r.link = try_(() => fs.symlinkSync('/tmp/x', '/etc/claude-code/managed-settings.d'));
r.still = fs.readFileSync(files[0], 'utf8')[0];
return r;
"#;
    let o = agent_probe(&env, "code", "tess", serde_json::json!([{ "js": js }]));
    assert_ok(&o);
    let v = probe_value(&o, 0);
    for f in [
        "/etc/claude-code/managed-settings.json",
        "/etc/claude-code/managed-mcp.json",
        "/etc/airlock/brief.md",
    ] {
        let r = &v[f];
        assert_eq!(r["owner"], "0:0", "{f}: {r}");
        assert_eq!(r["mode"], "444", "{f}: {r}");
        for op in ["write", "append", "unlink", "chmod", "rename", "truncate"] {
            assert_ne!(r[op], "ok", "{f}: {op} succeeded: {r}");
        }
    }
    for d in ["/etc/claude-code", "/etc/airlock"] {
        assert_eq!(v[d]["owner"], "0:0", "{v}");
        assert_eq!(v[d]["mode"], "755", "{v}");
    }
    for d in ["/etc/claude-code", "/etc/airlock", "/etc/codex"] {
        assert_ne!(v[d]["create"], "ok", "{v}");
        assert_ne!(v[d]["mkdir"], "ok", "{v}");
    }
    assert_ne!(v["link"], "ok", "{v}");
    assert_eq!(v["still"], "{");
}

#[test]
fn a_codex_role_gets_its_managed_config_and_keeps_its_state_at_home() {
    use airlock::policy::agent_config::{self, GatewayEndpoints};
    let (env, _) = Env::hire(&[("rita", "review")]);
    let o = agent_probe(
        &env,
        "review",
        "rita",
        serde_json::json!([{"js": "return [process.env.CODEX_HOME || 'unset', fs.readFileSync('/etc/codex/managed_config.toml', 'utf8'), try_(() => fs.readdirSync('/etc/claude-code')), try_(() => fs.writeFileSync('/etc/codex/managed_config.toml', 'x'))];"}]),
    );
    assert_ok(&o);
    let v = probe_value(&o, 0);
    assert_eq!(v[0], "unset");
    assert_ne!(v[3], "ok", "the managed config is read-only");
    let loaded = shipped_role("review");
    let gateway = GatewayEndpoints::at(&airlock::sandbox::env::gateway_url(), &loaded.role);
    let config = agent_config::codex_config(&loaded.role, &gateway).unwrap();
    assert_eq!(v[1], config);
    assert_eq!(v[2], "ENOENT");
}

#[test]
fn a_brief_of_a_mebibyte_reaches_the_jail_whole() {
    let (env, _) = Env::hire(&[("tess", "code")]);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let local = env.root.join("roles.local/code");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::copy(repo.join("roles/code/role.yaml"), local.join("role.yaml")).unwrap();
    // Just under the role loader's 1 MiB bound; far over the kernel's 128 KiB per argument.
    let line = "Keep every change small and tested.\n";
    let brief = line.repeat((1 << 20) / line.len());
    std::fs::write(local.join("brief.md"), &brief).unwrap();
    let o = env
        .cmd_role("code", "tess", &[], &["sha256sum", "/etc/airlock/brief.md"])
        .output()
        .unwrap();
    assert_ok(&o);
    use sha2::Digest;
    let floors = shipped_role("code").role.floors;
    let given = airlock::policy::brief::with_floors(&brief, &floors);
    let want: String = sha2::Sha256::digest(given.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(text(&o).starts_with(&want), "{}", text(&o));
}

#[test]
fn the_deadline_kills_the_run() {
    let (env, uids) = Env::new(&["tess"]);
    let start = Instant::now();
    let o = env.run("tess", &["--max-seconds", "2"], &["/bin/sleep", "30"]);
    let took = start.elapsed();
    assert_eq!(o.status.code(), Some(128 + 15), "{}", err(&o));
    assert!(err(&o).contains("deadline"), "{}", err(&o));
    assert!(took < Duration::from_secs(20), "the run was not stopped");
    assert!(pids_of_uid(uids[0]).is_empty());
}

#[test]
fn workspace_given_is_mounted_read_write_at_its_path() {
    let (env, uids) = Env::new(&["tess"]);
    let ws = env.root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    nix::unistd::chown(
        &ws,
        Some(nix::unistd::Uid::from_raw(uids[0])),
        Some(nix::unistd::Gid::from_raw(uids[0])),
    )
    .unwrap();
    let o = env.run(
        "tess",
        &["--workspace", ws.to_str().unwrap()],
        &["/bin/sh", "-c", "pwd; echo made > out.txt"],
    );
    assert_ok(&o);
    assert_eq!(text(&o).trim(), ws.to_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(ws.join("out.txt")).unwrap(),
        "made\n"
    );
    let _ = std::io::stdout().flush();
    let _: &Path = &env.state;
}

// ------------------------------------------------ airlock-jail run directly (no launcher)

/// Uids for runs that bypass airlockctl, apart from the ones `Env` hands out.
static NEXT_DIRECT_UID: AtomicU32 = AtomicU32::new(0);

/// A run spec for `airlock-jail` with its own uid, home and workspace.
struct Direct {
    _dir: tempfile::TempDir,
    spec: airlock::sandbox::RunSpec,
}

impl Direct {
    fn new(argv: &[&str]) -> Direct {
        let uid = 1_880_097_000
            + (std::process::id() % 200) * 20
            + NEXT_DIRECT_UID.fetch_add(1, Ordering::SeqCst);
        Direct::with_uid(argv, uid)
    }

    /// Another run of the same instance (same uid), with its own home and workspace.
    fn with_uid(argv: &[&str], uid: u32) -> Direct {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let (home, ws) = (dir.path().join("home"), dir.path().join("ws"));
        for d in [&home, &ws] {
            std::fs::create_dir(d).unwrap();
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
            nix::unistd::chown(
                d,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(uid)),
            )
            .unwrap();
        }
        static RUN: AtomicU32 = AtomicU32::new(0);
        let n = RUN.fetch_add(1, Ordering::SeqCst);
        let spec = airlock::sandbox::RunSpec {
            run_id: format!("r-direct-{}-{n}", std::process::id()),
            role: "code".into(),
            instance: "tess".into(),
            uid,
            gid: uid,
            home,
            workspace: ws,
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            hide: Vec::new(),
            connect_tcp: Vec::new(),
            limits: airlock::sandbox::spec::Limits {
                max_procs: 64,
                tmp_bytes: 8 << 20,
                ..Default::default()
            },
            cgroup_parent: airlock::sandbox::limits::prepare_parent(),
            files: Vec::new(),
            gateway: false,
            exec: None,
            stdio: false,
            tty: false,
            disks: Vec::new(),
            image: None,
            home_state: None,
        };
        Direct { _dir: dir, spec }
    }

    /// The run's cgroup directories on the host (each must be gone after the run): v2,
    /// and the v1 pids and memory hierarchies where they are mounted.
    fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let parent = self
            .spec
            .cgroup_parent
            .as_ref()
            .expect("this host must offer a writable cgroup v2 directory for runs");
        let mut v = vec![parent.join(&self.spec.run_id)];
        for c in ["pids", "memory", "cpu"] {
            if let Some(p) = airlock::sandbox::limits::v1_parent(c) {
                v.push(p.join(&self.spec.run_id));
            }
        }
        // Made only where the IO scheduler weighs (BFQ or CFQ).
        if let Some(p) = airlock::sandbox::limits::v1_parent("blkio") {
            let d = p.join(&self.spec.run_id);
            if d.is_dir() {
                v.push(d);
            }
        }
        v
    }

    fn assert_cgroups_removed(&self) {
        for d in self.cgroup_dirs() {
            assert!(
                !d.exists(),
                "the run's cgroup {} was left behind",
                d.display()
            );
        }
    }

    fn spec_file(&self) -> PathBuf {
        let p = self._dir.path().join("spec.json");
        std::fs::write(&p, serde_json::to_vec(&self.spec).unwrap()).unwrap();
        p
    }

    /// `airlock-jail` with the spec on stdin and the status lines on stderr.
    fn jail(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_airlock-jail"));
        c.args(extra)
            .stdin(std::fs::File::open(self.spec_file()).unwrap())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

/// The helper's output, or a failure (after SIGKILLing the helper, which takes the run
/// with it) if it has not exited within `limit`: a run that is never stopped fails the test
/// instead of hanging it.
fn output_within(mut child: std::process::Child, limit: Duration) -> Output {
    let ended = eventually(limit, || child.try_wait().unwrap().is_some());
    if !ended {
        let _ = child.kill();
    }
    let o = child.wait_with_output().unwrap();
    assert!(ended, "the run was not stopped: {}", err(&o));
    o
}

/// Wait (bounded) until `cond` holds; false if it never did.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

#[test]
fn the_helper_enforces_the_spec_deadline_without_a_launcher_watcher() {
    let mut d = Direct::new(&["/bin/sh", "-c", "(setsid sleep 120 &); sleep 60"]);
    d.spec.limits.deadline_ms = Some(1500);
    d.spec.limits.grace_ms = Some(500);
    // The test is the launcher here, and it has no deadline watcher at all.
    let o = output_within(d.jail(&[]).spawn().unwrap(), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(128 + 15), "{}", err(&o));
    assert!(err(&o).contains("deadline 1500 ms"), "{}", err(&o));
    assert!(
        pids_of_uid(d.spec.uid).is_empty(),
        "processes of the run survived"
    );
}

/// A run without a gateway (a hosted MCP server's) sees pid 1's /proc, with its masks
/// (/proc/keys and the like, bound over from /dev/null): each is read-only like the /proc
/// it covers. A writable one was a writable mount outside the run's writable places, which
/// a kernel whose Landlock cannot refuse truncation (Debian 12's 6.1) made the run refuse.
#[test]
fn the_masks_over_proc_entries_are_read_only() {
    let d = Direct::new(&[
        "/bin/sh",
        "-c",
        "while read -r _ _ _ _ mp opts _; do case \"$mp\" in /proc/*) echo \"$mp $opts\";; esac; done < /proc/self/mountinfo; cat /proc/keys; echo read-keys",
    ]);
    let o = output_within(d.jail(&[]).spawn().unwrap(), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let out = text(&o);
    let masks: Vec<&str> = out.lines().filter(|l| l.starts_with("/proc/")).collect();
    // This host's /proc/keys is readable by others (so it is masked), as Debian's is.
    let keys_masked = std::fs::metadata("/proc/keys")
        .is_ok_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o004 != 0);
    if keys_masked {
        assert!(masks.iter().any(|l| l.starts_with("/proc/keys ")), "{out}");
    }
    for m in &masks {
        let opts = m.split(' ').nth(1).unwrap_or("");
        assert!(opts.split(',').any(|o| o == "ro"), "a writable mask: {m}");
    }
    // Masked, still readable: empty.
    assert!(out.ends_with("read-keys\n"), "{out}");
}

#[test]
fn the_helper_removes_the_run_cgroup_itself() {
    let d = Direct::new(&[
        "/bin/sh",
        "-c",
        "(setsid sleep 300 &); (nohup sleep 301 &); exit 3",
    ]);
    let o = output_within(d.jail(&[]).spawn().unwrap(), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(
        pids_of_uid(d.spec.uid).is_empty(),
        "processes of the run survived"
    );
    d.assert_cgroups_removed();
}

#[test]
fn the_grace_ends_with_sigkill_when_the_agent_ignores_sigterm() {
    let mut d = Direct::new(&["/bin/sh", "-c", "trap '' TERM; while :; do sleep 1; done"]);
    d.spec.limits.deadline_ms = Some(500);
    d.spec.limits.grace_ms = Some(500);
    let o = output_within(d.jail(&[]).spawn().unwrap(), Duration::from_secs(30));
    // Pid 1 forwards SIGTERM, the agent ignores it; SIGKILL of pid 1 ends the run.
    assert_eq!(o.status.code(), Some(128 + 9), "{}", err(&o));
    assert!(
        pids_of_uid(d.spec.uid).is_empty(),
        "processes of the run survived"
    );
}

/// Start `airlock-jail` under a throwaway `sh` launcher (so the test can SIGKILL the
/// launcher) and wait until the agent runs. Returns the launcher.
fn start_under_sh_launcher(d: &Direct, extra: &str) -> std::process::Child {
    let spec = d.spec_file();
    let script = format!("\"$0\" {extra} < \"$1\"; echo helper-exited");
    let launcher = Command::new("/bin/sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_airlock-jail")])
        .arg(&spec)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || !pids_of_uid(d.spec.uid)
            .is_empty()),
        "the run never started"
    );
    launcher
}

#[test]
fn a_run_dies_with_its_sigkilled_launcher() {
    let d = Direct::new(&["/bin/sh", "-c", "(setsid sleep 300 &); sleep 300"]);
    let mut launcher = start_under_sh_launcher(&d, "");
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || pids_of_uid(d.spec.uid)
            .is_empty()),
        "the run outlived its SIGKILLed launcher"
    );
    assert!(
        eventually(Duration::from_secs(10), || d
            .cgroup_dirs()
            .iter()
            .all(|c| !c.exists())),
        "the run's cgroup outlived its SIGKILLed launcher"
    );
}

#[test]
fn a_run_dies_when_its_lifeline_closes() {
    let d = Direct::new(&["/bin/sh", "-c", "(setsid sleep 300 &); sleep 300"]);
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let r_raw = std::os::fd::AsRawFd::as_raw_fd(&r);
    let mut c = d.jail(&["--lifeline-fd", "5"]);
    // SAFETY: only dup2 between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut c, move || {
            if libc::dup2(r_raw, 5) != 5 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = c.spawn().unwrap();
    drop(r);
    let started = eventually(Duration::from_secs(20), || {
        !pids_of_uid(d.spec.uid).is_empty()
    });
    if !started {
        // Say why: the helper's own report, if it has exited.
        let exited = child.try_wait().unwrap();
        drop(w);
        let o = output_within(child, Duration::from_secs(10));
        panic!(
            "the run never started (helper exited early: {exited:?}):\n{}",
            err(&o)
        );
    }
    // The launcher (this test) stays alive and only drops its end of the lifeline.
    drop(w);
    let o = output_within(child, Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(128 + 9), "{}", err(&o));
    assert!(err(&o).contains("lifeline fd"), "{}", err(&o));
    assert!(
        pids_of_uid(d.spec.uid).is_empty(),
        "the run outlived its lifeline"
    );
}

#[test]
fn the_process_limit_is_per_run_not_per_uid() {
    // Holds 40 processes of the uid, then a second run of the same instance forks 40 more:
    // with a per-uid RLIMIT_NPROC of 64 the second run would stop near 24.
    let fork40 = r#"
import os, sys, time
n = 0
for _ in range(40):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(float(sys.argv[1])); os._exit(0)
    n += 1
print('forked', n, flush=True)
time.sleep(float(sys.argv[1]))
"#;
    let a = Direct::new(&["/usr/bin/python3", "-c", fork40, "30"]);
    let holder = a.jail(&[]).spawn().unwrap();
    assert!(
        eventually(Duration::from_secs(20), || pids_of_uid(a.spec.uid).len()
            >= 41),
        "the first run never held its processes"
    );
    let b = Direct::with_uid(&["/usr/bin/python3", "-c", fork40, "0"], a.spec.uid);
    let o = output_within(b.jail(&[]).spawn().unwrap(), Duration::from_secs(30));
    assert_ok(&o);
    assert_eq!(text(&o).trim(), "forked 40", "{}", err(&o));
    assert!(err(&o).contains("process limit: per run"), "{}", err(&o));
    // A stop request to the helper: forwarded to the run, which ends and is cleaned up.
    kill(Pid::from_raw(holder.id() as i32), Signal::SIGTERM).unwrap();
    let o = output_within(holder, Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(128 + 15), "{}", err(&o));
    assert!(
        pids_of_uid(a.spec.uid).is_empty(),
        "the first run left processes"
    );
    a.assert_cgroups_removed();
    b.assert_cgroups_removed();
}

#[test]
fn the_memory_limit_holds_for_the_heap_and_for_tmpfs() {
    // One jail per way of taking memory: the kernel's OOM killer picks its victim among the
    // run's processes as it sees fit (tmpfs pages belong to no process), so a shell running
    // all three could be the one killed and the later steps would never run.
    for (what, cmd) in [
        ("heap", "b = bytearray(256 << 20); print(len(b))"),
        // A MiB at a time: only the files grow.
        (
            "shm",
            "f = open('/dev/shm/fill', 'wb')\nfor _ in range(200): f.write(bytes(1 << 20))",
        ),
        (
            "tmp",
            "f = open('/tmp/fill', 'wb')\nfor _ in range(200): f.write(bytes(1 << 20))",
        ),
    ] {
        let mut d = Direct::new(&["/usr/bin/python3", "-c", cmd]);
        d.spec.limits.memory_bytes = Some(64 << 20);
        // The tmpfs size bounds alone would allow the writes: only the memory limit stops
        // them.
        d.spec.limits.tmp_bytes = 512 << 20;
        d.spec.limits.shm_bytes = 512 << 20;
        let o = output_within(d.jail(&[]).spawn().unwrap(), Duration::from_secs(60));
        assert!(err(&o).contains("memory limit: cgroup"), "{}", err(&o));
        // Refused (MemoryError, ENOMEM) or killed: never done.
        assert!(!o.status.success(), "{what}: {}{}", text(&o), err(&o));
        d.assert_cgroups_removed();
    }
}

#[test]
fn a_memory_limit_without_a_memory_controller_refuses_the_run() {
    // A private mount namespace where the v1 memory hierarchy is not mounted: with the v2
    // hierarchy holding no memory controller either, nothing can enforce the limit.
    let hide_memory = |d: &Direct| -> Output {
        let spec = d.spec_file();
        let o = Command::new("unshare")
            .args(["-m", "--propagation", "private", "/bin/sh", "-c"])
            .arg("umount /sys/fs/cgroup/memory || exit 99; exec \"$0\" < \"$1\"")
            .arg(env!("CARGO_BIN_EXE_airlock-jail"))
            .arg(&spec)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_ne!(
            o.status.code(),
            Some(99),
            "could not hide the memory hierarchy"
        );
        o
    };
    let marker = |d: &Direct| d.spec.workspace.join("ran");
    let mut d = Direct::new(&["/bin/sh", "-c", "touch \"$AIRLOCK_WORKSPACE/ran\""]);
    d.spec.limits.memory_bytes = Some(256 << 20);
    let o = hide_memory(&d);
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert!(
        err(&o).contains("fail closed: memory limit requested")
            && err(&o).contains("limits.memory_bytes: null"),
        "{}",
        err(&o)
    );
    assert!(
        !marker(&d).exists(),
        "the agent ran without its memory limit"
    );
    d.assert_cgroups_removed();
    // Asking for no memory limit runs, and the run log says so.
    d.spec.limits.memory_bytes = None;
    let o = hide_memory(&d);
    assert_ok(&o);
    assert!(err(&o).contains("memory limit: none"), "{}", err(&o));
    assert!(marker(&d).exists());
    d.assert_cgroups_removed();
}

#[test]
fn after_a_sigkilled_helper_the_launcher_backstop_finds_every_run_cgroup() {
    use airlock::sandbox::limits::RunCgroups;
    let d = Direct::new(&["/bin/sleep", "300"]);
    let mut helper = d.jail(&[]).spawn().unwrap();
    assert!(
        eventually(Duration::from_secs(20), || !pids_of_uid(d.spec.uid)
            .is_empty()),
        "the run never started"
    );
    helper.kill().unwrap();
    let _ = helper.wait();
    // Pid 1 dies with the helper (its parent-death signal), taking the run with it.
    assert!(
        eventually(Duration::from_secs(10), || pids_of_uid(d.spec.uid)
            .is_empty()),
        "the run outlived its SIGKILLed helper"
    );
    let found = RunCgroups::existing(d.spec.cgroup_parent.as_deref(), &d.spec.run_id);
    assert_eq!(
        found.dirs,
        d.cgroup_dirs(),
        "not every run cgroup was found"
    );
    found.kill_and_remove().unwrap();
    d.assert_cgroups_removed();
}

/// Shell scripts and many tools write to `/dev/stdout`, `/dev/stderr` or `/proc/self/fd/N`,
/// which reopens the run's output pipes: the agent may, as they are handed to the instance.
/// A file the launcher passed as stdout stays the launcher's.
#[test]
fn the_agent_can_reopen_its_output_pipes_and_nothing_else_changes_hands() {
    let (env, _) = Env::new(&["tess"]);
    let o = env.sh(
        "tess",
        "echo out-dev > /dev/stdout; echo err-dev > /dev/stderr; echo via-proc | tee /proc/self/fd/2 >/dev/null",
    );
    assert_ok(&o);
    assert!(text(&o).contains("out-dev"), "{}", text(&o));
    assert!(
        err(&o).contains("err-dev") && err(&o).contains("via-proc"),
        "{}",
        err(&o)
    );

    let d = Direct::new(&[
        "/bin/sh",
        "-c",
        "echo into-file > /dev/stdout || echo refused >&2",
    ]);
    let out = d._dir.path().join("stdout");
    let file = std::fs::File::create(&out).unwrap();
    let before = file.metadata().unwrap();
    let o = output_within(
        d.jail(&[]).stdout(file).spawn().unwrap(),
        Duration::from_secs(30),
    );
    assert_ok(&o);
    use std::os::unix::fs::MetadataExt;
    let after = std::fs::metadata(&out).unwrap();
    assert_eq!(
        (after.uid(), after.gid(), after.mode()),
        (before.uid(), before.gid(), before.mode()),
        "the launcher's stdout file changed hands"
    );
    assert!(err(&o).contains("refused"), "{}", err(&o));
}

/// Pid 1 and the agent are in every run cgroup, however pid 1 got there: born in the v2
/// one (a helper started ahead), moved into it by the helper (a helper given its spec
/// only), and moving itself into the v1 ones.
#[test]
fn pid_1_and_the_agent_are_in_every_run_cgroup() {
    for ahead in [false, true] {
        let d = Direct::new(&["/bin/sleep", "300"]);
        let mut extra = Vec::new();
        if ahead {
            extra.extend(["--run-id".to_string(), d.spec.run_id.clone()]);
            if let Some(p) = &d.spec.cgroup_parent {
                extra.extend(["--cgroup-parent".to_string(), p.display().to_string()]);
            }
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let mut helper = d.jail(&extra).spawn().unwrap();
        assert!(
            eventually(Duration::from_secs(20), || !pids_of_uid(d.spec.uid)
                .is_empty()),
            "the run never started (ahead: {ahead})"
        );
        let agent = pids_of_uid(d.spec.uid)[0];
        let stat = std::fs::read_to_string(format!("/proc/{agent}/stat")).unwrap();
        // The field after the parenthesised command name: state, then the parent's pid.
        let pid1: i32 = stat
            .rsplit(") ")
            .next()
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        for dir in d.cgroup_dirs().iter().filter(|d| d.exists()) {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
            let procs: Vec<i32> = procs.lines().map(|l| l.trim().parse().unwrap()).collect();
            assert!(
                procs.contains(&pid1) && procs.contains(&agent),
                "{}: pid 1 ({pid1}) and the agent ({agent}) must be in it, found {procs:?} (ahead: {ahead})",
                dir.display()
            );
        }
        helper.kill().unwrap();
        let _ = helper.wait();
        assert!(
            eventually(Duration::from_secs(10), || pids_of_uid(d.spec.uid)
                .is_empty()),
            "the run outlived its SIGKILLed helper"
        );
        airlock::sandbox::limits::RunCgroups::existing(
            d.spec.cgroup_parent.as_deref(),
            &d.spec.run_id,
        )
        .kill_and_remove()
        .unwrap();
    }
}

#[test]
fn a_workspace_inside_the_instance_home_is_refused_before_root_walks_it() {
    // The agent owns its home and may have planted symlinks there in an earlier run; root
    // must never create or bind the workspace's mount point through them.
    let mut d = Direct::new(&["/bin/sh", "-c", "touch \"$AIRLOCK_WORKSPACE/ran\""]);
    let ws = d.spec.home.join("proj");
    std::fs::create_dir(&ws).unwrap();
    let victim = d._dir.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::os::unix::fs::symlink(&victim, d.spec.home.join("link")).unwrap();
    d.spec.workspace = ws.clone();
    let o = output_within(d.jail(&[]).spawn().unwrap(), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert!(
        err(&o).contains("workspace must not be at or under the instance's home"),
        "{}",
        err(&o)
    );
    assert!(!ws.join("ran").exists(), "the run started");
    // And a workspace that contains the home (overlapping binds).
    let mut d = Direct::new(&["/bin/true"]);
    let outer = d._dir.path().to_path_buf();
    d.spec.workspace = outer;
    let o = output_within(d.jail(&[]).spawn().unwrap(), Duration::from_secs(30));
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert!(
        err(&o).contains("must not contain the instance's home"),
        "{}",
        err(&o)
    );
}

/// The launcher is multi-threaded and holds the write end of the helper's lifeline; when it
/// is SIGKILLed mid-run, the helper kills the whole run on its own.
#[test]
fn a_run_dies_with_its_sigkilled_standalone_launcher() {
    let (env, uids) = Env::new(&["tess"]);
    let mut launcher = env
        .cmd("tess", &[], &["/bin/sh", "-c", "sleep 100 & sleep 100"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        pids_of_uid(uids[0]).len() >= 2
    });
    assert!(started, "the run did not start");
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    let gone = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        pids_of_uid(uids[0]).is_empty()
    });
    assert!(gone, "the run outlived its SIGKILLed launcher");
}

/// A helper started ahead of its run (`--run-id`, as airlockd's standby and standalone
/// launches start it): it makes the run's cgroups and moves its pid 1 in while the spec is
/// on its way, runs the spec it was started for, refuses one for another run, and leaves
/// no cgroup behind either way.
#[test]
fn a_helper_started_ahead_runs_its_own_run_only() {
    let start_ahead = |d: &Direct, run_id: &str| -> std::process::Child {
        let mut args = vec!["--run-id".to_string(), run_id.to_string()];
        if let Some(p) = &d.spec.cgroup_parent {
            args.extend(["--cgroup-parent".to_string(), p.display().to_string()]);
        }
        Command::new(env!("CARGO_BIN_EXE_airlock-jail"))
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let d = Direct::new(&["/bin/sh", "-c", "cat /proc/self/cgroup; echo ran"]);
    let spec = std::fs::read(d.spec_file()).unwrap();

    let mut child = start_ahead(&d, &d.spec.run_id);
    // Its cgroups exist (pid 1 is in them) before the spec is sent.
    let first = d.cgroup_dirs()[0].clone();
    assert!(
        eventually(Duration::from_secs(10), || {
            std::fs::read_to_string(first.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())
        }),
        "no pid 1 in {} before the spec came",
        first.display()
    );
    child.stdin.take().unwrap().write_all(&spec).unwrap();
    let o = output_within(child, Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(text(&o).contains("ran"), "{}{}", text(&o), err(&o));
    assert!(err(&o).contains("from the spec's arrival"), "{}", err(&o));
    d.assert_cgroups_removed();

    // A cgroup parent outside the cgroup file system is refused before the helper makes
    // anything (it would create the run's cgroup there as root before any spec came).
    let outside = d._dir.path().join("not-a-cgroup");
    std::fs::create_dir(&outside).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_airlock-jail"))
        .args(["--run-id", "r-outside", "--cgroup-parent"])
        .arg(&outside)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        !outside.join("r-outside").exists(),
        "the helper made a directory outside /sys/fs/cgroup"
    );

    // Started for another run: the spec is refused and nothing runs.
    let mut child = start_ahead(&d, "r-someone-else");
    child.stdin.take().unwrap().write_all(&spec).unwrap();
    let o = output_within(child, Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert!(err(&o).contains("another run"), "{}", err(&o));
    assert!(!text(&o).contains("ran"));
    d.assert_cgroups_removed();
    let other = d.cgroup_dirs()[0].with_file_name("r-someone-else");
    assert!(!other.exists(), "{} was left behind", other.display());
}

/// The whole battery in one command on the command side (a workflow role's command runs
/// there, as the bash tool's commands do; tests/real_agents.rs sends it through the bash
/// tool): every class holds, and the daemon it leaves does not outlive the run.
#[test]
fn the_escape_battery_holds_on_the_command_side() {
    let (env, uids) = Env::new(&["tess"]);
    let ws = env.root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    common::chown_tree(&ws, uids[0]);
    common::battery_into(&ws, uids[0]);
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port().to_string();
    let marker = format!("m{}", std::process::id());
    let state = env.state.display().to_string();
    let cfg = env.cfg.display().to_string();
    let battery = common::battery_argv(&port, &state, &cfg, &marker);
    let argv: Vec<&str> = battery.iter().map(String::as_str).collect();
    let o = env.run("tess", &["--workspace", ws.to_str().unwrap()], &argv);
    assert_ok(&o);
    common::assert_battery_held(&text(&o), &[]);
    assert!(
        !common::battery_daemon_alive(&marker) && pids_of_uid(uids[0]).is_empty(),
        "the battery's daemon (or another process of the instance uid) outlived the run"
    );
}
