#!/usr/bin/env bash
# CPU per launch: N (default 50) sequential `launch --wait code -- /bin/true` through one
# airlockd, with the default limits. Reports the CPU time airlockd and everything it started
# and reaped (jail helpers, agents, mke2fs) spent per launch: the figure that bounds how many
# launches a host of C cores can start per second (C / CPU per launch), whatever the load,
# since CPU time does not grow when other work shares the machine the way wall time does.
# Exits non-zero when a run does not exit 0. Root only.
set -euo pipefail
N="${N:-50}"
INSTANCES=1
source "$(dirname "$0")/daemon_env.sh"
cpu() { awk '{print $14 + $15 + $16 + $17}' "/proc/$DPID/stat"; }
own() { awk '{print $14 + $15}' "/proc/$DPID/stat"; }
ctl launch --wait code --instance b0 -- /bin/true >/dev/null 2>"$W/first.err" \
  || { echo "launch_cpu: the first launch failed:" >&2; cat "$W/first.err" >&2; exit 1; }
sleep 1
c0="$(cpu)"
o0="$(own)"
t0="$(date +%s%N)"
for _ in $(seq 1 "$N"); do
  ctl launch --wait code --instance b0 -- /bin/true >/dev/null 2>&1 \
    || { echo "launch_cpu: a run failed" >&2; exit 1; }
done
t1="$(date +%s%N)"
# The standby helper and pool images made after the last run are counted once they end.
sleep 2
c1="$(cpu)"
o1="$(own)"
hz="$(getconf CLK_TCK)"
python3 - "$c0" "$c1" "$hz" "$N" "$t0" "$t1" "$o0" "$o1" <<'PY'
import sys
c0, c1, hz, n, t0, t1, o0, o1 = (int(x) for x in sys.argv[1:])
print(f"launch_cpu: {n} sequential launches of /bin/true")
print(f"  CPU per launch (airlockd and what it reaped): {(c1 - c0) / hz / n * 1000:.1f} ms")
print(f"    of which airlockd's own threads:            {(o1 - o0) / hz / n * 1000:.1f} ms")
print(f"  wall per launch:                             {(t1 - t0) / n / 1e6:.1f} ms")
PY
