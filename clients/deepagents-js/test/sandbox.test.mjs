// AirlockSandbox against a real airlockd: the adapter's promises to Deep Agents (execute never
// throws, per-file codes, caps, an opaque id, close disposing) and the host's conversation purge.
// Runs on the `testing` backend (files in memory, no real shell) and, where a test needs a real
// shell, on `linux` — skipped loudly when this build cannot serve it.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { SandboxError } from "deepagents";

import {
  AirlockClient,
  AirlockSandbox,
  AirlockSandboxError,
  DEFAULT_TRANSFER_LIMITS,
  EXIT_AIRLOCK,
  EXIT_TIMEOUT,
  SANDBOX_KEPT,
  SANDBOX_RESET,
  SANDBOX_UNAVAILABLE,
  deepagentsSpec,
} from "../src/index.js";
import { linuxUnavailable, skipLoudly, startDaemon } from "./helpers/daemon.mjs";

const encode = (text) => new TextEncoder().encode(text);
const decode = (bytes) => new TextDecoder().decode(bytes);
const quiet = { warn() {} };

describe("on the testing backend", () => {
  let daemon;
  let client;
  before(async () => {
    daemon = await startDaemon("testing");
    client = new AirlockClient({ socketPath: daemon.socketPath });
  });
  after(async () => daemon?.stop());

  const sandbox = (scope, options = {}) =>
    AirlockSandbox.create({ client, key: { scope, thread_id: "t1", agent_dir: "coder" }, log: quiet, ...options });

  test("create refuses a spec Deep Agents cannot work with, before any agent exists", async () => {
    const key = { scope: "s" };
    await assert.rejects(
      AirlockSandbox.create({ client, key, spec: { ...deepagentsSpec(), egress: "unrestricted" } }),
      /closed or allowlist/,
    );
    await assert.rejects(
      AirlockSandbox.create({ client, key, spec: { ...deepagentsSpec(), requires: ["exec"] } }),
      /files_in, files_out/,
    );
    await assert.rejects(AirlockSandbox.create({ client, key, spec: deepagentsSpec({ workDir: "relative" }) }), /absolute/);
    await assert.rejects(AirlockSandbox.create({ client, key: { scope: "" } }), /scope/);
    // The daemon's router refuses a floor the backend does not meet: named, and thrown here.
    await assert.rejects(
      AirlockSandbox.create({ client, key, spec: deepagentsSpec({ minIsolation: "microvm" }) }),
      (error) =>
        error instanceof AirlockSandboxError &&
        error instanceof SandboxError &&
        error.name === "AirlockSandboxError" &&
        error.code === "SANDBOX_CREATION_FAILED" &&
        error.check === "isolation-floor" &&
        error.status === 403,
    );
    await assert.rejects(
      AirlockSandbox.create({ socketPath: "/nonexistent/airlockd.sock", key }),
      (error) => error.code === "DAEMON_UNREACHABLE" && /could not be reached/.test(error.message),
    );
  });

  test("AirlockSandboxError is Deep Agents' SandboxError, recognised by either isInstance", () => {
    const error = new AirlockSandboxError("m", "SANDBOX_NOT_FOUND", undefined, { type: "SandboxHandleNotFound", status: 404 });
    assert.ok(error instanceof AirlockSandboxError && error instanceof SandboxError && error instanceof Error);
    assert.ok(AirlockSandboxError.isInstance(error) && SandboxError.isInstance(error));
    assert.ok(!AirlockSandboxError.isInstance(new SandboxError("m", "COMMAND_FAILED")));
    assert.deepEqual([error.name, error.code, error.type, error.status], ["AirlockSandboxError", "SANDBOX_NOT_FOUND", "SandboxHandleNotFound", 404]);
  });

  test("fromId finds an acquired sandbox by its handle: the same id, key, spec and files", async () => {
    const spec = deepagentsSpec({ egressAllow: ["pypi.org"], workDir: "/srv/work" });
    const box = await AirlockSandbox.getOrCreate({ client, key: { scope: "lookup", thread_id: "t9" }, spec, log: quiet });
    assert.match(box.handle, /^sbx-[0-9a-f]{32}$/, "getOrCreate without an id acquires at once");
    assert.deepEqual((await box.uploadFiles([["notes.md", encode("kept")]])).map((r) => r.error), [null]);
    const found = await AirlockSandbox.fromId(box.handle, { client, log: quiet });
    assert.equal(found.id, box.id, "the same sandbox, and it says so");
    assert.equal(found.handle, box.handle);
    assert.equal(found.instanceId, box.instanceId);
    assert.equal(found.workDir, "/srv/work", "the spec it was acquired under, from the daemon");
    assert.equal(decode((await found.downloadFiles(["notes.md"]))[0].content), "kept");
    const again = await AirlockSandbox.getOrCreate({ sandboxId: box.handle, socketPath: daemon.socketPath, log: quiet });
    assert.equal(again.id, box.id);
    // After a purge the looked-up adapter acquires again under the key and spec the daemon gave it.
    assert.equal((await client.request("POST", "/v1/purge", { json: { scope: "lookup" } })).status, 200);
    assert.deepEqual((await found.uploadFiles([["again.md", encode("x")]])).map((r) => r.error), [null]);
    assert.equal(found.handle, box.handle, "get-or-create over the same key answers the same handle");
    assert.equal(await found.close(), true);
    await assert.rejects(AirlockSandbox.fromId(box.handle, { client }), (error) =>
      error instanceof SandboxError && error.code === "SANDBOX_NOT_FOUND" && error.type === "SandboxHandleNotFound" && error.status === 404,
    );
    await assert.rejects(
      AirlockSandbox.getOrCreate({ sandboxId: `sbx-${"0".repeat(32)}`, client }),
      (error) => error.code === "SANDBOX_NOT_FOUND",
      "an unknown id is an error, never a fresh sandbox",
    );
    await assert.rejects(AirlockSandbox.fromId("../health", { client }), (error) => error.code === "SANDBOX_NOT_FOUND" && !error.status);
    await assert.rejects(
      AirlockSandbox.fromId(`sbx-${"0".repeat(32)}`, { socketPath: "/nonexistent/airlockd.sock" }),
      (error) => error.code === "DAEMON_UNREACHABLE",
    );
  });

  test("fromId refuses a handle whose spec is no Deep Agents sandbox", async () => {
    const acquired = await client.request("POST", "/v1/sandboxes", {
      json: { key: { scope: "not-deepagents", thread_id: "", agent_dir: "" }, spec: { kind: "codeact", requires: ["exec"] } },
    });
    assert.equal(acquired.status, 201, acquired.body.toString());
    const handle = acquired.json().sandbox;
    await assert.rejects(AirlockSandbox.fromId(handle, { client }), (error) => error.code === "SANDBOX_INCOMPATIBLE" && /files_in/.test(error.message));
    assert.equal((await client.request("DELETE", `/v1/sandboxes/${handle}`)).status, 200);
  });

  test("initialize acquires now and names a refused acquire", async () => {
    const box = await sandbox("initialize");
    assert.equal(box.handle, null, "create() only checks");
    await box.initialize();
    const handle = box.handle;
    assert.match(handle, /^sbx-[0-9a-f]{32}$/);
    await box.initialize();
    assert.equal(box.handle, handle, "idempotent: get-or-create answers the same handle");
    assert.equal(await box.close(), true);
    // Another spec over the same key and kind: the daemon's handle conflict, thrown as a creation failure.
    const first = await sandbox("conflict", { spec: deepagentsSpec({ workDir: "/a" }) });
    await first.initialize();
    const second = await sandbox("conflict", { spec: deepagentsSpec({ workDir: "/b" }) });
    await assert.rejects(second.initialize(), (error) =>
      error instanceof AirlockSandboxError && error.code === "SANDBOX_CREATION_FAILED" && error.status === 409,
    );
    assert.equal(await first.close(), true);
  });

  test("default transfer limits are the protocol's", () => {
    assert.deepEqual(DEFAULT_TRANSFER_LIMITS, { max_bytes_per_file: 8388608, max_total_bytes: 33554432, max_files: 64 });
  });

  test("id is opaque, stable for one key, and distinct across keys", async () => {
    const a = await sandbox("tenant-acme");
    const again = await sandbox("tenant-acme");
    const b = await sandbox("tenant-other");
    assert.match(a.id, /^airlock-[0-9a-f]{16}$/);
    assert.equal(a.id, again.id, "two adapters over one key reach one sandbox, and say so");
    assert.notEqual(a.id, b.id);
    assert.ok(!a.id.includes("acme"), "the id carries no part of the key");
  });

  test("execute never throws: bad commands and an unreachable daemon come back as output", async () => {
    const box = await sandbox("execute-never-throws");
    assert.deepEqual(await box.execute(""), { output: "Error: Command must be a non-empty string.", exitCode: 1, truncated: false });
    assert.equal((await box.execute(undefined)).exitCode, 1);
    const ran = await box.execute("true");
    assert.equal(ran.exitCode, 0, "the testing backend answers a shell line with exit 0");
    for (const timeout of [0, -1, Number.NaN, Infinity, "5"]) {
      assert.deepEqual(
        await box.execute("true", { timeout }),
        { output: "Error: timeout must be a positive number of seconds; the command did not run.", exitCode: 1, truncated: false },
        `timeout ${String(timeout)}`,
      );
    }
    assert.equal((await box.execute("true", {})).exitCode, 0, "no timeout: execTimeoutMs");
    assert.equal((await box.execute("true", { timeout: 5 })).exitCode, 0);
    const stranded = new AirlockSandbox({
      client: new AirlockClient({ socketPath: "/nonexistent/airlockd.sock" }),
      key: { scope: "s" },
      spec: deepagentsSpec(),
      log: quiet,
    });
    assert.deepEqual(await stranded.execute("echo hi"), { output: SANDBOX_UNAVAILABLE, exitCode: EXIT_AIRLOCK, truncated: false });
    assert.equal((await stranded.uploadFiles([["/maf-sandbox/work/a", encode("x")]]))[0].error, "upload failed; see the host log");
    assert.equal((await stranded.downloadFiles(["/maf-sandbox/work/a"]))[0].error, "download failed; see the host log");
    assert.equal(await stranded.close(), true, "nothing was acquired, so nothing is left");
  });

  test("files round-trip, in order, with partial success", async () => {
    const box = await sandbox("round-trip");
    const bytes = new Uint8Array(256).map((_, i) => i);
    const uploaded = await box.uploadFiles([
      ["/maf-sandbox/work/a.txt", encode("alpha\n")],
      ["../escape.txt", encode("nope")],
      ["nested/bytes.bin", bytes],
    ]);
    assert.deepEqual(uploaded.map((r) => [r.path, r.error]), [
      ["/maf-sandbox/work/a.txt", null],
      ["../escape.txt", "invalid_path"],
      ["nested/bytes.bin", null],
    ]);
    const downloaded = await box.downloadFiles(["/maf-sandbox/work/a.txt", "/maf-sandbox/work/missing", "/maf-sandbox/work/nested/bytes.bin"]);
    assert.equal(decode(downloaded[0].content), "alpha\n");
    assert.deepEqual([downloaded[1].content, downloaded[1].error], [null, "file_not_found"]);
    assert.deepEqual([...downloaded[2].content], [...bytes]);
    assert.ok(box.isRunning);
  });

  test("caps come from the spec: too many files refuses the batch, a large file refuses alone", async () => {
    const limits = { max_bytes_per_file: 10, max_total_bytes: 15, max_files: 3 };
    const box = await sandbox("caps", { spec: deepagentsSpec({ filesIn: limits, filesOut: limits }) });
    const tooMany = await box.uploadFiles([1, 2, 3, 4].map((i) => [`f${i}`, encode("x")]));
    assert.ok(tooMany.every((r) => r.error === "the batch has more files than files_in.max_files allows"));
    const sized = await box.uploadFiles([
      ["big", encode("x".repeat(11))],
      ["eight", encode("x".repeat(8))],
      ["eight-more", encode("y".repeat(8))],
    ]);
    assert.deepEqual(sized.map((r) => r.error), [
      "the file is larger than files_in.max_bytes_per_file",
      null,
      "the batch would exceed files_in.max_total_bytes",
    ]);
    assert.equal((await box.uploadFiles([["nine", encode("z".repeat(9))]]))[0].error, null);
    // Reading both: 8 bytes leave 7 of the batch's 15, and a 9-byte file does not fit in them.
    const read = await box.downloadFiles(["eight", "nine"]);
    assert.equal(read[0].error, null);
    assert.equal(read[1].error, "the batch would exceed files_out.max_total_bytes", "refused, never truncated");
    assert.equal(read[1].content, null);
  });

  test("close disposes this conversation's sandbox and forgets its handle", async () => {
    const box = await sandbox("closing");
    assert.equal(await box.close(), true, "before any acquire there is nothing to dispose");
    await box.uploadFiles([["/maf-sandbox/work/x", encode("x")]]);
    const handle = box.handle;
    assert.ok(handle);
    assert.equal((await client.request("GET", `/v1/sandboxes/${handle}`)).status, 200);
    assert.equal(await box.close(), true);
    assert.equal((await client.request("GET", `/v1/sandboxes/${handle}`)).status, 404);
    assert.equal(box.isRunning, false);
  });
});

