#!/usr/bin/env bash
# What a launch builds, against bwrap's bare sandbox (the comparator of launch_ab.sh and
# daemon_e2e.sh): the floor under issue 48's CPU and latency targets. Root only.
#
# 1. CPU per launch, alternated in ROUNDS (default 3) of N (default 30) each:
#    `launch --wait code -- /bin/true` through one airlockd with `warm_max: 0` (airlockd and what it reaped,
#    as launch_cpu.sh counts it) and the bwrap command (what its Python driver reaped).
# 2. The bill of materials of one launch of each, from `strace -f` (airlockd attached with
#    all its threads and whatever they start): processes started, namespaces made by kind,
#    mount calls, cgroups made and removed, other directories made, Landlock domains,
#    seccomp filters, fdatasyncs, execs. Everything counted is the kernel work each side
#    asks for; what it costs per item is in a `perf record` of launch_cpu.sh.
#
# 3. PERF=1: a perf profile of N more launches, by system call and by program.
#
# Usage: [AIRLOCK_BIN=DIR] [N=30] [ROUNDS=3] [PERF=1] benches/launch_floor.sh
set -euo pipefail
N="${N:-30}"
ROUNDS="${ROUNDS:-3}"
INSTANCES=1
# No jail built ahead: each launch builds its whole jail while it is traced (a warm jail
# moves that work before the launch; it does not remove it).
EXTRA_CONFIG="warm_max: 0"
command -v strace >/dev/null || apt-get install -y strace >/dev/null
command -v bwrap >/dev/null || apt-get install -y bubblewrap >/dev/null
source "$(dirname "$0")/daemon_env.sh"

# The bare sandbox launch_ab.sh and daemon_e2e.sh compare with.
BWRAP=(bwrap --unshare-all --die-with-parent --new-session --cap-drop ALL --ro-bind /usr /usr
       --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc
       --dev /dev /bin/true)
# A launch that fails ends the bench (set -e) with its error, before any figure.
launch() {
  ctl launch --wait code --instance b0 -- /bin/true >"$W/launch.err" 2>&1 \
    || { echo "launch_floor: a launch failed:" >&2; cat "$W/launch.err" >&2; return 1; }
}
daemon_cpu() { awk '{print $14 + $15 + $16 + $17}' "/proc/$DPID/stat"; }
# CPU of N bwrap runs (user + system of the reaped children), in seconds.
bwrap_cpu() {
  python3 - "$1" "${BWRAP[@]}" <<'PY'
import resource, subprocess, sys
for _ in range(int(sys.argv[1])):
    subprocess.run(sys.argv[2:], check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)
PY
}

for _ in 1 2 3; do launch; "${BWRAP[@]}"; done
sleep 2
hz="$(getconf CLK_TCK)"
echo "launch_floor: CPU per launch, $ROUNDS rounds of $N, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  c0="$(daemon_cpu)"
  for _ in $(seq 1 "$N"); do launch; done
  sleep 2
  c1="$(daemon_cpu)"
  b="$(bwrap_cpu "$N")"
  python3 - "$c0" "$c1" "$hz" "$N" "$b" "$r" <<'PY'
import sys
c0, c1, hz, n = (int(x) for x in sys.argv[1:5])
print(f"  round {sys.argv[6]}: airlock {(c1 - c0) / hz / n * 1000:.1f} ms, bwrap {float(sys.argv[5]) / n * 1000:.1f} ms")
PY
done

# One launch of each under strace. -y names each descriptor's path (a cgroup made with
# mkdirat below an open cgroup directory).
trace="strace -f -qq -y -s 200 -e trace=clone,clone3,vfork,fork,unshare,setns,mount,move_mount,fsmount,open_tree,mount_setattr,umount2,pivot_root,mkdir,mkdirat,rmdir,unlinkat,landlock_restrict_self,seccomp,prctl,fdatasync,fsync,execve"
$trace -o "$W/airlock.strace" -p "$DPID" &
S=$!
sleep 1
launch
sleep 2
kill -INT "$S"
wait "$S" 2>/dev/null || true
$trace -o "$W/bwrap.strace" "${BWRAP[@]}"

python3 - "$W/airlock.strace" "$W/bwrap.strace" <<'PY'
import re, sys

KINDS = ["NEWNS", "NEWPID", "NEWNET", "NEWIPC", "NEWUTS", "NEWUSER", "NEWCGROUP"]

def count(path):
    c = {}
    def add(k, n=1):
        c[k] = c.get(k, 0) + n
    for line in open(path, errors="replace"):
        m = re.match(r"\d+\s+(\w+)\((.*)", line)
        # A call strace splits shows its arguments on its first line (`<unfinished ...>`);
        # the line with its result starts `<...` and matches nothing.
        if not m or "= -1" in line:
            continue
        call, args = m.group(1), m.group(2)
        if call in ("clone", "clone3", "fork", "vfork"):
            if "CLONE_THREAD" in args:
                add("threads started")
                continue
            add("processes started")
        if call in ("clone", "clone3", "unshare"):
            for k in KINDS:
                if "CLONE_" + k in args:
                    add("namespaces: " + k.lower().replace("new", ""))
        if call in ("mount", "move_mount", "fsmount", "open_tree", "mount_setattr"):
            add(f"mount calls ({call})")
        if call in ("umount2", "pivot_root"):
            add(call)
        if call in ("mkdir", "mkdirat"):
            add("cgroups made" if "/sys/fs/cgroup" in args else "other directories made")
        if call == "rmdir" or (call == "unlinkat" and "AT_REMOVEDIR" in args):
            add("cgroups removed" if "/sys/fs/cgroup" in args else "other directories removed")
        if call == "landlock_restrict_self":
            add("Landlock domains")
        if call == "seccomp" or (call == "prctl" and "PR_SET_SECCOMP" in args):
            add("seccomp filters")
        if call in ("fdatasync", "fsync"):
            f = re.search(r"<([^>]*)>", args)
            add("syncs: " + (f.group(1).rsplit("/", 1)[-1] if f else "?"))
        if call == "execve":
            add("execs")
    return c

a, b = count(sys.argv[1]), count(sys.argv[2])
print("launch_floor: what one launch asks the kernel for (strace -f)")
print(f"  {'':34} {'airlock':>8} {'bwrap':>8}")
for k in sorted(set(a) | set(b)):
    print(f"  {k:34} {a.get(k, 0):>8} {b.get(k, 0):>8}")
PY

# PERF=1: where airlockd's launches spend their CPU, by system call (children inherited;
# a system call's share includes what the kernel does under it).
if [ "${PERF:-0}" = 1 ]; then
  command -v perf >/dev/null || apt-get install -y linux-perf >/dev/null
  perf record -q -F 2000 -g -o "$W/perf.data" -p "$DPID" 2>/dev/null &
  P=$!
  sleep 1
  for _ in $(seq 1 "$N"); do launch; done
  sleep 1
  kill -INT "$P"
  wait "$P" 2>/dev/null || true
  echo "launch_floor: the system calls under which $N launches spent their CPU (perf, % of all)"
  perf report -i "$W/perf.data" --children --sort sym --stdio 2>/dev/null \
    | grep -E '\[k\] (__x64_sys|__do_sys)' | head -n 20 | awk '{print "  " $1 "  " $4}'
  echo "  by program:"
  perf report -i "$W/perf.data" --no-children --sort comm --stdio -g none 2>/dev/null \
    | grep -E '^ +[0-9]' | head -n 6 | awk '{print "  " $1 "  " $2}'
fi
