// The README's TypeScript example runs as written: the first ```js block
// under "## Embed from TypeScript" in the repository's README.md is saved
// inside this package (so `@effect-ledger/client` resolves to the build by
// self-reference) and run with node, `effects` found through $EFFECTS_BIN.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { effectsBin, packageDir, repoDir } from "./helpers.js";

/** The first fenced js/ts block of the section under `heading`. */
function firstBlock(markdown: string, heading: string): string {
  const start = markdown.indexOf(`\n${heading}\n`);
  assert.ok(start >= 0, `README.md has the heading ${heading}`);
  const rest = markdown.slice(start + heading.length + 2);
  const end = rest.search(/^## /m);
  const section = end >= 0 ? rest.slice(0, end) : rest;
  const block = /^```(?:js|javascript|mjs|ts|typescript)\n([\s\S]*?)^```$/m.exec(section);
  assert.ok(block?.[1], `the section ${heading} has a js block`);
  return block[1];
}

test("the README's Embed from TypeScript example runs as written", () => {
  const code = firstBlock(readFileSync(join(repoDir, "README.md"), "utf8"), "## Embed from TypeScript");
  const dir = join(packageDir, "dist-test", "readme");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, "example.mjs");
  writeFileSync(file, code);
  const out = execFileSync(process.execPath, [file], {
    encoding: "utf8",
    env: { ...process.env, EFFECTS_BIN: effectsBin },
    timeout: 60_000,
  });
  assert.match(out, /COMPLETED/);
});
