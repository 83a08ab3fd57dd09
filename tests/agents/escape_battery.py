#!/usr/bin/env python3
"""The escape battery, as one program: every escape class the jail closes, tried from
inside a run. It runs wherever a run may start a program: as a workflow role's command,
or as a command an agent sends through Airlock's bash tool (the command side).

usage: python3 escape_battery.py [--host-port N]... [--host-path P]... [--max-procs N]
                                 [--daemon MARKER]

--host-port: a TCP port listening on the host's loopback (it must not be reachable).
--host-path: a host path that must not be visible (the state directory, a key file).
--max-procs: the run's process limit (a fork bomb must stop below it).
--daemon: leave a double-forked `sleep` behind whose argv holds MARKER, for the caller to
          check that nothing of the run outlives it.

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

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
RESULTS = {}


def check(name):
    def wrap(f):
        try:
            held, seen = f()
        except Exception as e:  # noqa: BLE001 - a check that cannot run has not held
            held, seen = False, "error: %s: %s" % (type(e).__name__, e)
        RESULTS[name] = {"held": bool(held), "seen": str(seen)[:300]}
        return f
    return wrap


def args():
    out = {"host_port": [], "host_path": [], "max_procs": 0, "daemon": None}
    argv = sys.argv[1:]
    while argv:
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
        else:
            raise SystemExit("escape_battery.py: unknown option " + k)
    return out


A = args()


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


@check("setuid_binary")
def _():
    p = subprocess.run(["/usr/bin/passwd", "-S", "root"], capture_output=True, timeout=20)
    out = p.stdout.decode(errors="replace")
    return p.returncode != 0 and not out.startswith("root "), "exit %d" % p.returncode


@check("network_only_loopback")
def _():
    ifaces = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
    return ifaces == ["lo"], ifaces


@check("host_loopback_ports")
def _():
    seen = []
    for port in A["host_port"]:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            seen.append("%d connected" % port)
        except OSError as e:
            seen.append("%d %s" % (port, e.strerror))
    return A["host_port"] and not any("connected" in s for s in seen), seen


@check("socket_families")
def _():
    seen = {}
    for name, fam, ty in (("vsock", socket.AF_VSOCK, socket.SOCK_STREAM),
                          ("packet", socket.AF_PACKET, socket.SOCK_RAW),
                          ("alg", socket.AF_ALG, socket.SOCK_SEQPACKET),
                          ("bluetooth", 31, socket.SOCK_STREAM)):
        try:
            socket.socket(fam, ty).close()
            seen[name] = "OPENED"
        except OSError as e:
            seen[name] = e.strerror
    return "OPENED" not in seen.values(), seen


@check("host_sockets_and_paths")
def _():
    paths = ["/run/systemd/journal/socket", "/run/dbus", "/var/run", "/run/airlock",
             "/sys/fs/cgroup", "/root", "/var/lib/airlock"] + A["host_path"]
    seen = [p for p in paths if os.path.lexists(p)]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
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
    wrote = []
    for p, v in (("/proc/sys/kernel/hostname", "x"), ("/proc/sysrq-trigger", "h"),
                 ("/proc/sys/kernel/core_pattern", "|/tmp/x"), ("/proc/self/oom_score_adj", "-1000"),
                 ("/sys/kernel/uevent_helper", "/tmp/x")):
        try:
            with open(p, "w") as f:
                f.write(v)
            wrote.append(p)
        except OSError:
            pass
    return not wrote, wrote or "refused"


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
                pass  # the fd of the listing itself, closed by now
    # Only the listing's own directory fd may be open.
    other = {k: v for k, v in fds.items() if not v.startswith("/proc/")}
    return not other, other or "0, 1, 2 only"


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
    # Every process this one can see and is not its own ancestor or itself: it may
    # neither signal nor trace them (the agent side, pid 1).
    mine = set()
    p = os.getpid()
    while p > 0:
        mine.add(p)
        try:
            p = int(open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    reached = []
    for n in os.listdir("/proc"):
        if not n.isdigit() or int(n) in mine:
            continue
        pid = int(n)
        try:
            comm = open("/proc/%d/comm" % pid).read().strip()
        except OSError:
            continue
        try:
            os.kill(pid, 0)
            reached.append("signal %d %s" % (pid, comm))
        except OSError:
            pass
        if libc.ptrace(16, pid, None, None) == 0:
            reached.append("traced %d %s" % (pid, comm))
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    return not reached, reached or "none reachable"


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
    p = subprocess.run(["/usr/bin/unshare", "-Ur", "true"], capture_output=True, timeout=20)
    seen["unshare_cmd"] = "exit %d" % p.returncode
    return all(v != "ok" for k, v in seen.items() if k != "unshare_cmd") and p.returncode != 0, seen


@check("kernel_interfaces")
def _():
    nr = {"bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
          "keyctl": 250, "add_key": 248, "init_module": 175, "finit_module": 313,
          "kexec_load": 246, "open_by_handle_at": 304, "syslog": 103, "acct": 163,
          "swapon": 167, "reboot": 169, "sethostname": 170, "settimeofday": 164,
          "fanotify_init": 300, "process_vm_readv": 310, "memfd_secret": 447}
    seen = {}
    for name, n in nr.items():
        if name == "reboot":
            r = libc.syscall(n, 0xfee1dead, 672274793, 0x4321FEDC, None)  # power off
        elif name in ("keyctl",):
            r = libc.syscall(n, 0, -3, 0, 0)  # KEYCTL_GET_KEYRING_ID, the session keyring
        elif name == "userfaultfd" or name == "memfd_secret":
            r = libc.syscall(n, 0)
        elif name == "io_uring_setup":
            params = ctypes.create_string_buffer(120)
            r = libc.syscall(n, 1, params)
        elif name == "process_vm_readv":
            r = libc.syscall(n, 1, None, 0, None, 0, 0)
        else:
            r = libc.syscall(n, 0, 0, 0, 0, 0)
        seen[name] = "ok" if r >= 0 else os.strerror(ctypes.get_errno())
    return all(v != "ok" for v in seen.values()), seen


@check("terminal_injection")
def _():
    seen = []
    for fd in (0, 1, 2):
        try:
            fcntl.ioctl(fd, termios.TIOCSTI, b"x")
            seen.append("TIOCSTI on %d" % fd)
        except OSError:
            pass
    try:
        os.close(os.open("/dev/tty", os.O_RDWR))
        seen.append("opened /dev/tty")
    except OSError:
        pass
    return not seen, seen or "no terminal"


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


if A["daemon"]:
    # The double-forked daemon the caller checks for afterwards.
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            fd = os.open("/dev/null", os.O_RDWR)
            for n in (0, 1, 2):
                os.dup2(fd, n)
            os.execv("/bin/sleep", ["airlock-battery-" + A["daemon"], "600"])
        os._exit(0)
    os.wait()

print("BATTERY " + json.dumps(RESULTS, sort_keys=True), flush=True)
