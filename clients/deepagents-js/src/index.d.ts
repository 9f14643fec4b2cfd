/// <reference types="node" />
// Types for @airlock/deepagents (the implementation is ESM JavaScript in index.js and client.js).
// The wire-level types (the JSON bodies the adapter sends and reads) are checked against
// docs/api/openapi.yaml by test/openapi.test.mjs: types generated from the document at test time
// must be assignable to and from them, field for field.
import { BaseSandbox, SandboxError } from "deepagents";
import type {
  ExecuteResponse,
  FileDownloadResponse,
  FileUploadResponse,
  SandboxErrorCode,
  SandboxGetOrCreateOptions,
} from "deepagents";

/** What names a conversation's sandbox; from the host's request context — never from the model. */
export interface SandboxKey {
  scope: string;
  /** Default "" (every field is sent; an empty string is a value like any other). */
  thread_id?: string;
  /** Default "". */
  agent_dir?: string;
}

/** The key as the adapter sends it: every field present (OpenAPI SandboxKey). */
export interface WireSandboxKey {
  scope: string;
  thread_id: string;
  agent_dir: string;
}

export interface TransferLimits {
  max_bytes_per_file: number;
  max_total_bytes: number;
  max_files: number;
}

/** OpenAPI SandboxSpec.requires. */
export type Capability =
  | "exec"
  | "run_code"
  | "host_tools"
  | "files_in"
  | "files_out"
  | "files_list"
  | "files_delete"
  | "snapshot"
  | "attached_identity";

/** OpenAPI SandboxSpec.min_isolation. */
export type IsolationLevel = "none" | "runtime" | "os_process" | "container" | "hardened_container" | "microvm" | "vm";

/** OpenAPI DeclaredOutput. */
export interface DeclaredOutput {
  path: string;
  disposition?: "land" | "consume";
  media_type?: string | null;
  required?: boolean;
  name?: string | null;
}

export interface SandboxResources {
  memory_bytes?: number;
  pids?: number;
  cpu_millis?: number;
  disk_bytes?: number;
}

/** The JSON wire format of a spec (OpenAPI SandboxSpec). */
export interface SandboxSpec {
  kind: string;
  image?: string | null;
  image_id?: string | null;
  /** "unrestricted" is refused by this adapter: the model writes the commands. */
  egress?: "closed" | "allowlist" | "unrestricted";
  egress_allow?: string[];
  work_dir?: string;
  labels?: Record<string, string>;
  requires?: Capability[];
  min_isolation?: IsolationLevel | null;
  declared_outputs?: DeclaredOutput[];
  files_in?: TransferLimits;
  files_out?: TransferLimits;
  outputs_named_at_call_time?: boolean;
  identities?: Array<"app" | "user">;
  requires_os_family?: "posix" | "windows" | null;
  resources?: SandboxResources;
}

// ---- the JSON bodies the adapter sends and reads --------------------------------------------

/** POST /v1/check, request. */
export interface CheckRequestBody {
  spec: SandboxSpec;
}

/** OpenAPI RoutingDecision. */
export interface RoutingDecision {
  backend: string;
  backend_isolation?: string;
  effective_floor: string;
  passed: Array<{ check?: string; detail?: string }>;
}

/** POST /v1/check, 200. */
export interface CheckResponseBody {
  accepted: true;
  decision: RoutingDecision;
}

/** POST /v1/sandboxes (acquire), request. */
export interface AcquireRequestBody {
  key: WireSandboxKey;
  spec: SandboxSpec;
  /** A snapshot of the key's conversation to resume (or fork) the sandbox from. */
  from_snapshot?: string;
}

/** POST /v1/sandboxes, 200 and 201. */
export interface AcquireResponseBody {
  /** The handle. */
  sandbox: string;
  instance_id: string;
  decision: RoutingDecision;
  spec: SandboxSpec;
  /** The snapshot it was resumed from, when one was asked for. */
  from_snapshot?: string;
}

/** A sandbox's saved state (OpenAPI Snapshot). */
export interface Snapshot {
  /** "snap-" + 24 hex digits. */
  id: string;
  backend: string;
  content: "filesystem" | "filesystem+memory";
  kind: string;
  egress_posture: string;
  image: string;
  work_dir: string;
  /** Every value a digest ("sha256-" + 48 hex digits). */
  labels: Record<string, string>;
  source_instance_id: string;
  bytes: number;
  /** Unix seconds. */
  created_at: number;
}

