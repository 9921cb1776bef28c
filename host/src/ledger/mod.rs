//! The runtime chain (SPEC section 2) as a Rust API: bind -> classify ->
//! durable claim -> (the caller runs the backend) -> settle -> outcome ->
//! readbacks -> observations. Background launches and their jobs are tied in
//! by `jobs.rs`, designated checks by `verify.rs`, completion by `complete.rs`,
//! runs and their children (LOG-1, ID-5) by `runs.rs`; `step.rs` is the step
//! engine that runs one call end to end for every surface.
//!
//! ```no_run
//! use cap_std::{ambient_authority, fs::Dir};
//! use effect_ledger::identity::{ControlPlane, SealedRoot};
//! use effect_ledger::ledger::{Ledger, LedgerConfig, StepRequest, StepStatus};
//! use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
//! use effect_ledger::tools::Call;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let data = Dir::open_ambient_dir(".effects", ambient_authority())?;
//! let root_dir = Dir::open_ambient_dir("workspace", ambient_authority())?;
//! let root = SealedRoot::new(root_dir, "/abs/workspace", "workspace", "agent", ControlPlane::default())?;
//! let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default())?;
//! let mut ledger = Ledger::open(LedgerConfig::new(data, ".effects", root, policies))?;
//! let run = ledger.begin_run(None);
//! // The input is checked against the tool's type once; the claim and the
//! // bytes the producer writes both come from this one value.
//! let call = Call::parse("write_file", &serde_json::json!({"path": "a.txt", "content": "hi\n"}))?;
//! let result = ledger.step(&run, &StepRequest::new(1, "req-1", call, None)?);
//! assert_eq!(result.status, StepStatus::Ran);
//! println!("{}", serde_json::to_string(&result)?); // claim, outcome, observations, result
//! # Ok(()) }
//! ```
//!
//! A runtime that runs the tool itself uses the two halves:
//! [`Ledger::dispatch`] (bind, classify, durable claim) and, once the backend
//! ran, [`Ledger::record`] with the facts it reported.
//!
//! Invariants: a claim is durable before [`Ledger::dispatch`] returns
//! [`Dispatch::Run`] for an effect; a claim that cannot be persisted returns
//! [`Dispatch::Blocked`] and the caller must not run the backend (LOG-4); a
//! policy failure during classification claims unknown scope and says why
//! (POL-4); a run with no claims creates no file (LOG-5, CMP-9).

pub mod bind;
mod complete;
mod embed;
pub mod envelope;
mod inflight;
mod jobs;
pub mod readback;
mod required;
mod runs;
pub mod step;
mod verify;

use std::collections::HashMap;
use std::path::Path;

use cap_std::fs::Dir;
use serde_json::Value;

use crate::data_dir::DataDir;
use crate::identity::{ControlPlane, MountError, PlacementError, SealedRoot, check_mounts, check_placement};
use crate::log::{
    Checkpoints, ClaimRecord, LineageLog, LogError, Obligation, ObservationRecord, OpenMode, OpenOptionsLog,
    OperationRef, OperatorKey, OutcomeRecord, PolicyRef, Position, ProcessesRecord, Store,
};
use crate::model::{
    BindingIndex, BoundOperation, ClaimPlan, Classification, CleanupState, Execution, FactsError, Impact,
    Location, Outcome, PlannedScope, ProducerFacts, ReadbackContext, ResourceRef, ResourceRole,
    SettleRequest,
};
use crate::policy::PolicySet;
use crate::producers::Produced;
use crate::producers::confine::Confinement;
use crate::producers::process::{self, ProcessRequest, Ran};
use crate::producers::supervisor::Leader;
use crate::tools::Call;

pub use bind::Bound;
pub use complete::{CompleteError, Completion};
pub use embed::{ClaimStatus, Claimed, PROFILES};
pub use envelope::{StepResult, StepStatus, ToolResult};
pub use jobs::LaunchLink;
pub use required::required_by_default;
pub use runs::{Run, RunError, recorded_root, root_of_records};
pub use step::{Reported, Running, StepError, StepRequest, Waited};
pub use verify::{Verified, VerifyError};

