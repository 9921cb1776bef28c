// @effect-ledger/client: the TypeScript client of `effects serve` (the
// effect ledger's JSON-RPC embedding protocol, docs/serve.md) and
// `withLedger`, its wrapper for Vercel AI SDK tools.

export * from "./protocol.js";
export {
  Ledger,
  LedgerClosedError,
  LedgerProtocolError,
  type CallOptions,
  type Direction,
  type LedgerOptions,
  type Sent,
} from "./ledger.js";
export {
  LedgerRefusedError,
  withLedger,
  type ToolCallOptionsLike,
  type ToolLike,
  type WithLedgerOptions,
} from "./ai-sdk.js";