/** POST /v1/sandboxes/{handle}/snapshots, 201: what snapshot() reads. */
export interface SnapshotResponseBody {
  sandbox: string;
  /** The instance saved. */
  instance_id: string;
  snapshot: Snapshot;
}

/** GET /v1/sandboxes/{handle}, 200 (OpenAPI Handle): what AirlockSandbox.fromId() reads. */
export interface HandleRecord {
  sandbox: string;
  backend: string;
  key: WireSandboxKey;
  kind: string;
  egress_posture: string;
  instance_id: string;
  created_at: number;
  spec: SandboxSpec;
}

/** DELETE /v1/sandboxes/{handle}, 200. */
export interface DisposeResponseBody {
  sandbox: string;
  instance_id: string;
  disposed: boolean;
  forgotten: boolean;
}

/** POST /v1/purge, request. */
export interface PurgeRequestBody {
  scope: string;
  thread_id?: string;
}

/** POST /v1/purge, 200. */
export interface PurgeResponseBody {
  disposed: number;
  handles_forgotten: number;
}

/** POST /v1/sandboxes/{handle}/exec and …/exec/stream, request (OpenAPI ExecRequest). */
export interface ExecRequestBody {
  argv?: string[];
  shell?: string;
  working_directory?: string;
  timeout_ms?: number;
  max_output_bytes?: number;
  overflow?: "refuse" | "truncate";
  stdin_base64?: string;
  environment?: Record<string, string>;
}

/** OpenAPI ExecResult. */
export interface ExecResult {
  stdout?: string;
  stderr?: string;
  stdout_base64?: string;
  stderr_base64?: string;
  exit_code: number;
  signal?: number;
  truncated: boolean;
}

/** POST /v1/sandboxes/{handle}/exec, 200. */
export interface ExecResponseBody {
  result: ExecResult;
  instance_id: string;
  duration_ms: number;
}

/** One NDJSON line of POST …/exec/stream (OpenAPI ExecStreamLine), before the client decodes it. */
export interface ExecStreamLine {
  type: "output" | "result" | "error";
  stream?: "stdout" | "stderr";
  data_base64?: string;
  status?: number;
  result?: ExecResult;
  instance_id?: string;
  duration_ms?: number;
  error?: Record<string, unknown>;
}

/** PUT /v1/sandboxes/{handle}/files, 200. */
export interface PutFileResponseBody {
  path: string;
  size_bytes: number;
  instance_id: string;
}

/** Every error answer (OpenAPI Error). */
export interface ErrorResponseBody {
  error: AirlockError;
}

export declare const DEEPAGENTS_KIND: "deepagents";
export declare const REQUIRED_CAPABILITIES: readonly ["exec", "files_in", "files_out"];
export declare const DEFAULT_WORK_DIR: string;
export declare const DEFAULT_EXEC_TIMEOUT_MS: number;
export declare const DEFAULT_MAX_OUTPUT_BYTES: number;
export declare const DEFAULT_TRANSFER_LIMITS: Readonly<TransferLimits>;
/** The exit code execute() reports when the command's deadline passed. */
export declare const EXIT_TIMEOUT: 124;
/** The exit code execute() reports when airlock could not run the command or report its result. */
export declare const EXIT_AIRLOCK: 125;
export declare const SANDBOX_UNAVAILABLE: string;
/** Appended after a stopped command when the backend proved every process of it gone. */
export declare const SANDBOX_KEPT: string;
/** Appended after a command whose end is unknown: the sandbox was replaced, its files are gone. */
export declare const SANDBOX_RESET: string;
export declare const OUTPUT_OVERFLOW_MODES: readonly ["drop", "head_tail"];
export declare const DEFAULT_HEAD_TAIL_CEILING_BYTES: number;

export interface DeepagentsSpecOptions {
  image?: string;
  /** Hosts the sandbox may reach (allowlist); none means egress is closed. */
  egressAllow?: string[];
  workDir?: string;
  filesIn?: TransferLimits;
  filesOut?: TransferLimits;
  minIsolation?: IsolationLevel;
  kind?: string;
  resources?: SandboxResources;
}

export declare function deepagentsSpec(options?: DeepagentsSpecOptions): SandboxSpec;

export declare class AirlockReply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Buffer;
  json(): any;
  error(): AirlockError | null;
}

