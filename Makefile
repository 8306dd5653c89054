# tlsprof: the two commands are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
PYTEST ?= python3 -m pytest

.PHONY: deps build-deps test-deps build lint test unit integration host-package demo bench dist clean

# What the build and unit tests need (compilers, headers): no root if they are there.
build-deps:
	@bash scripts/deps.sh build

# Everything the integration tests use (servers, clients, chromium, QEMU, kernels...): root.
test-deps:
	@bash scripts/deps.sh test

deps: test-deps

build: build-deps
	$(CARGO) build --release --locked

# Style, checked first by `make test`: rustfmt (rustfmt.toml), clippy with its warnings as
# errors, and clang-format over the kernel side (bpf/.clang-format; the generated vmlinux
# headers aside). CONTRIBUTING.md says how to fix what it finds.
BPF_SOURCES = $(filter-out bpf/vmlinux%,$(wildcard bpf/*.h bpf/*.c))
lint: build-deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --release --locked --all-targets -- -D warnings
	clang-format-14 --dry-run --Werror $(BPF_SOURCES)

# The unit tests' build and the release binary in one cargo run: the two compilations of
# tlsprof overlap (192 s against 217 s one after the other on this 2-core VM), and the
# integration tests' `build` finds the binary done.
unit: build-deps
	$(CARGO) build --release --locked --bins --tests
	$(CARGO) test --release --locked

# The host matrix's packages: the static x86-64 and arm64 builds in .debs (scripts/dist.sh),
# which each Debian guest installs (tests/test_kernels.py); the packaging tools and the two
# targets' compiled dependencies kept with the test dependencies, so that a fresh clone
# does not build them again (cargo rebuilds tlsprof itself, and whatever changed).
host-package: test-deps
	@TESTDEPS=$${TLSPROF_TESTDEPS:-/var/cache/tlsprof-testdeps}; \
	  TLSPROF_DIST_FORMATS=deb TLSPROF_TOOLS=$$TESTDEPS/tools CARGO_TARGET_DIR=$$TESTDEPS/dist-target \
	  bash scripts/dist.sh

# Ends with the 25 slowest tests and the total: every log shows the budget (docs/testing.md).
integration: build test-deps host-package
	$(PYTEST) -v -p no:cacheprovider --durations=25 tests

# Every test: the set-up first (packages, kernels, the guests' roots: nothing to do where
# it was done before), then the style gate (lint), the Rust unit tests and the integration tests (the host
# matrix's packages built first); the last line gives the set-up's time and the tests',
# each against its budget in docs/testing.md (a machine's first set-up has its own).
test:
	@start=$$(date +%s); $(MAKE) --no-print-directory test-deps; rc=$$?; \
	  setup=$$(( $$(date +%s) - start )); \
	  if [ $$rc = 0 ]; then $(MAKE) --no-print-directory lint unit integration; rc=$$?; fi; \
	  echo "make test: $$(( $$(date +%s) - start )) s in all: set-up $$setup s (budget: 900 s on a machine's" \
	    "first run), tests $$(( $$(date +%s) - start - setup )) s (budget: 2100 s), docs/testing.md"; exit $$rc

demo: build
	@bash scripts/deps.sh demo
	@bash scripts/demo.sh

bench: build
	python3 bench/overhead.py

# Release artefacts in dist/: static binaries for x86-64 and arm64, tarballs, .deb, .rpm
# (docs/install.md, "Building the release").
dist:
	@bash scripts/deps.sh dist
	@bash scripts/dist.sh

clean:
	$(CARGO) clean
	rm -rf dist
