// Types for @airlock/deepagents (the implementation is ESM JavaScript in index.js and client.js).
import type { BaseSandbox, ExecuteResponse, FileDownloadResponse, FileUploadResponse } from "deepagents";

export interface SandboxKey {
  /** From the host's request context — never from the model. */
  scope: string;
  thread_id?: string;
  agent_dir?: string;
}

export interface TransferLimits {
  max_bytes_per_file: number;
  max_total_bytes: number;
  max_files: number;
}

/** The JSON wire format of a spec (docs/api/openapi.yaml, SandboxSpec). */
export interface SandboxSpec {
  kind: string;
  image?: string | null;
  image_id?: string | null;
  egress?: "closed" | "allowlist";
  egress_allow?: string[];
  work_dir?: string;
  labels?: Record<string, string>;
  requires?: string[];
  min_isolation?: string | null;
  files_in?: TransferLimits;
  files_out?: TransferLimits;
  resources?: { memory_bytes?: number; pids?: number; cpu_millis?: number; disk_bytes?: number };
  [field: string]: unknown;
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
  minIsolation?: string;
  kind?: string;
  resources?: { memory_bytes?: number; pids?: number; cpu_millis?: number; disk_bytes?: number };
}

export declare function deepagentsSpec(options?: DeepagentsSpecOptions): SandboxSpec;

export declare class AirlockReply {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: Buffer;
  json(): any;
  error(): AirlockError | null;
}

/** The daemon's error object (docs/api/openapi.yaml, Error). */
export interface AirlockError {
  type: string;
  message: string;
  check?: string;
  refusal?: string;
  condemned?: boolean;
  /** After an exec that did not end normally: whether the sandbox was replaced. */
  sandbox_reset?: boolean;
  /** The same, as a sentence for the model. */
  sandbox_message?: string;
  kill_confirmed?: boolean;
  instance_id?: string;
  [field: string]: unknown;
}

/** One event of AirlockClient.execStream. */
export type ExecStreamEvent =
  | { type: "output"; stream: "stdout" | "stderr"; data: Buffer }
  | {
      type: "result";
      status: 200;
      result: { exit_code: number; truncated: boolean; signal?: number; [field: string]: unknown };
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
}

export declare class AirlockSandbox extends BaseSandbox {
  constructor(options: AirlockSandboxOptions & { client: AirlockClient; backend?: string });
  /** Checks the spec with the daemon first; throws when it is refused or the daemon is unreachable. */
  static create(
    options: AirlockSandboxOptions & { socketPath?: string; client?: AirlockClient },
  ): Promise<AirlockSandbox>;
  readonly id: string;
  readonly isRunning: boolean;
  readonly handle: string | null;
  readonly instanceId: string | null;
  readonly workDir: string;
  execute(command: string): Promise<ExecuteResponse>;
  uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]>;
  downloadFiles(paths: string[]): Promise<FileDownloadResponse[]>;
  close(): Promise<boolean>;
}
