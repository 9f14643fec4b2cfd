# Every libFuzzer target for a bounded time (~20 s each, seeds first: every crash ever fixed is a
# seed, so this is also the regression run). A crash, sanitizer report, leak or timeout fails.
# `make fuzz` runs the same targets for 5 minutes each.
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
exec scripts/fuzz-all "${AIRLOCK_FUZZ_SECONDS:-short}"
