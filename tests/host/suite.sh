#!/bin/bash
# The host suite: runs as root inside the Debian 12 VM (tests/host/guest.sh starts it at
# boot, from the 9p share /mnt/ci), on a host installed the way README's "Install the
# Debian package" says, with the shipped units.
#
#   suite.sh 1    install, units, roles, launches (both sides, the bash tool), journal,
#                 ps/top, cgroups, reload and restart with a run going, a fork bomb and a
#                 memory hog, the escape battery on both sides, the watchdog, standalone
#                 launches; then asks for a reboot (exit 100)
#   suite.sh 2    after the reboot: the units came back, verify-ledger, the first boot's
#                 runs and journal, a launch
#
# Each check prints `ok: NAME (T s)` or `FAIL: NAME: REASON (exit N)` followed by what it
# saw, indented, and appends its line to /mnt/ci/out/checks, which the harness counts.
# Exit 0 when every check passed, 1 when one failed, 100 to ask for the reboot.
set -u
phase="${1:?phase}"
share=/mnt/ci
checks="$share/out/checks"
state=/var/lib/airlock-ci
lib=/tmp/suite
mkdir -p "$state" "$lib"
fails=0
export LC_ALL=C.UTF-8 SYSTEMD_PAGER='' PAGER=cat

ok() { echo "ok: $*" | tee -a "$checks"; }
bad() {
  echo "FAIL: $*" | tee -a "$checks"
  fails=$((fails + 1))
}
# What a check saw, indented (at most 60 lines: head and tail).
show() {
  local n
  n=$(wc -l <"$1")
  if [ "$n" -le 60 ]; then sed 's/^/    /' "$1"; else
    head -n 30 "$1" | sed 's/^/    /'
    echo "    ... ($((n - 50)) lines)"
    tail -n 20 "$1" | sed 's/^/    /'
  fi
}
# The last non-empty line, for a FAIL line's reason.
reason() { grep -v '^[[:space:]]*$' "$1" | tail -n 1 | cut -c1-240; }

OUT=/tmp/suite.out
# How quickly airlockd must answer under load: 3 s, or 10 s under TCG (no KVM: every
# instruction emulated).
FAST_MS=3000
[ "$(cat "$share/accel" 2>/dev/null)" = tcg ] && FAST_MS=10000
# check NAME CMD...: CMD (a program or an exported function) decides by its exit status,
# within $LIMIT seconds (default 180). Its output is kept in $OUT.
check() {
  local name="$1" t0 rc dt why
  shift
  t0=$(date +%s%N)
  timeout --kill-after=5 "${LIMIT:-180}" bash -c '"$@"' _ "$@" >"$OUT" 2>&1 </dev/null
  rc=$?
  dt=$(awk -v n=$(($(date +%s%N) - t0)) 'BEGIN { printf "%.1f", n / 1e9 }')
  if [ "$rc" -eq 0 ]; then
    ok "$name (${dt} s)"
    [ -n "${VERBOSE:-}" ] && show "$OUT"
  else
    why="$(reason "$OUT")"
    [ "$rc" -eq 124 ] && why="timed out after ${LIMIT:-180} s; ${why}"
    bad "$name: ${why:-no output} (exit $rc)"
    show "$OUT"
  fi
  return "$rc"
}
# An informational block, never a check.
info() {
  echo "--- $1"
  shift
  "$@" 2>&1 | sed 's/^/    /'
}
# The run id airlockctl printed.
run_id() { grep -oE '(^|[^a-z0-9-])r-[a-z0-9-]+' "$1" | head -n 1 | grep -oE 'r-[a-z0-9-]+'; }
note_run() { local r; r="$(run_id "$1")"; [ -n "$r" ] && echo "$r" >>"$state/runs"; }
# Milliseconds a command takes.
ms() {
  local t0
  t0=$(date +%s%N)
  timeout 30 "$@" >/dev/null 2>&1
  echo $((($(date +%s%N) - t0) / 1000000))
}
# Processes of instance uids (uid_range starts at 1880000000), anywhere on the host.
instance_procs() { ps -e -o uid=,pid=,args= | awk '$1 >= 1880000000'; }
# Whether PID is a live process (a zombie not yet reaped is not).
alive() {
  local s
  s="$(ps -o stat= -p "$1" 2>/dev/null)"
  [ -n "$s" ] && [ "${s#Z}" = "$s" ]
}
export -f instance_procs alive

# ---- Helper programs (python3 is in the image). ----
# The agent side's MCP client: initialize, then each argument as a bash tool call through
# $AIRLOCK_GATEWAY/mcp/airlock; prints `BASH {json}` per call. `--write NAME TEXT` first
# writes TEXT to NAME in the workspace (both sides see it).
cat >"$lib/mcp_client.py" <<'EOF'
import json, os, sys, urllib.request
args = sys.argv[1:]
while args[:1] == ["--write"]:
    with open(args[1], "w") as f:
        f.write(args[2])
    args = args[3:]
