# The conformance suites through the CLI, against every backend this tree ships that can run
# here: a fresh sandbox each, every suite, non-zero on any failed probe.
set -euo pipefail
airlock="$AIRLOCK_BUILD_DIR/src/cli/airlock"

# The in-process fake, through the test-only CLI that links it (the shipped one refuses it),
# declaring what its emulator really serves (tests/support/testing_backend/conformance.json).
echo "--- airlock-testing conformance --backend testing"
"$AIRLOCK_BUILD_DIR/tests/cli/airlock-testing" conformance --backend testing \
  --backend-config "${AIRLOCK_SOURCE_DIR:-.}/tests/support/testing_backend/conformance.json"

# The linux backend's conformance is required, never optional. Its sandboxes live in a state
# directory of this stage's own, purged however the stage ends.
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIPPED: airlock conformance --backend linux: needs root here (CI runs as root)"
  exit 0
fi
state=$(mktemp -d /tmp/airlock-conformance-linux-XXXXXX)
config=$(mktemp /tmp/airlock-conformance-linux-XXXXXX.json)
cleanup() {
  "$airlock" purge --all --backend-config "$config" >/dev/null 2>&1 || true
  rm -rf "$state" "$config"
}
trap cleanup EXIT
printf '{"linux": {"state_dir": "%s"}}' "$state" >"$config"
# Every suite, the isolation suite included (its probes run inside the sandbox and a second
# one): a probe that gets through fails the stage, as any other failed probe does.
echo "--- airlock conformance --backend linux"
"$airlock" conformance --backend linux --backend-config "$config"
