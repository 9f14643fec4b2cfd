// The adapter's wire types against docs/api/openapi.yaml: TypeScript types are generated from
// the document (openapi-typescript, pinned) into test/types/generated/ and
// test/types/openapi-check.ts is compiled against them (pinned tsc, strict). A document that
// disagrees with the adapter — a renamed field, a type changed, a field made required — fails
// here, and the failure quotes the pair that disagrees.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const document = resolve(here, "../../../docs/api/openapi.yaml");
const generated = join(here, "types/generated/openapi.d.ts");
const check = join(here, "types/openapi-check.ts");
const require = createRequire(import.meta.url);

function generate(from) {
  mkdirSync(dirname(generated), { recursive: true });
  const manifest = require.resolve("openapi-typescript/package.json");
  const cli = join(dirname(manifest), JSON.parse(readFileSync(manifest, "utf8")).bin["openapi-typescript"]);
  // --default-non-nullable false: a field with a default stays optional, as the document's
  // `required` lists say (a request may leave it out).
  const run = spawnSync(process.execPath, [cli, from, "--default-non-nullable", "false", "-o", generated], { encoding: "utf8" });
  assert.equal(run.status, 0, `openapi-typescript could not read ${from}:\n${run.stdout}${run.stderr}`);
}

/** tsc's verdict, each error with the line of openapi-check.ts it points at. */
function compile() {
  const tsc = require.resolve("typescript/bin/tsc");
  const run = spawnSync(process.execPath, [tsc, "-p", join(here, "types/openapi.tsconfig.json")], { encoding: "utf8" });
  const lines = readFileSync(check, "utf8").split("\n");
  const explained = `${run.stdout}${run.stderr}`.replace(/openapi-check\.ts\((\d+),\d+\): (.*)/g, (_, line, message) =>
    `openapi-check.ts:${line}: ${lines[Number(line) - 1].trim()}\n    ${message}`,
  );
  return { status: run.status, output: explained };
}

test("a document that disagrees with the adapter fails the check, naming the pair", () => {
  const scratch = mkdtempSync(join(tmpdir(), "openapi-mutant-"));
  try {
    const original = readFileSync(document, "utf8");
    const mutant = original.replace(/^(\s+)exit_code: \{type: integer/m, "$1exit_status: {type: integer");
    assert.notEqual(mutant, original, "the mutation must change the document (ExecResult.exit_code)");
    writeFileSync(join(scratch, "openapi.yaml"), mutant);
    generate(join(scratch, "openapi.yaml"));
    const { status, output } = compile();
    assert.notEqual(status, 0, "ExecResult.exit_code renamed in the document, and the check passed");
    assert.match(output, /Read<ExecResult, Schemas\["ExecResult"\]>/, output);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
});

test("the adapter's wire types match docs/api/openapi.yaml", () => {
  generate(document);
  const { status, output } = compile();
  assert.equal(status, 0, `the adapter's types and ${document} disagree:\n${output}`);
});
