// The .d.ts is checked by the pinned TypeScript compiler: an AirlockSandbox must type-check as
// the SandboxBackendProtocolV2 Deep Agents takes, under `strict`.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

test("the type declarations describe a Deep Agents sandbox backend", () => {
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const run = spawnSync(process.execPath, [tsc, "-p", join(here, "types/tsconfig.json")], { encoding: "utf8" });
  assert.equal(run.status, 0, `${run.stdout}${run.stderr}`);
});
