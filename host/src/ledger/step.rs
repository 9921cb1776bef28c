//! The step engine: one tool call end to end, the same for every surface
//! (`effects session`, and the JSON-RPC, hook and MCP surfaces to come).
//! [`Ledger::step`] binds, classifies and claims the call, runs the
//! reference producer on the very [`Call`] that was claimed (or takes the
//! facts the embedding runtime reported), settles, reads back, and answers
//! one [`StepResult`].
//!
//! A [`StepRequest`] is checked when it is made: a tool the host runs takes
//! no reported facts (it runs it itself), a tool the runtime runs needs them,
//! and reported facts that contradict each other are refused (OUT-2). So a
//! step that reaches the ledger is one the ledger can record truthfully.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{JobLifecycle, ProducerFacts};
use crate::producers::Produced;
use crate::producers::fs;
use crate::producers::job::JobStatus;
use crate::producers::process::{CancelToken, Pending, ProcessRequest, Ran};
use crate::tools::{Call, RunsBy};

use super::envelope::{StepResult, StepStatus, ToolResult};
use super::{Dispatch, Dispatched, LaunchLink, Ledger, Run};

/// A command's timeout when its call names none.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The most of a job's output a `bg_job` result carries (its tail).
const JOB_OUTPUT_TAIL: u64 = 4096;

/// What the embedding runtime reports for a tool it ran itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reported {
    /// Whether the backend was invoked at all (default true).
    #[serde(default = "invoked")]
    pub executed: bool,
    /// Its exit code (0 is success).
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The runtime's timeout fired.
    #[serde(default)]
    pub timed_out: bool,
    /// The call was cancelled.
    #[serde(default)]
    pub cancelled: bool,
}

fn invoked() -> bool {
    true
}

impl Reported {
    /// A call that reached its backend and ended with `exit_code` (`None`:
    /// nobody said how, UNKNOWN), neither timed out nor cancelled.
    pub fn ran(exit_code: Option<i32>) -> Self {
        Self { executed: true, exit_code, timed_out: false, cancelled: false }
    }

    /// A call whose backend was never invoked (NOT_EXECUTED).
    pub fn never_ran() -> Self {
        Self { executed: false, exit_code: None, timed_out: false, cancelled: false }
    }

    /// The facts as the runtime gave them, every one passed through: an
    /// exit code, timeout or cancellation of a call that was not executed is
    /// a contradiction the ledger refuses (OUT-2), never dropped to make the
    /// call NOT_EXECUTED. Acknowledgement only for exit 0 of the executed
    /// call (TRU-1: the host captured the external resource it named).
    pub fn facts(&self) -> ProducerFacts {
        ProducerFacts {
            executed: self.executed,
            exit_code: self.exit_code,
            timed_out: self.timed_out,
            cancelled: self.cancelled,
            remote_acknowledged: self.executed && self.exit_code == Some(0),
            ..ProducerFacts::default()
        }
    }
}

/// Why a step cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// Facts reported for a tool the host runs itself.
    #[error("{0}: `reported` is for tools the reference runtime does not execute; it runs {0} itself")]
    RunsHere(String),
    /// A tool the runtime runs, without the facts it reported.
    #[error(
        "{0}: the reference runtime does not execute {0}; give the facts the runtime `reported`, e.g. \"reported\": {{\"exit_code\": 0}}"
    )]
    NotReported(String),
    /// Reported facts that contradict each other (OUT-2).
    #[error("{tool}: `reported`: {message}")]
    Contradictory {
        /// The tool.
        tool: String,
        /// The contradiction.
        message: String,
    },
}

/// One step for [`Ledger::step`]: a checked call, its request id, and the
/// facts the runtime reported when the runtime ran it.
#[derive(Debug, Clone)]
pub struct StepRequest {
    step: u64,
    request_id: String,
    call: Call,
    reported: Option<Reported>,
}

