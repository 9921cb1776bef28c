// `withLedger`: wraps a Vercel AI SDK tool (`tool({description, inputSchema,
// execute})` from the `ai` package) so that each call is claimed in the
// effect ledger before it runs and settled after it ran. It is typed
// structurally, so this package needs no runtime dependency on `ai`.

import type { Ledger } from "./ledger.js";
import type { ClaimResult, JsonObject, SettleFacts, StepResult } from "./protocol.js";

/** What the AI SDK hands a tool's `execute` besides the input (its `ToolExecutionOptions`). */
export interface ToolCallOptionsLike {
  /** The model's id for this tool call: the claim's request id. */
  toolCallId: string;
  abortSignal?: AbortSignal;
}

/** Any AI SDK tool: only `execute` matters here. */
export interface ToolLike {
  execute?(input: never, options: ToolCallOptionsLike): unknown;
}

/** A claim answered `refused` or `blocked`: the tool was not run (EMB-1). */
export class LedgerRefusedError extends Error {
  readonly claim: ClaimResult;
  readonly tool: string;

  constructor(tool: string, claim: ClaimResult) {
    super(`the effect ledger ${claim.status} ${tool}: ${claim.reason ?? "no reason given"}; it was not run`);
    this.name = "LedgerRefusedError";
    this.claim = claim;
    this.tool = tool;
  }
}

export interface WithLedgerOptions {
  /** The producer profile that predicts the tool's writes (default: the server's, `"effects"`). */
  profile?: string;
  /**
   * What the tool answers when its claim is not `"run"`. Without it the
   * wrapped `execute` throws `LedgerRefusedError` (the AI SDK hands the
   * model a tool error).
   */
  onRefused?: (claim: ClaimResult, input: unknown) => unknown;
  /** Called with the settle answer (positions, readbacks) after each call. */
  onSettled?: (step: StepResult, claim: ClaimResult) => void;
  /** The claim's request id (default: the AI SDK's `toolCallId`). */
  requestId?: (options: ToolCallOptionsLike, input: unknown) => string;
}

type Execute = (input: unknown, options: ToolCallOptionsLike) => unknown;

/**
 * Wraps `tool` so that its `execute(input, options)` first claims
 * `{tool: name, input}` in `runId` (request id `options.toolCallId`); a
 * claim that is not `"run"` is answered without calling the original.
 * Otherwise the original runs, and the call is settled with exit code 0, or
 * 1 if it threw (the error is rethrown). The ledger then reads back what the
 * claim predicted, whatever the tool reported (EMB-4): `name` must be the
 * ledger's name for what the tool does (e.g. `write_file`, see
 * `ledger.server.tools`), and the tool must do what that tool does.
 */
export function withLedger<TOOL extends ToolLike>(
  ledger: Ledger,
  runId: string,
  name: string,
  tool: TOOL,
  options: WithLedgerOptions = {},
): TOOL {
  const original = tool.execute as Execute | undefined;
  if (typeof original !== "function") {
    throw new TypeError(`withLedger(${name}): the tool has no execute function to wrap`);
  }

  /** Claims the call: a refusal's answer, or how to settle it once it ran. */
  const begin = async (input: unknown, callOptions: ToolCallOptionsLike): Promise<Began> => {
    const requestId = options.requestId?.(callOptions, input) ?? callOptions.toolCallId;
    const claim = await ledger.claim({
      run_id: runId,
      request_id: requestId,
      tool: name,
      input: input as JsonObject,
      ...(options.profile !== undefined ? { profile: options.profile } : {}),
    });
    if (claim.status !== "run") {
      if (options.onRefused) return { refused: true, answer: options.onRefused(claim, input) };
      throw new LedgerRefusedError(name, claim);
    }
    const settle = async (facts: SettleFacts): Promise<void> => {
      const step = await ledger.settle({ run_id: runId, request_id: requestId, facts });
      options.onSettled?.(step, claim);
    };
    return {
      refused: false,
      succeeded: () => settle({ executed: true, exit_code: 0, timed_out: false, cancelled: false }),
      failed: async (error: unknown): Promise<never> => {
        const cancelled = callOptions.abortSignal?.aborted ?? false;
        await settle({ executed: true, exit_code: 1, timed_out: false, cancelled });
        throw error;
      },
    };
  };

  // The AI SDK streams preliminary results from an execute that returns an
  // async iterable (an async generator function): the wrapper must be one too.
  const streaming = Object.prototype.toString.call(original) === "[object AsyncGeneratorFunction]";

  const execute = streaming
    ? async function* (input: unknown, callOptions: ToolCallOptionsLike): AsyncGenerator<unknown> {
        const began = await begin(input, callOptions);
        if (began.refused) {
          yield began.answer;
          return;
        }
        try {
          yield* original.call(tool, input, callOptions) as AsyncIterable<unknown>;
        } catch (error) {
          return await began.failed(error);
        }
        await began.succeeded();
      }
    : async (input: unknown, callOptions: ToolCallOptionsLike): Promise<unknown> => {
        const began = await begin(input, callOptions);
        if (began.refused) return began.answer;
        let output: unknown;
        try {
          output = await original.call(tool, input, callOptions);
          // An iterable returned by a plain function: its last value is the output.
          if (isAsyncIterable(output)) output = await last(output);
        } catch (error) {
          return began.failed(error);
        }
        await began.succeeded();
        return output;
      };

  return { ...tool, execute } as TOOL;
}

type Began =
  | { refused: true; answer: unknown }
  | { refused: false; succeeded: () => Promise<void>; failed: (error: unknown) => Promise<never> };

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return typeof value === "object" && value !== null && Symbol.asyncIterator in value;
}

async function last(stream: AsyncIterable<unknown>): Promise<unknown> {
  let value: unknown;
  for await (value of stream) {
    // Only the last value is the output.
  }
  return value;
}
