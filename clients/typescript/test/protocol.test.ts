// Protocol tests of the Ledger client against the real `effects serve`:
// every message both ways is validated against docs/serve.schema.json, and
// each test checks one rule of docs/serve.md end to end.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { ErrorCode, LedgerProtocolError, type ProgressParams, type RunInfo } from "@effect-ledger/client";

import { logShow, openChecked, type Checked } from "./helpers.js";

let checked: Checked;
let run: RunInfo;

before(async () => {
  checked = await openChecked({ checks: { ok: "true", bad: "exit 3" } });
  const begun = await checked.ledger.beginRun();
  assert.ok(begun.run, `run/begin answered no run: ${begun.reason}`);
  run = begun.run;
});

after(async () => {
  const exitCode = await checked.ledger.close();
  checked.dirs.cleanup();
  assert.equal(exitCode, 0, "effects serve exits 0 after shutdown");
  assert.deepEqual(checked.violations, [], "every message matches docs/serve.schema.json");
});

test("initialize answers the root, the data dir, the catalogue, the profiles and the checks", () => {
  const server = checked.ledger.server;
  assert.equal(server.protocol_version, "1");
  assert.ok(server.root.length > 0);
  assert.ok(server.data_dir.length > 0);
  assert.ok(server.tools.some((tool) => tool.name === "write_file"), "write_file is catalogued");
  assert.deepEqual(server.profiles, ["effects", "claude-code", "codex", "gemini"]);
  assert.deepEqual([...server.checks].sort(), ["bad", "ok"]);
});

test("claim, the runtime writes the file, settle, complete with required: COMPLETED", async () => {
  const { ledger } = checked;
  const { run: own } = await ledger.beginRun();
  assert.ok(own);
  const input = { path: "hello.txt", content: "hello, ledger\n" };
  const claim = await ledger.claim({ run_id: own.id, request_id: "write-1", tool: "write_file", input });
  assert.equal(claim.status, "run");
  assert.equal(claim.duplicate, false);
  assert.equal(typeof claim.claim, "number");

  writeFileSync(join(checked.dirs.root, input.path), input.content);
  const step = await ledger.settle({
    run_id: own.id,
    request_id: "write-1",
    facts: { executed: true, exit_code: 0, timed_out: false, cancelled: false },
  });
  assert.equal(step.status, "RAN");
  assert.equal(step.claim, claim.claim);
  assert.ok(step.outcome && step.outcome.position !== null && step.outcome.position > (claim.claim ?? -1));

  const decision = await ledger.complete({ run_id: own.id, answer: "I wrote hello.txt.", required: ["hello.txt"] });
  assert.equal(decision.verdict, "COMPLETED", JSON.stringify(decision.reasons));
  assert.ok(decision.answer.startsWith("I wrote hello.txt."));

  const last = await ledger.decision({ run_id: own.id });
  assert.equal(last.decision?.verdict, "COMPLETED");
  assert.equal(last.stale, false);
});

test("a runtime that writes other bytes than the claim's input: FAILED, not COMPLETED", async () => {
  const { ledger } = checked;
  const { run: own } = await ledger.beginRun();
  assert.ok(own);
  const input = { path: "sabotaged.txt", content: "what the model asked for\n" };
  const claim = await ledger.claim({ run_id: own.id, request_id: "write-1", tool: "write_file", input });
  assert.equal(claim.status, "run");

  writeFileSync(join(checked.dirs.root, input.path), "something else\n");
  await ledger.settle({ run_id: own.id, request_id: "write-1", facts: { executed: true, exit_code: 0 } });

  const decision = await ledger.complete({ run_id: own.id, answer: "I wrote sabotaged.txt.", required: ["sabotaged.txt"] });
  assert.notEqual(decision.verdict, "COMPLETED");
  assert.equal(decision.verdict, "FAILED", JSON.stringify(decision.reasons));
  assert.ok(
    decision.assessments.some((a) => a.claim === claim.claim && a.assessment === "CONTRADICTED"),
    `the claim is CONTRADICTED: ${JSON.stringify(decision.assessments)}`,
  );
});

test("claiming the same (run, request id) twice answers the first claim", async () => {
  const { ledger } = checked;
  const call = { run_id: run.id, request_id: "dup-1", tool: "write_file", input: { path: "dup.txt", content: "once\n" } };
  const first = await ledger.claim(call);
  const second = await ledger.claim(call);
  assert.equal(first.status, "run");
  assert.equal(first.duplicate, false);
  assert.equal(second.status, "run");
  assert.equal(second.duplicate, true);
  assert.equal(second.claim, first.claim);
  assert.equal(second.action_id, first.action_id);

  writeFileSync(join(checked.dirs.root, "dup.txt"), "once\n");
  const facts = { executed: true, exit_code: 0, timed_out: false, cancelled: false };
  const settled = await ledger.settle({ run_id: run.id, request_id: "dup-1", facts });
  const again = await ledger.settle({ run_id: run.id, request_id: "dup-1", facts });
  assert.equal(again.outcome?.position, settled.outcome?.position, "settling twice answers the first outcome");
});