impl StepRequest {
    /// Step number `step` (the caller's count, echoed in the result), with
    /// `request_id` recorded on its claim.
    pub fn new(
        step: u64,
        request_id: &str,
        call: Call,
        reported: Option<Reported>,
    ) -> Result<Self, StepError> {
        let tool = call.tool().to_owned();
        match (call.family().runs_by(), &reported) {
            (RunsBy::Host, Some(_)) => return Err(StepError::RunsHere(tool)),
            (RunsBy::Runtime, None) => return Err(StepError::NotReported(tool)),
            (_, Some(reported)) => {
                reported
                    .facts()
                    .check()
                    .map_err(|error| StepError::Contradictory { tool, message: error.to_string() })?;
            }
            (RunsBy::Host, None) => {}
        }
        Ok(Self { step, request_id: request_id.to_owned(), call, reported })
    }

    /// The call.
    pub fn call(&self) -> &Call {
        &self.call
    }
}

/// A command's answer for the agent: its output on success, why not
/// otherwise (its stderr is in the result either way).
fn command_result(ran: Ran, facts: &ProducerFacts, timeout: Duration) -> ToolResult {
    let survivors = if ran.survivors.is_empty() {
        String::new()
    } else {
        format!("; processes that survived teardown: {:?}", ran.survivors)
    };
    let error = match (facts.timed_out, facts.exit_code) {
        _ if facts.cancelled => Some(format!(
            "cancelled; its processes were torn down ({}){survivors}",
            if ran.survivors.is_empty() { "all dead" } else { "some survived" }
        )),
        (true, _) => Some(format!(
            "timed out after {timeout:?}; its processes were torn down ({}){survivors}",
            if ran.survivors.is_empty() { "all dead" } else { "some survived" }
        )),
        (false, Some(0)) if survivors.is_empty() => None,
        (false, Some(code)) => Some(format!("exit status {code}{survivors}")),
        (false, None) => Some(match ran.signal {
            Some(signal) => format!("killed by signal {signal}{survivors}"),
            None => format!(
                "ended with neither an exit status nor a signal reported (its supervisor said nothing){survivors}"
            ),
        }),
    };
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    ToolResult {
        ok: error.is_none(),
        text: error.is_none().then(|| text(&ran.stdout).trim_end().to_owned()),
        error,
        stdout: Some(text(&ran.stdout)),
        stderr: Some(text(&ran.stderr)),
        exit_code: facts.exit_code,
        signal: ran.signal,
        timed_out: facts.timed_out,
        truncated: ran.truncated,
        survivors: ran.survivors,
        ..ToolResult::default()
    }
}

/// A job's lifecycle for the agent, with the tail of its output.
fn job_result(status: &JobStatus, job_id: &str, output: String) -> ToolResult {
    let state = match (status.state, status.exit_code) {
        (JobLifecycle::Exited, Some(code)) => format!("exited with status {code}"),
        (JobLifecycle::Running, _) => "running".to_owned(),
        (JobLifecycle::Killed, _) => "killed".to_owned(),
        (JobLifecycle::Lost, _) => "lost (it ended without reporting a status)".to_owned(),
        (JobLifecycle::Exited, None) => "exited".to_owned(),
    };
    let survivors = if status.state != JobLifecycle::Running && !status.group_gone {
        "; a process of its group is still alive"
    } else {
        ""
    };
    ToolResult {
        ok: true,
        text: Some(format!("{state}{survivors}")),
        stdout: Some(output),
        exit_code: status.exit_code,
        job_id: Some(job_id.to_owned()),
        job_state: Some(status.state),
        ..ToolResult::default()
    }
}

fn answer<T>(produced: Produced<T>, shown: impl FnOnce(T) -> ToolResult) -> (ProducerFacts, ToolResult) {
    let result = match produced.result {
        Ok(value) => shown(value),
        Err(error) => ToolResult::error(error),
    };
    (produced.facts, result)
}

fn found(found: fs::Found) -> ToolResult {
    let mut text = found.lines.join("\n");
    if found.truncated {
        text.push_str("\n(truncated)");
    }
    ToolResult { truncated: found.truncated, ..ToolResult::text(text) }
}

fn written(written: fs::Written) -> ToolResult {
    let mut parts: Vec<String> =
        written.files.iter().map(|(path, digest)| format!("wrote {path} (sha256 {digest})")).collect();
    parts.extend(written.removed.iter().map(|path| format!("removed {path}")));
    ToolResult::text(parts.join("; "))
}

