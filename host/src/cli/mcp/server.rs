//! `effects mcp`'s server: the reference tools the host runs, each call one
//! step of the server's run (the step engine split at its command, as
//! `effects serve` runs it: `Ledger::start`, `Running::wait` without the
//! ledger's lock, `Ledger::finish`), plus `complete` (the decision, CMP-6)
//! and `check` (only the operator's `--check` commands, CMP-5). A write, an
//! edit or a patch that ran is read back, each file it changed in a
//! `read_file` step of its own right after it (CMP-3), and its result
//! carries those readbacks. At most [`STEPS_AT_ONCE`] steps run at once.
//!
//! Every result carries the step's envelope as `structuredContent`, which
//! the tool's `outputSchema` (the envelope's JSON Schema) describes, and a
//! text for the model; `isError` unless the step ran, was recorded and did
//! what was asked. Input the tool does not take is a refused step, not a
//! protocol error, so the model can read why and try again. A command's
//! call reports progress each second when the client asks, and a
//! `notifications/cancelled` cancels it (the process group torn down,
//! CANCELLED recorded), whether or not the client still waits for the answer.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use schemars::{JsonSchema, schema_for};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use effect_ledger::ledger::{Ledger, Run, Running, StepRequest, StepResult, StepStatus, Waited};
use effect_ledger::log::LogError;
use effect_ledger::producers::process::CancelToken;
use effect_ledger::tools::{Call, RunsBy, catalogue};
use effects_fs_transform::{PatchOp, parse_patch};

use crate::cli::decide::DecisionView;
use crate::cli::log::{of_run, record_json};

/// A check's timeout (the same as a session's `verify` default).
const CHECK_TIMEOUT: Duration = Duration::from_secs(600);

/// How often a call with a progress token hears that it still runs.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Steps (and decisions and resource reads) running at once; the others
/// wait, as tasks, for a slot. The ledger records one step at a time (one
/// lock), so running more at once only overlaps commands' waits; agent
/// hosts fan out a handful of parallel calls (Claude Code runs at most 10
/// tools at once by default), so 16 holds back no real client, while each
/// running step holds a thread of the blocking pool (a command also its
/// supervisor and stream readers): 16 bounds the threads and the memory
/// that 500 pipelined calls used to take (one thread each, 889 MB).
pub const STEPS_AT_ONCE: usize = 16;

/// The server: one ledger and one run, shared by the calls in flight.
#[derive(Clone)]
pub struct Ledgered(Arc<Inner>);

struct Inner {
    ledger: Mutex<Ledger>,
    run: Run,
    checks: BTreeMap<String, String>,
    tools: Vec<Tool>,
    /// Request ids are `<prefix>-<n>` (`request_prefix`).
    prefix: String,
    steps: AtomicU64,
    /// The last decision `complete` took.
    decision: Mutex<Option<DecisionView>>,
    /// Cancel tokens of the commands running, by request id.
    running: Mutex<BTreeMap<String, CancelToken>>,
    /// Slots for work on the blocking pool ([`STEPS_AT_ONCE`]).
    slots: Arc<Semaphore>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A call that panicked leaves the ledger as consistent as the log is
    // (every write is one record): go on.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `complete`'s input.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CompleteInput {
    /// The final answer you intend to give the user.
    answer: String,
    /// Files (beneath the root) the answer says exist.
    #[serde(default)]
    required: Vec<String>,
}

/// `check`'s input.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckInput {
    name: String,
}

/// A schema as a tool's `inputSchema` or `outputSchema`, made portable.
fn object(schema: impl serde::Serialize) -> Arc<JsonObject> {
    let mut schema = serde_json::to_value(schema).expect("a schema serializes");
    portable(&mut schema);
    match schema {
        Value::Object(object) => Arc::new(object),
        _ => unreachable!("a JSON Schema of a struct is an object"),
    }
}

