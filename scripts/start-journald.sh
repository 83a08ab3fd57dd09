#!/usr/bin/env bash
# Start systemd-journald in the background when none runs (CI containers and fresh VMs boot
# without systemd). The tests read the journal for real, so it must be there.
set -euo pipefail
if [ -S /run/systemd/journal/socket ] && pgrep -x systemd-journal >/dev/null 2>&1; then
  exit 0
fi
mkdir -p /run/systemd/journal /var/log/journal
# Sockets left by a journald that is gone (a VM restored from a snapshot): waiting on them
# would report success before the new one listens. Under systemd they are its socket
# units' and stay.
if [ ! -d /run/systemd/system ]; then
  rm -f /run/systemd/journal/socket /run/systemd/journal/stdout /run/systemd/journal/dev-log
fi
/lib/systemd/systemd-journald >/dev/null 2>&1 &
for _ in $(seq 1 50); do
  [ -S /run/systemd/journal/socket ] && exit 0
  sleep 0.1
done
echo "start-journald: systemd-journald did not create its socket" >&2
exit 1
