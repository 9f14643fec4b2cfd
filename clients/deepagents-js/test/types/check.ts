// Compiled (never run) by types.test.mjs: the declarations must describe a class Deep Agents
// accepts as a sandbox backend, under `strict`.
import type { SandboxBackendProtocolV2 } from "deepagents";
import { AirlockClient, AirlockSandbox, deepagentsSpec, EXIT_TIMEOUT } from "../../src/index.js";

async function typed(): Promise<void> {
  const client = new AirlockClient({ socketPath: "/run/airlock/airlockd.sock" });
  const sandbox: AirlockSandbox = await AirlockSandbox.create({
    client,
    key: { scope: "tenant", thread_id: "t", agent_dir: "a" },
    spec: deepagentsSpec({ egressAllow: ["pypi.org"] }),
    outputOverflow: "head_tail",
  });
  for await (const event of client.execStream("handle", { argv: ["true"] })) {
    if (event.type === "output") void event.data.length;
    else if (event.type === "result") void event.result.exit_code;
    else void event.error.sandbox_reset;
  }
  const backend: SandboxBackendProtocolV2 = sandbox;
  const response = await backend.execute("true");
  const code: number | null = response.exitCode;
  const timedOut: boolean = code === EXIT_TIMEOUT;
  const [upload] = await sandbox.uploadFiles([["a.txt", new Uint8Array([1])]]);
  const error: string | null = upload.error;
  const saved: string = await sandbox.snapshot();
  const resumed: AirlockSandbox = await AirlockSandbox.create({ client, key: { scope: "tenant" }, fromSnapshot: saved });
  const closed: boolean = (await sandbox.close()) && (await resumed.close());
  void timedOut;
  void error;
  void closed;
}
void typed;
