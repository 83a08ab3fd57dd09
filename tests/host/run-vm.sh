#!/usr/bin/env bash
# The host suite on a real Debian 12 host: boots the image tests/host/image.sh makes in
# qemu, installs DEB there and runs tests/host/suite.sh inside, once per kernel:
#
#   tests/host/run-vm.sh DEB [6.1|6.12|both]        (default both)
#
# Per kernel: a throwaway qcow2 overlay over the cached image; qemu-system-x86_64 with KVM
# when /dev/kvm opens (else TCG, with longer timeouts), 4 GiB, 2 CPUs, no network device,
# direct kernel boot (`root=/dev/vda rw console=ttyS0`), and a virtio-9p share (tag `ci`)
# holding the package, the suite and guest.sh; the image's airlock-ci.service runs
# guest.sh at boot, which runs the suite, lets the guest reboot once in the middle (qemu
# boots the same kernel again) and powers it off at the end. The serial console streams
# here, each line prefixed with the kernel, and to a log. A boot that does not reach the
# suite, or a phase of the suite that does not finish, in time fails loudly, naming the
# kernel and what timed out; a guest kernel panic fails at once. Under TCG alone, an
# emulator fault before the suite ever ran (a panic while the guest boots, or a first boot
# that printed nothing at all on the console) runs that kernel once more, saying so, and
# the first try's logs are kept beside the second's.
#
# Output: the suite's `ok:`/`FAIL:` lines as they happen (in the console stream), a
# closing line per kernel, and last the totals alone on a line: `N passed, N failed`.
# Exit 0 only when every check of every kernel passed. Logs and results are kept in
# $AIRLOCK_VM_OUT (default $CARGO_TARGET_DIR/host-vm, or target/host-vm).
#
# Environment: AIRLOCK_VM_CACHE (image cache, see image.sh), AIRLOCK_VM_OUT,
# AIRLOCK_VM_BOOT_TIMEOUT (seconds from power-on or reboot to the suite's start; default
# 120, TCG 300), AIRLOCK_VM_PHASE_TIMEOUT (seconds per phase of the suite; default 900,
# TCG 1500; the guest stops a phase 60 s before, so its results still come back),
# AIRLOCK_VM_ACCEL (kvm|tcg, to force one). For benches/vm.sh: AIRLOCK_VM_SUITE (a script
# run in the suite's place), AIRLOCK_VM_FILES (paths copied into the share's files/),
# AIRLOCK_VM_APPEND (more kernel arguments).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
. "$here/lib.sh"

# All of it in one function, parsed whole before it runs: an edit of this file while a
# run is going cannot change what the run does next.
main() {

usage() { echo "usage: tests/host/run-vm.sh DEB [6.1|6.12|both]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
deb="$(realpath "$1")"
which="${2:-both}"
case "$which" in
  6.1) kernels=(6.1) ;;
  6.12) kernels=(6.12) ;;
  both) kernels=(6.1 6.12) ;;
  *) usage ;;
esac
[ -f "$deb" ] || die "no package $deb"
[ "$(id -u)" -eq 0 ] || die "run-vm.sh must run as root (it builds the image with debootstrap)"

t0=$(date +%s)
host_deps
img="$("$here/image.sh" "$deb" | tail -n 1)"
[ -f "$img/complete" ] || die "image.sh made no image"
t_image=$(($(date +%s) - t0))
say "image ready in ${t_image} s: $img"

accel="${AIRLOCK_VM_ACCEL:-}"
if [ -z "$accel" ]; then
  # KVM proper: /dev/kvm opens and the CPU has hardware virtualization (vmx or svm). A
  # /dev/kvm without it (a paravirtual KVM such as kvm-pvm inside a microVM) runs an
  # unmodified guest kernel by emulation, slower than TCG and failing on some instructions.
  if (exec 3<>/dev/kvm) 2>/dev/null && grep -qwE 'vmx|svm' /proc/cpuinfo; then
    accel=kvm
  else
    accel=tcg
    if [ -e /dev/kvm ]; then
      say "/dev/kvm is here but the CPU has no vmx/svm ($(ls /sys/module | grep -E '^kvm' | tr '\n' ' ')): using TCG"
    fi
  fi
