//! Real tests of the jail's Landlock and seccomp layers (run as root).
//!
//! Both layers bind the calling thread for good, so every scenario runs in a fresh copy of
//! this test binary: the test re-executes itself with `--exact <name>` and an environment
//! variable naming the scenario; the copy runs the body and exits 0 or prints why not and
//! exits 1. A marker line proves the copy really ran the body (a misspelt name would make
//! the copy run no test and exit 0).

use std::env;
use std::ffi::CString;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;

use airlock::sandbox::landlock::{self, LandlockRules};
use airlock::sandbox::seccomp::{self, seccomp_mode_of_self};
use airlock::sandbox::seccomp_table;
use airlock::sandbox::SandboxError;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

const SCENARIO: &str = "AIRLOCK_JAIL_FILTERS_SCENARIO";
const MARKER: &str = "airlock-scenario-ran:";

type Outcome = Result<(), String>;

/// In the re-executed copy named `name`: run `body` and exit (never returns). Elsewhere:
/// return at once. Tests call this first, so fixtures are built only in the parent.
fn scenario_entry(name: &str, body: fn() -> Outcome) {
    if env::var(SCENARIO).as_deref() != Ok(name) {
        return;
    }
    println!("{MARKER}{name}");
    let code = match body() {
        Ok(()) => 0,
        Err(why) => {
            eprintln!("scenario {name} failed: {why}");
            1
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// Re-execute this binary for scenario `name` and require that it ran and succeeded.
fn run_isolated(name: &str, envs: &[(&str, String)]) {
    let exe = env::current_exe().unwrap();
    let mut cmd = Command::new(exe);
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(SCENARIO, name);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains(&format!("{MARKER}{name}")),
        "scenario {name} did not run\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        out.status.success(),
        "scenario {name}: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    // Surface what the scenario printed (e.g. the ABI) in `--nocapture` runs.
    for line in stdout.lines().filter(|l| l.starts_with("report: ")) {
        println!("{line}");
    }
}

/// A scenario without fixtures.
fn isolated(name: &str, body: fn() -> Outcome) {
    scenario_entry(name, body);
    run_isolated(name, &[]);
}

fn var(name: &str) -> Result<String, String> {
    env::var(name).map_err(|_| format!("{name} not set"))
}

fn errno_name(e: i32) -> String {
    format!("{} ({e})", nix::errno::Errno::from_raw(e))
}

/// Raw syscall; Ok(return value) or Err(errno).
fn sys(nr: libc::c_long, a: [u64; 6]) -> Result<i64, i32> {
    // SAFETY: callers pass either valid pointers or values the kernel rejects before use.
    let r = unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if r < 0 {
        Err(nix::errno::Errno::last_raw())
    } else {
        Ok(r as i64)
    }
}

fn expect_errno(what: &str, got: Result<i64, i32>, want: i32) -> Outcome {
    match got {
        Err(e) if e == want => Ok(()),
        Err(e) => Err(format!(
            "{what}: expected {}, got {}",
            errno_name(want),
            errno_name(e)
        )),
        Ok(v) => Err(format!(
            "{what}: expected {}, but it succeeded ({v})",
            errno_name(want)
        )),
    }
}

fn set_no_new_privs() -> Outcome {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if r != 0 {
        return Err(format!("no_new_privs: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// What the jail child does before the filter: own session (no controlling terminal, so a
/// filter failure on vhangup or TIOCSTI cannot reach the operator's terminal), then NNP.
fn enter_seccomp() -> Outcome {
    let _ = nix::unistd::setsid();
    set_no_new_privs()?;
    seccomp::install(seccomp::Side::Command)
        .map(drop)
        .map_err(|e| format!("install: {e}"))
}

/// A raw clone(2) that behaves like fork when it succeeds; the new child exits at once.
fn raw_clone(flags: u64) -> Result<i64, i32> {
    let r = sys(libc::SYS_clone, [flags, 0, 0, 0, 0, 0]);
    if r == Ok(0) {
        // SAFETY: in the fresh child, leave without touching shared state.
        unsafe { libc::_exit(0) };
    }
    if let Ok(pid) = r {
        let _ = waitpid(Pid::from_raw(pid as i32), None);
    }
    r
}

/// Namespace flags, listed here independently of the table so a deletion there fails.
const NS_FLAGS: &[(&str, libc::c_int)] = &[
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER),
    ("CLONE_NEWNS", libc::CLONE_NEWNS),
    ("CLONE_NEWPID", libc::CLONE_NEWPID),
    ("CLONE_NEWNET", libc::CLONE_NEWNET),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP),
    ("CLONE_NEWTIME", libc::CLONE_NEWTIME),
];

/// Calls the jail must refuse whatever their arguments (the list), independent of
/// the table, so removing one there fails here.
const MUST_REFUSE: &[&str] = &[
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "kcmp",
    "pidfd_getfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "quotactl",
    "nfsservctl",
    "lookup_dcookie",
    "userfaultfd",
    "name_to_handle_at",
    "open_by_handle_at",
    "syslog",
    "fanotify_init",
    "memfd_secret",
    "move_pages",
    "migrate_pages",
];

#[test]
fn seccomp_table_covers_every_required_call() {
    let names: Vec<&str> = seccomp_table::unconditional()
        .iter()
        .map(|&(n, _)| n)
        .collect();
    let missing: Vec<&&str> = MUST_REFUSE.iter().filter(|n| !names.contains(n)).collect();
    assert!(missing.is_empty(), "not in the deny table: {missing:?}");
    #[cfg(target_arch = "x86_64")]
    for n in ["iopl", "ioperm", "uselib", "_sysctl"] {
        assert!(names.contains(&n), "{n} not in the deny table");
    }
}

// ---------------------------------------------------------------- seccomp

#[test]
fn seccomp_mode_shows_filter_after_install_and_after_exec() {
    isolated(
        "seccomp_mode_shows_filter_after_install_and_after_exec",
        || {
            if seccomp_mode_of_self() != Some(0) {
                return Err(format!("before install: {:?}", seccomp_mode_of_self()));
            }
            enter_seccomp()?;
            if seccomp_mode_of_self() != Some(2) {
                return Err(format!("after install: {:?}", seccomp_mode_of_self()));
            }
            // The filter survives execve, and spawning still works (clone3 falls back).
            let out = Command::new("/bin/sh")
                .args(["-c", "grep '^Seccomp:' /proc/self/status"])
                .output()
                .map_err(|e| format!("spawn: {e}"))?;
            let text = String::from_utf8_lossy(&out.stdout);
            if !text.contains("Seccomp:\t2") {
                return Err(format!("exec'd child reports {text:?}"));
            }
            Ok(())
        },
    );
}

#[test]
fn seccomp_refuses_unshare_of_every_namespace() {
    isolated("seccomp_refuses_unshare_of_every_namespace", || {
        enter_seccomp()?;
        for &(name, flag) in NS_FLAGS {
            let r = sys(libc::SYS_unshare, [flag as u64, 0, 0, 0, 0, 0]);
            expect_errno(&format!("unshare({name})"), r, libc::EPERM)?;
        }
        let r = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER);
        if r != Err(nix::errno::Errno::EPERM) {
            return Err(format!("nix unshare(CLONE_NEWUSER): {r:?}"));
        }
        expect_errno(
            "setns",
            sys(libc::SYS_setns, [0, 0, 0, 0, 0, 0]),
            libc::EPERM,
        )
    });
}

#[test]
fn seccomp_clone3_is_enosys() {
    isolated("seccomp_clone3_is_enosys", || {
        enter_seccomp()?;
        // struct clone_args (v0, 64 bytes) asking for a plain fork with SIGCHLD.
        let mut args = [0u64; 8];
        args[4] = libc::SIGCHLD as u64; // exit_signal
        let r = sys(libc::SYS_clone3, [args.as_mut_ptr() as u64, 64, 0, 0, 0, 0]);
        if r == Ok(0) {
            // SAFETY: unexpected child; leave at once.
            unsafe { libc::_exit(0) };
        }
        expect_errno("clone3", r, libc::ENOSYS)
    });
}

#[test]
fn seccomp_refuses_clone_with_namespace_flags() {
    isolated("seccomp_refuses_clone_with_namespace_flags", || {
        enter_seccomp()?;
        for &(name, flag) in NS_FLAGS {
            let flags = flag as u64 | libc::SIGCHLD as u64;
            expect_errno(&format!("clone({name})"), raw_clone(flags), libc::EPERM)?;
        }
        // High bits set alongside must not hide the flag.
        let sneaky = 0xffff_0000_0000_0000u64 | libc::CLONE_NEWUSER as u64 | 17;
        expect_errno("clone(high|NEWUSER)", raw_clone(sneaky), libc::EPERM)?;
        // The same call without a namespace flag is an ordinary fork and must work.
        match raw_clone(libc::SIGCHLD as u64) {
            Ok(pid) if pid > 0 => Ok(()),
            other => Err(format!("plain clone: {other:?}")),
        }
    });
}

#[test]
fn seccomp_keeps_fork_and_spawn_working() {
    isolated("seccomp_keeps_fork_and_spawn_working", || {
        enter_seccomp()?;
        // SAFETY: the child only calls _exit.
        match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
            ForkResult::Child => unsafe { libc::_exit(7) },
            ForkResult::Parent { child } => match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, 7)) => {}
                other => return Err(format!("forked child: {other:?}")),
            },
        }
        let status = Command::new("/bin/true")
            .status()
            .map_err(|e| format!("spawn /bin/true: {e}"))?;
        if !status.success() {
            return Err(format!("/bin/true: {status:?}"));
        }
        Ok(())
    });
}

