# The suites again under the sanitizers: ASan+UBSan (the `asan` preset) for the unit, core,
# outputs, conformance (testing backend), images, kinds, egress, linux backend and daemon tests, and TSan
# (the `tsan` preset) for the concurrency, outputs and egress tests (as `make test-tsan`). Any report fails the stage: UBSan is
# built with -fno-sanitize-recover, and ASan/TSan exit non-zero on their first finding.
#
# Only the test executables (and what they run) are built, not the whole tree: the stage has to
# fit in about 12 minutes of `make test`'s 45 on two cores. Set AIRLOCK_SANITIZERS=asan or =tsan
# to run one half.
set -euo pipefail
cd "$AIRLOCK_SOURCE_DIR"
which=${AIRLOCK_SANITIZERS:-asan tsan}

asan_targets=(core_tests core_concurrency_tests core_outputs_tests core_conformance_tests
              images_tests testing_backend_tests codeact_tests egress_tests linux_backend_tests
              daemon_tests)
asan_labels='^(core|concurrency|outputs|conformance|images|backends|kinds|egress|linux|daemon)$'
tsan_targets=(core_concurrency_tests core_outputs_tests egress_tests)
tsan_labels='^(concurrency|outputs|egress)$'

# halt_on_error: the first report is the failure. detect_leaks: a leak is a finding too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

present() {  # only the test executables this tree has
  local target
  for target in "$@"; do
    grep -rqs "airlock_test($target\$" tests --include=CMakeLists.txt && echo "$target"
  done
}

run_preset() {
  local preset=$1 labels=$2
  shift 2
  local started built
  started=$(date +%s)
  mapfile -t targets < <(present "$@")
  [[ -f build/$preset/build.ninja ]] || cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" --target "${targets[@]}"
  built=$(date +%s)
  ctest --test-dir "build/$preset" -L "$labels" --output-on-failure --timeout 900 -j2
  echo "80-sanitizers: $preset: built in $((built - started))s, ran in $(($(date +%s) - built))s"
}

[[ $which == *asan* ]] && run_preset asan "$asan_labels" "${asan_targets[@]}"
[[ $which == *tsan* ]] && run_preset tsan "$tsan_labels" "${tsan_targets[@]}"
echo "80-sanitizers: clean"
