# Chaos against the linux backend through the CLI (tests/chaos/chaos.sh): SIGKILL mid-exec and
# mid-transfer, a full disk, exhausted descriptors, a killed init — each recovered with
# `airlock purge` and proven clean by a scoped leak audit.
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ -f src/backends/linux/CMakeLists.txt ]] || skip "chaos: the linux backend is not in this tree"
# (chaos.sh itself says SKIPPED and exits 0 without root: the stage skips first, with exit 77.)
require_root "the chaos stage (its cases drive the linux backend)"
exec tests/chaos/chaos.sh "$AIRLOCK_BUILD_DIR"