url = os.environ["AIRLOCK_GATEWAY"] + "/mcp/airlock"
session = None
def post(msg):
    global session
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session:
        h["Mcp-Session-Id"] = session
    req = urllib.request.Request(url, data=json.dumps(msg).encode(), headers=h)
    with urllib.request.urlopen(req, timeout=120) as r:
        session = r.headers.get("Mcp-Session-Id") or session
        body = r.read()
        return json.loads(body) if body else None
post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "host-suite", "version": "1"}}})
post({"jsonrpc": "2.0", "method": "notifications/initialized"})
for i, cmd in enumerate(args):
    r = post({"jsonrpc": "2.0", "id": 2 + i, "method": "tools/call",
              "params": {"name": "bash", "arguments": {"command": cmd, "timeout_ms": 300000}}})
    print("BASH " + json.dumps({"command": cmd, "result": r.get("result"), "error": r.get("error")}), flush=True)
EOF
# Its verdict: `id -u` ran as the instance, `rm` was refused.
cat >"$lib/bash_verdict.py" <<'EOF'
import json, sys
calls = [json.loads(l[5:]) for l in open(sys.argv[1]) if l.startswith("BASH ")]
assert len(calls) == 3, "%d of 3 bash calls answered" % len(calls)
ran, refused = calls[0]["result"], calls[2]["result"]
assert ran and not ran.get("isError"), "id -u: %s" % (ran or calls[0]["error"])
sc = ran.get("structuredContent") or {}
out = (sc.get("stdout") or "").strip()
assert sc.get("exit_code") == 0 and out not in ("", "0"), "id -u: %s" % sc
assert refused and refused.get("isError"), "rm -rf was not refused: %s" % refused
print("id -u -> %s; uname -r -> %s; rm -rf -> %s" % (
    out, ((calls[1]["result"] or {}).get("structuredContent") or {}).get("stdout", "").strip(),
    refused["content"][0]["text"][:160]))
EOF
# The journal fields of a run: python3 journal_fields.py ROLE INSTANCE < journalctl -o json
cat >"$lib/journal_fields.py" <<'EOF'
import json, sys
recs = [json.loads(l) for l in sys.stdin if l.strip()]
assert recs, "no journal records for the run"
roles = {r.get("AIRLOCK_ROLE") for r in recs}
insts = {r.get("AIRLOCK_INSTANCE") for r in recs}
events = sorted({r["AIRLOCK_EVENT"] for r in recs if r.get("AIRLOCK_EVENT")})
print(len(recs), "records; AIRLOCK_ROLE", roles, "AIRLOCK_INSTANCE", insts, "AIRLOCK_EVENT", events)
assert sys.argv[1] in roles and sys.argv[2] in insts and events
EOF
cat >"$lib/tool_calls.py" <<'EOF'
import json, sys
recs = [json.loads(l) for l in sys.stdin if l.strip()]
d = sorted(r.get("AIRLOCK_DECISION") or "?" for r in recs)
print(len(recs), "tool_call events, decisions:", d, [r.get("AIRLOCK_RULE") for r in recs])
assert "allow" in d and "deny" in d
EOF
# `airlockctl ps` has CPU and MEM (not `-`) for RUN: python3 ps_columns.py RUN < ps output
cat >"$lib/ps_columns.py" <<'EOF'
import sys
lines = sys.stdin.read().splitlines()
print("\n".join(lines))
head = lines[0].split()
row = next((l.split() for l in lines[1:] if sys.argv[1] in l), None)
assert row, "no row for " + sys.argv[1]
cpu, mem = row[head.index("CPU")], row[head.index("MEM")]
print("CPU", cpu, "MEM", mem)
assert cpu != "-" and mem != "-"
EOF
cat >"$lib/top_json.py" <<'EOF'
import json, sys
runs = json.load(sys.stdin)["runs"]
r = next((x for x in runs if sys.argv[1] in json.dumps(x)), None)
assert r, "no run " + sys.argv[1]
live = r.get("live") or {}
print("cpu_usec", live.get("cpu_usec"), "memory_bytes", live.get("memory_bytes"))
assert (live.get("cpu_usec") or 0) > 0 and (live.get("memory_bytes") or 0) > 0
EOF
# The escape battery's verdicts: python3 battery_held.py FILE [SKIPPED,...]
cat >"$lib/battery_held.py" <<'EOF'
import json, sys
text = open(sys.argv[1], errors="replace").read()
skipped = [s for s in (sys.argv[2] if len(sys.argv) > 2 else "").split(",") if s]
line = next((l[len("BATTERY "):] for l in text.splitlines() if l.startswith("BATTERY ")), None)
if line is None:
    print("the escape battery printed no verdicts")
    sys.exit(1)
v = json.loads(line)
open_ = {k: x["seen"] for k, x in v.items() if x.get("held") is not True}
for k, s in open_.items():
    print("open: %s: %s" % (k, s))
print("%d checks, %d held%s" % (len(v), len(v) - len(open_), "; open: " + ", ".join(open_) if open_ else ""))
sys.exit(1 if open_ or not v else 0)
EOF

