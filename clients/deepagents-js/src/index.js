// airlockd as a LangChain Deep Agents sandbox.
//
//   deepagents  ->  AirlockSandbox  ->  airlockd (/v1 over a unix socket)  ->  router  ->  backend
//
// Deep Agents hands the model one `execute` tool over a sandbox object and derives its file
// tools (ls, read_file, grep, glob, delete through execute; write_file, edit_file through
// uploadFiles/downloadFiles) from it. AirlockSandbox is that object over the daemon: the host
// keeps the router's decisions (isolation floor, egress, capabilities), the key comes from the
// host's request context, and the daemon's call lifecycle condemns an instance whenever a
// command's end is unknown — and keeps it, files and all, when the backend proves a stopped
// command's every process gone. Either way the model is told in plain words.
//
// Contract toward Deep Agents, which aborts a whole agent turn on a throw:
//   - execute() never throws. A timeout, a refused or dropped output, an unavailable sandbox,
//     a lost result all come back as a fixed sentence with an exit code (124 for a timeout,
//     as Deep Agents' own shell backend uses; 125 when airlock could not run or report it),
//     followed by what became of the sandbox: kept with its files, or reset (replaced, every
//     file written earlier in the conversation gone).
//   - Output past maxOutputBytes is dropped whole (`outputOverflow: "drop"`, the seeds'
//     behaviour), or rendered head and tail around a "... [N lines truncated] ..." marker
//     (`"head_tail"`, the way Deep Agents previews a result too large to show), streamed
//     from the daemon so that the adapter holds at most the head and the tail.
//   - uploadFiles()/downloadFiles() answer each file in order, with Deep Agents' codes
//     (file_not_found, permission_denied, is_directory, invalid_path) for a refused path and a
//     fixed sentence for a cap or a failure (Deep Agents shows either to the model verbatim).
//   - Caps come from the spec: files_in/files_out max_files (a batch over it is refused whole),
//     max_bytes_per_file, max_total_bytes (a file past them is refused alone, never truncated).
//   - id is an opaque hash of what names the sandbox; close() disposes this conversation's
//     instance once every call over the key has left.
//   - As Deep Agents' sandbox providers do: execute(command, {timeout}) in seconds, failures to
//     set up or find a sandbox thrown as a SandboxError subclass (AirlockSandboxError) with
//     their codes, and a lookup by id (fromId, getOrCreate({sandboxId})) — the id being the
//     daemon's handle.
//   - Snapshots, which Deep Agents itself never asks for (its protocol has no persistence hook
//     for a sandbox; a LangGraph checkpointer saves the agent's state, not the sandbox's):
//     snapshot() saves the sandbox and returns the snapshot's id, and create({fromSnapshot})
//     starts a sandbox from one — the host stores the id beside its checkpoint and pairs them.
import { createHash } from "node:crypto";
import { posix } from "node:path";

import { BaseSandbox, SandboxError } from "deepagents";

import { AirlockClient, AirlockTransportError } from "./client.js";

export { AirlockClient, AirlockReply, AirlockTransportError } from "./client.js";

/** The kind a Deep Agents sandbox is keyed under: never shared with a packaged kind. */
export const DEEPAGENTS_KIND = "deepagents";
/** A shell, files in (write_file, edit_file), files out (read of non-text, edit_file). */
export const REQUIRED_CAPABILITIES = Object.freeze(["exec", "files_in", "files_out"]);
export const DEFAULT_WORK_DIR = "/maf-sandbox/work";
export const DEFAULT_EXEC_TIMEOUT_MS = 120_000;
/** Combined stdout+stderr per command, enforced by the backend before it buffers. */
export const DEFAULT_MAX_OUTPUT_BYTES = 1_048_576;
export const DEFAULT_TRANSFER_LIMITS = Object.freeze({
  max_bytes_per_file: 8 * 1024 * 1024,
  max_total_bytes: 32 * 1024 * 1024,
  max_files: 64,
});

/** How an output past maxOutputBytes reaches the model. */
export const OUTPUT_OVERFLOW_MODES = Object.freeze(["drop", "head_tail"]);
/** head_tail: how much a command may print before the rest goes unread (the daemon's ceiling). */
export const DEFAULT_HEAD_TAIL_CEILING_BYTES = 16 * 1024 * 1024;

/** Exit codes of the answers airlock gives in the program's place. */
export const EXIT_TIMEOUT = 124;
export const EXIT_AIRLOCK = 125;

// What the model reads when airlock, not the program, answers. Fixed sentences: a provider's
// own message can carry an endpoint or a tenant, and a tool result is kept in the transcript.
export const SANDBOX_UNAVAILABLE = "Error: sandbox unavailable — the command did not run.";
const TIMED_OUT = (seconds) => `Error: the command did not finish within ${seconds} seconds.`;
const EXEC_FAILED = "Error: the sandbox did not return the command's result; see the host log.";
const OUTPUT_DROPPED = (limit) => `Error: the command's output exceeded ${limit} bytes and was dropped.`;
// What became of the sandbox after a command that did not end by itself.
export const SANDBOX_KEPT =
  "The command was stopped and every process it started is gone; the sandbox is intact, with every file written earlier in this conversation.";
export const SANDBOX_RESET =
  "The sandbox was reset: the command's end could not be confirmed, so the sandbox was replaced by a fresh one, and every file written earlier in this conversation is gone.";
const SANDBOX_MAYBE_RESET =
  "airlock stopped waiting for it; if the command's end could not be confirmed, the sandbox was reset and the files written earlier in this conversation are gone.";
