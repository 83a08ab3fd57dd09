#!/usr/bin/env python3
"""Probes across the two sides of a run (tests/sides.rs). One program for both sides:

  python3 side_probe.py agent SCENARIO...   the run's agent program (the agent side): for
                                            each scenario, it sends the command side its
                                            half through Airlock's bash tool and tries its
                                            own half meanwhile
  python3 side_probe.py cmd SCENARIO ARGS   that half, on the command side

Each agent scenario prints one line `SIDES {json}`. The two halves meet through files in
the workspace (both sides see it), never through timing: each waits (bounded) for the
other's file. Nothing here is an assertion: tests/sides.rs reads what was seen.
"""

import ctypes
import errno
import json
import signal
import os
import socket
import struct
import sys
import threading
import time
import urllib.request

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
WS = os.environ.get("AIRLOCK_WORKSPACE", os.getcwd())
RLIMIT_NOFILE = 7
SYS_PRLIMIT64 = 302
SYS_IOPRIO_SET = 251
SYS_PIDFD_OPEN = 434
AGENT_MARK = 777
COMMAND_MARK = 779


class Rlimit(ctypes.Structure):
    _fields_ = [("cur", ctypes.c_uint64), ("max", ctypes.c_uint64)]


def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def prlimit(pid, new=None):
    """(ok, soft RLIMIT_NOFILE of `pid` or an errno name), setting the soft limit to `new`
    (the hard one kept) when given."""
    old = Rlimit()
    if libc.syscall(SYS_PRLIMIT64, pid, RLIMIT_NOFILE, None, ctypes.byref(old)) != 0:
        return False, err()
    if new is None:
        return True, old.cur
    lim = Rlimit(new, old.max)
    if libc.syscall(SYS_PRLIMIT64, pid, RLIMIT_NOFILE, ctypes.byref(lim), None) != 0:
        return False, err()
    return True, old.cur


def mark(value):
    """This process's own RLIMIT_NOFILE soft limit: how the other side can recognize it."""
    ok, _ = prlimit(0, value)
    assert ok


def own_soft():
    return prlimit(0)[1]


def wait_file(name, seconds=60):
    path = os.path.join(WS, name)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if os.path.exists(path):
            return True
        time.sleep(0.05)
    return False


def touch(name):
    open(os.path.join(WS, name), "w").close()


def reach(want):
    """Every pid that answers to this process's pid-taking calls and carries the other
    side's mark, with what each call did to it."""
    found = {}
    for pid in range(1, 4096):
        if pid == os.getpid():
            continue
        ok, soft = prlimit(pid)
        if not ok or soft != want:
            continue
        seen = {}
        seen["prlimit_set"] = "ok" if prlimit(pid, want + 1)[0] else err()
        seen["setpriority"] = "ok" if libc.setpriority(0, pid, 19) == 0 else err()
        mask = ctypes.c_uint64(1)
        seen["sched_setaffinity"] = "ok" if libc.sched_setaffinity(pid, 8, ctypes.byref(mask)) == 0 else err()
        # IOPRIO_WHO_PROCESS, class idle
        seen["ioprio_set"] = "ok" if libc.syscall(SYS_IOPRIO_SET, 1, pid, 3 << 13) == 0 else err()
        fd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
        seen["pidfd_open"] = "ok" if fd >= 0 else err()
        if fd >= 0:
            os.close(fd)
        found[pid] = seen
    return found


# ----------------------------------------------------------------- the command side's half


def cmd_prlimit():
    """Mark itself, look for the agent's mark and touch what it finds, wait for the agent
    to have looked for its mark, then say what the agent did to it."""
    mark(COMMAND_MARK)
    touch("cmd-marked")
    found = reach(AGENT_MARK)
    ok = wait_file("agent-scanned")
    print(json.dumps({"found_agent": found, "own_soft_after": own_soft(), "agent_done": ok}))


def cmd_blind(marker):
    """Blind the shepherd (RLIMIT_NOFILE 0), then leave a double-forked, setsid daemon."""
    r = {"blind": "ok" if prlimit(os.getppid(), 0)[0] else err()}
    rd, wr = os.pipe()
    if os.fork() == 0:
        os.setsid()
        pid = os.fork()
        if pid == 0:
            fd = os.open("/dev/null", os.O_RDWR)
            for n in (0, 1, 2):
                os.dup2(fd, n)
            os.execv("/bin/sleep", ["airlock-side-" + marker, "600"])
        os.write(wr, str(pid).encode())
        os._exit(0)
    os.close(wr)
    os.wait()
    r["daemon"] = os.read(rd, 32).decode()
    print(json.dumps(r))


def send_fd(path, fd):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])
        return "sent"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    finally:
        s.close()


