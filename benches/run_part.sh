#!/usr/bin/env bash
# The run's part of a jail, step by step: N (default 30) `launch --wait code -- /bin/true`
# through one airlockd (default config: the shared warm jail serves each), spaced out, and
# from each run's journal the helper's setup line (`jail: setup: ...`): the time from the
# spec's arrival in pid 1 to the agent's exec, and when each step ended
# (src/sandbox/setup_marks.rs). Prints the median of each step's own time and of its end.
# What a warm jail cannot build ahead is here: the run's filesystem, its cgroups' limits,
# the sides, the instance's uid, Landlock, seccomp. Root only; needs journald.
set -euo pipefail
N="${N:-30}"
INSTANCES=1
source "$(dirname "$0")/daemon_env.sh"

# Prints the run's id; a launch that fails ends the bench (set -e) with its error.
launch() {
  ctl launch --wait code --instance b0 -- /bin/true >"$W/launch.err" 2>&1 \
    || { echo "run_part: a launch failed:" >&2; cat "$W/launch.err" >&2; return 1; }
  grep -o 'r-[0-9a-f]*-[0-9a-f]*' "$W/launch.err" | head -n 1
}
for _ in 1 2 3; do launch >/dev/null; done
sleep 2
for _ in $(seq 1 "$N"); do
  launch
  # Spaced out, so the shared jail is built again before the next launch takes it.
  sleep "${GAP:-0.3}"
done >"$W/runs"
sleep 1
while read -r run; do
  journalctl -q AIRLOCK_RUN="$run" AIRLOCK_EVENT=jail_report -o cat >"$W/report"
  # One line per run: the agent's setup line, then when the command side was ready.
  echo "$(grep 'setup: ' "$W/report" | head -n 1) $(grep -o 'runner ready [0-9]* us.*confined at [0-9]* us' "$W/report" | head -n 1)"
done <"$W/runs" >"$W/lines"

python3 - "$W/lines" "$N" <<'PY'
import re, statistics, sys
rows = []
for line in open(sys.argv[1]):
    m = re.search(r"\((\d+) us from the spec's arrival; each step's end, in us from it: (.*)\)", line)
    if m:
        steps = [s.rsplit(" ", 1) for s in m.group(2).split(", ")]
        rows.append((int(m.group(1)), [(name, int(us)) for name, us in steps]))
if len(rows) != int(sys.argv[2]):
    sys.exit(f"run_part: {len(rows)} of {sys.argv[2]} runs have a setup line with steps")
print(f"run_part: {len(rows)} launches, spec's arrival to the agent's exec, medians (us)")
print(f"  {'step':28} {'its own':>8} {'ends at':>8}")
for i, (name, _) in enumerate(rows[0][1]):
    own = [r[1][i][1] - (r[1][i - 1][1] if i else 0) for r in rows]
    end = [r[1][i][1] for r in rows]
    print(f"  {name:28} {statistics.median(own):8.0f} {statistics.median(end):8.0f}")
print(f"  {'exec':28} {'':8} {statistics.median([r[0] for r in rows]):8.0f}")
# The command side, in parallel from its fork: the agent's "go" waits for its readiness.
side = [re.search(r"runner ready (\d+) us.*confined at (\d+) us", l) for l in open(sys.argv[1])]
side = [(int(m.group(2)), int(m.group(1))) for m in side if m]
if side:
    print(f"  command side (its runner), in parallel:")
    print(f"  {'  confined (uid, Landlock, seccomp)':28} {'':8} {statistics.median([c for c, _ in side]):8.0f}")
    print(f"  {'  ready (noexec runner too)':28} {'':8} {statistics.median([r for _, r in side]):8.0f}")
PY
