// Snapshots through the adapter against a real airlockd-testing: snapshot() and
// create({fromSnapshot}), a fork, the conversation check, the refusals — and how a host pairs a
// LangGraph checkpoint (the agent's state) with a sandbox snapshot (the sandbox's), since Deep
// Agents itself has no hook that would save a sandbox.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { AIMessage, HumanMessage } from "@langchain/core/messages";
import { MemorySaver } from "@langchain/langgraph-checkpoint";
import { BaseSandbox, LangSmithSandbox, SandboxError, createDeepAgent } from "deepagents";

import { AirlockClient, AirlockSandbox, AirlockSandboxError, deepagentsSpec } from "../src/index.js";
import { startDaemon } from "./helpers/daemon.mjs";
import { ScriptedChatModel, call } from "./helpers/scripted-model.mjs";

const quiet = { warn() {} };
const WORK = "/maf-sandbox/work";
const encode = (text) => new TextEncoder().encode(text);
const decode = (bytes) => new TextDecoder().decode(bytes);
const SNAPSHOTTING = {
  capabilities: ["exec", "files_in", "files_out", "files_list", "files_delete", "snapshot"],
  snapshot_content: "filesystem",
};

test("deepagents 1.14.1 gives a sandbox no persistence hook: the host pairs the two itself", () => {
  // Nothing a sandbox backend implements is asked to save or restore it: the protocol is
  // execute, id and the file methods, and BaseSandbox adds none.
  const hooks = /snapshot|checkpoint|persist|restore|resume|fork/i;
  assert.deepEqual(Object.getOwnPropertyNames(BaseSandbox.prototype).filter((name) => hooks.test(name)), []);
  // One provider, LangSmithSandbox, has its own captureSnapshot() and create({snapshotId}) —
  // called by a host, never by the agent. AirlockSandbox offers the same pair.
  assert.equal(typeof LangSmithSandbox.prototype.captureSnapshot, "function");
  assert.equal(typeof AirlockSandbox.prototype.snapshot, "function");
});

