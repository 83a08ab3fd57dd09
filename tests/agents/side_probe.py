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


def watch_paths(n):
    """`n` paths of distinct system files to watch."""
    out = []
    for top in ("/usr/share", "/usr/lib"):
        for d, _, files in os.walk(top):
            for f in files:
                out.append(os.path.join(d, f))
                if len(out) >= n:
                    return out
    return out


IN_MODIFY = 2


def watches_hold(instances=64, per=4000):
    """Watches on `per` system files from up to `instances` inotify instances, until the
    kernel refuses one (ENOSPC past fs.inotify.max_user_watches, counted per user and
    user namespace): (watches, errno name, descriptors)."""
    paths = [p.encode() for p in watch_paths(per)]
    fds, n = [], 0
    for _ in range(instances):
        fd = libc.inotify_init1(0o2000000)
        if fd < 0:
            return n, err(), fds
        fds.append(fd)
        for p in paths:
            if libc.inotify_add_watch(fd, p, IN_MODIFY) < 0:
                e = err()
                if e in ("EACCES", "ENOENT"):
                    continue
                return n, e, fds
            n += 1
    return n, "none", fds


def watch_try():
    fd = libc.inotify_init1(0o2000000)
    if fd < 0:
        return err()
    r = "ok" if libc.inotify_add_watch(fd, b"/usr/bin", IN_MODIFY) >= 0 else err()
    os.close(fd)
    return r


def cmd_watches_hold():
    n, stop, fds = watches_hold()
    touch("cmd-watches-held")
    ok = wait_file("agent-watches-tried")
    print(json.dumps({"watches": n, "stopped_by": stop, "agent_done": ok}))


def cmd_watch_try():
    print(json.dumps({"try": watch_try()}))


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


# Issue 43's second attack: the other per-user counts, and what the command side's own user
# namespace gives a command.

O_CREAT, O_RDWR, O_EXCL = 0o100, 0o2, 0o200


class MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long),
                ("msgsize", ctypes.c_long), ("curmsgs", ctypes.c_long),
                ("pad", ctypes.c_long * 4)]


def mq_lib():
    try:
        rt = ctypes.CDLL("librt.so.1", use_errno=True)
    except OSError:
        rt = libc
    rt.mq_open.restype = ctypes.c_int
    rt.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(MqAttr)]
    return rt


def mq_hold(tag):
    """Open POSIX message queues of 10 messages of 8 KiB until the kernel refuses one (past
    RLIMIT_MSGQUEUE, counted per user): (queues, errno name). Each is unlinked at once,
    held by its descriptor."""
    rt = mq_lib()
    held = []
    while len(held) < 512:
        name = ("/airlock-%s-%d-%d" % (tag, os.getpid(), len(held))).encode()
        a = MqAttr(0, 10, 8192, 0)
        fd = rt.mq_open(name, O_CREAT | O_RDWR | O_EXCL, 0o600, ctypes.byref(a))
        if fd < 0:
            return held, err()
        rt.mq_unlink(name)
        held.append(fd)
    return held, "none"


def mq_try(tag):
    held, stop = mq_hold_one(tag)
    return stop


def mq_hold_one(tag):
    rt = mq_lib()
    name = ("/airlock-%s-%d-try" % (tag, os.getpid())).encode()
    a = MqAttr(0, 10, 8192, 0)
    fd = rt.mq_open(name, O_CREAT | O_RDWR | O_EXCL, 0o600, ctypes.byref(a))
    if fd < 0:
        return [], err()
    rt.mq_unlink(name)
    os.close(fd)
    return [fd], "ok"


def cmd_mq_hold():
    held, stop = mq_hold("cmd")
    touch("cmd-mq-held")
    ok = wait_file("agent-mq-tried")
    print(json.dumps({"held": len(held), "stopped_by": stop, "agent_done": ok}))


def cmd_mq_try():
    print(json.dumps({"try": mq_try("cmd")}))


RLIMIT_NPROC = 6


