// `withLedger` with the Vercel AI SDK: `generateText` over the SDK's own
// mock language model, scripted to call `write_file` and then answer, with
// the tool really writing beneath the root; the log, the decision, a
// sabotaged tool and a refused call are checked against the real server.

import assert from "node:assert/strict";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";

import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { LedgerRefusedError, withLedger, type StepResult } from "@effect-ledger/client";

import { logShow, openChecked, type Checked } from "./helpers.js";

let checked: Checked;

before(async () => {
  checked = await openChecked();
});

after(async () => {
  assert.equal(await checked.ledger.close(), 0);
  checked.dirs.cleanup();
  assert.deepEqual(checked.violations, [], "every message matches docs/serve.schema.json");
});

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
};

/** A model that calls `write_file` with `input`, then answers `answer`. */
function scriptedModel(toolCallId: string, input: { path: string; content: string }, answer: string) {
  return new MockLanguageModelV3({
    doGenerate: [
      {
        content: [{ type: "tool-call", toolCallId, toolName: "write_file", input: JSON.stringify(input) }],
        finishReason: { unified: "tool-calls", raw: undefined },
        usage,
        warnings: [],
      },
      {
        content: [{ type: "text", text: answer }],
        finishReason: { unified: "stop", raw: undefined },
        usage,
        warnings: [],
      },
    ],
  });
}

/** A write_file tool that writes `transform(content)` beneath the root. */
function writeFileTool(root: string, transform: (content: string) => string = (content) => content) {
  const calls: string[] = [];
  const writeFileTool = tool({
    description: "Write a whole file beneath the root.",
    inputSchema: z.object({ path: z.string(), content: z.string() }),
    execute: async ({ path, content }) => {
      calls.push(path);
      const target = join(root, path);
      await mkdir(dirname(target), { recursive: true });
      await writeFile(target, transform(content));
      return `wrote ${path}`;
    },
  });
  return { writeFileTool, calls };
}

test("generateText: the wrapped tool is claimed before it writes, settled after, and the run COMPLETES", async () => {
  const { ledger, dirs } = checked;
  const { run } = await ledger.beginRun();
  assert.ok(run);
  const { writeFileTool: original, calls } = writeFileTool(dirs.root);
  const settled: StepResult[] = [];
  const input = { path: "notes/hello.md", content: "# hello\n" };

  const result = await generateText({
    model: scriptedModel("call-1", input, "I wrote notes/hello.md."),
    tools: { write_file: withLedger(ledger, run.id, "write_file", original, { onSettled: (step) => settled.push(step) }) },
    prompt: "Write notes/hello.md.",
    stopWhen: stepCountIs(2),
  });

  assert.equal(result.steps.length, 2);
  assert.equal(result.text, "I wrote notes/hello.md.");
  assert.deepEqual(calls, ["notes/hello.md"], "the original tool ran once");
  const toolResult = result.steps[0]?.toolResults[0];
  assert.equal(toolResult?.output, "wrote notes/hello.md");

  assert.equal(settled.length, 1);
  const step = settled[0]!;
  assert.equal(step.request_id, "call-1", "the request id is the AI SDK's toolCallId");
  assert.equal(step.status, "RAN");
  assert.equal(step.outcome?.execution, "REPORTED_SUCCESS");

  const records = logShow(dirs.dataDir, run.id);
  const claim = records.find((r) => r.kind === "claim");
  const outcome = records.find((r) => r.kind === "outcome");
  assert.ok(claim && outcome, "the log holds a claim and an outcome");
  assert.equal(claim.position, step.claim);
  assert.equal(outcome.claim, claim.position);
  assert.ok(claim.position < outcome.position, "the claim is before the outcome");

  const decision = await ledger.complete({ run_id: run.id, answer: result.text, required: [input.path] });
  assert.equal(decision.verdict, "COMPLETED", JSON.stringify(decision.reasons));
});

test("generateText: a tool that writes other bytes than it was asked to is not COMPLETED", async () => {
  const { ledger, dirs } = checked;
  const { run } = await ledger.beginRun();
  assert.ok(run);
  const { writeFileTool: sabotaged } = writeFileTool(dirs.root, (content) => content.toUpperCase());
  const input = { path: "report.txt", content: "all tests pass\n" };

  const result = await generateText({
    model: scriptedModel("call-1", input, "I wrote report.txt."),
    tools: { write_file: withLedger(ledger, run.id, "write_file", sabotaged) },
    prompt: "Write report.txt.",
    stopWhen: stepCountIs(2),
  });
  assert.equal(result.text, "I wrote report.txt.");

  const decision = await ledger.complete({ run_id: run.id, answer: result.text, required: [input.path] });
  assert.notEqual(decision.verdict, "COMPLETED");
  assert.equal(decision.verdict, "FAILED", JSON.stringify(decision.reasons));
});

test("generateText: a refused claim never calls the tool; the model sees a tool error", async () => {
  const { ledger, dirs } = checked;
  const { run } = await ledger.beginRun();
  assert.ok(run);
  const { writeFileTool: original, calls } = writeFileTool(dirs.root);

  const result = await generateText({
    model: scriptedModel("call-1", { path: "../escape.txt", content: "out\n" }, "I could not write it."),
    tools: { write_file: withLedger(ledger, run.id, "write_file", original) },
    prompt: "Write ../escape.txt.",
    stopWhen: stepCountIs(2),
  });

  assert.deepEqual(calls, [], "the original tool was not called");
  const error = result.steps[0]?.content.find((part) => part.type === "tool-error");
  assert.ok(error && error.type === "tool-error", "the first step holds a tool error");
  assert.ok(error.error instanceof LedgerRefusedError);
  assert.equal(error.error.claim.status, "refused");
  assert.equal(result.text, "I could not write it.");
});

test("a tool that throws is settled with exit code 1 and the error is rethrown", async () => {
  const { ledger } = checked;
  const { run } = await ledger.beginRun();
  assert.ok(run);
  const settled: StepResult[] = [];
  const failing = withLedger(
    ledger,
    run.id,
    "write_file",
    tool({
      inputSchema: z.object({ path: z.string(), content: z.string() }),
      execute: async (): Promise<string> => {
        throw new Error("disk full");
      },
    }),
    { onSettled: (step) => settled.push(step) },
  );
  await assert.rejects(
    Promise.resolve(failing.execute!({ path: "x.txt", content: "x" }, { toolCallId: "call-9", messages: [] })),
    /disk full/,
  );
  assert.equal(settled.length, 1);
  assert.equal(settled[0]?.outcome?.execution, "FAILED");
});
