#!/usr/bin/env bash
# Chaos against the linux backend through the real CLI: each case breaks something mid-flight
# (SIGKILL the CLI or the daemon while a command runs, or the CLI while a file is going in, fill
# the sandbox's disk, exhaust the guest's descriptors, kill the sandbox's init), then recovers the way an operator would
# (`airlock purge`) and proves with scripts/leak-audit that nothing is left: no process, cgroup,
# mount or durable record of any sandbox the case made.
#
# Usage: tests/chaos/chaos.sh <build dir> [case…]   (root; each case has a state dir of its own)
# Prints PASS/FAIL per case and exits non-zero when any failed.
set -uo pipefail
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: chaos.sh <build dir> [case…]}
shift
airlock=$build/src/cli/airlock
audit=$source_dir/scripts/leak-audit

if [[ $(id -u) -ne 0 ]]; then
  echo "SKIPPED: the chaos cases drive the linux backend as root (CI runs as root)"
  exit 0
fi
[[ -x $airlock ]] || { echo "FAILED: no CLI at $airlock" >&2; exit 1; }

# ---- per-case scaffolding -------------------------------------------------------------------
state='' config='' snapshots='' cli_pid='' mounted=''

setup_case() {
  state=$(mktemp -d /tmp/airlock-chaos-XXXXXX)
  config=$state.json
  snapshots=$state.snapshots
  mkdir -p "$snapshots"
  if [[ ${1:-} == small-disk ]]; then
    # Everything a sandbox writes lives in its own storage of disk_bytes: 16 MiB is its disk.
    printf '{"linux": {"state_dir": "%s", "disk_bytes": 16777216}}' "$state" >"$config"
    return 0
  fi
  printf '{"linux": {"state_dir": "%s"}}' "$state" >"$config"
}

teardown_case() {
  [[ -n $cli_pid ]] && kill -KILL "$cli_pid" 2>/dev/null
  cli_pid=''
  "$airlock" purge --all --backend-config "$config" >/dev/null 2>&1
  [[ -n $mounted ]] && umount "$mounted"
  mounted=''
  rm -rf "$state" "$config" "$snapshots" "$state.daemon"
}

run() { "$airlock" run --backend-config "$config" --min-isolation container --quiet "$@"; }

# Copies every sandbox record of the case's state dir aside: after destruction the record no
# longer says which init and cgroups to look for.
snapshot_records() {
  local record
  for record in "$state"/linux/*/record.json; do
    [[ -f $record ]] && cp "$record" "$snapshots/$(basename "$(dirname "$record")").json"
  done
}

record_field() {  # record_field <field> → the value in the case's only record
  python3 -c 'import json,sys,glob
records = glob.glob(sys.argv[1] + "/linux/*/record.json")
assert len(records) == 1, records
print(json.load(open(records[0]))[sys.argv[2]])' "$state" "$1"
}

# Waits (up to ~10 s) for a command to succeed.
wait_for() {
  local i
  for ((i = 0; i < 200; i++)); do
    "$@" && return 0
    sleep 0.05
  done
  return 1
}

# Globs must expand at each poll, not once when wait_for is called.
sandbox_running() { grep -qs '"state": "running"' "$state"/linux/*/record.json; }

# Recovery and the audit every case ends with.
recover_and_audit() {
  snapshot_records
  local out
  out=$("$airlock" purge --all --backend-config "$config" 2>&1) || { echo "purge failed: $out"; return 1; }
  "$audit" --state-dir "$state" --snapshot "$snapshots"
}

# ---- the cases ------------------------------------------------------------------------------

# SIGKILL the CLI while its command runs: the sandbox outlives it by design (sandboxes are
# durable), stays listed, and purge reclaims it — the orphaned command included.
KilledCliMidExecIsReclaimedByPurge() {
  run --scope chaos --thread exec -- sleep 600 >/dev/null 2>&1 &
  cli_pid=$!
  wait_for sandbox_running || { echo "the sandbox never ran"; return 1; }
  local instance sleeper=''
  instance=$(record_field instance_id)
  # The command is running once a `sleep` sits in the sandbox's cgroups.
  sleeper_in_sandbox() {
    local p
    for p in $(pgrep -x sleep); do
      grep -qs "$instance" /proc/"$p"/cgroup && { sleeper=$p; return 0; }
    done
    return 1
  }
  wait_for sleeper_in_sandbox || { echo "the command never started"; return 1; }
  kill -KILL "$cli_pid"; wait "$cli_pid" 2>/dev/null; cli_pid=''
  "$airlock" ls --backend-config "$config" | grep -q 'chaos / exec' \
    || { echo "the orphaned sandbox is not listed"; return 1; }
  recover_and_audit || return 1
  if kill -0 "$sleeper" 2>/dev/null && ! grep -q '^State:.*Z' /proc/"$sleeper"/status; then
    echo "the orphaned command ($sleeper) survived purge"; return 1
  fi
}

# SIGKILL the CLI while a large --put is being written into the sandbox: no partial file ever
# sits under its final name, and purge reclaims the half-written one with the sandbox. The
# poller (kill_mid_put.py) kills the CLI the moment a partial file appears; up to three tries,
# then the case fails as unproven rather than passing vacuously.
KilledCliMidTransferIsReclaimedByPurge() {
  local big=$state.big spec=$state.spec size=$((200 << 20))
  # Not zeros: a file cut short reads as zeros past its end, so only content shows it whole.
  yes 'airlock chaos transfer' | head -c $size >"$big"
  printf '{"kind": "run", "files_in": {"max_files": 1, "max_bytes_per_file": %d, "max_total_bytes": %d}}' \
    $size $size >"$spec"
  local attempt caught=''
  for attempt in 1 2 3; do
    caught=$("$source_dir/tests/chaos/kill_mid_put.py" "$airlock" "$config" "$spec" "$big" "$state" $size)
    [[ -n $caught ]] && break
    "$airlock" purge --all --backend-config "$config" >/dev/null 2>&1
  done
  [[ -n $caught ]] || { rm -f "$big" "$spec"; echo "the transfer was never caught half-way in 3 tries; nothing proven"; return 1; }
  echo "killed the CLI with $caught (try $attempt)"
  local final record pid
  for record in "$state"/linux/*/record.json; do
    [[ -f $record ]] || continue
    pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("init_pid", 0))' "$record")
    final=/proc/$pid/root/maf-sandbox/work/big
    [[ -f $final ]] || continue
    cmp -s "$final" "$big" || { rm -f "$big" "$spec"; echo "a partial file sits under its final name"; return 1; }
  done
  rm -f "$big" "$spec"
  recover_and_audit
}

