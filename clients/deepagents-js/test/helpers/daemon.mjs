// Starts a real airlockd for a test file: its own socket, state directory and router config,
// stopped (SIGTERM, then SIGKILL) and cleaned up when the test file ends.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const sourceDir = resolve(here, "../../../..");

const buildDir = () => process.env.AIRLOCK_BUILD_DIR ?? join(sourceDir, "build/dev");

/** The airlockd binary: $AIRLOCKD, or the dev build of this tree. */
export function airlockdPath() {
  return resolve(sourceDir, process.env.AIRLOCKD ?? join(buildDir(), "src/daemon/airlockd"));
}

/**
 * The daemon that serves `backend`. The shipped airlockd has no `testing` backend: the fake is
 * served by the test-only airlockd-testing ($AIRLOCKD_TESTING), the daemon with it linked in.
 */
export function daemonFor(backend) {
  if (backend !== "testing") return airlockdPath();
  return resolve(sourceDir, process.env.AIRLOCKD_TESTING ?? join(buildDir(), "tests/daemon/airlockd-testing"));
}

// The router documents the tests run against. `testing` is the in-process fake (no isolation,
// a filesystem in memory, no real shell); `linux` is the embedded backend.
// linux keeps its durable state in the test's own directory, apart from other suites'.
const CONFIGS = {
  testing: () => ({
    backends: [{ type: "testing", capabilities: ["exec", "files_in", "files_out", "files_list", "files_delete"] }],
    min_isolation: "none",
  }),
  linux: (dir) => ({
    backends: [{ type: "linux", state_dir: join(dir, "linux-state") }],
    min_isolation: "container",
  }),
};

let linuxProbe;
/**
 * Whether this build has the `linux` backend type and it can serve here: "" when it can, or the
 * reason it cannot (the tests that need it print that reason and skip).
 */
export function linuxUnavailable() {
  if (linuxProbe !== undefined) return linuxProbe;
  if (!existsSync(airlockdPath())) return (linuxProbe = `airlockd is not built (${airlockdPath()})`);
  if (process.getuid?.() !== 0) return (linuxProbe = "the linux backend needs root here (CI runs as root)");
  const dir = mkdtempSync(join(tmpdir(), "airlockd-probe-"));
  try {
    const config = join(dir, "config.json");
    writeFileSync(config, JSON.stringify(CONFIGS.linux(dir)));
    const probe = spawnSync(airlockdPath(), ["--version"], { encoding: "utf8" });
    if (probe.status !== 0) return (linuxProbe = `airlockd --version failed: ${probe.stderr}`);
    // `airlock check` builds the same router from the same document: an unknown type is named.
    const airlock = join(dirname(dirname(airlockdPath())), "cli/airlock");
    const check = spawnSync(airlock, ["check", "--config", config, "--spec", writeSpec(dir)], { encoding: "utf8" });
    if (check.status !== 0) {
      const reason = `${check.stdout}${check.stderr}`.trim().split("\n").pop();
      return (linuxProbe = `this build cannot route to the linux backend: ${reason}`);
    }
    return (linuxProbe = "");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function writeSpec(dir) {
  const spec = join(dir, "spec.json");
  writeFileSync(spec, JSON.stringify({ kind: "deepagents", requires: ["exec", "files_in", "files_out"] }));
  return spec;
}

/** Say a skip out loud, on stderr as well as in the runner's report. */
export function skipLoudly(t, reason) {
  process.stderr.write(`SKIPPED: ${t.name}: ${reason}\n`);
  t.skip(reason);
}

// Purges every scope the daemon holds a handle for; then the backend's durable state must be
// empty (the daemon's listings name no conversation, so anything left there is reported, not
// purged). The scopes come from the daemon's state directory, as its operator reads them: no
// caller of the API learns another conversation's key.
async function purgeEverything(socketPath, stateDir) {
  const { AirlockClient } = await import("../../src/index.js");
  const client = new AirlockClient({ socketPath });
  const records = existsSync(stateDir) ? readdirSync(stateDir).filter((name) => /^sbx-[0-9a-f]{32}\.json$/.test(name)) : [];
  const scopes = new Set(records.map((name) => JSON.parse(readFileSync(join(stateDir, name), "utf8")).key.scope));
  for (const scope of scopes) await client.request("POST", "/v1/purge", { json: { scope } });
  const { selected } = (await client.request("GET", "/v1/backends")).json();
  const held = (await client.request("GET", `/v1/backends/${selected}/sandboxes`)).json().sandboxes;
  return held.map((record) => record.instance_id);
}

/**
 * Starts airlockd over `backend` ("testing" or "linux"); resolves once it serves.
 * `backendOptions` are merged into the backend's entry of the router document (the testing
 * backend's fault injection: `raises`, say).
 * @returns {Promise<{socketPath: string, tcp: string|null, stateDir: string, pid: number, stop: () => Promise<void>, log: () => string}>}
 */
export async function startDaemon(backend = "testing", extraArgs = [], files = {}, backendOptions = {}) {
  const dir = mkdtempSync(join(tmpdir(), "airlockd-js-"));
  for (const [name, content] of Object.entries(files)) writeFileSync(join(dir, name), content, { mode: 0o600 });
  extraArgs = extraArgs.map((arg) => arg.replaceAll("{dir}", dir));
  const config = join(dir, "config.json");
  const document = CONFIGS[backend](dir);
  Object.assign(document.backends[0], backendOptions);
  writeFileSync(config, JSON.stringify(document));
  const socketPath = join(dir, "airlockd.sock");
  const stateDir = join(dir, "state");
  const ready = join(dir, "ready.json");
  let log = "";
  const daemon = daemonFor(backend);
  if (!existsSync(daemon)) throw new Error(`${daemon} is not built (the daemon for the ${backend} backend)`);
  const child = spawn(
    daemon,
    ["--config", config, "--socket", socketPath, "--state-dir", stateDir, "--ready-file", ready, "--log-level", "warn", ...extraArgs],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  child.stdout.on("data", (chunk) => (log += chunk));
  child.stderr.on("data", (chunk) => (log += chunk));
  const exited = new Promise((resolveExit) => child.on("exit", (code, signal) => resolveExit({ code, signal })));
  const deadline = Date.now() + 30_000;
  while (!existsSync(ready)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`airlockd did not start: ${log}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  const { pid, tcp } = JSON.parse(readFileSync(ready, "utf8"));
  return {
    socketPath,
    tcp,
    stateDir,
    pid,
    log: () => log,
    async stop() {
      // Sandboxes outlive their daemon by design (durable state); a test that failed before its
      // close() would leave one running. Purge every scope the daemon holds a handle for first.
      let left = [];
      let failed = null;
      if (child.exitCode === null) left = await purgeEverything(socketPath, stateDir).catch((error) => ((failed = error), []));
      if (child.exitCode === null) {
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dir, { recursive: true, force: true });
      if (failed) throw failed;
      if (left.length) throw new Error(`sandboxes outlived their purge: ${left.join(", ")}`);
    },
  };
}
