#!/usr/bin/env bash
# airlock run / exec / codeact end to end on the linux backend, through the real CLI:
#   - SIGINT, SIGTERM and SIGHUP sent to airlock reach the guest's `sleep 30`, airlock exits
#     130 / 143 / 129 within seconds, and the leak audit finds no init, cgroup or record of that
#     sandbox; a second SIGINT forces a command that ignores the first; codeact the same;
#   - output streams ("a" is readable while the command still sleeps);
#   - -i passes stdin through live, -e / --env-file / -w reach the command, a bad env-file line
#     is named with its number, sizes take units and a bad one is named;
#   - --put and --get carry directory trees, a local link is refused, a guest link is not landed;
#   - exec reaches a kept sandbox by key and by id, never creates one, returns the guest's code;
#   - -t gives the guest a terminal (driven under a real pty by tests/cli/pty_drive.py).
# Usage: run_exec_linux.sh AIRLOCK SOURCE_DIR. Needs root (SKIPPED otherwise, exit 77).
set -euo pipefail
airlock=$(realpath "$1")
source_dir=$(realpath "$2")
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIPPED: the linux backend's run/exec end-to-end tests need root; CI runs as root"
  exit 77
fi

scratch=$(mktemp -d /tmp/airlock-cli-run-XXXXXX)
state=$scratch/state
config=$scratch/config.json
mkdir -p "$state"
printf '{"linux": {"state_dir": "%s"}}' "$state" >"$config"
cleanup() {
  "$airlock" purge --all --backend-config "$config" >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
# `exec`: a backgrounded `run … &` is then airlock itself, so a signal sent to $! reaches it (a
# function's subshell in a non-interactive shell ignores SIGINT and would never pass it on).
run() { exec_or_call "$airlock" run --backend-config "$config" --min-isolation container --quiet "$@"; }
exec_or_call() { if [[ $BASH_SUBSHELL -gt 0 ]]; then exec "$@"; else "$@"; fi; }
aexec() { "$airlock" exec --backend-config "$config" --min-isolation container --quiet "$@"; }
records() { "$airlock" ls --backend-config "$config" --json; }

# Waits until the guest command of the only sandbox in $state runs (a child of its init), and
# copies its record for the leak audit. Prints the record's path.
wait_for_guest() {
  local snapshot=$1 record init_pid
  for _ in $(seq 200); do
    record=$(find "$state" -name record.json 2>/dev/null | head -1)
    if [[ -n $record ]]; then
      init_pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("init_pid", 0))' "$record" 2>/dev/null || echo 0)
      if [[ $init_pid != 0 ]] && [[ -n $(ps -o pid= --ppid "$init_pid" 2>/dev/null) ]]; then
        # The command's own process, not only a helper: a `sleep` below the init.
        if ps -o args= --ppid "$init_pid" | grep -q "${2:-sleep}"; then
          cp "$record" "$snapshot"
          return 0
        fi
      fi
    fi
    sleep 0.1
  done
  fail "the guest command did not start within 20 s"
}

# Waits for pid $1 (a child of this shell) at most $2 seconds; sets `code` to its exit code, or
# to "timeout" (it is then killed). Not run in $(…): a subshell cannot wait for this shell's child.
wait_bounded() {
  local pid=$1 bound=$2
  for _ in $(seq $((bound * 10))); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid" && code=0 || code=$?
      return 0
    fi
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  code=timeout
}

leak_audit() {
  local snapshot=$1 what=$2
  "$source_dir/scripts/leak-audit" --state-dir "$state" --snapshot "$snapshot" >"$scratch/audit" 2>&1 \
    || fail "$what left something behind: $(cat "$scratch/audit")"
  [[ $(records) == "[]" ]] || fail "$what left a record: $(records)"
}

# ---- signals -----------------------------------------------------------------------------------
for signal in INT TERM HUP; do
  number=$(kill -l "$signal")
  run --thread "signal-$signal" -- sleep 30 &
  pid=$!
  wait_for_guest "$scratch/snapshot-$signal.json"
  kill "-$signal" "$pid"
  wait_bounded "$pid" 15
  [[ $code == $((128 + number)) ]] \
    || fail "SIG$signal during sleep 30: airlock exited $code, not $((128 + number))"
  leak_audit "$scratch/snapshot-$signal.json" "SIG$signal during sleep 30"