const UNREAD_PAST = (ceiling) => `[output past ${ceiling} bytes was not read]`;
const NOT_A_COMMAND = "Error: Command must be a non-empty string.";
const UPLOAD_FAILED = "upload failed; see the host log";
const DOWNLOAD_FAILED = "download failed; see the host log";
const UPLOAD_BATCH_LOST = "the sandbox is condemned after a write did not finish; the batch did not land";
const TOO_MANY_FILES = (direction) => `the batch has more files than ${direction}.max_files allows`;
const OVER_FILE_CAP = (direction) => `the file is larger than ${direction}.max_bytes_per_file`;
const OVER_TOTAL_CAP = (direction) => `the batch would exceed ${direction}.max_total_bytes`;
const DOWNLOAD_BATCH_LOST =
  "the sandbox is condemned after a read did not finish; the rest of the batch was not read";

const BAD_TIMEOUT = "Error: timeout must be a positive number of seconds; the command did not run.";

const AIRLOCK_SANDBOX_ERROR = Symbol.for("airlock.sandbox.error");

/**
 * What create(), initialize(), fromId() and getOrCreate() throw: Deep Agents' SandboxError (so
 * `instanceof SandboxError` and `SandboxError.isInstance` hold), with a code from
 * SandboxErrorCode or one its providers use (SANDBOX_NOT_FOUND, SANDBOX_CREATION_FAILED,
 * AUTHENTICATION_FAILED) or DAEMON_UNREACHABLE / SANDBOX_INCOMPATIBLE, and the daemon's own
 * error type, check and HTTP status when it answered.
 */
export class AirlockSandboxError extends SandboxError {
  [AIRLOCK_SANDBOX_ERROR] = true;
  name = "AirlockSandboxError";

  constructor(message, code, cause, { type, check, status } = {}) {
    super(message, code, cause);
    // SandboxError pins its own prototype; a subclass puts its own back.
    Object.setPrototypeOf(this, AirlockSandboxError.prototype);
    this.code = code;
    this.cause = cause;
    if (type !== undefined) this.type = type;
    if (check !== undefined) this.check = check;
    if (status !== undefined) this.status = status;
  }

  static isInstance(error) {
    return typeof error === "object" && error !== null && error[AIRLOCK_SANDBOX_ERROR] === true;
  }
}

/** A daemon answer that is not what was asked for, as an AirlockSandboxError. */
function refusal(what, reply, code) {
  const error = reply.error() ?? { type: "HTTP", message: `status ${reply.status}` };
  const chosen = reply.status === 401 ? "AUTHENTICATION_FAILED" : code;
  return new AirlockSandboxError(`${what}: ${error.type}: ${error.message}`, chosen, undefined, {
    type: error.type,
    check: error.check,
    status: reply.status,
  });
}

/** A request that got no answer, as an AirlockSandboxError; anything else is rethrown. */
function unreachable(what, error) {
  if (error instanceof AirlockTransportError) {
    return new AirlockSandboxError(`${what}: ${error.message}`, "DAEMON_UNREACHABLE", error);
  }
  return error;
}

/** execute()'s {timeout} (seconds) as milliseconds; null when it is not a positive number. */
function timeoutMillis(options, fallbackMs) {
  if (options === undefined || options === null || options.timeout === undefined) return fallbackMs;
  const seconds = options.timeout;
  if (typeof seconds !== "number" || !Number.isFinite(seconds) || seconds <= 0) return null;
  return Math.max(1, Math.round(seconds * 1000));
}

const SNAPSHOT_ID = /^snap-[0-9a-f]{24}$/;

function checkSnapshotId(id, what) {
  if (typeof id !== "string" || !SNAPSHOT_ID.test(id)) {
    throw new TypeError(`${what} must be a snapshot id, "snap-" and 24 hex digits (what snapshot() returns)`);
  }
  return id;
}

const REFUSAL_CODES = new Set(["file_not_found", "permission_denied", "is_directory", "invalid_path"]);
// How long past a command's own deadline the HTTP wait lasts before it is given up.
const TRANSPORT_GRACE_MS = 10_000;

/**
 * The spec a Deep Agents sandbox asks for. Egress is derived, never passed: named hosts run
 * `allowlist` with those hosts, none runs `closed`. An open network is not expressible, because
 * the model writes the commands.
 */
export function deepagentsSpec({
  image,
  egressAllow = [],
  workDir = DEFAULT_WORK_DIR,
  filesIn = DEFAULT_TRANSFER_LIMITS,
  filesOut = DEFAULT_TRANSFER_LIMITS,
  minIsolation,
  kind = DEEPAGENTS_KIND,
  resources,
} = {}) {
  const spec = {
    kind,
    egress: egressAllow.length > 0 ? "allowlist" : "closed",
    egress_allow: [...egressAllow],
    work_dir: workDir,
    requires: [...REQUIRED_CAPABILITIES],
    files_in: { ...filesIn },
    files_out: { ...filesOut },
  };
  if (image !== undefined) spec.image = image;
  if (minIsolation !== undefined) spec.min_isolation = minIsolation;
  if (resources !== undefined) spec.resources = { ...resources };
  return spec;
}

function checkKey(key) {
  if (!key || typeof key !== "object") throw new TypeError("key must be {scope, thread_id, agent_dir}");
  for (const field of Object.keys(key)) {
    if (!["scope", "thread_id", "agent_dir"].includes(field)) {
      throw new TypeError(`key.${field} is not a key field (scope, thread_id, agent_dir)`);
    }
  }
  if (typeof key.scope !== "string" || key.scope === "") throw new TypeError("key.scope must be a non-empty string");
  for (const field of ["thread_id", "agent_dir"]) {
    if (key[field] !== undefined && typeof key[field] !== "string") {
      throw new TypeError(`key.${field} must be a string`);
    }
  }
  return { scope: key.scope, thread_id: key.thread_id ?? "", agent_dir: key.agent_dir ?? "" };
}