#[test]
fn seccomp_refuses_mount() {
    isolated("seccomp_refuses_mount", || {
        enter_seccomp()?;
        // Unfiltered, root would get ENOENT for the missing target.
        let r = nix::mount::mount(
            Some("none"),
            "/nonexistent-airlock-mount-target",
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        );
        if r != Err(nix::errno::Errno::EPERM) {
            return Err(format!("mount: {r:?}"));
        }
        let r = nix::mount::umount2("/", nix::mount::MntFlags::MNT_DETACH);
        if r != Err(nix::errno::Errno::EPERM) {
            return Err(format!("umount2: {r:?}"));
        }
        let r = nix::unistd::chroot("/");
        if r != Err(nix::errno::Errno::EPERM) {
            return Err(format!("chroot: {r:?}"));
        }
        Ok(())
    });
}

#[test]
fn seccomp_refuses_ptrace() {
    isolated("seccomp_refuses_ptrace", || {
        enter_seccomp()?;
        expect_errno(
            "PTRACE_TRACEME",
            sys(
                libc::SYS_ptrace,
                [libc::PTRACE_TRACEME as u64, 0, 0, 0, 0, 0],
            ),
            libc::EPERM,
        )?;
        // A child of our own: unfiltered, attaching to it would succeed as root.
        // SAFETY: the child only calls pause and _exit.
        let child = match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
            ForkResult::Child => unsafe {
                libc::pause();
                libc::_exit(0)
            },
            ForkResult::Parent { child } => child,
        };
        let attach = sys(
            libc::SYS_ptrace,
            [
                libc::PTRACE_ATTACH as u64,
                child.as_raw() as u64,
                0,
                0,
                0,
                0,
            ],
        );
        let seize = sys(
            libc::SYS_ptrace,
            [libc::PTRACE_SEIZE as u64, child.as_raw() as u64, 0, 0, 0, 0],
        );
        let mut local = [0u8; 8];
        let remote = [0u8; 8];
        let liov = libc::iovec {
            iov_base: local.as_mut_ptr().cast(),
            iov_len: 8,
        };
        let riov = libc::iovec {
            iov_base: remote.as_ptr() as *mut libc::c_void,
            iov_len: 8,
        };
        let vm = sys(
            libc::SYS_process_vm_readv,
            [
                child.as_raw() as u64,
                &liov as *const _ as u64,
                1,
                &riov as *const _ as u64,
                1,
                0,
            ],
        );
        let _ = kill(child, Signal::SIGKILL);
        let _ = waitpid(child, None);
        expect_errno("PTRACE_ATTACH", attach, libc::EPERM)?;
        expect_errno("PTRACE_SEIZE", seize, libc::EPERM)?;
        expect_errno("process_vm_readv", vm, libc::EPERM)
    });
}

