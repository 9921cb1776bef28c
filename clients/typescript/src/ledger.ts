// The `Ledger` client: spawns `effects serve`, speaks line-framed JSON-RPC
// 2.0 with it (pipelined requests matched by id, progress notifications,
// cancellation) and exposes one typed method per protocol method.

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";

import {
  PROTOCOL_VERSION,
  type AnnotateParams,
  type AnnotateResult,
  type BeginRunParams,
  type CheckParams,
  type ClaimParams,
  type ClaimResult,
  type ClientInfo,
  type CompleteParams,
  type ContinueRunParams,
  type Decision,
  type DecisionParams,
  type DecisionResult,
  type ExecuteParams,
  type InitializeResult,
  type JsonRpcErrorObject,
  type Method,
  type Methods,
  type ProgressParams,
  type RequestId,
  type RunResult,
  type SettleParams,
  type StepResult,
} from "./protocol.js";

/** A JSON-RPC error answer: the message itself was wrong (EMB-2). */
export class LedgerProtocolError extends Error {
  readonly code: number;
  readonly data: unknown;
  /** The method of the request that was answered with this error. */
  readonly method: string;

  constructor(method: string, error: JsonRpcErrorObject) {
    super(`${method}: ${error.message} (JSON-RPC error ${error.code})`);
    this.name = "LedgerProtocolError";
    this.code = error.code;
    this.data = error.data;
    this.method = method;
  }
}

/** The server is gone (it exited, could not start, or broke the framing). */
export class LedgerClosedError extends Error {
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  /** The tail of what the server wrote to stderr, when it was piped. */
  readonly stderr: string;

  constructor(message: string, exitCode: number | null, signal: NodeJS.Signals | null, stderr: string) {
    super(stderr ? `${message}\n${stderr.trimEnd()}` : message);
    this.name = "LedgerClosedError";
    this.exitCode = exitCode;
    this.signal = signal;
    this.stderr = stderr;
  }
}

/** A message on the wire, as the `onMessage` hook sees it. */
export type Direction = "send" | "receive";

export interface LedgerOptions {
  /** The sealed root the ledger's tools resolve paths beneath. */
  root: string;
  /** The data dir (outside the root); else the server's default ($EFFECTS_DATA_DIR, else `.effects`). */
  dataDir?: string;
  /** The `effects` binary: this, else `$EFFECTS_BIN`, else `effects` on the PATH. */
  bin?: string;
  /** Checks `check/run` may run by name (`--check NAME=COMMAND`). */
  checks?: Record<string, string>;
  /** More arguments to `serve`, after the ones above. */
  args?: string[];
  /** The server's environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** The server's working directory. */
  cwd?: string;
  /** Sent in `initialize`. */
  client?: ClientInfo;
  /**
   * The server's stderr (diagnostics): `"pipe"` (default) keeps its tail
   * for errors and hands each chunk to `onStderr`; `"inherit"` passes it
   * through.
   */
  stderr?: "pipe" | "inherit";
  onStderr?: (chunk: string) => void;
  /** Sees every message, both ways, as parsed JSON (for tracing and tests). */
  onMessage?: (direction: Direction, message: unknown) => void;
  /** How long `close()` waits for the server to exit before killing it (default 10 s). */
  closeTimeoutMs?: number;
}

/** Per-call options of every method. */
export interface CallOptions {
  /** Receives `notifications/progress` for this request (sets `params._meta.progressToken`). */
  onProgress?: (progress: ProgressParams) => void;
  /** Aborting it sends `notifications/cancelled` for this request. */
  signal?: AbortSignal;
}

/** A request in flight: its id (for `cancel`) and its answer. */
export interface Sent<T> {
  id: number;
  response: Promise<T>;
}

interface Pending {
  method: string;
  resolve: (result: unknown) => void;
  reject: (error: Error) => void;
  progressToken?: string;
  cleanup?: () => void;
}

const STDERR_TAIL_BYTES = 64 * 1024;

/** `effects serve`, one ledger over one sealed root, driven over stdio. */
export class Ledger {
  /** What `initialize` answered: the root, data dir, catalogue, profiles and checks. */
  readonly server: InitializeResult;

  readonly #transport: Transport;

  private constructor(transport: Transport, server: InitializeResult) {
    this.#transport = transport;
    this.server = server;
  }

  /** Spawns `effects serve` and initializes it. */
  static async open(options: LedgerOptions): Promise<Ledger> {
    const transport = await Transport.spawn(options);
    try {
      const { response } = transport.send("initialize", {
        protocol_version: PROTOCOL_VERSION,
        ...(options.client ? { client: options.client } : {}),
      });
      return new Ledger(transport, await response);
    } catch (error) {
      await transport.kill();
      throw error;
    }
  }

  /** The server's process id. */
  get pid(): number | undefined {
    return this.#transport.pid;
  }