/** The daemon's error object (OpenAPI Error.error). */
export interface AirlockError {
  /** The error's stable name (OpenAPI ErrorType): SandboxHandleNotFound, Timeout, … */
  type: string;
  message: string;
  check?: string;
  refusal?: "file_not_found" | "is_directory" | "permission_denied" | "invalid_path";
  /** The older name of sandbox_reset. */
  condemned?: boolean;
  /** After an exec that did not end normally: whether the sandbox was replaced. */
  sandbox_reset?: boolean;
  /** The same, as a sentence for the model. */
  sandbox_message?: string;
  instance_id?: string;
  cancelled?: boolean;
  cap?: string;
  file?: string;
  limit?: number;
  size?: number;
  kill_confirmed?: boolean;
  /** With refusal: the path that was refused, as the caller gave it. */
  path?: string;
  /** On a ProgramTimeout: the signal that ended the program, what it reached, what it printed. */
  signal?: string;
  reach?: string;
  output?: string;
  /** On a ConformanceFailure: each probe that failed. */
  failures?: { probe: string; why: string; failure: string }[];
}

/** One event of AirlockClient.execStream. */
export type ExecStreamEvent =
  | { type: "output"; stream: "stdout" | "stderr"; data: Buffer }
  | {
      type: "result";
      status: 200;
      result: ExecResult;
      instance_id: string;
      duration_ms: number;
    }
  | { type: "error"; status: number; error: AirlockError };

export declare class AirlockTransportError extends Error {
  readonly timedOut: boolean;
}

export interface AirlockClientOptions {
  socketPath?: string;
  host?: string;
  port?: number;
  token?: string;
}

export declare class AirlockClient {
  constructor(options: AirlockClientOptions);
  readonly endpoint: string;
  request(
    method: string,
    path: string,
    options?: {
      query?: Record<string, string | number | boolean | undefined | null>;
      json?: unknown;
      body?: Uint8Array;
      timeoutMs?: number;
    },
  ): Promise<AirlockReply>;
  /** POST /v1/sandboxes/{handle}/exec/stream, as events while the command runs. */
  execStream(handle: string, body: Record<string, unknown>, options?: { timeoutMs?: number }): AsyncGenerator<ExecStreamEvent, void, undefined>;
}

export interface AirlockSandboxOptions {
  key: SandboxKey;
  spec?: SandboxSpec;
  /** One command's deadline, from admission to result. */
  execTimeoutMs?: number;
  /** Combined stdout+stderr per command that reaches the model. */
  maxOutputBytes?: number;
  /**
   * Past maxOutputBytes: "drop" (default) drops the output whole; "head_tail" shows its head and
   * tail around a "... [N lines truncated] ..." marker, streamed so only they are held.
   */
  outputOverflow?: "drop" | "head_tail";
  /** head_tail: how much a command may print before the rest goes unread (default 16 MiB). */
  headTailCeilingBytes?: number;
  /** Where refusals and failures are logged for the host (never shown to the model). */
  log?: { warn?: (message: string) => void };
  /**
   * A snapshot of this conversation (an id snapshot() returned) the sandbox starts from: create()
   * resumes it at once (under another agent_dir of the conversation, a fork).
   */
  fromSnapshot?: string;
}

/**
 * The codes AirlockSandboxError carries: Deep Agents' own (SandboxErrorCode) and the ones its
 * sandbox providers add, plus DAEMON_UNREACHABLE and SANDBOX_INCOMPATIBLE.
 */
export type AirlockSandboxErrorCode =
  | SandboxErrorCode
  /** The daemon knows no sandbox by that id (a handle never acquired, disposed or purged). */
  | "SANDBOX_NOT_FOUND"
  /** The daemon refused the spec or the acquire (router checks, a handle under another spec). */
  | "SANDBOX_CREATION_FAILED"
  /** The daemon's TCP listener refused the bearer token. */
  | "AUTHENTICATION_FAILED"
  /** No answer from the daemon: the socket is absent, or the wait was given up. */
  | "DAEMON_UNREACHABLE"
  /** The id names a sandbox whose spec is no Deep Agents sandbox (exec, files_in, files_out). */
  | "SANDBOX_INCOMPATIBLE"
  /** fromSnapshot is no snapshot of this conversation (another's is not told apart from none). */
  | "SNAPSHOT_NOT_FOUND"
  /** snapshot(): the router or the backend takes no snapshots (`check` names why). */
  | "SNAPSHOT_NOT_SUPPORTED"
  /** snapshot(): the daemon answered otherwise (`type` and `status` say how). */
  | "SNAPSHOT_FAILED";