#[test]
fn seccomp_refuses_io_uring() {
    isolated("seccomp_refuses_io_uring", || {
        enter_seccomp()?;
        let mut params = [0u8; 120]; // struct io_uring_params
        expect_errno(
            "io_uring_setup",
            sys(
                libc::SYS_io_uring_setup,
                [8, params.as_mut_ptr() as u64, 0, 0, 0, 0],
            ),
            libc::EPERM,
        )
    });
}

#[test]
fn seccomp_refuses_bpf() {
    isolated("seccomp_refuses_bpf", || {
        enter_seccomp()?;
        let mut attr = [0u8; 128];
        expect_errno(
            "bpf(BPF_MAP_CREATE)",
            sys(libc::SYS_bpf, [0, attr.as_mut_ptr() as u64, 128, 0, 0, 0]),
            libc::EPERM,
        )
    });
}

#[test]
fn seccomp_refuses_keyrings() {
    isolated("seccomp_refuses_keyrings", || {
        enter_seccomp()?;
        const KEY_SPEC_PROCESS_KEYRING: i64 = -2;
        expect_errno(
            "keyctl(GET_KEYRING_ID)",
            sys(
                libc::SYS_keyctl,
                [0, KEY_SPEC_PROCESS_KEYRING as u64, 1, 0, 0, 0],
            ),
            libc::EPERM,
        )?;
        let kind = CString::new("user").unwrap();
        let desc = CString::new("airlock-test").unwrap();
        let payload = b"x";
        expect_errno(
            "add_key",
            sys(
                libc::SYS_add_key,
                [
                    kind.as_ptr() as u64,
                    desc.as_ptr() as u64,
                    payload.as_ptr() as u64,
                    1,
                    KEY_SPEC_PROCESS_KEYRING as u64,
                    0,
                ],
            ),
            libc::EPERM,
        )?;
        expect_errno(
            "request_key",
            sys(
                libc::SYS_request_key,
                [kind.as_ptr() as u64, desc.as_ptr() as u64, 0, 0, 0, 0],
            ),
            libc::EPERM,
        )
    });
}