/// Rewrites the two spellings of schemars' output that MCP clients read
/// least well (the MCP Inspector's `--strict` check names both): a nullable
/// `"type": [T, "null"]` becomes `anyOf` of single types (the dialects that
/// map tool schemas onto one `type`, Gemini's among them), and Rust's
/// integer `format`s (`uint64`, ...), which JSON Schema does not define and
/// validators warn about, are dropped (the `minimum` schemars writes stays).
fn portable(schema: &mut Value) {
    match schema {
        Value::Object(object) => {
            if object
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| f.starts_with("int") || f.starts_with("uint"))
            {
                object.remove("format");
            }
            if let Some(Value::Array(types)) = object.get("type") {
                let any_of = types.iter().map(|t| json!({"type": t})).collect::<Vec<_>>();
                object.remove("type");
                object.insert("anyOf".into(), Value::Array(any_of));
            }
            object.values_mut().for_each(portable);
        }
        Value::Array(items) => items.iter_mut().for_each(portable),
        _ => {}
    }
}

/// What the model is told a tool may do (MCP's hints, never trusted by a
/// client for safety, so they are the ledger's own view): reads are
/// read-only and idempotent; a write replaces content (idempotent), an edit
/// or a patch does not; commands may do anything, anywhere.
fn annotations(tool: &str) -> ToolAnnotations {
    let hints = ToolAnnotations::new();
    match tool {
        "read_file" | "ls" | "glob" | "grep" => {
            hints.read_only(true).destructive(false).idempotent(true).open_world(false)
        }
        "write_file" => hints.read_only(false).destructive(true).idempotent(true).open_world(false),
        "edit_file" | "apply_patch" => {
            hints.read_only(false).destructive(true).idempotent(false).open_world(false)
        }
        _ => hints.read_only(false).destructive(true).idempotent(false).open_world(true),
    }
}

