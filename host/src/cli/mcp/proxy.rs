//! `effects mcp-proxy`: any MCP server behind the ledger (docs/mcp.md).
//!
//! The proxy starts the upstream server and relays JSON-RPC lines both
//! ways. A `tools/call` from the client is claimed as an external effect
//! (the server and tool named, its arguments as sent) and forwarded only
//! once the claim is durable (LOG-3); a claim that cannot be made is
//! answered here and never forwarded (LOG-4). The upstream's answer to it
//! settles the claim and reaches the client with the ledger's positions in
//! the result's `_meta`, under [`META_KEY`].
//!
//! Every request the client sends reaches the upstream under an id of the
//! proxy's own (`ep-N`), and its answer goes back under the client's id:
//! the upstream never sees two requests with one id, so no answer can settle
//! a call it does not answer (a `ping` sharing a call's id, ids a
//! JavaScript upstream rounds together, `1` and `1.0`), and the client's
//! `notifications/cancelled` reaches the upstream with the upstream's own
//! request id. Apart from the id and `_meta`, messages pass byte for byte
//! (`wire.rs`): progress, list-changed notifications, sampling and
//! elicitation as they were sent, whatever revision the two ends speak.
//!
//! What the proxy cannot read it does not forward, so no `tools/call`
//! reaches the upstream unclaimed, however the upstream's own parser would
//! read it: a client line that is not JSON every parser reads alike (invalid
//! UTF-8, a lone surrogate, a key given twice, two messages on one line), a
//! line over the input bound, a `tools/call` whose params are not MCP's, one
//! without an id, and a request reusing the id of one still in flight are
//! each answered here with a JSON-RPC error (none for a notification) and
//! dropped. So is a name spelled otherwise than MCP spells it that a
//! lenient upstream may read as MCP's (EMB-1 extended, `lenient.rs`): a
//! method it may run as `tools/call` (`Tools/Call`, `tools/call `), a key it
//! may take for a JSON-RPC member (`Method`), a call param it may take for
//! `name` or `arguments`.
//!
//! Settlement says no more than the upstream's answer: a result shaped as
//! a finished call (`content`, `isError` absent or a boolean, no task, no
//! other `resultType`) is its success or its reported failure; a JSON-RPC
//! error, a task, a request for input or any other shape leaves the exit
//! status unknown. A cancelled call stays open until its answer comes (the
//! upstream may finish it anyway) or the upstream ends (then CANCELLED). An
//! upstream that ends leaves every call it did not answer UNKNOWN, answered
//! with a JSON-RPC error; a proxy that dies leaves its claims to recovery,
//! INTERRUPTED at the next open (LOG-7).

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use clap::Args;
use rmcp::model::CallToolRequestParams;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use effect_ledger::bounded::{self, BoundedLine, INPUT_BOUND};
use effect_ledger::ledger::{ClaimStatus, Ledger, Reported, Run, StepResult};
use effect_ledger::log::Position;
use effect_ledger::tools::{Call, External};

use super::super::Failure;
use super::super::runtime::bad;
use super::lenient;
use super::wire::{self, Line, Message, raw};
use super::{open, request_prefix};

/// Where the proxy's positions go in a result's `_meta` (a reverse-DNS
/// prefix, as MCP reserves `_meta` keys).
pub const META_KEY: &str = "dev.effect-ledger/step";

/// JSON-RPC's codes: a line that is not JSON, a message that is not a
/// request, a call whose params are wrong, and (ours) a request the
/// upstream will never answer.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;
const UPSTREAM_LOST: i64 = -32603;

/// The longest upstream line read: an answer may carry a large file.
const UPSTREAM_BOUND: u64 = 256 << 20;

/// How long an upstream that closed its output has to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

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
    root: std::path::PathBuf,
    /// The upstream's name in the log (default: the command's file name).
    #[arg(long)]
    name: Option<String>,
    /// Continue this run (or begin it under this id) instead of beginning a
    /// new one.
    #[arg(long, value_name = "ID")]
    run: Option<String>,
    /// Policy manifest (default: the policies embedded in this binary).
    #[arg(long)]
    manifest: Option<std::path::PathBuf>,
    /// Operator key file: records are written HMAC-authenticated with it.
    #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
    key_file: Option<std::path::PathBuf>,
    /// The upstream server's command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// A `tools/call` forwarded under a claim.
struct Claimed {
    request_id: String,
    claim: Position,
    /// The client cancelled it (settled CANCELLED if no answer comes).
    cancelled: bool,
}