def cmd_fdpass():
    """Hand the agent an O_PATH descriptor of this side's root through any socket of the
    agent's it can reach."""
    root = os.open("/", os.O_PATH)
    r = {}
    for name, path in (("tmp", "/tmp/side.sock"), ("workspace", os.path.join(WS, "side.sock")),
                       ("abstract", "\0airlock-side-probe")):
        r[name] = send_fd(path, root)
    touch("cmd-sent")
    print(json.dumps(r))


def inotify_hold():
    """Open inotify instances until the kernel refuses one: (descriptors, errno name)."""
    fds = []
    while len(fds) < 4096:
        fd = libc.inotify_init1(0o2000000)  # IN_CLOEXEC
        if fd < 0:
            return fds, err()
        fds.append(fd)
    return fds, "none"


def inotify_try():
    fd = libc.inotify_init1(0o2000000)
    if fd < 0:
        return err()
    os.close(fd)
    return "ok"


def cmd_inotify_hold():
    """Hold every inotify instance the kernel gives this side until the agent has tried
    one of its own."""
    fds, stop = inotify_hold()
    touch("cmd-inotify-held")
    ok = wait_file("agent-inotify-tried")
    print(json.dumps({"held": len(fds), "stopped_by": stop, "agent_done": ok,
                      "uid_map": open("/proc/self/uid_map").read().split()}))


def cmd_inotify_try():
    print(json.dumps({"try": inotify_try()}))


RLIMIT_SIGPENDING = 11


def queue_own(n):
    """Queue `n` real-time signals to this process, blocked (a handler, not ignored, so
    each is kept pending and counted): how many the kernel took, and why it stopped."""
    signal.signal(signal.SIGRTMIN, lambda *_: None)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
    libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    for i in range(n):
        if libc.sigqueue(os.getpid(), signal.SIGRTMIN, None) != 0:
            return i, err()
    return n, "none"


def cmd_sig_hold(n):
    """Keep `n` signals pending until the agent has queued one of its own."""
    took, stop = queue_own(int(n))
    touch("cmd-sig-held")
    ok = wait_file("agent-sig-tried")
    print(json.dumps({"pending": took, "stopped_by": stop, "agent_done": ok}))


def cmd_sysv(key):
    shm = libc.shmget(int(key), 0, 0)
    msg = libc.msgget(int(key), 0)
    print(json.dumps({"shm": "found" if shm >= 0 else err(), "msg": "found" if msg >= 0 else err()}))


# ------------------------------------------------------------------- the agent side's half


