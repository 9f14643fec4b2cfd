// A Deep Agents agent turn, driven by a scripted chat model, through AirlockSandbox and a real
// airlockd. The full turn (execute, ls, read_file, grep, glob run shell commands in the guest)
// needs the linux backend; the file tools (write_file, edit_file go through uploadFiles and
// downloadFiles only) also run on the testing backend.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { HumanMessage, ToolMessage } from "@langchain/core/messages";
import { AIMessage } from "@langchain/core/messages";
import { createDeepAgent } from "deepagents";

import { AirlockClient, AirlockSandbox, SANDBOX_KEPT } from "../src/index.js";
import { linuxUnavailable, skipLoudly, startDaemon } from "./helpers/daemon.mjs";
import { ScriptedChatModel, call, text } from "./helpers/scripted-model.mjs";

const quiet = { warn() {} };
const WORK = "/maf-sandbox/work";

function toolOutputs(result) {
  return Object.fromEntries(
    result.messages.filter((m) => ToolMessage.isInstance(m)).map((m) => [m.tool_call_id, text(m.content)]),
  );
}

describe("file tools on the testing backend", () => {
  let daemon;
  before(async () => {
    daemon = await startDaemon("testing");
  });
  after(async () => daemon?.stop());

  test("write_file and edit_file land in the sandbox through the daemon", async () => {
    const sandbox = await AirlockSandbox.create({
      client: new AirlockClient({ socketPath: daemon.socketPath }),
      key: { scope: "tenant", thread_id: "conversation-1", agent_dir: "coder" },
      log: quiet,
    });
    try {
      const agent = createDeepAgent({
        model: new ScriptedChatModel([
          call("w", "write_file", { file_path: `${WORK}/notes.txt`, content: "alpha beta\n" }),
          call("e", "edit_file", { file_path: `${WORK}/notes.txt`, old_string: "beta", new_string: "gamma" }),
          call("d", "write_file", { file_path: `${WORK}/drafts/one.txt`, content: "draft" }),
          call("x", "write_file", { file_path: `${WORK}/drafts`, content: "onto a directory" }),
          new AIMessage("done"),
        ]),
        backend: sandbox,
      });
      const result = await agent.invoke({ messages: [new HumanMessage("take notes")] });
      const out = toolOutputs(result);
      assert.match(out.w, /notes\.txt/);
      assert.doesNotMatch(out.w, /Failed|Error/);
      assert.doesNotMatch(out.e, /Failed|Error/);
      assert.equal(out.x, `Failed to write to ${WORK}/drafts: is_directory`, "refused with Deep Agents' code; the turn goes on");
      const [notes] = await sandbox.downloadFiles([`${WORK}/notes.txt`]);
      assert.equal(new TextDecoder().decode(notes.content), "alpha gamma\n");
    } finally {
      await sandbox.close();
    }
  });
});

