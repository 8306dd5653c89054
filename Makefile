# tlsprof: the two commands are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
PYTEST ?= python3 -m pytest

.PHONY: deps build test unit integration demo bench clean

deps:
	@bash scripts/deps.sh

build: deps
	$(CARGO) build --release --locked

unit: deps
	$(CARGO) test --release --locked

integration: build
	$(PYTEST) -v -p no:cacheprovider tests

# Every test: Rust unit tests (no root needed), then the integration tests (root).
test: unit integration

demo: build
	@bash scripts/demo.sh

bench: build
	python3 bench/overhead.py

clean:
	$(CARGO) clean
