# The acas backend end to end through what operators and hosts use — the CLI (conformance, check,
# run, ls, purge), the daemon and the Python module — against the service double
# (tests/backends/acas/double), whose sandboxes are real linux-backend sandboxes. The credential
# is the default chain's environment client secret, minted by the double's token endpoint.
# The backend's gtest suites (acas_backend.*, acas_double.*, acas_credentials.*) run in stage 10.
#
# What must fail, and only that (docs/backends/acas.md):
#   - files_out's two path-race probes: native reads retain a path race (the seed's residual);
#   - isolation's the-guest-kernel-is-not-the-hosts: the double's guest is a container on this
#     kernel, not a microVM — the one thing the double cannot carry;
#   - exec's a-timed-out-command-is-stopped is skipped: the backend disposes the sandbox on a
#     timeout (the seed's invalidation), so no guest is left to look in.
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "the acas stage (the double runs linux sandboxes)"
double=$AIRLOCK_BUILD_DIR/tests/backends/acas/double/airlock-acas-double
[[ -x $double ]] || fail "$double is not built (target airlock-acas-double)"

scratch=$(mktemp -d /tmp/airlock-acas-stage-XXXXXX)
remove_on_exit "$scratch"

# Loopback servers for the egress suite: one allowed, one denied, reachable from the double's
# sandboxes only through the linux backend's proxy (its test-only non-global knob).
http_servers "$scratch/port" acas-egress-ok 127.0.0.2 127.0.0.3
read -r allowed_port denied_port <"$scratch/port"
[[ -n $allowed_port && -n $denied_port ]] || fail "the egress test servers did not start"

# The double's sandboxes run busybox plus the host's curl (and the libraries it loads, at the same
# paths), as the gvisor stage builds it; `curl` there tunnels (the proxy speaks CONNECT only).
scripts/build-test-images --only busybox --out "$scratch/images" >/dev/null
curl_root="$scratch/busybox-curl"
mkdir -p "$curl_root"
tar -xf "$scratch/images/busybox.tar" -C "$curl_root"
for file in /usr/bin/curl $(ldd /usr/bin/curl | grep -o '/[^ ]*'); do
  mkdir -p "$curl_root$(dirname "$file")"
  cp -L "$file" "$curl_root$file"
done
# Debian's busybox has no nohup applet, which host tools need (the backend refuses host_tools on
# an image without it): a shell one, as nohup does it — ignore SIGHUP, then become the program.
printf '#!/bin/sh\ntrap "" HUP\nexec "$@"\n' >"$curl_root/usr/bin/nohup"
chmod 755 "$curl_root/usr/bin/nohup"
mv "$curl_root/usr/bin/curl" "$curl_root/usr/bin/curl.real"
printf '#!/bin/sh\nexec /usr/bin/curl.real --proxytunnel "$@"\n' >"$curl_root/usr/bin/curl"
chmod 755 "$curl_root/usr/bin/curl"
"$airlock" image import --store "$scratch/images-store" --name busybox-curl "$curl_root" >/dev/null

mkfifo "$scratch/stdin"
"$double" --port 0 --identity-port 0 --state-dir "$scratch/state" \
  --subscription sub-ci --resource-group rg-ci --sandbox-group sg-ci --tenant tenant-ci \
  --client-secret "stage-secret-$$" --image airlock-busybox=busybox-curl,public \
  --linux-config "{\"image_store\": \"$scratch/images-store\", \"egress_allow_nonglobal_for_tests\": [\"127.0.0.0/8\"], \"egress_ports\": [$allowed_port, $denied_port]}" \
  --exit-on-stdin-eof <"$scratch/stdin" >"$scratch/ready" 2>"$scratch/double.log" &
double_pid=$!
exec 9>"$scratch/stdin"  # the double ends when this stage does, however it ends
stop_double() {
  exec 9>&-
  if kill -0 "$double_pid" 2>/dev/null; then
    kill -TERM "$double_pid" 2>/dev/null || true
  fi
  wait "$double_pid" 2>/dev/null || true
}
on_exit stop_double
for _ in $(seq 600); do [[ -s $scratch/ready ]] || ! kill -0 "$double_pid" 2>/dev/null && break; sleep 0.1; done
[[ -s $scratch/ready ]] || { cat "$scratch/double.log" >&2; fail "the double did not start"; }
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$scratch/ready" "$1"; }
endpoint=$(field endpoint)
ca_file=$(field ca_file)