def tasks_of(uid):
    """Tasks (threads too: RLIMIT_NPROC counts them) of `uid` this side's /proc shows."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for tid in os.listdir("/proc/%s/task" % pid):
                with open("/proc/%s/task/%s/status" % (pid, tid)) as f:
                    for line in f:
                        if line.startswith("Uid:") and int(line.split()[1]) == uid:
                            n += 1
        except OSError:
            continue
    return n


def fork_under(limit_above):
    """RLIMIT_NPROC lowered to this side's own tasks plus `limit_above`, then one fork:
    ("ok" or the errno name, whether the limit was lowered, the limit)."""
    own = tasks_of(os.getuid())
    hard = Rlimit()
    libc.syscall(SYS_PRLIMIT64, 0, RLIMIT_NPROC, None, ctypes.byref(hard))
    low = Rlimit(own + limit_above, hard.max)
    lowered = libc.syscall(SYS_PRLIMIT64, 0, RLIMIT_NPROC, ctypes.byref(low), None) == 0
    try:
        pid = os.fork()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno)), lowered, own + limit_above
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return "ok", lowered, own + limit_above


def hold_children(n):
    """`n` children that sleep until their parent's pipe closes."""
    rd, wr = os.pipe()
    pids = []
    for _ in range(n):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            os.close(wr)
            os.read(rd, 1)
            os._exit(0)
        pids.append(pid)
    os.close(rd)
    return pids, wr


def cmd_nproc_hold(n):
    pids, wr = hold_children(int(n))
    touch("cmd-nproc-held")
    ok = wait_file("agent-nproc-tried")
    os.close(wr)
    for p in pids:
        os.waitpid(p, 0)
    print(json.dumps({"children": len(pids), "agent_done": ok}))


def cmd_nproc_try():
    r, lowered, limit = fork_under(20)
    print(json.dumps({"fork": r, "lowered": lowered, "limit": limit}))


F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032


def pipes_hold():
    """Pipes grown to 1 MiB until the kernel refuses to grow one (past
    fs.pipe-user-pages-soft, counted per user): (pipes, why it stopped)."""
    import fcntl
    held = []
    while len(held) < 200:
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
        except OSError as e:
            os.close(r)
            os.close(w)
            return held, errno.errorcode.get(e.errno, str(e.errno))
        held.append((r, w))
    return held, "none"


def pipes_past_soft(held):
    """Past the soft limit: plain pipes until the kernel gives one its least (2 pages) or
    40 more were made: the size of the last."""
    size = 0
    for _ in range(40):
        r, w = os.pipe()
        held.append((r, w))
        import fcntl
        size = fcntl.fcntl(w, F_GETPIPE_SZ)
        if size < 65536:
            break
    return size


def pipe_size():
    import fcntl
    r, w = os.pipe()
    n = fcntl.fcntl(w, F_GETPIPE_SZ)
    os.close(r)
    os.close(w)
    return n


def cmd_pipes_hold():
    held, stop = pipes_hold()
    last = pipes_past_soft(held)
    touch("cmd-pipes-held")
    ok = wait_file("agent-pipes-tried")
    print(json.dumps({"held": len(held), "stopped_by": stop, "agent_done": ok,
                      "last_pipe_size": last, "new_pipe_size": pipe_size()}))


CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000, 0x20000000, 0x40000000
SYS_SETRESUID, SYS_SETGROUPS, SYS_UNSHARE, SYS_SETNS = 117, 116, 272, 308
PTRACE_ATTACH = 16


def status_fields(pid="self"):
    out = {}
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
                     "NoNewPrivs", "Seccomp"):
                out[k] = v.split()
    return out


def attempt(fn):
    ctypes.set_errno(0)
    try:
        r = fn()
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    if isinstance(r, int) and r < 0:
        return err()
    return "ok"


def write_file(path, text):
    def f():
        with open(path, "w") as fh:
            fh.write(text)
    return f


