# The docker backend against a private dockerd, then against Podman's Docker-compatible service:
# the engine tests (attacks on both file planes, exec bounds and stops, lifecycle, cross-process
# purge, every conformance suite) and `airlock conformance --backend docker`. Each engine is
# started here and stopped on the way out, whatever happened in between.
set -euo pipefail
cd "$AIRLOCK_SOURCE_DIR"
build="$AIRLOCK_BUILD_DIR"
airlock="$build/src/cli/airlock"

if [[ $(id -u) -ne 0 ]]; then
  echo "SKIPPED: the docker stage starts its own dockerd and Podman service, which needs root"
  exit 0
fi
for tool in dockerd podman; do
  command -v "$tool" >/dev/null || { echo "FAILED: $tool is not installed (scripts/bootstrap --test)"; exit 1; }
done

cleanup() {
  scripts/engines/dockerd stop || true
  scripts/engines/podman stop || true
}
trap cleanup EXIT

conformance() {  # $1: which engine
  if ! "$airlock" conformance --help >/dev/null 2>&1; then
    echo "SKIPPED: \`airlock conformance\` against $1: the CLI has no conformance command yet" \
      "(the suites still ran above, inside docker_engine_tests)"
    return 0
  fi
  local config
  config=$(mktemp)
  printf '{"docker": {"default_image": "airlock-test/busybox:latest", "pull_missing_images": false}}\n' >"$config"
  echo "--- airlock conformance --backend docker against $1"
  local status=0
  "$airlock" conformance --backend docker --backend-config "$config" || status=$?
  rm -f "$config"
  return "$status"
}

started=$(date +%s)
# shellcheck disable=SC2046
export $(scripts/engines/dockerd start)
echo "--- dockerd up in $(( $(date +%s) - started ))s at $DOCKER_HOST"
ctest --test-dir "$build" -L engine --output-on-failure --timeout 600 -j2
conformance dockerd
scripts/engines/dockerd stop

started=$(date +%s)
# shellcheck disable=SC2046
export $(scripts/engines/podman start)
echo "--- podman service up in $(( $(date +%s) - started ))s at $DOCKER_HOST"
# Against Podman: the conformance suites on both planes and the lifecycle and exec attacks; the
# per-plane file attacks ran against dockerd and do not depend on the engine's API.
ctest --test-dir "$build" -L engine -E 'Planes/FilesTest' --output-on-failure --timeout 600 -j2
conformance podman