#[test]
fn seccomp_refuses_perf_event_open() {
    isolated("seccomp_refuses_perf_event_open", || {
        enter_seccomp()?;
        // struct perf_event_attr: type=PERF_TYPE_SOFTWARE, size=128, config=CPU_CLOCK.
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&1u32.to_ne_bytes());
        attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
        expect_errno(
            "perf_event_open",
            sys(
                libc::SYS_perf_event_open,
                [attr.as_mut_ptr() as u64, 0, u64::MAX, u64::MAX, 0, 0],
            ),
            libc::EPERM,
        )
    });
}

#[test]
fn seccomp_refuses_tiocsti_but_not_other_ioctls() {
    isolated("seccomp_refuses_tiocsti_but_not_other_ioctls", || {
        let _ = nix::unistd::setsid();
        let pty = nix::pty::openpty(None, None).map_err(|e| format!("openpty: {e}"))?;
        let slave = pty.slave.as_raw_fd();
        let master = pty.master.as_raw_fd();
        let c = b'x';
        let sti = |fd: i32| {
            sys(
                libc::SYS_ioctl,
                [fd as u64, libc::TIOCSTI, &c as *const u8 as u64, 0, 0, 0],
            )
        };
        // Control: root may push input into this pty without the filter.
        if let Err(e) = sti(slave) {
            return Err(format!(
                "control TIOCSTI without filter failed: {}",
                errno_name(e)
            ));
        }
        set_no_new_privs()?;
        seccomp::install(seccomp::Side::Command)
            .map(drop)
            .map_err(|e| format!("install: {e}"))?;
        expect_errno("TIOCSTI on slave", sti(slave), libc::EPERM)?;
        expect_errno("TIOCSTI on master", sti(master), libc::EPERM)?;
        // High bits in the request must not slip past (the kernel uses 32 bits).
        let high = (1u64 << 32) | libc::TIOCSTI;
        expect_errno(
            "TIOCSTI with high bits",
            sys(
                libc::SYS_ioctl,
                [slave as u64, high, &c as *const u8 as u64, 0, 0, 0],
            ),
            libc::EPERM,
        )?;
        let mut sel = [0u8; 8];
        expect_errno(
            "TIOCLINUX",
            sys(
                libc::SYS_ioctl,
                [
                    slave as u64,
                    libc::TIOCLINUX,
                    sel.as_mut_ptr() as u64,
                    0,
                    0,
                    0,
                ],
            ),
            libc::EPERM,
        )?;
        let mut ws = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        sys(
            libc::SYS_ioctl,
            [
                slave as u64,
                libc::TIOCGWINSZ,
                &mut ws as *mut _ as u64,
                0,
                0,
                0,
            ],
        )
        .map_err(|e| format!("TIOCGWINSZ: {}", errno_name(e)))?;
        Ok(())
    });
}

#[test]
fn seccomp_refuses_non_default_personality() {
    isolated("seccomp_refuses_non_default_personality", || {
        enter_seccomp()?;
        let query = sys(libc::SYS_personality, [0xffff_ffff, 0, 0, 0, 0, 0])
            .map_err(|e| format!("personality query: {}", errno_name(e)))?;
        if query != 0 {
            return Err(format!("personality is {query:#x}, expected 0"));
        }
        sys(libc::SYS_personality, [0, 0, 0, 0, 0, 0])
            .map_err(|e| format!("personality(0): {}", errno_name(e)))?;
        const ADDR_NO_RANDOMIZE: u64 = 0x0040000;
        expect_errno(
            "personality(ADDR_NO_RANDOMIZE)",
            sys(libc::SYS_personality, [ADDR_NO_RANDOMIZE, 0, 0, 0, 0, 0]),
            libc::EPERM,
        )
    });
}

/// Socket families the jail must refuse, listed here independently of the table.
const REFUSED_FAMILIES: &[(&str, libc::c_int)] = &[
    ("AF_VSOCK", libc::AF_VSOCK),
    ("AF_PACKET", libc::AF_PACKET),
    ("AF_BLUETOOTH", libc::AF_BLUETOOTH),
    ("AF_ALG", libc::AF_ALG),
    ("AF_KEY", libc::AF_KEY),
    ("AF_RDS", libc::AF_RDS),
    ("AF_TIPC", libc::AF_TIPC),
    ("AF_XDP", libc::AF_XDP),
    ("AF_CAN", libc::AF_CAN),
    ("AF_APPLETALK", libc::AF_APPLETALK),
    ("AF_X25", libc::AF_X25),
    ("AF_LLC", libc::AF_LLC),
    ("AF_PPPOX", libc::AF_PPPOX),
    ("AF_NFC", libc::AF_NFC),
    ("AF_QIPCRTR", 42),
    ("AF_SMC", 43),
    ("AF_MCTP", 45),
    ("unassigned 46", 46),
];

fn close_if_ok(r: Result<i64, i32>) -> Result<i64, i32> {
    if let Ok(fd) = r {
        // SAFETY: closing an fd this scenario just created.
        unsafe { libc::close(fd as i32) };
    }
    r
}

fn raw_socket(family: u64, ty: libc::c_int) -> Result<i64, i32> {
    close_if_ok(sys(libc::SYS_socket, [family, ty as u64, 0, 0, 0, 0]))
}