def userns_report(owner):
    """What this process may do with user namespaces and ids: its credentials, its maps,
    and each attempt's result."""
    uid = os.getuid()
    r = {"status": status_fields()}
    for f in ("uid_map", "gid_map", "setgroups"):
        try:
            r[f] = open("/proc/self/" + f).read().split()
        except OSError as e:
            r[f] = errno.errorcode.get(e.errno, str(e.errno))
    r["ns_user"] = os.readlink("/proc/self/ns/user")
    r["unshare_user"] = attempt(lambda: libc.syscall(SYS_UNSHARE, CLONE_NEWUSER))
    r["unshare_mount"] = attempt(lambda: libc.syscall(SYS_UNSHARE, CLONE_NEWNS))
    r["unshare_net"] = attempt(lambda: libc.syscall(SYS_UNSHARE, CLONE_NEWNET))
    fd = os.open("/proc/self/ns/user", os.O_RDONLY)
    r["setns_own_user"] = attempt(lambda: libc.syscall(SYS_SETNS, fd, CLONE_NEWUSER))
    os.close(fd)
    try:
        fd = os.open("/proc/1/ns/user", os.O_RDONLY)
        r["setns_pid1_user"] = attempt(lambda: libc.syscall(SYS_SETNS, fd, CLONE_NEWUSER))
        os.close(fd)
    except OSError as e:
        r["setns_pid1_user"] = "open " + errno.errorcode.get(e.errno, str(e.errno))
    r["write_uid_map"] = attempt(write_file("/proc/self/uid_map", "0 %d 1\n" % uid))
    r["write_setgroups"] = attempt(write_file("/proc/self/setgroups", "deny"))
    r["setgroups"] = attempt(lambda: libc.syscall(SYS_SETGROUPS, 0, None))
    r["setresuid_root"] = attempt(lambda: libc.syscall(SYS_SETRESUID, 0, 0, 0))
    r["setresuid_owner"] = attempt(lambda: libc.syscall(SYS_SETRESUID, owner, owner, owner))
    r["chown_to_owner"] = attempt(lambda: os.chown(os.path.join(WS, "side_probe.py"), owner, -1))
    # Every other process of this side's /proc: ptrace and a signal 0.
    others = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in (os.getpid(), os.getppid()):
            others[pid] = {"kill0": attempt(lambda: os.kill(int(pid), 0)),
                           "ptrace": attempt(lambda: libc.ptrace(PTRACE_ATTACH, int(pid), None, None))}
    r["others"] = others
    return r


def cmd_userns(owner):
    print(json.dumps(userns_report(int(owner))))


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


def agent_mqueue():
    """Both ways: the command holds POSIX message queues up to its RLIMIT_MSGQUEUE while the
    agent opens one; then the agent holds them while a command opens one."""
    t, box = in_background("python3 side_probe.py cmd mq_hold")
    held = wait_file("cmd-mq-held")
    r = {"cmd_held_in_time": held, "agent_while_cmd_holds": mq_try("agent")}
    touch("agent-mq-tried")
    t.join()
    r["cmd_holding"] = last_json(box.get("result", {}).get("stdout"))
    fds, stop = mq_hold("agent")
    r["agent_holding"] = {"held": len(fds), "stopped_by": stop}
    r["cmd_while_agent_holds"] = last_json(bash("python3 side_probe.py cmd mq_try").get("stdout"))
    for fd in fds:
        os.close(fd)
    return r


def agent_nproc():
    """Both ways: the command keeps 40 children while the agent, its RLIMIT_NPROC lowered
    to the tasks it sees of its own plus 20, forks one; then the agent keeps 40 while a
    command does the same (and once before, with nothing held: tasks of a side that its
    /proc does not show, the runner's, count too). Counted per user, the other side's 40
    would refuse the fork (EAGAIN)."""
    control = last_json(bash("python3 side_probe.py cmd nproc_try").get("stdout"))
    t, box = in_background("python3 side_probe.py cmd nproc_hold 40")
    held = wait_file("cmd-nproc-held")
    pid = os.fork()
    if pid == 0:
        # In a child, so the agent's own limit stays as it was.
        res, lowered, limit = fork_under(20)
        with open(os.path.join(WS, "agent-nproc.json"), "w") as f:
            json.dump({"fork": res, "lowered": lowered, "limit": limit}, f)
        os._exit(0)
    os.waitpid(pid, 0)
    # The probe sees a shared count where there is one: a second command, on the same
    # side as the 40 children, under the same lowered limit.
    same_side = last_json(bash("python3 side_probe.py cmd nproc_try").get("stdout"))
    r = {"cmd_held_in_time": held, "cmd_control": control, "cmd_beside_cmd": same_side,
         "agent_while_cmd_holds": json.load(open(os.path.join(WS, "agent-nproc.json")))}
    touch("agent-nproc-tried")
    t.join()
    r["cmd_holding"] = last_json(box.get("result", {}).get("stdout"))
    pids, wr = hold_children(40)
    r["agent_children"] = len(pids)
    r["cmd_while_agent_holds"] = last_json(bash("python3 side_probe.py cmd nproc_try").get("stdout"))
    os.close(wr)
    for p in pids:
        os.waitpid(p, 0)
    return r


