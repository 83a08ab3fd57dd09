#!/bin/bash
# Runs inside the VM at every boot (airlock-ci.service, baked into the image by
# tests/host/image.sh, mounts the 9p share at /mnt/ci and runs this from it). Its output
# goes to the serial console, which the harness streams.
#
# The suite's phase is kept on the guest's own disk (/var/lib/airlock-ci/phase), so it
# survives the reboot the suite asks for: suite.sh PHASE exits 100 to ask for a reboot
# (having written the next phase), anything else ends the suite. The results go to the
# share: out/checks (one line per check), out/suite.log, out/progress (what the harness
# watches), out/result (the suite's exit code, written last).
set -u
share=/mnt/ci
out="$share/out"
state=/var/lib/airlock-ci
mkdir -p "$out" "$state"

boot=$(($(cat "$state/boots" 2>/dev/null || echo 0) + 1))
echo "$boot" >"$state/boots"
phase="$(cat "$state/phase" 2>/dev/null || echo 1)"
echo "airlock-ci: boot $boot, phase $phase, kernel $(uname -r), $(systemctl --version | head -n 1)"
echo "boot $boot phase $phase start $(date +%s)" >>"$out/progress"
sync

finish() {
  echo "$1" >"$out/result"
  echo "done $1 $(date +%s)" >>"$out/progress"
  sync
  echo "airlock-ci: suite finished ($1), powering off"
  systemctl poweroff --no-block
  exit 0
}

if [ "$boot" -gt 3 ]; then
  echo "FAIL: guest: boot $boot: the suite asked for at most one reboot" | tee -a "$out/checks"
  finish 1
fi

# The suite as root, from a login-like environment.
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cd /root || exit 1
timeout --kill-after=10 "$(cat "$share/phase-timeout" 2>/dev/null || echo 1400)" \
  bash "$share/suite.sh" "$phase" 2>&1 | tee -a "$out/suite.log"
rc=${PIPESTATUS[0]}
sync
if [ "$rc" -eq 100 ]; then
  echo "phase $phase reboot $(date +%s)" >>"$out/progress"
  sync
  echo "airlock-ci: phase $phase asked for a reboot"
  systemctl reboot --no-block
  exit 0
fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "FAIL: guest: phase $phase of the suite timed out after $(cat "$share/phase-timeout" 2>/dev/null) s; the last check it finished: $(tail -n 1 "$out/checks" 2>/dev/null)" | tee -a "$out/checks"
fi
finish "$rc"