fn raw_socketpair(family: u64, ty: libc::c_int) -> Result<i64, i32> {
    let mut fds = [-1i32; 2];
    let r = sys(
        libc::SYS_socketpair,
        [family, ty as u64, 0, fds.as_mut_ptr() as u64, 0, 0],
    );
    for fd in fds.into_iter().filter(|fd| *fd >= 0) {
        // SAFETY: closing fds this scenario just created.
        unsafe { libc::close(fd) };
    }
    r
}

#[test]
fn seccomp_refuses_socket_families_outside_the_allowlist() {
    isolated(
        "seccomp_refuses_socket_families_outside_the_allowlist",
        || {
            // Control: without the filter, as root, vsock and packet sockets open here (the
            // hypervisor offers vsock), so EAFNOSUPPORT below can only come from the filter.
            if raw_socket(libc::AF_PACKET as u64, libc::SOCK_RAW).is_err() {
                return Err("control: AF_PACKET does not open even unfiltered".into());
            }
            let vsock_unfiltered = raw_socket(libc::AF_VSOCK as u64, libc::SOCK_STREAM).is_ok();
            enter_seccomp()?;
            for &(name, af) in REFUSED_FAMILIES {
                for ty in [
                    libc::SOCK_STREAM,
                    libc::SOCK_DGRAM,
                    libc::SOCK_RAW,
                    libc::SOCK_SEQPACKET,
                ] {
                    expect_errno(
                        &format!("socket({name}, {ty})"),
                        raw_socket(af as u64, ty),
                        libc::EAFNOSUPPORT,
                    )?;
                }
                expect_errno(
                    &format!("socketpair({name})"),
                    raw_socketpair(af as u64, libc::SOCK_STREAM),
                    libc::EAFNOSUPPORT,
                )?;
            }
            // The kernel reads the family as an int: high bits must not sneak vsock through.
            expect_errno(
                "socket(1<<32 | AF_VSOCK)",
                raw_socket((1u64 << 32) | libc::AF_VSOCK as u64, libc::SOCK_STREAM),
                libc::EAFNOSUPPORT,
            )?;
            // The allowed families still work, also with junk in the upper half.
            for (name, af, ty) in [
                ("AF_UNIX", libc::AF_UNIX, libc::SOCK_STREAM),
                ("AF_INET", libc::AF_INET, libc::SOCK_STREAM),
                ("AF_INET6", libc::AF_INET6, libc::SOCK_STREAM),
                ("AF_NETLINK", libc::AF_NETLINK, libc::SOCK_RAW),
            ] {
                raw_socket(af as u64, ty)
                    .map_err(|e| format!("socket({name}): {}", errno_name(e)))?;
                raw_socket((7u64 << 32) | af as u64, ty)
                    .map_err(|e| format!("socket({name} with high bits): {}", errno_name(e)))?;
            }
            raw_socketpair(libc::AF_UNIX as u64, libc::SOCK_STREAM)
                .map_err(|e| format!("socketpair(AF_UNIX): {}", errno_name(e)))?;
            // Within the allowed families: IPv4/IPv6 only as TCP streams, netlink only route.
            for (name, af, ty) in [
                ("AF_INET, SOCK_DGRAM", libc::AF_INET, libc::SOCK_DGRAM),
                ("AF_INET6, SOCK_DGRAM", libc::AF_INET6, libc::SOCK_DGRAM),
                ("AF_INET, SOCK_RAW", libc::AF_INET, libc::SOCK_RAW),
            ] {
                expect_errno(
                    &format!("socket({name})"),
                    raw_socket(af as u64, ty),
                    libc::EPERM,
                )?;
            }
            // SAFETY: socket(2) with integer arguments; a descriptor made is closed at once.
            let uevent = unsafe {
                libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_DGRAM,
                    libc::NETLINK_KOBJECT_UEVENT,
                )
            };
            if uevent >= 0 {
                // SAFETY: closing the descriptor just made.
                unsafe { libc::close(uevent) };
                return Err("a NETLINK_KOBJECT_UEVENT socket opened".into());
            }
            let e = std::io::Error::last_os_error().raw_os_error();
            if e != Some(libc::EPROTONOSUPPORT) {
                return Err(format!("uevent socket: {e:?}, not EPROTONOSUPPORT"));
            }
            println!("report: vsock opened unfiltered: {vsock_unfiltered}");
            Ok(())
        },
    );
}

/// Junk arguments: unfiltered, these calls fail with EFAULT, EINVAL, EBADF, ESRCH or ENOSYS
/// (checked by the control test below), so EPERM can only come from the filter.
const JUNK: [u64; 6] = [u64::MAX; 6];

#[test]
fn seccomp_refuses_every_listed_syscall() {
    isolated("seccomp_refuses_every_listed_syscall", || {
        enter_seccomp()?;
        let mut wrong = Vec::new();
        for (name, nr) in seccomp_table::unconditional() {
            match sys(nr, JUNK) {
                Err(libc::EPERM) => {}
                other => wrong.push(format!("{name}: {other:?}")),
            }
        }
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(format!("not refused with EPERM: {}", wrong.join(", ")))
        }
    });
}