  /** Begins a run (`run_id`: a fresh id of your choosing; `child_of`: its parent). */
  beginRun(params: BeginRunParams = {}, options?: CallOptions): Promise<RunResult> {
    return this.call("run/begin", params, options);
  }

  /** Continues a run of this data dir and root, begun by an earlier process. */
  continueRun(params: ContinueRunParams, options?: CallOptions): Promise<RunResult> {
    return this.call("run/continue", params, options);
  }

  /** Claims a tool call the runtime will run; run it only if `status` is `"run"` (EMB-1). */
  claim(params: ClaimParams, options?: CallOptions): Promise<ClaimResult> {
    return this.call("effect/claim", params, options);
  }

  /** Settles a claimed call by its request id with what the runtime saw; the ledger reads back its scope. */
  settle(params: SettleParams, options?: CallOptions): Promise<StepResult> {
    return this.call("effect/settle", params, options);
  }

  /** Has the host run a tool itself (filesystem tools, `bash`, `python`, `bg_job`). */
  execute(params: ExecuteParams, options?: CallOptions): Promise<StepResult> {
    return this.call("effect/execute", params, options);
  }

  /** Runs a check given to the server with `--check NAME=COMMAND`. */
  check(params: CheckParams, options?: CallOptions): Promise<StepResult> {
    return this.call("check/run", params, options);
  }

  /** Asks whether the run may say it is done: the decision, recorded. */
  complete(params: CompleteParams, options?: CallOptions): Promise<Decision> {
    return this.call("run/complete", params, options);
  }

  /** The last decision this server took for the run, and whether it is stale. */
  decision(params: DecisionParams, options?: CallOptions): Promise<DecisionResult> {
    return this.call("run/decision", params, options);
  }

  /** A decision over a text, not recorded: the text with the disclosures it must carry. */
  annotate(params: AnnotateParams, options?: CallOptions): Promise<AnnotateResult> {
    return this.call("run/annotate", params, options);
  }

  /** Sends a request and answers its result (a protocol error rejects with `LedgerProtocolError`). */
  call<M extends Method>(method: M, params: Methods[M]["params"], options?: CallOptions): Promise<Methods[M]["result"]> {
    return this.send(method, params, options).response;
  }

  /** Sends a request without waiting: its id (for `cancel`) and its answer. */
  send<M extends Method>(method: M, params: Methods[M]["params"], options?: CallOptions): Sent<Methods[M]["result"]> {
    return this.#transport.send(method, params, options);
  }

  /** Cancels a running `effect/execute` or `check/run` (`notifications/cancelled`); it still answers. */
  cancel(id: RequestId, reason?: string): void {
    this.#transport.notify("notifications/cancelled", reason === undefined ? { requestId: id } : { requestId: id, reason });
  }

  /** `shutdown`: the server finishes what is in flight, makes the log durable and exits. Answers its exit code. */
  async close(): Promise<number | null> {
    return this.#transport.close();
  }
}

/** The child process and the JSON-RPC bookkeeping over its stdio. */
class Transport {
  readonly #child: ChildProcessWithoutNullStreams;
  readonly #options: LedgerOptions;
  readonly #pending = new Map<number, Pending>();
  readonly #progress = new Map<string, (progress: ProgressParams) => void>();
  readonly #exited: Promise<void>;
  #nextId = 1;
  #stderrTail = "";
  #closed: LedgerClosedError | undefined;
  #exitCode: number | null = null;
  #signal: NodeJS.Signals | null = null;
  #closing: Promise<number | null> | undefined;

