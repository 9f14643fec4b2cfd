# airlockd end to end: `airlock serve` spoken to with curl, the Deep Agents (JS) adapter's tests
# against a real daemon, and the bounded load test (50 conversations) — each against the
# `testing` backend (served by the test-only airlock-testing / airlockd-testing, which link it:
# the shipped programs refuse it), and against `linux` when this
# build has it and runs as root (otherwise the linux runs are SKIPPED, loudly, with the reason).
# The daemon's own gtest suite (daemon_tests, its DaemonOnLinux cases included) runs with every
# other CTest suite in 10-unit.
# Takes about 2 minutes on the shared 2-core machine: npm ci 30–40 s (registry reachable, cache
# cold), the adapter's tests ~50 s, the load test ~3 s (testing) and ~30 s (linux).
# The adapter's tests find airlockd and the CLI through these (lib.sh made the build absolute).
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
export AIRLOCKD="$AIRLOCK_BUILD_DIR/src/daemon/airlockd"
export AIRLOCKD_TESTING="$AIRLOCK_BUILD_DIR/tests/daemon/airlockd-testing"
status=0

# ---- the contract: docs/api/openapi.yaml under a real validator, and the traffic below held to it
echo "--- docs/api/openapi.yaml: redocly lint (recommended-strict)"
begin
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
(cd tests/daemon/openapi && npm ci --no-audit --no-fund --loglevel=error) ||
  fail "npm ci in tests/daemon/openapi failed"
if ! (cd tests/daemon/openapi && npx --no-install redocly lint --config redocly.yaml \
    --format=stylish ../../../docs/api/openapi.yaml); then
  echo "docs/api/openapi.yaml FAILED the validator"
  status=1
fi
took "redocly lint"
# Every exchange airlockd-testing answers below (the adapter's tests, the load test) is recorded
# and held against the document at the end.
AIRLOCK_EXCHANGE_LOG=$(mktemp /tmp/airlock-exchanges-XXXXXX.jsonl)
export AIRLOCK_EXCHANGE_LOG
remove_on_exit "$AIRLOCK_EXCHANGE_LOG"

# Which backends can this build route to? `airlock check` builds the same router from the same
# document the daemon reads, and names an unknown backend type.
backends=(testing)
probe=$(mktemp -d)
remove_on_exit "$probe"
echo "{\"backends\":[{\"type\":\"linux\",\"state_dir\":\"$probe/state\"}],\"min_isolation\":\"container\"}" >"$probe/linux.json"
echo '{"kind":"deepagents","requires":["exec","files_in","files_out"]}' >"$probe/spec.json"
if ! is_root; then
  skip_part "the linux load test and linux adapter tests: the linux backend needs root here (CI runs as root)"
elif reason=$("$airlock" check --config "$probe/linux.json" --spec "$probe/spec.json" 2>&1); then
  backends+=(linux)
else
  skip_part "the linux load test and linux adapter tests: $(tail -n1 <<<"$reason")"
fi

# ---- `airlock serve`, as an operator runs it, spoken to with curl --------------------------------
serve_backend=${backends[-1]}
echo "--- airlock serve over the $serve_backend backend"
serve_dir=$(mktemp -d)
remove_on_exit "$serve_dir"
serve_pid=
# shellcheck disable=SC2317 # called on exit (on_exit)
stop_serve() {
  if [[ -n $serve_pid ]] && kill -0 "$serve_pid" 2>/dev/null; then
    curl -sf --unix-socket "$serve_dir/sock" -X POST -d '{"scope":"serve-e2e"}' http://x/v1/purge >/dev/null || true
    kill -TERM "$serve_pid"
    wait "$serve_pid" || true
  fi
}
on_exit stop_serve
serve=$airlock
if [[ $serve_backend == linux ]]; then
  echo "{\"backends\":[{\"type\":\"linux\",\"state_dir\":\"$serve_dir/linux\"}],\"min_isolation\":\"container\"}" >"$serve_dir/config.json"
else
  serve="$AIRLOCK_BUILD_DIR/tests/cli/airlock-testing"
  echo '{"backends":[{"type":"testing","capabilities":["exec","files_in","files_out"]}],"min_isolation":"none"}' >"$serve_dir/config.json"
fi
"$serve" serve --config "$serve_dir/config.json" --socket "$serve_dir/sock" --state-dir "$serve_dir/state" \
  --ready-file "$serve_dir/ready" >"$serve_dir/log" 2>&1 &
