#!/usr/bin/env bash
# `make dist`: the release artefacts in dist/ (docs/install.md, "Building the release"):
# for x86-64 and arm64 a static (musl) binary with its BPF object embedded, a tarball, a
# .deb and an .rpm, then SHA256SUMS. dist/bin/<amd64|arm64>/tlsprof is what ./Dockerfile
# copies. Prerequisites: scripts/deps.sh build, musl-tools, gcc-aarch64-linux-gnu, and the
# two rustup targets; cargo-deb and cargo-generate-rpm are installed into target/tools
# (or TLSPROF_TOOLS) on first use. TLSPROF_DIST_TARGETS picks the targets (default: both),
# TLSPROF_DIST_FORMATS the artefacts (default: "tar deb rpm"; make test builds the deb alone);
# CARGO_TARGET_DIR, where cargo builds (make test keeps it with the test dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=${TLSPROF_DIST_TARGETS:-"x86_64-unknown-linux-musl aarch64-unknown-linux-musl"}
JOBS=${TLSPROF_DIST_JOBS:-2}
FORMATS=" ${TLSPROF_DIST_FORMATS:-tar deb rpm} "
TOOLS=${TLSPROF_TOOLS:-$PWD/target/tools}
VERSION=$(awk -F'"' '/^version *=/ {print $2; exit}' agent/Cargo.toml)
export PATH=$TOOLS/bin:$HOME/.cargo/bin:$PATH

# Pinned tool versions: the packages' layout was checked with these.
for tool in cargo-deb@3.8.0 cargo-generate-rpm@0.21.1; do
  format=${tool#cargo-}; format=${format%%@*}; format=${format#generate-}
  [[ $FORMATS == *" $format "* ]] || continue
  [ -x "$TOOLS/bin/${tool%@*}" ] || cargo install --locked -j "$JOBS" --root "$TOOLS" "$tool"
done

# arm64's C (ring's) against musl's headers, as musl-gcc compiles x86-64's: Debian's
# musl-dev for arm64, unpacked into target/tools (not installed), and the kernel's uapi
# headers (linux/, asm/) of the aarch64 cross compiler. glibc's headers would give glibc's
# struct layouts to code linked with musl.
musl_arm64() {
  local dir=$TOOLS/musl-arm64
  if [ ! -f "$dir/include/stdio.h" ]; then
    local work
    work=$(mktemp -d)
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$dir"
    echo "deb [arch=arm64] http://deb.debian.org/debian bookworm main" > "$work/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
                -o "Dir::State::Lists=$work/lists" -o "Dir::State::Status=/dev/null"
                -o "Dir::Cache=$work/cache" -o APT::Architecture=arm64 -o APT::Architectures=arm64
                -o APT::Sandbox::User="$(id -un)")
    # stdout is the flags: whatever apt says goes to stderr
    apt-get "${opts[@]}" update -qq >&2
    (cd "$work" && apt-get "${opts[@]}" download -qq musl-dev) >&2
    dpkg -x "$work"/musl-dev_*.deb "$work/root"
    rm -rf "$dir/include"
    cp -a "$work/root/usr/include/aarch64-linux-musl" "$dir/include"
    for d in linux asm asm-generic; do ln -sfn "/usr/aarch64-linux-gnu/include/$d" "$dir/include/$d"; done
    rm -rf "$work"
  fi
  echo "-nostdinc -isystem $dir/include -isystem $(aarch64-linux-gnu-gcc -print-file-name=include)"
}
# Debian's aarch64 gcc links arm64 (rustc brings musl's crt and libc, "self-contained").
if [[ " $TARGETS " == *" aarch64-unknown-linux-musl "* ]]; then
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER:-aarch64-linux-gnu-gcc}
  export CC_aarch64_unknown_linux_musl=${CC_aarch64_unknown_linux_musl:-aarch64-linux-gnu-gcc}
  export AR_aarch64_unknown_linux_musl=${AR_aarch64_unknown_linux_musl:-aarch64-linux-gnu-ar}
  CFLAGS_aarch64_unknown_linux_musl=${CFLAGS_aarch64_unknown_linux_musl:-$(musl_arm64)}
  export CFLAGS_aarch64_unknown_linux_musl
fi
# x86-64's musl target needs musl-tools: cc-rs compiles ring's C with musl-gcc.

# Files in the tarballs and packages carry the commit's time, not the build's. Not exported:
# cc-rs reads SOURCE_DATE_EPOCH, and a new value would rebuild ring at every commit.
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)

rm -rf dist target/dist-pkg
mkdir -p dist target/dist-pkg
# The packaged unit: deploy/systemd's, with the binary where the packages put it (its first
# two lines, how to install it by hand, replaced).
{
  echo "# tlsprof as a systemd service, as packaged: \`systemctl enable --now tlsprof\`."
  sed -e '1,2d' -e 's|^ExecStart=/usr/local/bin/tlsprof |ExecStart=/usr/bin/tlsprof |' deploy/systemd/tlsprof.service
} > target/dist-pkg/tlsprof.service
grep -q '^ExecStart=/usr/bin/tlsprof ' target/dist-pkg/tlsprof.service

for target in $TARGETS; do
  case $target in
    x86_64-*) docker_arch=amd64 ;;
    aarch64-*) docker_arch=arm64 ;;
    *) echo "dist: no packaging for $target" >&2; exit 1 ;;
  esac
  start=$(date +%s)
  cargo build --release --locked -j "$JOBS" --target "$target"
  echo "dist: $target built in $(( $(date +%s) - start )) s"
  bin=${CARGO_TARGET_DIR:-target}/$target/release/tlsprof

  # The tarball: the binary and what deploys and reads it.
  name=tlsprof-$VERSION-$target
  stage=target/dist-pkg/$name
  mkdir -p "$stage/deploy"
  install -m 755 "$bin" "$stage/tlsprof"
  cp -r deploy/systemd deploy/prometheus "$stage/deploy/"
  mkdir -p "$stage/dashboards"
  cp dashboards/*.json "$stage/dashboards/"
  cp -r docs README.md "$stage/"
  for f in LICENSE* COPYING*; do
    if [ -e "$f" ]; then cp "$f" "$stage/"; fi
  done
  if [[ $FORMATS == *" tar "* ]]; then
    tar -C target/dist-pkg --owner=0 --group=0 --sort=name --mtime="@$epoch" -cf - "$name" | gzip -9n > "dist/$name.tar.gz"
  fi
  if [[ $FORMATS == *" deb "* ]]; then
    SOURCE_DATE_EPOCH=$epoch cargo deb -p tlsprof --target "$target" --no-build --no-strip --output dist/
  fi
  if [[ $FORMATS == *" rpm "* ]]; then
    # xz, not the default zstd: rpm reads zstd payloads only from 4.14 (RHEL 8) on
    SOURCE_DATE_EPOCH=$epoch cargo generate-rpm -p agent --target "$target" --auto-req disabled --payload-compress xz --output dist/
  fi

  mkdir -p "dist/bin/$docker_arch"
  install -m 755 "$bin" "dist/bin/$docker_arch/tlsprof"
done

(cd dist && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | sort | xargs sha256sum > SHA256SUMS)
ls -l dist dist/bin/*