/// A request forwarded under one of the proxy's ids.
struct Forwarded {
    /// The client's id, as the client spelled it.
    client_id: Box<RawValue>,
    call: Option<Claimed>,
}

/// The requests in flight.
#[derive(Default)]
struct InFlight {
    /// By the proxy's id.
    forwarded: HashMap<String, Forwarded>,
    /// The proxy's id of each, by the client's id as spelled.
    by_client: HashMap<String, String>,
    /// The upstream has ended: nothing more is forwarded.
    closed: bool,
}

/// What both relay threads share.
struct Proxy {
    ledger: Mutex<Ledger>,
    run: Run,
    server: String,
    endpoint: String,
    prefix: String,
    calls: AtomicU64,
    requests: AtomicU64,
    in_flight: Mutex<InFlight>,
    client: Mutex<std::io::Stdout>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A JSON-RPC error answer to `id`.
fn error(id: &RawValue, code: i64, message: String) -> Box<RawValue> {
    raw(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}

/// JSON-RPC's members, as a message spells them.
const MEMBERS: [&str; 6] = ["jsonrpc", "id", "method", "params", "result", "error"];

/// The params of a `tools/call` a claim records.
const CALL_PARAMS: [&str; 2] = ["name", "arguments"];

/// Why a lenient upstream could read `message` otherwise than the proxy
/// does, if it could (EMB-1 extended, `lenient.rs`): a top-level key spelled
/// otherwise than a JSON-RPC member it may be read as (`Method`, `ID`: a
/// case-insensitive deserializer takes them for the member), or a method
/// spelled otherwise than `tools/call` that a normalizing upstream may run
/// as one (`Tools/Call`, `tools/call `, full-width letters, a trailing NUL).
fn misread(message: &Message) -> Option<String> {
    for key in message.keys() {
        if let Some(member) = MEMBERS.iter().find(|member| lenient::reads_as_other(key, member)) {
            return Some(format!(
                "the key {key:?} is not `{member}`, but a lenient server may read it as `{member}`"
            ));
        }
    }
    let method = message.method()?;
    lenient::reads_as_other(&method, "tools/call")
        .then(|| format!("the method {method:?} is not `tools/call`, but a lenient server may run it as one"))
}

/// Why a lenient upstream could read a call's `params` otherwise than its
/// claim records them (a key it may take for `name` or `arguments`).
fn misread_params(params: &str) -> Option<String> {
    let params = RawValue::from_string(params.to_owned()).ok()?;
    let params = Message::of(&params).ok()?;
    params.keys().find_map(|key| {
        CALL_PARAMS.iter().find(|name| lenient::reads_as_other(key, name)).map(|name| {
            format!(
                "the tools/call param {key:?} is not `{name}`, but a lenient server may read it as `{name}`"
            )
        })
    })
}

/// The facts an answer to a `tools/call` gives (see the module doc).
fn reported(answer: &Message) -> Reported {
    let unknown = Reported::ran(None);
    let Some(result) = answer.get("result").and_then(|r| Message::of(r).ok()) else { return unknown };
    let finished = result.text("resultType").is_none_or(|t| t == "complete")
        && result.get("task").is_none()
        && result.get("content").is_some_and(|c| c.get().starts_with('['));
    let failed = match result.get("isError").map(|e| serde_json::from_str::<bool>(e.get())) {
        None => Ok(false),
        Some(flag) => flag,
    };
    match failed {
        Ok(failed) if finished => Reported { exit_code: Some(i32::from(failed)), ..unknown },
        _ => unknown,
    }
}

impl Proxy {
    fn send_client(&self, messages: &[Box<RawValue>], batch: bool) {
        if messages.is_empty() {
            return;
        }
        let mut out = lock(&self.client);
        // A client that went away: nothing to answer to; claims still settle.
        let _ = out.write_all(&wire::line(messages, batch)).and_then(|()| out.flush());
    }

    /// The client's line: returns what to forward (nothing when every
    /// message in it was answered here or dropped).
    fn client_line(&self, line: &[u8]) -> Option<Vec<u8>> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        // What we cannot read is never forwarded: a more lenient parser
        // upstream could find an unclaimed call in it.
        let parsed = wire::strict(line).and_then(|()| Line::parse(line));
        let (messages, batch) = match parsed {
            Ok(Line::One(message)) => (vec![message], false),
            Ok(Line::Batch(messages)) => (messages, true),
            Err(why) => {
                let why = format!(
                    "not forwarded: the line is not one JSON message every parser reads alike ({why})"
                );
                self.send_client(&[error(&raw(&Value::Null), PARSE_ERROR, why)], false);
                return None;
            }
        };
        let mut answers = Vec::new();
        let forward: Vec<Box<RawValue>> =
            messages.into_iter().filter_map(|m| self.client_message(m, &mut answers)).collect();
        self.send_client(&answers, batch);
        (!forward.is_empty()).then(|| wire::line(&forward, batch))
    }

    /// One client message: what to forward, or `None` with its answer (if
    /// any) pushed to `answers`.
    fn client_message(
        &self,
        mut message: Message,
        answers: &mut Vec<Box<RawValue>>,
    ) -> Option<Box<RawValue>> {
        if let Some(why) = misread(&message) {
            // EMB-1 (extended): what a lenient upstream could read as
            // another message than the proxy reads is never forwarded.
            let why = format!("not forwarded: {why}");
            match message.get("id") {
                Some(id) => answers.push(error(id, INVALID_REQUEST, why)),
                None => tracing::warn!("a notification {why}"),
            }
            return None;
        }
        let Some(method) = message.method() else {
            if message.get("method").is_some() {
                // A method that is not a string: no request we can read.
                let id = message.get("id").map_or_else(|| raw(&Value::Null), ToOwned::to_owned);
                answers.push(error(&id, INVALID_REQUEST, "not forwarded: the method is not a string".into()));
                return None;
            }
            // An answer to the upstream's request (sampling, elicitation):
            // the upstream's own id, passed as it came.
            return Some(message.to_raw());
        };
        let Some(client_id) = message.get("id").map(ToOwned::to_owned) else {
            if method == "tools/call" {
                tracing::warn!("a tools/call without an id (a notification): not forwarded");
                return None;
            }
            if method == "notifications/cancelled" {
                self.cancelled(&mut message);
            }
            return Some(message.to_raw());
        };
        let refuse = |code, why: String, answers: &mut Vec<_>| {
            answers.push(error(&client_id, code, format!("not forwarded: {why}")));
            None
        };
        // Only this thread adds to what is in flight, so what is checked
        // here still holds when the request is added below, but for the
        // upstream ending meanwhile.
        {
            let in_flight = lock(&self.in_flight);
            if in_flight.closed {
                return refuse(UPSTREAM_LOST, format!("{} has ended", self.server), answers);
            }
            if in_flight.by_client.contains_key(client_id.get()) {
                let why = format!("a request with id {} is still in flight", client_id.get());
                return refuse(INVALID_REQUEST, why, answers);
            }
        }
        let call = if method == "tools/call" {
            let params = message.get("params").map_or("null", RawValue::get);
            if let Some(why) = misread_params(params) {
                return refuse(INVALID_PARAMS, why, answers);
            }
            let params = match serde_json::from_str::<CallToolRequestParams>(params) {
                Ok(params) => params,
                Err(why) => {
                    return refuse(
                        INVALID_PARAMS,
                        format!("tools/call params are not MCP's ({why})"),
                        answers,
                    );
                }
            };
            match self.claim(params) {
                Ok(claimed) => Some(claimed),
                Err(refused) => {
                    answers.push(raw(&json!({"jsonrpc": "2.0", "id": client_id, "result": refused})));
                    return None;
                }
            }
        } else {
            None
        };
        let ours = format!("ep-{}", self.requests.fetch_add(1, Ordering::Relaxed) + 1);
        let mut in_flight = lock(&self.in_flight);
        if in_flight.closed {
            drop(in_flight);
            if let Some(call) = &call {
                // Claimed, never forwarded: it did not run.
                let never = Reported::never_ran();
                lock(&self.ledger).settle(&self.run, &call.request_id, &never, None);
            }
            return refuse(UPSTREAM_LOST, format!("{} has ended", self.server), answers);
        }
        in_flight.by_client.insert(client_id.get().to_owned(), ours.clone());
        in_flight.forwarded.insert(ours.clone(), Forwarded { client_id, call });
        drop(in_flight);
        message.set("id", raw(&ours));
        Some(message.to_raw())
    }

    /// Claims a `tools/call`; `Err` is the result to answer instead of
    /// forwarding it (no claim, no call).
    fn claim(&self, params: CallToolRequestParams) -> Result<Claimed, Value> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let request_id = format!("{}-{n}", self.prefix);
        let call = Call::External(External {
            server: self.server.clone(),
            tool: params.name.to_string(),
            arguments: params.arguments.map(Value::Object).unwrap_or(Value::Null),
            endpoint: Some(self.endpoint.clone()),
        });
        let claimed = lock(&self.ledger).claim(&self.run, &request_id, call, "effects");
        let (status, reason) = match (claimed.status, claimed.claim) {
            (ClaimStatus::Run, Some(claim)) => return Ok(Claimed { request_id, claim, cancelled: false }),
            (ClaimStatus::Run, None) => (
                claimed.status,
                "the policy planned no claim, and every call through the proxy is claimed".into(),
            ),
            (status, _) => (status, claimed.reason.unwrap_or_default()),
        };
        tracing::warn!("tools/call {}: not forwarded: {reason}", params.name);
        Err(json!({
            "content": [{"type": "text", "text": format!(
                "not forwarded to {}: the effect ledger could not claim it ({reason})", self.server)}],
            "isError": true,
            "_meta": {META_KEY: {
                "run_id": self.run.id, "request_id": request_id, "status": status, "reason": reason,
            }},
        }))
    }

