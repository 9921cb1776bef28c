//! The methods of `effects serve` over one ledger (docs/serve.md): the runs
//! this server began or continued, the last decision of each, the checks the
//! operator named, and the cancel tokens of what is running.
//!
//! Every method is the library's: `Ledger::claim` and `Ledger::settle` for a
//! tool the runtime runs (EMB-1, EMB-3, EMB-4), the step engine split at its
//! command (`Ledger::start`, `Running::wait`, `Ledger::finish`) for one the
//! host runs, so the ledger's lock is held to claim and to record and never
//! while a command runs. Refusals are results (EMB-2); a JSON-RPC error only
//! for a message that is wrong.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use effect_ledger::ledger::{
    ClaimStatus, Claimed, CompleteError, Ledger, PROFILES, Run, Running, StepRequest, StepResult, StepStatus,
    Waited,
};
use effect_ledger::log::{Executor, LogError};
use effect_ledger::producers::process::CancelToken;
use effect_ledger::runtime_window::{Survivor, Window};
use effect_ledger::tools::{Call, RunsBy, catalogue, is_command};

use super::protocol::{
    AnnotateParams, AnnotateResult, CancelledParams, CheckParams, ClaimParams, CompleteParams,
    DecisionParams, DecisionResult, Empty, ExecuteParams, InitializeParams, InitializeResult,
    JsonRpcResponse, PROTOCOL_VERSION, Peer, PolicyInfo, ProgressParams, RequestId, RequestMeta,
    RunBeginParams, RunContinueParams, RunInfo, RunResult, SettleParams, ToolInfo, code,
};
use super::workers::Workers;
use super::{Outgoing, error_line};
use crate::cli::decide::DecisionView;

/// A check's timeout (the same as a session's `verify` default).
const CHECK_TIMEOUT: Duration = Duration::from_secs(600);

/// How often a request with a progress token hears that it still runs.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// A JSON-RPC error: its code and message.
struct Fault(i64, String);

type Answer = Result<Value, Fault>;

/// A successful answer's line.
pub(super) fn result_line(id: RequestId, result: &impl Serialize) -> String {
    let result = serde_json::to_value(result).expect("a result serializes");
    serde_json::to_string(&JsonRpcResponse { jsonrpc: "2.0".into(), id, result })
        .expect("an answer serializes")
}

fn answer(value: impl Serialize) -> Answer {
    Ok(serde_json::to_value(value).expect("a result serializes"))
}

/// A method's params in its type, or -32602 naming the field.
fn params<T: DeserializeOwned>(params: Map<String, Value>) -> Result<T, Fault> {
    serde_path_to_error::deserialize(Value::Object(params)).map_err(|error| {
        let at = error.path().to_string();
        let at = if at == "." { String::new() } else { format!(" at `{at}`") };
        Fault(code::INVALID_PARAMS, format!("params{at}: {}", error.into_inner()))
    })
}

/// The server's state: one ledger, shared by the request threads.
pub struct Server {
    ledger: Mutex<Ledger>,
    info: InitializeResult,
    checks: BTreeMap<String, String>,
    /// Runs this server began or continued, by id.
    runs: Mutex<HashMap<String, Run>>,
    /// The last decision this server took, by run id.
    decisions: Mutex<HashMap<String, DecisionView>>,
    /// Cancel tokens of running requests, by id (as JSON).
    running: Mutex<HashMap<String, CancelToken>>,
    /// Ids (as JSON) of requests taken and not yet answered: a second
    /// request with one of them is refused, never run beside the first.
    in_flight: Mutex<HashSet<String>>,
    /// The executor of `effect/claim` claims: the runtime (LOG-7), found
    /// at `initialize`.
    runtime: Mutex<Option<Executor>>,
    /// The windows of runtime-run commands claimed here and not yet
    /// settled, by (run id, request id): when each was claimed, for the
    /// `/proc` look at its settle (SPEC 14, INV-2 extended).
    windows: Mutex<HashMap<(String, String), Window>>,
    /// The request threads.
    workers: Workers,
    initialized: AtomicBool,
    shutting_down: AtomicBool,
    /// Step numbers for results (one count for the server).
    steps: AtomicU64,
    out: std::sync::Arc<Mutex<Outgoing>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A request thread that panicked leaves the ledger as consistent as the
    // log is (every write is one record): go on.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn run_info(run: &Run) -> RunInfo {
    RunInfo { id: run.id.clone(), lineage: run.lineage.clone(), parent: run.parent.clone() }
}

