// The messages of `effects serve` (docs/serve.md, docs/serve.schema.json):
// the params and result of every method, the step result and decision
// envelopes, the notifications, and the JSON-RPC 2.0 framing around them.

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A JSON object, as a tool's `input` is. */
export type JsonObject = { [key: string]: Json };

/** A record's position in the run's log. */
export type Position = number;

/** The protocol version this client speaks. */
export const PROTOCOL_VERSION = "1";

// ---------------------------------------------------------------------------
// JSON-RPC 2.0 framing (one message per line)

/** A request id; this client sends integers. */
export type RequestId = number | string;

/** What `params._meta` may carry on any request. */
export interface RequestMeta {
  /** Set to receive `notifications/progress` for this request. */
  progressToken?: string | number;
}

export interface JsonRpcRequest {
  jsonrpc: "2.0";
  id: RequestId;
  method: string;
  params: { [key: string]: unknown; _meta?: RequestMeta };
}

export interface JsonRpcNotification {
  jsonrpc: "2.0";
  method: string;
  params: { [key: string]: unknown };
}

export interface JsonRpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

export interface JsonRpcSuccess {
  jsonrpc: "2.0";
  id: RequestId;
  result: unknown;
}

export interface JsonRpcFailure {
  jsonrpc: "2.0";
  id: RequestId | null;
  error: JsonRpcErrorObject;
}

export type JsonRpcResponse = JsonRpcSuccess | JsonRpcFailure;

/** The error codes of protocol misuse (docs/serve.md, "Errors"). */
export const ErrorCode = {
  /** The line is not JSON. */
  ParseError: -32700,
  /** Not a JSON-RPC 2.0 request (batches are not supported). */
  InvalidRequest: -32600,
  /** No such method. */
  MethodNotFound: -32601,
  /** Params do not have the method's shape (the message says which field). */
  InvalidParams: -32602,
  /** `run_id` names no run this server began or continued. */
  UnknownRun: -32001,
  /** A method other than `initialize` before `initialize`. */
  NotInitialized: -32002,
  /** The server is shutting down. */
  ShuttingDown: -32003,
} as const;

// ---------------------------------------------------------------------------
// Notifications

/** `notifications/progress`, server to client. */
export interface ProgressParams {
  progressToken: string | number;
  progress: number;
  message?: string | null;
}

/** `notifications/cancelled`, client to server. */
export interface CancelledParams {
  requestId: RequestId;
  reason?: string;
}

// ---------------------------------------------------------------------------
// initialize

export interface ClientInfo {
  name: string;
  version: string;
}

export interface InitializeParams {
  protocol_version: typeof PROTOCOL_VERSION;
  client?: ClientInfo;
}

export interface PolicyInfo {
  name: string;
  digest: string;
  world: string;
  tools: string[];
}

/** One entry of the tool catalogue (as `effects tools --json`). */
export interface ToolInfo {
  name: string;
  description: string;
  /** The tool's input as a JSON Schema, ready to hand to a model API. */
  input_schema: JsonObject;
  family: string;
  runs_by: string;
}

export interface InitializeResult {
  protocol_version: string;
  server: { name: string; version: string };
  root: string;
  data_dir: string;
  policies: PolicyInfo[];
  tools: ToolInfo[];
  /** The producer profiles claims may name (`["effects"]`). */
  profiles: string[];
  /** The names given with `--check NAME=COMMAND`. */
  checks: string[];
}

// ---------------------------------------------------------------------------
// run/begin, run/continue

export interface BeginRunParams {
  /** A fresh id to give the run; the server picks one when absent. */
  run_id?: string;
  /** Begin a child of this run. */
  child_of?: string;
}

export interface ContinueRunParams {
  run_id: string;
}

export interface RunInfo {
  id: string;
  lineage: string;
  parent: string | null;
}

/**
 * The answer to `run/begin` and `run/continue`: the run, or (a domain
 * answer, not an error) `run: null` and why it could not be begun or
 * continued.
 */
export type RunResult =
  | { run: RunInfo; reason?: null }
  | { run: null; reason: string };

// ---------------------------------------------------------------------------
// effect/claim, effect/settle, effect/execute

export type ClaimStatus = "run" | "refused" | "blocked";

export interface ClaimParams {
  run_id: string;
  /** The call's id: a run claims one call per request id (EMB-3). */
  request_id: string;
  tool: string;
  input: JsonObject;
  /** The producer profile that predicts what the tool writes (default `"effects"`). */
  profile?: string;
}

export interface ClaimResult {
  /** Only `"run"` lets the runtime run the tool (EMB-1). */
  status: ClaimStatus;
  /** Why not, when refused or blocked. */
  reason: string | null;
  /** The action id (the first claim's, for a duplicate). */
  action_id: string | null;
  /** The claim's position; `null` for an admitted read or no claim. */
  claim: Position | null;
  /** The claim already stood for this request id; nothing was written. */
  duplicate: boolean;
  /** Why classification fell back to unknown scope, if it did. */
  policy_failure?: string | null;
}