#[test]
fn seccomp_control_listed_syscalls_are_not_eperm_unfiltered() {
    isolated(
        "seccomp_control_listed_syscalls_are_not_eperm_unfiltered",
        || {
            // Own session so vhangup has no terminal to hang up.
            let _ = nix::unistd::setsid();
            let mut eperm = Vec::new();
            for (name, nr) in seccomp_table::unconditional() {
                if sys(nr, JUNK) == Err(libc::EPERM) {
                    eperm.push(name);
                }
            }
            if eperm.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "EPERM even without the filter (kernel lockdown or an outer \
                     seccomp profile?), so the filter test cannot tell: {eperm:?}"
                ))
            }
        },
    );
}

#[cfg(target_arch = "x86_64")]
#[test]
fn seccomp_x32_calls_get_enosys_and_i386_calls_kill() {
    isolated("seccomp_x32_calls_get_enosys_and_i386_calls_kill", || {
        enter_seccomp()?;
        const X32: libc::c_long = 0x4000_0000;
        expect_errno(
            "x32 unshare",
            sys(
                X32 | libc::SYS_unshare,
                [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0],
            ),
            libc::ENOSYS,
        )?;
        // A 32-bit syscall through int 0x80 carries AUDIT_ARCH_I386: the filter kills.
        // SAFETY: the child only issues the trap (or _exit if it survives).
        match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
            ForkResult::Child => unsafe {
                // i386 getpid = 20.
                std::arch::asm!("int 0x80", inlateout("eax") 20u32 => _, options(nostack));
                libc::_exit(0)
            },
            ForkResult::Parent { child } => match waitpid(child, None) {
                Ok(WaitStatus::Signaled(_, Signal::SIGSYS, _)) => Ok(()),
                other => Err(format!("int 0x80 child: {other:?}")),
            },
        }
    });
}

// ---------------------------------------------------------------- landlock

const DIR: &str = "AIRLOCK_JF_DIR";

fn kernel_abi_at_least(n: i32) -> Outcome {
    let abi = landlock::probe_abi();
    if abi < n {
        return Err(format!(
            "this kernel reports Landlock ABI {abi}; the test needs {n}"
        ));
    }
    Ok(())
}

/// The system directories a dynamically linked /bin/true needs.
fn system_rules() -> LandlockRules {
    let mut rules = LandlockRules::default();
    for p in ["/usr", "/lib", "/lib64", "/bin"] {
        if Path::new(p).exists() {
            rules.read_exec.push(PathBuf::from(p));
        }
    }
    rules.read_only.push(PathBuf::from("/etc"));
    rules
}

fn fs_fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["ro", "rw", "rx", "outside"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    std::fs::write(dir.path().join("ro/data.txt"), "readable").unwrap();
    std::fs::write(dir.path().join("outside/secret.txt"), "hidden").unwrap();
    std::fs::copy("/bin/true", dir.path().join("ro/true")).unwrap();
    std::fs::copy("/bin/true", dir.path().join("rx/true")).unwrap();
    dir
}

fn os_err(what: &str, r: std::io::Result<impl std::fmt::Debug>, want: i32) -> Outcome {
    match r {
        Err(e) if e.raw_os_error() == Some(want) => Ok(()),
        other => Err(format!(
            "{what}: expected {}, got {other:?}",
            errno_name(want)
        )),
    }
}

#[test]
fn landlock_reports_the_kernel_abi() {
    isolated("landlock_reports_the_kernel_abi", || {
        let abi = landlock::probe_abi();
        println!("report: landlock kernel ABI = {abi}");
        kernel_abi_at_least(6)?;
        set_no_new_privs()?;
        let report = landlock::apply(&system_rules()).map_err(|e| format!("apply: {e}"))?;
        println!("report: {report}");
        if report.abi != abi.min(landlock::POLICY_ABI) || !report.net_rules || !report.scoped {
            return Err(format!("unexpected report {report:?} for kernel ABI {abi}"));
        }
        if report.to_string()
            != "landlock abi=6 fs=enforced net=enforced scope=abstract-unix,signal"
        {
            return Err(format!("display: {report}"));
        }
        Ok(())
    });
}