cat >"$scratch/config.json" <<JSON
{"acas": {"endpoint": "$endpoint", "subscription_id": "sub-ci", "resource_group": "rg-ci",
          "sandbox_group": "sg-ci", "tls_ca_file": "$ca_file", "default_image": "airlock-busybox",
          "poll_interval_seconds": 0.05, "retry_backoff_seconds": 0.05}}
JSON
export AZURE_TENANT_ID=tenant-ci AZURE_CLIENT_ID=client-ci AZURE_CLIENT_SECRET="stage-secret-$$"
export AZURE_AUTHORITY_HOST=$endpoint
control() { curl -sf --cacert "$ca_file" "$endpoint/_double/$1"; }
cli() { "$airlock" "$1" --backend acas --backend-config "$scratch/config.json" "${@:2}"; }

# Judges a conformance report: exactly the expected probes failed and skipped, and nothing else.
judge() {  # $1: report, $2: what ran, $3: failures expected (comma list), $4: skips expected
  python3 - "$@" <<'PY'
import json, sys
path, what, must_fail, may_skip = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
must_fail = set(filter(None, must_fail.split(",")))
may_skip = set(filter(None, may_skip.split(",")))
try:
    report = json.load(open(path))
except ValueError:
    print("FAILED: %s produced no report" % what); sys.exit(1)
probes = [p for s in report["suites"] for p in s.get("probes", [])]
failed = {p["probe"] for p in probes if p["result"] == "failed"}
skipped = {p["probe"] for p in probes if p["result"] == "skipped"}
for p in probes:
    said = p.get("detail") or p.get("note", "")
    if p["result"] != "passed":
        print("  %-58s %-8s %s" % (p["probe"], p["result"], said[:300]))
print("  %d probes, %d passed" % (len(probes), sum(p["result"] == "passed" for p in probes)))
bad = []
if failed != must_fail:
    bad.append("failed %s, expected exactly %s" % (sorted(failed), sorted(must_fail)))
if skipped - may_skip:
    bad.append("skipped %s unexpectedly" % sorted(skipped - may_skip))
if not probes:
    bad.append("no probes ran")
if bad:
    print("FAILED: %s: %s" % (what, "; ".join(bad))); sys.exit(1)
print("%s: as documented (failed: %s; skipped: %s)" % (what, ", ".join(sorted(failed)) or "none",
                                                      ", ".join(sorted(skipped)) or "none"))
PY
}

status=0
begin
echo "--- airlock conformance --backend acas: files_out, files_in, files_delete, exec"
cli conformance --suite files_out --suite files_in --suite files_delete --suite exec --json \
  >"$scratch/files.json" || true
judge "$scratch/files.json" "the file and exec suites" \
  "a-link-raced-in-for-the-file-never-yields-outside-bytes,a-link-raced-in-for-a-parent-never-yields-outside-bytes" \
  "a-timed-out-command-is-stopped" || status=1
took "file and exec suites"

echo "--- airlock conformance --backend acas: egress (allowlist through the double's sandboxes)"
cli conformance --suite egress --allowed-url "http://127.0.0.2:$allowed_port/" \
  --denied-url "http://127.0.0.3:$denied_port/" --json >"$scratch/egress.json" || true
judge "$scratch/egress.json" "the egress suite" "" "" || status=1
took "egress suite"

echo "--- airlock conformance --backend acas: isolation (as far as the double carries it)"
cli conformance --suite isolation --json >"$scratch/isolation.json" || true
judge "$scratch/isolation.json" "the isolation suite" "the-guest-kernel-is-not-the-hosts" \
  "the-host-file-table-is-bounded" || status=1
took "isolation suite"

# `AIRLOCK_ACAS_REPORTS=DIR` keeps the three reports (docs/conformance/acas*.json are such a run).
if [[ -n ${AIRLOCK_ACAS_REPORTS:-} ]]; then
  mkdir -p "$AIRLOCK_ACAS_REPORTS"
  cp "$scratch/files.json" "$AIRLOCK_ACAS_REPORTS/acas.json"
  cp "$scratch/egress.json" "$AIRLOCK_ACAS_REPORTS/acas.egress.json"
  cp "$scratch/isolation.json" "$AIRLOCK_ACAS_REPORTS/acas.isolation-through-the-double.json"
fi

