// `effects mcp` under the MCP Inspector's CLI mode (`mcp-inspector --cli`,
// from npm, on the Node 22 this package installs): its tool-schema
// portability check (--strict: exit 6 on an error-severity problem), a
// tools/call, and the resources. Run by `cargo xtask test` (`npm test`).

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const bin = join(here, "node_modules", ".bin");
const effects = process.env.EFFECTS_BIN ?? "target/release/effects";
const scratch = mkdtempSync(join(tmpdir(), "effects-mcp-inspector-"));
const server = ["--data-dir", join(scratch, "data"), "mcp", "--root", join(scratch, "root"), "--run", "inspected"];

/// The Inspector's CLI on `effects mcp`: its JSON answer and its stderr.
function inspector(...args) {
  const done = spawnSync(join(bin, "mcp-inspector"), ["--cli", effects, ...server, ...args], {
    encoding: "utf8",
    // The Inspector needs Node 22; this package's `node` is first on PATH.
    env: { ...process.env, PATH: `${bin}:${process.env.PATH}` },
  });
  assert.equal(done.status, 0, `mcp-inspector ${args.join(" ")}: exit ${done.status}\n${done.stderr}`);
  return { answer: JSON.parse(done.stdout), stderr: done.stderr };
}

try {
  const { answer: listed, stderr } = inspector("--method", "tools/list", "--strict");
  assert.ok(listed.tools.some((tool) => tool.name === "complete"));
  // Its portability check prints each problem (exit 6 on an error): none at all.
  assert.doesNotMatch(stderr, /Warning:|Error:|unknown format|warnings across/, stderr);
  console.log("ok - the Inspector lists the tools, no schema portability problem (--strict)");

  const { answer: written, stderr: validated } = inspector(
    "--method", "tools/call", "--tool-name", "write_file",
    "--tool-arg", "path=inspected.txt", "--tool-arg", "content=hello",
  );
  assert.equal(written.isError, false);
  assert.equal(written.structuredContent.status, "RAN");
  assert.doesNotMatch(validated, /unknown format|does not match/, validated);
  console.log("ok - a tools/call through the Inspector is a recorded step");

  // A second server process continues the same run (--run): its log holds
  // the first one's step.
  const { answer: resources } = inspector("--method", "resources/list");
  assert.deepEqual(resources.resources.map((r) => r.uri), ["effects://run/inspected/decision", "effects://run/inspected/log"]);
  const { answer: log } = inspector("--method", "resources/read", "--uri", "effects://run/inspected/log");
  const kinds = log.contents[0].text.split("\n").filter(Boolean).map((line) => JSON.parse(line).kind);
  assert.deepEqual(kinds.slice(0, 2), ["claim", "outcome"]);
  console.log("ok - the run's log is a resource, across server processes");
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