impl Server {
    pub fn new(ledger: Ledger, data_dir: String, checks: BTreeMap<String, String>, out: Outgoing) -> Self {
        let manifest = ledger.manifest();
        let policies = manifest
            .components
            .iter()
            .map(|entry| PolicyInfo {
                name: entry.name.clone(),
                digest: entry.sha256.to_string(),
                world: serde_json::to_value(entry.world)
                    .ok()
                    .and_then(|w| w.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                tools: entry.tools.clone(),
            })
            .collect();
        let tools = catalogue()
            .into_iter()
            .map(|tool| ToolInfo {
                name: tool.name.to_owned(),
                description: tool.description.to_owned(),
                input_schema: tool.input_schema.as_object().cloned().unwrap_or_default(),
                family: serde_json::to_value(tool.family)
                    .ok()
                    .and_then(|f| f.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                runs_by: match tool.runs_by {
                    RunsBy::Host => "HOST".into(),
                    RunsBy::Runtime => "RUNTIME".into(),
                },
            })
            .collect();
        let info = InitializeResult {
            protocol_version: PROTOCOL_VERSION.into(),
            server: Peer { name: "effects".into(), version: env!("CARGO_PKG_VERSION").into() },
            root: ledger.root().root().path.clone(),
            data_dir,
            policies,
            tools,
            profiles: PROFILES.iter().map(|p| (*p).to_owned()).collect(),
            checks: checks.keys().cloned().collect(),
        };
        Self {
            ledger: Mutex::new(ledger),
            info,
            checks,
            runs: Mutex::default(),
            decisions: Mutex::default(),
            running: Mutex::default(),
            in_flight: Mutex::default(),
            runtime: Mutex::default(),
            windows: Mutex::default(),
            workers: Workers::default(),
            initialized: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            steps: AtomicU64::new(0),
            out: std::sync::Arc::new(Mutex::new(out)),
        }
    }

    /// Writes one line to stdout.
    pub fn send(&self, line: String) {
        lock(&self.out).send(line);
    }

    /// Takes one parsed message: a request runs on a worker (waiting for
    /// room in the pool's queue: back-pressure), a notification here;
    /// `Some(id)` for `shutdown`, which ends reading.
    pub fn accept(self: &std::sync::Arc<Self>, message: Value) -> Option<RequestId> {
        let Value::Object(mut message) = message else {
            let what = if message.is_array() { "a batch (not supported)" } else { "not an object" };
            self.send(error_line(
                None,
                code::INVALID_REQUEST,
                format!("the message is {what}; send one JSON-RPC 2.0 request per line"),
            ));
            return None;
        };
        let id = match message.remove("id") {
            None => None,
            Some(id) => match serde_json::from_value::<RequestId>(id) {
                Ok(id) => Some(id),
                Err(_) => {
                    self.send(error_line(
                        None,
                        code::INVALID_REQUEST,
                        "`id` must be a number or a string".into(),
                    ));
                    return None;
                }
            },
        };
        let version = message.remove("jsonrpc");
        let method = message.remove("method");
        let params = message.remove("params");
        let invalid = |why: String| Some(error_line(id.clone(), code::INVALID_REQUEST, why));
        let refusal = if version != Some(Value::String("2.0".into())) {
            invalid("`jsonrpc` must be \"2.0\"".into())
        } else if let Some(extra) = message.keys().next() {
            invalid(format!("unknown member `{extra}`"))
        } else {
            None
        };
        if let Some(line) = refusal {
            self.send(line);
            return None;
        }
        let Some(Value::String(method)) = method else {
            self.send(error_line(id, code::INVALID_REQUEST, "`method` must be a string".into()));
            return None;
        };
        let params = match params {
            None => Map::new(),
            Some(Value::Object(params)) => params,
            Some(_) => {
                self.send(error_line(id, code::INVALID_PARAMS, "`params` must be an object".into()));
                return None;
            }
        };
        let Some(id) = id else {
            self.notification(&method, params);
            return None;
        };
        let key = serde_json::to_string(&id).expect("an id serializes");
        if lock(&self.in_flight).contains(&key) {
            // Two requests under one id could not be told apart by their
            // answers (nor cancelled one without the other): the second is
            // refused, and the first goes on.
            self.send(error_line(
                Some(id),
                code::INVALID_REQUEST,
                format!("request id {key} is already in flight; give each request in flight its own id"),
            ));
            return None;
        }
        if self.shutting_down.load(Ordering::SeqCst) {
            self.send(error_line(Some(id), code::SHUTTING_DOWN, "the server is shutting down".into()));
            return None;
        }
        if method != "initialize" && !self.initialized.load(Ordering::SeqCst) {
            self.send(error_line(
                Some(id),
                code::NOT_INITIALIZED,
                format!("`{method}` before `initialize`: send initialize first"),
            ));
            return None;
        }
        if method == "initialize" {
            // Answered in order: what is pipelined after it is initialized.
            let answered = self.call(&id, &method, params);
            self.answer(&key, id, answered);
            return None;
        }
        if method == "shutdown" {
            if let Err(Fault(code, message)) = self::params::<Empty>(params) {
                self.send(error_line(Some(id), code, message));
                return None;
            }
            self.shutting_down.store(true, Ordering::SeqCst);
            return Some(id);
        }
        self.dispatch(key, id, method, params);
        None
    }

    /// Runs a request on a worker, in flight under `key` until answered; a
    /// request no worker can take is answered -32005, never dropped.
    fn dispatch(
        self: &std::sync::Arc<Self>,
        key: String,
        id: RequestId,
        method: String,
        params: Map<String, Value>,
    ) {
        lock(&self.in_flight).insert(key.clone());
        let server = std::sync::Arc::clone(self);
        let (job_key, job_id) = (key.clone(), id.clone());
        let queued = self.workers.run(Box::new(move || {
            let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                server.call(&job_id, &method, params)
            }));
            let answered = called.unwrap_or_else(|_| {
                Err(Fault(
                    code::INTERNAL_ERROR,
                    "the request failed inside the server; what it recorded is in the run's log".into(),
                ))
            });
            server.answer(&job_key, job_id, answered);
        }));
        if let Err(error) = queued {
            let why = format!(
                "no thread could be started for the request ({error}); nothing was run: retry when fewer \
                 requests are in flight"
            );
            self.answer(&key, id, Err(Fault(code::NO_WORKER, why)));
        }
    }

    /// Answers the request `id` (in flight under `key`): its id is free
    /// again before the answer is written, so a client may reuse it as soon
    /// as it reads the answer.
    fn answer(&self, key: &str, id: RequestId, answered: Answer) {
        lock(&self.in_flight).remove(key);
        self.send(match answered {
            Ok(result) => result_line(id, &result),
            Err(Fault(code, message)) => error_line(Some(id), code, message),
        });
    }

    /// Waits for every request in flight.
    pub fn drain(&self) {
        self.workers.drain();
    }

    /// Makes the log durable (outcomes ride the next fsync, LOG-3).
    pub fn sync(&self) -> Result<(), LogError> {
        lock(&self.ledger).sync()
    }

    fn notification(&self, method: &str, params: Map<String, Value>) {
        match method {
            "notifications/cancelled" => match self::params::<CancelledParams>(params) {
                Ok(cancelled) => {
                    let key = serde_json::to_string(&cancelled.request_id).expect("an id serializes");
                    match lock(&self.running).get(&key) {
                        Some(token) => {
                            tracing::info!(
                                "cancelling request {key}: {}",
                                cancelled.reason.unwrap_or_default()
                            );
                            token.cancel();
                        }
                        // Finished already, or never cancellable: nothing to do.
                        None => tracing::debug!("cancel for request {key}, which is not running"),
                    }
                }
                Err(Fault(_, message)) => tracing::warn!("notifications/cancelled: {message}"),
            },
            // Notifications get no answer, not even for an unknown method.
            other => tracing::debug!("ignoring notification {other}"),
        }
    }

    fn call(&self, id: &RequestId, method: &str, raw: Map<String, Value>) -> Answer {
        let meta: RequestMeta = match raw.get("_meta") {
            Some(meta) => serde_json::from_value(meta.clone())
                .map_err(|e| Fault(code::INVALID_PARAMS, format!("params at `_meta`: {e}")))?,
            None => RequestMeta::default(),
        };
        match method {
            "initialize" => self.initialize(params(raw)?),
            "run/begin" => self.begin(params(raw)?),
            "run/continue" => self.continue_run(params(raw)?),
            "effect/claim" => self.claim(params(raw)?),
            "effect/settle" => self.settle(params(raw)?),
            "effect/execute" => self.execute(id, meta, params(raw)?),
            "check/run" => self.check(id, meta, params(raw)?),
            "run/complete" => self.complete(params(raw)?),
            "run/decision" => self.decision(params(raw)?),
            "run/annotate" => self.annotate(params(raw)?),
            other => Err(Fault(
                code::METHOD_NOT_FOUND,
                format!(
                    "no method `{other}`; docs/serve.md lists them (initialize, run/begin, effect/claim, ...)"
                ),
            )),
        }
    }

    fn run(&self, id: &str) -> Result<Run, Fault> {
        lock(&self.runs).get(id).cloned().ok_or_else(|| {
            Fault(code::UNKNOWN_RUN, format!("run `{id}` was not begun or continued by this server: call run/begin or run/continue first"))
        })
    }

    fn step_number(&self) -> u64 {
        self.steps.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn initialize(&self, params: InitializeParams) -> Answer {
        if params.protocol_version != PROTOCOL_VERSION {
            return Err(Fault(
                code::INVALID_PARAMS,
                format!(
                    "protocol_version {:?} is not spoken here; this server speaks {PROTOCOL_VERSION:?}",
                    params.protocol_version
                ),
            ));
        }
        if let Some(client) = &params.client {
            tracing::info!("client {} {}", client.name, client.version);
        }
        let runtime = super::executor::runtime(params.executor_pid)
            .map_err(|why| Fault(code::INVALID_PARAMS, format!("params at `executor_pid`: {why}")))?;
        tracing::info!("claims name as their executor {runtime:?}");
        *lock(&self.runtime) = Some(runtime);
        self.initialized.store(true, Ordering::SeqCst);
        answer(&self.info)
    }

    fn begin(&self, params: RunBeginParams) -> Answer {
        let mut ledger = lock(&self.ledger);
        let begun = match (&params.child_of, &params.run_id) {
            (Some(parent), name) => ledger.continue_run(parent).and_then(|parent| match name {
                Some(name) => ledger.new_child(&parent, name),
                None => Ok(ledger.begin_run(Some(&parent))),
            }),
            (None, Some(id)) => ledger.new_run(id),
            (None, None) => Ok(ledger.begin_run(None)),
        };
        drop(ledger);
        self.admit(begun.map_err(|e| e.to_string()), params.run_id.is_some())
    }

    fn continue_run(&self, params: RunContinueParams) -> Answer {
        let continued = lock(&self.ledger).continue_run(&params.run_id);
        self.admit(continued.map_err(|e| e.to_string()), false)
    }

    /// A begun or continued run, remembered; `fresh` refuses an id this
    /// server already holds (a named run begun twice before its first claim
    /// has no log yet to refuse it).
    fn admit(&self, run: Result<Run, String>, fresh: bool) -> Answer {
        let run = match run {
            Ok(run) => run,
            Err(reason) => return answer(RunResult { run: None, reason: Some(reason) }),
        };
        let mut runs = lock(&self.runs);
        if fresh && runs.contains_key(&run.id) {
            let reason =
                format!("run {} was already begun by this server; continue it with run/continue", run.id);
            return answer(RunResult { run: None, reason: Some(reason) });
        }
        runs.insert(run.id.clone(), run.clone());
        answer(RunResult { run: Some(run_info(&run)), reason: None })
    }

    fn claim(&self, params: ClaimParams) -> Answer {
        let run = self.run(&params.run_id)?;
        let profile = params.profile.as_deref().unwrap_or(PROFILES[0]);
        let call = match Call::parse(&params.tool, &Value::Object(params.input)) {
            Ok(call) => call,
            Err(error) => {
                return answer(Claimed {
                    status: ClaimStatus::Refused,
                    reason: Some(format!("{}: {}", error.tool, error.message)),
                    action_id: None,
                    claim: None,
                    duplicate: false,
                    policy_failure: None,
                });
            }
        };
        // The runtime runs the tool, not this relay (LOG-7): a server that
        // exits before the settle leaves the claim to the runtime's life.
        let runtime = lock(&self.runtime).clone().unwrap_or_else(effect_ledger::executor::current);
        // A command's window opens before its claim is answered (the
        // runtime starts it after); a retried claim keeps the first one.
        let window = is_command(call.tool()).then(Window::open);
        let claimed = lock(&self.ledger).claim_as(&run, &params.request_id, call, profile, runtime);
        if let Some(window) = window.filter(|_| claimed.status == ClaimStatus::Run) {
            lock(&self.windows).entry((run.id.clone(), params.request_id.clone())).or_insert(window);
        }
        answer(claimed)
    }

    /// The ledger's own look at what a runtime-run command started, when
    /// its settle comes: `Some(true)` when nothing lives (its window
    /// closes), `Some(false)` when something does (it stays open, and the
    /// result says what), `None` with no window noted (claimed by another
    /// server, or not a command): open too.
    fn look_at_window(&self, run: &Run, request_id: &str) -> (Option<bool>, Vec<Survivor>) {
        let Some(window) = lock(&self.windows).remove(&(run.id.clone(), request_id.to_owned())) else {
            return (None, Vec::new());
        };
        let runtime = match lock(&self.runtime).clone() {
            Some(Executor::Process(identity)) => identity.pid,
            None => std::process::id(),
        };
        let survivors = window.survivors(runtime);
        (Some(survivors.is_empty()), survivors)
    }

    fn settle(&self, params: SettleParams) -> Answer {
        let run = self.run(&params.run_id)?;
        let call = match (&params.tool, params.input) {
            (Some(tool), input) => match Call::parse(tool, &Value::Object(input.unwrap_or_default())) {
                Ok(call) => Some(call),
                Err(error) => {
                    let reason = format!("{}: {}", error.tool, error.message);
                    return answer(self.unrun(&run, &params.request_id, tool, StepStatus::Refused, reason));
                }
            },
            (None, Some(_)) => {
                return Err(Fault(
                    code::INVALID_PARAMS,
                    "params: `input` without `tool`; give both, or neither".into(),
                ));
            }
            (None, None) => None,
        };
        let (observed, survivors) = self.look_at_window(&run, &params.request_id);
        let mut settled = lock(&self.ledger).settle_observed(
            &run,
            &params.request_id,
            &params.facts,
            observed.filter(|gone| *gone),
            call,
        );
        if !survivors.is_empty() && settled.reason.is_none() {
            let named: Vec<String> = survivors.iter().map(ToString::to_string).collect();
            settled.reason = Some(format!(
                "processes the command may have started are still running ({}): its window stays open, so \
                 every file it may touch is unsettled (INV-2)",
                named.join(", ")
            ));
        }
        answer(settled)
    }

    fn unrun(
        &self,
        run: &Run,
        request_id: &str,
        tool: &str,
        status: StepStatus,
        reason: String,
    ) -> StepResult {
        StepResult::unrun(run, self.step_number(), request_id, tool, status, reason)
    }

    fn execute(&self, id: &RequestId, meta: RequestMeta, params: ExecuteParams) -> Answer {
        let run = self.run(&params.run_id)?;
        let step = self.step_number();
        let refused = |reason: String| {
            StepResult::unrun(&run, step, &params.request_id, &params.tool, StepStatus::Refused, reason)
        };
        let call = match Call::parse(&params.tool, &Value::Object(params.input.clone())) {
            Ok(call) => call,
            Err(error) => return answer(refused(format!("{}: {}", error.tool, error.message))),
        };
        let request = match StepRequest::new(step, &params.request_id, call, None) {
            Ok(request) => request,
            Err(error) => {
                return answer(refused(format!(
                    "{error}; a tool the runtime runs is claimed with effect/claim and settled with effect/settle"
                )));
            }
        };
        let result = self.cancellable(id, &meta, &params.tool, |token| {
            lock(&self.ledger).start(&run, &request, Some(token))
        });
        answer(match result {
            Ok(waited) => lock(&self.ledger).finish(&run, waited),
            Err(ended) => *ended,
        })
    }

    fn check(&self, id: &RequestId, meta: RequestMeta, params: CheckParams) -> Answer {
        let run = self.run(&params.run_id)?;
        let step = self.step_number();
        let Some(command) = self.checks.get(&params.name).cloned() else {
            let offered: Vec<&str> = self.checks.keys().map(String::as_str).collect();
            let offered = if offered.is_empty() { "none".to_owned() } else { offered.join(", ") };
            let reason = format!(
                "no check named `{}`: checks are the operator's (`effects serve --check NAME=COMMAND`, CMP-5); offered: {offered}",
                params.name
            );
            return answer(StepResult::unrun(
                &run,
                step,
                &params.name,
                "verify",
                StepStatus::Refused,
                reason,
            ));
        };
        let result = self.cancellable(id, &meta, "verify", |token| {
            lock(&self.ledger)
                .start_check(&run, &command, CHECK_TIMEOUT, Some(token))
                .map_err(|error| Box::new(error.step(&run, step)))
        });
        let mut result = match result {
            Ok(waited) => match lock(&self.ledger).finish_check(&run, waited) {
                Ok(verified) => verified.step,
                Err(error) => error.step(&run, step),
            },
            Err(ended) => *ended,
        };
        result.step = step;
        result.request_id = params.name;
        answer(result)
    }

    /// Starts a step with a cancel token registered under the request's id,
    /// waits for it without the ledger (with progress if asked), and
    /// unregisters it.
    fn cancellable(
        &self,
        id: &RequestId,
        meta: &RequestMeta,
        what: &str,
        start: impl FnOnce(CancelToken) -> Result<Running, Box<StepResult>>,
    ) -> Result<Waited, Box<StepResult>> {
        let key = serde_json::to_string(id).expect("an id serializes");
        let token = CancelToken::default();
        lock(&self.running).insert(key.clone(), token.clone());
        let started = start(token);
        let waited = started.map(|running| {
            let progress = meta.progress_token.clone().and_then(|token| self.progress(token, what));
            let waited = running.wait();
            if let Some((stop, ticker)) = progress {
                drop(stop);
                let _ = ticker.join();
            }
            waited
        });
        lock(&self.running).remove(&key);
        waited
    }

    /// A thread sending `notifications/progress` every second until the
    /// returned sender is dropped; `None` (no progress, the request still
    /// runs) when the system will not start one.
    fn progress(&self, token: RequestId, what: &str) -> Option<(mpsc::Sender<()>, thread::JoinHandle<()>)> {
        let (stop, stopped) = mpsc::channel::<()>();
        let out = std::sync::Arc::clone(&self.out);
        let what = what.to_owned();
        let began = Instant::now();
        let ticker = thread::Builder::new().name("serve-progress".into()).spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(PROGRESS_EVERY) {
                let seconds = began.elapsed().as_secs_f64();
                let params = ProgressParams {
                    progress_token: token.clone(),
                    progress: seconds,
                    message: Some(format!("{what} running for {seconds:.0} s")),
                };
                let line = serde_json::json!({
                    "jsonrpc": "2.0", "method": "notifications/progress", "params": params,
                });
                lock(&out).send(line.to_string());
            }
        });
        match ticker {
            Ok(ticker) => Some((stop, ticker)),
            Err(error) => {
                tracing::warn!("no progress notifications for this request: {error}");
                None
            }
        }
    }

    fn complete(&self, params: CompleteParams) -> Answer {
        let run = self.run(&params.run_id)?;
        let completed = lock(&self.ledger).complete(&run, &params.required, &params.answer);
        let completion = match completed {
            Ok(completion) => completion,
            Err(CompleteError::Log(error)) => {
                return Err(Fault(code::LOG_FAILED, format!("the run's log: {error}; nothing was decided")));
            }
            Err(refused) => {
                return Err(Fault(code::INVALID_PARAMS, format!("params at `required`: {refused}")));
            }
        };
        let view = DecisionView::of(&completion);
        lock(&self.decisions).insert(run.id.clone(), view.clone());
        answer(view)
    }

    fn decision(&self, params: DecisionParams) -> Answer {
        let run = self.run(&params.run_id)?;
        let Some(decision) = lock(&self.decisions).get(&run.id).cloned() else {
            return answer(DecisionResult { decision: None, stale: false, stale_since: None });
        };
        let stale_since = lock(&self.ledger)
            .stale_since(&run, decision.recorded)
            .map_err(|e| Fault(code::LOG_FAILED, format!("the run's log: {e}; currency cannot be shown")))?;
        answer(DecisionResult { decision: Some(decision), stale: stale_since.is_some(), stale_since })
    }

    fn annotate(&self, params: AnnotateParams) -> Answer {
        let run = self.run(&params.run_id)?;
        let decided = lock(&self.ledger)
            .annotate(&run, &params.text)
            .map_err(|e| Fault(code::LOG_FAILED, format!("the run's log: {e}; nothing was decided")))?;
        let decision = decided.decision;
        answer(AnnotateResult {
            verdict: decision.verdict,
            disclosures: decision.disclosures,
            answer: decision.presented_answer,
        })
    }
}
