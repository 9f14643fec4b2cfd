# The gvisor backend (runsc) end to end: its python-image test with the offline test images,
# the conformance suites through the CLI (the isolation suite, whose probes run inside the guest,
# and the egress suite against loopback servers included), `airlock run` as an operator uses it, and an audit
# that nothing of runsc is left behind (processes, cgroups, state). Bounded to a few minutes.
# (Its ctest suite also runs in stage 10, where the python test skips for want of images.)
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "the gvisor stage (runsc makes namespaces and cgroups)"
if ! command -v runsc >/dev/null && [[ ! -x /usr/bin/runsc ]]; then
  fail "runsc is not installed; scripts/bootstrap --test installs it"
fi
work=$(mktemp -d /tmp/airlock-gvisor-stage-XXXXXX)
remove_on_exit "$work"
chmod 711 "$work"   # runsc's Gofer runs unprivileged and must pass through to what it binds
config="$work/backends.json"
# shellcheck disable=SC2016 # expanded when the stage exits
on_exit '"$airlock" purge --all --backend gvisor --backend-config "$work/egress.json" >/dev/null 2>&1 || true'
# shellcheck disable=SC2016 # expanded when the stage exits
on_exit '"$airlock" purge --all --backend gvisor --backend-config "$config" >/dev/null 2>&1 || true'

echo "--- runsc: $(runsc --version 2>&1 | head -1)"
scripts/build-test-images --only busybox --only python --out "$work/images" >/dev/null
AIRLOCK_TEST_IMAGES="$work/images" \
  ctest --test-dir "$AIRLOCK_TEST_BUILD_DIR" -R 'PythonImage' --output-on-failure --timeout 300

"$airlock" image import --store "$work/images-store" "$work/images/busybox.tar" >/dev/null
printf '{"gvisor": {"state_dir": "%s/state", "image_store": "%s/images-store"}}' "$work" "$work" \
  > "$config"
run() {
  "$airlock" run --backend gvisor --backend-config "$config" --min-isolation hardened_container \
    --quiet "$@"
}

# Every suite, the isolation suite included: a probe that gets through fails the stage — at its
# end, so that the rest of the stage (and its audit of what runsc left) still runs.
echo "--- airlock conformance --backend gvisor"
conformance_failed=""
"$airlock" conformance --backend gvisor --backend-config "$config" | tee "$work/conformance.txt" \
  || conformance_failed=yes
# The snapshot suite is among them (the backend declares snapshot, filesystem+memory): it must
# have run, and every probe — the processes one too, which only memory snapshots pass — passed.
grep -Eq '^snapshot +processes-survive-a-resume +passed' "$work/conformance.txt" ||
  conformance_failed=yes
! grep -Eq '^snapshot +.* (failed|skipped)' "$work/conformance.txt" || conformance_failed=yes
! grep -Eq '^snapshot +\(suite\)' "$work/conformance.txt" || conformance_failed=yes

# The egress suite through the CLI as well: an HTTP server on 127.0.0.2 (allowed) and one on
# 127.0.0.3 (denied), both answering 200, the test-only knob letting the proxy reach loopback,
# and both ports admitted so the denial is the host's. The suite runs curl in the guest: the
# image is busybox plus the host's curl and the libraries it loads, at the same paths, and a
# .curlrc that tunnels (the proxy speaks CONNECT only, as curl would for https://).
curl_root="$work/busybox-curl"
mkdir -p "$curl_root"
tar -xf "$work/images/busybox.tar" -C "$curl_root"
for file in /usr/bin/curl $(ldd /usr/bin/curl | grep -o '/[^ ]*'); do
  mkdir -p "$curl_root$(dirname "$file")"
  cp -L "$file" "$curl_root$file"
done
mkdir -p "$curl_root/root"
echo proxytunnel > "$curl_root/root/.curlrc"
"$airlock" image import --store "$work/images-store" --name busybox-curl "$curl_root" >/dev/null
http_servers "$work/ports" gvisor-egress-ok 127.0.0.2 127.0.0.3
read -r allowed_port denied_port < "$work/ports" || fail "the egress suite's servers did not start"
printf '{"gvisor": {"state_dir": "%s/state", "image_store": "%s/images-store", "default_image": "busybox-curl", "egress_ports": [%s, %s], "egress_allow_nonglobal_for_tests": ["127.0.0.0/8"]}}' \
  "$work" "$work" "$allowed_port" "$denied_port" > "$work/egress.json"
