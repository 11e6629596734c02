# starhalo: `make run` sets up what is missing, builds and runs the main job;
# `make test` sets up, then runs the whole suite, formatting and lint checks.

RANKS ?= 2
CARGO ?= cargo

.PHONY: setup build run test bench clean gpu-selftest-build gpu-selftest

setup:
	@scripts/setup

build: setup
	$(CARGO) build --release

# The main job: 2-D AMR-ready linear advection on 2 ranks, outputs in out/.
run: build
	mpiexec -n 2 target/release/starhalo run inputs/advection.yaml -d out

test: setup
	$(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test -p starhalo-exec -p starhalo-sf -p starhalo-boundary --lib --features starhalo-boundary/cuda
	$(CARGO) clippy -p starhalo-exec -p starhalo-sf -p starhalo-boundary --all-targets --features starhalo-boundary/cuda -- -D warnings

# The CUDA self-test needs no toolkit to build; run it where a GPU, its driver and NVRTC are.
gpu-selftest-build:
	$(CARGO) build --release -p starhalo-boundary --features cuda --example gpu_selftest

gpu-selftest: gpu-selftest-build
	$${CARGO_TARGET_DIR:-target}/release/examples/gpu_selftest

bench: build
	mpiexec -n 2 target/release/starhalo bench sf-pingpong --json

clean:
	$(CARGO) clean