describe("over TCP with a bearer token", () => {
  const token = "a-test-token-of-more-than-16-characters";
  let daemon;
  before(async () => {
    daemon = await startDaemon("testing", ["--tcp", "127.0.0.1:0", "--token-file", "{dir}/token"], { token: `${token}\n` });
  });
  after(async () => daemon?.stop());

  test("the token opens the API, and its absence is refused before anything is acquired", async () => {
    const colon = daemon.tcp.lastIndexOf(":");
    const host = daemon.tcp.slice(0, colon);
    const port = Number(daemon.tcp.slice(colon + 1));
    const box = await AirlockSandbox.create({ client: new AirlockClient({ host, port, token }), key: { scope: "tcp" }, log: quiet });
    assert.deepEqual((await box.uploadFiles([["a.txt", encode("over tcp")]]))[0].error, null);
    assert.equal(decode((await box.downloadFiles(["a.txt"]))[0].content), "over tcp");
    await assert.rejects(
      AirlockSandbox.create({ client: new AirlockClient({ host, port }), key: { scope: "tcp" } }),
      (error) => error.type === "Unauthorized",
    );
    const wrong = await new AirlockClient({ host, port, token: `${token}x` }).request("POST", "/v1/sandboxes", {
      json: { key: { scope: "sneaky" }, spec: deepagentsSpec() },
    });
    assert.equal(wrong.status, 401);
    const listed = await new AirlockClient({ socketPath: daemon.socketPath }).request("GET", "/v1/sandboxes");
    assert.deepEqual(listed.json().sandboxes.map((s) => s.instance_id), [box.instanceId], "the refused acquire created nothing");
    assert.equal(await box.close(), true);
  });
});

