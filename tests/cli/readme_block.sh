#!/usr/bin/env bash
# README.md's "Running a program" block, run as written: its first ```sh block is extracted (so
# it cannot drift from what this test runs) and run by bash -e in an empty directory, with the
# built airlock first on $PATH, a private state directory and an empty config file. Then what
# the block promises is checked: the greeting, the landed result, the codeact report, and that
# the kept sandbox was listed and purged.
#
#   readme_block.sh AIRLOCK SOURCE_DIR
set -uo pipefail
airlock=$1
source_dir=$2
if (($(id -u) != 0)); then
  echo "SKIPPED: the README block runs the linux backend, which needs root here"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAILED: $1"
  [[ -n ${2:-} ]] && sed 's/^/  /' <<<"$2"
  exit 1
}
awk '/^## Running a program/ { section = 1; next }
     section && /^## / { exit }
     section && /^```sh$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' "$source_dir/README.md" >"$work/block.sh"
[[ -s $work/block.sh ]] || fail "README.md has no \`\`\`sh block under \"## Running a program\""
grep -q '^airlock ' "$work/block.sh" || fail "the README block runs no airlock command" "$(cat "$work/block.sh")"

mkdir "$work/bin" "$work/here" "$work/state"
ln -s "$(realpath "$airlock")" "$work/bin/airlock"
echo '{}' >"$work/config.json"
output=$(cd "$work/here" && env -u AIRLOCK_MIN_ISOLATION PATH="$work/bin:$PATH" \
  AIRLOCK_STATE_DIR="$work/state" AIRLOCK_CONFIG="$work/config.json" \
  bash -e "$work/block.sh" 2>&1)
code=$?
((code == 0)) || fail "the README block exited $code" "$output"
grep -qx "hello from a sandbox" <<<"$output" || fail "no greeting from the sandbox" "$output"
python3 -c 'import json, sys; assert "python" in json.load(open(sys.argv[1]))' \
  "$work/here/landed/result.json" || fail "landed/result.json is not the job's result" "$output"
python3 -c 'import json, sys; assert abs(json.load(open(sys.argv[1]))["total"] - 518.27) < 1e-6' \
  "$work/here/report.json" || fail "the codeact report did not land" "$output"
grep -q "2 rows" <<<"$output" || fail "the codeact program's output is missing" "$output"
grep -qE "running +.*demo /" <<<"$output" || fail "airlock ls did not list the kept sandbox" "$output"
grep -qx "removed 1 sandbox" <<<"$output" || fail "airlock purge did not remove it" "$output"
left=$(env AIRLOCK_STATE_DIR="$work/state" AIRLOCK_CONFIG="$work/config.json" "$airlock" --json ls)
[[ $left == "[]" ]] || fail "the block left sandboxes behind" "$left"
echo "ok  README's \"Running a program\" block ran as written ($(grep -c '^airlock ' "$work/block.sh") airlock commands)"
