//! `effects mcp-proxy`: any MCP server behind the ledger (docs/mcp.md).
//!
//! The proxy starts the upstream server and relays JSON-RPC lines both
//! ways, byte for byte, with two exceptions. A `tools/call` from the client
//! is claimed as an external effect (the server and tool named, its
//! arguments as sent) and forwarded only once the claim is durable (LOG-3);
//! a claim that cannot be made is answered here and never forwarded
//! (LOG-4). The upstream's answer to it settles the claim (a result: the
//! upstream's success, or its reported failure when `isError`; a JSON-RPC
//! error: executed, exit status unknown) and reaches the client unchanged except for the ledger's
//! positions in the result's `_meta`, under [`META_KEY`]. Nothing else is
//! parsed into types or rewritten: ids are the client's own, so
//! cancellation, progress, sampling, elicitation and list-changed
//! notifications pass through as they were sent, whatever revision of the
//! protocol the two ends speak. A call the client cancels is settled
//! CANCELLED when its `notifications/cancelled` passes (the upstream sends
//! no answer to it).
//!
//! What the proxy cannot read it does not forward, so no `tools/call` ever
//! reaches the upstream unclaimed, however the upstream's own parser would
//! read it: a client line that is not JSON to us (invalid UTF-8, a lone
//! surrogate, two messages on one line, a cut one), a line over the input
//! bound, a `tools/call` whose params are not MCP's, one without an id, and
//! one reusing the id of a call still in flight are each answered here with
//! a JSON-RPC error (none for a notification) and dropped.
//!
//! An upstream that ends with calls unanswered leaves them UNKNOWN (executed
//! for all the proxy knows) and each is answered with a JSON-RPC error; a
//! proxy that dies leaves its claims to recovery, INTERRUPTED at the next
//! open (LOG-7). An answer that only starts the work (an MCP task, or the
//! 2026-07-28 revision's request for input) settles the call with its exit
//! status unknown: the proxy never counts a call done before it is.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::anyhow;
use clap::Args;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use effect_ledger::bounded::INPUT_BOUND;
use effect_ledger::ledger::{ClaimStatus, Ledger, Reported, Run};
use effect_ledger::log::Position;
use effect_ledger::tools::{Call, External};

use super::super::Failure;
use super::super::runtime::bad;
use super::{open, request_prefix};

/// Where the proxy's positions go in a result's `_meta` (a reverse-DNS
/// prefix, as MCP reserves `_meta` keys).
pub const META_KEY: &str = "dev.effect-ledger/step";