/** Thrown by create(), initialize(), fromId(), getOrCreate() and snapshot() — never by execute() or the file methods. */
export declare class AirlockSandboxError extends SandboxError {
  readonly code: AirlockSandboxErrorCode;
  readonly name: "AirlockSandboxError";
  /** The daemon's error type (OpenAPI ErrorType) when the daemon answered with one. */
  readonly type?: string;
  /** The field or router check that refused, when the daemon named one. */
  readonly check?: string;
  /** The HTTP status, when the daemon answered. */
  readonly status?: number;
  constructor(
    message: string,
    code: AirlockSandboxErrorCode,
    cause?: Error,
    details?: { type?: string; check?: string; status?: number },
  );
  static isInstance(error: unknown): error is AirlockSandboxError;
}

/** execute()'s options, as Deep Agents' sandbox providers take them. */
export interface ExecuteOptions {
  /**
   * This command's deadline in seconds (fractions allowed), instead of execTimeoutMs. Must be
   * positive: airlock bounds every command (the daemon's --max-exec-timeout-ms caps it), so 0
   * does not mean "no deadline"; a value that is not a positive number is answered, without
   * running, with exit code 1.
   */
  timeout?: number;
}

export type AirlockConnectOptions = Omit<AirlockSandboxOptions, "key" | "spec"> & {
  socketPath?: string;
  client?: AirlockClient;
};

export declare class AirlockSandbox extends BaseSandbox {
  constructor(options: AirlockSandboxOptions & { client: AirlockClient; backend?: string });
  /**
   * Checks the spec with the daemon (nothing is acquired: that happens on the first operation,
   * or on initialize()). With `fromSnapshot`, the spec is checked with `snapshot` required and
   * the sandbox is resumed from the snapshot at once. Throws AirlockSandboxError:
   * SANDBOX_CREATION_FAILED when the spec (or the resume) is refused, SNAPSHOT_NOT_FOUND,
   * DAEMON_UNREACHABLE, AUTHENTICATION_FAILED; TypeError for a malformed key, spec or snapshot id.
   */
  static create(
    options: AirlockSandboxOptions & { socketPath?: string; client?: AirlockClient },
  ): Promise<AirlockSandbox>;
  /**
   * The sandbox a daemon handle (`sandbox.handle`, "sbx-" + 32 hex digits) names, with the key
   * and spec it was acquired under; nothing is created. Throws AirlockSandboxError:
   * SANDBOX_NOT_FOUND, SANDBOX_INCOMPATIBLE, DAEMON_UNREACHABLE, AUTHENTICATION_FAILED.
   */
  static fromId(sandboxId: string, options?: AirlockConnectOptions): Promise<AirlockSandbox>;
  /**
   * Deep Agents' get-or-create: with `sandboxId`, fromId() (an unknown id throws
   * SANDBOX_NOT_FOUND); without it, create() and initialize() — acquired now, so `handle` is
   * the id to look it up by later.
   */
  static getOrCreate(
    options: SandboxGetOrCreateOptions &
      AirlockConnectOptions & { key?: SandboxKey; spec?: SandboxSpec },
  ): Promise<AirlockSandbox>;
  /**
   * Acquires (get-or-create) now rather than on the first operation — resuming from
   * fromSnapshot when one is pending; idempotent.
   */
  initialize(): Promise<void>;
  /**
   * Saves the sandbox (exclusively: calls in flight finish first, none is cut off) and returns
   * the snapshot's id, for create({key, fromSnapshot}) within the same conversation. Throws
   * AirlockSandboxError: SNAPSHOT_NOT_SUPPORTED, SNAPSHOT_FAILED, DAEMON_UNREACHABLE,
   * AUTHENTICATION_FAILED.
   */
  snapshot(): Promise<string>;
  /** Opaque and stable: a hash over (daemon endpoint, backend, key, kind, egress posture). */
  readonly id: string;
  readonly isRunning: boolean;
  /** The daemon's handle once acquired: the id fromId() looks the sandbox up by. */
  readonly handle: string | null;
  readonly instanceId: string | null;
  readonly workDir: string;
  /** Never throws: a timeout is exit code 124, an airlock failure 125, with a sentence. */
  execute(command: string, options?: ExecuteOptions): Promise<ExecuteResponse>;
  uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]>;
  downloadFiles(paths: string[]): Promise<FileDownloadResponse[]>;
  close(): Promise<boolean>;
}
