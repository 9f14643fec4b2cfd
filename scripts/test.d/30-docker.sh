# The docker backend against a private dockerd, then against Podman's Docker-compatible service.
# Each engine is started here and stopped on the way out, whatever happened in between.
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

engine_tests() {  # $1: which engine, for the log
  echo "--- docker backend tests against $1 ($DOCKER_HOST)"
  ctest --test-dir "$build" -L engine --output-on-failure --timeout 300 -j2
}

conformance() {  # $1: which engine
  if ! "$airlock" conformance --help >/dev/null 2>&1; then
    echo "SKIPPED: conformance against $1: the tree has no \`airlock conformance\` yet"
    return 0
  fi
  local config
  config=$(mktemp)
  printf '{"docker": {"default_image": "airlock-test/busybox:latest", "pull_missing_images": false}}\n' >"$config"
  echo "--- airlock conformance --backend docker against $1"
  "$airlock" conformance --backend docker --backend-config "$config"
  rm -f "$config"
}

# shellcheck disable=SC2046
export $(scripts/engines/dockerd start)
engine_tests dockerd
conformance dockerd
scripts/engines/dockerd stop

export $(scripts/engines/podman start)
engine_tests podman
conformance podman
