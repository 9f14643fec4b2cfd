# The linux backend, end to end through the CLI as an operator uses it, then an audit that the
# whole test run (ctest's linux suites included) left no sandbox behind: no init process, no
# cgroup, no state directory.
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "the linux backend's end-to-end stage"
linux_backend_config airlock-linux-e2e

# Exit codes: the guest's own, 124 on timeout, 125 when airlock refuses.
out=$(linux_run -- sh -c 'echo hello; exit 3') && code=0 || code=$?
[[ $code -eq 3 && $out == hello ]] || fail "guest exit code / output ($code, $out)"
linux_run --timeout 1 -- sleep 30 2>/dev/null && code=0 || code=$?
[[ $code -eq 124 ]] || fail "timeout exit code ($code)"
"$airlock" run --backend-config "$config" --quiet -- true 2>/dev/null && code=0 || code=$?
[[ $code -eq 125 ]] || fail "the default floor (microvm) must refuse the linux backend ($code)"

# Repeatable options take one value each: the command's own flags after `--` stay its own.
landing=$(mktemp -d /tmp/airlock-linux-e2e-landing-XXXXXX)
remove_on_exit "$landing"
linux_run --put /etc/hostname=h --get out.txt --out "$landing" -- sh -c 'cat h > out.txt' \
  || fail "--put/--get before a command with its own flags"
cmp -s /etc/hostname "$landing/out.txt" || fail "--get landed the wrong bytes"

# The main job.
job=$(AIRLOCK_STATE_DIR="$state" scripts/run-main-job "$AIRLOCK_BUILD_DIR" 2>&1) \
  || fail "the main job: $job"
grep -q '"network": "unreachable' <<<"$job" || fail "the main job reached the network: $job"
grep -q '"rates_from": "host tool lookup_rate (demo)"' <<<"$job" \
  || fail "the main job's artifact did not land with the host tool's answers: $job"
grep -q 'landed report.json at ' <<<"$job" || fail "the main job did not say where it landed: $job"

# Durable state: a kept sandbox is listed, and purge removes it.
linux_run --keep --scope e2e --thread one -- true
"$airlock" ls --backend-config "$config" | grep -q running || fail "ls does not list the kept sandbox"
[[ $("$airlock" purge --backend-config "$config" --scope e2e) == "removed 1 sandbox" ]] \
  || fail "purge --scope"

# Snapshots through the CLI: saved after a run, resumed in its conversation only, removed.
saved=$(linux_run --scope e2e-snap --thread one --snapshot --json -- sh -c 'echo kept > kept.txt') \
  || fail "run --snapshot: $saved"
snap=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["snapshot"]["id"])' <<<"$saved")
[[ $snap =~ ^snap-[0-9a-f]{24}$ ]] || fail "run --snapshot printed no snapshot id: $saved"
[[ $(linux_run --scope e2e-snap --thread one --from-snapshot "$snap" -- cat kept.txt) == kept ]] \
  || fail "run --from-snapshot did not hold the saved file"
if linux_run --scope e2e-snap --thread two --from-snapshot "$snap" -- true 2>/dev/null; then
  fail "another thread resumed the snapshot"
fi
"$airlock" snapshot rm --backend-config "$config" "$snap" >/dev/null || fail "snapshot rm"
[[ -z $(find "$state/linux/snapshots" -mindepth 1) ]] || fail "snapshot rm left files behind"

# Nothing left by anything that ran before this stage.
# (Zombies do not count: an init that died is reaped by whoever adopted it, in its own time.)
leftover_inits=$(ps -C airlock-init -o pid=,stat= | awk '$2 !~ /^Z/ {print $1}')
[[ -z $leftover_inits ]] || fail "airlock-init processes left running: $leftover_inits"
for hierarchy in /sys/fs/cgroup/*/airlock; do
  [[ -d $hierarchy ]] || continue
  left=$(find "$hierarchy" -mindepth 1 -maxdepth 1 -type d -name 'lx-*' | head -5)
  [[ -z $left ]] || fail "cgroups left behind: $left"
done
left=$(find /tmp -maxdepth 1 -name 'airlock-linux-state-*' | head -5)
[[ -z $left ]] || fail "test state directories left behind: $left"
echo "linux end to end: ok"
