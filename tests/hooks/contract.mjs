// The hook contracts, checked with the vendors' own definitions: drives
// `effects hook` ($EFFECTS_BIN) with the payloads in fixtures/, as each agent
// sends them, then
// - Codex CLI: every payload and every output validated against Codex's own
//   hook JSON Schemas (codex-schemas/, copied unchanged from openai/codex);
// - Claude Code: every payload declared as the Agent SDK's
//   `PreToolUseHookInput` / `PostToolUseHookInput` /
//   `PostToolUseFailureHookInput` / `PermissionDeniedHookInput` /
//   `StopHookInput`, every output as its `SyncHookJSONOutput`, and the file
//   type-checked by `tsc --noEmit` (object literals: no unknown field passes).
// Each check is also shown failing on a wrong output, so it can fail.
//
// Run by `cargo xtask test` (after `npm ci` here); by hand:
//   EFFECTS_BIN=target/release/effects node tests/hooks/contract.mjs

import { spawnSync } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

import Ajv from "ajv";

const here = dirname(fileURLToPath(import.meta.url));
const bin = process.env.EFFECTS_BIN;
if (!bin) {
  console.error("contract.mjs: set EFFECTS_BIN to the effects binary");
  process.exit(2);
}

const scratch = mkdtempSync(join(tmpdir(), "effects-hook-contract-"));
const root = join(scratch, "root");
const data = join(scratch, "data");
mkdirSync(root);

/** The fixture, with the scratch root in place of __ROOT__. */
function fixture(dialect, name) {
  const text = readFileSync(join(here, "fixtures", dialect, `${name}.json`), "utf8");
  return JSON.parse(text.replaceAll("__ROOT__", root));
}

const seen = { claude: [], codex: [] };

/** Runs one event through `effects hook`; answers its stdout's JSON or null. */
function hook(dialect, name, dataDir = data) {
  const input = fixture(dialect, name);
  const run = spawnSync(bin, ["--data-dir", dataDir, "hook", "--dialect", dialect], {
    input: JSON.stringify(input),
    encoding: "utf8",
  });
  assert.equal(run.status, 0, `effects hook ${dialect} ${name} failed: ${run.stderr}`);
  const output = run.stdout.trim() === "" ? null : JSON.parse(run.stdout);
  seen[dialect].push({ name, input, output });
  return output;
}

// Claude Code: a write read back, a write outside the root, a failing Bash,
// a denied edit, and the stop (held once, then let through).
assert.equal(hook("claude", "pre-write"), null, "no permission decision (EMB-5)");
writeFileSync(join(root, "a.txt"), "hello\n");
const readBack = hook("claude", "post-write");
assert.match(readBack.hookSpecificOutput.additionalContext, /the bytes are the ones claimed/);
assert.equal(hook("claude", "pre-write-outside").hookSpecificOutput.permissionDecision, "deny");
assert.equal(hook("claude", "pre-bash"), null);
assert.match(hook("claude", "post-failure-bash").hookSpecificOutput.additionalContext, /settled FAILED/);
assert.equal(hook("claude", "pre-edit"), null);
assert.equal(hook("claude", "permission-denied"), null);
const held = hook("claude", "stop");
assert.equal(held.decision, "block");
const through = hook("claude", "stop-active");
assert.equal(through.decision, undefined, "a stop already held once is never held again");
assert.match(through.systemMessage, /effect ledger/);

// Codex CLI: a Bash that writes, its settlement, the stop; and a deny (a
// data dir that cannot hold a log: the claim cannot be made durable).
assert.equal(hook("codex", "pre-bash"), null);
writeFileSync(join(root, "b.txt"), "x\n");
assert.match(hook("codex", "post-bash").hookSpecificOutput.additionalContext, /REPORTED_SUCCESS/);
assert.equal(hook("codex", "stop").decision, "block");
assert.equal(hook("codex", "stop-active").decision, undefined);
const notADir = join(scratch, "not-a-dir");
writeFileSync(notADir, "");
assert.equal(hook("codex", "pre-bash", notADir).hookSpecificOutput.permissionDecision, "deny");

// Codex: its schemas.
const ajv = new Ajv({ strict: false, allErrors: true });
const schema = (name) => JSON.parse(readFileSync(join(here, "codex-schemas", `${name}.schema.json`), "utf8"));
const codexSchemas = {
  PreToolUse: "pre-tool-use.command",
  PostToolUse: "post-tool-use.command",
  Stop: "stop.command",
};
const validators = Object.fromEntries(
  Object.entries(codexSchemas).map(([event, base]) => [
    event,
    { input: ajv.compile(schema(`${base}.input`)), output: ajv.compile(schema(`${base}.output`)) },
  ]),
);
let codexChecked = 0;
for (const { name, input, output } of seen.codex) {
  const check = validators[input.hook_event_name];
  assert.ok(check.input(input), `codex fixture ${name}: ${ajv.errorsText(check.input.errors)}`);
  if (output !== null) {
    assert.ok(check.output(output), `codex output of ${name}: ${ajv.errorsText(check.output.errors)}`);
    codexChecked += 1;
  }
}
assert.ok(codexChecked >= 4, "every kind of Codex answer was validated");
assert.equal(validators.PreToolUse.output({ hookSpecificOutput: { permissionDecision: "allow" } }), false);

// Claude Code: its types.
const types = {
  PreToolUse: "PreToolUseHookInput",
  PostToolUse: "PostToolUseHookInput",
  PostToolUseFailure: "PostToolUseFailureHookInput",
  PermissionDenied: "PermissionDeniedHookInput",
  Stop: "StopHookInput",
};
const build = join(here, "build");
mkdirSync(build, { recursive: true });
const header = `import type { ${[...Object.values(types), "SyncHookJSONOutput"].join(", ")} } from "@anthropic-ai/claude-agent-sdk";\n`;
let declarations = header;
seen.claude.forEach(({ name, input, output }, i) => {
  declarations += `// ${name}\nexport const input${i}: ${types[input.hook_event_name]} = ${JSON.stringify(input)};\n`;
  if (output !== null) {
    declarations += `export const output${i}: SyncHookJSONOutput = ${JSON.stringify(output)};\n`;
  }
});
const tsc = (file) =>
  spawnSync(
    join(here, "node_modules", ".bin", "tsc"),
    ["--noEmit", "--strict", "--skipLibCheck", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", file],
    { cwd: here, encoding: "utf8" },
  );
writeFileSync(join(build, "claude-contract.ts"), declarations);
const checked = tsc(join(build, "claude-contract.ts"));
assert.equal(checked.status, 0, `tsc rejected our Claude Code payloads or outputs:\n${checked.stdout}${checked.stderr}`);
writeFileSync(
  join(build, "claude-wrong.ts"),
  `${header}export const wrong: SyncHookJSONOutput = {"decision": "deny", "reason": "x"};\n`,
);
assert.notEqual(tsc(join(build, "claude-wrong.ts")).status, 0, "tsc catches an output Claude Code does not take");

rmSync(scratch, { recursive: true, force: true });
console.log(
  `hook contracts: ${seen.claude.length} Claude Code events type-checked against @anthropic-ai/claude-agent-sdk, ` +
    `${seen.codex.length} Codex CLI events and ${codexChecked} outputs validated against its schemas`,
);
