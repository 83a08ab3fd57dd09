#!/usr/bin/env python3
"""Keystroke-to-echo latency through `airlockctl launch --tty` (the agent is /bin/cat on
the run's own pty, relayed by airlockd) against /bin/cat on a plain pty, p50 and p99.
Run as root from the repository after `cargo build --bins`:
    python3 benches/tty_latency.py [N]
"""
import os, pty, select, subprocess, sys, tempfile, time, tty

N = int(sys.argv[1]) if len(sys.argv) > 1 else 500
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, "target/debug")


def measure(argv, env=None, warm=b"ready\r"):
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env or os.environ)
    def read_until(want, limit=60):
        buf, end = b"", time.time() + limit
        while want not in buf:
            r, _, _ = select.select([fd], [], [], max(0, end - time.time()))
            if not r:
                raise SystemExit(f"no {want!r} from {argv[0]}: {buf[-300:]!r}")
            buf += os.read(fd, 65536)
        return buf
    # Wait for cat to echo once: the run is up.
    deadline = time.time() + 60
    while True:
        os.write(fd, warm)
        try:
            read_until(b"ready", 1)
            break
        except SystemExit:
            if time.time() > deadline:
                raise
    time.sleep(0.3)
    select.select([fd], [], [], 0.2) and os.read(fd, 65536)
    lat = []
    for i in range(N):
        ch = bytes([ord("a") + i % 26])
        t = time.perf_counter()
        os.write(fd, ch)
        read_until(ch, 10)
        lat.append((time.perf_counter() - t) * 1e6)
    os.write(fd, b"\x03")
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99) - 1]


def main():
    d = tempfile.mkdtemp()
    uid = 1880094990
    cfg = os.path.join(d, "airlock.yaml")
    with open(cfg, "w") as f:
        f.write(f"roles: [{REPO}/roles]\npolicies: {REPO}/policies\nstate_dir: {d}/state\n"
                f"socket: {d}/airlockd.sock\nuid_range: 1880096000-1880096999\n"
                f"instances:\n  tess: {{role: code, uid: {uid}}}\n")
    daemon = subprocess.Popen([f"{BIN}/airlockd", "--config", cfg],
                              stdout=subprocess.DEVNULL, stderr=open(f"{d}/err", "w"))
    try:
        for _ in range(300):
            if subprocess.run([f"{BIN}/airlockctl", "--config", cfg, "status"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        direct = measure(["/bin/cat"])
        airlock = measure([f"{BIN}/airlockctl", "--config", cfg, "launch", "code",
                           "--instance", "tess", "--tty", "--", "/bin/cat"])
        print(f"N={N} keystroke-to-echo, microseconds")
        print(f"direct pty  /bin/cat: p50 {direct[0]:.0f} p99 {direct[1]:.0f}")
        print(f"launch --tty /bin/cat: p50 {airlock[0]:.0f} p99 {airlock[1]:.0f}")
    finally:
        daemon.kill()
        daemon.wait()


main()
