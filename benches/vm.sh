#!/usr/bin/env bash
# The launch benches on a real Debian 12 host: the host suite's VM (tests/host/run-vm.sh,
# its image, the package installed there) runs benches/vm_guest.sh instead of the suite,
# booted once on pure cgroup2 (as Debian 12's systemd mounts it) and once on systemd's
# hybrid layout (`systemd.unified_cgroup_hierarchy=0`: the v1 controllers in their own
# hierarchies, as on this build machine). One kernel, one image, one emulator: what differs
# between the two boots is the cgroup layout, so the two sets of figures compare it.
#
#   benches/vm.sh [DEB] [6.1|6.12]     (default: the package scripts/build-deb last built;
#                                        kernel 6.1)
#
# Kernel 6.1 by default: Debian's 6.12 is built without CONFIG_MEMCG_V1, so its hybrid
# boot has no memory controller at all and every launch with a memory limit is refused
# (fail closed), which compares nothing.
# N (default 20) sequential rounds, ROUNDS (default 1) bursts of BURST (default 20), as in
# benches/launch_ab.sh, launch_cpu.sh and jail.sh. Without KVM the guest is emulated (TCG):
# every figure is many times the host's, and only ratios within one boot (to bwrap) and
# between the two boots mean anything. LAYOUTS (default "cgroup2 hybrid") picks the boots,
# BENCHES (default "launch_ab launch_cpu jail") the benches.
# Figures: the console, and $AIRLOCK_VM_OUT/<layout>/<kernel>/share/out/bench.log. Root only.
set -euo pipefail

# All of it in one function, parsed whole before it runs (as tests/host/run-vm.sh): an edit
# of this file during a run's long boots cannot change what the run does next.
main() {
repo="$(cd "$(dirname "$0")/.." && pwd)"
deb="${1:-$("$repo/scripts/build-deb" --no-build | tail -n 1)}"
kernel="${2:-6.1}"
files="$(mktemp -d /tmp/airlock-vm-bench.XXXXXX)"
trap 'rm -rf "$files"' EXIT
for tool in bwrap hyperfine; do
  command -v "$tool" >/dev/null || apt-get install -y "$([ "$tool" = bwrap ] && echo bubblewrap || echo hyperfine)" >/dev/null
  cp "$(command -v "$tool")" "$files/"
done
printf 'N=%s\nROUNDS=%s\nBURST=%s\nBENCHES="%s"\n' "${N:-20}" "${ROUNDS:-1}" "${BURST:-20}" \
  "${BENCHES:-launch_ab launch_cpu jail}" >"$files/bench.env"
outroot="${AIRLOCK_VM_OUT:-${CARGO_TARGET_DIR:-$repo/target}/vm-bench}"
rc=0
for layout in ${LAYOUTS:-cgroup2 hybrid}; do
  case "$layout" in
    cgroup2) append="" ;;
    hybrid) append="systemd.unified_cgroup_hierarchy=0" ;;
    *) echo "benches/vm.sh: LAYOUTS: cgroup2 or hybrid, not $layout" >&2; exit 2 ;;
  esac
  echo "== vm bench, $layout"
  AIRLOCK_VM_OUT="$outroot/$layout" AIRLOCK_VM_SUITE="$repo/benches/vm_guest.sh" \
    AIRLOCK_VM_FILES="$files/bwrap $files/hyperfine $files/bench.env $repo/benches $repo/roles $repo/policies" \
    AIRLOCK_VM_APPEND="$append" "$repo/tests/host/run-vm.sh" "$deb" "$kernel" || rc=1
done
for layout in ${LAYOUTS:-cgroup2 hybrid}; do
  echo "== $layout"
  grep -E '^(vm bench|launch_ab|  [ab]:|  bwrap|  round|launch_cpu|  CPU|    of which|  wall|[a-z-]+ +[0-9.]+ |spaced|jail setup|run part)' \
    "$outroot/$layout/$kernel/share/out/bench.log" 2>/dev/null || echo "(no figures)"
done
return "$rc"
}

main "$@"
exit
