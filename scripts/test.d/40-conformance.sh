# The conformance suites through the CLI, against every backend this tree ships that can run
# here: a fresh sandbox each, every suite, non-zero on any failed probe.
set -euo pipefail
airlock="$AIRLOCK_BUILD_DIR/src/cli/airlock"

echo "--- airlock conformance --backend testing"
"$airlock" conformance --backend testing

# The linux backend joins as soon as it is in the tree; from then on its conformance is
# required, never optional.
if [[ -f "$AIRLOCK_SOURCE_DIR/src/backends/linux/CMakeLists.txt" ]]; then
  echo "--- airlock conformance --backend linux"
  "$airlock" conformance --backend linux
else
  echo "SKIPPED: airlock conformance --backend linux: the linux backend is not in this tree yet"
fi
