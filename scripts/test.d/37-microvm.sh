# The microvm backend (QEMU microvm under TCG on this machine kind, QEMU jailed) end to end:
# its gtest suite (attacks on the jail, the guest's network, snapshots and the multiplexer),
# every conformance suite through the CLI (the isolation suite's probes run inside the guest;
# the egress suite against loopback servers), `airlock run` as an operator uses it, the rung it
# declares per accelerator, and an audit that nothing of QEMU is left behind.
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "the microvm stage (its jail makes namespaces and cgroups)"
require_tools qemu-system-x86_64 qemu-img mkfs.ext4
[[ -f "$AIRLOCK_BUILD_DIR/src/microvm/initramfs.cpio" ]] ||
  fail "the guest's initramfs was not built ($AIRLOCK_BUILD_DIR/src/microvm); scripts/bootstrap installs linux-image-cloud-amd64"
work=$(mktemp -d /tmp/airlock-microvm-stage-XXXXXX)
remove_on_exit "$work"
config="$work/backends.json"
# shellcheck disable=SC2016 # expanded when the stage exits
on_exit '"$airlock" purge --all --backend microvm --backend-config "$work/egress.json" >/dev/null 2>&1 || true'
# shellcheck disable=SC2016 # expanded when the stage exits
on_exit '"$airlock" purge --all --backend microvm --backend-config "$config" >/dev/null 2>&1 || true'
begin

echo "--- qemu: $(qemu-system-x86_64 --version | head -1)"
ctest --test-dir "$AIRLOCK_TEST_BUILD_DIR" -L microvm --output-on-failure --timeout 900
took "microvm gtest suites"

scripts/build-test-images --only busybox --only python --out "$work/images" >/dev/null
"$airlock" image import --store "$work/images-store" "$work/images/busybox.tar" >/dev/null
"$airlock" image import --store "$work/images-store" "$work/images/python.tar" >/dev/null
printf '{"microvm": {"state_dir": "%s/state", "image_store": "%s/images-store"}}' "$work" "$work" \
  > "$config"
run() {
  "$airlock" run --backend microvm --backend-config "$config" --min-isolation hardened_container \
    --quiet "$@"
}

echo "--- airlock check --backend microvm"
"$airlock" check --spec examples/specs/codeact.json --backend microvm --backend-config "$config" \
  --min-isolation hardened_container \
  | tee "$work/check.txt"
grep -q 'tcg\|kvm' "$work/check.txt" || fail "airlock check does not say which accelerator"

echo "--- airlock conformance --backend microvm"
conformance_failed=""
# Under TCG the guest runs about ten times slower than the host: the isolation suite's pools get
# a minute each to be exhausted instead of 20 s (the limits proven are the same).
"$airlock" conformance --backend microvm --backend-config "$config" --fill-box 60 ||
  conformance_failed=yes
took "conformance"

# The egress suite through the CLI: an HTTP server on 127.0.0.2 (allowed) and one on
# 127.0.0.3 (denied); the guest's curl is the host's, copied in with its libraries.
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
http_servers "$work/ports" microvm-egress-ok 127.0.0.2 127.0.0.3
read -r allowed_port denied_port < "$work/ports" || fail "the egress suite's servers did not start"
printf '{"microvm": {"state_dir": "%s/state", "image_store": "%s/images-store", "default_image": "busybox-curl", "egress_ports": [%s, %s], "egress_allow_nonglobal_for_tests": ["127.0.0.0/8"]}}' \
  "$work" "$work" "$allowed_port" "$denied_port" > "$work/egress.json"
echo "--- airlock conformance --backend microvm --suite egress"
"$airlock" conformance --backend microvm --backend-config "$work/egress.json" --suite egress \
  --allowed-url "http://127.0.0.2:$allowed_port/" --denied-url "http://127.0.0.3:$denied_port/" \
  | tee "$work/egress-report.txt"
grep -Eq '^egress +.* passed' "$work/egress-report.txt" || fail "the egress suite passed no probe"
! grep -Eq '^egress +.* (failed|skipped)' "$work/egress-report.txt" ||
  fail "the egress suite did not pass every probe through the CLI"
stop_http_servers
took "egress"

# The codeact showcase (make run's job) on a microVM: a Python program with a shared file in,
# host-tool calls answered by this process over the guest's command channel, a declared output
# out.
echo "--- airlock codeact --backend microvm (host tools, files in and out)"
rm -rf "$work/landed"
(cd "$AIRLOCK_SOURCE_DIR" && "$airlock" codeact examples/jobs/codeact_job.py --backend microvm \
  --backend-config "$config" --image python --min-isolation hardened_container --demo-tool \
  --file expenses.csv=examples/jobs/expenses.csv --output report.json --out "$work/landed") \
  | tee "$work/codeact.txt"
grep -q 'travel: *498.14 EUR' "$work/codeact.txt" || fail "the codeact job's host-tool answers did not arrive"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["rates_from"].startswith("host tool"), r' \
  "$work/landed/report.json" || fail "the codeact job's declared output did not land"
took "codeact with host tools"

# Exit codes as on every backend: the guest's own, 124 on timeout, 125 when airlock refuses.
out=$(run -- sh -c 'uname -r; exit 3') && code=0 || code=$?
[[ $code -eq 3 && $out == *cloud-amd64 ]] || fail "guest exit code / the guest's own kernel ($code, $out)"
run --timeout 2 -- sleep 30 2>/dev/null && code=0 || code=$?
[[ $code -eq 124 ]] || fail "timeout exit code ($code)"
if grep -q 'accelerator tcg\|tcg' "$work/check.txt"; then
  # Under TCG the rung is hardened_container: the default floor (microvm) refuses it.
  "$airlock" run --backend microvm --backend-config "$config" --quiet -- true 2>/dev/null \
    && code=0 || code=$?
  [[ $code -eq 125 ]] || fail "under TCG the default floor (microvm) must refuse the backend ($code)"
fi

# Nothing of QEMU left by anything that ran so far (ctest's suites included).
left=$(pgrep -af 'qemu-system-x86_64|airlock-microvm-jail' | grep -v pgrep | head -5 || true)
[[ -z $left ]] || fail "QEMU or jail processes left running: $left"
if [[ -d /sys/fs/cgroup/airlock-microvm ]]; then
  cg=$(find /sys/fs/cgroup/airlock-microvm -mindepth 2 -maxdepth 2 -type d | head -5)
  [[ -z $cg ]] || fail "cgroups left behind: $cg"
fi
leftover=$(find /tmp -maxdepth 1 -name 'airlock-microvm-test-*' | head -5)
[[ -z $leftover ]] || fail "test state directories left behind: $leftover"
[[ -z $conformance_failed ]] || fail "airlock conformance --backend microvm: a probe failed (see above)"
echo "microvm end to end: ok"
