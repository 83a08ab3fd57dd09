#!/usr/bin/env bash
# The Debian 12 host the host suite boots (tests/host/run-vm.sh), made with debootstrap
# from the Debian mirror this machine's apt sources name:
#
#   tests/host/image.sh [DEB]     prints the image's directory on its last line
#
# The image is cached under $AIRLOCK_VM_CACHE (default /var/cache/airlock-ci/vm), in a
# directory named by a hash of this script, lib.sh and the Depends of DEB (so a changed
# script, or a package that needs more, makes a new image); an existing complete image is
# reused. The directory holds:
#
#   root.raw                  ext4 root filesystem (sparse), for /dev/vda
#   vmlinuz-6.1  initrd-6.1   bookworm's kernel (linux-image-amd64 of bookworm)
#   vmlinuz-6.12 initrd-6.12  bookworm-backports' kernel
#   packages.txt              dpkg -l of the image
#
# The image: bookworm (minbase) with systemd as pid 1, udev, dbus, both kernels and
# their initramfs (virtio modules in it), what the suite uses, and every package DEB
# Depends on, so `apt install ./airlock_*.deb` needs no network. It has no network
# configuration (the VM has no network device), no root password, a serial console, and
# one unit of the harness's: airlock-ci.service mounts the 9p share tagged `ci` at
# /mnt/ci and runs /mnt/ci/guest.sh, which the harness puts there (tests/host/guest.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/lib.sh"

[ "$(id -u)" -eq 0 ] || die "image.sh must run as root (debootstrap, chroot)"
deb="${1:-}"

# What the image holds besides minbase. kernels: installed by name below.
packages=(
  systemd systemd-sysv udev dbus libpam-systemd kmod initramfs-tools
  procps util-linux mount e2fsprogs iproute2 python3 git less passwd login
  ca-certificates
)

deps=""
if [ -n "$deb" ]; then
  [ -f "$deb" ] || die "no package $deb"
  deps="$(for f in Pre-Depends Depends Recommends; do dpkg-deb -f "$deb" "$f"; done)"
fi
key="$( (cat "$here/image.sh" "$here/lib.sh"; echo "$deps") | sha256sum | cut -c1-16)"
dir="$VM_CACHE/image-$key"

if [ -f "$dir/complete" ]; then
  say "image cached: $dir"
  echo "$dir"
  exit 0
fi

host_deps
mirror="$(mirror_uri bookworm)" || die "no bookworm source in /etc/apt: cannot find the Debian mirror"
security="$(mirror_uri bookworm-security || true)"

# Package names out of a Depends field: alternatives take the first, versions dropped.
dep_names() {
  tr ',' '\n' <<<"$1" | sed -e 's/|.*//' -e 's/(.*)//' -e 's/:any//' -e 's/[[:space:]]//g' | grep -v '^$' || true
}
for p in $(dep_names "$deps"); do packages+=("$p"); done

start=$(date +%s)
mkdir -p "$VM_CACHE"
# Older images (other keys) are left for a run of another checkout; keep only the newest
# three so the cache does not grow without end.
ls -1dt "$VM_CACHE"/image-* 2>/dev/null | tail -n +4 | while read -r old; do
  [ "$old" = "$dir" ] || { say "removing old image $old"; rm -rf "$old"; }
done || true
rm -rf "$dir"
work="$dir.work"
rm -rf "$work"
mkdir -p "$work"
root="$work/root"

say "debootstrap bookworm (minbase) from the host's mirror"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed (log: $work/debootstrap.log)"; }

{
  echo "deb $mirror bookworm main"
  echo "deb $mirror bookworm-updates main"
  echo "deb $mirror bookworm-backports main"
  [ -n "$security" ] && echo "deb $security bookworm-security main"
} >"$root/etc/apt/sources.list"
# No service starts inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
# The initramfs must find the root disk: virtio modules forced in (MODULES=most has them;
# listed anyway so a changed default cannot drop them).
mkdir -p "$root/etc/initramfs-tools"
printf 'virtio_pci\nvirtio_blk\next4\n' >>"$root/etc/initramfs-tools/modules"