/// The JSON-RPC error code of a call the upstream never answered.
const UPSTREAM_LOST: i64 = -32603;
/// JSON-RPC's codes for a line that is not JSON, a message that is not a
/// request, and a call whose params are wrong.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// Arguments of `effects mcp-proxy`.
#[derive(Args)]
#[command(after_help = "Starts the upstream MCP server (CMD ARGS...) and relays stdio both ways. \
Each tools/call is claimed as an external effect before it is forwarded and settled from the \
upstream's answer; positions go in the result's _meta under \"dev.effect-ledger/step\". Example \
(server-filesystem behind the ledger):\n  effects mcp-proxy --root ~/project -- npx -y \
@modelcontextprotocol/server-filesystem ~/project\nDecide the run with `effects decide --run ID` \
(the id is printed on stderr), or share it with `effects mcp --run ID` (docs/mcp.md).")]
pub struct ProxyArgs {
    /// The directory the upstream works on: the run's root (the upstream's
    /// effects are external: the ledger cannot read them back, CMP-6).
    #[arg(long)]
    root: PathBuf,
    /// The upstream's name in the log (default: the command's file name).
    #[arg(long)]
    name: Option<String>,
    /// Continue this run (or begin it under this id) instead of beginning a
    /// new one.
    #[arg(long, value_name = "ID")]
    run: Option<String>,
    /// Policy manifest (default: the policies embedded in this binary).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Operator key file: records are written HMAC-authenticated with it.
    #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
    key_file: Option<PathBuf>,
    /// The upstream server's command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// A forwarded `tools/call` waiting for its answer.
struct Pending {
    request_id: String,
    claim: Option<Position>,
}

/// What both relay threads share.
struct Proxy {
    ledger: Mutex<Ledger>,
    run: Run,
    server: String,
    endpoint: String,
    prefix: String,
    calls: AtomicU64,
    /// Forwarded calls by their JSON-RPC id (as JSON text: `1` and `"1"` differ).
    pending: Mutex<HashMap<String, Pending>>,
    client: Mutex<std::io::Stdout>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One read of a relay: a line, a piece of one over the input bound, or the end.
enum Read {
    Line,
    Overlong,
    End,
}

/// Reads one line into `line`, or its first `INPUT_BOUND` bytes when it is
/// longer ([`Read::Overlong`]: the rest is the next reads').
fn read_line(reader: &mut impl BufRead, line: &mut Vec<u8>) -> Read {
    line.clear();
    match std::io::Read::take(&mut *reader, INPUT_BOUND).read_until(b'\n', line) {
        Ok(0) | Err(_) => Read::End,
        Ok(_) if line.ends_with(b"\n") => Read::Line,
        Ok(n) if n as u64 == INPUT_BOUND => Read::Overlong,
        // The stream ended without a final line break.
        Ok(_) => Read::Line,
    }
}

/// Reads and drops the rest of an over-long line; `false` at the end.
fn skip_line(reader: &mut impl BufRead) -> bool {
    let mut rest = Vec::new();
    loop {
        rest.clear();
        match std::io::Read::take(&mut *reader, INPUT_BOUND).read_until(b'\n', &mut rest) {
            Ok(0) | Err(_) => return false,
            Ok(_) if rest.ends_with(b"\n") => return true,
            Ok(_) => {}
        }
    }
}

/// A JSON-RPC error answer to `id`, as a line.
fn error_line(id: &Value, code: i64, message: String) -> Vec<u8> {
    let answer = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    format!("{answer}\n").into_bytes()
}

impl Proxy {
    fn send_client(&self, line: &[u8]) {
        let mut out = lock(&self.client);
        // A client that went away: nothing to answer to; claims still settle.
        let _ = out.write_all(line).and_then(|()| out.flush());
    }

    /// The client's message `line`: claimed first when it holds a
    /// `tools/call`. Returns what to forward (nothing when every message in
    /// it was answered here or dropped).
    fn client_line(&self, line: Vec<u8>) -> Option<Vec<u8>> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let message = match serde_json::from_slice::<Value>(&line) {
            Ok(message) => message,
            Err(error) => {
                // What we cannot read is never forwarded: a more lenient
                // parser upstream could find an unclaimed call in it.
                let why = format!("not forwarded: the line is not one JSON message ({error})");
                self.send_client(&error_line(&Value::Null, PARSE_ERROR, why));
                return None;
            }
        };
        match message {
            Value::Array(batch) => {
                // A JSON-RPC batch (revisions before 2025-06-18): each call in
                // it claimed; if one was answered here the rest go on alone.
                let before = batch.len();
                let kept: Vec<Value> = batch.into_iter().filter(|m| self.claim(m)).collect();
                if kept.len() == before {
                    Some(line)
                } else if kept.is_empty() {
                    None
                } else {
                    Some(format!("{}\n", Value::Array(kept)).into_bytes())
                }
            }
            message => self.claim(&message).then_some(line),
        }
    }

    /// A client line over the input bound: answered, never forwarded (its
    /// id cannot be read, so the error's is null).
    fn client_overlong(&self) {
        let why = format!("not forwarded: a message over {INPUT_BOUND} bytes");
        self.send_client(&error_line(&Value::Null, INVALID_REQUEST, why));
    }