#[test]
fn landlock_confines_files() {
    let body: fn() -> Outcome = || {
        kernel_abi_at_least(3)?;
        let root = PathBuf::from(var(DIR)?);
        let mut rules = system_rules();
        rules.read_only.push(root.join("ro"));
        rules.read_exec.push(root.join("rx"));
        rules.read_write.push(root.join("rw"));
        set_no_new_privs()?;
        landlock::apply(&rules).map_err(|e| format!("apply: {e}"))?;

        std::fs::write(root.join("rw/new.txt"), "ok").map_err(|e| format!("write in rw: {e}"))?;
        std::fs::create_dir(root.join("rw/sub")).map_err(|e| format!("mkdir in rw: {e}"))?;
        std::fs::remove_file(root.join("rw/new.txt")).map_err(|e| format!("unlink in rw: {e}"))?;
        let text = std::fs::read_to_string(root.join("ro/data.txt"))
            .map_err(|e| format!("read in ro: {e}"))?;
        if text != "readable" {
            return Err(format!("read in ro gave {text:?}"));
        }
        os_err(
            "create in ro",
            std::fs::write(root.join("ro/new.txt"), "no"),
            libc::EACCES,
        )?;
        os_err(
            "open ro file for writing",
            std::fs::OpenOptions::new()
                .append(true)
                .open(root.join("ro/data.txt")),
            libc::EACCES,
        )?;
        let c = CString::new(
            root.join("ro/data.txt")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .unwrap();
        // SAFETY: valid NUL-terminated path.
        let r = unsafe { libc::truncate(c.as_ptr(), 0) };
        if r == 0 || nix::errno::Errno::last_raw() != libc::EACCES {
            return Err(format!(
                "truncate in ro: {r}, {}",
                std::io::Error::last_os_error()
            ));
        }
        os_err(
            "mkdir in ro",
            std::fs::create_dir(root.join("ro/sub")),
            libc::EACCES,
        )?;
        os_err(
            "read outside the rules",
            std::fs::read_to_string(root.join("outside/secret.txt")),
            libc::EACCES,
        )?;
        os_err(
            "list outside the rules",
            std::fs::read_dir(root.join("outside")),
            libc::EACCES,
        )?;
        os_err(
            "exec from read_only",
            Command::new(root.join("ro/true")).status(),
            libc::EACCES,
        )?;
        let st = Command::new(root.join("rx/true"))
            .status()
            .map_err(|e| format!("exec from read_exec: {e}"))?;
        if !st.success() {
            return Err(format!("rx/true: {st:?}"));
        }
        Ok(())
    };
    scenario_entry("landlock_confines_files", body);
    let dir = fs_fixture();
    run_isolated(
        "landlock_confines_files",
        &[(DIR, dir.path().display().to_string())],
    );
    // Nothing written where it was not allowed.
    assert!(!dir.path().join("ro/new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("ro/data.txt")).unwrap(),
        "readable"
    );
}

#[test]
fn landlock_missing_path_fails_without_echoing_it() {
    isolated("landlock_missing_path_fails_without_echoing_it", || {
        let mut rules = system_rules();
        rules
            .read_write
            .push(PathBuf::from("/nonexistent-airlock-secret-path"));
        set_no_new_privs()?;
        match landlock::apply(&rules) {
            Err(e @ SandboxError::Invalid { .. }) => {
                let msg = e.to_string();
                if msg.contains("secret") || !msg.contains("read_write[0]") {
                    return Err(format!("message: {msg}"));
                }
                Ok(())
            }
            other => Err(format!("expected Invalid, got {other:?}")),
        }
    });
}

const PORT_OK: &str = "AIRLOCK_JF_PORT_OK";
const PORT_NO: &str = "AIRLOCK_JF_PORT_NO";

#[test]
fn landlock_limits_tcp_to_listed_ports() {
    let body: fn() -> Outcome = || {
        kernel_abi_at_least(4)?;
        let ok: u16 = var(PORT_OK)?.parse().map_err(|_| "port")?;
        let no: u16 = var(PORT_NO)?.parse().map_err(|_| "port")?;
        // A free port to bind, found before the sandbox.
        let bind_port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("probe port: {e}"))?
            .port();
        let mut rules = system_rules();
        rules.connect_tcp.push(ok);
        rules.bind_tcp.push(bind_port);
        set_no_new_privs()?;
        landlock::apply(&rules).map_err(|e| format!("apply: {e}"))?;
        TcpStream::connect(("127.0.0.1", ok)).map_err(|e| format!("allowed port: {e}"))?;
        os_err(
            "connect to unlisted port",
            TcpStream::connect(("127.0.0.1", no)),
            libc::EACCES,
        )?;
        TcpListener::bind(("127.0.0.1", bind_port))
            .map_err(|e| format!("bind listed port: {e}"))?;
        os_err(
            "bind unlisted port",
            TcpListener::bind(("127.0.0.1", no.wrapping_add(1).max(1024))),
            libc::EACCES,
        )
    };
    scenario_entry("landlock_limits_tcp_to_listed_ports", body);
    let allowed = TcpListener::bind("127.0.0.1:0").unwrap();
    let denied = TcpListener::bind("127.0.0.1:0").unwrap();
    let envs = [
        (PORT_OK, allowed.local_addr().unwrap().port().to_string()),
        (PORT_NO, denied.local_addr().unwrap().port().to_string()),
    ];
    run_isolated("landlock_limits_tcp_to_listed_ports", &envs);
    drop((allowed, denied));
}

const ABSTRACT: &str = "AIRLOCK_JF_ABSTRACT";

#[test]
fn landlock_scopes_abstract_unix_sockets() {
    let body: fn() -> Outcome = || {
        kernel_abi_at_least(6)?;
        let name = var(ABSTRACT)?;
        let addr = SocketAddr::from_abstract_name(&name).map_err(|e| e.to_string())?;
        // Control: reachable before the sandbox.
        UnixStream::connect_addr(&addr).map_err(|e| format!("control connect: {e}"))?;
        set_no_new_privs()?;
        landlock::apply(&system_rules()).map_err(|e| format!("apply: {e}"))?;
        os_err(
            "connect to a listener outside the domain",
            UnixStream::connect_addr(&addr),
            libc::EPERM,
        )?;
        // A listener made inside the domain stays reachable.
        let inner_addr =
            SocketAddr::from_abstract_name(format!("{name}-inner")).map_err(|e| e.to_string())?;
        let inner = UnixListener::bind_addr(&inner_addr).map_err(|e| format!("bind: {e}"))?;
        let mut c =
            UnixStream::connect_addr(&inner_addr).map_err(|e| format!("connect inside: {e}"))?;
        c.write_all(b"hi").map_err(|e| e.to_string())?;
        let (mut s, _) = inner.accept().map_err(|e| e.to_string())?;
        let mut buf = [0u8; 2];
        s.read_exact(&mut buf).map_err(|e| e.to_string())?;
        Ok(())
    };
    scenario_entry("landlock_scopes_abstract_unix_sockets", body);
    let name = format!("airlock-jf-{}", std::process::id());
    let outside = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
    run_isolated(
        "landlock_scopes_abstract_unix_sockets",
        &[(ABSTRACT, name.clone())],
    );
    drop(outside);
}

const VICTIM: &str = "AIRLOCK_JF_VICTIM";

#[test]
fn landlock_scopes_signals() {
    let body: fn() -> Outcome = || {
        kernel_abi_at_least(6)?;
        let pid: i32 = var(VICTIM)?.parse().map_err(|_| "pid")?;
        let victim = Pid::from_raw(pid);
        // Control: signal 0 reaches it before the sandbox.
        kill(victim, None).map_err(|e| format!("control kill: {e}"))?;
        set_no_new_privs()?;
        landlock::apply(&system_rules()).map_err(|e| format!("apply: {e}"))?;
        match kill(victim, Signal::SIGTERM) {
            Err(nix::errno::Errno::EPERM) => {}
            other => return Err(format!("kill outside the domain: {other:?}")),
        }
        // A child inside the domain can still be signalled.
        // SAFETY: the child only pauses.
        match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
            ForkResult::Child => unsafe {
                libc::pause();
                libc::_exit(0)
            },
            ForkResult::Parent { child } => {
                kill(child, Signal::SIGKILL).map_err(|e| format!("kill own child: {e}"))?;
                match waitpid(child, None) {
                    Ok(WaitStatus::Signaled(_, Signal::SIGKILL, _)) => Ok(()),
                    other => Err(format!("own child: {other:?}")),
                }
            }
        }
    };
    scenario_entry("landlock_scopes_signals", body);
    let mut victim = Command::new("/bin/sleep").arg("300").spawn().unwrap();
    let envs = [(VICTIM, victim.id().to_string())];
    run_isolated("landlock_scopes_signals", &envs);
    // The victim survived the sandboxed attempt.
    assert!(victim.try_wait().unwrap().is_none(), "victim was killed");
    victim.kill().unwrap();
    victim.wait().unwrap();
}