# Fill the sandbox's disk from inside: the write fails with ENOSPC reported to the guest, and the
# sandbox stays usable — freeing the space lets the next command write again. A host-side --put
# into the full disk fails cleanly, naming the cause.
FullWritableLayerFailsWithEnospcAndStaysUsable() {
  local out code
  out=$(run --keep --scope chaos --thread disk -- \
    sh -c 'dd if=/dev/zero of=fill bs=1M count=64 2>&1; echo "dd=$?"') && code=0 || code=$?
  [[ $code -eq 0 ]] || { echo "the filling command itself failed ($code): $out"; return 1; }
  grep -q 'No space left on device' <<<"$out" || { echo "no ENOSPC reported: $out"; return 1; }
  grep -q 'dd=1' <<<"$out" || { echo "dd did not fail: $out"; return 1; }
  local small=$state.small
  head -c $((2 << 20)) /dev/urandom >"$small"
  out=$(run --keep --scope chaos --thread disk --put "$small=/maf-sandbox/work/small" -- true 2>&1) \
    && code=0 || code=$?
  rm -f "$small"
  [[ $code -eq 125 ]] || { echo "a put into a full disk exited $code: $out"; return 1; }
  grep -qi 'no space left\|ENOSPC' <<<"$out" || { echo "the put's error does not name ENOSPC: $out"; return 1; }
  out=$(run --keep --scope chaos --thread disk -- sh -c 'rm fill && echo ok > after && cat after') \
    || { echo "the sandbox is unusable after the disk filled: $out"; return 1; }
  [[ $out == ok ]] || { echo "after freeing space: $out"; return 1; }
  recover_and_audit
}

