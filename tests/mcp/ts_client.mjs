// `effects mcp` driven by the official MCP TypeScript SDK's client (from npm),
// which validates every structuredContent against its tool's outputSchema.
// Run by `cargo xtask test` (`npm test`) with $EFFECTS_BIN.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const effects = process.env.EFFECTS_BIN ?? "target/release/effects";
const scratch = mkdtempSync(join(tmpdir(), "effects-mcp-ts-"));
const root = join(scratch, "root");

function connect(...extra) {
  const transport = new StdioClientTransport({
    command: effects,
    args: ["--data-dir", join(scratch, "data"), "mcp", "--root", root, ...extra],
    stderr: "inherit",
  });
  const client = new Client({ name: "effects-ts-test", version: "0" });
  return client.connect(transport).then(() => client);
}

async function test(name, body) {
  try {
    await body();
    console.log(`ok - ${name}`);
  } catch (error) {
    console.log(`not ok - ${name}`);
    throw error;
  }
}

try {
  const client = await connect("--check", "made=test -f made.txt");

  await test("tools carry honest hints and output schemas", async () => {
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map((tool) => [tool.name, tool]));
    assert.equal(byName.read_file.annotations.readOnlyHint, true);
    assert.equal(byName.write_file.annotations.destructiveHint, true);
    assert.equal(byName.bash.annotations.openWorldHint, true);
    assert.deepEqual(byName.check.inputSchema.properties.name.enum, ["made"]);
    for (const tool of tools) assert.equal(tool.outputSchema?.type, "object", tool.name);
  });

  await test("write, read back and an operator check: COMPLETED (structuredContent validated by the SDK)", async () => {
    // callTool validates structuredContent against the tool's outputSchema
    // (it lists the tools first to learn them) and throws if it does not fit.
    const written = await client.callTool({ name: "write_file", arguments: { path: "made.txt", content: "x\n" } });
    assert.equal(written.isError, false);
    assert.equal(written.structuredContent.status, "RAN");
    const read = await client.callTool({ name: "read_file", arguments: { path: "made.txt" } });
    assert.match(read.content[0].text, /^x/);
    const checked = await client.callTool({ name: "check", arguments: { name: "made" } });
    assert.equal(checked.structuredContent.verifier.passed, true);
    const done = await client.callTool({ name: "complete", arguments: { answer: "made made.txt", required: ["made.txt"] } });
    assert.equal(done.structuredContent.verdict, "COMPLETED", JSON.stringify(done.structuredContent));
  });

  await test("a refused step is a tool error the model reads, not a protocol error", async () => {
    const refused = await client.callTool({ name: "edit_file", arguments: { path: "nope.txt", old: "a", new: "b" } });
    assert.equal(refused.isError, true);
    assert.ok(["REFUSED", "RAN"].includes(refused.structuredContent.status));
  });

  await test("an aborted bash is CANCELLED in the log, with progress while it ran", async () => {
    const controller = new AbortController();
    let progress = 0;
    const call = client.callTool(
      { name: "bash", arguments: { command: "sleep 30 & echo $! > ts-sleep.pid; wait" } },
      undefined,
      { signal: controller.signal, onprogress: () => (progress += 1), timeout: 60_000 },
    );
    setTimeout(() => controller.abort("the test gave up"), 2500);
    await assert.rejects(call);
    const runId = /Run (\S+);/.exec(client.getInstructions())[1];
    let executions = [];
    for (let i = 0; i < 100 && !executions.includes("CANCELLED"); i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      const { contents } = await client.readResource({ uri: `effects://run/${runId}/log` });
      executions = contents[0].text
        .split("\n")
        .filter(Boolean)
        .map((line) => JSON.parse(line))
        .filter((record) => record.kind === "outcome")
        .map((record) => record.execution);
    }
    assert.ok(executions.includes("CANCELLED"), executions.join(","));
    assert.ok(progress >= 1, "no progress notifications");
    const pid = Number(readFileSync(join(root, "ts-sleep.pid"), "utf8"));
    let state = "gone";
    try {
      state = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1][0];
    } catch {}
    assert.ok(state === "gone" || state === "Z", `bash's child ${pid} is still running (${state})`);
  });

  await client.close();
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
