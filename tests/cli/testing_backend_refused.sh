#!/usr/bin/env bash
# The shipped CLI and daemon refuse the `testing` backend by name, with a message that says it
# is not built in and lists, sorted, the backends that are — however it is asked for.
#
#   testing_backend_refused.sh AIRLOCK AIRLOCKD SOURCE_DIR
set -uo pipefail
airlock=$1
airlockd=$2
source_dir=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
expected="no backend named 'testing' is built into this airlock; the registered backends are: "

# $1: what was run; $2: its exit code; $3: what it printed.
judge() {
  local what=$1 code=$2 output=$3
  if ((code == 0)); then
    echo "FAILED: $what exited 0"
    status=1
    return
  fi
  if ((code != 125)); then
    echo "FAILED: $what exited $code, not 125 (airlock could not run it)"
    status=1
  fi
  local line=${output#*"$expected"}
  if [[ $line == "$output" ]]; then
    echo "FAILED: $what did not say \"$expected…\"; it said:"
    sed 's/^/  /' <<<"$output"
    status=1
    return
  fi
  local list=${line%%$'\n'*}
  local names sorted
  names=$(tr -d ' ' <<<"$list" | tr ',' '\n')
  sorted=$(LC_ALL=C sort <<<"$names")
  if [[ -z $list || $names != "$sorted" ]] || grep -qx testing <<<"$names"; then
    echo "FAILED: $what listed the registered backends as \"$list\" (expected a sorted list without testing)"
    status=1
    return
  fi
  echo "ok  $what: exit $code, \"${expected}${list}\""
}

output=$("$airlock" run --backend testing -- true 2>&1)
judge "airlock run --backend testing -- true" $? "$output"

# A whole router document, declaring the rung the fake could once be configured to claim.
echo '{"backends":[{"type":"testing","isolation":"container"}],"min_isolation":"container"}' \
  >"$work/config.json"
output=$("$airlock" run --config "$work/config.json" -- true 2>&1)
judge "airlock run --config (a testing backend declaring container)" $? "$output"
output=$("$airlock" check --config "$work/config.json" --spec "$source_dir/examples/specs/codeact.json" 2>&1)
judge "airlock check --config (a testing backend declaring container)" $? "$output"
output=$("$airlock" conformance --backend testing 2>&1)
judge "airlock conformance --backend testing" $? "$output"

output=$(timeout 60 "$airlockd" --config "$work/config.json" --socket "$work/sock" \
  --state-dir "$work/state" 2>&1)
judge "airlockd --config (a testing backend declaring container)" $? "$output"
if [[ -e $work/sock ]]; then
  echo "FAILED: airlockd opened its socket over a testing backend"
  status=1
fi
exit $status
