# starhalo: `make run` sets up what is missing, builds and runs the main job;
# `make test` sets up, then runs the whole suite (with the examples built first: tests/examples.rs
# runs them), formatting, lint and doc checks.

RANKS ?= 2
CARGO ?= cargo
# NVRTC 12 and 13 fetched by scripts/setup: the CUDA-feature tests compile every kernel with
# the first, the kernel compilation test runs again with the second.
# STARHALO_EMULATE=require: the tests that run the kernels on the host with g++ (which
# scripts/setup installs) fail rather than skip where it is missing.
NVRTC_LIB := $(CURDIR)/target/nvrtc/nvidia/cuda_nvrtc/lib
NVRTC13_LIB := $(CURDIR)/target/nvrtc13/nvidia/cu13/lib

.PHONY: setup build run test bench clean gpu-selftest-build gpu-selftest gpu-check gpu-bundle gpu-emulated

setup:
	@scripts/setup

build: setup
	$(CARGO) build --release

# The main job: 2-D AMR-ready linear advection on 2 ranks, outputs in out/.
run: build
	mpiexec -n 2 target/release/starhalo run inputs/advection.yaml -d out

# The suite needs yt and ParaView too (scripts/setup --test installs yt into target/yt-venv,
# and Debian's python3-paraview).
test:
	@scripts/setup --test
	$(CARGO) build --examples
	STARHALO_EMULATE=require $(CARGO) test --workspace --all-targets
	$(CARGO) test --workspace --doc
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --workspace
	STARHALO_EMULATE=require LD_LIBRARY_PATH=$(NVRTC_LIB):$$LD_LIBRARY_PATH $(CARGO) test -p starhalo-exec -p starhalo-sf -p starhalo-boundary --lib --features starhalo-boundary/cuda
	LD_LIBRARY_PATH=$(NVRTC13_LIB):$$LD_LIBRARY_PATH $(CARGO) test -p starhalo-exec --lib --features cuda kernels_compile
	$(CARGO) clippy -p starhalo-exec -p starhalo-sf -p starhalo-boundary --all-targets --features starhalo-boundary/cuda -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps -p starhalo-exec -p starhalo-sf -p starhalo-boundary --features starhalo-boundary/cuda
	scripts/emulated-gpu

# The CUDA self-test needs no toolkit to build; run it where a GPU, its driver and NVRTC are.
gpu-selftest-build:
	$(CARGO) build --release -p starhalo-boundary --features cuda --example gpu_selftest

gpu-selftest: gpu-selftest-build
	$${CARGO_TARGET_DIR:-target}/release/examples/gpu_selftest

# Every GPU check and figure (scripts/gpu-check), where a GPU, its driver and NVRTC are: the
# kernel self-test, the tests that compare device and host runs (they take their GPU branch),
# the device exchange and ping-pong benchmarks, and advection throughput on the host and the
# GPU. `make gpu-bundle` packs the same for a GPU machine without Rust or MPICH.
gpu-check: gpu-bundle
	target/gpu-bundle/check

gpu-bundle: setup
	scripts/gpu-bundle

# The GPU branches of the tests against a host-emulated CUDA driver (no GPU needed; make test
# runs it too).
gpu-emulated: setup
	scripts/emulated-gpu

bench: build
	mpiexec -n 2 target/release/starhalo bench sf-pingpong --json
	$(CARGO) bench --bench pack

clean:
	$(CARGO) clean
