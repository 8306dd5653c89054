#!/usr/bin/env bash
# Makes whole Debian hosts for the kernel matrix: for each SUITE-ARCH a root filesystem made
# by debootstrap from Debian's registry (minbase, no Recommends) with that release's own
# servers, TLS libraries, clients and Python, and that suite's kernel modules (fetched by
# scripts/kernels.sh) in its lib/modules, under $TESTDEPS/roots/SUITE-ARCH. A guest boots
# the suite's kernel over it with virtme-ng (tests/harness/guest.py, Host).
#
# A root is made once and then only read: guests boot it read-only (virtme-ng puts tmpfs on
# /tmp, /run, /var/log, /var/tmp, /var/cache and /var/lib/apt; the project's tree and a
# run's own directory are mounted on /tlsprof and /tlsprof-run, made here), so every boot
# starts from the same state. Package scripts start no service (policy-rc.d says no, here
# and kept in the root), and nothing runs at boot but virtme-ng's init and the command.
#
# Idempotent: a root whose stamp (/etc/tlsprof-root: its packages and kernel) matches is not
# made again; a root is made in SUITE-ARCH.new and renamed when whole. Another architecture
# (arm64) needs qemu-user-static's binfmt handler for debootstrap's second stage.
# Run as root (scripts/deps.sh test does). TLSPROF_ROOTS picks roots, e.g. "bullseye-amd64".
set -euo pipefail

TESTDEPS=${TLSPROF_TESTDEPS:-/var/cache/tlsprof-testdeps}
ROOTS=${TLSPROF_ROOTS:-"bullseye-amd64 bookworm-amd64 trixie-amd64 bookworm-arm64"}
MIRROR=${TLSPROF_DEBIAN_MIRROR:-http://deb.debian.org/debian}
HERE=$(cd "$(dirname "$0")" && pwd)

# What every root has: the servers under test (each with its distribution's configuration:
# haproxy's chroot /var/lib/haproxy), their TLS libraries, the clients, and pytest for the
# scenarios; iproute2 (ss), procps (pgrep), util-linux (setpriv, unshare), kmod (modprobe).
COMMON=(openssl ca-certificates curl python3 python3-pytest apache2 haproxy
        lighttpd lighttpd-mod-mbedtls lighttpd-mod-wolfssl iproute2 procps util-linux kmod)

packages() { # suite arch
  # another architecture boots through an initramfs virtme-ng makes with the root's busybox
  [ "$2" = "$(dpkg --print-architecture)" ] || echo busybox-static
  case $1 in
    bullseye) echo nginx-light ;;                     # Debian 11 has no lighttpd-mod-gnutls
    bookworm) echo nginx-light lighttpd-mod-gnutls ;;
    *) echo nginx lighttpd-mod-gnutls ;;              # trixie: nginx-light is a transitional package
  esac
  echo "${COMMON[@]}"
}

kernel_dir() { # suite arch: where scripts/kernels.sh keeps it
  if [ "$2" = amd64 ]; then echo "$TESTDEPS/kernels/$1"; else echo "$TESTDEPS/kernels/$1-$2"; fi
}

make_root() { # suite-arch
  local name=$1 suite=${1%%-*} arch=${1#*-}
  local dir="$TESTDEPS/roots/$name" kdir
  kdir=$(kernel_dir "$suite" "$arch")
  local pkgs version moddir
  pkgs=$(packages "$suite" "$arch" | tr ' ' '\n' | sort | tr '\n' ' ')
  if [ ! -s "$kdir/version" ]; then
    TLSPROF_KERNEL_SUITES=$([ "$arch" = amd64 ] && echo "$suite" || echo "$suite-$arch") bash "$HERE/kernels.sh"
  fi
  version=$(cat "$kdir/version")
  if [ "$arch" = amd64 ]; then moddir="/lib/modules/$version"; else moddir="$kdir/lib/modules/$version"; fi
  local stamp="suite=$suite arch=$arch kernel=$version packages=$pkgs"
  if [ "$(cat "$dir/etc/tlsprof-root" 2>/dev/null)" = "$stamp" ]; then
    return 0
  fi
  local handler="/proc/sys/fs/binfmt_misc/qemu-${arch/arm64/aarch64}"
  if [ "$arch" != "$(dpkg --print-architecture)" ] && [ ! -e "$handler" ]; then
    # binfmt_misc may be unmounted (in a container), the handler then unregistered
    [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || true
    update-binfmts --enable "qemu-${arch/arm64/aarch64}" 2>/dev/null || true
    if [ ! -e "$handler" ]; then
      echo "roots: $name: no binfmt handler for $arch: install qemu-user-static and binfmt-support" >&2
      return 1
    fi
  fi
  local t0=$SECONDS new="$dir.new"
  rm -rf "$new"
  mkdir -p "$(dirname "$dir")"
  debootstrap --variant=minbase --arch "$arch" --include="$(packages "$suite" "$arch" | tr ' ' ',')" \
    "$suite" "$new" "$MIRROR" > "$dir.log" 2>&1 || { echo "roots: $name: debootstrap failed, see $dir.log" >&2; tail -n 5 "$dir.log" >&2; return 1; }
  # no service started by a package script, ever
  printf '#!/bin/sh\nexit 101\n' > "$new/usr/sbin/policy-rc.d"
  chmod 755 "$new/usr/sbin/policy-rc.d"
  # the suite's kernel modules, linked from where scripts/kernels.sh keeps them where it can
  mkdir -p "$new/lib/modules"
  cp -al "$moddir" "$new/lib/modules/$version" 2>/dev/null || cp -a "$moddir" "$new/lib/modules/$version"
  depmod -b "$new" "$version"
  # the guest's mount points: the project's tree (read-only) and a run's directory (read-write)
  mkdir -p "$new/tlsprof" "$new/tlsprof-run"
  echo "tlsprof-$suite" > "$new/etc/hostname"
  printf '127.0.0.1\tlocalhost tlsprof-%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$suite" > "$new/etc/hosts"
  rm -rf "$new"/var/cache/apt/archives/*.deb "$new"/var/lib/apt/lists/* "$new"/var/log/*.log
  dpkg-query --admindir="$new/var/lib/dpkg" -W -f '${Package} ${Version}\n' \
    'nginx*' 'apache2-bin' haproxy lighttpd 'lighttpd-mod-*' 'libgnutls30*' 'libmbedtls*' 'libwolfssl*' \
    openssl 'libssl*' libc6 python3 python3-pytest curl 2>/dev/null | grep -v ' $' > "$new/etc/tlsprof-root.versions" || true
  echo "$stamp" > "$new/etc/tlsprof-root"
  rm -rf "$dir"
  mv "$new" "$dir"
  echo "roots: $name: $((SECONDS - t0)) s, $(du -sh --exclude='*/lib/modules' "$dir" | cut -f1)" \
       "without its kernel's modules; $(tr '\n' ' ' < "$dir/etc/tlsprof-root.versions")"
}

status=0
for name in $ROOTS; do
  make_root "$name" || status=1
done
exit $status
