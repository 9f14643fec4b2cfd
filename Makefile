# airlock — the two commands a fresh machine needs are `make run` and `make test`.
SHELL := /bin/bash
PRESET ?= dev
BUILD_DIR := build/$(PRESET)
AIRLOCK := $(BUILD_DIR)/src/cli/airlock
# Which backends `make conformance-report` records (docs/conformance/<backend>.json).
CONFORMANCE_BACKENDS ?= testing linux

.PHONY: all bootstrap bootstrap-test configure build run test test-unit test-asan test-tsan \
        bench fuzz format conformance-report clean

all: build

bootstrap:
	@scripts/bootstrap

bootstrap-test:
	@scripts/bootstrap --test

configure: bootstrap
	@[ -f $(BUILD_DIR)/build.ninja ] || cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build --preset $(PRESET)

# The main job: a codeact program in a `linux` sandbox, the floor explicitly lowered to
# `container`, printing what the router decided. Builds only what the job runs, one line per
# phase (scripts/make-run). `make run BACKEND=microvm` runs it in a microVM instead, at the
# default floor where the machine's KVM runs the guest.
BACKEND ?= linux
run:
	@AIRLOCK_MAIN_JOB_BACKEND=$(BACKEND) scripts/make-run

# Everything: installs what the tests need, builds, starts the services tests need, runs every
# suite, stops what it started.
test: bootstrap-test
	@scripts/test-all $(PRESET)

test-unit: build
	@ctest --preset $(PRESET) --output-on-failure

test-asan:
	@$(MAKE) --no-print-directory PRESET=asan build
	@ctest --preset asan --output-on-failure

test-tsan:
	@$(MAKE) --no-print-directory PRESET=tsan build
	@ctest --preset tsan --output-on-failure -L "concurrency|outputs|egress"

bench: build
	@$(AIRLOCK) bench

fuzz: bootstrap-test
	@scripts/fuzz-all long

format:
	@git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

conformance-report: build
	@scripts/conformance-report $(BUILD_DIR) $(CONFORMANCE_BACKENDS)

clean:
	rm -rf build