# Exhaust descriptors in the guest: the guest meets EMFILE, the sandbox serves the next command,
# and the init's own descriptor table does not grow across many commands.
GuestFdExhaustionIsContainedAndInitLeaksNoFds() {
  local out
  out=$(run --keep --scope chaos --thread fds -- python3 -c '
import errno, os
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as error:
    print("EMFILE" if error.errno == errno.EMFILE else "errno %d" % error.errno, len(fds))
') || { echo "the exhausting command failed: $out"; return 1; }
  [[ $out == EMFILE* ]] || { echo "the guest did not meet EMFILE: $out"; return 1; }
  local init before after leaves
  init=$(record_field init_pid)
  # The init's descriptors, less its per-command cgroup leaves: those are kept for reuse (at
  # most four spare, plus one per running command) and are counted apart.
  own_fds() { for fd in /proc/"$init"/fd/*; do readlink "$fd"; done | grep -vc '^/sys/fs/cgroup/.*/c[0-9]*$'; }
  before=$(own_fds)
  for ((i = 0; i < 20; i++)); do
    run --keep --scope chaos --thread fds -- python3 -c '
import os
fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(1000)]
os.fork() or os._exit(0)' >/dev/null || { echo "command $i failed after exhaustion"; return 1; }
  done
  after=$(own_fds)
  leaves=$(for fd in /proc/"$init"/fd/*; do readlink "$fd"; done | grep -c '^/sys/fs/cgroup/.*/c[0-9]*$' || true)
  ((after <= before)) || { echo "the init's descriptors grew from $before to $after over 20 commands"; return 1; }
  ((leaves <= 5)) || { echo "the init holds $leaves command cgroup leaves after 20 commands (at most 5)"; return 1; }
  recover_and_audit
}

# Kill the sandbox's init: the next command on that key fails cleanly or gets a fresh sandbox
# (never hangs), and purge reclaims what the dead init left — cgroups, record, state.
KilledInitIsReclaimedByPurge() {
  run --keep --scope chaos --thread init -- true || { echo "could not start"; return 1; }
  snapshot_records
  local init
  init=$(record_field init_pid)
  kill -KILL "$init"
  wait_for sh -c "! kill -0 $init 2>/dev/null || grep -q '^State:.*Z' /proc/$init/status" \
    || { echo "the init did not die"; return 1; }
  local out code
  out=$(timeout 60 "$airlock" run --backend-config "$config" --min-isolation container --quiet \
    --keep --scope chaos --thread init -- echo alive 2>&1) && code=0 || code=$?
  if [[ $code -eq 0 ]]; then
    [[ $out == alive ]] || { echo "after the init died: $out"; return 1; }
    echo "the next command on the key got a fresh sandbox"
  elif [[ $code -eq 125 ]]; then
    echo "the next command on the key was refused: $out"
  else
    echo "the next command after the init died exited $code (124 = hung): $out"; return 1
  fi
  recover_and_audit
}

# SIGKILL the daemon while a command it started runs: the sandbox outlives it (durable state),
# and the operator's `airlock purge` over the same state directory reclaims it, the orphaned
# command included — no graceful shutdown ever ran.
KilledDaemonMidExecIsReclaimedByPurge() {
  local dir=$state.daemon
  mkdir -p "$dir"
  printf '{"backends":[{"type":"linux","state_dir":"%s"}],"min_isolation":"container"}' \
    "$state" >"$dir/router.json"
  "$airlock" serve --config "$dir/router.json" --socket "$dir/sock" --state-dir "$dir/state" \
    --ready-file "$dir/ready" >"$dir/log" 2>&1 &
  cli_pid=$!
  wait_for test -e "$dir/ready" || { echo "airlock serve did not start: $(cat "$dir/log")"; return 1; }
  local acquired handle
  acquired=$(curl -s --unix-socket "$dir/sock" -X POST -d \
    '{"key":{"scope":"chaos","thread_id":"daemon","agent_dir":"a"},"spec":{"kind":"chaos"}}' \
    http://x/v1/sandboxes)
  handle=$(sed -n 's/.*"sandbox":"\([^"]*\)".*/\1/p' <<<"$acquired")
  [[ -n $handle ]] || { echo "acquire through the daemon: $acquired"; return 1; }
  curl -s --unix-socket "$dir/sock" -X POST -d '{"argv":["sleep","601"],"timeout_ms":600000}' \
    "http://x/v1/sandboxes/$handle/exec" >/dev/null 2>&1 &
  local client=$! sleeper=''
  sleeper_running() { sleeper=$(pgrep -x -f 'sleep 601' | head -n1); [[ -n $sleeper ]]; }
  wait_for sleeper_running || { echo "the command never started"; kill "$client" 2>/dev/null; return 1; }
  kill -KILL "$cli_pid"; wait "$cli_pid" 2>/dev/null; cli_pid=''
  wait "$client" 2>/dev/null
  "$airlock" ls --backend-config "$config" | grep -q 'chaos / daemon' \
    || { echo "the orphaned sandbox is not listed"; return 1; }
  recover_and_audit || return 1
  if kill -0 "$sleeper" 2>/dev/null && ! grep -q '^State:.*Z' /proc/"$sleeper"/status; then
    echo "the orphaned command ($sleeper) survived purge"; return 1
  fi
}

# ---- driver ---------------------------------------------------------------------------------
cases=("$@")
((${#cases[@]})) || cases=(KilledCliMidExecIsReclaimedByPurge KilledCliMidTransferIsReclaimedByPurge
  FullWritableLayerFailsWithEnospcAndStaysUsable GuestFdExhaustionIsContainedAndInitLeaksNoFds
  KilledInitIsReclaimedByPurge KilledDaemonMidExecIsReclaimedByPurge)
failed=()
for name in "${cases[@]}"; do
  started=$(date +%s)
  if [[ $name == FullWritableLayer* ]]; then setup_case small-disk; else setup_case; fi || {
    echo "FAIL $name: could not set up"; failed+=("$name"); continue; }
  log=$(mktemp /tmp/airlock-chaos-log-XXXXXX)
  "$name" >"$log" 2>&1 && result=0 || result=$?
  teardown_case
  output=$(cat "$log"); rm -f "$log"
  if ((result == 0)); then
    echo "PASS $name ($(($(date +%s) - started))s)"
    [[ -n $output ]] && sed 's/^/    /' <<<"$output"
  else
    echo "FAIL $name ($(($(date +%s) - started))s)"
    sed 's/^/    /' <<<"$output"
    failed+=("$name")
  fi
done
if ((${#failed[@]})); then
  echo "chaos: FAILED ${failed[*]}"
  exit 1
fi
echo "chaos: ${#cases[@]} cases passed"