describe("snapshots on the testing backend", () => {
  let daemon;
  let client;
  before(async () => {
    daemon = await startDaemon("testing", [], {}, SNAPSHOTTING);
    client = new AirlockClient({ socketPath: daemon.socketPath });
  });
  after(async () => daemon?.stop());

  const key = (agent = "coder", thread = "t1", scope = "tenant") => ({ scope, thread_id: thread, agent_dir: agent });

  test("snapshot() returns an id that create({fromSnapshot}) resumes, and forks go their own ways", async () => {
    const box = await AirlockSandbox.create({ client, key: key(), log: quiet });
    await box.uploadFiles([[`${WORK}/notes.md`, encode("before")]]);
    const id = await box.snapshot();
    assert.match(id, /^snap-[0-9a-f]{24}$/);
    await box.uploadFiles([[`${WORK}/notes.md`, encode("after")], [`${WORK}/later.md`, encode("later")]]);
    const before = box.instanceId;

    const resumed = await AirlockSandbox.create({ client, key: key(), fromSnapshot: id, log: quiet });
    assert.equal(resumed.handle, box.handle, "the same key: the same handle, a new instance");
    assert.notEqual(resumed.instanceId, before);
    const [notes, later] = await resumed.downloadFiles([`${WORK}/notes.md`, `${WORK}/later.md`]);
    assert.equal(decode(notes.content), "before");
    assert.equal(later.error, "file_not_found", "nothing written after the snapshot");

    const fork = await AirlockSandbox.create({ client, key: key("reviewer"), fromSnapshot: id, log: quiet });
    assert.notEqual(fork.handle, resumed.handle);
    await fork.uploadFiles([[`${WORK}/notes.md`, encode("the fork's")]]);
    const [mine] = await resumed.downloadFiles([`${WORK}/notes.md`]);
    assert.equal(decode(mine.content), "before", "a fork's write stays in the fork");
    // The resume happened once: initialize() again is a plain get-or-create of the same sandbox.
    await resumed.initialize();
    assert.equal(decode((await resumed.downloadFiles([`${WORK}/notes.md`]))[0].content), "before");
    for (const sandbox of [fork, resumed]) assert.equal(await sandbox.close(), true);
  });

  test("a snapshot of another conversation is not found, exactly as one that never existed", async () => {
    const box = await AirlockSandbox.create({ client, key: key("coder", "owner"), log: quiet });
    await box.uploadFiles([[`${WORK}/secret.md`, encode("owner's")]]);
    const id = await box.snapshot();
    const never = `snap-${"0".repeat(24)}`;
    for (const stranger of [key("coder", "other-thread"), key("coder", "owner", "other-tenant")]) {
      const refusals = [];
      for (const fromSnapshot of [id, never]) {
        await assert.rejects(AirlockSandbox.create({ client, key: stranger, fromSnapshot, log: quiet }), (error) => {
          assert.ok(error instanceof AirlockSandboxError && error instanceof SandboxError);
          assert.equal(error.code, "SNAPSHOT_NOT_FOUND");
          assert.equal(error.status, 404);
          assert.equal(error.check, "body.from_snapshot");
          refusals.push(error.message.replaceAll(fromSnapshot, "ID"));
          return true;
        });
      }
      assert.equal(refusals[0], refusals[1], "the two refusals are told apart");
    }
    const listed = await client.request("GET", "/v1/snapshots", { query: { scope: "tenant", thread_id: "other-thread" } });
    assert.deepEqual(listed.json().snapshots, []);
    await box.close();
  });

  test("bad ids are a TypeError before anything is sent; a backend without snapshots says so", async () => {
    for (const bad of ["", "snap-", "../../etc/passwd", `snap-${"0".repeat(23)}`, `SNAP-${"0".repeat(24)}`, 7]) {
      await assert.rejects(AirlockSandbox.create({ client, key: key(), fromSnapshot: bad }), TypeError);
      assert.throws(() => new AirlockSandbox({ client, key: key(), spec: deepagentsSpec(), fromSnapshot: bad }), /fromSnapshot must be a snapshot id/);
    }
    const plain = await startDaemon("testing");
    try {
      const other = new AirlockClient({ socketPath: plain.socketPath });
      const box = await AirlockSandbox.create({ client: other, key: key(), log: quiet });
      await assert.rejects(box.snapshot(), (error) =>
        error instanceof AirlockSandboxError && error.code === "SNAPSHOT_NOT_SUPPORTED" && error.check === "capabilities" && error.status === 403);
      await assert.rejects(
        AirlockSandbox.create({ client: other, key: key(), fromSnapshot: `snap-${"a".repeat(24)}` }),
        (error) => error.code === "SANDBOX_CREATION_FAILED" && error.check === "capabilities",
      );
      await box.close();
    } finally {
      await plain.stop();
    }
  });

  test("a host pairs a LangGraph checkpoint with a sandbox snapshot and rewinds both", async () => {
    const checkpointer = new MemorySaver();
    const config = { configurable: { thread_id: "conversation-7" } };
    const conversationKey = { scope: "tenant", thread_id: "conversation-7", agent_dir: "coder" };
    const sandbox = await AirlockSandbox.create({ client, key: conversationKey, log: quiet });
    const agent = (box, script) => createDeepAgent({ model: new ScriptedChatModel(script), backend: box, checkpointer });

    // Turn 1 writes a plan; the host saves the sandbox beside the checkpoint the turn ended on.
    await agent(sandbox, [call("w", "write_file", { file_path: `${WORK}/plan.md`, content: "step 1\n" }), new AIMessage("planned")])
      .invoke({ messages: [new HumanMessage("plan")] }, config);
    const saved = {
      checkpoint: (await checkpointer.getTuple(config)).config.configurable.checkpoint_id,
      snapshot: await sandbox.snapshot(),
    };

    // Turn 2 goes wrong: it overwrites the plan and leaves debris.
    await agent(sandbox, [
      call("x", "write_file", { file_path: `${WORK}/plan.md`, content: "rm -rf everything\n" }),
      new AIMessage("oops"),
    ]).invoke({ messages: [new HumanMessage("go on")] }, config);
    assert.equal(decode((await sandbox.downloadFiles([`${WORK}/plan.md`]))[0].content), "rm -rf everything\n");

    // Rewind: the sandbox from the snapshot, the agent from the checkpoint — the two agree.
    const rewound = await AirlockSandbox.create({ client, key: conversationKey, fromSnapshot: saved.snapshot, log: quiet });
    const at = { configurable: { ...config.configurable, checkpoint_id: saved.checkpoint } };
    const state = await agent(rewound, []).getState(at);
    const said = state.values.messages.map((m) => (typeof m.content === "string" ? m.content : ""));
    assert.ok(said.includes("plan") && said.includes("planned"), `turn 1 is in the checkpoint: ${said}`);
    assert.ok(!said.includes("go on") && !said.includes("oops"), "the checkpoint is before turn 2");
    assert.equal(decode((await rewound.downloadFiles([`${WORK}/plan.md`]))[0].content), "step 1\n");
    // And the conversation goes on from there, in the resumed sandbox.
    const forked = await agent(rewound, [
      call("e", "edit_file", { file_path: `${WORK}/plan.md`, old_string: "step 1", new_string: "step 1 (revised)" }),
      new AIMessage("revised"),
    ]).invoke({ messages: [new HumanMessage("revise")] }, at);
    assert.equal(forked.messages.at(-1).content, "revised");
    assert.equal(decode((await rewound.downloadFiles([`${WORK}/plan.md`]))[0].content), "step 1 (revised)\n");
    await rewound.close();
  });
});
