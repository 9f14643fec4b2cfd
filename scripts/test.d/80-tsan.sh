# The concurrency, outputs and egress suites again under ThreadSanitizer (the `tsan` preset, as
# `make test-tsan`): the call lifecycle, the output sinks and the proxy's event loop are where
# threads meet. Three rounds, shuffled: a timing race between an event loop and real sockets
# shows up as a rare failure, not a constant one. A report fails the stage (halt_on_error).
# Only those test executables are built.
#
# Every other suite already ran under ASan+UBSan: the test build of stages 10–35 is the `asan`
# preset (scripts/test-all).
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

targets=(core_concurrency_tests core_outputs_tests egress_tests)
started=$(date +%s)
[[ -f build/tsan/build.ninja ]] || cmake --preset tsan >/dev/null
cmake --build --preset tsan --target "${targets[@]}"
built=$(date +%s)
GTEST_SHUFFLE=1 ctest --test-dir build/tsan -L '^(concurrency|outputs|egress)$' --output-on-failure \
  --timeout 900 --repeat until-fail:3 -j2
echo "80-tsan: built in $((built - started))s, ran in $(($(date +%s) - built))s; clean"