/// Why a data dir may not serve a root (ID-4): refused at start by
/// [`Ledger::open`].
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The data dir is the root, lies beneath it or contains it.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// A mount beneath the root shows the store.
    #[error(transparent)]
    Mounts(#[from] MountError),
}

/// How to open a ledger.
pub struct LedgerConfig {
    /// The data directory: its layout (the store, logs, jobs, cache) and
    /// how to name it in messages.
    pub data_dir: DataDir,
    /// The sealed root tools work beneath.
    pub root: SealedRoot,
    /// The policy set.
    pub policies: PolicySet,
    /// Operator key for HMAC-authenticated records.
    pub key: Option<OperatorKey>,
    /// Largest file read for a pre-state or readback, in bytes.
    pub read_cap: u64,
    /// How commands run (ID-6): confined by Landlock where it is available,
    /// else unconfined, and every command claim says so.
    pub confine: Confinement,
}

impl LedgerConfig {
    /// A configuration with no operator key, a 16 MiB read cap, and commands
    /// confined where Landlock is available (no paths beyond the root and
    /// each command's private temporary directory).
    pub fn new(data_dir: Dir, data_display: &str, root: SealedRoot, policies: PolicySet) -> Self {
        Self::at(DataDir::new(data_dir, data_display), root, policies)
    }

    /// [`Self::new`] over a [`DataDir`] the caller already holds.
    pub fn at(data_dir: DataDir, root: SealedRoot, policies: PolicySet) -> Self {
        Self { data_dir, root, policies, key: None, read_cap: 16 << 20, confine: Confinement::detect() }
    }
}

/// A call that may run.
#[derive(Debug, Clone)]
pub struct Dispatched {
    /// The action id.
    pub action_id: String,
    /// The bound operation.
    pub bound: Bound,
    /// The plan that was claimed; `None` for an admitted read.
    pub plan: Option<ClaimPlan>,
    /// The claim's position; `None` for an admitted read.
    pub claim: Option<Position>,
    /// Why classification failed, if it did (the claim is then unknown scope).
    pub policy_failure: Option<String>,
    /// The background launch or job it is tied to, if any: set only by
    /// dispatch (a job is validated there), read with [`Dispatched::link`].
    link: Option<LaunchLink>,
    /// EMB-3: the claim is one that already stood for this request id (its
    /// action id and position are that claim's; nothing was written).
    pub duplicate: bool,
}

impl Dispatched {
    /// The background launch or validated job this call is tied to, if any.
    pub fn link(&self) -> Option<&LaunchLink> {
        self.link.as_ref()
    }
}

/// What dispatch decided.
#[derive(Debug)]
pub enum Dispatch {
    /// Run the backend now (the claim, if any, is durable).
    Run(Box<Dispatched>),
    /// Refused before dispatch (escape, control plane, bad input, a policy
    /// refusal): no claim; never run.
    Refused(String),
    /// The claim could not be persisted: BLOCKED; never run (LOG-4).
    Blocked(String),
}

/// What recording a call's facts wrote.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The outcome (settled from the facts).
    pub outcome: Outcome,
    /// Its position, when the call had a claim.
    pub outcome_position: Option<Position>,
    /// Observations appended, with their positions.
    pub observations: Vec<(Position, ObservationRecord)>,
    /// Why settlement fell back to exit status alone, if the policy failed.
    pub policy_failure: Option<String>,
    /// The outcome a job read or kill settled its launch with, if it did.
    pub launch_settled: Option<Position>,
}

