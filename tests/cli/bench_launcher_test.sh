#!/usr/bin/env bash
# Usage: bench_launcher_test.sh runs|missing AIRLOCK
#   runs:    `airlock bench` runs the airlock-bench beside it, passing the arguments through.
#   missing: with no airlock-bench beside it nor on $PATH, `airlock bench` fails and says where
#            it looked.
set -euo pipefail
case=$1
airlock=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

case $case in
runs)
  bench="$(dirname "$airlock")/airlock-bench"
  [[ -x $bench ]] || fail "$bench was not built"
  "$airlock" bench --list >"$scratch/through" || fail "airlock bench --list exited $?"
  "$bench" --list >"$scratch/direct" || fail "airlock-bench --list exited $?"
  diff -u "$scratch/direct" "$scratch/through" || fail "airlock bench --list differs from airlock-bench's"
  for group in linux router; do
    grep -q "^$group"$'\t' "$scratch/through" || fail "group $group not listed"
  done
  # airlock's own --json (before `bench`) and the bench's options reach airlock-bench.
  out=$("$airlock" --json bench --quick --only no-such-group) || fail "airlock --json bench exited $?"
  [[ $out == '{"failed":[],"ratios":[],"skipped":[],"stats":[]}' ]] || fail "unexpected --json output: $out"
  # Its parse errors are its own, with airlock's exit code for a refusal.
  set +e
  "$airlock" bench --no-such-flag >/dev/null 2>"$scratch/err"
  code=$?
  set -e
  [[ $code == 125 ]] || fail "airlock bench --no-such-flag exited $code, not 125"
  grep -q -- "--no-such-flag" "$scratch/err" || fail "the parse error does not name the flag"
  ;;
missing)
  # airlock alone in a directory of its own (a copy: /proc/self/exe resolves links), and a
  # $PATH with nothing in it.
  mkdir "$scratch/bin" "$scratch/empty"
  cp "$airlock" "$scratch/bin/airlock"
  set +e
  PATH="$scratch/empty" "$scratch/bin/airlock" bench --list >"$scratch/out" 2>"$scratch/err"
  code=$?
  set -e
  cat "$scratch/err" >&2
  [[ $code != 0 ]] || fail "airlock bench without airlock-bench exited 0"
  [[ ! -s $scratch/out ]] || fail "airlock bench without airlock-bench printed on stdout"
  grep -qF "airlock-bench was not found" "$scratch/err" || fail "the error does not say what is missing"
  grep -qF "$scratch/bin/airlock-bench" "$scratch/err" || fail "the error does not name the place beside airlock"
  grep -qF "$scratch/empty" "$scratch/err" || fail "the error does not name \$PATH"
  ;;
*)
  fail "unknown case $case"
  ;;
esac
echo "ok: $case"