    /// Claims `message` if it is a `tools/call`, marks a cancelled call;
    /// `false` when it was answered here (or dropped) and must not be
    /// forwarded.
    fn claim(&self, message: &Value) -> bool {
        let method = message.get("method").and_then(Value::as_str);
        if method == Some("notifications/cancelled") {
            if let Some(id) = message.pointer("/params/requestId") {
                self.cancelled(&id.to_string());
            }
            return true;
        }
        if method != Some("tools/call") {
            return true;
        }
        let Some(id) = message.get("id") else {
            tracing::warn!("a tools/call without an id (a notification): not forwarded");
            return false;
        };
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let params = match serde_json::from_value::<CallToolRequestParams>(params) {
            Ok(params) => params,
            Err(error) => {
                let why = format!("not forwarded: tools/call params are not MCP's ({error})");
                self.send_client(&error_line(id, INVALID_PARAMS, why));
                return false;
            }
        };
        let key = id.to_string();
        if lock(&self.pending).contains_key(&key) {
            let why = format!("not forwarded: a call with id {key} is still in flight");
            self.send_client(&error_line(id, INVALID_REQUEST, why));
            return false;
        }
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let request_id = format!("{}-{n}", self.prefix);
        let call = Call::External(External {
            server: self.server.clone(),
            tool: params.name.to_string(),
            arguments: params.arguments.map(Value::Object).unwrap_or(Value::Null),
            endpoint: Some(self.endpoint.clone()),
        });
        let claimed = lock(&self.ledger).claim(&self.run, &request_id, call, "effects");
        if claimed.status != ClaimStatus::Run {
            let reason = claimed.reason.unwrap_or_default();
            tracing::warn!("tools/call {}: not forwarded: {reason}", params.name);
            let answer = json!({
                "jsonrpc": "2.0",
                "id": id,
                "result": {
                    "content": [{"type": "text", "text": format!(
                        "not forwarded to {}: the effect ledger could not claim it ({reason})", self.server)}],
                    "isError": true,
                    "_meta": {META_KEY: {
                        "run_id": self.run.id, "request_id": request_id,
                        "status": claimed.status, "reason": reason,
                    }},
                },
            });
            self.send_client(format!("{answer}\n").as_bytes());
            return false;
        }
        let pending = Pending { request_id, claim: claimed.claim };
        lock(&self.pending).insert(key, pending);
        true
    }

    /// The client cancelled a call it forwarded: settled CANCELLED now (it
    /// may have acted in part), as MCP has the upstream send no answer to a
    /// cancelled request. One that comes anyway passes through untouched.
    fn cancelled(&self, id: &str) {
        let Some(pending) = lock(&self.pending).remove(id) else { return };
        let reported = Reported { executed: true, exit_code: None, timed_out: false, cancelled: true };
        lock(&self.ledger).settle(&self.run, &pending.request_id, &reported, None);
    }

    /// The upstream's message `line`, its answers to calls settled first.
    fn upstream_line(&self, line: Vec<u8>) -> Vec<u8> {
        let Ok(message) = serde_json::from_slice::<Value>(&line) else { return line };
        match message {
            Value::Array(batch) => {
                let mut changed = false;
                let batch: Vec<Value> = batch
                    .into_iter()
                    .map(|mut m| {
                        changed |= self.settle(&mut m);
                        m
                    })
                    .collect();
                if changed { format!("{}\n", Value::Array(batch)).into_bytes() } else { line }
            }
            mut message => {
                if self.settle(&mut message) {
                    format!("{message}\n").into_bytes()
                } else {
                    line
                }
            }
        }
    }

    /// Settles the call `message` answers, if it answers one; `true` when
    /// `message` was changed (positions added to a result's `_meta`).
    fn settle(&self, message: &mut Value) -> bool {
        if message.get("method").is_some() {
            return false;
        }
        let Some(id) = message.get("id").map(Value::to_string) else { return false };
        let Some(pending) = lock(&self.pending).remove(&id) else { return false };
        let reported = match (message.get("result"), message.get("error")) {
            // MCP 2026-07-28: the call needs input first and will be sent
            // again; what it did so far is not known.
            // An MCP task (2025-11-25): the call was accepted and runs on;
            // how it ends is not this answer's to say.
            (Some(result), _)
                if result.get("resultType").and_then(Value::as_str) == Some("input_required")
                    || result.get("task").is_some_and(Value::is_object) =>
            {
                Reported { executed: true, exit_code: None, timed_out: false, cancelled: false }
            }
            (Some(result), _) => {
                let failed = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
                Reported {
                    executed: true,
                    exit_code: Some(i32::from(failed)),
                    timed_out: false,
                    cancelled: false,
                }
            }
            _ => Reported { executed: true, exit_code: None, timed_out: false, cancelled: false },
        };
        let settled = lock(&self.ledger).settle(&self.run, &pending.request_id, &reported, None);
        let positions = json!({
            "run_id": self.run.id,
            "request_id": pending.request_id,
            "claim": pending.claim,
            "outcome": settled.outcome.as_ref().and_then(|outcome| outcome.position),
            "execution": settled.outcome.as_ref().map(|outcome| outcome.execution),
        });
        // A JSON-RPC error is kept as it was sent (it has no `_meta`).
        let Some(Value::Object(result)) = message.get_mut("result") else { return false };
        let meta = result.entry("_meta").or_insert_with(|| json!({}));
        match meta {
            Value::Object(meta) => {
                meta.insert(META_KEY.to_owned(), positions);
                true
            }
            _ => false,
        }
    }