# ---- The roles the suite hires (roles.local). ----
# The shipped smoke role is `hello` (a workflow role needing no credential that runs its own
# command). Where the package has none, a stand-in of that name is written (and the check
# that the package ships it fails).
write_stand_in_hello() {
  mkdir -p /etc/airlock/roles.local/hello
  cat >/etc/airlock/roles.local/hello/role.yaml <<'EOF'
# Stand-in written by the host suite: the package ships no `hello` role.
schema: 1
role: hello
level: L1
brief: brief.md
kind: workflow
identity:
  board_name: airlock:hello
  key_store: airlock
writes:
  repos: []
tools: {}
budget:
  runs_per_week: 1000
  minutes_per_run: 10
EOF
  printf '# Hello\n\nSay hello from the jail.\n' >/etc/airlock/roles.local/hello/brief.md
  printf '#!/bin/sh\necho "hello from uid $(id -u) in $(pwd)"\n' >/etc/airlock/roles.local/hello/workflow.sh
}
# The suite's own roles. hostagent: an agent role launched with `-- CMD` in place of the
# agent (no model is reached); its bash tool allows a few harmless prefixes. hostcmd: a
# workflow role with room for the long commands (hello's budget is one minute a run).
write_suite_roles() {
  mkdir -p /etc/airlock/roles.local/hostagent /etc/airlock/roles.local/hostcmd
  cat >/etc/airlock/roles.local/hostagent/role.yaml <<'EOF'
# The host suite's agent role: launched with `-- CMD`, so no model is reached.
schema: 1
role: hostagent
level: L1
brief: brief.md
kind: agent
writes: {}
tools:
  board: [board_read]
budget:
  runs_per_week: 1000
  minutes_per_run: 10
run:
  model: claude-sonnet-4-5
  bash:
    - echo
    - id
    - uname
    - python3 escape_battery.py
  mcp:
    board: {via: airlock}
EOF
  cat >/etc/airlock/roles.local/hostcmd/role.yaml <<'EOF'
# The host suite's workflow role: launched with `-- CMD` on the command side.
schema: 1
role: hostcmd
level: L1
brief: brief.md
kind: workflow
writes: {}
tools: {}
budget:
  runs_per_week: 1000
  minutes_per_run: 10
EOF
  printf '# Host agent\n\nThe host suite drives this agent.\n' >/etc/airlock/roles.local/hostagent/brief.md
  # An agent role's hire needs its provider and connectors configured: stand-ins that
  # nothing serves (the suite's agent launches replace the agent, so no model is asked).
  cat >>/etc/airlock/airlock.yaml <<'EOF'
# Added by the host suite: the provider and board connector hostagent's hire asks for.
providers:
  claude: {url: "http://127.0.0.1:9"}
mcp_connectors:
  board: {url: "http://127.0.0.1:9/mcp"}
EOF
  printf '# Host command\n\nThe host suite runs its commands here.\n' >/etc/airlock/roles.local/hostcmd/brief.md
}

