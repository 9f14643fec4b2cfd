# scripts/test-all's own verdicts, against a directory of fake stages (seconds): an ok stage, one
# that skips (exit 77 with `SKIPPED: <reason>`), one that skips a part, one that fails, one that
# exits 77 without saying why; lib.sh beside them must not run as a stage. Then the same with
# AIRLOCK_REQUIRE_ALL_STAGES=1, as on CI: a skip of a stage, or of a part, fails the run. And the
# names: two stages sharing a number, or a file misnamed as a stage, stop the run; and a file
# left in the source tree is reported. If the handling of skips breaks, this fails before any
# long stage has run.
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
work=$(mktemp -d /tmp/airlock-stage-test-all-XXXXXX)
remove_on_exit "$work"

fake() {  # fake DIR NAME BODY: a stage that sources the real lib.sh
  mkdir -p "$work/$1"
  printf 'source %q\n%s\n' "$AIRLOCK_SOURCE_DIR/scripts/test.d/lib.sh" "$3" >"$work/$1/$2.sh"
}
# test_all DIR LABEL [VAR=VALUE…]: scripts/test-all --no-build on the fake stages in DIR, its
# output in $work/LABEL.out and its exit status in $rc. Locally unless told otherwise.
test_all() {
  local dir=$1 label=$2
  shift 2
  rc=0
  env AIRLOCK_REQUIRE_ALL_STAGES=0 "$@" AIRLOCK_STAGE_DIR="$work/$dir" \
    AIRLOCK_STAGE_LOGS="$work/$label.logs" \
    "$AIRLOCK_SOURCE_DIR/scripts/test-all" --no-build >"$work/$label.out" 2>&1 || rc=$?
  out=$label
}
# expect STATUS TEXT…: the last run exited STATUS and printed each TEXT (literally, in a line)
expect() {
  local want=$1 line
  shift
  [[ $rc == "$want" ]] || { cat "$work/$out.out"; fail "$out: test-all exited $rc, expected $want (its output above)"; }
  for line in "$@"; do
    grep -qF -- "$line" "$work/$out.out" ||
      { cat "$work/$out.out"; fail "$out: test-all did not print '$line' (its output above)"; }
  done
}
refuse() {  # refuse TEXT: the last run printed nothing containing TEXT
  ! grep -qF -- "$1" "$work/$out.out" || { cat "$work/$out.out"; fail "$out: test-all printed '$1' (above)"; }
}

fake mixed 10-ok 'echo fine'
fake mixed 20-skip 'skip "no widget here"'
fake mixed 30-part 'skip_part "the gadget part: no gadget"; echo "rest of 30-part ran"'
fake mixed 40-fail 'echo "FAILED: the fake failure"; exit 3'
fake mixed 50-mute 'exit 77'
printf 'echo "lib.sh RAN AS A STAGE"; exit 9\n' >"$work/mixed/lib.sh"
printf 'not a stage\n' >"$work/mixed/README"

test_all mixed local
expect 1 \
  "==> 10-ok: ok (" \
  "==> 20-skip: SKIPPED (no widget here)" \
  "SKIPPED: the gadget part: no gadget" "rest of 30-part ran" "==> 30-part: ok (" \
  "==> 40-fail: FAILED (exit 3, " \
  "==> 50-mute: FAILED: exit 77 (skipped) without a line 'SKIPPED: <reason>' saying why" \
  "==> skipped stages (1; they did not run):" "  20-skip: no widget here" \
  "==> parts skipped inside stages that passed:" "  30-part: the gadget part: no gadget" \
  "==> 40-fail failed; its failure lines (all in $work/local.logs/40-fail.log):" \
  "FAILED: the fake failure" \
  "FAILED stages: 40-fail 50-mute"
refuse "lib.sh RAN AS A STAGE"
refuse "a failure here"
refuse "AIRLOCK_REQUIRE_ALL_STAGES=1 (CI): every stage"
for name in 10-ok 20-skip 30-part 40-fail 50-mute; do
  [[ -f $work/local.logs/$name.log ]] || fail "no log kept for $name"
done
grep -qxF "SKIPPED: no widget here" "$work/local.logs/20-skip.log" || fail "20-skip's log lacks its SKIPPED line"

# Locally, a skip is not a failure.
rm "$work/mixed/40-fail.sh" "$work/mixed/50-mute.sh"
test_all mixed local-pass
expect 0 "==> 20-skip: SKIPPED (no widget here)" "all stages passed that ran; SKIPPED: 20-skip"

# On CI every stage, and every part, must run.
test_all mixed ci AIRLOCK_REQUIRE_ALL_STAGES=1
expect 1 \
  "==> 20-skip: SKIPPED (no widget here) — a failure here: AIRLOCK_REQUIRE_ALL_STAGES=1" \
  "FAILED: AIRLOCK_REQUIRE_ALL_STAGES=1 (CI): every stage must run, and 1 skipped:" \
  "  20-skip: no widget here" \
  "FAILED: 30-part: a part of this stage did not run, and AIRLOCK_REQUIRE_ALL_STAGES=1 (CI) requires every part to: the gadget part: no gadget" \
  "FAILED stages: 30-part"
refuse "rest of 30-part ran"

fake ci-skip 10-ok 'echo fine'
fake ci-skip 20-skip 'skip "no widget here"'
test_all ci-skip ci-skip AIRLOCK_REQUIRE_ALL_STAGES=1
expect 1 "FAILED: AIRLOCK_REQUIRE_ALL_STAGES=1 (CI): every stage must run, and 1 skipped:" \
  "  20-skip: no widget here"
refuse "all stages passed"

fake ci-ok 10-ok 'echo fine'
fake ci-ok 20-machine 'skip_part --allowed-on-ci "the thing this machine lacks (a setting of the machine)"; echo "rest ran"'
test_all ci-ok ci-allowed AIRLOCK_REQUIRE_ALL_STAGES=1
expect 0 "SKIPPED: the thing this machine lacks (a setting of the machine)" "rest ran" \
  "  20-machine: the thing this machine lacks (a setting of the machine)" "all stages passed"

# Names: a number used twice, a file that would never run.
fake names 50-one 'echo one'
fake names 50-two 'echo two'
fake names 7-short 'echo short'
test_all names names
expect 1 "FAILED: stages 50-one and 50-two share the number 50: give each its own" \
  "FAILED: $work/names/7-short.sh is not named as a stage (NN-name.sh), so it would never run"
refuse "==> 50-one"

# A file the run leaves in the source tree that git does not ignore: a note here, a failure on CI.
litter="$AIRLOCK_SOURCE_DIR/airlock-05-test-all-stray.$$"
on_exit "rm -f ${litter@Q}"
fake stray 10-litter "touch ${litter@Q}"
test_all stray stray-local
expect 0 "==> the run left files in the source tree that git does not ignore" "  ${litter##*/}" \
  "NOTE: stray files in the source tree (above); with AIRLOCK_REQUIRE_ALL_STAGES=1 (CI) a failure"
rm -f "$litter"
test_all stray stray-ci AIRLOCK_REQUIRE_ALL_STAGES=1
expect 1 "  ${litter##*/}" \
  "FAILED: AIRLOCK_REQUIRE_ALL_STAGES=1 (CI): the run left stray files in the source tree (above)"
rm -f "$litter"

echo "05-test-all: test-all's verdicts (ok, SKIPPED, skipped parts, FAILED, CI's every-stage rule, stage names, stray files) hold"