function checkSpec(spec) {
  if (!spec || typeof spec !== "object" || typeof spec.kind !== "string" || spec.kind === "") {
    throw new TypeError("spec must be an object with a kind; build it with deepagentsSpec()");
  }
  const requires = new Set(spec.requires ?? ["exec", "files_in"]);
  const missing = REQUIRED_CAPABILITIES.filter((capability) => !requires.has(capability));
  if (missing.length > 0) {
    throw new TypeError(
      `the '${spec.kind}' spec does not require ${missing.join(", ")}, which Deep Agents' execute, ` +
        "write and download tools need; build it with deepagentsSpec()",
    );
  }
  if (spec.egress === "unrestricted") {
    throw new TypeError(
      "spec.egress must be closed or allowlist: the model writes the commands, so an open network " +
        "is not a posture this sandbox takes",
    );
  }
  const workDir = spec.work_dir ?? DEFAULT_WORK_DIR;
  if (typeof workDir !== "string" || !workDir.startsWith("/") || workDir.includes("\0")) {
    throw new TypeError("spec.work_dir must be an absolute guest path: the model is told where its files are");
  }
  return {
    workDir: posix.normalize(workDir),
    filesIn: spec.files_in ?? DEFAULT_TRANSFER_LIMITS,
    filesOut: spec.files_out ?? DEFAULT_TRANSFER_LIMITS,
  };
}

function positiveInteger(value, what) {
  if (!Number.isSafeInteger(value) || value <= 0) throw new TypeError(`${what} must be a positive integer`);
  return value;
}

/** The sentence for what became of the sandbox, from the daemon's error object. */
function sandboxFate(error) {
  const reset = error?.sandbox_reset ?? error?.condemned;
  if (reset === true) return SANDBOX_RESET;
  if (reset === false) return SANDBOX_KEPT;
  return SANDBOX_MAYBE_RESET;
}

/** One combined stream, as Deep Agents' own shell backend renders it. */
function render(result) {
  const stdout = result.stdout_base64 !== undefined
    ? Buffer.from(result.stdout_base64, "base64").toString("utf8")
    : result.stdout ?? "";
  const stderr = result.stderr_base64 !== undefined
    ? Buffer.from(result.stderr_base64, "base64").toString("utf8")
    : result.stderr ?? "";
  return combine(stdout, stderr);
}

function combine(stdout, stderr) {
  const parts = [];
  if (stdout) parts.push(stdout);
  if (stderr) parts.push(...stderr.trim().split("\n").map((line) => `[stderr] ${line}`));
  return parts.length > 0 ? parts.join("\n") : "<no output>";
}

/**
 * One output stream seen through a window: the first `keep` bytes and the last `keep` bytes,
 * whatever passes in between (counted, not kept).
 */
class HeadTail {
  constructor(keep) {
    this.keep = keep;
    this.head = [];
    this.headBytes = 0;
    this.tail = [];
    this.tailBytes = 0;
    this.total = 0;
    this.newlines = 0;
  }

  add(chunk) {
    this.total += chunk.length;
    for (const byte of chunk) if (byte === 0x0a) this.newlines += 1;
    let rest = chunk;
    if (this.headBytes < this.keep) {
      const take = rest.subarray(0, this.keep - this.headBytes);
      this.head.push(take);
      this.headBytes += take.length;
      rest = rest.subarray(take.length);
    }
    if (rest.length === 0) return;
    this.tail.push(rest);
    this.tailBytes += rest.length;
    while (this.tail.length > 1 && this.tailBytes - this.tail[0].length >= this.keep) {
      this.tailBytes -= this.tail.shift().length;
    }
  }

  /** All of it, when nothing between head and tail went unkept. */
  whole() {
    return this.total <= 2 * this.keep ? Buffer.concat([...this.head, ...this.tail]) : null;
  }

  /**
   * Within `budget` bytes: everything when it fits; otherwise the head and the tail, each cut at
   * a line boundary where one is near, around a marker naming the lines left out.
   */
  render(budget) {
    const all = Buffer.concat([...this.head, ...this.tail]);
    if (this.total <= budget && this.total <= 2 * this.keep) return { text: all.toString("utf8"), cut: false };
    const half = Math.max(0, Math.floor(budget / 2));
    let head = Buffer.concat(this.head).subarray(0, half);
    const headBreak = head.lastIndexOf(0x0a);
    if (headBreak >= half / 2) head = head.subarray(0, headBreak + 1);
    const kept = Buffer.concat(this.tail);
    let tail = kept.subarray(Math.max(0, kept.length - half));
    const tailBreak = tail.indexOf(0x0a);
    if (tailBreak >= 0 && tailBreak < half / 2 && tailBreak < tail.length - 1) tail = tail.subarray(tailBreak + 1);
    const count = (bytes) => bytes.reduce((n, byte) => n + (byte === 0x0a ? 1 : 0), 0);
    const omitted = Math.max(0, this.newlines - count(head) - count(tail));
    const headText = head.toString("utf8");
    const separator = headText === "" || headText.endsWith("\n") ? "" : "\n";
    return { text: `${headText}${separator}... [${omitted} lines truncated] ...\n${tail.toString("utf8")}`, cut: true };
  }
}