# ---- Checks as functions (exported: check runs them in a child bash, under timeout). ----
t_cgroup2() {
  grep -q '^cgroup2 /sys/fs/cgroup cgroup2 .*nsdelegate' /proc/self/mounts && ! grep -q '^cgroup ' /proc/self/mounts
}
t_units_active() {
  systemctl is-active airlockd.socket airlockd.service && return 0
  systemctl status --no-pager -l airlockd.service
  return 1
}
# airlockd answers on its socket; where it does not, the units are restarted so that the
# checks after this one still test something (the failure is counted where it happened).
revive() {
  timeout 10 airlockctl status >/dev/null 2>&1 && return 0
  echo "    (airlockd does not answer: the suite restarts airlockd.socket and airlockd.service to go on)"
  systemctl stop airlockd.service airlockd.socket
  systemctl start airlockd.socket airlockd.service
  sleep 1
}
t_launch_wait() { # ROLE INSTANCE [ARGS...]: launch --wait through airlockd
  local role="$1" inst="$2"
  shift 2
  airlockctl launch "$role" --instance "$inst" --wait "$@"
}
t_agent_identity() {
  airlockctl launch hostagent --instance agent1 --wait -- /usr/bin/python3 -c '
import os
caps = [l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1]
print("uid", os.getuid(), "CapEff", caps, "cwd", os.getcwd())
assert os.getuid() != 0 and int(caps, 16) == 0'
}
t_bash_tool() {
  airlockctl launch hostagent --instance agent1 --wait -- /usr/bin/python3 -c "$(cat /tmp/suite/mcp_client.py)" \
    "id -u" "uname -r" "rm -rf /tmp/x" >/tmp/bash.out
  local rc=$?
  cat /tmp/bash.out
  [ "$rc" -eq 0 ] || { echo "launch exit $rc"; return 1; }
  python3 /tmp/suite/bash_verdict.py /tmp/bash.out
}
t_journal_fields() { # RUN ROLE INSTANCE
  journalctl AIRLOCK_RUN="$1" -o json --no-pager | python3 /tmp/suite/journal_fields.py "$2" "$3"
}
t_tool_calls() { journalctl AIRLOCK_RUN="$1" AIRLOCK_EVENT=tool_call -o json --no-pager | python3 /tmp/suite/tool_calls.py; }
t_ps() { airlockctl ps | python3 /tmp/suite/ps_columns.py "$1"; }
t_top() {
  airlockctl top --once | tee /dev/stderr | grep -q "$1" || { echo "top --once: no $1"; return 1; }
  airlockctl top --json | python3 /tmp/suite/top_json.py "$1"
}
t_run_cgroups() { # CGROUP RUN: the run's cgroup below airlockd's, each side limited and holding processes
  local run d s pm mm n sides=0 unlimited=0 empty=0
  run=$(find "$1" -maxdepth 3 -type d -name "$2" | head -n 1)
  [ -n "$run" ] || { echo "no cgroup named $2 below ${1#/sys/fs/cgroup}"; return 1; }
  echo "run cgroup ${run#/sys/fs/cgroup}: pids.max $(cat "$run/pids.max") memory.max $(cat "$run/memory.max")"
  for d in "$run"/*/; do
    d=${d%/}
    s=${d##*/}
    pm=$(cat "$d/pids.max" 2>/dev/null || echo none)
    mm=$(cat "$d/memory.max" 2>/dev/null || echo none)
    n=$(find "$d" -name cgroup.procs -exec cat {} + | wc -l)
    echo "  $s: pids.max $pm memory.max $mm processes $n"
    [ "$s" = init ] && continue
    sides=$((sides + 1))
    [ "$n" -gt 0 ] || empty=$((empty + 1))
    case "$pm$mm" in *max* | *none*) unlimited=$((unlimited + 1)) ;; esac
  done
  [ "$sides" -ge 2 ] || { echo "$sides side cgroups (want agent and command)"; return 1; }
  [ "$unlimited" -eq 0 ] || { echo "$unlimited side(s) without pids.max or memory.max"; return 1; }
  [ "$empty" -eq 0 ] || { echo "$empty side(s) with no process"; return 1; }
}
t_running() { # RUN: shows in ps (as running) within 30 s
  local i
  for i in $(seq 1 30); do
    airlockctl ps 2>/dev/null | grep -q "$1" && { airlockctl ps; return 0; }
    sleep 1
  done
  airlockctl show "$1"
  return 1
}
t_reload() {
  systemctl reload airlockd || return 1
  sleep 2
  systemctl is-active airlockd && airlockctl status >/dev/null && airlockctl ps | grep "$1"
}
t_status_after_restart() {
  ls -l /run/airlock/ 2>&1
  timeout 10 airlockctl status
}
t_restarted() { # PID_BEFORE
  systemctl is-active airlockd.socket airlockd.service || return 1
  [ -S /run/airlock/airlockd.sock ] || { echo "no /run/airlock/airlockd.sock"; return 1; }
  local now
  now="$(systemctl show -p MainPID --value airlockd)"
  [ "$now" != "$1" ] || { echo "same pid $now"; return 1; }
}
t_live_ended() { # RUN
  local i
  for i in $(seq 1 30); do
    airlockctl ps 2>/dev/null | grep -q "$1" || break
    sleep 1
  done
  airlockctl show "$1"
  ! airlockctl ps 2>/dev/null | grep -q "$1" || { echo "$1 still in ps"; return 1; }
  [ -z "$(instance_procs)" ] || { echo "its processes are left:"; instance_procs; return 1; }
}
t_answers_fast() { # MS LIMIT RUNNING: status answered in MS ms (under LIMIT) while RUNNING runs went on, and answers now
  [ "$3" -gt 0 ] || { echo "no run was going when status was asked (the launch was refused?)"; return 1; }
  [ "$1" -lt "$2" ] || { echo "status took $1 ms (limit $2 ms)"; return 1; }
  airlockctl status >/dev/null
}
t_waited_run_ended() { # PID OUT SECONDS WANT: the background launch PID ended (its output OUT holds WANT)
  for _ in $(seq 1 "$3"); do
    alive "$1" || break
    sleep 1
  done
  grep -v '^HOG' "$2" | tail -n 8
  grep '^HOG' "$2" | tail -n 1
  ! alive "$1" || { echo "the launch is still waiting after $3 s"; return 1; }
  [ -z "$(instance_procs)" ] || { echo "processes of instances left:"; instance_procs; return 1; }
  [ -z "$4" ] || grep -q "$4" "$2" || { echo "no '$4' in the launch's output"; return 1; }
}
t_battery() { # SIDE OUT ROLE INSTANCE [ARGS...]
  local side="$1" out="$2" role="$3" inst="$4" rc skip=""
  shift 4
  [ "$side" = agent ] && skip=daemon_started,setuid_binary
  airlockctl launch "$role" --instance "$inst" --wait -- /usr/bin/python3 -c "$(cat /mnt/ci/escape_battery.py)" "$@" >"$out" 2>&1
  rc=$?
  grep -v '^BATTERY' "$out" | tail -n 5
  python3 /tmp/suite/battery_held.py "$out" "$skip" || return 1
  [ "$rc" -eq 0 ] || { echo "launch exit $rc"; return 1; }
}
t_battery_bash() { # OUT BATTERY-ARGS...: the battery as a command the agent sends through the bash tool
  local out="$1" rc
  shift
  airlockctl launch hostagent --instance agent1 --wait -- /usr/bin/python3 -c "$(cat /tmp/suite/mcp_client.py)" \
    --write escape_battery.py "$(cat /mnt/ci/escape_battery.py)" "python3 escape_battery.py $*" >"$out.raw" 2>&1
  rc=$?
  grep -v '^BASH ' "$out.raw" | tail -n 5
  # The tool result's stdout holds the battery's verdicts.
  python3 -c '
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("BASH "):
        r = json.loads(l[5:])["result"] or {}
        sc = r.get("structuredContent") or {}
        print(sc.get("stdout") or json.dumps(r)[:2000])
        if sc.get("stderr"):
            print("stderr:", sc["stderr"][-1000:])
' "$out.raw" >"$out"
  python3 /tmp/suite/battery_held.py "$out" || { grep -v '^BATTERY' "$out" | tail -n 5; return 1; }
  [ "$rc" -eq 0 ] || { echo "launch exit $rc"; return 1; }
}
t_no_daemon() { # MARKER OUT
  grep -q '^BATTERY ' "$2" || { echo "the battery did not run, so it left no daemon to look for"; return 1; }
  ! pgrep -af "airlock-battery-$1"
}
t_watchdog() { # PID
  systemctl is-active airlockd || return 1
  local pid n
  pid="$(systemctl show -p MainPID --value airlockd)"
  n="$(systemctl show -p NRestarts --value airlockd)"
  echo "MainPID $pid (was $1), NRestarts $n"
  [ "$pid" = "$1" ] && [ "$n" = 0 ] || return 1
  ! journalctl -b -u airlockd --no-pager | grep -i 'watchdog timeout'
}
t_login_standalone() {
  su -l root -c 'echo "login shell cgroup: $(cut -d: -f3 /proc/self/cgroup)"; airlockctl launch hello --instance hello1 --standalone --wait'
}
# A jail without a gateway, as airlockd starts a stdio MCP connector's: the agent sees pid
# 1's /proc with its masks (/proc/keys and the like). On a kernel whose Landlock cannot
# refuse truncation (6.1), a writable mask made every such jail refuse to start.
t_no_gateway_jail() {
  local d=/tmp/suite/nogw uid=1880098800
  rm -rf "$d"
  mkdir -p "$d/home" "$d/ws"
  chown "$uid:$uid" "$d/home" "$d/ws"
  chmod 0700 "$d/home" "$d/ws"
  cat >"$d/spec.json" <<JSON
{"run_id":"r-suite-nogw","role":"hello","instance":"nogw","uid":$uid,"gid":$uid,
 "home":"$d/home","workspace":"$d/ws","argv":["/bin/sh","-c","cat /proc/keys; grep ' /proc/keys ' /proc/self/mountinfo; echo started"],
 "env":[],"hide":[],"connect_tcp":[],"limits":{"max_procs":64,"memory_bytes":null,"tmp_bytes":8388608,
 "shm_bytes":8388608,"nofile":1024},"cgroup_parent":null}
JSON
  airlock-jail --status-fd 2 <"$d/spec.json" >"$d/out" 2>"$d/err"
  local rc=$?
  cat "$d/out" "$d/err"
  [ "$rc" -eq 0 ] && grep -qx started "$d/out" || return 1
  # The mask, when there is one (/proc/keys readable by others), is read-only.
  ! grep ' /proc/keys ' "$d/out" | awk '{print $6}' | grep -qv '^ro\(,\|$\)'
}
t_runs_closed() { # RUN...
  local r
  for r in "$@"; do
    airlockctl show "$r" >/tmp/show.out 2>&1 || { echo "$r: $(cat /tmp/show.out)"; return 1; }
    if grep -E '^state:' /tmp/show.out | grep -qiE 'running|unsupervised|open'; then
      echo "$r is still open:"
      cat /tmp/show.out
      return 1
    fi
  done
  echo "$# runs of the first boot, all closed"
}
t_prev_journal() { journalctl -b -1 AIRLOCK_RUN="$1" --no-pager | tail -n 3 | grep .; }
t_instances() {
  airlockctl instances >/tmp/instances.out 2>&1
  cat /tmp/instances.out
  grep -q '^hello1 ' /tmp/instances.out && grep -q '^agent1 ' /tmp/instances.out && grep -q '^cmd1 ' /tmp/instances.out
}
export -f revive t_running t_battery_bash t_cgroup2 t_units_active t_launch_wait t_agent_identity t_bash_tool t_journal_fields \
  t_tool_calls t_ps t_top t_run_cgroups t_reload t_status_after_restart t_restarted t_live_ended \
  t_answers_fast t_waited_run_ended t_battery t_no_daemon t_watchdog t_login_standalone \
  t_no_gateway_jail t_runs_closed t_prev_journal t_instances

