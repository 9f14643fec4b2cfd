# airlockd end to end: the Deep Agents (JS) adapter's tests against a real daemon, and the bounded
# load test (50 conversations) — each against the `testing` backend, and against `linux` when this
# build has it and runs as root (otherwise the linux runs are SKIPPED, loudly, with the reason).
# The daemon's own gtest suite (daemon_tests, its DaemonOnLinux cases included) runs with every
# other CTest suite in 10-unit.
# Takes about 1.5 minutes on the shared 2-core machine: npm ci ~30 s (registry reachable, cache
# cold), the adapter's tests ~50 s, the load test ~3 s (testing) and ~30 s (linux).
set -euo pipefail
cd "$AIRLOCK_SOURCE_DIR"
build="$AIRLOCK_BUILD_DIR"
export AIRLOCKD="$PWD/$build/src/daemon/airlockd"
export AIRLOCK_BUILD_DIR="$PWD/$build"
airlock="$PWD/$build/src/cli/airlock"
status=0

# Which backends can this build route to? `airlock check` builds the same router from the same
# document the daemon reads, and names an unknown backend type.
backends=(testing)
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo "{\"backends\":[{\"type\":\"linux\",\"state_dir\":\"$probe/state\"}],\"min_isolation\":\"container\"}" >"$probe/linux.json"
echo '{"kind":"deepagents","requires":["exec","files_in","files_out"]}' >"$probe/spec.json"
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIPPED: the linux load test and linux adapter tests: the linux backend needs root here (CI runs as root)"
elif reason=$("$airlock" check --config "$probe/linux.json" --spec "$probe/spec.json" 2>&1); then
  backends+=(linux)
else
  echo "SKIPPED: the linux load test and linux adapter tests: $(tail -n1 <<<"$reason")"
fi

# ---- the Deep Agents adapter ---------------------------------------------------------------------
echo "--- clients/deepagents-js: npm ci"
started=$(date +%s)
(cd clients/deepagents-js && npm ci --no-audit --no-fund --loglevel=error)
echo "--- npm ci took $(( $(date +%s) - started ))s"
echo "--- clients/deepagents-js: node --test"
log=$(mktemp)
if (cd clients/deepagents-js && npm test) >"$log" 2>&1; then
  grep -E '^# (tests|pass|fail|skipped)' "$log" || true
else
  cat "$log"
  echo "deepagents-js tests FAILED"
  status=1
fi
grep -E '^SKIPPED:|^# SKIPPED:' "$log" | sed 's/^# //' | sort -u || true
rm -f "$log"

# ---- the load test ---------------------------------------------------------------------------------
for backend in "${backends[@]}"; do
  echo "--- load: 50 conversations against the $backend backend"
  if ! AIRLOCK_LOAD_BACKEND="$backend" AIRLOCK_LOAD_SECONDS=90 \
      timeout 300 "$build/tests/daemon/daemon_load_test"; then
    echo "load test against $backend FAILED"
    status=1
  fi
done
exit "$status"