describe("a full agent turn on the linux backend", () => {
  const reason = linuxUnavailable();
  let daemon;
  before(async () => {
    if (!reason) daemon = await startDaemon("linux");
  });
  after(async () => daemon?.stop());

  test("write_file, execute, read_file, edit_file, ls, grep and glob reach a real sandbox", async (t) => {
    if (reason) return skipLoudly(t, reason);
    const sandbox = await AirlockSandbox.create({
      client: new AirlockClient({ socketPath: daemon.socketPath }),
      key: { scope: "tenant", thread_id: "conversation-1", agent_dir: "coder" },
      execTimeoutMs: 30_000,
      log: quiet,
    });
    try {
      const agent = createDeepAgent({
        model: new ScriptedChatModel([
          call("write", "write_file", { file_path: `${WORK}/hello.py`, content: "print('hello from the sandbox')\n" }),
          call("exec", "execute", { command: `cd ${WORK} && cat hello.py | wc -l && echo "uid=$(id -u)" && exit 3` }),
          call("read", "read_file", { file_path: `${WORK}/hello.py` }),
          call("edit", "edit_file", { file_path: `${WORK}/hello.py`, old_string: "hello from", new_string: "greetings from" }),
          call("ls", "ls", { path: WORK }),
          call("grep", "grep", { pattern: "greetings", path: WORK }),
          call("glob", "glob", { pattern: "*.py", path: WORK }),
          new AIMessage("done"),
        ]),
        backend: sandbox,
      });
      const result = await agent.invoke({ messages: [new HumanMessage("go")] });
      const out = toolOutputs(result);
      assert.doesNotMatch(out.write, /Failed|Error/);
      assert.match(out.exec, /^1\nuid=\d+\n/);
      assert.match(out.exec, /\[Command failed with exit code 3\]/);
      assert.match(out.read, /print\('hello from the sandbox'\)/);
      assert.doesNotMatch(out.edit, /Failed|Error/);
      assert.match(out.ls, /hello\.py/);
      assert.match(out.grep, /hello\.py/);
      assert.match(out.glob, /hello\.py/);
      const [edited] = await sandbox.downloadFiles([`${WORK}/hello.py`]);
      assert.equal(new TextDecoder().decode(edited.content), "print('greetings from the sandbox')\n");
    } finally {
      assert.equal(await sandbox.close(), true);
    }
  });

  test("a command past its deadline or flooding its output is tool output, and the turn goes on", async (t) => {
    if (reason) return skipLoudly(t, reason);
    const sandbox = await AirlockSandbox.create({
      client: new AirlockClient({ socketPath: daemon.socketPath }),
      key: { scope: "tenant", thread_id: "conversation-2", agent_dir: "coder" },
      execTimeoutMs: 1500,
      maxOutputBytes: 4096,
      log: quiet,
    });
    try {
      const agent = createDeepAgent({
        model: new ScriptedChatModel([
          call("slow", "execute", { command: "sleep 30" }),
          call("flood", "execute", { command: "head -c 10000000 /dev/zero" }),
          call("after", "execute", { command: "echo still-serving" }),
          new AIMessage("done"),
        ]),
        backend: sandbox,
      });
      const result = await agent.invoke({ messages: [new HumanMessage("go")] });
      const out = toolOutputs(result);
      assert.match(out.slow, /Error: the command did not finish within 1\.5 seconds\./);
      assert.ok(out.slow.includes(SANDBOX_KEPT), out.slow);
      assert.match(out.flood, /output exceeded 4096 bytes and was dropped/);
      assert.ok(out.flood.includes(SANDBOX_KEPT), out.flood);
      assert.match(out.after, /^still-serving\n/);
      assert.equal(result.messages.at(-1).content, "done", "the turn reached its end");
    } finally {
      assert.equal(await sandbox.close(), true);
    }
  });

  test("a flood and a timeout leave the agent's notes.md in place, and the model reads what happened", async (t) => {
    if (reason) return skipLoudly(t, reason);
    const key = { scope: "tenant", thread_id: "conversation-3", agent_dir: "coder" };
    const client = new AirlockClient({ socketPath: daemon.socketPath });
    // The defaults a host takes (a 1 MiB output budget): `seq 1 300000` prints about 2 MB.
    const sandbox = await AirlockSandbox.create({ client, key, execTimeoutMs: 3000, log: quiet });
    const headTail = await AirlockSandbox.create({ client, key, execTimeoutMs: 30_000, maxOutputBytes: 8192, outputOverflow: "head_tail", log: quiet });
    try {
      const agent = createDeepAgent({
        model: new ScriptedChatModel([
          call("notes", "write_file", { file_path: `${WORK}/notes.md`, content: "# plan\n1. count\n" }),
          call("flood", "execute", { command: "seq 1 300000" }),
          call("slow", "execute", { command: "sleep 30" }),
          call("read", "read_file", { file_path: `${WORK}/notes.md` }),
          new AIMessage("done"),
        ]),
        backend: sandbox,
      });
      const result = await agent.invoke({ messages: [new HumanMessage("count, then wait")] });
      const out = toolOutputs(result);
      assert.doesNotMatch(out.notes, /Failed|Error/);
      assert.match(out.flood, /^Error: the command's output exceeded 1048576 bytes and was dropped\. /);
      assert.ok(out.flood.includes(SANDBOX_KEPT), out.flood);
      assert.match(out.slow, /^Error: the command did not finish within 3 seconds\. /);
      assert.ok(out.slow.includes(SANDBOX_KEPT), out.slow);
      assert.match(out.read, /# plan/, "the notes survived the flood and the timeout");
      assert.equal(result.messages.at(-1).content, "done");

      // The same flood through head_tail: Deep Agents' own marker between the head and the tail.
      const ht = createDeepAgent({
        model: new ScriptedChatModel([call("seq", "execute", { command: "seq 1 300000" }), new AIMessage("done")]),
        backend: headTail,
      });
      const seq = toolOutputs(await ht.invoke({ messages: [new HumanMessage("count")] })).seq;
      assert.match(seq, /^1\n2\n3\n/);
      assert.match(seq, /\.\.\. \[\d+ lines truncated\] \.\.\./);
      assert.match(seq, /299999\n300000\n/);
      assert.match(seq, /\[Command succeeded with exit code 0\]/);
      assert.match(seq, /\[Output was truncated due to size limits\]/);
      assert.ok(seq.length < 8192 + 200, `held to the budget: ${seq.length}`);
      const [notes] = await sandbox.downloadFiles([`${WORK}/notes.md`]);
      assert.equal(new TextDecoder().decode(notes.content), "# plan\n1. count\n");
    } finally {
      assert.equal(await sandbox.close(), true);
    }
  });
});