/// Why a call's facts were not recorded.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The facts contradict each other (OUT-2, TRU-1): bad input. Nothing
    /// was settled or written; the claim, durable since dispatch, stays
    /// unsettled, so the caller may record the call again with facts that
    /// hold, and if it never does, recovery records it INTERRUPTED once this
    /// process is gone (LOG-7), never NOT_EXECUTED.
    #[error("{0}")]
    Facts(#[from] FactsError),
    /// The log refused or failed a write.
    #[error(transparent)]
    Log(#[from] LogError),
}

/// The ledger: one sealed root, one policy set, the logs of its lineages.
pub struct Ledger {
    config: LedgerConfig,
    logs: HashMap<String, LineageLog>,
    /// Gates of started jobs whose RUNNING outcome is not yet durable, by
    /// launch generation (`jobs.rs`).
    gates: HashMap<u64, crate::producers::supervisor::Gate>,
    /// Calls the embedding runtime runs, claimed here and not yet settled,
    /// by run and request id (`embed.rs`).
    runtime: HashMap<(String, String), Dispatched>,
    /// Why the data dir may not serve this root (ID-4), if it may not: then
    /// every call is refused.
    misplaced: Option<String>,
    /// Writes nothing ([`Ledger::read_only`]).
    read_only: bool,
}

/// ID-4's placement check of `config`'s data dir against its root.
fn placement(config: &LedgerConfig) -> Result<(), PlacementError> {
    let data = &config.data_dir;
    check_placement(config.root.dir(), &config.root.root().path, data.dir(), data.display())
}

/// The host's own outcome when the settle policy fails: exit status only
/// (TRU-1's floor), never better than the facts. A call that ran and gave no
/// exit code is UNKNOWN, not a failure (OUT-1, OUT-2).
fn conservative_outcome(facts: &ProducerFacts) -> Outcome {
    let (execution, impact) = match (facts.executed, facts.exit_code) {
        (false, _) => (Execution::NotExecuted, Impact::None),
        (true, Some(0)) => (Execution::ReportedSuccess, Impact::Possible),
        (true, Some(_)) => (Execution::Failed, Impact::Possible),
        (true, None) => (Execution::Unknown, Impact::Possible),
    };
    let cleanup = if facts.executed { CleanupState::Unknown } else { CleanupState::NotApplicable };
    Outcome { execution, impact, cleanup, replayed: false, remote_acknowledged: false, detached: false }
}

impl Ledger {
    /// A ledger over `config`, refused when its data dir is the root, lies
    /// beneath it or contains it (ID-4): what a surface calls at start, so
    /// the operator hears it before any step. Opens nothing yet: files appear
    /// with the first claim.
    pub fn open(config: LedgerConfig) -> Result<Self, OpenError> {
        placement(&config)?;
        let ledger = Self::unchecked(config, None);
        ledger.mounts()?;
        Ok(ledger)
    }

    /// A ledger over `config` for a surface that does not check at start:
    /// the placement is checked here too (ID-4), and a data dir that may not
    /// serve this root refuses every call with why, so no surface can run
    /// a tool with the store in its reach. Prefer [`Ledger::open`].
    pub fn new(config: LedgerConfig) -> Self {
        let misplaced = placement(&config).err().map(|error| error.to_string());
        let mut ledger = Self::unchecked(config, misplaced);
        if ledger.misplaced.is_none() {
            ledger.misplaced = ledger.mounts().err().map(|error| error.to_string());
        }
        ledger
    }

    /// ID-4's mount check, after `unchecked`: the root is guarded by this
    /// store's listing then.
    fn mounts(&self) -> Result<(), MountError> {
        let root = &self.config.root;
        check_mounts(Path::new(&root.root().path), self.config.data_dir.dir(), root.control())
    }

    fn unchecked(mut config: LedgerConfig, mut misplaced: Option<String>) -> Self {
        // A root sealed without a guard of the store (an embedder's
        // `ControlPlane::default()`) gets this ledger's own: the hard-link and
        // walk guards then hold on every surface, not only the CLI's.
        if !config.root.control().is_anchored() {
            match ControlPlane::for_data_dir(config.data_dir.dir(), None) {
                Ok(control) => config.root.guard_with(control),
                Err(error) => {
                    misplaced.get_or_insert_with(|| {
                        format!(
                            "the effect store in {} could not be listed to guard it (ID-4): {error}; \
                             check the data dir's permissions",
                            config.data_dir.display()
                        )
                    });
                }
            }
        }
        Self {
            config,
            logs: HashMap::new(),
            gates: HashMap::new(),
            runtime: HashMap::new(),
            misplaced,
            read_only: false,
        }
    }

    /// This ledger for a caller that must write nothing (`effects decide
    /// --dry-run`): its logs are opened read-only, so any append fails;
    /// opening one recovers nothing (LOG-7's recovery writes outcomes), and
    /// [`Ledger::complete`] records neither its readbacks nor its decision.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// The sealed root.
    pub fn root(&self) -> &SealedRoot {
        &self.config.root
    }

    /// The data dir this ledger keeps its store in.
    pub fn data_dir(&self) -> &DataDir {
        &self.config.data_dir
    }

    /// `DATA_DIR/effects`, for messages.
    fn effects_display(&self) -> String {
        self.config.data_dir.store_display()
    }

    /// LOG-3: makes every record of every lineage this ledger wrote durable
    /// (one fsync per log with records no fsync covered yet). Outcomes and
    /// observations ride the next claim's fsync; a surface calls this when it
    /// is done (the end of a session, of a hook's process), and a dropped
    /// ledger does it too, reporting a failure only in its diagnostics.
    pub fn sync(&mut self) -> Result<(), LogError> {
        for log in self.logs.values_mut() {
            if log.has_unsynced() {
                log.sync()?;
            }
        }
        Ok(())
    }

    /// LOG-7 for a lineage with a log: records the unsettled claims of dead
    /// executors INTERRUPTED, after tearing their commands' survivors down
    /// (PROC-2). Claims of live executors, this process's included, are left
    /// alone. Returns the claims it settled. A read-only ledger recovers
    /// nothing: recovery writes, and tears processes down.
    pub fn recover(&mut self, lineage: &str) -> Result<Vec<Position>, LogError> {
        if self.read_only {
            return Ok(Vec::new());
        }
        match self.log(lineage, false)? {
            Some(log) => crate::executor::recover(log),
            None => Ok(Vec::new()),
        }
    }

    /// PROC-2: makes durable the processes a claimed command runs as, before
    /// it may run.
    pub fn record_processes(
        &mut self,
        run: &Run,
        claim: Position,
        leader: &Leader,
    ) -> Result<Position, LogError> {
        let record = ProcessesRecord {
            claim,
            leader: leader.identity.clone(),
            group: leader.group,
            session: leader.session,
        };
        let log = self.log(&run.lineage, true)?.expect("created on demand");
        log.record_processes(&run.id, record)
    }

    /// Runs a dispatched foreground command through the process producer,
    /// its processes recorded (PROC-2) before its gate opens (PROC-1: its
    /// supervisor keeps every descendant, and tears down what the command
    /// leaves). A command that was not claimed never runs here.
    pub fn run_command(
        &mut self,
        run: &Run,
        dispatched: &Dispatched,
        request: &ProcessRequest,
    ) -> Produced<Ran> {
        match self.start_command(run, dispatched, request) {
            Ok(pending) => pending.run(),
            Err(why) => Produced::not_run(why),
        }
    }

    /// [`Ledger::run_command`] up to its gate: the command started under its
    /// supervisor and its processes recorded (PROC-2), for the caller to run
    /// ([`process::Pending::run`]) without the ledger. `Err` when it never
    /// ran (no claim, no confinement, no start, no record).
    pub fn start_command(
        &mut self,
        run: &Run,
        dispatched: &Dispatched,
        request: &ProcessRequest,
    ) -> Result<process::Pending, String> {
        let Some(claim) = dispatched.claim else {
            return Err("a command runs only under its claim".into());
        };
        // ID-6: the claim said whether it runs confined; it runs exactly so,
        // or not at all (a jail that cannot be made, a supervisor that
        // cannot confine itself: nothing ran).
        let jail = match self.config.confine.jail() {
            Ok(jail) => jail,
            Err(error) => {
                return Err(format!("{} was not run: it could not be confined: {error}", request.tool));
            }
        };
        let pending = process::start(&self.config.root, request, jail)?;
        match self.record_processes(run, claim, pending.leader()) {
            Ok(_) => Ok(pending),
            Err(error) => Err(format!(
                "{} was not run: its processes could not be recorded (PROC-2): {error}",
                request.tool
            )),
        }
    }

    /// The effects directory and how to name it; `None` only when opening
    /// read-only and it does not exist yet (nothing was ever claimed).
    fn effects(&self, mode: OpenMode) -> Result<Option<(Dir, String)>, LogError> {
        let dir = self.config.data_dir.open_store(mode)?;
        Ok(dir.map(|dir| (dir, self.config.data_dir.store_display())))
    }

    /// The effects directory, created if missing.
    fn writable_effects(&self) -> Result<(Dir, String), LogError> {
        Ok((self.config.data_dir.writable_store()?, self.config.data_dir.store_display()))
    }

    /// The lineage's log: created when `create`, else only if it exists.
    fn log(&mut self, lineage: &str, create: bool) -> Result<Option<&mut LineageLog>, LogError> {
        // LOG-4 on the fleet store: a handle whose append's durability is
        // unknown appends no more, but the server's log is whole. Dropping
        // it lets its lease expire (so a claim it may have landed is
        // recovered), and the next call opens a fresh one.
        if self.logs.get(lineage).is_some_and(|log| log.is_poisoned() && log.storage().compares_head()) {
            tracing::warn!(lineage, "reopening the fleet store's log after an append of unknown durability");
            self.logs.remove(lineage);
        }
        if !self.logs.contains_key(lineage) {
            let options = if self.read_only {
                OpenOptionsLog {
                    mode: OpenMode::ReadOnly,
                    key: self.config.key.clone(),
                    recover: false,
                    checkpoints: Checkpoints::Use,
                }
            } else {
                OpenOptionsLog {
                    mode: OpenMode::ReadWrite,
                    key: self.config.key.clone(),
                    recover: true,
                    checkpoints: Checkpoints::Keep,
                }
            };
            let create = create && !self.read_only;
            let Some(log) = self.config.data_dir.open_lineage(lineage, create, &options)? else {
                return Ok(None);
            };
            self.logs.insert(lineage.to_owned(), log);
        }
        Ok(self.logs.get_mut(lineage))
    }

    /// The lineage's records so far (empty when it has no log).
    pub fn history(&mut self, lineage: &str) -> Result<Vec<crate::log::Framed>, LogError> {
        match self.log(lineage, false)? {
            Some(log) => Ok(log.history()?.to_vec()),
            None => Ok(Vec::new()),
        }
    }

    /// Binds, classifies and (for an effect) durably claims one tool call.
    /// Its executor (LOG-7) is this process, which runs or reports it. An
    /// input that is not what the tool takes is refused ([`Call::parse`]).
    pub fn dispatch(&mut self, run: &Run, tool: &str, input: &Value, request_id: &str) -> Dispatch {
        self.dispatch_as(run, tool, input, request_id, crate::executor::current())
    }

    /// [`Ledger::dispatch`] of a call already checked against its type.
    pub fn dispatch_call(
        &mut self,
        run: &Run,
        call: Call,
        request_id: &str,
        executor: crate::log::Executor,
    ) -> Dispatch {
        self.claim_call(run, call, None, request_id, executor, None)
    }

    /// [`Ledger::dispatch`] for an effect another process runs or reports
    /// (a runtime's own tool, claimed by a hook): `executor` is that process,
    /// and recovery leaves the claim alone while it lives (LOG-7).
    pub fn dispatch_as(
        &mut self,
        run: &Run,
        tool: &str,
        input: &Value,
        request_id: &str,
        executor: crate::log::Executor,
    ) -> Dispatch {
        match Call::parse(tool, input) {
            Ok(call) => self.claim_call(run, call, None, request_id, executor, None),
            Err(error) => Dispatch::Refused(error.to_string()),
        }
    }

    /// Binds, classifies and claims `call` (its operation's action replaced
    /// by `action` when given: a verifier run). With a producer `profile`
    /// the embedding runtime runs the call (EMB-4): its facts are the
    /// runtime's, so the operation is not producer-bound and a command is
    /// not confined; and its request id is claimed once (EMB-3: a claim
    /// already standing for it is answered, `duplicate`).
    pub(crate) fn claim_call(
        &mut self,
        run: &Run,
        call: Call,
        action: Option<&str>,
        request_id: &str,
        executor: crate::log::Executor,
        profile: Option<&str>,
    ) -> Dispatch {
        if let Some(misplaced) = &self.misplaced {
            return Dispatch::Refused(misplaced.clone());
        }
        if self.read_only {
            return Dispatch::Refused("this ledger is read-only (a dry run): it claims nothing".into());
        }
        let mut bound = match bind::bind(&self.config.root, call, action, request_id, self.config.read_cap) {
            Ok(bound) => bound,
            Err(error) => return Dispatch::Refused(error.to_string()),
        };
        if profile.is_some() {
            bound.operation.producer_bound = false;
        }
        let tool = bound.operation.tool.clone();
        let link = match self.link(run, &mut bound) {
            Ok(link) => link,
            Err(answer) => return answer,
        };
        // Fleet-unique, like a fresh run id (SPEC 13).
        let action_id = format!("{}-{}", run.id, uuid::Uuid::now_v7().simple());
        // POL-4: the claim names the classifier that planned it, or that
        // was called and failed.
        let mut classifier_ref = None;
        let classified = self
            .config
            .policies
            .classifier(&tool)
            .and_then(|classifier| {
                classifier_ref = Some(PolicyRef {
                    component: classifier.name().to_owned(),
                    sha256: classifier.sha256().to_string(),
                });
                classifier.classify(&bound.operation)
            })
            .map(|called| called.value);
        let (plan, policy_failure) = match classified {
            Ok(Classification::ReadOnly) => {
                let admitted = Dispatched {
                    action_id,
                    bound,
                    plan: None,
                    claim: None,
                    policy_failure: None,
                    link,
                    duplicate: false,
                };
                return Dispatch::Run(Box::new(admitted));
            }
            Ok(Classification::Refused(reason)) => return Dispatch::Refused(reason),
            Ok(Classification::Effect(plan)) => (plan, None),
            // POL-4: a failed policy never lets a call through unclaimed. An
            // external endpoint the host bound stays external (TRU-1: that
            // comes from the captured resource, not from the policy).
            // A launch reservation the host made stays a dependency (the
            // launch is then still the launch of its generation).
            Err(error) => {
                let bindings = &bound.operation.bindings;
                let external =
                    bindings.iter().any(|b| matches!(b.resource.location(), Location::External(_)));
                let dependencies = (0..bindings.len() as BindingIndex)
                    .filter(|&i| {
                        let resource = &bindings[i as usize].resource;
                        resource.role() == ResourceRole::Dependency
                            && matches!(resource.location(), Location::ProcessLaunch(_))
                    })
                    .collect();
                let plan = ClaimPlan { external, dependencies, ..ClaimPlan::unknown_scope() };
                (plan, Some(error.to_string()))
            }
        };
        let refs = |indices: &[BindingIndex]| -> Vec<ResourceRef> {
            indices.iter().map(|&i| bound.operation.bindings[i as usize].resource.clone()).collect()
        };
        let scope: Vec<BindingIndex> = match &plan.scope {
            PlannedScope::Exact(indices) => indices.clone(),
            PlannedScope::Unknown => Vec::new(),
        };
        let obligations = plan
            .obligations
            .iter()
            .filter_map(|o| {
                let target = scope.iter().position(|&s| s == o.target)? as u32;
                Some(Obligation { target, postcondition: o.postcondition.clone() })
            })
            .collect();
        let claim = ClaimRecord {
            action_id: action_id.clone(),
            operation: OperationRef {
                tool: bound.operation.tool.clone(),
                action: bound.operation.action.clone(),
                input_sha256: bound.operation.input_sha256.clone(),
                request_id: request_id.to_owned(),
            },
            impact_scope: refs(&scope),
            dependencies: refs(&plan.dependencies),
            obligations,
            parent_run_id: run.parent.clone(),
            external: plan.external,
            policy_failure: policy_failure.clone(),
            executor: Some(executor.clone()),
            root: Some(self.config.root.root().clone()),
            // ID-6: only a command this process runs (`run_command`,
            // `launch_job`, `verify`) is confined by it; one another process
            // runs is not, whatever Landlock offers here.
            confined: crate::tools::is_command(&tool)
                && self.config.confine.confined()
                && executor == crate::executor::current()
                && profile.is_none(),
            profile: profile.map(str::to_owned),
            classifier: classifier_ref,
        };
        // CMP-13: announced to other runs' decisions before it is claimed.
        if let Err(error) = inflight::mark(&self.config.data_dir, &action_id, &run.lineage, &executor) {
            return Dispatch::Blocked(format!(
                "the claim could not be announced to other runs' decisions (CMP-13, {}/{}): {error}",
                self.config.data_dir.display(),
                inflight::DIR
            ));
        }
        let claimed = self.log(&run.lineage, true).and_then(|log| {
            let log = log.expect("created on demand");
            match profile {
                Some(_) => log.claim_once(&run.id, claim),
                None => log.claim(&run.id, claim).map(|position| (position, true)),
            }
        });
        let position = match claimed {
            Ok((position, true)) => position,
            Ok((first, false)) => {
                inflight::clear(&self.config.data_dir, &action_id);
                return self.standing_claim(run, first, bound);
            }
            Err(error) => {
                inflight::clear(&self.config.data_dir, &action_id);
                return Dispatch::Blocked(format!("the claim could not be persisted: {error}"));
            }
        };
        // LOG-8: a launch is indexed before it may start. If the index cannot
        // be written the launch never runs, and its claim says so.
        if let Some(LaunchLink::Launch { generation }) = &link
            && let Err(error) = self.index_launch(run, *generation, position)
        {
            let never = Dispatched {
                action_id,
                bound,
                plan: Some(plan),
                claim: Some(position),
                policy_failure,
                link: None,
                duplicate: false,
            };
            let _ = self.record_facts(run, &never, &ProducerFacts::default());
            return Dispatch::Blocked(format!("the launch index could not be written (LOG-8): {error}"));
        }
        Dispatch::Run(Box::new(Dispatched {
            action_id,
            bound,
            plan: Some(plan),
            claim: Some(position),
            policy_failure,
            link,
            duplicate: false,
        }))
    }

    /// Records what the backend reported: settles, appends the outcome (for a
    /// claimed call), performs the classifier's readbacks and appends them as
    /// observations (when the lineage has a log: a read-only run writes
    /// nothing).
    ///
    /// Facts that contradict each other are refused first (OUT-2:
    /// [`ProducerFacts::check`]), before anything is settled or written:
    /// [`RecordError::Facts`], and the claim stays as dispatch left it.
    pub fn record(
        &mut self,
        run: &Run,
        dispatched: &Dispatched,
        facts: &ProducerFacts,
    ) -> Result<Recorded, RecordError> {
        facts.check()?;
        Ok(self.record_facts(run, dispatched, facts)?)
    }

    /// [`Ledger::record`] for facts the host's own producers reported, which
    /// are consistent by construction (the log's history rules still refuse
    /// an outcome whose facts are not).
    pub(crate) fn record_facts(
        &mut self,
        run: &Run,
        dispatched: &Dispatched,
        facts: &ProducerFacts,
    ) -> Result<Recorded, LogError> {
        // The pre-states were for classification: settlement and readbacks
        // get the operation without them, so a file's content crosses into
        // the sandbox once per step, not three times (`wit/policy.wit`).
        let operation = &BoundOperation { pre_states: Vec::new(), ..dispatched.bound.operation.clone() };
        let request = SettleRequest {
            operation: operation.clone(),
            plan: dispatched.plan.clone(),
            facts: facts.clone(),
        };
        let settled = self
            .config
            .policies
            .classifier(&operation.tool)
            .and_then(|classifier| classifier.settle(&request))
            .map(|called| called.value);
        let settled_by_policy = settled.is_ok();
        let (outcome, mut policy_failure) = match settled {
            Ok(outcome) => (outcome, None),
            Err(error) => (conservative_outcome(facts), Some(error.to_string())),
        };
        let mut outcome_position = None;
        // A started job waits at its gate until its RUNNING outcome is
        // durable; any other end (an error here included) drops the gate and
        // the command never runs (`producers::job`).
        let gate = match &dispatched.link {
            Some(LaunchLink::Launch { generation }) => self.gates.remove(generation),
            _ => None,
        };
        if let Some(claim) = dispatched.claim {
            let log = self.log(&run.lineage, true)?.expect("created on demand");
            let record =
                OutcomeRecord { claim, outcome: outcome.clone(), facts: facts.clone(), recovery: false };
            outcome_position = Some(log.record_outcome(&run.id, record)?);
            if outcome.execution != Execution::Running {
                inflight::clear(&self.config.data_dir, &dispatched.action_id);
            }
        }
        if let Some(gate) = gate
            && outcome.execution == Execution::Running
            && outcome_position.is_some()
            && let Err(error) = gate.open()
        {
            policy_failure.get_or_insert(format!("the job could not be let through its gate: {error}"));
        }
        let context = ReadbackContext { operation: operation.clone(), outcome: outcome.clone() };
        let requests = match self
            .config
            .policies
            .classifier(&operation.tool)
            .and_then(|classifier| classifier.readbacks(&context))
        {
            Ok(called) => called.value,
            Err(error) => {
                policy_failure.get_or_insert(error.to_string());
                Vec::new()
            }
        };
        let mut observations = Vec::new();
        for request in requests {
            let path = &dispatched.bound.paths[request.binding as usize];
            let resource = &operation.bindings[request.binding as usize].resource;
            let cap = self.config.read_cap;
            let observation = match resource.location() {
                // A job's state as the read or kill found it (VER-3: it
                // verifies nothing).
                Location::BackgroundJob(_) => Some(ObservationRecord {
                    job_state: facts.job_state,
                    ..readback::reported(resource, &request, true, &dispatched.action_id, dispatched.claim)
                }),
                Location::Filesystem(_) => readback::perform(
                    &self.config.root,
                    path,
                    &request,
                    &dispatched.action_id,
                    dispatched.claim,
                    cap,
                ),
                _ => {
                    let succeeded = outcome.execution == Execution::ReportedSuccess;
                    Some(readback::reported(
                        resource,
                        &request,
                        succeeded,
                        &dispatched.action_id,
                        dispatched.claim,
                    ))
                }
            };
            let Some(observation) = observation else {
                continue;
            };
            if let Some(log) = self.log(&run.lineage, false)? {
                let position = log.record_observation(&run.id, observation.clone())?;
                observations.push((position, observation));
            }
        }
        // A job read settles its launch with its own outcome (not with the
        // host's fallback when its policy failed); a kill, as a read right
        // after it would.
        let read_outcome = dispatched.claim.is_none().then(|| settled_by_policy.then(|| outcome.clone()));
        let launch_settled = self.settle_launch(run, dispatched, read_outcome, facts)?;
        Ok(Recorded { outcome, outcome_position, observations, policy_failure, launch_settled })
    }
}
