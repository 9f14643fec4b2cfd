# Every gtest suite registered with CTest, from the test build (ASan+UBSan unless
# AIRLOCK_TEST_PRESET says otherwise; see scripts/test-all). Suites that need an engine or the
# test images say SKIPPED here and run in the stage that provides them (15, 30); the microvm
# suites (label microvm: each boots VMs under TCG) run in their own stage, 37.
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Every exchange the daemon's suites make is recorded, then held against docs/api/openapi.yaml.
exchanges=$(mktemp /tmp/airlock-exchanges-XXXXXX.jsonl)
remove_on_exit "$exchanges"
status=0
AIRLOCK_EXCHANGE_LOG=$exchanges ctest --test-dir "$AIRLOCK_TEST_BUILD_DIR" --output-on-failure \
  --timeout 900 -j2 -LE microvm || status=$?
check_exchanges "$exchanges"
exit "$status"
