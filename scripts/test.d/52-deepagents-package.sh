# The Deep Agents adapter as a user installs it: `npm pack` of clients/deepagents-js, installed
# into a fresh temporary project next to the deepagents and @langchain/core this repo pins (the
# rest of deepagents' peers as npm resolves them today), then a consumer there — ESM, and a
# TypeScript type check of the installed declarations — against a real airlockd-testing: an
# acquire, execute("echo hi") and execute(…, {timeout}), the SandboxError subclass a failed
# lookup and a refused spec throw, a lookup by sandbox id, and a dispose.
# Runs by hand too: AIRLOCK_BUILD_DIR=build/dev scripts/test.d/52-deepagents-package.sh
# Takes about 40 s here (npm install ~25 s with a warm cache).
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_tools node npm tar
daemon="$AIRLOCK_BUILD_DIR/tests/daemon/airlockd-testing"
[[ -x $daemon ]] || fail "$daemon is not built (the test-only daemon with the testing backend linked in)"
adapter="$AIRLOCK_SOURCE_DIR/clients/deepagents-js"

scratch=$(mktemp -d /tmp/airlock-deepagents-package-XXXXXX)
remove_on_exit "$scratch"
# What the installed package says to the daemon is held against docs/api/openapi.yaml too.
export AIRLOCK_EXCHANGE_LOG="$scratch/exchanges.jsonl"
mkdir -p "$scratch/pack" "$scratch/project" "$scratch/daemon"

# The versions this repo tests the adapter with (its devDependencies pin them).
pinned() { node -e 'const p = require(process.argv[1]); console.log(p.devDependencies[process.argv[2]] ?? "")' "$adapter/package.json" "$1"; }
deepagents_version=$(pinned deepagents)
core_version=$(pinned @langchain/core)
typescript_version=$(pinned typescript)
[[ -n $deepagents_version && -n $core_version && -n $typescript_version ]] ||
  fail "clients/deepagents-js/package.json does not pin deepagents, @langchain/core and typescript in devDependencies"

