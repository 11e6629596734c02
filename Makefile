# starhalo: `make run` sets up what is missing, builds and runs the main job;
# `make test` sets up, then runs the whole suite, formatting and lint checks.

RANKS ?= 2
CARGO ?= cargo

.PHONY: setup build run test bench clean

setup:
	@scripts/setup

build: setup
	$(CARGO) build --release

# Until the simulation driver lands, the main job is the star-forest ping-pong benchmark.
run: build
	mpiexec -n 2 target/release/starhalo bench sf-pingpong

test: setup
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

bench: build
	mpiexec -n 2 target/release/starhalo bench sf-pingpong --json

clean:
	$(CARGO) clean