done
echo "ok: SIGINT/SIGTERM/SIGHUP reach the guest, airlock exits 128+N, nothing is left"

# A command that ignores the first SIGINT: the second forces it to stop.
run --thread signal-force -- sh -c 'trap "" INT; sleep 30' &
pid=$!
wait_for_guest "$scratch/snapshot-force.json"
kill -INT "$pid"
sleep 1
kill -0 "$pid" 2>/dev/null || fail "a guest ignoring SIGINT ended on the first one"
kill -INT "$pid"
wait_bounded "$pid" 15
[[ $code == 130 ]] || fail "a second SIGINT: airlock exited $code, not 130"
leak_audit "$scratch/snapshot-force.json" "a forced stop"
echo "ok: a second SIGINT forces a guest that ignores the first"

# --keep: the signal ends the command, the sandbox stays.
run --keep --scope e2e-keep --thread kept -- sleep 30 &
pid=$!
wait_for_guest "$scratch/snapshot-keep.json"
kill -INT "$pid"
wait_bounded "$pid" 15
[[ $code == 130 ]] || fail "SIGINT with --keep: airlock exited $code"
records | grep -q '"running"' || fail "SIGINT with --keep disposed the sandbox: $(records)"
"$airlock" purge --backend-config "$config" --scope e2e-keep >/dev/null
leak_audit "$scratch/snapshot-keep.json" "a kept, interrupted sandbox once purged"

# codeact: the program gets KeyboardInterrupt, the sandbox goes.
printf 'import time\nprint("started", flush=True)\ntime.sleep(30)\n' >"$scratch/slow.py"
"$airlock" codeact --backend-config "$config" --min-isolation container --quiet \
  --thread codeact-signal "$scratch/slow.py" >"$scratch/codeact.out" 2>&1 &
pid=$!
wait_for_guest "$scratch/snapshot-codeact.json" python3
kill -INT "$pid"
wait_bounded "$pid" 15
[[ $code == 130 ]] || fail "SIGINT during codeact: airlock exited $code ($(cat "$scratch/codeact.out"))"
leak_audit "$scratch/snapshot-codeact.json" "SIGINT during codeact"
echo "ok: codeact relays SIGINT and disposes"

# ---- streaming -----------------------------------------------------------------------------------
run -- sh -c 'echo a; sleep 3; echo b' >"$scratch/stream.out" &
pid=$!
seen=""
for _ in $(seq 25); do
  if [[ $(cat "$scratch/stream.out") == a ]]; then
    seen=yes
    break
  fi
  sleep 0.1
done
kill -0 "$pid" 2>/dev/null || fail "the streaming command ended before its sleep"
[[ $seen == yes ]] || fail "'a' was not readable while the command slept ($(cat "$scratch/stream.out"))"
wait "$pid" || fail "the streaming command failed"
[[ $(cat "$scratch/stream.out") == $'a\nb' ]] || fail "stream output: $(cat "$scratch/stream.out")"
out=$("$airlock" --json run --backend-config "$config" --min-isolation container --quiet -- sh -c 'echo collected')
grep -q '"stdout_bytes":"collected\\n"\|"stdout":"collected\\n"\|collected' <<<"$out" || fail "--json did not collect: $out"
echo "ok: output streams as it arrives; --json collects"

# ---- docker habits -------------------------------------------------------------------------------
[[ $(echo hi | run -i -- cat) == hi ]] || fail "-i: echo hi | airlock run -i -- cat"
[[ $(echo hi | run --stdin -- cat) == hi ]] || fail "--stdin is -i"
[[ $(echo hi | run -- cat) == "" ]] || fail "without -i the command's stdin must be empty"
printf '# comment\n\nFROM_FILE=file value\nBOTH=file\n' >"$scratch/env"
out=$(HOST_ONLY=host run --env-file "$scratch/env" -e BOTH=flag -e HOST_ONLY -e A=1 -w sub/dir \
  -- sh -c 'echo "$FROM_FILE|$BOTH|$HOST_ONLY|$A"; pwd')