    /// The upstream ended: every call it did not answer is settled UNKNOWN
    /// (it may have acted) and answered with a JSON-RPC error.
    fn upstream_lost(&self) {
        let lost: Vec<(String, Pending)> = lock(&self.pending).drain().collect();
        for (id, pending) in lost {
            let reported = Reported { executed: true, exit_code: None, timed_out: false, cancelled: false };
            lock(&self.ledger).settle(&self.run, &pending.request_id, &reported, None);
            let id: Value = serde_json::from_str(&id).unwrap_or(Value::Null);
            let answer = json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {
                    "code": UPSTREAM_LOST,
                    "message": format!(
                        "{} ended before answering; whether the call took effect is unknown (the ledger \
                         recorded it as UNKNOWN)", self.server),
                    "data": {META_KEY: {"run_id": self.run.id, "request_id": pending.request_id, "claim": pending.claim}},
                },
            });
            self.send_client(format!("{answer}\n").as_bytes());
        }
    }
}

/// Relays the client's lines to the upstream until either end closes.
fn relay_client(proxy: &Proxy, mut upstream: ChildStdin) {
    let stdin = std::io::stdin();
    let mut reader = stdin.lock();
    let mut line = Vec::new();
    loop {
        match read_line(&mut reader, &mut line) {
            Read::End => break,
            Read::Overlong => {
                proxy.client_overlong();
                if !skip_line(&mut reader) {
                    break;
                }
            }
            Read::Line => {
                let Some(forward) = proxy.client_line(std::mem::take(&mut line)) else { continue };
                if upstream.write_all(&forward).and_then(|()| upstream.flush()).is_err() {
                    return;
                }
            }
        }
    }
    // The client closed its end: so does the proxy (the upstream's cue to exit).
}

impl ProxyArgs {
    pub fn run(self, data_dir: &Path) -> Result<ExitCode, Failure> {
        let (ledger, run, display_data) = open(
            &self.root,
            self.run.as_deref(),
            data_dir,
            self.manifest.as_deref(),
            self.key_file.as_deref(),
            &[],
        )?;
        let program = &self.command[0];
        let server = self.name.clone().unwrap_or_else(|| {
            Path::new(program)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| program.clone())
        });
        let mut child = std::process::Command::new(program)
            .args(&self.command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| bad(anyhow!("starting the upstream `{program}`: {e}")))?;
        eprintln!(
            "effects mcp-proxy: run {} in {display_data}; upstream {server} (pid {})",
            run.id,
            child.id()
        );
        let proxy = Arc::new(Proxy {
            ledger: Mutex::new(ledger),
            run,
            endpoint: format!("stdio:{}", self.command.join(" ")),
            server,
            prefix: request_prefix("proxy"),
            calls: AtomicU64::new(0),
            pending: Mutex::default(),
            client: Mutex::new(std::io::stdout()),
        });
        let upstream_in = child.stdin.take().expect("piped");
        let upstream_out = child.stdout.take().expect("piped");
        // The client's side: a thread of its own, left behind if the
        // upstream ends first (it blocks reading our stdin).
        let client_side = Arc::clone(&proxy);
        std::thread::spawn(move || relay_client(&client_side, upstream_in));
        let mut reader = BufReader::new(upstream_out);
        let mut line = Vec::new();
        loop {
            let answer = match read_line(&mut reader, &mut line) {
                Read::End => break,
                Read::Line => proxy.upstream_line(std::mem::take(&mut line)),
                // The upstream's own words, passed on in pieces as they come
                // (the client reads them whole); a call answered in them
                // stays unsettled, UNKNOWN when the upstream ends.
                Read::Overlong => std::mem::take(&mut line),
            };
            proxy.send_client(&answer);
        }
        proxy.upstream_lost();
        let status = child.wait().map_err(|e| Failure::new(super::super::exit::PROBLEMS, e))?;
        lock(&proxy.ledger).sync().map_err(|e| {
            Failure::new(super::super::exit::PROBLEMS, anyhow!("making the log durable: {e}"))
        })?;
        eprintln!("effects mcp-proxy: upstream {} ended ({status})", proxy.server);
        Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::from(super::super::exit::PROBLEMS) })
    }
}
