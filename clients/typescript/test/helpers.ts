// Test helpers: where the `effects` binary and the protocol schema are,
// fresh root and data dirs, a Ledger whose every message (both ways) is
// validated against docs/serve.schema.json, and `effects log show`.

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";

import { Ledger, type Direction, type LedgerOptions } from "@effect-ledger/client";

/** clients/typescript (this file runs from dist-test/). */
export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
/** The repository root. */
export const repoDir = resolve(packageDir, "..", "..");

/** `$EFFECTS_BIN`, else the release build of this repository. */
export const effectsBin = process.env.EFFECTS_BIN ?? join(repoDir, "target", "release", "effects");

export const schemaPath = join(repoDir, "docs", "serve.schema.json");

/** A root and a data dir beside it (never beneath it), removed by `cleanup`. */
export interface Dirs {
  root: string;
  dataDir: string;
  cleanup: () => void;
}

export function freshDirs(): Dirs {
  const base = mkdtempSync(join(tmpdir(), "effect-ledger-ts-"));
  mkdirSync(join(base, "root"));
  return {
    root: join(base, "root"),
    dataDir: join(base, "data"),
    cleanup: () => rmSync(base, { recursive: true, force: true }),
  };
}

/** Validates one wire message against the protocol schema; answers what is wrong, or null. */
export type MessageValidator = (direction: Direction, message: unknown) => string | null;

let validator: MessageValidator | undefined;

export function messageValidator(): MessageValidator {
  validator ??= compileValidator(JSON.parse(readFileSync(schemaPath, "utf8")) as Record<string, unknown>);
  return validator;
}

function compileValidator(schema: Record<string, unknown>): MessageValidator {
  const ajv = new Ajv2020({ allErrors: true, strict: false });
  const validate: ValidateFunction = ajv.compile(schema);
  return (_direction, message) => {
    if (validate(message)) return null;
    return ajv.errorsText(validate.errors, { separator: "; " });
  };
}

/** A Ledger over fresh dirs that records every message violating the schema. */
export interface Checked {
  ledger: Ledger;
  dirs: Dirs;
  /** Every message, in wire order. */
  messages: { direction: Direction; message: unknown }[];
  /** Messages that did not validate, with why. */
  violations: string[];
}

export async function openChecked(options: Partial<LedgerOptions> = {}): Promise<Checked> {
  const dirs = freshDirs();
  const validate = messageValidator();
  const messages: Checked["messages"] = [];
  const violations: string[] = [];
  const ledger = await Ledger.open({
    root: dirs.root,
    dataDir: dirs.dataDir,
    bin: effectsBin,
    client: { name: "effect-ledger-ts-tests", version: "0" },
    ...options,
    onMessage: (direction, message) => {
      messages.push({ direction, message });
      const problem = validate(direction, message);
      if (problem) violations.push(`${direction} ${JSON.stringify(message)}: ${problem}`);
    },
  });
  return { ledger, dirs, messages, violations };
}

/** One record of `effects log show --json`. */
export interface LogRecord {
  kind: string;
  position: number;
  claim?: number;
  run_id: string;
  record: Record<string, unknown>;
}

export function logShow(dataDir: string, runId: string): LogRecord[] {
  const out = execFileSync(effectsBin, ["--data-dir", dataDir, "log", "show", "--run", runId, "--json"], {
    encoding: "utf8",
  });
  return out
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as LogRecord);
}