# In a private mount namespace: the chroot's /proc, /sys and /dev go with it.
cat >"$work/inside.sh" <<'INSIDE'
set -euo pipefail
root="$1"; shift
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --rbind /dev "$root/dev"
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8
ch() { chroot "$root" "$@"; }
ch apt-get update -qq
ch apt-get install -y -qq --no-install-recommends "$@"
# Both kernels by their concrete package names: linux-image-amd64 of bookworm (6.1) and of
# bookworm-backports (6.12), whose meta packages share one name.
k61="$(ch apt-cache show linux-image-amd64 | awk '/^Version:/{v=$2} /^Depends:/{if (v !~ /bpo/) {sub(/^Depends: /,""); sub(/ .*/,""); print; exit}}')"
kbpo="$(ch apt-cache show linux-image-amd64 | awk '/^Version:/{v=$2} /^Depends:/{if (v ~ /bpo/) {sub(/^Depends: /,""); sub(/ .*/,""); print; exit}}')"
[ -n "$k61" ] && [ -n "$kbpo" ] || { echo "kernels not found: bookworm '$k61', backports '$kbpo'" >&2; exit 1; }
echo "kernels: $k61 $kbpo"
ch apt-get install -y -qq --no-install-recommends "$k61" "$kbpo"
ch apt-get clean
# No package lists: `apt install ./airlock_*.deb` resolves against what is installed, and
# (under TCG) reading 40 MB of lists costs the guest a minute.
rm -rf "$root"/var/lib/apt/lists/*
umount -l "$root/dev" "$root/sys" "$root/proc"
INSIDE
say "installing ${#packages[@]} packages and both kernels in the chroot"
unshare --mount --propagation private bash "$work/inside.sh" "$root" "${packages[@]}" \
  >"$work/apt.log" 2>&1 || { tail -n 40 "$work/apt.log" >&2; die "chroot install failed (log: $work/apt.log)"; }
grep '^kernels:' "$work/apt.log" >&2 || true
rm -f "$root/usr/sbin/policy-rc.d"

# The system's own configuration.
echo airlock-ci >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 airlock-ci\n::1 localhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
printf '/dev/vda / ext4 rw,errors=remount-ro 0 1\n' >"$root/etc/fstab"
: >"$root/etc/machine-id"   # a fresh id at first boot
ln -sf /usr/share/zoneinfo/Etc/UTC "$root/etc/localtime"
# Quiet, quick boots: no timers doing maintenance behind the suite, no wait for a network.
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
  rm -f "$root/etc/systemd/system/timers.target.wants/$u"
done
# The journal is kept across the reboot the suite makes (it reads it after).
mkdir -p "$root/var/log/journal"

cat >"$root/etc/systemd/system/airlock-ci.service" <<'UNIT'
[Unit]
Description=Airlock CI: run the host suite the harness put on the 9p share
After=multi-user.target
ConditionVirtualization=vm

[Service]
Type=oneshot
ExecStartPre=/bin/mkdir -p /mnt/ci
ExecStartPre=/bin/mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 ci /mnt/ci
ExecStart=/bin/bash /mnt/ci/guest.sh
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TTYVHangup=no
TTYReset=no
TimeoutStartSec=infinity
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
UNIT
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -sf ../airlock-ci.service "$root/etc/systemd/system/multi-user.target.wants/airlock-ci.service"
# The suite writes to the serial line; no login prompt competes for it.
ln -sf /dev/null "$root/etc/systemd/system/serial-getty@ttyS0.service"

# The kernels and initramfs for direct kernel boot.
for v in 6.1 6.12; do
  k="$(ls "$root"/boot/vmlinuz-"$v".* 2>/dev/null | sort -V | tail -n 1)"
  [ -n "$k" ] || die "no kernel $v in the image: $(ls "$root/boot")"
  i="$root/boot/initrd.img-${k#"$root"/boot/vmlinuz-}"
  [ -f "$i" ] || die "no initramfs for $k"
  chroot "$root" lsinitramfs "/boot/${i##*/}" >"$work/initrd-$v.list"
  # Each driver the root disk needs: built in (=y), or a module (maybe compressed) in the initramfs.
  for m in virtio_pci:VIRTIO_PCI virtio_blk:VIRTIO_BLK ext4:EXT4_FS; do
    grep -q "^CONFIG_${m#*:}=y" "$root/boot/config-${k##*/vmlinuz-}" \
      || grep -q "/${m%:*}\.ko" "$work/initrd-$v.list" \
      || die "the initramfs of $k has no ${m%:*} (and the kernel has it as a module)"
  done
  cp "$k" "$work/vmlinuz-$v"
  cp "$i" "$work/initrd-$v"
  echo "${k##*/vmlinuz-}" >"$work/kernel-$v"
done
chroot "$root" dpkg -l >"$work/packages.txt"

say "making the ext4 root filesystem"
rm -f "$work/root.raw"
mke2fs -q -t ext4 -L airlock-ci -d "$root" "$work/root.raw" 12G \
  || die "mke2fs -d failed"
rm -rf "$root"
touch "$work/complete"
mv "$work" "$dir"
say "image made in $(($(date +%s) - start)) s: $dir ($(du -sh "$dir/root.raw" | cut -f1) used)"
echo "$dir"