/// A step between its claim and its record ([`Ledger::start`]): what it
/// runs, if anything, not yet waited for. [`Running::wait`] needs no ledger,
/// so a surface that serves several calls at once holds its ledger only to
/// claim and to record, never while a command runs.
pub struct Running {
    result: StepResult,
    dispatched: Box<Dispatched>,
    work: Work,
    /// The check this run is (`Ledger::start_check`): its command.
    check: Option<String>,
}

/// What a started step still has to do.
pub(super) enum Work {
    /// Nothing: produced already (a filesystem tool, a job action, reported
    /// facts, a command that could not start).
    Done(ProducerFacts, ToolResult),
    /// A foreground command at its open gate's far side: recorded (PROC-2),
    /// to be run to its end.
    Command { pending: Pending, timeout: Duration },
}

/// A step whose work is over, to be recorded ([`Ledger::finish`]).
pub struct Waited {
    result: StepResult,
    dispatched: Box<Dispatched>,
    facts: ProducerFacts,
    check: Option<String>,
}

impl Waited {
    /// Its step result so far, dispatch, facts and check command.
    pub(super) fn into_parts(self) -> (StepResult, Box<Dispatched>, ProducerFacts, Option<String>) {
        (self.result, self.dispatched, self.facts, self.check)
    }
}

impl Running {
    pub(super) fn new(
        result: StepResult,
        dispatched: Box<Dispatched>,
        work: Work,
        check: Option<String>,
    ) -> Self {
        Self { result, dispatched, work, check }
    }

    /// Runs what the step runs to its end: a command to its exit, its
    /// timeout or its cancellation (then torn down, PROC-1).
    pub fn wait(self) -> Waited {
        let Running { mut result, dispatched, work, check } = self;
        let (facts, tool_result) = match work {
            Work::Done(facts, tool_result) => (facts, tool_result),
            Work::Command { pending, timeout } => {
                let produced = pending.run();
                let facts = produced.facts.clone();
                answer(produced, |ran| command_result(ran, &facts, timeout))
            }
        };
        result.result = tool_result;
        Waited { result, dispatched, facts, check }
    }
}

impl Ledger {
    /// Runs one step end to end and answers its result. Never panics on a
    /// refusal or a failure: those are results (EMB-2), with `status` saying
    /// which and `reason` why.
    pub fn step(&mut self, run: &Run, request: &StepRequest) -> StepResult {
        self.step_cancellable(run, request, None)
    }

    /// [`Ledger::step`], whose foreground command `cancel` may stop: torn
    /// down (PROC-1) and settled CANCELLED.
    pub fn step_cancellable(
        &mut self,
        run: &Run,
        request: &StepRequest,
        cancel: Option<CancelToken>,
    ) -> StepResult {
        match self.start(run, request, cancel) {
            Ok(running) => {
                let waited = running.wait();
                self.finish(run, waited)
            }
            Err(ended) => *ended,
        }
    }

    /// The first half of [`Ledger::step`]: binds, classifies and claims the
    /// call, and produces it, except that a foreground command is only
    /// started (its processes recorded, PROC-2) for [`Running::wait`] to run,
    /// cancellable by `cancel`. `Err` is the result of a step that ended
    /// before anything ran (refused, blocked).
    pub fn start(
        &mut self,
        run: &Run,
        request: &StepRequest,
        cancel: Option<CancelToken>,
    ) -> Result<Running, Box<StepResult>> {
        let executor = crate::executor::current();
        let call = request.call.clone();
        let mut result = StepResult::new(run, request.step, &request.request_id, call.tool());
        let dispatched = match self.dispatch_call(run, call, &request.request_id, executor) {
            Dispatch::Run(dispatched) => dispatched,
            Dispatch::Refused(reason) => return Err(Box::new(result.ended(StepStatus::Refused, reason))),
            Dispatch::Blocked(reason) => return Err(Box::new(result.ended(StepStatus::Blocked, reason))),
        };
        let work = match &request.reported {
            Some(reported) => Work::Done(reported.facts(), ToolResult::reported(reported)),
            None => self.start_work(run, &dispatched, cancel),
        };
        result.dispatched(&dispatched);
        Ok(Running::new(result, dispatched, work, None))
    }

