# shellcheck shell=bash
# What the test stages share; each stage begins with
#     source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Not a stage: scripts/test-all runs only the files named NN-*.sh here.
#
# Sourcing it sets strict mode (set -euo pipefail), enters $AIRLOCK_SOURCE_DIR (default: this
# tree), makes $AIRLOCK_BUILD_DIR (the optimised programs; required) and $AIRLOCK_TEST_BUILD_DIR
# (the gtest suites; default $AIRLOCK_BUILD_DIR) absolute, resolved from the source directory as
# scripts/test-all sets them, and defines:
#
#   $stage                   this stage's name (20-linux)
#   $airlock                 the CLI of $AIRLOCK_BUILD_DIR
#   fail MESSAGE             prints `FAILED: <stage>: MESSAGE` on stderr and exits 1
#   skip REASON              the whole stage cannot run here: prints `SKIPPED: REASON`, exits 77
#                            (scripts/test-all reports it; on CI, AIRLOCK_REQUIRE_ALL_STAGES=1,
#                            a skipped stage fails the run)
#   skip_part [--allowed-on-ci] REASON
#                            a part of the stage cannot run here: prints `SKIPPED: REASON` and
#                            the stage goes on. With AIRLOCK_REQUIRE_ALL_STAGES=1 (CI) it fails the
#                            stage instead, unless --allowed-on-ci: a part that can legitimately
#                            not run on CI's machine either (REASON says why)
#   every_part_required      true with AIRLOCK_REQUIRE_ALL_STAGES=1 (CI): nothing may skip
#   is_root                  true when running as root
#   require_root WHAT        skips the stage unless root: "WHAT needs root; CI runs as root"
#   require_tools TOOL…      fails unless every TOOL is on PATH
#   on_exit COMMAND          runs COMMAND (a string, eval'd) when the stage exits, however it
#                            exits; the last registered runs first; a failing one does not stop
#                            the others nor change the stage's exit status
#   remove_on_exit PATH…     rm -rf each PATH when the stage exits (a mktemp'd scratch, say)
#   linux_backend_config PREFIX [JSON_MEMBERS]
#                            $state: a fresh /tmp/PREFIX-XXXXXX state directory; $config: a
#                            backend config for it, {"linux": {"state_dir": $state, JSON_MEMBERS}};
#                            on exit every sandbox in it is purged and both are removed
#   linux_run ARG…           `airlock run` on that config at the container rung, --quiet
#   http_servers PORTFILE BODY ADDRESS…
#                            loopback HTTP servers answering BODY (tests/support/http_servers.py),
#                            one set at a time; returns once PORTFILE names their ports, fails if
#                            they do not start; stopped on exit or by stop_http_servers
#   begin; took WHAT         prints `--- WHAT: <seconds since begin>s`
#   check_exchanges LOG…     holds the daemon exchanges recorded in each LOG (AIRLOCK_EXCHANGE_LOG)
#                            against docs/api/openapi.yaml; fails the stage on any disagreement,
#                            and when nothing at all was recorded
set -euo pipefail

stage=$(basename "$0" .sh)

AIRLOCK_SOURCE_DIR=$(cd "${AIRLOCK_SOURCE_DIR:-$(dirname "${BASH_SOURCE[0]}")/../..}" && pwd)
cd "$AIRLOCK_SOURCE_DIR"
: "${AIRLOCK_BUILD_DIR:?is not set: run the stages with scripts/test-all, or set AIRLOCK_BUILD_DIR (and AIRLOCK_TEST_BUILD_DIR) to build directories}"
AIRLOCK_BUILD_DIR=$(realpath -m "$AIRLOCK_BUILD_DIR")
AIRLOCK_TEST_BUILD_DIR=$(realpath -m "${AIRLOCK_TEST_BUILD_DIR:-$AIRLOCK_BUILD_DIR}")
export AIRLOCK_SOURCE_DIR AIRLOCK_BUILD_DIR AIRLOCK_TEST_BUILD_DIR
airlock="$AIRLOCK_BUILD_DIR/src/cli/airlock"

fail() {
  echo "FAILED: $stage: $*" >&2
  exit 1
}

skip() {
  echo "SKIPPED: $*"
  exit 77
}

every_part_required() { [[ ${AIRLOCK_REQUIRE_ALL_STAGES:-} == 1 ]]; }

skip_part() {
  local allowed_on_ci=0
  if [[ ${1:-} == --allowed-on-ci ]]; then
    allowed_on_ci=1
    shift
  fi
  if every_part_required && ((!allowed_on_ci)); then
    fail "a part of this stage did not run, and AIRLOCK_REQUIRE_ALL_STAGES=1 (CI) requires every part to: $*"
  fi
  echo "SKIPPED: $*"
}

is_root() { [[ $(id -u) -eq 0 ]]; }

require_root() {
  is_root || skip "$1 needs root; CI runs as root"
}

require_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/bootstrap --test installs it)"
  done
}

_exit_hooks=()
on_exit() { _exit_hooks+=("$1"); }
_run_exit_hooks() {
  local i
  for ((i = ${#_exit_hooks[@]} - 1; i >= 0; i--)); do
    eval "${_exit_hooks[i]}" || true
  done
}
trap _run_exit_hooks EXIT

remove_on_exit() {
  local path
  for path in "$@"; do on_exit "rm -rf ${path@Q}"; done
}

state=""
config=""
linux_backend_config() {
  state=$(mktemp -d "/tmp/$1-XXXXXX")
  config=$(mktemp "/tmp/$1-XXXXXX.json")
  on_exit "\"\$airlock\" purge --all --backend-config ${config@Q} >/dev/null 2>&1 || true; rm -rf ${state@Q} ${config@Q}"
  printf '{"linux": {"state_dir": "%s"%s}}' "$state" "${2:+, $2}" >"$config"
}

linux_run() { "$airlock" run --backend-config "$config" --min-isolation container --quiet "$@"; }

http_servers_pid=""
http_servers() {
  local portfile=$1
  stop_http_servers
  "$AIRLOCK_SOURCE_DIR/tests/support/http_servers.py" "$@" &
  http_servers_pid=$!
  on_exit stop_http_servers
  for _ in $(seq 100); do
    [[ -s $portfile ]] && return 0
    sleep 0.1
  done
  fail "the test HTTP servers did not start (tests/support/http_servers.py ${*:2})"
}
stop_http_servers() {
  if [[ -n $http_servers_pid ]]; then
    kill "$http_servers_pid" 2>/dev/null || true
    http_servers_pid=""
  fi
}

_step_start=$(date +%s)
begin() { _step_start=$(date +%s); }
took() { echo "--- $1: $(($(date +%s) - _step_start))s"; }

check_exchanges() {
  /usr/bin/python3 -c "import jsonschema, yaml" 2>/dev/null ||
    fail "python3-jsonschema or python3-yaml is missing (scripts/bootstrap --test installs them)"
  local log recorded=0
  for log in "$@"; do [[ -s $log ]] && recorded=1; done
  ((recorded)) || fail "no daemon exchange was recorded in $*: nothing was checked against the OpenAPI document"
  /usr/bin/python3 tests/daemon/openapi/check_exchanges.py docs/api/openapi.yaml "$@" ||
    fail "the daemon and docs/api/openapi.yaml disagree (above)"
}