/** The budget split between two streams: each gets what it needs, up to a fair share. */
function shares(budget, sizes) {
  const [a, b] = sizes;
  if (a + b <= budget) return [a, b];
  const half = Math.floor(budget / 2);
  if (a <= half) return [a, budget - a];
  if (b <= half) return [budget - b, b];
  return [half, budget - half];
}

export class AirlockSandbox extends BaseSandbox {
  #client;
  #key;
  #spec;
  #workDir;
  #filesIn;
  #filesOut;
  #execTimeoutMs;
  #maxOutputBytes;
  #outputOverflow;
  #headTailCeilingBytes;
  #id;
  #handle = null;
  #instanceId = null;
  #closed = false;
  #log;
  // The snapshot the first acquire resumes from (fromSnapshot); null once it has.
  #fromSnapshot = null;

  /**
   * Prefer `AirlockSandbox.create()`, which asks the daemon whether it can serve the spec before
   * any agent is built.
   */
  constructor({
    client,
    key,
    spec,
    backend,
    execTimeoutMs = DEFAULT_EXEC_TIMEOUT_MS,
    maxOutputBytes = DEFAULT_MAX_OUTPUT_BYTES,
    outputOverflow = "drop",
    headTailCeilingBytes = DEFAULT_HEAD_TAIL_CEILING_BYTES,
    log = console,
    fromSnapshot,
  }) {
    super();
    if (fromSnapshot !== undefined) this.#fromSnapshot = checkSnapshotId(fromSnapshot, "fromSnapshot");
    if (!(client instanceof AirlockClient)) throw new TypeError("client must be an AirlockClient");
    this.#client = client;
    this.#key = checkKey(key);
    const checked = checkSpec(spec);
    this.#spec = { ...spec, work_dir: checked.workDir };
    this.#workDir = checked.workDir;
    this.#filesIn = checked.filesIn;
    this.#filesOut = checked.filesOut;
    this.#execTimeoutMs = positiveInteger(execTimeoutMs, "execTimeoutMs");
    this.#maxOutputBytes = positiveInteger(maxOutputBytes, "maxOutputBytes");
    if (!OUTPUT_OVERFLOW_MODES.includes(outputOverflow)) {
      throw new TypeError(`outputOverflow must be one of ${OUTPUT_OVERFLOW_MODES.join(", ")}`);
    }
    this.#outputOverflow = outputOverflow;
    this.#headTailCeilingBytes = positiveInteger(headTailCeilingBytes, "headTailCeilingBytes");
    if (outputOverflow === "head_tail" && this.#headTailCeilingBytes < this.#maxOutputBytes) {
      throw new TypeError("headTailCeilingBytes must be at least maxOutputBytes");
    }
    this.#log = log;
    // Opaque, because Deep Agents may show it to the model and a scope is often a tenant; stable,
    // because two adapters over one key, kind, backend and posture reach one sandbox.
    const identity = [
      client.endpoint,
      backend ?? "",
      this.#key.scope,
      this.#key.thread_id,
      this.#key.agent_dir,
      this.#spec.kind,
      this.#spec.egress ?? "closed",
      [...(this.#spec.egress_allow ?? [])].sort(),
    ];
    this.#id = `airlock-${createHash("sha256").update(JSON.stringify(identity)).digest("hex").slice(0, 16)}`;
  }

  /**
   * Checks the spec with the daemon (every router check; nothing is acquired) and returns the
   * sandbox. Throws when the daemon refuses the spec or cannot be reached: a misconfigured host
   * fails here, before an agent is built, not on the model's first command.
   *
   * With `fromSnapshot` (an id snapshot() returned), the sandbox is resumed from that snapshot
   * now — the spec checked with `snapshot` required, then acquired — so a snapshot that is not
   * this conversation's throws here (SNAPSHOT_NOT_FOUND) instead of a fresh sandbox starting
   * in its place.
   *
   * @param {object} options
   * @param {string} [options.socketPath] the daemon's unix socket (or pass `client`)
   * @param {AirlockClient} [options.client]
   * @param {{scope: string, thread_id?: string, agent_dir?: string}} options.key from the host's request context
   * @param {object} [options.spec] default deepagentsSpec()
   * @param {string} [options.fromSnapshot] a snapshot of this conversation to start from
   */
  static async create({ socketPath, client, key, spec = deepagentsSpec(), fromSnapshot, ...rest } = {}) {
    const reach = client ?? new AirlockClient({ socketPath });
    checkKey(key);
    checkSpec(spec);
    if (fromSnapshot !== undefined) checkSnapshotId(fromSnapshot, "fromSnapshot");
    // A resume is judged with `snapshot` required: a backend that takes none is refused here.
    const judged = fromSnapshot === undefined ? spec : { ...spec, requires: [...new Set([...(spec.requires ?? ["exec", "files_in"]), "snapshot"])] };
    let reply;
    try {
      reply = await reach.request("POST", "/v1/check", { json: { spec: judged }, timeoutMs: 30_000 });
    } catch (error) {
      throw unreachable("airlockd could not check the spec", error);
    }
    if (reply.status !== 200) throw refusal("airlockd refused the spec", reply, "SANDBOX_CREATION_FAILED");
    const backend = reply.json()?.decision?.backend ?? "";
    const sandbox = new AirlockSandbox({ client: reach, key, spec, backend, fromSnapshot, ...rest });
    if (fromSnapshot !== undefined) await sandbox.initialize();
    return sandbox;
  }

  /**
   * The sandbox the daemon handle `sandboxId` names (`sandbox.handle` of an acquired sandbox),
   * under the key and spec it was acquired with; nothing is created. The daemon answers for
   * the holder of the handle (GET /v1/sandboxes/{handle}). Throws AirlockSandboxError:
   * SANDBOX_NOT_FOUND when the daemon knows no such handle (never acquired, disposed, purged),
   * SANDBOX_INCOMPATIBLE when its spec is no Deep Agents sandbox, DAEMON_UNREACHABLE.
   *
   * @param {string} sandboxId
   * @param {object} [options] as for create(), without key and spec
   */
  static async fromId(sandboxId, { socketPath, client, ...rest } = {}) {
    if (typeof sandboxId !== "string" || !/^sbx-[0-9a-f]{32}$/.test(sandboxId)) {
      throw new AirlockSandboxError(
        "a sandbox id is the daemon's handle, \"sbx-\" and 32 hex digits (sandbox.handle)",
        "SANDBOX_NOT_FOUND",
      );
    }
    const reach = client ?? new AirlockClient({ socketPath });
    let reply;
    try {
      reply = await reach.request("GET", `/v1/sandboxes/${sandboxId}`, { timeoutMs: 30_000 });
    } catch (error) {
      throw unreachable("airlockd could not look the sandbox up", error);
    }
    if (reply.status !== 200) {
      throw refusal(`no sandbox ${sandboxId}`, reply, reply.status === 404 ? "SANDBOX_NOT_FOUND" : "COMMAND_FAILED");
    }
    const record = reply.json();
    let sandbox;
    try {
      sandbox = new AirlockSandbox({ client: reach, key: record?.key, spec: record?.spec, backend: record?.backend, ...rest });
    } catch (error) {
      if (!(error instanceof TypeError) || !record?.key || !record?.spec) throw error;
      throw new AirlockSandboxError(`sandbox ${sandboxId} is not a Deep Agents sandbox: ${error.message}`, "SANDBOX_INCOMPATIBLE", error);
    }
    sandbox.#handle = record.sandbox;
    sandbox.#note(record.instance_id);
    return sandbox;
  }

  /**
   * Deep Agents' get-or-create: with `sandboxId`, fromId() — an id the daemon does not know is
   * SANDBOX_NOT_FOUND, never a fresh sandbox; without it, create() and initialize(), so the
   * sandbox exists and `handle` is the id to look it up by later.
   */
  static async getOrCreate({ sandboxId, key, spec, fromSnapshot, ...rest } = {}) {
    if (sandboxId !== undefined) return AirlockSandbox.fromId(sandboxId, rest);
    const sandbox = await AirlockSandbox.create({ key, spec, fromSnapshot, ...rest });
    await sandbox.initialize();
    return sandbox;
  }

  /**
   * Acquires the sandbox now (get-or-create; the daemon answers the same handle for the same
   * key), rather than on the first operation — resuming it from `fromSnapshot` when one was
   * given and not yet resumed. Idempotent. Throws AirlockSandboxError: SANDBOX_CREATION_FAILED
   * when the daemon refuses the acquire, SNAPSHOT_NOT_FOUND when `fromSnapshot` is no snapshot
   * of this conversation (another's is not told apart from none), DAEMON_UNREACHABLE.
   */
  async initialize() {
    const resuming = this.#fromSnapshot;
    let reply;
    try {
      reply = await this.#client.request("POST", "/v1/sandboxes", {
        json: this.#acquireBody(),
        timeoutMs: this.#execTimeoutMs + TRANSPORT_GRACE_MS,
      });
    } catch (error) {
      throw unreachable("airlockd could not acquire the sandbox", error);
    }
    if (reply.status !== 200 && reply.status !== 201) {
      if (resuming !== null && reply.status === 404) {
        throw refusal(`no snapshot ${resuming} in this conversation`, reply, "SNAPSHOT_NOT_FOUND");
      }
      throw refusal(resuming !== null ? "airlockd refused the resume" : "airlockd refused the acquire", reply, "SANDBOX_CREATION_FAILED");
    }
    this.#adopt(reply.json());
  }

