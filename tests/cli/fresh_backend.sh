#!/usr/bin/env bash
# The docker and gvisor backends on a fresh machine, with no configuration at all: from an empty
# state directory (a `mktemp -d`, 0700 as a fresh one is) and an empty image store, the first
# run is refused naming the one command that makes an image, that command makes it offline
# from this host's busybox-static, and then the backend's defaults serve the conformance
# suites.
#
#   fresh_backend.sh gvisor AIRLOCK     as root, with runsc installed
#   fresh_backend.sh docker AIRLOCK     against the engine at $DOCKER_HOST (unix://…); the tag
#                                       airlock/busybox:latest is removed from it first
set -uo pipefail
backend=$1
airlock=$2
fail() {
  echo "FAILED: $1"
  [[ -n ${2:-} ]] && sed 's/^/  /' <<<"$2"
  exit 1
}
ok() { echo "ok  $1"; }
(($(id -u) == 0)) || { echo "SKIPPED: the $backend backend needs root here"; exit 0; }
state=$(mktemp -d /tmp/airlock-fresh-XXXXXX)
cleanup() {
  AIRLOCK_STATE_DIR=$state "$airlock" purge --all --backend "$backend" >/dev/null 2>&1 || true
  rm -rf --one-file-system "$state" "$state.config.json"
}
trap cleanup EXIT
export AIRLOCK_STATE_DIR=$state AIRLOCK_CONFIG=$state.config.json
echo '{}' >"$AIRLOCK_CONFIG"
unset AIRLOCK_MIN_ISOLATION
build_command="airlock image build busybox"
case $backend in
gvisor)
  command -v runsc >/dev/null || { echo "SKIPPED: runsc is not installed"; exit 0; } ;;
docker)
  [[ ${DOCKER_HOST:-} == unix://* ]] || { echo "SKIPPED: no engine at \$DOCKER_HOST"; exit 0; }
  build_command="airlock image build busybox --docker"
  # The engine starts without the default image, as a fresh one would.
  curl -s -o /dev/null --unix-socket "${DOCKER_HOST#unix://}" -X DELETE \
    "http://engine/images/airlock%2Fbusybox:latest?force=true" || true
  ;;
*) echo "fresh_backend.sh: unknown backend '$backend'" >&2; exit 2 ;;
esac

# 1. Nothing configured, nothing built: refused, naming the command.
out=$("$airlock" conformance --backend "$backend" --suite files_in 2>&1)
code=$?
((code != 0)) || fail "conformance ran with no image" "$out"
grep -qF "\`$build_command\`" <<<"$out" || fail "the refusal does not name \`$build_command\`" "$out"
ok "no image: refused naming \`$build_command\`"

# 2. The command, offline.
# shellcheck disable=SC2086
out=$("$airlock" ${build_command#airlock } 2>&1) || fail "$build_command failed" "$out"
grep -q "^built busybox:latest" <<<"$out" || fail "$build_command did not say what it built" "$out"
"$airlock" image ls | grep -q "^busybox:latest " || fail "busybox:latest is not in the store"
ok "$build_command: $(head -1 <<<"$out" | cut -c1-60)…"

# 3. The defaults now serve, and the state directory was opened only as far as runsc needs.
out=$("$airlock" conformance --backend "$backend" --suite files_in --suite exec 2>&1)
code=$?
((code == 0)) || fail "conformance --backend $backend exited $code after the build" "$out"
grep -q "conformant" <<<"$out" || fail "no verdict" "$out"
ok "conformance --backend $backend (files_in, exec) with the defaults: $(tail -1 <<<"$out")"
if [[ $backend == gvisor ]]; then
  mode=$(stat -c %a "$state")
  # mktemp made it 0700: only others' search bit is added.
  [[ $mode == 701 ]] || fail "the state directory is $mode, not 701 (0700 plus traverse for others)"
  ok "the state directory went from 700 to 701: others may pass, not list or change"
fi
out=$("$airlock" run --backend "$backend" --min-isolation none --quiet -- sh -c 'echo from-$0' busybox 2>&1)
[[ $out == from-busybox ]] || fail "airlock run on the defaults" "$out"
ok "airlock run --backend $backend on the defaults"
