#!/usr/bin/env bash
# `airlock check --declared FILE`: the router's decision and refusals against a backend's
# declarations, printed as for a backend and marked as a declaration — and a declaration never
# acquires: nothing that acquires accepts one.
#
#   check_declared.sh AIRLOCK SOURCE_DIR
set -uo pipefail
airlock=$1
source_dir=$2
declared=$source_dir/examples/declared/qemu-microvm.json
specs=$source_dir/examples/specs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
fail() {
  echo "FAILED: $1"
  [[ -n ${2:-} ]] && sed 's/^/  /' <<<"$2"
  status=1
}

# Accepted, at the default floor (microvm): the decision, every check, and the declaration named.
output=$("$airlock" check --declared "$declared" --spec "$specs/codeact.json" 2>&1)
code=$?
if ((code != 0)); then
  fail "check --declared (codeact) exited $code" "$output"
else
  grep -qF "declared: 'qemu-microvm' from $declared is a declaration, not a backend" <<<"$output" ||
    fail "check --declared does not say it checked a declaration" "$output"
  grep -qF "accepted: backend 'qemu-microvm' (microvm) serves the 'codeact' workload; effective floor microvm" \
    <<<"$output" || fail "check --declared printed no decision" "$output"
  grep -qF "  ok  egress: closed is enforced" <<<"$output" ||
    fail "check --declared listed no passed check" "$output"
  echo "ok  check --declared: accepted, marked as a declaration"
fi

# Refused, by the check a backend with these declarations is refused by.
output=$("$airlock" check --declared "$declared" --spec "$specs/allowlist.json" 2>&1)
code=$?
if ((code != 125)); then
  fail "check --declared (allowlist) exited $code, not 125" "$output"
else
  grep -qF "refused by check 'egress' (SandboxEgressNotEnforced):" <<<"$output" ||
    fail "check --declared (allowlist) did not name the egress check" "$output"
  grep -qF "is a declaration, not a backend" <<<"$output" ||
    fail "the refusal does not say it was a declaration" "$output"
  echo "ok  check --declared: refused by check 'egress'"
fi

# The host's floor and denials apply to a declaration as to a backend.
output=$("$airlock" check --declared "$declared" --spec "$specs/codeact.json" --min-isolation vm 2>&1)
code=$?
if ((code != 125)) || ! grep -qF "refused by check 'isolation-floor'" <<<"$output"; then
  fail "check --declared --min-isolation vm was not refused by the floor (exit $code)" "$output"
else
  echo "ok  check --declared: the host's floor applies"
fi

# Machine-readable, with the declaration marked.
output=$("$airlock" --json check --declared "$declared" --spec "$specs/codeact.json" 2>/dev/null)
if ! python3 -c '
import json, sys
document = json.loads(sys.argv[1])
assert document["accepted"] is True, document
assert document["decision"]["backend"] == "qemu-microvm", document
assert document["declared"]["name"] == "qemu-microvm", document
assert "not a backend" in document["declared"]["note"], document
' "$output"; then
  fail "check --json --declared" "$output"
else
  echo "ok  check --json --declared: accepted, \"declared\" names it"
fi

# A declaration is not mixed with backends.
output=$("$airlock" check --declared "$declared" --backend linux --spec "$specs/codeact.json" 2>&1)
code=$?
if ((code != 125)) || ! grep -qF -- "--declared is checked instead of a backend" <<<"$output"; then
  fail "check --declared --backend linux was not refused (exit $code)" "$output"
else
  echo "ok  check --declared --backend: refused"
fi

# A declaration with a field it does not know, or without a rung, is refused with the field.
echo '{"name": "x", "isolation": "microvm", "acquire": true}' >"$work/unknown.json"
echo '{"name": "x"}' >"$work/no-rung.json"
for file in unknown no-rung; do
  output=$("$airlock" check --declared "$work/$file.json" --spec "$specs/codeact.json" 2>&1)
  code=$?
  field=$([[ $file == unknown ]] && echo declared.acquire || echo declared.isolation)
  if ((code != 125)) || ! grep -qF "$field" <<<"$output"; then
    fail "a declaration ($file) was not refused naming $field (exit $code)" "$output"
  else
    echo "ok  check --declared ($file): refused, naming $field"
  fi
done

# What the router refuses in a backend it refuses in a declaration, by the same check and kind:
# a rung off the ladder (BackendNotPermitted), limits that are not a SandboxLimits
# (TransferLimitsNotPermitted) — each naming the backend, never a parse error.
echo '{"name": "odd", "isolation": "bogus"}' >"$work/bogus-rung.json"
echo '{"name": "odd", "isolation": "microvm", "egress_modes": ["closed"],
       "capabilities": ["exec", "files_in", "files_out"],
       "limits": {"max_bytes_per_file": 1, "max_total_bytes": 1, "max_files": 1}}' \
  >"$work/bare-limits.json"
for case in "bogus-rung:isolation-floor:SandboxBackendNotPermitted" \
  "bare-limits:transfer-limits:SandboxTransferLimitsNotPermitted"; do
  IFS=: read -r file check type <<<"$case"
  output=$("$airlock" check --declared "$work/$file.json" --spec "$specs/codeact.json" 2>&1)
  code=$?
  if ((code != 125)) || ! grep -qF "refused by check '$check' ($type):" <<<"$output" ||
    ! grep -qF "sandbox backend 'odd'" <<<"$output"; then
    fail "a declaration ($file) was not refused by '$check' as $type naming it (exit $code)" \
      "$output"
  else
    echo "ok  check --declared ($file): refused by '$check' ($type)"
  fi
done

# Nothing that acquires takes a declaration: not as --declared, not as a router document, not
# as a backend type.
for command in "run" "codeact $source_dir/examples/jobs/main_job.py" "conformance" "serve"; do
  # shellcheck disable=SC2086 # the command and its operand
  output=$(timeout 60 "$airlock" $command --declared "$declared" 2>&1)
  code=$?
  if ((code != 125)); then
    fail "airlock $command --declared exited $code, not 125" "$output"
  else
    echo "ok  airlock ${command%% *} --declared: refused"
  fi
done
output=$("$airlock" run --config "$declared" -- true 2>&1)
code=$?
if ((code != 125)) || ! grep -qE "config\.[a-z_]+: unknown field \(known: backends," <<<"$output"; then
  fail "airlock run --config DECLARATION was not refused (exit $code)" "$output"
else
  echo "ok  airlock run --config DECLARATION: refused"
fi
for type in declared declaration; do
  output=$("$airlock" run --backend "$type" -- true 2>&1)
  code=$?
  if ((code != 125)) || ! grep -qF "no backend named '$type'" <<<"$output"; then
    fail "airlock run --backend $type was not refused as unknown (exit $code)" "$output"
  else
    echo "ok  airlock run --backend $type: no such backend"
  fi
done
exit $status