/// The tool list: the reference tools the host runs, `complete`, and
/// `check` when the operator named checks.
fn tool_list(checks: &BTreeMap<String, String>) -> Vec<Tool> {
    let step_schema = object(schema_for!(StepResult));
    let mut tools: Vec<Tool> = catalogue()
        .into_iter()
        .filter(|spec| spec.runs_by == RunsBy::Host)
        .map(|spec| {
            let description = format!(
                "{} Through the effect ledger: claimed durably before it acts, its outcome settled and \
                 what it touched read back; the result's structuredContent is the step's record.",
                spec.description
            );
            Tool::new(spec.name, description, object(&spec.input_schema))
                .with_raw_output_schema(Arc::clone(&step_schema))
                .with_annotations(annotations(spec.name))
        })
        .collect();
    let complete = Tool::new(
        "complete",
        "Decide whether the work is done, before you answer: COMPLETED, FAILED, BLOCKED or UNVERIFIED, \
         from what the ledger recorded (never from what you say), with the disclosures your answer must \
         carry. Give the answer you intend and the files it says exist; present the returned `answer`.",
        object(schema_for!(CompleteInput)),
    )
    .with_raw_output_schema(object(schema_for!(DecisionView)))
    .with_annotations(
        ToolAnnotations::new().read_only(false).destructive(false).idempotent(true).open_world(false),
    );
    tools.push(complete);
    if !checks.is_empty() {
        let names: Vec<&str> = checks.keys().map(String::as_str).collect();
        let input = json!({
            "type": "object",
            "properties": {"name": {"type": "string", "enum": names, "description": "The check to run."}},
            "required": ["name"],
            "additionalProperties": false,
        });
        let description = format!(
            "Run one of the operator's checks (their commands, not yours): {}. A passing check verifies \
             the run's postconditions; its result is recorded.",
            checks
                .iter()
                .map(|(name, command)| format!("`{name}` ({command})"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        tools.push(
            Tool::new("check", description, object(input))
                .with_raw_output_schema(step_schema)
                .with_annotations(annotations("bash")),
        );
    }
    tools
}

/// A step's result as MCP's: the envelope as `structuredContent`, a text
/// for the model, `isError` unless it ran, was recorded and did what was asked.
fn step_result(result: &StepResult) -> CallToolResult {
    let ok = result.status == StepStatus::Ran && result.result.ok;
    let mut answer = CallToolResult::structured(serde_json::to_value(result).expect("a step serializes"));
    answer.content = vec![ContentBlock::text(step_text(result))];
    answer.is_error = Some(!ok);
    answer
}

/// What the model reads: the tool's answer, then the ledger's line.
fn step_text(result: &StepResult) -> String {
    let tool = &result.result;
    let mut text = String::new();
    if let Some(answer) = &tool.text {
        text.push_str(answer);
        text.push('\n');
    }
    for (name, stream) in [("stdout", &tool.stdout), ("stderr", &tool.stderr)] {
        if let Some(stream) = stream.as_deref().filter(|s| !s.is_empty()) {
            text.push_str(&format!("[{name}]\n{stream}"));
            if !stream.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    if let Some(error) = &tool.error {
        text.push_str(&format!("error: {error}\n"));
    }
    let mut ledger = format!("[ledger] step {}: {}", result.step, name(result.status));
    if let Some(outcome) = &result.outcome {
        ledger.push_str(&format!(", outcome {}", name(outcome.execution)));
    }
    if let Some(code) = tool.exit_code {
        ledger.push_str(&format!(", exit {code}"));
    }
    if tool.timed_out {
        ledger.push_str(", timed out");
    }
    if !result.observations.is_empty() {
        ledger.push_str(&format!(", {} readback(s)", result.observations.len()));
    }
    if let Some(reason) = &result.reason {
        ledger.push_str(&format!(": {reason}"));
    }
    text.push_str(&ledger);
    text
}

/// A unit variant's name as it is serialized (`RAN`, `REPORTED_SUCCESS`).
fn name(value: impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        other => format!("{other:?}"),
    }
}

impl Ledgered {
    pub fn new(ledger: Ledger, run: Run, checks: BTreeMap<String, String>) -> Self {
        let tools = tool_list(&checks);
        Self(Arc::new(Inner {
            ledger: Mutex::new(ledger),
            run,
            checks,
            tools,
            prefix: super::request_prefix("mcp"),
            steps: AtomicU64::new(0),
            decision: Mutex::default(),
            running: Mutex::default(),
            slots: Arc::new(Semaphore::new(STEPS_AT_ONCE)),
        }))
    }

    /// Serves MCP on stdin and stdout until the client closes them.
    pub async fn serve(self) -> anyhow::Result<()> {
        let stdio = super::stdio::Lines::new(tokio::io::stdin(), tokio::io::stdout());
        let service = ServiceExt::serve(self, stdio).await.context("starting MCP on stdio")?;
        service.waiting().await.context("serving MCP")?;
        Ok(())
    }

    /// Cancels every command still running (their ends are recorded as
    /// CANCELLED by the calls that started them).
    pub fn shut_down(&self) {
        for (id, token) in lock(&self.0.running).iter() {
            tracing::info!("the client went away: cancelling {id}");
            token.cancel();
        }
    }

    /// Makes the log durable (outcomes ride the next fsync, LOG-3).
    pub fn sync(&self) -> Result<(), LogError> {
        lock(&self.0.ledger).sync()
    }

    fn next(&self) -> (u64, String) {
        self.0.next()
    }

    fn refused(&self, step: u64, request_id: &str, tool: &str, reason: String) -> CallToolResult {
        step_result(&StepResult::unrun(&self.0.run, step, request_id, tool, StepStatus::Refused, reason))
    }

    /// One reference tool's call, as a step.
    async fn tool(&self, name: &str, input: Value, context: &RequestContext<RoleServer>) -> CallToolResult {
        let (step, request_id) = self.next();
        let call = match Call::parse(name, &input) {
            Ok(call) => call,
            Err(error) => {
                return self.refused(step, &request_id, name, format!("{}: {}", error.tool, error.message));
            }
        };
        let written = written_paths(&call);
        let request = match StepRequest::new(step, &request_id, call, None) {
            Ok(request) => request,
            Err(error) => return self.refused(step, &request_id, name, error.to_string()),
        };
        let run = self.0.run.clone();
        let started = move |ledger: &mut Ledger, token| ledger.start(&run, &request, Some(token));
        let inner = Arc::clone(&self.0);
        let finished = move |ledger: &mut Ledger, waited| {
            let mut result = ledger.finish(&inner.run, waited);
            inner.read_back(ledger, &mut result, &written);
            result
        };
        step_result(&self.cancellable(&request_id, name, context, started, finished).await)
    }

    /// An operator's check, as a `verify` step.
    async fn check(&self, input: Value, context: &RequestContext<RoleServer>) -> CallToolResult {
        let (step, request_id) = self.next();
        let name = match serde_json::from_value::<CheckInput>(input) {
            Ok(input) => input.name,
            Err(error) => return self.refused(step, &request_id, "verify", format!("check: {error}")),
        };
        let Some(command) = self.0.checks.get(&name).cloned() else {
            let offered = self.0.checks.keys().cloned().collect::<Vec<_>>().join(", ");
            let reason = format!(
                "no check named `{name}`: checks are the operator's (`effects mcp --check NAME=COMMAND`, \
                 CMP-5); offered: {offered}"
            );
            return self.refused(step, &request_id, "verify", reason);
        };
        let run = self.0.run.clone();
        let started = move |ledger: &mut Ledger, token| {
            ledger
                .start_check(&run, &command, CHECK_TIMEOUT, Some(token))
                .map_err(|error| Box::new(error.step(&run, step)))
        };
        let run = self.0.run.clone();
        let finished = move |ledger: &mut Ledger, waited| match ledger.finish_check(&run, waited) {
            Ok(verified) => verified.step,
            Err(error) => error.step(&run, step),
        };
        let mut result = self.cancellable(&request_id, "verify", context, started, finished).await;
        result.step = step;
        step_result(&result)
    }

    /// Starts a step on the blocking pool with a cancel token the client's
    /// `notifications/cancelled` fires, waits for it without the ledger
    /// (with progress each second if the client gave a token), and records
    /// its end. The blocking task records the end even if this future is
    /// dropped.
    async fn cancellable(
        &self,
        request_id: &str,
        what: &str,
        context: &RequestContext<RoleServer>,
        start: impl FnOnce(&mut Ledger, CancelToken) -> Result<Running, Box<StepResult>> + Send + 'static,
        finish: impl FnOnce(&mut Ledger, Waited) -> StepResult + Send + 'static,
    ) -> StepResult {
        // A call cancelled before it has a slot (waiting for one, or before
        // its turn came) never starts: nothing is claimed, and the client
        // has stopped waiting for its answer. Biased, so a cancel already
        // made wins over a slot free at the same moment.
        let slot = tokio::select! {
            biased;
            () = context.ct.cancelled() => {
                let reason = "cancelled before it began: nothing was claimed or run".to_owned();
                return StepResult::unrun(&self.0.run, 0, request_id, what, StepStatus::Refused, reason);
            }
            slot = Arc::clone(&self.0.slots).acquire_owned() => slot.expect("the slots are never closed"),
        };
        let token = CancelToken::default();
        lock(&self.0.running).insert(request_id.to_owned(), token.clone());
        let cancelled = context.ct.clone();
        let watcher = {
            let token = token.clone();
            tokio::spawn(async move {
                cancelled.cancelled().await;
                token.cancel();
            })
        };
        let progress = context
            .meta
            .get_progress_token()
            .map(|progress| tokio::spawn(tick(context.peer.clone(), progress, what.to_owned())));
        let inner = Arc::clone(&self.0);
        let id = request_id.to_owned();
        let done = tokio::task::spawn_blocking(move || {
            let started = start(&mut lock(&inner.ledger), token);
            let result = match started {
                Ok(running) => {
                    let waited = running.wait();
                    finish(&mut lock(&inner.ledger), waited)
                }
                Err(ended) => *ended,
            };
            lock(&inner.running).remove(&id);
            drop(slot);
            result
        })
        .await;
        watcher.abort();
        if let Some(progress) = progress {
            progress.abort();
        }
        done.unwrap_or_else(|panicked| {
            let reason = format!("the step's thread panicked ({panicked}); its claim stays unsettled");
            StepResult::unrun(&self.0.run, 0, request_id, what, StepStatus::NotRecorded, reason)
        })
    }

    /// Runs `work` (which takes the ledger's lock) on the blocking pool, so
    /// the service loop keeps reading cancellations and pings meanwhile.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Self) -> Result<T, McpError> + Send + 'static,
    ) -> Result<T, McpError> {
        let server = self.clone();
        let slot = Arc::clone(&self.0.slots).acquire_owned().await.expect("the slots are never closed");
        tokio::task::spawn_blocking(move || {
            let done = work(&server);
            drop(slot);
            done
        })
        .await
        .unwrap_or_else(|panicked| Err(McpError::internal_error(format!("panicked: {panicked}"), None)))
    }

    fn complete(&self, input: Value) -> Result<CallToolResult, McpError> {
        let input: CompleteInput = match serde_json::from_value(input) {
            Ok(input) => input,
            Err(error) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "complete: {error}; give {{\"answer\": \"...\", \"required\": [\"path\", ...]}}"
                ))]));
            }
        };
        let completed = lock(&self.0.ledger).complete(&self.0.run, &input.required, &input.answer);
        let completion = match completed {
            Ok(completion) => completion,
            // A decision that cannot be taken is a domain answer (EMB-2).
            Err(effect_ledger::ledger::CompleteError::Log(error)) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "complete: the run's log cannot be read ({error}); nothing was decided, so the work is \
                     not known to be done"
                ))]));
            }
            Err(refused) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!("complete: {refused}"))]));
            }
        };
        let view = DecisionView::of(&completion);
        *lock(&self.0.decision) = Some(view.clone());
        let mut text = name(view.verdict);
        for reason in &view.reasons {
            text.push_str(&format!("\n- {} ({}): {}", reason.message, name(reason.code), reason.remedy));
        }
        text.push_str(&format!("\n\nPresent this answer:\n{}", view.answer));
        let mut result =
            CallToolResult::structured(serde_json::to_value(&view).expect("a decision serializes"));
        result.content = vec![ContentBlock::text(text)];
        Ok(result)
    }

    fn uri(&self, what: &str) -> String {
        format!("effects://run/{}/{what}", self.0.run.id)
    }

    /// The last decision, with whether evidence came after it (CMP-12).
    fn decision_json(&self) -> Result<Value, McpError> {
        let decision = lock(&self.0.decision).clone();
        let Some(decision) = decision else {
            return Ok(json!({"decision": null, "stale": false, "stale_since": null}));
        };
        let stale_since = lock(&self.0.ledger)
            .stale_since(&self.0.run, decision.recorded)
            .map_err(|e| McpError::internal_error(format!("the run's log: {e}"), None))?;
        Ok(json!({"decision": decision, "stale": stale_since.is_some(), "stale_since": stale_since}))
    }

    /// The run's records, one JSON object per line (`effects log show --json`).
    fn log_lines(&self) -> Result<String, McpError> {
        let history = lock(&self.0.ledger)
            .history(&self.0.run.lineage)
            .map_err(|e| McpError::internal_error(format!("the run's log: {e}"), None))?;
        let mut lines = String::new();
        for framed in history.iter().filter(|framed| of_run(framed, &self.0.run.id)) {
            lines.push_str(&record_json(framed).to_string());
            lines.push('\n');
        }
        Ok(lines)
    }
}

