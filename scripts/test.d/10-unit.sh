# Every gtest suite registered with CTest (labels select subsets elsewhere).
set -euo pipefail
ctest --test-dir "$AIRLOCK_BUILD_DIR" --output-on-failure --timeout 600 -j2
