// Compiled (never run) by openapi.test.mjs, against types it generates from
// docs/api/openapi.yaml into ./generated/: the JSON bodies the adapter sends must be what the
// document accepts, the answers the document allows must be what the adapter reads, and each
// adapter type names exactly the fields of its schema.
import type { components, operations } from "./generated/openapi.js";
import type {
  AcquireRequestBody,
  AcquireResponseBody,
  AirlockError,
  CheckRequestBody,
  CheckResponseBody,
  DeclaredOutput,
  DisposeResponseBody,
  ErrorResponseBody,
  ExecRequestBody,
  ExecResponseBody,
  ExecResult,
  ExecStreamLine,
  HandleRecord,
  PurgeRequestBody,
  PurgeResponseBody,
  PutFileResponseBody,
  RoutingDecision,
  Snapshot,
  SnapshotResponseBody,
  SandboxResources,
  SandboxSpec,
  TransferLimits,
  WireSandboxKey,
  deepagentsSpec,
} from "../../src/index.js";

type Schemas = components["schemas"];
type Json<T> = T extends { content: { "application/json": infer Body } } ? Body : never;
type RequestOf<Name extends keyof operations> = operations[Name] extends { requestBody?: infer Body }
  ? Json<NonNullable<Body>>
  : never;
type ResponseOf<Name extends keyof operations, Status extends number> = operations[Name]["responses"] extends infer R
  ? Status extends keyof R
    ? Json<R[Status]>
    : never
  : never;

/** Fails to compile unless T is true; the error names the line, hence the pair that disagrees. */
type Check<T extends true> = T;
type Assignable<From, To> = [From] extends [never] ? false : [From] extends [To] ? true : false;
type Known<T> = keyof { [K in keyof T as string extends K ? never : number extends K ? never : K]: T[K] };
type SameFields<A, B> = [Known<A>] extends [Known<B>] ? ([Known<B>] extends [Known<A>] ? true : false) : false;
/** A body the adapter sends: everything it can send is valid, and it knows every field. */
type Sent<Adapter, Document> = Assignable<Adapter, Document> extends true ? SameFields<Adapter, Document> : false;
/** A body the adapter reads: every answer the document allows fits, and it knows every field. */
type Read<Adapter, Document> = Assignable<Document, Adapter> extends true ? SameFields<Adapter, Document> : false;
/** Both ways. */
type Same<Adapter, Document> = Sent<Adapter, Document> extends true ? Read<Adapter, Document> : false;

// Shared schemas, sent in acquires and checks and read back from the daemon.
export type Checks = [
  Check<Same<WireSandboxKey, Schemas["SandboxKey"]>>,
  Check<Same<SandboxSpec, Schemas["SandboxSpec"]>>,
  Check<Same<TransferLimits, Schemas["TransferLimits"]>>,
  Check<Same<DeclaredOutput, Schemas["DeclaredOutput"]>>,
  Check<Same<SandboxResources, NonNullable<Schemas["SandboxSpec"]["resources"]>>>,
  Check<Sent<ReturnType<typeof deepagentsSpec>, Schemas["SandboxSpec"]>>,
  Check<Read<RoutingDecision, Schemas["RoutingDecision"]>>,
  Check<Read<ExecResult, Schemas["ExecResult"]>>,
  Check<Read<ExecStreamLine, Schemas["ExecStreamLine"]>>,
  Check<Read<AirlockError, Schemas["Error"]["error"]>>,
  Check<Read<ErrorResponseBody, Schemas["Error"]>>,
  // Requests.
  Check<Sent<CheckRequestBody, RequestOf<"check">>>,
  Check<Sent<AcquireRequestBody, RequestOf<"acquire">>>,
  Check<Sent<ExecRequestBody, RequestOf<"exec">>>,
  Check<Sent<ExecRequestBody, RequestOf<"execStream">>>,
  Check<Sent<PurgeRequestBody, RequestOf<"purge">>>,
  // Answers.
  Check<Read<CheckResponseBody, ResponseOf<"check", 200>>>,
  Check<Read<AcquireResponseBody, ResponseOf<"acquire", 200>>>,
  Check<Read<AcquireResponseBody, ResponseOf<"acquire", 201>>>,
  Check<Read<HandleRecord, ResponseOf<"describeSandbox", 200>>>,
  Check<Read<DisposeResponseBody, ResponseOf<"dispose", 200>>>,
  Check<Read<PurgeResponseBody, ResponseOf<"purge", 200>>>,
  Check<Read<ExecResponseBody, ResponseOf<"exec", 200>>>,
  Check<Read<PutFileResponseBody, ResponseOf<"putFile", 200>>>,
  Check<Read<ErrorResponseBody, ResponseOf<"acquire", 409>>>,
  Check<Read<ErrorResponseBody, ResponseOf<"acquire", 404>>>,
  Check<Read<Snapshot, Schemas["Snapshot"]>>,
  Check<Read<SnapshotResponseBody, ResponseOf<"takeSnapshot", 201>>>,
  Check<Read<ErrorResponseBody, ResponseOf<"takeSnapshot", 403>>>,
];

// The checks can fail: each of these is a disagreement they must catch.
export type MustFail = [
  // @ts-expect-error a key without agent_dir is not a key the document takes
  Check<Sent<{ scope: string; thread_id: string }, Schemas["SandboxKey"]>>,
  // @ts-expect-error a spec type that leaves a field out does not describe the document
  Check<Same<Omit<SandboxSpec, "labels">, Schemas["SandboxSpec"]>>,
  // @ts-expect-error an exit code the adapter reads as a string is not the document's
  Check<Read<Omit<ExecResult, "exit_code"> & { exit_code: string }, Schemas["ExecResult"]>>,
  // @ts-expect-error a missing operation is never a pass
  Check<Read<ExecResponseBody, ResponseOf<"exec", 299>>>,
];