# ---- the tarball ------------------------------------------------------------------------------
begin
(cd "$adapter" && npm pack --pack-destination "$scratch/pack" --loglevel=error >"$scratch/pack/name")
tarball="$scratch/pack/$(tail -n1 "$scratch/pack/name")"
[[ -f $tarball ]] || fail "npm pack did not leave a tarball (it printed: $(cat "$scratch/pack/name"))"
echo "--- packed $(basename "$tarball"): $(stat -c %s "$tarball") bytes"
contents=$(tar tzf "$tarball" | sort)
expected=$(printf 'package/%s\n' README.md package.json src/client.js src/index.d.ts src/index.js | sort)
[[ $contents == "$expected" ]] || fail "the tarball ships $(tr '\n' ' ' <<<"$contents")instead of exactly $(tr '\n' ' ' <<<"$expected")"
tar xzf "$tarball" -C "$scratch/pack" package/package.json
# shellcheck disable=SC2016 # JavaScript, not shell
node -e '
  const p = require(process.argv[1]);
  const problems = [];
  if (p.private) problems.push("it is private");
  if (!/^@[a-z0-9-]+\//.test(p.name ?? "")) problems.push(`its name ${p.name} is not scoped`);
  for (const peer of ["deepagents", "@langchain/core"]) if (!p.peerDependencies?.[peer]) problems.push(`${peer} is not a peer dependency`);
  if (Object.keys(p.dependencies ?? {}).length) problems.push(`it bundles dependencies ${Object.keys(p.dependencies)}`);
  if (problems.length) { console.error(problems.join("; ")); process.exit(1); }
  console.log(`--- ${p.name}@${p.version}, license ${p.license}, peers ${JSON.stringify(p.peerDependencies)}`);
' "$scratch/pack/package/package.json" || fail "the packed package.json is not a publishable package (above)"

# ---- a fresh project that installs it -------------------------------------------------------
project="$scratch/project"
(cd "$project" && npm init -y --loglevel=error >/dev/null)
echo "--- npm install deepagents@$deepagents_version @langchain/core@$core_version typescript@$typescript_version $(basename "$tarball") (in $project)"
(cd "$project" && npm install --no-audit --no-fund --loglevel=error \
  "deepagents@$deepagents_version" "@langchain/core@$core_version" "typescript@$typescript_version" "$tarball") ||
  fail "npm could not install the packed adapter next to deepagents@$deepagents_version"
installed="$project/node_modules/@airlock/deepagents"
[[ -d $installed && ! -L $installed ]] || fail "$installed is not a real directory (a symlink install is what this stage replaces)"
(cd "$project" && npm ls --loglevel=error deepagents @langchain/core @langchain/langgraph langchain @airlock/deepagents) ||
  fail "npm ls reports a missing or invalid peer in the installed tree (above)"
copies=$(find "$project/node_modules" -path '*/node_modules/deepagents/package.json' | wc -l)
[[ $copies == 1 ]] || fail "the project holds $copies copies of deepagents; the adapter must share the host's (a peer)"
took "pack and install"

# ---- the installed declarations, as a TypeScript host reads them ------------------------------
# consumer.mts: an ESM module, as the package is (npm init made the project CommonJS).
cat >"$project/consumer.mts" <<'EOF'
import type { SandboxBackendProtocolV2 } from "deepagents";
import { SandboxError } from "deepagents";
import { AirlockSandbox, AirlockSandboxError, deepagentsSpec } from "@airlock/deepagents";
import type { AirlockSandboxErrorCode } from "@airlock/deepagents";

export async function consume(socketPath: string): Promise<number | null> {
  const sandbox = await AirlockSandbox.getOrCreate({ socketPath, key: { scope: "s" }, spec: deepagentsSpec() });
  const backend: SandboxBackendProtocolV2 = sandbox;
  const found: AirlockSandbox = await AirlockSandbox.fromId(sandbox.handle ?? "", { socketPath });
  const error: SandboxError = new AirlockSandboxError("m", "SANDBOX_NOT_FOUND");
  const code: AirlockSandboxErrorCode = "DAEMON_UNREACHABLE";
  void found;
  void error;
  void code;
  return (await sandbox.execute("true", { timeout: 5 })).exitCode ?? (await backend.execute("true")).exitCode;
}
EOF
cat >"$project/tsconfig.json" <<'EOF'
{
  "compilerOptions": {
    "strict": true,
    "noEmit": true,
    "skipLibCheck": true,
    "target": "ES2022",
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "types": []
  },
  "files": ["consumer.mts"]
}
EOF
echo '--- tsc --noEmit: a TypeScript consumer of the installed package'
(cd "$project" && node node_modules/typescript/bin/tsc -p tsconfig.json) ||
  fail "the installed package's declarations do not type-check in a consumer (above)"

# ---- a real daemon --------------------------------------------------------------------------
run_dir="$scratch/daemon"
echo '{"backends":[{"type":"testing","capabilities":["exec","files_in","files_out"]}],"min_isolation":"none"}' >"$run_dir/config.json"
"$daemon" --config "$run_dir/config.json" --socket "$run_dir/sock" --state-dir "$run_dir/state" \
  --ready-file "$run_dir/ready" --log-level warn >"$run_dir/log" 2>&1 &
daemon_pid=$!
# shellcheck disable=SC2317 # called on exit (on_exit)
stop_daemon() {
  if kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid"
    wait "$daemon_pid" || true
  fi
}
on_exit stop_daemon
for _ in $(seq 300); do
  [[ -e $run_dir/ready ]] || ! kill -0 "$daemon_pid" 2>/dev/null && break
  sleep 0.1
done
[[ -e $run_dir/ready ]] || fail "airlockd-testing did not start: $(cat "$run_dir/log")"
echo "--- airlockd-testing serves $run_dir/sock (pid $daemon_pid)"

# ---- the consumer, in ESM, as the README shows it -------------------------------------------
cat >"$project/smoke.mjs" <<'EOF'
import assert from "node:assert/strict";

import { SandboxError, isSandboxBackend } from "deepagents";
import { AirlockSandbox, AirlockSandboxError, EXIT_TIMEOUT, deepagentsSpec } from "@airlock/deepagents";

const socketPath = process.argv[2];
const step = (what) => console.log(`    ${what}`);
const rejectsWith = async (promise, code, what) => {
  await assert.rejects(promise, (error) => {
    assert.ok(error instanceof SandboxError, `${what}: threw ${error?.name}: ${error?.message}, not deepagents' SandboxError`);
    assert.ok(error instanceof AirlockSandboxError, `${what}: not an AirlockSandboxError`);
    assert.equal(error.code, code, `${what}: code ${error.code} (${error.message})`);
    return true;
  });
  step(`${what}: AirlockSandboxError (a deepagents SandboxError), code ${code}`);
};

const key = { scope: "package-smoke", thread_id: "t1", agent_dir: "coder" };
const sandbox = await AirlockSandbox.getOrCreate({ socketPath, key, spec: deepagentsSpec() });
assert.ok(isSandboxBackend(sandbox), "deepagents does not take the adapter for a sandbox backend");
assert.match(sandbox.handle ?? "", /^sbx-[0-9a-f]{32}$/, `getOrCreate left no handle: ${sandbox.handle}`);
step(`getOrCreate: acquired ${sandbox.id}, handle ${sandbox.handle.slice(0, 8)}…`);

const hi = await sandbox.execute("echo hi", { timeout: 10 });
assert.deepEqual(hi, { output: "hi\n", exitCode: 0, truncated: false }, "execute('echo hi', {timeout: 10})");
step(`execute("echo hi", {timeout: 10}) -> ${JSON.stringify(hi)}`);

const slow = await sandbox.execute("sleep 30", { timeout: 0.5 });
assert.equal(slow.exitCode, EXIT_TIMEOUT, `a command past {timeout: 0.5}: ${JSON.stringify(slow)}`);
assert.match(slow.output, /did not finish within 0\.5 seconds/, slow.output);
step(`execute("sleep 30", {timeout: 0.5}) -> exit ${slow.exitCode}: ${slow.output.slice(0, 60)}…`);

const [written] = await sandbox.uploadFiles([["notes.md", new TextEncoder().encode("remember")]]);
assert.equal(written.error, null, `upload: ${written.error}`);
const found = await AirlockSandbox.fromId(sandbox.handle, { socketPath });
assert.equal(found.id, sandbox.id, "fromId reached another sandbox");
const [read] = await found.downloadFiles(["notes.md"]);
assert.equal(new TextDecoder().decode(read.content ?? new Uint8Array()), "remember", `download via fromId: ${read.error}`);
step("fromId(handle): the same sandbox, and the file written through the first adapter");

await rejectsWith(AirlockSandbox.fromId(`sbx-${"0".repeat(32)}`, { socketPath }), "SANDBOX_NOT_FOUND", "fromId(unknown id)");
await rejectsWith(
  AirlockSandbox.getOrCreate({ sandboxId: `sbx-${"f".repeat(32)}`, socketPath }),
  "SANDBOX_NOT_FOUND",
  "getOrCreate({sandboxId: unknown})",
);
await rejectsWith(
  AirlockSandbox.create({ socketPath, key, spec: deepagentsSpec({ minIsolation: "microvm" }) }),
  "SANDBOX_CREATION_FAILED",
  "create(a floor the backend does not meet)",
);
await rejectsWith(AirlockSandbox.create({ socketPath: `${socketPath}.absent`, key }), "DAEMON_UNREACHABLE", "create(no daemon)");

assert.equal(await sandbox.close(), true, "close() did not dispose the sandbox");
await rejectsWith(AirlockSandbox.fromId(sandbox.handle, { socketPath }), "SANDBOX_NOT_FOUND", "fromId after close()");
step("close(): disposed");
EOF
begin
echo '--- node smoke.mjs: the installed package against the daemon'
(cd "$project" && timeout 120 node smoke.mjs "$run_dir/sock") ||
  fail "the installed package did not work against airlockd-testing (above); daemon log: $(cat "$run_dir/log")"
took "the consumer"
stop_daemon
listed=$(find "$run_dir/state" -name 'sbx-*.json' 2>/dev/null | wc -l)
[[ $listed == 0 ]] || fail "$listed sandbox record(s) outlived close() in $run_dir/state"
echo "--- the installed package works: packed, installed beside deepagents@$deepagents_version, type-checked, run"
check_exchanges "$AIRLOCK_EXCHANGE_LOG"
