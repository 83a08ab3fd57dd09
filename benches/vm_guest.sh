#!/bin/bash
# Runs inside the Debian 12 VM in the host suite's place (benches/vm.sh hands it to
# tests/host/run-vm.sh as AIRLOCK_VM_SUITE): installs the package as README says, then
# runs the launch benches against its binaries in /usr/bin, on whatever cgroup layout the
# guest booted with (pure cgroup2, or systemd's hybrid when vm.sh asked for it). The
# figures go to the console and to out/bench.log in the share; one `ok:`/`FAIL:` line
# per bench to out/checks, which the harness counts.
set -u
share=/mnt/ci
files="$share/files"
out="$share/out"
log="$out/bench.log"
fails=0
export LC_ALL=C.UTF-8
# shellcheck disable=SC1091 # written by benches/vm.sh
. "$files/bench.env"

say() { echo "$*" | tee -a "$log"; }
# bench NAME CMD...: runs CMD with its output to the console and the log; its exit status
# makes the check's line.
bench() {
  local name="$1"
  shift
  say "=== $name"
  if (cd /root/airlock && "$@") 2>&1 | tee -a "$log"; [ "${PIPESTATUS[0]}" -eq 0 ]; then
    echo "ok: bench $name ($LAYOUT)" >>"$out/checks"
  else
    echo "FAIL: bench $name ($LAYOUT) exited non-zero" | tee -a "$out/checks"
    fails=$((fails + 1))
    # Why a run failed is in its journal.
    local run
    for run in $(grep -oE 'r-[0-9]{8}-[0-9a-f]{8}' "$log" | sort -u | tail -n 3); do
      journalctl AIRLOCK_RUN="$run" --no-pager -o cat 2>&1 | sed "s/^/    $run: /" | tee -a "$log"
    done
    journalctl -n 20 --no-pager -o cat 2>&1 | sed 's/^/    journal: /' | tee -a "$log"
  fi
}

if grep -q '^cgroup ' /proc/self/mounts; then LAYOUT=hybrid; else LAYOUT=cgroup2; fi
# Each airlockd in a scope with its cgroup delegated, as its unit gives it (Delegate=yes):
# in this service's own cgroup, which holds other processes, cgroup v2 lets it enable no
# controller below, and a run with a memory limit is refused (fail closed).
export DAEMON_WRAP="systemd-run --quiet --scope -p Delegate=yes --"
say "vm bench: kernel $(uname -r), $(nproc) CPUs, cgroups: $LAYOUT ($(systemctl --version | head -n 1))"
grep cgroup /proc/self/mounts | sed 's/^/    /' | tee -a "$log"

debname="$(dpkg-deb -f "$share/airlock.deb" Package)_$(dpkg-deb -f "$share/airlock.deb" Version)_amd64.deb"
cp "$share/airlock.deb" "/root/$debname"
(cd /root && DEBIAN_FRONTEND=noninteractive apt install -y "./$debname") >/tmp/install.log 2>&1 \
  || { cat /tmp/install.log; echo "FAIL: bench install" | tee -a "$out/checks"; exit 1; }
# bubblewrap and hyperfine (the comparator and the timer) are not in the image: the build
# host's copies, which need only libraries a Debian 12 base has.
install -m 0755 "$files/bwrap" "$files/hyperfine" /usr/local/bin/
mkdir -p /root/airlock
cp -R "$files/benches" "$files/roles" "$files/policies" /root/airlock/

case " ${BENCHES:-launch_ab launch_cpu jail} " in *" launch_ab "*)
bench launch_ab env BIN_A=/usr/bin BIN_B=/usr/bin N="$N" ROUNDS="$ROUNDS" BURST="$BURST" \
  SETTLE=10 bash benches/launch_ab.sh ;;
esac
case " ${BENCHES:-launch_ab launch_cpu jail} " in *" launch_cpu "*)
bench launch_cpu env AIRLOCK_BIN=/usr/bin N="$N" bash benches/launch_cpu.sh ;;
esac
case " ${BENCHES:-launch_ab launch_cpu jail} " in *" jail "*)
bench jail env AIRLOCK_BIN=/usr/bin N="$N" bash benches/jail.sh ;;
esac

[ "$fails" -eq 0 ]