fi
kernel_args="root=/dev/vda rw console=ttyS0 loglevel=4${AIRLOCK_VM_APPEND:+ $AIRLOCK_VM_APPEND}"
if [ "$accel" = kvm ]; then
  accel_args=(-accel kvm -cpu host)
  boot_timeout="${AIRLOCK_VM_BOOT_TIMEOUT:-120}"
  phase_timeout="${AIRLOCK_VM_PHASE_TIMEOUT:-900}"
else
  say "TCG (no hardware-virtualized KVM; slow, longer timeouts)"
  accel_args=(-accel tcg,thread=multi -cpu max)
  # Emulated, the TSC drifts against the watchdog's clocksource, and when the kernel marks
  # it unstable it flips sched_clock's static key by live text patching; under multi-
  # threaded TCG a vCPU can run the int3 of that patch after it was undone (CI saw kernel
  # 6.12 panic so: "Oops: int3" in sched_clock_cpu). The TSC of one emulator process is
  # monotonic, so the watchdog is told to trust it.
  kernel_args+=" tsc=reliable"
  boot_timeout="${AIRLOCK_VM_BOOT_TIMEOUT:-300}"
  phase_timeout="${AIRLOCK_VM_PHASE_TIMEOUT:-1500}"
fi

outroot="${AIRLOCK_VM_OUT:-${CARGO_TARGET_DIR:-$repo/target}/host-vm}"
mkdir -p "$outroot"
total_pass=0
total_fail=0
summary=()

