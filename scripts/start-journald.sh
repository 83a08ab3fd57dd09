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
# The datagram queue a journald socket gets when made: systemd raises the kernel's 10 to at
# least 512 at boot (its sysctl.d/50-default.conf), and a host without it is not what
# airlockd's journal records meet in production (benches/gateway.sh measured the difference).
q="$(cat /proc/sys/net/unix/max_dgram_qlen 2>/dev/null || echo 512)"
if [ "$q" -lt 512 ]; then
  echo 512 >/proc/sys/net/unix/max_dgram_qlen 2>/dev/null \
    || echo "start-journald: net.unix.max_dgram_qlen stays $q (not writable here)" >&2
fi
/lib/systemd/systemd-journald >/dev/null 2>&1 &
for _ in $(seq 1 50); do
  [ -S /run/systemd/journal/socket ] && exit 0
  sleep 0.1
done
echo "start-journald: systemd-journald did not create its socket" >&2
exit 1
