# Chaos against the linux backend through the CLI (tests/chaos/chaos.sh): SIGKILL mid-exec and
# mid-transfer, a full disk, exhausted descriptors, a killed init — each recovered with
# `airlock purge` and proven clean by a scoped leak audit.
set -euo pipefail
cd "$AIRLOCK_SOURCE_DIR"
if [[ ! -f src/backends/linux/CMakeLists.txt ]]; then
  echo "SKIPPED: chaos: the linux backend is not in this tree"
  exit 0
fi
exec tests/chaos/chaos.sh "$AIRLOCK_BUILD_DIR"