/// The files a write, an edit or a patch may have changed, each to be read
/// back (a deleted or moved-away one too: its absence is what is read).
fn written_paths(call: &Call) -> Vec<String> {
    match call {
        Call::WriteFile(write) => vec![write.path.clone()],
        Call::EditFile(edit) => vec![edit.path.clone()],
        // A patch that does not parse changes nothing: its step fails.
        Call::ApplyPatch(patch) => parse_patch(&patch.patch)
            .unwrap_or_default()
            .into_iter()
            .flat_map(|op| match op {
                PatchOp::Add { path, .. } | PatchOp::Delete { path } => vec![path],
                PatchOp::Update { path, move_to, .. } => std::iter::once(path).chain(move_to).collect(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl Inner {
    fn next(&self) -> (u64, String) {
        let step = self.steps.fetch_add(1, Ordering::Relaxed) + 1;
        (step, format!("{}-{step}", self.prefix))
    }

    /// Reads back, each in a `read_file` step of its own right after the
    /// write's (the ledger's lock still held, so nothing comes between),
    /// every file a write that ran changed, and adds the reads'
    /// observations to the write's result (CMP-3: a whole read is the read
    /// that verifies a write). A read that cannot be made or recorded is
    /// said in the result's reason: the write stays unverified, never
    /// undone.
    fn read_back(&self, ledger: &mut Ledger, result: &mut StepResult, written: &[String]) {
        let ran = result.status == StepStatus::Ran && result.outcome.is_some();
        for path in written.iter().filter(|_| ran) {
            let (step, request_id) = self.next();
            let read = Call::parse("read_file", &json!({"path": path}))
                .map_err(|error| error.message)
                .and_then(|call| StepRequest::new(step, &request_id, call, None).map_err(|e| e.to_string()))
                .map(|request| ledger.step(&self.run, &request));
            let why = match read {
                Ok(read) if read.status == StepStatus::Ran || !read.observations.is_empty() => {
                    result.observations.extend(read.observations);
                    continue;
                }
                Ok(read) => read.reason.unwrap_or_default(),
                Err(why) => why,
            };
            result.reason.get_or_insert_with(|| format!("{path} was not read back: {why}"));
        }
    }
}

/// Sends `notifications/progress` every second (seconds so far) until aborted.
async fn tick(peer: Peer<RoleServer>, token: ProgressToken, what: String) {
    let began = Instant::now();
    let mut every = tokio::time::interval(PROGRESS_EVERY);
    every.tick().await;
    loop {
        every.tick().await;
        let seconds = began.elapsed().as_secs_f64();
        let mut progress = ProgressNotificationParam::new(token.clone(), seconds);
        progress.message = Some(format!("{what} running for {seconds:.0} s"));
        if peer.notify_progress(progress).await.is_err() {
            return;
        }
    }
}

impl ServerHandler for Ledgered {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools().enable_resources().build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("effects", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Tools through the effect ledger: every change is claimed before it happens and read back \
                 after. Before you tell the user the work is done, call `complete` with your answer and \
                 present the answer it returns. Run {}; its decision and log are resources.",
                self.0.run.id
            ))
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.0.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.0.tools.iter().find(|tool| tool.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let input = Value::Object(request.arguments.unwrap_or_default());
        let result = match request.name.as_ref() {
            "complete" => self.blocking(move |server| server.complete(input)).await?,
            "check" if !self.0.checks.is_empty() => self.check(input, &context).await,
            name if self.0.tools.iter().any(|tool| tool.name == name) => {
                self.tool(name, input, &context).await
            }
            other => {
                return Err(McpError::invalid_params(
                    format!("no tool `{other}`; tools/list names them"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let decision = Resource::new(self.uri("decision"), "decision")
            .with_description("The run's last completion decision (null before `complete`), and whether evidence came after it.")
            .with_mime_type("application/json");
        let log = Resource::new(self.uri("log"), "log")
            .with_description("The run's log records, one JSON object per line.")
            .with_mime_type("application/x-ndjson");
        Ok(ListResourcesResult::with_all_items(vec![decision, log]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let text = if request.uri == self.uri("decision") {
            let decision = self.blocking(|server| server.decision_json()).await?;
            serde_json::to_string_pretty(&decision).expect("JSON serializes")
        } else if request.uri == self.uri("log") {
            self.blocking(|server| server.log_lines()).await?
        } else {
            return Err(McpError::resource_not_found(
                format!("no resource {}; resources/list names this run's", request.uri),
                None,
            ));
        };
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, request.uri)]).into())
    }
}