    /// The client cancels a request: the upstream hears it under its own id.
    /// A call is marked, not settled: the upstream may finish it anyway,
    /// and its answer says so if it comes.
    fn cancelled(&self, notification: &mut Message) {
        let Some(params) = notification.get("params").and_then(|p| Message::of(p).ok()) else { return };
        let Some(client_id) = params.get("requestId") else { return };
        let mut in_flight = lock(&self.in_flight);
        let Some(ours) = in_flight.by_client.get(client_id.get()).cloned() else { return };
        if let Some(Claimed { cancelled, .. }) =
            in_flight.forwarded.get_mut(&ours).and_then(|forwarded| forwarded.call.as_mut())
        {
            *cancelled = true;
        }
        let mut params = params;
        params.set("requestId", raw(&ours));
        notification.set("params", params.to_raw());
    }

    /// The upstream's line, with its answers to forwarded requests given
    /// back their client ids (and calls settled); `None` when it cannot be
    /// read (its answer, if it was one, is then never settled or delivered
    /// but by [`Proxy::upstream_lost`]).
    fn upstream_line(&self, line: &[u8]) -> Option<Vec<u8>> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let text = String::from_utf8_lossy(line);
        match Line::parse(text.as_bytes()) {
            Ok(Line::One(message)) => Some(wire::line(&[self.upstream_message(message)], false)),
            Ok(Line::Batch(messages)) => {
                let messages: Vec<_> = messages.into_iter().map(|m| self.upstream_message(m)).collect();
                Some(wire::line(&messages, true))
            }
            Err(why) => {
                tracing::warn!("a line from {} is not JSON ({why}); dropped", self.server);
                None
            }
        }
    }

    fn upstream_message(&self, mut message: Message) -> Box<RawValue> {
        if message.method().is_some() {
            return message.to_raw();
        }
        let Some(ours) = message.text("id") else { return message.to_raw() };
        let forwarded = {
            let mut in_flight = lock(&self.in_flight);
            let Some(forwarded) = in_flight.forwarded.remove(&ours) else { return message.to_raw() };
            in_flight.by_client.remove(forwarded.client_id.get());
            forwarded
        };
        if let Some(call) = &forwarded.call {
            let settled = lock(&self.ledger).settle(&self.run, &call.request_id, &reported(&message), None);
            self.add_positions(&mut message, call, &settled);
        }
        message.set("id", forwarded.client_id);
        message.to_raw()
    }

    /// The ledger's positions in a result's `_meta` (a JSON-RPC error is
    /// kept as it was sent: it has none).
    fn add_positions(&self, answer: &mut Message, call: &Claimed, settled: &StepResult) {
        if settled.outcome.is_none() {
            tracing::warn!(
                "the outcome of {} was not recorded: {}",
                call.request_id,
                settled.reason.as_deref().unwrap_or("no reason given")
            );
        }
        let positions = json!({
            "run_id": self.run.id,
            "request_id": call.request_id,
            "claim": call.claim,
            "outcome": settled.outcome.as_ref().and_then(|outcome| outcome.position),
            "execution": settled.outcome.as_ref().map(|outcome| outcome.execution),
            "status": settled.status,
            "reason": settled.reason,
        });
        let Some(mut result) = answer.get("result").and_then(|r| Message::of(r).ok()) else { return };
        let mut meta = match result.get("_meta").map(Message::of) {
            None => Message::of(&raw(&json!({}))).expect("an object"),
            Some(Ok(meta)) => meta,
            Some(Err(_)) => return, // not an object: left as the upstream sent it
        };
        meta.set(META_KEY, raw(&positions));
        result.set("_meta", meta.to_raw());
        answer.set("result", result.to_raw());
    }

    /// The upstream ended: nothing more is forwarded, every call it did not
    /// answer is settled (CANCELLED if the client cancelled it, else
    /// UNKNOWN: it may have acted), and every request still waiting is
    /// answered with a JSON-RPC error.
    fn upstream_lost(&self) {
        let lost: Vec<Forwarded> = {
            let mut in_flight = lock(&self.in_flight);
            in_flight.closed = true;
            in_flight.by_client.clear();
            in_flight.forwarded.drain().map(|(_, forwarded)| forwarded).collect()
        };
        let mut answers = Vec::new();
        for forwarded in lost {
            let mut message = format!("{} ended before answering", self.server);
            if let Some(call) = &forwarded.call {
                let reported = Reported { cancelled: call.cancelled, ..Reported::ran(None) };
                lock(&self.ledger).settle(&self.run, &call.request_id, &reported, None);
                if call.cancelled {
                    continue; // the client gave up on it: no answer
                }
                message.push_str(
                    "; whether the call took effect is unknown (the ledger recorded it as UNKNOWN)",
                );
            }
            let positions = forwarded.call.as_ref().map(|call| {
                json!({META_KEY: {"run_id": self.run.id, "request_id": call.request_id, "claim": call.claim}})
            });
            answers.push(raw(&json!({
                "jsonrpc": "2.0",
                "id": forwarded.client_id,
                "error": {"code": UPSTREAM_LOST, "message": message, "data": positions},
            })));
        }
        for answer in answers {
            self.send_client(&[answer], false);
        }
    }
}