// A backend that cannot confirm a kill: every command's end is unknown (the testing backend's
// fault injection raises a Timeout with kill_confirmed unset), so the daemon condemns.
describe("on a backend that cannot confirm a kill", () => {
  let daemon;
  let client;
  before(async () => {
    daemon = await startDaemon("testing", [], {}, { raises: { type: "Timeout", message: "the command did not finish" } });
    client = new AirlockClient({ socketPath: daemon.socketPath });
  });
  after(async () => daemon?.stop());

  for (const outputOverflow of ["drop", "head_tail"]) {
    test(`a timeout resets the sandbox, and the model is told its files are gone (${outputOverflow})`, async () => {
      const box = await AirlockSandbox.create({
        client,
        key: { scope: `unconfirmed-${outputOverflow}` },
        execTimeoutMs: 1000,
        outputOverflow,
        log: quiet,
      });
      assert.deepEqual((await box.uploadFiles([["/maf-sandbox/work/notes.md", encode("remember")]])).map((r) => r.error), [null]);
      assert.deepEqual(await box.execute("echo hi"), {
        output: `Error: the command did not finish within 1 seconds. ${SANDBOX_RESET}`,
        exitCode: EXIT_TIMEOUT,
        truncated: false,
      });
      const [notes] = await box.downloadFiles(["/maf-sandbox/work/notes.md"]);
      assert.equal(notes.error, "file_not_found", "what the model was told is gone is gone");
      await box.close();
    });
  }
});