echo "--- airlock check states the residual"
echo '{"kind": "outputs", "requires": ["exec", "files_out"]}' >"$scratch/spec.json"
checked=$(cli check --spec "$scratch/spec.json") || { echo "$checked"; fail "airlock check refused"; }
grep -q "residual  acas: native reads retain a path race" <<<"$checked" ||
  { echo "$checked"; echo "FAILED: airlock check did not state the native-read residual"; status=1; }

echo "--- airlock run / ls / purge through the default credential chain"
out=$(cli run --keep --scope stage45 -- sh -c 'printf "\377ran"' | od -An -c | tr -d ' \n')
[[ $out == '377ran' ]] || { echo "FAILED: airlock run printed '$out'"; status=1; }
listed=$(cli ls --json)
[[ $listed == *stage45* || $listed == *'"acas"'* ]] || { echo "FAILED: ls: $listed"; status=1; }
cli purge --all >/dev/null || { echo "FAILED: purge --all"; status=1; }

echo "--- Python: SandboxRouter over acas"
PYTHONPATH=$AIRLOCK_BUILD_DIR/python python3 - "$scratch/config.json" <<'PY' || status=1
import json, sys
import airlock
settings = json.load(open(sys.argv[1]))["acas"]
router = airlock.SandboxRouter({"backends": [dict(settings, type="acas")]})
assert router.backend_name == "acas", router.backend_name
key = airlock.SandboxKey("stage45-python", "t", "python")
spec = airlock.SandboxSpec(kind="python", requires=["exec", "files_in"])
try:
    sandbox = router.acquire(key, spec)
    result = sandbox.exec("printf 'from python'", working_directory="/maf-sandbox/work", timeout=60)
    assert result.stdout == "from python", result
finally:
    router.dispose(key)
print("python: acquired, ran and disposed an acas sandbox at the default floor (microvm)")
PY

echo "--- airlockd over acas"
echo "{\"backends\":[$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["acas"]; c["type"]="acas"; print(json.dumps(c))' "$scratch/config.json")]}" >"$scratch/daemon.json"
"$airlock" serve --config "$scratch/daemon.json" --socket "$scratch/sock" --state-dir "$scratch/daemon-state" \
  --ready-file "$scratch/daemon-ready" >"$scratch/daemon.log" 2>&1 &
serve_pid=$!
on_exit "kill -TERM $serve_pid 2>/dev/null; wait $serve_pid 2>/dev/null || true"
for _ in $(seq 300); do [[ -e $scratch/daemon-ready ]] || ! kill -0 "$serve_pid" 2>/dev/null && break; sleep 0.1; done
api() { curl -s --unix-socket "$scratch/sock" -H 'Content-Type: application/json' "$@" || true; }
acquired=$(api -X POST -d '{"key":{"scope":"stage45-daemon","thread_id":"t","agent_dir":"a"},"spec":{"kind":"daemon","requires":["exec"]}}' http://x/v1/sandboxes)
handle=$(sed -n 's/.*"sandbox":"\([^"]*\)".*/\1/p' <<<"$acquired")
if [[ -z $handle ]]; then
  echo "FAILED: the daemon's acquire over acas: $acquired"; cat "$scratch/daemon.log"; status=1
else
  ran=$(api -X POST -d '{"argv":["echo","served"]}' "http://x/v1/sandboxes/$handle/exec")
  [[ $ran == *'"stdout":"served\n"'* ]] || { echo "FAILED: daemon exec: $ran"; status=1; }
  gone=$(api -o /dev/null -w '%{http_code}' -X DELETE "http://x/v1/sandboxes/$handle")
  [[ $gone == 200 ]] || { echo "FAILED: daemon dispose answered $gone"; status=1; }
fi
kill -TERM "$serve_pid"; wait "$serve_pid" || { echo "FAILED: the daemon did not exit 0"; status=1; }

echo "--- nothing left behind"
left=$(control state)
python3 - "$left" <<'PY' || status=1
import json, sys
state = json.loads(sys.argv[1])
if state["sandboxes"] or state["linux_sandboxes"]:
    print("FAILED: the double still holds sandboxes:", json.dumps(state)[:2000]); sys.exit(1)
print("the double holds no sandbox and no linux sandbox")
PY
stop_double
printf '{"linux": {"state_dir": "%s/state"}}' "$scratch" >"$scratch/linux.json"
records=$("$airlock" ls --backend linux --backend-config "$scratch/linux.json" --json)
[[ $records == "[]" ]] || { echo "FAILED: the double left linux sandboxes: $records"; status=1; }
exit "$status"