phase1() {
  info "kernel" uname -a
  info "boot" sh -c 'echo "multi-user.target reached $(($(systemctl show -p ActiveEnterTimestampMonotonic --value multi-user.target) / 1000000)) s after the kernel started; the suite starts at $(cut -d" " -f1 /proc/uptime) s"; systemd-analyze blame --no-pager 2>&1 | head -n 5'
  info "systemd" sh -c 'systemctl --version | head -n 1'
  info "cgroup mounts" grep cgroup /proc/self/mounts
  info "vm.memfd_noexec" sh -c 'sysctl vm.memfd_noexec 2>&1 || true'
  info "landlock" sh -c 'journalctl -k -b --no-pager | grep -i landlock || echo "(no landlock line in the kernel log)"'
  check "host: pure cgroup2, mounted with nsdelegate (as systemd mounts it)" t_cgroup2

  # ---- README, "Install the Debian package". ----
  local debname
  debname="$(dpkg-deb -f "$share/airlock.deb" Package)_$(dpkg-deb -f "$share/airlock.deb" Version)_amd64.deb"
  cp "$share/airlock.deb" "/root/$debname"
  cd /root || return 1
  if ! LIMIT=300 check "install: apt install ./$debname (no network: its dependencies are in the image)" \
    env DEBIAN_FRONTEND=noninteractive apt install -y "./$debname"; then
    exit 1
  fi
  check "install: the package enables and starts nothing" \
    sh -c '! systemctl is-enabled -q airlockd.service && ! systemctl is-enabled -q airlockd.socket && ! systemctl is-active -q airlockd.service'
  check "units: systemctl enable --now airlockd.socket airlockd.service" \
    systemctl enable --now airlockd.socket airlockd.service
  check "units: airlockd.socket and airlockd.service active" t_units_active
  check "status: airlockctl status" airlockctl status
  check "validate: airlockctl validate (the installed roles and policies)" airlockctl validate

  # ---- The roles. ----
  if [ -f /usr/share/airlock/roles/hello/role.yaml ]; then
    ok "roles: the package ships the smoke role hello"
  else
    bad "roles: the package ships no smoke role hello (/usr/share/airlock/roles/hello); a stand-in is used"
    write_stand_in_hello
  fi
  write_suite_roles
  check "validate: with the suite's roles in /etc/airlock/roles.local and its airlock.yaml" airlockctl validate
  check "reload: airlockctl reload (airlockd loads the new roles and config)" airlockctl reload
  check "hire: airlockctl hire hello1 --role hello" airlockctl hire hello1 --role hello
  check "hire: airlockctl hire agent1 --role hostagent" airlockctl hire agent1 --role hostagent
  check "hire: airlockctl hire cmd1 --role hostcmd" airlockctl hire cmd1 --role hostcmd
  info "airlockctl instances" airlockctl instances
  info "airlockctl explain hello" airlockctl explain hello

  # ---- Launches through airlockd. ----
  VERBOSE=1 check "launch: hello's own command through airlockd (--wait; command side)" t_launch_wait hello hello1
  note_run "$OUT"
  check "launch: command side: hello -- /bin/sh -c (not root, /tmp writable)" \
    t_launch_wait hello hello1 -- /bin/sh -c 'id; pwd; echo x >/tmp/x && cat /tmp/x && test "$(id -u)" != 0'
  note_run "$OUT"
  VERBOSE=1 check "launch: agent side: hostagent -- /usr/bin/python3 -c (not root, no capabilities)" t_agent_identity
  local agent_run
  agent_run="$(run_id "$OUT")"
  note_run "$OUT"
  VERBOSE=1 check "bash tool: agent -> \$AIRLOCK_GATEWAY/mcp/airlock: id -u runs on the command side, rm -rf is refused" t_bash_tool
  local bash_run
  bash_run="$(run_id "$OUT")"
  note_run "$OUT"

  # ---- The journal. ----
  if [ -n "$agent_run" ]; then
    VERBOSE=1 check "journal: journalctl AIRLOCK_RUN=$agent_run has AIRLOCK_ROLE, AIRLOCK_INSTANCE, AIRLOCK_EVENT" \
      t_journal_fields "$agent_run" hostagent agent1
  else
    bad "journal: no agent-side run to read (its launch failed)"
  fi
  if [ -n "$bash_run" ]; then
    VERBOSE=1 check "journal: the bash tool's calls are tool_call events (allow and deny)" t_tool_calls "$bash_run"
  else
    bad "journal: no bash-tool run to read (its launch failed)"
  fi

  # ---- A live run: ps, top, cgroups, reload, restart. ----
  local live restarted_at
  # An agent-side program that burns CPU for 3 s, touches 64 MiB and sleeps; the command
  # side has its runner: both sides hold processes.
  airlockctl launch hostagent --instance agent1 -- /usr/bin/python3 -c '
import time
t = time.time()
while time.time() - t < 3: pass
x = bytearray(64 << 20)
for i in range(0, len(x), 4096): x[i] = 1
time.sleep(600)' >/tmp/live.out 2>&1
  live="$(run_id /tmp/live.out)"
  if [ -z "$live" ]; then
    bad "live run: launch hostagent (detached) gave no run id: $(reason /tmp/live.out)"
    show /tmp/live.out
  else
    echo "$live" >>"$state/runs"
  fi
  if [ -n "$live" ] && check "live run: $live launched (detached) and running" t_running "$live"; then
    sleep 3
    VERBOSE=1 check "ps: airlockctl ps shows $live with CPU and MEM" t_ps "$live"
    VERBOSE=1 check "top: airlockctl top --once shows $live with CPU and MEM" t_top "$live"
    local cg
    cg="/sys/fs/cgroup$(systemctl show -p ControlGroup --value airlockd.service)"
    info "airlockd.service's cgroups" sh -c "find '$cg' -maxdepth 4 -type d | sed 's#^$cg#.#'"
    VERBOSE=1 check "cgroups: $live's cgroup below airlockd.service's, both sides with processes, pids.max and memory.max" \
      t_run_cgroups "$cg" "$live"
    check "reload: systemctl reload airlockd with $live going (it goes on, status answers)" t_reload "$live"
  fi
  local pid_before
  [ -n "$live" ] || live=none
  pid_before="$(systemctl show -p MainPID --value airlockd)"
  check "restart: systemctl restart airlockd (run $live going)" systemctl restart airlockd
  check "restart: airlockctl status answers after the restart (the socket survived)" t_status_after_restart
  check "restart: airlockd.socket listening, airlockd.service active with a new pid" t_restarted "$pid_before"
  [ "$live" != none ] && check "restart: $live was ended, its record closed, nothing of it left" t_live_ended "$live"
  revive
  restarted_at=$(date +%s)

  # ---- A fork bomb and a memory hog, on the command side. ----
  local bomb hog t n
  airlockctl launch hostcmd --instance cmd1 --max-seconds 30 --wait -- /bin/sh -c 'echo bomb: started; b() { b | b & }; b; sleep 60' >/tmp/bomb.out 2>&1 &
  bomb=$!
  sleep 8
  t=$(ms airlockctl status)
  n=$(airlockctl ps 2>/dev/null | grep -c ' hostcmd ')
  check "fork bomb: airlockd answers status while it runs (${t} ms)" t_answers_fast "$t" "$FAST_MS" "$n"
  LIMIT=120 VERBOSE=1 check "fork bomb: the run ends at its deadline, nothing of it left" t_waited_run_ended "$bomb" /tmp/bomb.out 90 "bomb: started"
  note_run /tmp/bomb.out
  airlockctl launch hostcmd --instance cmd1 --wait -- /usr/bin/python3 -c "$(cat "$share/escape_battery.py")" --memory-hog >/tmp/hog.out 2>&1 &
  hog=$!
  sleep 6
  t=$(ms airlockctl status)
  n=$(airlockctl ps 2>/dev/null | grep -c ' hostcmd ')
  check "memory hog: airlockd answers status while it runs (${t} ms)" t_answers_fast "$t" "$FAST_MS" "$n"
  LIMIT=200 VERBOSE=1 check "memory hog: the run ends, reported as killed: out of memory" t_waited_run_ended "$hog" /tmp/hog.out 180 "killed: out of memory"
  note_run /tmp/hog.out
  check "memory hog: airlockd still active and answering" sh -c 'systemctl is-active airlockd && airlockctl status'

  # ---- The escape battery, on each side. ----
  local lpid marker="m$$" common
  python3 -c '
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 47123)); s.listen(16); time.sleep(3600)' &
  lpid=$!
  sleep 1
  common=(--host-port 47123 --host-path /var/lib/airlock --host-path /etc/airlock/airlock.yaml --max-procs 256)
  LIMIT=400 VERBOSE=1 check "escape battery: command side (hostcmd -- python3 escape_battery.py)" \
    t_battery command /tmp/battery-cmd.out hostcmd cmd1 "${common[@]}" --daemon "$marker"
  note_run /tmp/battery-cmd.out
  check "escape battery: the command side's daemon did not outlive its run" t_no_daemon "$marker" /tmp/battery-cmd.out
  LIMIT=400 VERBOSE=1 check "escape battery: agent side (hostagent -- python3 escape_battery.py --side agent)" \
    t_battery agent /tmp/battery-agent.out hostagent agent1 "${common[@]}" --side agent \
    --skip daemon_started --skip setuid_binary
  note_run /tmp/battery-agent.out
  LIMIT=400 VERBOSE=1 check "escape battery: as a command through the bash tool (hostagent's agent -> bash: python3 escape_battery.py)" \
    t_battery_bash /tmp/battery-bash.out "${common[@]}" --daemon "${marker}b"
  note_run /tmp/battery-bash.out.raw
  check "escape battery: the bash tool command's daemon did not outlive its run" t_no_daemon "${marker}b" /tmp/battery-bash.out
  kill "$lpid" 2>/dev/null

  # ---- The watchdog: airlockd outlives WatchdogSec (it feeds it), no restart. ----
  local wd wd_s pid_now waited
  wd="$(systemctl show -p WatchdogUSec --value airlockd)"
  pid_now="$(systemctl show -p MainPID --value airlockd)"
  wd_s="$(systemd-analyze timespan "$wd" 2>/dev/null | awk '$1 ~ /^(μs|us):$/ { print int($2 / 1000000) }')"
  if [ -z "$wd_s" ] || [ "$wd_s" -eq 0 ]; then
    bad "watchdog: airlockd has no watchdog (WatchdogUSec=$wd)"
  else
    waited=$(($(date +%s) - restarted_at))
    [ "$waited" -lt $((wd_s + 5)) ] && sleep $((wd_s + 5 - waited))
    check "watchdog: WatchdogUSec=$wd; airlockd up $(($(date +%s) - restarted_at)) s since its restart, same pid, no restart" \
      t_watchdog "$pid_now"
  fi

  # ---- Standalone launches (airlockd stopped: while it runs, it owns the ledger). ----
  check "standalone: systemctl stop airlockd.socket airlockd.service" systemctl stop airlockd.socket airlockd.service
  check "standalone: launch --standalone from a service (the suite's cgroup $(cut -d: -f3 /proc/self/cgroup))" \
    airlockctl launch hello --instance hello1 --standalone --wait
  note_run "$OUT"
  VERBOSE=1 check "standalone: launch --standalone from a login shell (su -l root -c)" t_login_standalone
  note_run "$OUT"
  check "standalone: launch --standalone in a scope of its own (systemd-run --scope)" \
    systemd-run --quiet --scope airlockctl launch hello --instance hello1 --standalone --wait
  note_run "$OUT"
  check "jail: a jail without a gateway (as a stdio MCP connector's) starts, /proc/keys masked read-only" \
    t_no_gateway_jail
  check "standalone: systemctl start airlockd.socket airlockd.service again" \
    sh -c 'systemctl start airlockd.socket airlockd.service && airlockctl status'

  info "systemd-analyze security airlockd.service" sh -c 'systemd-analyze security --no-pager airlockd.service | tail -n 1'
  info "systemd-analyze security airlock-run@x.service" sh -c 'systemd-analyze security --no-pager airlock-run@x.service | tail -n 1'
  check "ledger: airlockctl verify-ledger (before the reboot)" airlockctl verify-ledger
  info "airlockctl runs" airlockctl runs
  info "airlockd's journal, warnings and worse" journalctl -b -u airlockd -p warning --no-pager

  echo 2 >"$state/phase"
  echo "$fails" >"$state/phase1-fails"
  sync
  exit 100
}