def agent_watches():
    """Both ways: the command adds inotify watches until the kernel refuses one while the
    agent adds one; then the agent holds them while a command adds one."""
    t, box = in_background("python3 side_probe.py cmd watches_hold", timeout_ms=300000)
    held = wait_file("cmd-watches-held", seconds=280)
    r = {"cmd_held_in_time": held, "agent_while_cmd_holds": watch_try()}
    touch("agent-watches-tried")
    t.join()
    r["cmd_holding"] = last_json(box.get("result", {}).get("stdout"))
    n, stop, fds = watches_hold()
    r["agent_holding"] = {"watches": n, "stopped_by": stop}
    r["cmd_while_agent_holds"] = last_json(bash("python3 side_probe.py cmd watch_try").get("stdout"))
    for fd in fds:
        os.close(fd)
    return r


def agent_pipes():
    """Pipe buffer pages (fs.pipe-user-pages-soft) are counted per kernel uid, not per
    user namespace: what a new pipe of the agent's gets while a command holds past the
    soft limit. Not separated (the manual says so); run by hand, no test asserts it."""
    before = pipe_size()
    t, box = in_background("python3 side_probe.py cmd pipes_hold")
    held = wait_file("cmd-pipes-held")
    r = {"before": before, "cmd_held_in_time": held, "agent_while_cmd_holds": pipe_size()}
    touch("agent-pipes-tried")
    t.join()
    r["cmd_holding"] = last_json(box.get("result", {}).get("stdout"))
    return r


def agent_userns():
    """What the command side's own user namespace gives a command (and what the agent side
    has, to compare): credentials, maps, unshare/setns, the maps and setgroups written,
    ids changed (root, the namespace's owner uid), ptrace and signals of what it sees."""
    owner = os.getuid() | 1 << 31
    out = bash("python3 side_probe.py cmd userns %d" % owner)
    return {"agent": userns_report(owner), "command": last_json(out.get("stdout")),
            "stderr": out.get("stderr")}


def main():
    if sys.argv[1] == "cmd":
        {"prlimit": cmd_prlimit, "blind": cmd_blind, "fdpass": cmd_fdpass,
         "sysv": cmd_sysv, "inotify_hold": cmd_inotify_hold,
         "inotify_try": cmd_inotify_try, "sig_hold": cmd_sig_hold,
         "mq_hold": cmd_mq_hold, "mq_try": cmd_mq_try, "nproc_hold": cmd_nproc_hold,
         "nproc_try": cmd_nproc_try, "pipes_hold": cmd_pipes_hold, "userns": cmd_userns,
         "watches_hold": cmd_watches_hold, "watch_try": cmd_watch_try}[sys.argv[2]](*sys.argv[3:])
        return
    scenarios = {"prlimit": agent_prlimit, "blind": agent_blind, "fdpass": agent_fdpass,
                 "sysv": agent_sysv, "inotify": agent_inotify, "sigpending": agent_sigpending,
                 "mqueue": agent_mqueue, "nproc": agent_nproc, "pipes": agent_pipes,
                 "userns": agent_userns, "watches": agent_watches}
    for s in sys.argv[2:]:
        name, _, arg = s.partition("=")
        try:
            r = scenarios[name](*([arg] if arg else []))
        except Exception as e:  # noqa: BLE001 - reported, the test fails on it
            r = {"error": "%s: %s" % (type(e).__name__, e)}
        print("SIDES " + json.dumps({"scenario": name, **r}), flush=True)


main()
