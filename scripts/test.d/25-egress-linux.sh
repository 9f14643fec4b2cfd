# The allowlist end to end through the CLI, as an operator uses it: `airlock run --allow HOST
# --allow-port N` against a server on the host's loopback (reachable from inside only through the
# proxy, and only because this stage's backend config sets the TEST-ONLY non-global knob).
# The property tests behind it are ctest's label "allowlist" (tests/egress/linux_allowlist_test.cpp).
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "the egress allowlist end-to-end stage"
linux_backend_config airlock-egress-e2e '"egress_allow_nonglobal_for_tests": ["127.0.0.0/8"]'
portfile=$(mktemp /tmp/airlock-egress-e2e-XXXXXX.port)
remove_on_exit "$portfile"

# A plain HTTP server on 127.0.0.2 (an ephemeral port), answering "egress-e2e-ok".
http_servers "$portfile" egress-e2e-ok 127.0.0.2
port=$(cat "$portfile")
[[ -n $port ]] || fail "the test server did not start"
url="http://127.0.0.2:$port/"

status() { echo "curl -s -o /dev/null -w '%{http_connect}/%{http_code}' --max-time 10 $* $url"; }

out=$(linux_run --allow 127.0.0.2 --allow-port "$port" -- curl -s -p --max-time 10 "$url") \
  || fail "the allowed host through the proxy (exit $?)"
[[ $out == egress-e2e-ok ]] || fail "the allowed host answered '$out'"

out=$(linux_run --allow 127.0.0.2 --allow-port "$port" --shell -- "$(status --noproxy "'*'")") || true
[[ $out == 000/000 ]] || fail "curl --noproxy '*' bypassed the proxy ($out)"

out=$(linux_run --allow example.org --allow-port "$port" --shell -- "$(status -p)") || true
[[ $out == 403/000 ]] || fail "a host off the allowlist was not refused ($out)"

out=$(linux_run --allow 127.0.0.2 --shell -- "$(status -p)") || true
[[ $out == 403/000 ]] || fail "a port off the allowlist (default 443 only) was not refused ($out)"

linux_run --allow 127.0.0.2 --allow-port 0 -- true 2>/dev/null && code=0 || code=$?
[[ $code -eq 125 ]] || fail "--allow-port 0 must be refused before anything runs ($code)"
# Unprivileged (a host user without root, as `nobody`): the proxy's socket then belongs to the
# caller, who is also the guest's root; the same road must work and the same refusal hold.
as_nobody() { HOME=/nonexistent setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
if ! command -v setpriv >/dev/null; then
  skip_part "unprivileged allowlist run: setpriv (util-linux) is not installed"
elif [[ $(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo 1) == 0 ]]; then
  skip_part --allowed-on-ci \
    "unprivileged allowlist run: unprivileged user namespaces are disabled here (kernel.unprivileged_userns_clone=0, this machine's setting)"
elif ! as_nobody test -x "$airlock"; then
  skip_part --allowed-on-ci \
    "unprivileged allowlist run: nobody cannot execute $airlock (the modes of the directories above the build; a checkout under /root, say)"
else
  chmod 755 "$state"
  mkdir "$state/nobody"
  chown 65534:65534 "$state/nobody"
  # A non-root backend starts no sandbox without cgroups of its own: delegate a memory and a
  # pids cgroup to nobody, as an operator would, and remove them with the stage (after nobody's
  # sandboxes: the last registered runs first).
  delegated=()
  # shellcheck disable=SC2016 # expanded when the stage exits
  on_exit 'for cgroup in "${delegated[@]}"; do rmdir "$cgroup" 2>/dev/null; done'
  for hierarchy in memory pids; do
    cgroup=/sys/fs/cgroup/$hierarchy/airlock-stage-25-$$
    mkdir "$cgroup" && chown 65534:65534 "$cgroup" && delegated+=("$cgroup")
  done
  ((${#delegated[@]} == 2)) || fail "unprivileged: could not delegate a memory and a pids cgroup to nobody"
  nobody_config="$state/nobody.json"
  # shellcheck disable=SC2016 # expanded when the stage exits
  on_exit 'as_nobody "$airlock" purge --all --backend-config "$nobody_config" >/dev/null 2>&1 || true'
  printf '{"linux": {"state_dir": "%s", "egress_allow_nonglobal_for_tests": ["127.0.0.0/8"], "delegated_cgroups": ["%s", "%s"]}}' \
    "$state/nobody" "${delegated[0]}" "${delegated[1]}" >"$nobody_config"
  chmod 644 "$nobody_config"
  nobody_run() {
    as_nobody "$airlock" run --backend-config "$nobody_config" --min-isolation container --quiet "$@"
  }
  out=$(nobody_run --allow 127.0.0.2 --allow-port "$port" --shell -- "$(status -p)") || true
  [[ $out == 200/200 ]] || fail "unprivileged: the allowed host through the proxy ($out)"
  out=$(nobody_run --allow example.org --allow-port "$port" --shell -- "$(status -p)") || true
  [[ $out == 403/000 ]] || fail "unprivileged: a host off the allowlist was not refused ($out)"
  as_nobody "$airlock" purge --all --backend-config "$nobody_config" >/dev/null 2>&1 || true
fi
echo "egress allowlist end to end: ok"