echo "--- airlock conformance --backend gvisor --suite egress"
"$airlock" conformance --backend gvisor --backend-config "$work/egress.json" --suite egress \
  --allowed-url "http://127.0.0.2:$allowed_port/" --denied-url "http://127.0.0.3:$denied_port/" \
  | tee "$work/egress-report.txt"
grep -Eq '^egress +.* passed' "$work/egress-report.txt" || fail "the egress suite passed no probe"
! grep -Eq '^egress +.* (failed|skipped)' "$work/egress-report.txt" ||
  fail "the egress suite did not pass every probe through the CLI"
stop_http_servers

# Exit codes as on every backend: the guest's own, 124 on timeout, 125 when airlock refuses.
out=$(run -- sh -c 'uname -r; exit 3') && code=0 || code=$?
[[ $code -eq 3 && $out == 4.4.0 ]] || fail "guest exit code / gVisor's kernel ($code, $out)"
run --timeout 1 -- sleep 30 2>/dev/null && code=0 || code=$?
[[ $code -eq 124 ]] || fail "timeout exit code ($code)"
"$airlock" run --backend gvisor --backend-config "$config" --quiet -- true 2>/dev/null \
  && code=0 || code=$?
[[ $code -eq 125 ]] || fail "the default floor (microvm) must refuse gvisor ($code)"

# Snapshots through the CLI, across processes: one process saves a kept sandbox, another resumes
# it under the same conversation (its files and its running process come back), a third
# conversation is told there is no such snapshot, and purge leaves no snapshot behind.
run --keep --scope snap --thread one -- sh -c \
  'echo saved > note; sleep 100000 </dev/null >/dev/null 2>&1 &'
snapshot_id=$("$airlock" snapshot create --backend gvisor --backend-config "$config" \
  --min-isolation hardened_container --scope snap --thread one) ||
  fail "airlock snapshot create"
[[ $snapshot_id == snap-* ]] || fail "snapshot create printed no id ($snapshot_id)"
out=$(run --scope snap --thread one --from-snapshot "$snapshot_id" -- sh -c 'cat note; pidof sleep >/dev/null && echo alive') ||
  fail "airlock run --from-snapshot"
[[ $out == $'saved\nalive' ]] || fail "the resumed sandbox lacks its file or its process ($out)"
run --scope snap --thread two --from-snapshot "$snapshot_id" -- true 2>/dev/null && code=0 || code=$?
[[ $code -eq 125 ]] || fail "another conversation resumed the snapshot ($code)"
"$airlock" snapshot ls --backend gvisor --backend-config "$config" | grep -q "$snapshot_id" ||
  fail "snapshot ls does not list $snapshot_id"
"$airlock" purge --all --backend gvisor --backend-config "$config" >/dev/null
[[ -z $(ls -A "$work/state/gvisor/snapshots") ]] || fail "purge left snapshots behind"

# Durable state: a kept sandbox is listed by another process, and purge removes it.
run --keep --scope e2e --thread one -- true
"$airlock" ls --backend gvisor --backend-config "$config" | grep -q running \
  || fail "ls does not list the kept sandbox"
[[ $("$airlock" purge --backend gvisor --backend-config "$config" --scope e2e) == "removed 1 sandbox" ]] \
  || fail "purge --scope"

# Nothing of runsc left by anything that ran so far (ctest's suites included).
left=$(pgrep -af 'runsc-(sandbox|gofer)|runsc .*airlock-' | grep -v pgrep | head -5 || true)
[[ -z $left ]] || fail "runsc processes left running: $left"
for hierarchy in /sys/fs/cgroup/*/airlock-gvisor; do
  [[ -d $hierarchy ]] || continue
  cg=$(find "$hierarchy" -mindepth 1 -maxdepth 1 -type d | head -5)
  [[ -z $cg ]] || fail "cgroups left behind: $cg"
done
leftover=$(find /tmp -maxdepth 1 -name 'airlock-gvisor-state-*' | head -5)
[[ -z $leftover ]] || fail "test state directories left behind: $leftover"
[[ -z $conformance_failed ]] || fail "airlock conformance --backend gvisor: a probe failed (see above)"
echo "gvisor end to end: ok"
# A fresh machine: no configuration, an empty store in a `mktemp -d` state directory — refused
# naming `airlock image build busybox`, which then makes the image the defaults serve.
bash tests/cli/fresh_backend.sh gvisor "$airlock" || fail "gvisor on a fresh machine (see above)"