def bash(command, timeout_ms=60000):
    """One call of Airlock's bash tool, in the stateless revision (no session)."""
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"_meta": meta, "name": "bash",
                                  "arguments": {"command": command, "timeout_ms": timeout_ms}}})
    req = urllib.request.Request(
        os.environ["AIRLOCK_GATEWAY"] + "/mcp/airlock", data=body.encode(), method="POST",
        headers={"content-type": "application/json", "accept": "application/json, text/event-stream",
                 "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "bash"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=600) as r:
        answer = json.loads(r.read())
    return answer["result"].get("structuredContent") or answer["result"]


def in_background(command, timeout_ms=60000):
    box = {}
    t = threading.Thread(target=lambda: box.update(result=bash(command, timeout_ms)))
    t.start()
    return t, box


def last_json(text):
    for line in reversed((text or "").splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return {"unparsed": text}


def agent_prlimit():
    mark(AGENT_MARK)
    t, box = in_background("python3 side_probe.py cmd prlimit")
    marked = wait_file("cmd-marked")
    found = reach(COMMAND_MARK)
    touch("agent-scanned")
    t.join()
    out = box.get("result", {})
    return {"cmd_marked": marked, "found_command": found, "own_soft_after": own_soft(),
            "command": last_json(out.get("stdout")), "stderr": out.get("stderr")}


def agent_blind(marker):
    out = bash("python3 side_probe.py cmd blind " + marker, timeout_ms=3000)
    # The test looks for the daemon on the host as soon as this line is out.
    return {"command": last_json(out.get("stdout")), "timed_out": out.get("timed_out"),
            "text": json.dumps(out)[:400]}


def agent_fdpass():
    r = {}
    listeners = []
    for name, path in (("tmp", "/tmp/side.sock"), ("workspace", os.path.join(WS, "side.sock")),
                       ("abstract", "\0airlock-side-probe")):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(path)
            s.listen(4)
            s.setblocking(False)
            listeners.append((name, s))
            r["bind_" + name] = "ok"
        except OSError as e:
            r["bind_" + name] = errno.errorcode.get(e.errno, str(e.errno))
    t, box = in_background("python3 side_probe.py cmd fdpass")
    wait_file("cmd-sent")
    t.join()
    got = []
    for name, s in listeners:
        try:
            conn, _ = s.accept()
        except OSError:
            continue
        conn.settimeout(5)
        msg, anc, _, _ = conn.recvmsg(1, socket.CMSG_SPACE(4))
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fd = struct.unpack("i", data[:4])[0]
                got.append(name)
                # What the descriptor reaches: the command side's executable mounts?
                try:
                    os.close(os.open("/proc/self/fd/%d/usr/bin/id" % fd, os.O_RDONLY))
                    r["reached_" + name] = "opened its /usr/bin/id"
                except OSError as e:
                    r["reached_" + name] = errno.errorcode.get(e.errno, str(e.errno))
                p = os.fork()
                if p == 0:
                    try:
                        via = "/proc/self/fd/%d" % fd
                        libs = ":".join(via + d for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"))
                        os.execve("/lib64/ld-linux-x86-64.so.2", ["ld.so", via + "/usr/bin/id"],
                                  {"LD_LIBRARY_PATH": libs})
                    finally:
                        os._exit(126)
                _, st = os.waitpid(p, 0)
                r["loader_" + name] = "exit %d" % os.waitstatus_to_exitcode(st)
    r["received"] = got
    r["command"] = last_json(box.get("result", {}).get("stdout"))
    return r


def agent_sysv():
    key = 0x41495253
    shm = libc.shmget(key, 4096, 0o1600)  # IPC_CREAT | 0600
    msg = libc.msgget(key, 0o1600)
    out = bash("python3 side_probe.py cmd sysv %d" % key)
    r = {"made_shm": shm >= 0, "made_msg": msg >= 0, "command": last_json(out.get("stdout"))}
    if shm >= 0:
        libc.shmctl(shm, 0, None)  # IPC_RMID
    if msg >= 0:
        libc.msgctl(msg, 0, None)
    return r


def agent_inotify():
    """Both ways: the command holds every inotify instance it can get while the agent opens
    one; then the agent holds every one it can get while a command opens one."""
    t, box = in_background("python3 side_probe.py cmd inotify_hold")
    held = wait_file("cmd-inotify-held")
    r = {"cmd_held_in_time": held, "agent_while_cmd_holds": inotify_try()}
    touch("agent-inotify-tried")
    t.join()
    r["cmd_holding"] = last_json(box.get("result", {}).get("stdout"))
    fds, stop = inotify_hold()
    r["agent_holding"] = {"held": len(fds), "stopped_by": stop}
    r["cmd_while_agent_holds"] = last_json(bash("python3 side_probe.py cmd inotify_try").get("stdout"))
    for fd in fds:
        os.close(fd)
    return r


def agent_sigpending():
    """The command keeps 64 signals pending while the agent, its own RLIMIT_SIGPENDING
    lowered to 32, queues one: counted per user, the command's 64 would refuse it."""
    t, box = in_background("python3 side_probe.py cmd sig_hold 64")
    held = wait_file("cmd-sig-held")
    hard = Rlimit()
    libc.syscall(SYS_PRLIMIT64, 0, RLIMIT_SIGPENDING, None, ctypes.byref(hard))
    low = Rlimit(32, hard.max)
    set_low = libc.syscall(SYS_PRLIMIT64, 0, RLIMIT_SIGPENDING, ctypes.byref(low), None) == 0
    took, stop = queue_own(1)
    touch("agent-sig-tried")
    t.join()
    return {"cmd_held_in_time": held, "agent_limit_lowered": set_low,
            "agent_queued": took, "agent_stopped_by": stop,
            "cmd": last_json(box.get("result", {}).get("stdout"))}


def main():
    if sys.argv[1] == "cmd":
        {"prlimit": cmd_prlimit, "blind": cmd_blind, "fdpass": cmd_fdpass,
         "sysv": cmd_sysv, "inotify_hold": cmd_inotify_hold,
         "inotify_try": cmd_inotify_try, "sig_hold": cmd_sig_hold}[sys.argv[2]](*sys.argv[3:])
        return
    scenarios = {"prlimit": agent_prlimit, "blind": agent_blind, "fdpass": agent_fdpass,
                 "sysv": agent_sysv, "inotify": agent_inotify, "sigpending": agent_sigpending}
    for s in sys.argv[2:]:
        name, _, arg = s.partition("=")
        try:
            r = scenarios[name](*([arg] if arg else []))
        except Exception as e:  # noqa: BLE001 - reported, the test fails on it
            r = {"error": "%s: %s" % (type(e).__name__, e)}
        print("SIDES " + json.dumps({"scenario": name, **r}), flush=True)


main()