# One kernel: boot, watch, collect. Sets k_pass, k_fail, k_line and k_boot_fault (why
# the guest never got to the suite in that boot, when the emulator is the likely cause:
# a kernel panic while booting, or no console output at all; else empty).
run_kernel() {
  local k="$1"
  local out="$outroot/$k"
  k_boot_fault=
  rm -rf "$out"
  mkdir -p "$out/share/out"
  local share="$out/share"
  cp "$deb" "$share/airlock.deb"
  cp "$here/guest.sh" "$repo/tests/agents/escape_battery.py" "$share/"
  cp "${AIRLOCK_VM_SUITE:-$here/suite.sh}" "$share/suite.sh"
  if [ -n "${AIRLOCK_VM_FILES:-}" ]; then
    mkdir -p "$share/files"
    # shellcheck disable=SC2086 # a list of paths, split on purpose
    cp -RL $AIRLOCK_VM_FILES "$share/files/"
  fi
  echo "$k" >"$share/kernel"
  echo "$accel" >"$share/accel"
  # The guest ends a phase itself a little before this side gives up on it.
  local guest_timeout=$((phase_timeout - 60))
  [ "$guest_timeout" -ge 30 ] || guest_timeout=$((phase_timeout * 3 / 4 + 1))
  echo "$guest_timeout" >"$share/phase-timeout"
  qemu-img create -q -f qcow2 -b "$img/root.raw" -F raw "$out/disk.qcow2"

  local serial="$out/serial.log"
  : >"$serial"
  local start now last_event phase_state qpid status=""
  start=$(date +%s)
  qemu-system-x86_64 \
    "${accel_args[@]}" -machine q35 -m 4096 -smp 2 \
    -nic none -display none -monitor none -serial "file:$serial" \
    -kernel "$img/vmlinuz-$k" -initrd "$img/initrd-$k" \
    -append "$kernel_args" \
    -drive "file=$out/disk.qcow2,if=virtio,format=qcow2,cache=unsafe,discard=unmap" \
    -virtfs "local,path=$share,mount_tag=ci,security_model=none,id=ci" \
    -device virtio-rng-pci \
    >"$out/qemu.log" 2>&1 &
  qpid=$!
  # The console, as it comes, prefixed with the kernel (carriage returns dropped).
  tail -n +1 -F --pid="$qpid" "$serial" 2>/dev/null | sed -u -e 's/\r$//' -e "s/^/[vm $k] /" &
  local tailpid=$!

  # Watch: the guest appends to out/progress `boot N phase P start T` when the suite
  # starts, `phase P reboot T` before a reboot, `done RC T` at the end.
  last_event=$start
  phase_state=booting # booting (waiting for the suite) | running (a phase of the suite)
  local seen=0 boot_times=() phase_times=() event_t
  while kill -0 "$qpid" 2>/dev/null; do
    sleep 1
    now=$(date +%s)
    local lines
    lines=$({ wc -l <"$share/out/progress"; } 2>/dev/null || echo 0)
    while [ "$seen" -lt "$lines" ]; do
      seen=$((seen + 1))
      local ev
      ev="$(sed -n "${seen}p" "$share/out/progress")"
      event_t=$now
      case "$ev" in
        boot*)
          boot_times+=("$((event_t - last_event))")
          phase_state=running
          ;;
        phase*reboot* | done*)
          phase_times+=("$((event_t - last_event))")
          phase_state=booting
          ;;
      esac
      last_event=$event_t
    done
    if grep -q 'Kernel panic - not syncing' "$serial" 2>/dev/null; then
      if [ "$phase_state" = booting ]; then
        status="kernel $k: the guest kernel panicked in boot $((${#boot_times[@]} + 1)), before the suite started"
        k_boot_fault="panicked while booting"
      else
        status="kernel $k: the guest kernel panicked in phase ${#boot_times[@]} of the suite"
      fi
      break
    fi
    if [ "$phase_state" = booting ] && [ $((now - last_event)) -gt "$boot_timeout" ]; then
      status="kernel $k: timed out: boot $((${#boot_times[@]} + 1)) did not reach the suite within ${boot_timeout} s"
      # Not one byte from the guest: the emulator never started it (its first boot).
      if [ "${#boot_times[@]}" = 0 ] && [ ! -s "$serial" ]; then
        k_boot_fault="printed nothing on its console in its first boot"
      fi
      break
    fi
    if [ "$phase_state" = running ] && [ $((now - last_event)) -gt "$phase_timeout" ]; then
      status="kernel $k: timed out: phase ${#boot_times[@]} of the suite did not finish within ${phase_timeout} s"
      break
    fi
  done
  if kill -0 "$qpid" 2>/dev/null; then
    kill "$qpid" 2>/dev/null || true
    sleep 2
    kill -9 "$qpid" 2>/dev/null || true
  fi
  local qrc=0
  wait "$qpid" || qrc=$?
  wait "$tailpid" 2>/dev/null || true
  local elapsed=$(($(date +%s) - start))
  sed -e 's/\r$//' "$serial" >"$out/console.log"

  local checks="$share/out/checks"
  k_pass=0
  k_fail=0
  if [ -f "$checks" ]; then
    k_pass=$(grep -c '^ok: ' "$checks" || true)
    k_fail=$(grep -c '^FAIL: ' "$checks" || true)
  fi
  if [ -z "$status" ]; then
    if [ ! -f "$share/out/result" ]; then
      status="kernel $k: the VM stopped (qemu exit $qrc) before the suite reported a result"
      [ -s "$out/qemu.log" ] && sed 's/^/    qemu: /' "$out/qemu.log" >&2
    fi
  fi
  if [ -n "$status" ]; then
    echo "FAIL: $status" | tee -a "$checks" >&2
    if [ -s "$out/console.log" ]; then
      echo "    last console lines:" >&2
      tail -n 15 "$out/console.log" | sed 's/^/    /' >&2
    else
      echo "    (nothing on the console)" >&2
    fi
    k_fail=$((k_fail + 1))
  elif [ "$(cat "$share/out/result")" != 0 ] && [ "$k_fail" -eq 0 ]; then
    echo "FAIL: kernel $k: the suite exited $(cat "$share/out/result") with no failed check" | tee -a "$checks" >&2
    k_fail=$((k_fail + 1))
  fi
  local kver
  kver="$(cat "$img/kernel-$k" 2>/dev/null || echo "$k")"
  k_line="kernel $k ($kver): $k_pass passed, $k_fail failed in ${elapsed} s (boots: ${boot_times[*]:-none} s; suite phases: ${phase_times[*]:-none} s; logs: $out)"
  echo "host-vm: $k_line"
}

for k in "${kernels[@]}"; do
  run_kernel "$k"
  if [ -n "$k_boot_fault" ] && [ "$accel" = tcg ]; then
    # An emulator fault, not a result: the suite had not started in that boot. Once only.
    first="$k_boot_fault"
    say "kernel $k $first under TCG: running kernel $k once more (first try's logs: $outroot/$k-first)"
    rm -rf "$outroot/$k-first"
    mv "$outroot/$k" "$outroot/$k-first"
    run_kernel "$k"
    k_line="$k_line (second try: the first $first)"
  fi
  total_pass=$((total_pass + k_pass))
  total_fail=$((total_fail + k_fail))
  summary+=("$k_line")
done

echo
echo "host-vm: image ${t_image} s ($accel); total $(($(date +%s) - t0)) s"
for l in "${summary[@]}"; do echo "host-vm: $l"; done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
}

main "$@"
exit