/// Relays the client's lines to the upstream until either end closes.
fn relay_client(proxy: &Proxy, mut upstream: ChildStdin) {
    let stdin = std::io::stdin();
    let mut reader = stdin.lock();
    let mut line = Vec::new();
    loop {
        match bounded::read_line(&mut reader, &mut line, INPUT_BOUND) {
            Ok(BoundedLine::End) | Err(_) => break,
            Ok(BoundedLine::Overlong) => {
                let why = format!("not forwarded: a message over {INPUT_BOUND} bytes");
                proxy.send_client(&[error(&raw(&Value::Null), INVALID_REQUEST, why)], false);
            }
            Ok(BoundedLine::Line) => {
                let Some(forward) = proxy.client_line(&line) else { continue };
                if upstream.write_all(&forward).and_then(|()| upstream.flush()).is_err() {
                    return;
                }
            }
        }
    }
    // The client closed its end: so does the proxy (the upstream's cue to exit).
}

/// Waits for the upstream to exit, killing it if it lingers after closing
/// its output.
fn reap(child: &mut Child) -> std::io::Result<std::process::ExitStatus> {
    let deadline = Instant::now() + EXIT_GRACE;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    tracing::warn!("the upstream closed its output but did not exit: killing it");
    let _ = child.kill();
    child.wait()
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
        let mut child = effect_ledger::data_dir::withhold_store(&mut std::process::Command::new(program))
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
            requests: AtomicU64::new(0),
            in_flight: Mutex::default(),
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
            match bounded::read_line(&mut reader, &mut line, UPSTREAM_BOUND) {
                Ok(BoundedLine::End) | Err(_) => break,
                Ok(BoundedLine::Line) => {
                    if let Some(answer) = proxy.upstream_line(&line) {
                        let mut out = lock(&proxy.client);
                        let _ = out.write_all(&answer).and_then(|()| out.flush());
                    }
                }
                Ok(BoundedLine::Overlong) => {
                    tracing::warn!("a line from {} is over {UPSTREAM_BOUND} bytes; dropped", proxy.server);
                }
            }
        }
        proxy.upstream_lost();
        let status = reap(&mut child).map_err(|e| Failure::new(super::super::exit::PROBLEMS, e))?;
        lock(&proxy.ledger).sync().map_err(|e| {
            Failure::new(super::super::exit::PROBLEMS, anyhow!("making the log durable: {e}"))
        })?;
        eprintln!("effects mcp-proxy: upstream {} ended ({status})", proxy.server);
        Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::from(super::super::exit::PROBLEMS) })
    }
}
