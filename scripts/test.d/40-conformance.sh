# The conformance suites through the CLI, against every backend this tree ships that can run
# here: a fresh sandbox each, every suite, non-zero on any failed probe.
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The in-process fake, through the test-only CLI that links it (the shipped one refuses it),
# declaring what its emulator really serves (tests/support/testing_backend/conformance.json).
echo "--- airlock-testing conformance --backend testing"
"$AIRLOCK_BUILD_DIR/tests/cli/airlock-testing" conformance --backend testing \
  --backend-config "${AIRLOCK_SOURCE_DIR:-.}/tests/support/testing_backend/conformance.json"

# The linux backend's conformance is required, never optional. Its sandboxes live in a state
# directory of this stage's own, purged however the stage ends.
if ! is_root; then
  skip_part "airlock conformance --backend linux: needs root here (CI runs as root)"
  exit 0
fi
linux_backend_config airlock-conformance-linux
# Every suite, the isolation suite included (its probes run inside the sandbox and a second
# one): a probe that gets through fails the stage, as any other failed probe does.
echo "--- airlock conformance --backend linux"
"$airlock" conformance --backend linux --backend-config "$config"

# Snapshots of the linux backend on their own, through the CLI as an operator runs them: every
# probe must pass (processes-survive-a-resume is skipped, with its reason, for a backend whose
# snapshots hold files only), and the suite must have run at all — a backend that stopped
# declaring snapshot would otherwise pass by running nothing.
echo "--- airlock conformance --backend linux --suite snapshot"
snapshot_out=$("$airlock" conformance --backend linux --backend-config "$config" \
  --min-isolation container --suite snapshot) && code=0 || code=$?
echo "$snapshot_out"
[[ $code -eq 0 ]] || fail "the linux snapshot suite failed ($code)"
for probe in files-survive-a-resume forks-diverge another-conversation-cannot-reach-it \
  a-resume-meets-the-routers-checks ids-never-name-paths \
  nothing-is-left-once-the-conversation-is-gone; do
  grep -E "^snapshot\s+${probe}\s+passed" <<<"$snapshot_out" >/dev/null \
    || fail "the linux snapshot suite did not pass ${probe}"
done