[[ $out == $'file value|flag|host|1\n/maf-sandbox/work/sub/dir' ]] || fail "-e/--env-file/-w: $out"
printf 'GOOD=1\nBAD NAME=2\n' >"$scratch/bad.env"
run --env-file "$scratch/bad.env" -- true 2>"$scratch/err" && code=0 || code=$?
[[ $code == 125 ]] && grep -q "bad.env:2:" "$scratch/err" || fail "a bad env-file line ($code): $(cat "$scratch/err")"
run -w /etc -- true 2>"$scratch/err" && code=0 || code=$?
[[ $code == 125 ]] || fail "-w outside the work dir ran ($code)"
run --memory 12x -- true 2>"$scratch/err" && code=0 || code=$?
[[ $code == 125 ]] && grep -q "\-\-memory: '12x' is not a size (the units are b, k, m, g and t); use e.g. 512m or 2g" "$scratch/err" \
  || fail "--memory 12x ($code): $(cat "$scratch/err")"
run --memory 256m --disk 64m --max-output 1m -- true || fail "sizes with units were refused"
run --max-output 1k -- sh -c 'head -c 4096 /dev/zero' >/dev/null 2>&1 && code=0 || code=$?
[[ $code == 125 ]] || fail "--max-output 1k let 4 KiB through ($code)"
echo "ok: -i, -e, --env-file, -w, sizes"

# ---- --put / --get trees ------------------------------------------------------------------------
mkdir -p "$scratch/tree/sub" "$scratch/landing"
echo one >"$scratch/tree/one.txt"
echo two >"$scratch/tree/sub/two.txt"
run --put "$scratch/tree=in" --get out --out "$scratch/landing" -- sh -c \
  'mkdir -p out/deep && cp in/one.txt out/ && cp in/sub/two.txt out/deep/ && ln -s /etc/passwd out/link' \
  || fail "--put DIR / --get DIR"
cmp -s "$scratch/tree/one.txt" "$scratch/landing/out/one.txt" || fail "--get DIR: out/one.txt"
cmp -s "$scratch/tree/sub/two.txt" "$scratch/landing/out/deep/two.txt" || fail "--get DIR: out/deep/two.txt"
[[ ! -e $scratch/landing/out/link && ! -L $scratch/landing/out/link ]] || fail "--get landed a guest link"
ln -s /etc/shadow "$scratch/tree/sub/secret"
run --put "$scratch/tree=in" -- true 2>"$scratch/err" && code=0 || code=$?
[[ $code == 125 ]] && grep -q "is a link" "$scratch/err" || fail "--put followed a local link ($code): $(cat "$scratch/err")"
echo "ok: --put/--get trees; links are never followed"

# ---- exec ---------------------------------------------------------------------------------------
run --keep --scope e2e-exec --thread t1 -- sh -c 'echo kept > f' || fail "run --keep"
[[ $(aexec --scope e2e-exec --thread t1 -- cat f) == kept ]] || fail "exec by key"
id=$(records | python3 -c 'import json,sys; print([r["instance_id"] for r in json.load(sys.stdin)][0])')
[[ $(aexec --id "$id" -- cat f) == kept ]] || fail "exec by id"
[[ $(aexec "$id" cat f) == kept ]] || fail "exec by a positional id"
aexec --scope e2e-exec --thread t1 -- sh -c 'exit 7' && code=0 || code=$?
[[ $code == 7 ]] || fail "exec's exit code ($code)"
[[ $(echo piped | aexec -i --scope e2e-exec --thread t1 -- cat) == piped ]] || fail "exec -i"
[[ $(aexec -e X=y -w d --scope e2e-exec --thread t1 -- sh -c 'echo $X; pwd') == $'y\n/maf-sandbox/work/d' ]] \
  || fail "exec -e -w"
aexec --scope e2e-exec --thread nobody -- true 2>"$scratch/err" && code=0 || code=$?
[[ $code == 125 ]] || fail "exec into a missing sandbox ($code)"
[[ $(records | grep -o instance_id | wc -l) == 1 ]] || fail "exec created a sandbox: $(records)"
aexec --id lx-nonexistent -- true 2>/dev/null && fail "exec by an unknown id ran"
"$airlock" purge --backend-config "$config" --scope e2e-exec >/dev/null
echo "ok: exec by key and by id"

# ---- -t under a real pty ------------------------------------------------------------------------
python3 "$source_dir/tests/cli/pty_drive.py" "$airlock" "$config" || fail "-t under a pty"
echo "ok: -t"

echo "run/exec end to end: ok"
