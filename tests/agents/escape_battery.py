#!/usr/bin/env python3
"""The escape battery, as one program: every escape class the jail closes, tried from
inside a run. It runs wherever a run may start a program: as a workflow role's command,
or as a command an agent sends through Airlock's bash tool (the command side).

usage: python3 escape_battery.py [--host-port N]... [--host-path P]... [--max-procs N]
                                 [--daemon MARKER] [--side agent|command] [--skip CHECK]...
                                 [--memory-hog]

--host-port: a TCP port listening on the host's loopback (it must not be reachable).
--host-path: a host path that must not be visible (the state directory, a key file).
--max-procs: the run's process limit (a fork bomb must stop below it).
--daemon: leave a double-forked `sleep` behind whose argv holds MARKER, for the caller to
          check that nothing of the run outlives it.
--skip: a check not to run (it is then absent from the verdicts, so the caller must name
        it too).
--side: which side of the run it runs on (default command): the agent side may start no
        program, so the checks that need one are the caller's to skip there, and a memfd
        may not even be made there.
--memory-hog: instead of the checks, allocate memory until the kernel stops it (the
        run's command side must be the one to die), printing how far it got.

Prints one line, `BATTERY {json}`: each check's name with held (true or false) and what
was seen. A check that cannot run (an exception) has not held: the battery fails loudly.
"""

import ctypes
import errno
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
RESULTS = {}


def check(name):
    def wrap(f):
        if name in A["skip"]:
            return f
        try:
            held, seen = f()
        except Exception as e:  # noqa: BLE001 - a check that cannot run has not held
            held, seen = False, "error: %s: %s" % (type(e).__name__, e)
        RESULTS[name] = {"held": bool(held), "seen": str(seen)[:300]}
        return f
    return wrap


def args():
    out = {"host_port": [], "host_path": [], "max_procs": 0, "daemon": None, "skip": [],
           "side": "command", "memory_hog": False}
    argv = sys.argv[1:]
    while argv:
        if argv[0] == "--memory-hog":
            out["memory_hog"] = True
            argv = argv[1:]
            continue
        k, v = argv[0], argv[1]
        argv = argv[2:]
        if k == "--host-port":
            out["host_port"].append(int(v))
        elif k == "--host-path":
            out["host_path"].append(v)
        elif k == "--max-procs":
            out["max_procs"] = int(v)
        elif k == "--daemon":
            out["daemon"] = v
        elif k == "--skip":
            out["skip"].append(v)
        elif k == "--side" and v in ("agent", "command"):
            out["side"] = v
        else:
            raise SystemExit("escape_battery.py: unknown option " + k)
    return out


A = args()

if A["memory_hog"]:
    # Touched pages, 16 MiB at a time, until the kernel's OOM killer ends this process (the
    # caller expects that: a clean exit means no limit held it).
    hog = []
    while True:
        hog.append(bytearray(16 << 20))
        for i in range(0, 16 << 20, 4096):
            hog[-1][i] = 1
        print("HOG %d MiB" % (16 * len(hog)), flush=True)


def status():
    return dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)


def errno_of(ret):
    return "ok" if ret == 0 else os.strerror(ctypes.get_errno())