  /**
   * Saves this sandbox — its files (and memory, where the backend saves it) — and returns the
   * snapshot's id ("snap-" + 24 hex digits). The daemon takes it exclusively: it waits for the
   * calls in flight over this conversation's sandbox and starts none until it is saved, so a
   * command is never cut off. The snapshot belongs to this conversation (the key's scope and
   * thread): create({key, fromSnapshot: id}) under a key of the same conversation resumes it
   * — or, under another agent_dir, forks it — and every other conversation is told it does not
   * exist. Store the id beside the LangGraph checkpoint it goes with.
   * Throws AirlockSandboxError: SNAPSHOT_NOT_SUPPORTED (the router or the backend takes no
   * snapshots: `check` names why), SNAPSHOT_FAILED (the daemon answered otherwise: `type`,
   * `status`), DAEMON_UNREACHABLE, AUTHENTICATION_FAILED.
   */
  async snapshot() {
    let reply;
    try {
      reply = await this.#call("POST", "/snapshots", { timeoutMs: this.#execTimeoutMs + TRANSPORT_GRACE_MS });
    } catch (error) {
      throw unreachable("airlockd could not snapshot the sandbox", error);
    }
    if (reply === null) {
      throw new AirlockSandboxError("the sandbox could not be acquired to snapshot it (see the host log)", "SNAPSHOT_FAILED");
    }
    if (reply.status !== 201) {
      const code = reply.status === 403 || reply.status === 501 ? "SNAPSHOT_NOT_SUPPORTED" : "SNAPSHOT_FAILED";
      throw refusal("airlockd did not snapshot the sandbox", reply, code);
    }
    const body = reply.json();
    this.#note(body?.instance_id);
    return body.snapshot.id;
  }