    /// The second half of [`Ledger::step`]: settles the step's outcome and
    /// reads back what it touched.
    pub fn finish(&mut self, run: &Run, waited: Waited) -> StepResult {
        let Waited { mut result, dispatched, facts, .. } = waited;
        match self.record(run, &dispatched, &facts) {
            Ok(recorded) => {
                result.recorded(&dispatched, &recorded);
                result.contradict(&dispatched, &recorded.observations);
            }
            Err(error) => result.status_because(StepStatus::NotRecorded, error.to_string()),
        }
        result
    }

    /// A dispatched call's work: a foreground command started under its
    /// claim (PROC-1, PROC-2), a background launch started as its job, and
    /// anything else produced here (`produce`).
    pub(super) fn start_work(
        &mut self,
        run: &Run,
        dispatched: &Dispatched,
        cancel: Option<CancelToken>,
    ) -> Work {
        let tool = dispatched.bound.call.tool();
        let (Call::Bash(command) | Call::Python(command)) = &dispatched.bound.call else {
            let (facts, result) = self.produce(dispatched);
            return Work::Done(facts, result);
        };
        if let Some(LaunchLink::Launch { .. }) = dispatched.link() {
            let request = ProcessRequest::new(tool, &command.command, Duration::MAX);
            let produced = self.launch_job(run, dispatched, &request);
            let (facts, result) = answer(produced, |job| ToolResult {
                job_id: Some(job.clone()),
                job_state: Some(JobLifecycle::Running),
                ..ToolResult::text(format!("started background job {job}"))
            });
            return Work::Done(facts, result);
        }
        let timeout = command.timeout_ms.map_or(DEFAULT_COMMAND_TIMEOUT, Duration::from_millis);
        let request = ProcessRequest { cancel, ..ProcessRequest::new(tool, &command.command, timeout) };
        match self.start_command(run, dispatched, &request) {
            Ok(pending) => Work::Command { pending, timeout },
            // Never started: nothing ran (OUT-1: no impact).
            Err(why) => Work::Done(Produced::<Ran>::not_run(why.clone()).facts, ToolResult::error(why)),
        }
    }

    /// Runs the reference producer of a dispatched call that is not a
    /// command (those start in `start_work`) on the call itself:
    /// the claim and the bytes written come from one value.
    fn produce(&mut self, dispatched: &Dispatched) -> (ProducerFacts, ToolResult) {
        let call = &dispatched.bound.call;
        if let Call::BgJob(job) = call {
            let produced = self.job_action(dispatched);
            let output = self.job_output(dispatched, JOB_OUTPUT_TAIL);
            return answer(produced, |status| job_result(&status, &job.job, output));
        }
        let root = self.root();
        // Each filesystem binding's resolution: producers open through it (ID-3).
        let targets = dispatched.bound.targets(root);
        let Some(target) = targets.first() else {
            // Every filesystem tool binds its path; should none be openable,
            // nothing runs (not executed: no impact).
            let error = format!("{}: no resolved path to open", call.tool());
            return (ProducerFacts::default(), ToolResult::error(error));
        };
        match call {
            Call::WriteFile(write) => answer(fs::write_file(root, target, &write.content), written),
            Call::EditFile(edit) => answer(
                fs::edit_file(root, target, &edit.old_string, &edit.new_string, edit.replace_all),
                written,
            ),
            Call::ApplyPatch(patch) => answer(fs::apply_patch(root, &targets, &patch.patch), written),
            Call::ReadFile(read) => {
                let offset = read.offset.unwrap_or(0) as usize;
                let limit = read.limit.map(|limit| limit as usize);
                let produced = fs::read_file(root, target, offset, limit, self.config.read_cap);
                answer(produced, |read| ToolResult::text(read.text))
            }
            Call::Ls(_) => answer(fs::ls(root, target), found),
            Call::Glob(search) => answer(fs::glob(root, target, &search.pattern), found),
            Call::Grep(search) => answer(fs::grep(root, target, &search.pattern), found),
            other => {
                let error = format!("{}: the host has no producer for it; the runtime runs it", other.tool());
                (ProducerFacts::default(), ToolResult::error(error))
            }
        }
    }
}