  private constructor(child: ChildProcessWithoutNullStreams, options: LedgerOptions) {
    this.#child = child;
    this.#options = options;
    this.#exited = new Promise((resolve) => {
      child.once("close", (code, signal) => {
        this.#exitCode = code;
        this.#signal = signal;
        this.#fail(`effects serve exited (${signal ? `signal ${signal}` : `code ${code}`})`);
        resolve();
      });
    });
    child.stdin.on("error", () => {
      // EPIPE: the server is gone, and its exit rejects what is in flight.
    });
    child.stdout.setEncoding("utf8");
    const lines = createInterface({ input: child.stdout, crlfDelay: Infinity });
    lines.on("line", (line) => this.#receive(line));
    if (child.stderr) {
      child.stderr.setEncoding("utf8");
      child.stderr.on("data", (chunk: string) => {
        this.#stderrTail = (this.#stderrTail + chunk).slice(-STDERR_TAIL_BYTES);
        options.onStderr?.(chunk);
      });
    }
  }

  /** Spawns the server; rejects if the binary cannot be started. */
  static spawn(options: LedgerOptions): Promise<Transport> {
    const bin = options.bin ?? process.env.EFFECTS_BIN ?? "effects";
    const args: string[] = [];
    if (options.dataDir !== undefined) args.push("--data-dir", options.dataDir);
    args.push("serve", "--root", options.root);
    for (const [name, command] of Object.entries(options.checks ?? {})) {
      args.push("--check", `${name}=${command}`);
    }
    args.push(...(options.args ?? []));
    const child = spawn(bin, args, {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ["pipe", "pipe", options.stderr === "inherit" ? "inherit" : "pipe"],
    }) as ChildProcessWithoutNullStreams;
    return new Promise((resolve, reject) => {
      const onError = (error: Error) => reject(new Error(`cannot start ${bin}: ${error.message}`, { cause: error }));
      child.once("error", onError);
      child.once("spawn", () => {
        child.off("error", onError);
        child.on("error", () => {
          // A later error (e.g. a failed kill) shows up as the process's exit.
        });
        resolve(new Transport(child, options));
      });
    });
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  send(method: string, params: object, options: CallOptions = {}): Sent<never> {
    const id = this.#nextId++;
    const response = new Promise<never>((resolve, reject) => {
      if (this.#closed) {
        reject(this.#closed);
        return;
      }
      const pending: Pending = { method, resolve: resolve as (result: unknown) => void, reject };
      let wire: Record<string, unknown> = { ...params };
      if (options.onProgress) {
        const token = `progress-${id}`;
        pending.progressToken = token;
        this.#progress.set(token, options.onProgress);
        const meta = (wire._meta ?? {}) as Record<string, unknown>;
        wire = { ...wire, _meta: { ...meta, progressToken: token } };
      }
      if (options.signal) {
        const signal = options.signal;
        const onAbort = () => this.notify("notifications/cancelled", { requestId: id, reason: abortReason(signal) });
        if (signal.aborted) {
          queueMicrotask(onAbort);
        } else {
          signal.addEventListener("abort", onAbort, { once: true });
          pending.cleanup = () => signal.removeEventListener("abort", onAbort);
        }
      }
      this.#pending.set(id, pending);
      this.#write({ jsonrpc: "2.0", id, method, params: wire });
    });
    return { id, response };
  }

  notify(method: string, params: object): void {
    if (this.#closed) return;
    this.#write({ jsonrpc: "2.0", method, params });
  }

  /** Sends `shutdown`, waits for the exit (killing the server after the timeout) and answers the exit code. */
  close(): Promise<number | null> {
    this.#closing ??= (async () => {
      if (!this.#closed) {
        try {
          await this.send("shutdown", {}).response;
        } catch {
          // Already exiting, or it refused: the exit below settles it either way.
        }
        this.#child.stdin.end();
      }
      const timeoutMs = this.#options.closeTimeoutMs ?? 10_000;
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), timeoutMs);
      });
      const late = await Promise.race([this.#exited.then(() => false), timedOut]);
      clearTimeout(timer);
      if (late) await this.kill();
      return this.#exitCode;
    })();
    return this.#closing;
  }

  /** Kills the server and waits for it to exit. */
  async kill(): Promise<void> {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill("SIGKILL");
    await this.#exited;
  }

  #write(message: object): void {
    this.#options.onMessage?.("send", message);
    this.#child.stdin.write(`${JSON.stringify(message)}\n`);
  }

  #receive(line: string): void {
    if (line.trim() === "") return;
    let message: unknown;
    try {
      message = JSON.parse(line);
    } catch {
      this.#fail(`effects serve wrote a line that is not JSON: ${line.slice(0, 200)}`);
      this.#child.kill("SIGKILL");
      return;
    }
    this.#options.onMessage?.("receive", message);
    if (typeof message !== "object" || message === null) return;
    const record = message as Record<string, unknown>;
    if (record.method === "notifications/progress") {
      const params = record.params as ProgressParams | undefined;
      if (params) this.#progress.get(String(params.progressToken))?.(params);
      return;
    }
    if (typeof record.id !== "number") return;
    const pending = this.#pending.get(record.id);
    if (!pending) return;
    this.#settle(record.id, pending);
    if ("error" in record && record.error) {
      pending.reject(new LedgerProtocolError(pending.method, record.error as JsonRpcErrorObject));
    } else {
      pending.resolve(record.result);
    }
  }

  #settle(id: number, pending: Pending): void {
    this.#pending.delete(id);
    pending.cleanup?.();
    if (pending.progressToken) this.#progress.delete(pending.progressToken);
  }

  /** Rejects everything in flight and every later request. */
  #fail(message: string): void {
    this.#closed ??= new LedgerClosedError(message, this.#exitCode, this.#signal, this.#stderrTail);
    for (const [id, pending] of this.#pending) {
      this.#settle(id, pending);
      pending.reject(this.#closed);
    }
  }
}

function abortReason(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  if (reason instanceof Error) return reason.message;
  return typeof reason === "string" ? reason : "aborted";
}