#[test]
fn landlock_then_seccomp_still_runs_programs() {
    let body: fn() -> Outcome = || {
        let root = PathBuf::from(var(DIR)?);
        let mut rules = system_rules();
        rules.read_exec.push(root.join("rx"));
        rules.read_write.push(root.join("rw"));
        // Command::output opens /dev/null for stdin: a single-file rule.
        rules.read_write.push(PathBuf::from("/dev/null"));
        let _ = nix::unistd::setsid();
        set_no_new_privs()?;
        landlock::apply(&rules).map_err(|e| format!("apply: {e}"))?;
        seccomp::install(seccomp::Side::Command)
            .map(drop)
            .map_err(|e| format!("install: {e}"))?;
        let out = Command::new("/bin/sh")
            .args(["-c", "echo hi > \"$1/rw/out\" && \"$1/rx/true\"", "sh"])
            .arg(&root)
            .output()
            .map_err(|e| format!("spawn sh: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "sh: {:?} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let r = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS);
        if r != Err(nix::errno::Errno::EPERM) {
            return Err(format!("unshare after both layers: {r:?}"));
        }
        Ok(())
    };
    scenario_entry("landlock_then_seccomp_still_runs_programs", body);
    let dir = fs_fixture();
    run_isolated(
        "landlock_then_seccomp_still_runs_programs",
        &[(DIR, dir.path().display().to_string())],
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("rw/out")).unwrap(),
        "hi\n"
    );
}
