# The egress proxy's suite (label "egress") already ran once in the unit stage. Here it runs three
# more times, shuffled, because the proxy is an event loop talking to real sockets and a timing
# race shows up as a rare failure, not a constant one. Bounded: about a minute under ASan.
set -euo pipefail
GTEST_SHUFFLE=1 ctest --test-dir "${AIRLOCK_TEST_BUILD_DIR:-$AIRLOCK_BUILD_DIR}" -L egress --output-on-failure --timeout 120 \
  --repeat until-fail:3 -j2
