#!/usr/bin/env bash
# Fetches the kernels Debian 11, 12 and 13 ship (the linux-image-amd64 of bullseye, bookworm
# and trixie) from Debian's registry, without installing them: each package is downloaded
# with a sources list of its own and unpacked; its vmlinuz is kept under
# $TLSPROF_TESTDEPS/kernels/SUITE/ and its modules go to /lib/modules/VERSION (depmod), where
# virtme-ng finds them when it boots that kernel over this machine's root filesystem.
# Idempotent: a kernel already fetched is not fetched again. Run as root (scripts/deps.sh does).
set -euo pipefail

TESTDEPS=${TLSPROF_TESTDEPS:-/var/cache/tlsprof-testdeps}
SUITES=${TLSPROF_KERNEL_SUITES:-"bullseye bookworm trixie bookworm-arm64"}

fetch() { # suite or suite-arch
  local suite=${1%%-*} arch=amd64 dir="$TESTDEPS/kernels/$1" moddir=/lib/modules
  [[ $1 == *-* ]] && arch=${1#*-}
  [ "$arch" = amd64 ] || moddir="$dir/lib/modules"
  if [ -s "$dir/version" ] && [ -f "$dir/vmlinuz" ] && [ -d "$moddir/$(cat "$dir/version")" ]; then
    return 0
  fi
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$dir"
  echo "deb [arch=$arch] http://deb.debian.org/debian $suite main" > "$work/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Architecture=$arch"
              -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq
  # the metapackage names the current kernel package of the suite
  local pkg
  pkg=$(apt-cache "${opts[@]}" depends "linux-image-$arch" | awk '/Depends: linux-image-/ {print $2; exit}')
  [ -n "$pkg" ] || { echo "kernels: no linux-image-$arch in $suite" >&2; return 1; }
  (cd "$work" && apt-get "${opts[@]}" download -qq "$pkg" 2>/dev/null)
  dpkg -x "$work"/*.deb "$work/root"
  local img
  img=$(ls "$work"/root/boot/vmlinuz-* | head -n 1)
  local version=${img##*/vmlinuz-}
  local mods="$work/root/lib/modules/$version"
  [ -d "$mods" ] || mods="$work/root/usr/lib/modules/$version" # trixie: usr/lib/modules
  mkdir -p "$moddir"
  rm -rf "${moddir:?}/$version"
  cp -a "$mods" "$moddir/$version"
  if [ "$arch" = amd64 ]; then depmod "$version"; else depmod -b "$dir" "$version"; fi
  cp "$img" "$dir/vmlinuz"
  echo "$version" > "$dir/version"
  echo "$pkg" > "$dir/package"
  echo "kernels: $suite: $pkg ($version)"
}

for suite in $SUITES; do
  fetch "$suite"
done