phase2() {
  info "boot" sh -c 'echo "multi-user.target reached $(($(systemctl show -p ActiveEnterTimestampMonotonic --value multi-user.target) / 1000000)) s after the kernel started; the suite starts at $(cut -d" " -f1 /proc/uptime) s"; systemd-analyze blame --no-pager 2>&1 | head -n 5'
  info "boots" journalctl --list-boots --no-pager
  check "reboot: airlockd.socket and airlockd.service active after the boot" t_units_active
  check "reboot: airlockctl status" airlockctl status
  info "airlockd at this boot (journal)" journalctl -b -u airlockd.service -u airlockd.socket --no-pager -o short-monotonic
  revive
  check "reboot: airlockctl verify-ledger" airlockctl verify-ledger
  check "reboot: instances kept (hello1, agent1, cmd1)" t_instances
  local runs
  read -r -a runs <<<"$(sort -u "$state/runs" 2>/dev/null | tr '\n' ' ')"
  if [ "${#runs[@]}" -gt 0 ]; then
    check "reboot: the first boot's ${#runs[@]} runs are closed records (airlockctl show)" t_runs_closed "${runs[@]}"
    check "reboot: the first boot's journal keeps run ${runs[0]}" t_prev_journal "${runs[0]}"
  else
    bad "reboot: no run of the first boot to look for (every launch failed)"
  fi
  VERBOSE=1 check "reboot: a launch after the reboot (hello, --wait)" t_launch_wait hello hello1
  check "reboot: airlockctl verify-ledger (after that launch)" airlockctl verify-ledger
  [ "$fails" -eq 0 ] && [ "$(cat "$state/phase1-fails" 2>/dev/null || echo 1)" = 0 ] && exit 0
  exit 1
}

case "$phase" in
  1) phase1 ;;
  2) phase2 ;;
  *)
    echo "suite.sh: unknown phase $phase" >&2
    exit 2
    ;;
esac