test("a claim pipelined behind a running execute answers first (out of order)", async () => {
  const { ledger, messages } = checked;
  const slow = ledger.send("effect/execute", {
    run_id: run.id,
    request_id: "sleep-1",
    tool: "bash",
    input: { command: "sleep 2" },
  });
  const fast = ledger.send("effect/claim", {
    run_id: run.id,
    request_id: "fast-1",
    tool: "write_file",
    input: { path: "fast.txt", content: "fast\n" },
  });
  const claim = await fast.response;
  assert.equal(claim.status, "run");
  const step = await slow.response;
  assert.equal(step.status, "RAN");
  assert.equal(step.result.exit_code, 0);

  const answered = messages
    .filter(({ direction }) => direction === "receive")
    .map(({ message }) => (message as { id?: unknown }).id);
  assert.ok(
    answered.indexOf(fast.id) < answered.indexOf(slow.id),
    `the claim (id ${fast.id}) is answered before the execute (id ${slow.id})`,
  );
});

test("cancel tears a running execute down; it still answers, CANCELLED", async () => {
  const { ledger } = checked;
  const progress: ProgressParams[] = [];
  const sent = ledger.send(
    "effect/execute",
    { run_id: run.id, request_id: "cancel-1", tool: "bash", input: { command: "sleep 30" } },
    { onProgress: (p) => progress.push(p) },
  );
  await new Promise((resolve) => setTimeout(resolve, 500));
  const started = Date.now();
  ledger.cancel(sent.id, "the test cancels it");
  const step = await sent.response;
  assert.ok(Date.now() - started < 10_000, "cancelled well before the command's 30 s");
  assert.equal(step.outcome?.execution, "CANCELLED");
  for (const p of progress) assert.equal(typeof p.progress, "number");
});

test("an AbortSignal cancels a running execute too", async () => {
  const { ledger } = checked;
  const controller = new AbortController();
  const answer = ledger.execute(
    { run_id: run.id, request_id: "abort-1", tool: "bash", input: { command: "sleep 30" } },
    { signal: controller.signal },
  );
  setTimeout(() => controller.abort(), 500);
  const step = await answer;
  assert.equal(step.outcome?.execution, "CANCELLED");
});

test("check/run answers a step result with its verifier", async () => {
  const { ledger } = checked;
  const passed = await ledger.check({ run_id: run.id, name: "ok" });
  assert.equal(passed.verifier?.passed, true);
  const failed = await ledger.check({ run_id: run.id, name: "bad" });
  assert.equal(failed.verifier?.passed, false);
});

test("refusals are results; a run this server did not begin is a protocol error", async () => {
  const { ledger } = checked;
  const escape = await ledger.claim({
    run_id: run.id,
    request_id: "escape-1",
    tool: "write_file",
    input: { path: "../outside.txt", content: "no\n" },
  });
  assert.equal(escape.status, "refused");
  assert.ok(escape.reason);
  assert.equal(escape.claim, null);

  const missing = await ledger.continueRun({ run_id: "no-such-run" });
  assert.equal(missing.run, null);
  assert.ok(missing.reason);

  await assert.rejects(
    ledger.claim({ run_id: "no-such-run", request_id: "x", tool: "write_file", input: { path: "x", content: "" } }),
    (error: unknown) => error instanceof LedgerProtocolError && error.code === ErrorCode.UnknownRun,
  );
});

test("annotate answers a decision over a text without recording it", async () => {
  const { ledger } = checked;
  const annotated = await ledger.annotate({ run_id: run.id, text: "All done." });
  assert.ok(["COMPLETED", "FAILED", "BLOCKED", "UNVERIFIED"].includes(annotated.verdict));
  assert.ok(annotated.answer.startsWith("All done."));
});

test("the log holds each settled claim before its outcome", async () => {
  // The log is read by another process while this server still runs.
  const records = logShow(checked.dirs.dataDir, run.id);
  const claims = new Map(records.filter((r) => r.kind === "claim").map((r) => [r.position, r]));
  const outcomes = records.filter((r) => r.kind === "outcome");
  assert.ok(outcomes.length > 0);
  for (const outcome of outcomes) {
    assert.ok(outcome.claim !== undefined && claims.has(outcome.claim), `outcome ${outcome.position} settles a claim`);
    assert.ok(outcome.claim < outcome.position);
  }
});