// Tests that need a shell: the testing backend's emulated one (sleep honours deadlines, output
// ceilings hold, chmod 000 makes a file unreadable to the guest), and linux's real one.
for (const backend of ["testing", "linux"]) {
  describe(`with a shell, on the ${backend} backend`, () => {
    const reason = backend === "linux" ? linuxUnavailable() : "";
    let daemon;
    let client;
    before(async () => {
      if (!reason) {
        daemon = await startDaemon(backend);
        client = new AirlockClient({ socketPath: daemon.socketPath });
      }
    });
    after(async () => daemon?.stop());

    const conversation = (scope) =>
      AirlockSandbox.create({ client, key: { scope, thread_id: "t1", agent_dir: "coder" }, log: quiet });

    test("download errors map to Deep Agents' codes", async (t) => {
      if (reason) return skipLoudly(t, reason);
      const box = await conversation("error-codes");
      await box.uploadFiles([["/maf-sandbox/work/dir/inner.txt", encode("x")], ["/maf-sandbox/work/plain", encode("x")]]);
      const results = await box.downloadFiles([
        "/maf-sandbox/work/nothing-here",
        "/maf-sandbox/work/dir",
        "/maf-sandbox/work/plain/child",
        "relative/../../../escape",
      ]);
      assert.deepEqual(results.map((r) => r.error), ["file_not_found", "is_directory", "invalid_path", "invalid_path"]);
      assert.ok(results.every((r) => r.content === null));
      await box.close();
    });

    test("a conversation purge reaches the sandbox; the next call starts a fresh one", async (t) => {
      if (reason) return skipLoudly(t, reason);
      const box = await conversation("purged-tenant");
      await box.uploadFiles([["/maf-sandbox/work/notes.md", encode("remember")]]);
      const before = box.instanceId;
      const purge = await client.request("POST", "/v1/purge", { json: { scope: "purged-tenant", thread_id: "t1" } });
      assert.equal(purge.status, 200);
      assert.equal(purge.json().disposed, 1);
      const [after] = await box.downloadFiles(["/maf-sandbox/work/notes.md"]);
      assert.equal(after.error, "file_not_found", "the purged sandbox's files went with it");
      assert.notEqual(box.instanceId, before);
      const { selected } = (await client.request("GET", "/v1/backends")).json();
      const listed = await client.request("GET", `/v1/backends/${selected}/sandboxes`);
      assert.ok(!listed.json().sandboxes.some((s) => s.instance_id === before), "the backend no longer holds it");
      await box.close();
    });

    test("a command past its deadline comes back as a timeout; its proven kill keeps the sandbox and its files", async (t) => {
      if (reason) return skipLoudly(t, reason);
      const box = await AirlockSandbox.create({ client, key: { scope: "timeout" }, execTimeoutMs: 1000, log: quiet });
      const first = await box.execute("echo warm");
      const warm = box.instanceId;
      assert.deepEqual(first, { output: "warm\n", exitCode: 0, truncated: false });
      await box.uploadFiles([["/maf-sandbox/work/notes.md", encode("remember")]]);
      const slow = await box.execute("sleep 30");
      assert.deepEqual(slow, {
        output: `Error: the command did not finish within 1 seconds. ${SANDBOX_KEPT}`,
        exitCode: EXIT_TIMEOUT,
        truncated: false,
      });
      // execute(command, {timeout}) in seconds, as Deep Agents' providers take it, for one command.
      const started = Date.now();
      assert.deepEqual(await box.execute("sleep 30", { timeout: 0.5 }), {
        output: `Error: the command did not finish within 0.5 seconds. ${SANDBOX_KEPT}`,
        exitCode: EXIT_TIMEOUT,
        truncated: false,
      });
      assert.ok(Date.now() - started < 5000, `the 0.5 s deadline held (${Date.now() - started} ms)`);
      assert.deepEqual(await box.execute("sleep 2 && echo slept", { timeout: 10 }), { output: "slept\n", exitCode: 0, truncated: false });
      const next = await box.execute("echo warm again");
      assert.equal(next.output, "warm again\n");
      assert.equal(box.instanceId, warm, "the instance whose command was proven stopped was kept");
      const [notes] = await box.downloadFiles(["/maf-sandbox/work/notes.md"]);
      assert.equal(decode(notes.content), "remember", "the conversation's file is still there");
      await box.close();
    });

    test("an output flood is dropped whole, never cut, and the model is told the sandbox is intact", async (t) => {
      if (reason) return skipLoudly(t, reason);
      const box = await AirlockSandbox.create({ client, key: { scope: "flood" }, maxOutputBytes: 4096, log: quiet });
      await box.uploadFiles([["/maf-sandbox/work/notes.md", encode("remember")]]);
      const before = (await box.execute("echo before")).output && box.instanceId;
      const flood = await box.execute("head -c 50000000 /dev/zero");
      assert.deepEqual(flood, {
        output: `Error: the command's output exceeded 4096 bytes and was dropped. ${SANDBOX_KEPT}`,
        exitCode: EXIT_AIRLOCK,
        truncated: true,
      });
      assert.equal((await box.execute("echo after")).output, "after\n");
      assert.equal(box.instanceId, before);
      const [notes] = await box.downloadFiles(["/maf-sandbox/work/notes.md"]);
      assert.equal(decode(notes.content), "remember");
      await box.close();
    });

    test("head_tail renders a long output's head and tail around Deep Agents' marker", async (t) => {
      if (reason) return skipLoudly(t, reason);
      const box = await AirlockSandbox.create({
        client,
        key: { scope: "head-tail" },
        maxOutputBytes: 4096,
        outputOverflow: "head_tail",
        log: quiet,
      });
      const lines = Array.from({ length: 300_000 }, (_, i) => `${i + 1}\n`).join("");
      assert.deepEqual((await box.uploadFiles([["/maf-sandbox/work/lines.txt", encode(lines)]])).map((r) => r.error), [null]);
      const long = await box.execute("cat /maf-sandbox/work/lines.txt");
      assert.equal(long.truncated, true);
      assert.equal(long.exitCode, 0);
      assert.ok(Buffer.byteLength(long.output) <= 4096, `within the budget: ${Buffer.byteLength(long.output)} bytes`);
      assert.match(long.output, /^1\n2\n3\n/, "the head, from the first line");
      assert.match(long.output, /\n299999\n300000\n$/, "the tail, to the last line");
      const marker = long.output.match(/\n\.\.\. \[(\d+) lines truncated\] \.\.\.\n/);
      assert.ok(marker, long.output.slice(1900, 2200));
      const shown = long.output.split("\n").filter((line) => /^\d+$/.test(line)).length;
      assert.equal(Number(marker[1]) + shown, 300_000, "the marker counts exactly the lines left out");
      // What fits comes back whole, as in drop mode; the stderr prefix as Deep Agents renders it.
      assert.deepEqual(await box.execute("echo out; echo err >&2; exit 2"), { output: "out\n\n[stderr] err", exitCode: 2, truncated: false });
      // A timeout reads the same in both modes.
      const slow = await AirlockSandbox.create({
        client,
        key: { scope: "head-tail" },
        execTimeoutMs: 1000,
        outputOverflow: "head_tail",
        log: quiet,
      });
      assert.deepEqual(await slow.execute("sleep 30"), {
        output: `Error: the command did not finish within 1 seconds. ${SANDBOX_KEPT}`,
        exitCode: EXIT_TIMEOUT,
        truncated: false,
      });
      assert.throws(() => new AirlockSandbox({ client, key: { scope: "x" }, spec: deepagentsSpec(), outputOverflow: "tail" }), /outputOverflow/);
      await box.close();
    });

    test("stderr comes back prefixed, with the program's own exit code", async (t) => {
      if (reason) return skipLoudly(t, reason);
      const box = await AirlockSandbox.create({ client, key: { scope: "streams" }, log: quiet });
      assert.deepEqual(await box.execute("echo out; echo err >&2; exit 7"), {
        output: "out\n\n[stderr] err",
        exitCode: 7,
        truncated: false,
      });
      assert.deepEqual(await box.execute("true"), { output: "<no output>", exitCode: 0, truncated: false });
      await box.close();
    });

    test("files outside the work directory travel the shell road, with the same codes", async (t) => {
      if (reason) return skipLoudly(t, reason);
      const box = await AirlockSandbox.create({ client, key: { scope: "outside" }, log: quiet });
      // Deep Agents offloads history under /conversation_history; linux's "host" image keeps its
      // root read-only, so there the write is refused, per file and named, and /tmp serves.
      const offloaded = await box.uploadFiles([["/conversation_history/thread-1.md", encode("# earlier turns\n")]]);
      assert.equal(offloaded[0].error, backend === "linux" ? "permission_denied" : null);
      const history = backend === "linux" ? "/tmp/conversation_history/thread-1.md" : "/conversation_history/thread-1.md";
      const big = new Uint8Array(200_000).map((_, i) => (i * 31) % 251);
      const uploaded = await box.uploadFiles([[history, encode("# earlier turns\n")], ["/tmp/big.bin", big]]);
      assert.deepEqual(uploaded.map((r) => r.error), [null, null]);
      const [back, bigBack] = await box.downloadFiles([history, "/tmp/big.bin"]);
      assert.equal(decode(back.content), "# earlier turns\n");
      assert.deepEqual(Buffer.from(bigBack.content).equals(Buffer.from(big)), true);
      assert.equal((await box.execute(`cat ${history}`)).output, "# earlier turns\n", "the agent's shell sees the same file");
      await box.execute("mkdir -p /tmp/a-dir && printf secret > /tmp/secret && chmod 000 /tmp/secret");
      const refused = await box.downloadFiles(["/tmp/missing", "/tmp/a-dir", "/tmp/secret"]);
      assert.deepEqual(refused.map((r) => r.error), ["file_not_found", "is_directory", "permission_denied"]);
      await box.close();
    });
  });
}