@check("identity")
def _():
    s = status()
    uid, gid = os.getuid(), os.getgid()
    caps = {k: s[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    held = (uid != 0 and gid != 0 and os.getgroups() in ([], [gid])
            and all(v == "0000000000000000" for v in caps.values())
            and s["NoNewPrivs"].strip() == "1" and s["Seccomp"].strip() == "2")
    return held, "uid=%d gid=%d groups=%s nnp=%s seccomp=%s caps=%s" % (
        uid, gid, os.getgroups(), s["NoNewPrivs"].strip(), s["Seccomp"].strip(), caps)


SHAPED = ("sk-", "ghs_", "ghp_", "gho_", "ghu_", "github_pat_", "xoxb-", "xoxp-", "AKIA")


@check("environment")
def _():
    # Credentials stay with airlockd: a run holds only run tokens (airlock-run-...), in its
    # own environment and in any other process's it can read.
    bad = sorted(k for k, v in os.environ.items()
                 if v.startswith(SHAPED)
                 or (k.endswith(("_TOKEN", "_KEY", "_SECRET")) and not v.startswith("airlock-run-")))
    read = 0
    for n in os.listdir("/proc"):
        if not n.isdigit() or int(n) == os.getpid():
            continue
        try:
            env = open("/proc/%s/environ" % n, "rb").read().split(b"\0")
        except OSError:
            continue
        read += 1
        bad += ["pid %s %s" % (n, e.split(b"=", 1)[0].decode(errors="replace")) for e in env
                if b"=" in e and e.split(b"=", 1)[1].startswith(tuple(x.encode() for x in SHAPED))]
    return not bad, bad or "run tokens only (%d other environments readable)" % read


@check("setuid_binary")
def _():
    mode = os.stat("/usr/bin/passwd").st_mode
    p = subprocess.run(["/usr/bin/passwd", "-S", "root"], capture_output=True, timeout=20)
    out = p.stdout.decode(errors="replace")
    # Only a setuid passwd makes this a test of no_new_privs and the mount flags.
    return (mode & 0o4000 and p.returncode != 0 and not out.startswith("root ")), \
        "setuid=%s exit %d" % (bool(mode & 0o4000), p.returncode)


@check("network_only_loopback")
def _():
    ifaces = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
    return ifaces == ["lo"], ifaces


@check("host_loopback_ports")
def _():
    seen = []
    targets = [("127.0.0.1", p) for p in A["host_port"]] + [("::1", p) for p in A["host_port"]]
    targets.append(("169.254.169.254", 80))  # a cloud's metadata service
    for host, port in targets:
        try:
            socket.create_connection((host, port), timeout=2).close()
            seen.append("%s:%d connected" % (host, port))
        except OSError as e:
            seen.append("%s:%d %s" % (host, port, e.strerror))
    return A["host_port"] and not any("connected" in s for s in seen), seen


@check("socket_families")
def _():
    # The seccomp filter's own answer (EAFNOSUPPORT), not a missing module's or capability's.
    seen = {}
    for name, fam, ty in (("vsock", socket.AF_VSOCK, socket.SOCK_STREAM),
                          ("packet", socket.AF_PACKET, socket.SOCK_RAW),
                          ("alg", socket.AF_ALG, socket.SOCK_SEQPACKET),
                          ("bluetooth", 31, socket.SOCK_STREAM)):
        try:
            socket.socket(fam, ty).close()
            seen[name] = "OPENED"
        except OSError as e:
            seen[name] = errno.errorcode.get(e.errno, str(e.errno))
    return all(v == "EAFNOSUPPORT" for v in seen.values()), seen


@check("host_sockets_and_paths")
def _():
    paths = ["/run/systemd/journal/socket", "/run/dbus", "/var/run", "/run/airlock",
             "/sys/fs/cgroup", "/root", "/var/lib/airlock"] + A["host_path"]
    seen = [p for p in paths if os.path.lexists(p)]
    try:
        # Refused outright on a kernel without Landlock's abstract-unix scoping.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.connect("/run/systemd/journal/socket")
        seen.append("journald connected")
    except OSError:
        pass
    return not seen, seen or "none visible"


@check("writes_outside")
def _():
    wrote = []
    for p in ("/usr/x", "/etc/x", "/var/tmp/x", "/x", "/home/x", "/bin/x", "/dev/x",
              "/proc/x", "/sys/x", "/opt/x"):
        try:
            with open(p, "w") as f:
                f.write("x")
            wrote.append(p)
        except OSError:
            pass
    return not wrote, wrote or "refused everywhere"


@check("proc_and_sys_read_only")
def _():
    # Opened for writing, never written: if the jail were broken this must not change the
    # host.
    opened = []
    for p in ("/proc/sys/kernel/hostname", "/proc/sysrq-trigger", "/proc/sys/kernel/core_pattern",
              "/proc/self/oom_score_adj", "/sys/kernel/uevent_helper"):
        try:
            os.close(os.open(p, os.O_WRONLY))
            opened.append(p)
        except OSError:
            pass
    return not opened, opened or "refused"


@check("proc_masked")
def _():
    # Masked entries read as empty (kernel memory, other users' keys, timers).
    seen = []
    for p in ("/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/timer_list", "/proc/kmsg"):
        try:
            with open(p, "rb") as f:
                if f.read(64):
                    seen.append(p)
        except OSError:
            pass
    return not seen, seen or "empty or unreadable"


@check("devices")
def _():
    bad = []
    for root, _, files in os.walk("/dev"):
        for n in files:
            p = os.path.join(root, n)
            try:
                if os.stat(p).st_mode & 0o170000 == 0o060000:
                    bad.append(p)
            except OSError:
                pass
    bad += [d for d in ("/dev/kmsg", "/dev/mem", "/dev/kmem", "/dev/port", "/dev/tty0")
            if os.path.exists(d)]
    return not bad, bad or "no block devices, no kernel memory"


@check("mount_flags")
def _():
    bad = []
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        mp, opts = f[4], set(f[5].split(","))
        if mp == "/etc" or mp.startswith("/etc/"):
            need = {"ro", "nosuid", "nodev", "noexec"}
        elif mp == "/proc":
            need = {"ro"}
        elif mp.startswith("/dev"):
            need = {"nosuid", "noexec"}
        else:
            continue
        if not need <= opts:
            bad.append("%s %s" % (mp, ",".join(sorted(need - opts))))
    return not bad, bad or "as set"


@check("inherited_fds")
def _():
    fds = {}
    for n in os.listdir("/proc/self/fd"):
        if int(n) > 2:
            try:
                fds[n] = os.readlink("/proc/self/fd/" + n)
            except OSError:
                pass  # the listing's own fd, closed by now
    return not fds, fds or "0, 1, 2 only"


@check("signal_and_trace_init")
def _():
    seen = []
    try:
        os.kill(1, signal.SIGKILL)
        seen.append("KILLED 1")
    except OSError as e:
        seen.append("kill " + e.strerror)
    r = libc.ptrace(16, 1, None, None)  # PTRACE_ATTACH
    seen.append("ptrace " + errno_of(r))
    return r != 0 and "KILLED 1" not in seen, seen


@check("other_processes")
def _():
    # Every process this one can see but itself, its shepherd and the runner among them: it
    # may neither signal nor trace any (each command has a Landlock domain of its own).
    reached = []
    seen = 0
    for n in os.listdir("/proc"):
        if not n.isdigit() or int(n) == os.getpid():
            continue
        pid = int(n)
        try:
            comm = open("/proc/%d/comm" % pid).read().strip()
        except OSError:
            comm = "?"  # hidden from this process: still tried
        seen += 1
        try:
            os.kill(pid, 0)
            reached.append("signal %d %s" % (pid, comm))
        except OSError:
            pass
        if libc.ptrace(16, pid, None, None) == 0:
            reached.append("traced %d %s" % (pid, comm))
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    try:
        os.kill(os.getppid(), 0)
        reached.append("signal parent %d" % os.getppid())
    except OSError:
        pass
    return not reached, reached or "none of %d reachable" % seen


@check("namespaces_and_mounts")
def _():
    seen = {}
    for name, flag in (("user", 0x10000000), ("mnt", 0x00020000), ("net", 0x40000000),
                       ("pid", 0x20000000), ("uts", 0x04000000)):
        seen["unshare_" + name] = errno_of(libc.unshare(flag))
    fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    seen["setns"] = errno_of(libc.setns(fd, 0))
    os.close(fd)
    seen["mount"] = errno_of(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
    seen["chroot"] = errno_of(libc.chroot(b"/tmp"))
    seen["pivot_root"] = errno_of(libc.syscall(155, b"/tmp", b"/tmp"))
    # The program unshare(1) only where a program may start (the agent side may start none).
    code = 1
    if A["side"] == "command":
        code = subprocess.run(["/usr/bin/unshare", "-Ur", "true"], capture_output=True, timeout=20).returncode
        seen["unshare_cmd"] = "exit %d" % code
    return all(v != "ok" for k, v in seen.items() if k != "unshare_cmd") and code != 0, seen


def eperm(r, also=()):
    """What a denied call returned: the filter's EPERM (or one of `also`) is a refusal;
    success, or any other errno (EFAULT, EINVAL: the call got past seccomp), is not."""
    if r >= 0:
        return "ok"
    e = errno.errorcode.get(ctypes.get_errno(), "?")
    return "refused" if e == "EPERM" or e in also else e


def clone_child(flags):
    r = libc.syscall(56, flags, None, None, None, 0)
    if r == 0:
        os._exit(0)  # a child made past the filter: gone at once
    if r > 0:
        os.waitpid(r, 0)
    return r


def foreign_abi(call):
    """A call through another ABI than the run's own (x32 on x86-64), made in a child
    process: Airlock's filter answers it ENOSYS, and a stricter filter stacked under the
    run's (systemd's SystemCallArchitectures=native in airlockd's unit, inherited by every
    run) kills the caller with SIGSYS. Both are refused; only a call that ran is not."""
    pid = os.fork()
    if pid == 0:
        r = call()
        os._exit(0 if r < 0 and ctypes.get_errno() == errno.ENOSYS else 1 if r >= 0 else 2)
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st) and os.WTERMSIG(st) == signal.SIGSYS:
        return "refused"
    if os.WIFEXITED(st):
        return {0: "refused", 1: "ok"}.get(os.WEXITSTATUS(st), "another error than ENOSYS")
    return "child ended by signal %d" % os.WTERMSIG(st)


@check("kernel_interfaces")
def _():
    # Arguments an unprivileged caller could succeed with where there are such, so only
    # the seccomp filter's EPERM counts as held; the privileged calls are made harmless
    # (a reboot with bad magic, a hostname of bad length) in case the jail were broken.
    sc = libc.syscall
    buf = ctypes.create_string_buffer(128)
    perf = ctypes.create_string_buffer(128)
    struct.pack_into("IIQ", perf, 0, 1, 128, 0)   # PERF_TYPE_SOFTWARE, size, CPU_CLOCK
    struct.pack_into("Q", perf, 40, 1 << 5 | 1 << 6)  # exclude_kernel, exclude_hv
    calls = {
        "bpf": lambda: sc(321, 0, None, 0),
        "perf_event_open": lambda: sc(298, perf, 0, -1, -1, 0),
        "userfaultfd": lambda: sc(323, 1),  # UFFD_USER_MODE_ONLY
        "io_uring_setup": lambda: sc(425, 1, buf),
        "keyctl": lambda: sc(250, 0, -3, 0),  # KEYCTL_GET_KEYRING_ID, the session keyring
        "add_key": lambda: sc(248, b"user", b"battery", b"v", 1, -2),
        "init_module": lambda: sc(175, None, 0, b""),
        "finit_module": lambda: sc(313, -1, b"", 0),
        "kexec_load": lambda: sc(246, 0, 0, None, 0),
        "open_by_handle_at": lambda: sc(304, -1, None, 0),
        "syslog": lambda: sc(103, 10, None, 0),  # SYSLOG_ACTION_SIZE_BUFFER
        "acct": lambda: sc(163, None),
        "swapon": lambda: sc(167, None, 0),
        "reboot": lambda: sc(169, 0, 0, 0, None),  # bad magic: EINVAL if it got through
        "sethostname": lambda: sc(170, b"x", -1),
        "settimeofday": lambda: sc(164, None, None),
        "fanotify_init": lambda: sc(300, 0x200, 0),  # FAN_REPORT_FID (unprivileged)
        "process_vm_readv": lambda: sc(310, 1, None, 0, None, 0, 0),
        "memfd_secret": lambda: sc(447, 0),
        "clone_newuser": lambda: clone_child(0x10000000 | 17),  # CLONE_NEWUSER | SIGCHLD
        "personality": lambda: libc.personality(0x0040000),  # ADDR_NO_RANDOMIZE
    }
    seen = {}
    for name, f in calls.items():
        seen[name] = eperm(f(), ("ENOSYS",) if name == "memfd_secret" else ())
    # The filter's ENOSYS: clone3 (so libc falls back to clone, whose flags it reads) and
    # the x32 ABI (getpid with bit 30), in a child of its own (see foreign_abi).
    seen["clone3"] = "refused" if sc(435, None, 0) < 0 and ctypes.get_errno() == errno.ENOSYS else "ok"
    seen["x32"] = foreign_abi(lambda: sc(0x40000000 | 39))
    return all(v == "refused" for v in seen.values()), {k: v for k, v in seen.items() if v != "refused"} or "all refused"


@check("terminal_injection")
def _():
    # The filter refuses TIOCSTI and TIOCLINUX on any fd (EPERM); on a fd that is no
    # terminal the kernel alone would say ENOTTY.
    seen = {}
    for name, req in (("TIOCSTI", termios.TIOCSTI), ("TIOCLINUX", 0x541C)):
        try:
            fcntl.ioctl(0, req, b"x")
            seen[name] = "ok"
        except OSError as e:
            seen[name] = "refused" if e.errno == errno.EPERM else errno.errorcode.get(e.errno, "?")
    try:
        os.close(os.open("/dev/tty", os.O_RDWR))
        seen["/dev/tty"] = "opened"
    except OSError:
        seen["/dev/tty"] = "refused"
    return all(v == "refused" for v in seen.values()), seen


@check("process_limit")
def _():
    limit = A["max_procs"]
    r, w = os.pipe()
    kids = []
    stopped = None
    for _ in range(max(limit, 1) + 16):
        try:
            pid = os.fork()
        except OSError as e:
            stopped = e.strerror
            break
        if pid == 0:
            os.close(w)
            os.read(r, 1)  # until the parent closes its end
            os._exit(0)
        kids.append(pid)
    os.close(w)
    os.close(r)
    for k in kids:
        os.waitpid(k, 0)
    return limit > 0 and stopped is not None and len(kids) < limit, "forked %d of %d, then %s" % (
        len(kids), limit, stopped)


@check("memfd")
def _():
    # The agent side may not make a memfd at all (its pages could be mapped executable by
    # the loader: execve is not needed); on the command side one can be made but never
    # executed (vm.memfd_noexec=2 in the run's pid namespace).
    # A kernel without vm.memfd_noexec (before 6.3) gets no memfd on either side instead.
    try:
        fd = os.memfd_create("battery", 0)
    except OSError as e:
        either = A["side"] == "agent" or not os.path.exists("/proc/sys/vm/memfd_noexec")
        return either and e.errno == errno.EPERM, "memfd_create: " + e.strerror
    if A["side"] == "agent":
        os.close(fd)
        return False, "memfd_create: made one on the agent side"
    with open("/bin/true", "rb") as f:
        os.write(fd, f.read())
    pid = os.fork()
    if pid == 0:
        try:
            os.execv("/proc/self/fd/%d" % fd, ["memfd"])
        except OSError as e:
            os._exit(100 + e.errno)
    _, st = os.waitpid(pid, 0)
    os.close(fd)
    code = os.waitstatus_to_exitcode(st)
    return code == 100 + errno.EACCES, "exec of a memfd: " + (
        os.strerror(code - 100) if code > 100 else "exit %d" % code)


def landlock_abi():
    """The kernel's Landlock ABI (landlock_create_ruleset with the VERSION flag); 0 without."""
    r = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return r if r > 0 else 0


@check("udp_and_listen")
def _():
    # Bind none (README): no UDP socket at all (Landlock has no UDP rules on this kernel),
    # and no TCP listen() on a socket the kernel would bind itself (Landlock sees only
    # bind()); a unix socket may still listen.
    seen = {}
    for name, fam, addr in (("udp4", socket.AF_INET, ("127.0.0.1", 4180)), ("udp6", socket.AF_INET6, ("::1", 4180))):
        try:
            s = socket.socket(fam, socket.SOCK_DGRAM)
        except OSError as e:
            seen[name] = errno.errorcode.get(e.errno, "?")
            continue
        try:
            s.bind(addr)
            seen[name] = "BOUND"
        except OSError as e:
            seen[name] = "made, bind " + errno.errorcode.get(e.errno, "?")
        s.close()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.listen(1)
        seen["tcp_listen"] = "LISTENING on %d" % s.getsockname()[1]
    except OSError as e:
        seen["tcp_listen"] = errno.errorcode.get(e.errno, "?")
    s.close()
    def unix_listen(key, name, abstract):
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path = "/dev/shm/airlock-battery-%d-%s" % (os.getpid(), name)
        try:
            u.bind(("\0" + path) if abstract else path)
            u.listen(1)
            seen[key] = "ok"
        except OSError as e:
            seen[key] = errno.errorcode.get(e.errno, "?")
        u.close()
        if not abstract and os.path.lexists(path):
            os.unlink(path)
    unix_listen("unix_listen", "main", False)
    # From another thread than the main one too (the helper answers for threads alike).
    t = threading.Thread(target=unix_listen, args=("unix_listen_thread", "thread", False))
    t.start()
    t.join()
    # An abstract name may listen only where Landlock scopes it to the side (ABI 6).
    unix_listen("abstract_listen", "abstract", True)
    scoped = landlock_abi() >= 6
    held = (seen["udp4"] in ("EPERM", "EPROTONOSUPPORT") and seen["udp6"] in ("EPERM", "EPROTONOSUPPORT")
            and seen["tcp_listen"] == "EPERM" and seen["unix_listen"] == "ok"
            and seen["unix_listen_thread"] == "ok"
            and seen["abstract_listen"] == ("ok" if scoped else "EPERM"))
    return held, seen



@check("netlink")
def _():
    # Only NETLINK_ROUTE (this namespace's own links and addresses): a uevent socket would
    # hear the host's devices, other runs' loop devices among them.
    seen = {}
    for name, proto in (("route", 0), ("uevent", 15), ("audit", 9), ("sock_diag", 4)):
        try:
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto)
            if proto == 15:
                s.bind((0, 1))
            s.close()
            seen[name] = "ok"
        except OSError as e:
            seen[name] = errno.errorcode.get(e.errno, "?")
    return seen["route"] == "ok" and all(v != "ok" for k, v in seen.items() if k != "route"), seen


@check("unix_sockets_in_shared_dirs")
def _():
    # The workspace and the home are both sides' (and the operator's): no socket there, so
    # nothing can hand a descriptor from one side to the other. /tmp is each side's own
    # (but gives none either when the workspace lies below it: `--workspace /tmp/x`).
    seen = {}
    ws = os.environ.get("AIRLOCK_WORKSPACE", os.getcwd())
    for name, d in (("workspace", ws),
                    ("home", os.environ.get("HOME", "/nonexistent")), ("tmp", "/tmp")):
        p = os.path.join(d, "battery-%d.sock" % os.getpid())
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(p)
            seen[name] = "bound"
            os.unlink(p)
        except OSError as e:
            seen[name] = errno.errorcode.get(e.errno, "?")
        s.close()
    tmp = "EACCES" if ws.startswith("/tmp/") else "bound"
    return seen["workspace"] == "EACCES" and seen["home"] == "EACCES" and seen["tmp"] == tmp, seen


@check("process_calls")
def _():
    # The calls that take a pid, on its parent (the shepherd, or the agent side's init) and
    # on pid 1 of its namespace, and the ones that reach a whole group or uid: none may
    # change another process, even to what it already is.
    seen = {}
    old = (ctypes.c_uint64 * 2)()
    mask = ctypes.c_uint64(1)
    for who, pid in (("parent", os.getppid()), ("pid1", 1)):
        if libc.syscall(302, pid, 7, None, old) == 0:
            seen[who + "_prlimit_set"] = errno_of(libc.syscall(302, pid, 7, old, None))
        else:
            seen[who + "_prlimit_set"] = "unnamed: " + os.strerror(ctypes.get_errno())
        seen[who + "_setpriority"] = errno_of(libc.setpriority(0, pid, 19))
        seen[who + "_sched_setaffinity"] = errno_of(libc.sched_setaffinity(pid, 8, ctypes.byref(mask)))
        seen[who + "_ioprio_set"] = errno_of(libc.syscall(251, 1, pid, 3 << 13))
    seen["setpriority_own_uid"] = errno_of(libc.setpriority(2, 0, 19))  # PRIO_USER
    seen["setpriority_own_group"] = errno_of(libc.setpriority(1, 0, 19))  # PRIO_PGRP
    seen["ioprio_set_own_uid"] = errno_of(libc.syscall(251, 3, 0, 3 << 13))  # IOPRIO_WHO_USER
    # Its own, still: what a runtime does for itself.
    own = errno_of(libc.setpriority(0, 0, os.getpriority(os.PRIO_PROCESS, 0)))
    return all(v != "ok" for v in seen.values()) and own == "ok", dict(seen, own=own)


if A["daemon"]:
    # The double-forked daemon the caller checks for afterwards; the battery says whether
    # it started (a check that the run ended it is only as good as the daemon).
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        pid = os.fork()
        if pid == 0:
            fd = os.open("/dev/null", os.O_RDWR)
            for n in (0, 1, 2):
                os.dup2(fd, n)
            os.close(r)
            os.close(w)
            os.execv("/bin/sleep", ["airlock-battery-" + A["daemon"], "600"])
        os.write(w, str(pid).encode())
        os._exit(0)
    os.close(w)
    os.wait()
    pid = os.read(r, 32).decode()
    time.sleep(0.2)
    try:
        running = open("/proc/%s/cmdline" % pid, "rb").read().startswith(b"airlock-battery-")
    except OSError:
        running = False
    RESULTS["daemon_started"] = {"held": running, "seen": "pid %s %s" % (pid, "running" if running else "not running")}
elif "daemon_started" not in A["skip"]:
    RESULTS["daemon_started"] = {"held": False, "seen": "not asked for: give --daemon MARKER"}

print("BATTERY " + json.dumps(RESULTS, sort_keys=True), flush=True)