  get id() {
    return this.#id;
  }

  get isRunning() {
    return this.#handle !== null && !this.#closed;
  }

  /** The daemon's handle once acquired (for a host's logs; never shown to a model). */
  get handle() {
    return this.#handle;
  }

  /** The instance the last call reached. */
  get instanceId() {
    return this.#instanceId;
  }

  get workDir() {
    return this.#workDir;
  }

  #insideBase(path) {
    if (!path.startsWith("/")) return true;
    const normalized = posix.normalize(path);
    return normalized === this.#workDir || normalized.startsWith(this.#workDir === "/" ? "/" : `${this.#workDir}/`);
  }

  /**
   * Inside the work directory a path goes through the daemon's file plane, which refuses a
   * link anywhere in it; outside (Deep Agents' /conversation_history, /tmp) through the shell
   * roads — bounded commands running as the guest, which widen nothing execute had not opened.
   */
  #road(path) {
    return this.#insideBase(path) ? {} : { road: "shell", timeout_ms: this.#execTimeoutMs };
  }

  #note(instanceId) {
    if (typeof instanceId === "string" && instanceId) this.#instanceId = instanceId;
  }

  /** Get-or-create the sandbox; the handle is cached (it is stable for this key and spec). */
  async #acquire(timeoutMs) {
    const reply = await this.#client.request("POST", "/v1/sandboxes", {
      json: this.#acquireBody(),
      timeoutMs,
    });
    if (reply.status !== 200 && reply.status !== 201) {
      const error = reply.error();
      this.#log.warn?.(`${this.#id}: acquire refused (${reply.status} ${error?.type}): ${error?.message}`);
      return null;
    }
    this.#adopt(reply.json());
    return this.#handle;
  }

  /** The acquire's body: a resume from fromSnapshot until one has landed. */
  #acquireBody() {
    const body = { key: this.#key, spec: this.#spec };
    if (this.#fromSnapshot !== null) body.from_snapshot = this.#fromSnapshot;
    return body;
  }

  #adopt(body) {
    this.#handle = body.sandbox;
    this.#closed = false;
    // Resumed once: a later acquire (after a purge, say) is a plain get-or-create.
    if (body.from_snapshot !== undefined) this.#fromSnapshot = null;
    this.#note(body.instance_id);
  }

  /**
   * A call on the handle; when the daemon no longer knows the handle (the host purged the
   * conversation), the sandbox is acquired again — get-or-create starts it cold — and the call
   * is made once more. Nothing ran on a 404, so the retry cannot run a command twice.
   */
  async #call(method, suffix, options) {
    if (this.#handle === null && (await this.#acquire(options.timeoutMs ?? 30_000)) === null) return null;
    let reply = await this.#client.request(method, `/v1/sandboxes/${this.#handle}${suffix}`, options);
    if (reply.status === 404 && reply.error()?.type === "SandboxHandleNotFound") {
      if ((await this.#acquire(options.timeoutMs ?? 30_000)) === null) return null;
      reply = await this.#client.request(method, `/v1/sandboxes/${this.#handle}${suffix}`, options);
    }
    return reply;
  }

  // ---- execute --------------------------------------------------------------------------------

  /**
   * Runs `command` as a shell line in the work dir. `options.timeout` (seconds, as Deep Agents'
   * providers take it) replaces execTimeoutMs for this command. Never throws.
   */
  async execute(command, options) {
    if (typeof command !== "string" || command === "") {
      return { output: NOT_A_COMMAND, exitCode: 1, truncated: false };
    }
    const timeoutMs = timeoutMillis(options, this.#execTimeoutMs);
    if (timeoutMs === null) return { output: BAD_TIMEOUT, exitCode: 1, truncated: false };
    try {
      if (this.#outputOverflow === "head_tail") return await this.#executeHeadTail(command, timeoutMs);
      const reply = await this.#call("POST", "/exec", {
        json: {
          shell: command,
          timeout_ms: timeoutMs,
          max_output_bytes: this.#maxOutputBytes,
          overflow: "refuse",
        },
        timeoutMs: timeoutMs + TRANSPORT_GRACE_MS,
      });
      if (reply === null) return { output: SANDBOX_UNAVAILABLE, exitCode: EXIT_AIRLOCK, truncated: false };
      const body = reply.json();
      if (reply.status === 200 && body?.result) {
        this.#note(body.instance_id);
        const output = render(body.result);
        // The prefixes grow the stream: what reaches the model is held to the same budget.
        if (Buffer.byteLength(output, "utf8") > this.#maxOutputBytes) {
          return { output: OUTPUT_DROPPED(this.#maxOutputBytes), exitCode: EXIT_AIRLOCK, truncated: true };
        }
        return { output, exitCode: body.result.exit_code, truncated: false };
      }
      return this.#failure(reply.status, reply.error(), timeoutMs);
    } catch (error) {
      return this.#thrown(error, timeoutMs);
    }
  }

  /** A command that did not answer with a result, as the model reads it. */
  #failure(status, error, timeoutMs) {
    const refused = error ?? {};
    if (typeof refused.instance_id === "string" && refused.sandbox_reset === false) this.#note(refused.instance_id);
    const seconds = timeoutMs / 1000;
    switch (refused.type) {
      case "Timeout":
        return { output: `${TIMED_OUT(seconds)} ${sandboxFate(refused)}`, exitCode: EXIT_TIMEOUT, truncated: false };
      case "SandboxQueuedTimeout":
        // Nothing ran: the sandbox is as it was.
        return { output: TIMED_OUT(seconds), exitCode: EXIT_TIMEOUT, truncated: false };
      case "SandboxExecOutputLimitExceeded":
        return {
          output: `${OUTPUT_DROPPED(this.#maxOutputBytes)} ${sandboxFate(refused)}`,
          exitCode: EXIT_AIRLOCK,
          truncated: true,
        };
      default:
        break;
    }
    this.#log.warn?.(`${this.#id}: exec answered ${status} ${refused.type}: ${refused.message}`);
    if (status >= 500 && status !== 503) {
      const fate = refused.sandbox_reset === true || refused.condemned === true ? ` ${SANDBOX_RESET}` : "";
      return { output: `${EXEC_FAILED}${fate}`, exitCode: EXIT_AIRLOCK, truncated: false };
    }
    return { output: SANDBOX_UNAVAILABLE, exitCode: EXIT_AIRLOCK, truncated: false };
  }

  #thrown(error, timeoutMs) {
    if (error instanceof AirlockTransportError && error.timedOut) {
      // The wait was given up and the connection closed: the daemon stops the command, and
      // keeps or condemns the instance by whether the backend confirms the kill.
      return {
        output: `${TIMED_OUT(timeoutMs / 1000)} ${SANDBOX_MAYBE_RESET}`,
        exitCode: EXIT_TIMEOUT,
        truncated: false,
      };
    }
    this.#log.warn?.(`${this.#id}: exec failed: ${error?.message ?? error}`);
    return { output: error instanceof AirlockTransportError ? SANDBOX_UNAVAILABLE : EXEC_FAILED, exitCode: EXIT_AIRLOCK, truncated: false };
  }

  /**
   * head_tail: the command's output streamed, each stream held to its first and last
   * maxOutputBytes/2 bytes, rendered whole when it fits and head and tail around a marker when
   * it does not. The daemon's ceiling (headTailCeilingBytes, overflow "truncate") bounds what
   * is read; the command runs to its end either way.
   */
  async #executeHeadTail(command, timeoutMs) {
    const body = {
      shell: command,
      timeout_ms: timeoutMs,
      max_output_bytes: this.#headTailCeilingBytes,
      overflow: "truncate",
    };
    const options = { timeoutMs: timeoutMs + TRANSPORT_GRACE_MS };
    const keep = Math.max(1, Math.floor(this.#maxOutputBytes / 2));
    for (let attempt = 0; attempt < 2; attempt += 1) {
      if (this.#handle === null && (await this.#acquire(30_000)) === null) {
        return { output: SANDBOX_UNAVAILABLE, exitCode: EXIT_AIRLOCK, truncated: false };
      }
      const streams = { stdout: new HeadTail(keep), stderr: new HeadTail(keep) };
      let last = null;
      for await (const event of this.#client.execStream(this.#handle, body, options)) {
        if (event.type === "output") streams[event.stream === "stderr" ? "stderr" : "stdout"].add(event.data);
        else last = event;
      }
      if (last?.status === 404 && last.error?.type === "SandboxHandleNotFound" && attempt === 0) {
        // Nothing ran on a 404: acquire again (get-or-create starts it cold) and ask once more.
        this.#handle = null;
        continue;
      }
      if (last?.type !== "result") return this.#failure(last?.status ?? 502, last?.error, timeoutMs);
      this.#note(last.instance_id);
      return this.#renderHeadTail(streams, last.result);
    }
    return { output: SANDBOX_UNAVAILABLE, exitCode: EXIT_AIRLOCK, truncated: false };
  }

  #renderHeadTail({ stdout, stderr }, result) {
    // The [stderr] prefixes grow the text; a budget leaves room for them.
    const budget = this.#maxOutputBytes;
    const wholeOut = stdout.whole();
    const wholeErr = stderr.whole();
    if (wholeOut !== null && wholeErr !== null && !result.truncated) {
      const output = combine(wholeOut.toString("utf8"), wholeErr.toString("utf8"));
      if (Buffer.byteLength(output, "utf8") <= budget) return { output, exitCode: result.exit_code, truncated: false };
    }
    // The markers and the [stderr] prefixes grow the text: the windows shrink until it fits.
    const note = result.truncated ? `\n${UNREAD_PAST(this.#headTailCeilingBytes)}` : "";
    let room = budget - Buffer.byteLength(note, "utf8");
    let output = "";
    for (let attempt = 0; attempt < 8; attempt += 1) {
      const [outShare, errShare] = shares(Math.max(0, room), [stdout.total, stderr.total]);
      output = combine(stdout.render(outShare).text, stderr.render(errShare).text) + note;
      const over = Buffer.byteLength(output, "utf8") - budget;
      if (over <= 0) break;
      room -= over + 16;
    }
    return { output, exitCode: result.exit_code, truncated: true };
  }

  // ---- files in -------------------------------------------------------------------------------

  async uploadFiles(files) {
    if (!Array.isArray(files) || files.length === 0) return [];
    const limits = this.#filesIn;
    if (files.length > limits.max_files) {
      return files.map(([path]) => ({ path, error: TOO_MANY_FILES("files_in") }));
    }
    const responses = [];
    let sent = 0;
    for (let index = 0; index < files.length; index += 1) {
      const [path, content] = files[index];
      let error = null;
      try {
        if (typeof path !== "string" || path === "" || path.includes("\0")) {
          error = "invalid_path";
        } else if (!(content instanceof Uint8Array)) {
          error = UPLOAD_FAILED;
        } else if (content.byteLength > limits.max_bytes_per_file) {
          error = OVER_FILE_CAP("files_in");
        } else if (sent + content.byteLength > limits.max_total_bytes) {
          error = OVER_TOTAL_CAP("files_in");
        } else {
          const reply = await this.#call("PUT", "/files", {
            query: { path, working_directory: this.#workDir, ...this.#road(path) },
            body: content,
            timeoutMs: this.#execTimeoutMs + TRANSPORT_GRACE_MS,
          });
          if (reply === null) {
            error = UPLOAD_FAILED;
          } else if (reply.status === 200) {
            this.#note(reply.json()?.instance_id);
          } else {
            const refused = reply.error() ?? {};
            if (refused.condemned) {
              // A write neither refused nor finished: the sandbox goes, and the batch with it.
              for (const [rest] of files.slice(index)) responses.push({ path: rest, error: UPLOAD_BATCH_LOST });
              return responses;
            }
            if (REFUSAL_CODES.has(refused.refusal)) error = refused.refusal;
            else if (reply.status === 413) error = OVER_FILE_CAP("files_in");
            else {
              this.#log.warn?.(`${this.#id}: upload answered ${reply.status} ${refused.type}: ${refused.message}`);
              error = UPLOAD_FAILED;
            }
          }
        }
      } catch (failure) {
        this.#log.warn?.(`${this.#id}: upload failed: ${failure?.message ?? failure}`);
        error = UPLOAD_FAILED;
      }
      if (error === null) sent += content.byteLength;
      responses.push({ path, error });
    }
    return responses;
  }

  // ---- files out ------------------------------------------------------------------------------

  async downloadFiles(paths) {
    if (!Array.isArray(paths) || paths.length === 0) return [];
    const limits = this.#filesOut;
    if (paths.length > limits.max_files) {
      return paths.map((path) => ({ path, content: null, error: TOO_MANY_FILES("files_out") }));
    }
    const responses = [];
    let room = limits.max_total_bytes;
    for (const path of paths) {
      // Read under the smaller of the per-file cap and what the batch has left; which cap that
      // is comes from the numbers handed down, never from a stat a growing file made stale.
      const cap = Math.min(limits.max_bytes_per_file, room);
      const overCap = cap === limits.max_bytes_per_file ? OVER_FILE_CAP("files_out") : OVER_TOTAL_CAP("files_out");
      let response;
      try {
        if (typeof path !== "string" || path === "" || path.includes("\0")) {
          response = { path, content: null, error: "invalid_path" };
        } else {
          const reply = await this.#call("GET", "/files", {
            query: { path, working_directory: this.#workDir, max_bytes: cap, ...this.#road(path) },
            timeoutMs: this.#execTimeoutMs + TRANSPORT_GRACE_MS,
          });
          if (reply === null) {
            response = { path, content: null, error: DOWNLOAD_FAILED };
          } else if (reply.status === 200) {
            this.#note(reply.headers["x-airlock-instance"]);
            response = reply.body.length > cap
              ? { path, content: null, error: overCap }
              : { path, content: new Uint8Array(reply.body.buffer, reply.body.byteOffset, reply.body.length), error: null };
          } else {
            const refused = reply.error() ?? {};
            if (refused.condemned) {
              // A shell read whose end is unknown: the sandbox goes, and the rest is not read.
              responses.push({ path, content: null, error: reply.status === 413 ? overCap : DOWNLOAD_BATCH_LOST });
              for (const rest of paths.slice(responses.length)) {
                responses.push({ path: rest, content: null, error: DOWNLOAD_BATCH_LOST });
              }
              return responses;
            }
            if (REFUSAL_CODES.has(refused.refusal)) response = { path, content: null, error: refused.refusal };
            else if (reply.status === 413) response = { path, content: null, error: overCap };
            else {
              this.#log.warn?.(`${this.#id}: download answered ${reply.status} ${refused.type}: ${refused.message}`);
              response = { path, content: null, error: DOWNLOAD_FAILED };
            }
          }
        }
      } catch (failure) {
        this.#log.warn?.(`${this.#id}: download failed: ${failure?.message ?? failure}`);
        response = { path, content: null, error: DOWNLOAD_FAILED };
      }
      if (response.content) room -= response.content.byteLength;
      responses.push(response);
    }
    return responses;
  }

  // ---- lifecycle ------------------------------------------------------------------------------

  /**
   * Dispose this conversation's sandbox: the daemon waits (exclusively) until every call over
   * the key has left and a delete one of them queued has run, then disposes the instance this
   * adapter last reached. True when nothing of it remains (also before any acquire, and when a
   * purge already took it). Never throws; false when the delete did not land. The host's
   * conversation-delete path (POST /v1/purge) is the backstop for a sandbox no close reached.
   */
  async close() {
    this.#closed = true;
    if (this.#handle === null) return true;
    try {
      const reply = await this.#client.request("DELETE", `/v1/sandboxes/${this.#handle}`, {
        query: { instance_id: this.#instanceId ?? undefined },
        timeoutMs: 60_000,
      });
      if (reply.status === 404) return true;
      if (reply.status !== 200) {
        const error = reply.error() ?? {};
        this.#log.warn?.(`${this.#id}: close answered ${reply.status} ${error.type}: ${error.message}`);
        return false;
      }
      return reply.json()?.disposed === true;
    } catch (failure) {
      this.#log.warn?.(`${this.#id}: close failed: ${failure?.message ?? failure}`);
      return false;
    }
  }
}