serve_pid=$!
for _ in $(seq 300); do [[ -e $serve_dir/ready ]] || ! kill -0 "$serve_pid" 2>/dev/null && break; sleep 0.1; done
serve_fail() { echo "airlock serve: $*"; cat "$serve_dir/log"; status=1; }
api() { curl -s --unix-socket "$serve_dir/sock" -H 'Content-Type: application/json' "$@" || true; }
if [[ ! -e $serve_dir/ready ]]; then
  serve_fail "did not start"
else
  mode=$(stat -c %a "$serve_dir/sock")
  [[ $mode == 660 ]] || serve_fail "socket mode $mode, not 660"
  [[ $(api http://x/v1/health) == *'"ok"'* ]] || serve_fail "health: $(api http://x/v1/health)"
  acquired=$(api -X POST -d '{"key":{"scope":"serve-e2e","thread_id":"t","agent_dir":"a"},"spec":{"kind":"deepagents","requires":["exec","files_in","files_out"]}}' http://x/v1/sandboxes)
  handle=$(sed -n 's/.*"sandbox":"\([^"]*\)".*/\1/p' <<<"$acquired")
  if [[ -z $handle ]]; then
    serve_fail "acquire: $acquired"
  else
    ran=$(api -X POST -d '{"argv":["echo","served"]}' "http://x/v1/sandboxes/$handle/exec")
    [[ $ran == *'"stdout":"served\n"'* ]] || serve_fail "exec: $ran"
    streamed=$(api -N -X POST -d '{"argv":["echo","streamed"]}' "http://x/v1/sandboxes/$handle/exec/stream")
    [[ $streamed == *'"data_base64":"c3RyZWFtZWQK"'*'"type":"output"'*'"type":"result"'* ]] ||
      serve_fail "streaming exec: $streamed"
    bad=$(api -o /dev/null -w '%{http_code}' -X POST -d '{"argv":"echo"}' "http://x/v1/sandboxes/$handle/exec")
    [[ $bad == 400 ]] || serve_fail "a malformed exec answered $bad, not 400"
    gone=$(api -o /dev/null -w '%{http_code}' -X DELETE "http://x/v1/sandboxes/$handle")
    [[ $gone == 200 ]] || serve_fail "dispose answered $gone"
  fi
  kill -TERM "$serve_pid"
  if wait "$serve_pid"; then
    [[ ! -e $serve_dir/sock ]] || serve_fail "the socket outlived a graceful stop"
  else
    serve_fail "did not exit 0 on SIGTERM"
  fi
fi
echo "--- airlock serve: done"

# ---- the Deep Agents adapter ---------------------------------------------------------------------
echo "--- clients/deepagents-js: npm ci"
begin
(cd clients/deepagents-js && npm ci --no-audit --no-fund --loglevel=error)
took "npm ci"
echo "--- clients/deepagents-js: node --test"
log=$(mktemp)
remove_on_exit "$log"
if (cd clients/deepagents-js && npm test) >"$log" 2>&1; then
  grep -E '^# (tests|pass|fail|skipped)' "$log" || true   # the runner's counts, if it printed them
else
  cat "$log"
  echo "deepagents-js tests FAILED"
  status=1
fi
# The adapter's tests skip loudly (SKIPPED: on stderr), where the linux probe above skipped too.
adapter_skips=$(grep -E '^SKIPPED:|^# SKIPPED:' "$log" | sed 's/^# //' | sort -u || true)
if [[ -n $adapter_skips ]]; then
  echo "$adapter_skips"
  if every_part_required; then
    echo "FAILED: $stage: adapter tests skipped (above), and AIRLOCK_REQUIRE_ALL_STAGES=1 (CI) requires every part to run" >&2
    status=1
  fi
fi

# ---- the load test ---------------------------------------------------------------------------------
for backend in "${backends[@]}"; do
  echo "--- load: 50 conversations against the $backend backend"
  if ! AIRLOCK_LOAD_BACKEND="$backend" AIRLOCK_LOAD_SECONDS=90 \
      timeout 300 "$AIRLOCK_BUILD_DIR/tests/daemon/daemon_load_test"; then
    echo "load test against $backend FAILED"
    status=1
  fi
done

echo "--- the recorded exchanges against docs/api/openapi.yaml"
check_exchanges "$AIRLOCK_EXCHANGE_LOG"
exit "$status"