/** What the runtime reports about a tool it ran. */
export interface SettleFacts {
  executed: boolean;
  exit_code?: number | null;
  timed_out?: boolean;
  cancelled?: boolean;
}

export interface SettleParams {
  run_id: string;
  request_id: string;
  facts: SettleFacts;
  /** The call again, when the claim was made by another process. */
  tool?: string;
  input?: JsonObject;
}

export interface ExecuteParams {
  run_id: string;
  request_id: string;
  /** A tool the host runs: the filesystem tools, `bash`, `python`, `bg_job`. */
  tool: string;
  input: JsonObject;
}

export type StepStatus = "RAN" | "REFUSED" | "BLOCKED" | "NOT_RECORDED";

export type Execution =
  | "NOT_EXECUTED"
  | "REPORTED_SUCCESS"
  | "FAILED"
  | "TIMED_OUT"
  | "CANCELLED"
  | "RUNNING"
  | "INTERRUPTED"
  | "UNKNOWN";

export interface OutcomeView {
  position: Position | null;
  execution: Execution;
  impact: "NONE" | "POSSIBLE";
  cleanup: "NOT_APPLICABLE" | "CLEAN" | "FAILED" | "UNKNOWN";
}

export type JobState = "RUNNING" | "EXITED" | "KILLED" | "LOST";

export interface ObservationView {
  position: Position;
  path: string | null;
  mechanism: string;
  coverage: "COMPLETE" | "PARTIAL";
  exists: boolean;
  content_sha256: string | null;
  job_state: JobState | null;
}

export interface VerifierView {
  position: Position;
  passed: boolean;
}

export interface ToolResult {
  ok: boolean;
  text: string | null;
  error: string | null;
  stdout: string | null;
  stderr: string | null;
  exit_code: number | null;
  signal: number | null;
  timed_out: boolean;
  truncated: boolean;
  survivors: number[];
  job_id: string | null;
  job_state: JobState | null;
}

/** The step result envelope (`effects session --json`); every key is always present. */
export interface StepResult {
  schema_version: number;
  run_id: string;
  step: number;
  request_id: string;
  tool: string;
  status: StepStatus;
  reason: string | null;
  action_id: string | null;
  claim: Position | null;
  policy_failure: string | null;
  outcome: OutcomeView | null;
  observations: ObservationView[];
  launch_settled: Position | null;
  /** Files read back not holding what the claim said (CONTRADICTED); `result.ok` is then false. */
  contradicted: string[];
  verifier: VerifierView | null;
  result: ToolResult;
}

// ---------------------------------------------------------------------------
// check/run

export interface CheckParams {
  run_id: string;
  /** One of the names given with `--check NAME=COMMAND`. */
  name: string;
}

// ---------------------------------------------------------------------------
// run/complete, run/decision, run/annotate

export type Verdict = "COMPLETED" | "FAILED" | "BLOCKED" | "UNVERIFIED";

export interface DecisionReason {
  code: string;
  verdict: Verdict;
  message: string;
  remedy: string | null;
  disclosure: string | null;
  evidence: Position[];
}

export interface Assessment {
  claim: Position;
  obligation: number | null;
  assessment: string;
  observation: Position | null;
}

export interface Decision {
  verdict: Verdict;
  reasons: DecisionReason[];
  disclosures: string[];
  assessments: Assessment[];
  /** The presented answer: what the agent may show, disclosures included. */
  answer: string;
  /** The decision's position in the log. */
  recorded: Position | null;
}

export interface CompleteParams {
  run_id: string;
  /** The agent's answer, as it would show it. */
  answer: string;
  /** Paths the task required (read by the decision itself). */
  required?: string[];
}

export interface DecisionParams {
  run_id: string;
}

export interface DecisionResult {
  /** The last decision this server took for the run, or `null`. */
  decision: Decision | null;
  /** Something was recorded after it. */
  stale: boolean;
  stale_since: Position | null;
}

export interface AnnotateParams {
  run_id: string;
  text: string;
}

/** A decision over a text, not recorded. */
export interface AnnotateResult {
  verdict: Verdict;
  disclosures: string[];
  /** The text as it may be shown, with the disclosures it must carry. */
  answer: string;
}

// ---------------------------------------------------------------------------
// The method table

/** Every method's params and result. */
export interface Methods {
  initialize: { params: InitializeParams; result: InitializeResult };
  "run/begin": { params: BeginRunParams; result: RunResult };
  "run/continue": { params: ContinueRunParams; result: RunResult };
  "effect/claim": { params: ClaimParams; result: ClaimResult };
  "effect/settle": { params: SettleParams; result: StepResult };
  "effect/execute": { params: ExecuteParams; result: StepResult };
  "check/run": { params: CheckParams; result: StepResult };
  "run/complete": { params: CompleteParams; result: Decision };
  "run/decision": { params: DecisionParams; result: DecisionResult };
  "run/annotate": { params: AnnotateParams; result: AnnotateResult };
  shutdown: { params: Record<string, never>; result: Record<string, never> };
}

export type Method = keyof Methods;
