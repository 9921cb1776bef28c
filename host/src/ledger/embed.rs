//! Tools the embedding runtime runs itself (SPEC section 12): claimed here,
//! run by the runtime, settled by request id.
//!
//! - EMB-1: [`Ledger::claim`] answers [`ClaimStatus::Run`] only once the
//!   claim is durable; any other answer means the runtime must not run it.
//! - EMB-3: a request id is claimed once per run, across processes (the
//!   log's [`crate::log::EffectLog::claim_once`]): a retried claim answers
//!   the first. [`Ledger::settle`] settles by request id; a process that did
//!   not make the claim is given the call again, checked against the
//!   claim's input digest, and settles what the claim recorded (its scope,
//!   its obligations), never a plan of its own. A settled claim is settled
//!   once: settling it again answers the first outcome and writes nothing.
//! - EMB-4: what a runtime-run catalogued tool writes is predicted by its
//!   producer profile. `effects`, the only one so far, is the reference
//!   producers' semantics, so the claim's postconditions are those of the
//!   host's own tools. The runtime's facts are exit status only (the
//!   operation is not producer-bound, TRU-1), and after settling the ledger
//!   reads back every file of the claim's scope itself, whatever the runtime
//!   reported: a backend that wrote other bytes is CONTRADICTED.
//!
//! Background commands and `bg_job` are the ledger's own (a job is gated on
//! its durable launch, LOG-8): they are refused here and run through
//! [`Ledger::step`].

use serde::Serialize;

use crate::log::{ClaimRecord, ObservationRecord, Position};
use crate::model::{
    BindingIndex, ClaimPlan, Coverage, Location, Mechanism, PlannedObligation, PlannedScope, ProducerFacts,
    ReadbackRequest,
};
use crate::tools::Call;

use super::envelope::{ObservationView, OutcomeView, StepResult, StepStatus, ToolResult, screaming_name};
use super::step::Reported;
use super::{Bound, Dispatch, Dispatched, Ledger, Run, bind, readback};

/// The producer profiles this ledger predicts runtime-run tools with (EMB-4).
/// `effects` is the ledger's own reference producers; the others are the
/// agents' own tools as `effects hook` maps them (`cli/hook/dialect.rs`:
/// each writes the bytes its input gives).
pub const PROFILES: &[&str] = &["effects", "claude-code", "codex", "gemini"];

/// What [`Ledger::claim`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClaimStatus {
    /// The runtime may run the tool: its claim (if it is an effect) is durable.
    Run,
    /// Refused before any claim (an escape, the store, a policy refusal, bad
    /// input): never run it.
    Refused,
    /// The claim could not be made durable: never run it (LOG-4).
    Blocked,
}

/// The answer to a claim for a tool the runtime runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Claimed {
    /// Whether the runtime may run it.
    pub status: ClaimStatus,
    /// Why not, when refused or blocked.
    pub reason: Option<String>,
    /// The action id (the first claim's, for a duplicate).
    pub action_id: Option<String>,
    /// The claim's position; `None` for an admitted read or no claim.
    pub claim: Option<Position>,
    /// EMB-3: the claim already stood for this request id; nothing was written.
    pub duplicate: bool,
    /// Why classification fell back to unknown scope (POL-4), if it did.
    pub policy_failure: Option<String>,
}

impl Claimed {
    fn not(status: ClaimStatus, reason: String) -> Self {
        Self {
            status,
            reason: Some(reason),
            action_id: None,
            claim: None,
            duplicate: false,
            policy_failure: None,
        }
    }

    fn run(dispatched: &Dispatched, duplicate: bool) -> Self {
        Self {
            status: ClaimStatus::Run,
            reason: None,
            action_id: Some(dispatched.action_id.clone()),
            claim: dispatched.claim,
            duplicate,
            policy_failure: dispatched.policy_failure.clone(),
        }
    }
}

/// The plan a claim record holds, over `bound`'s bindings: each claimed
/// resource is the binding at its location, given the incarnation the claim
/// recorded (what the claim's evidence is about), and each obligation keeps
/// its postcondition. `Err` when the call does not bind what was claimed.
fn dispatched_from_claim(
    position: Position,
    claim: &ClaimRecord,
    mut bound: Bound,
    duplicate: bool,
) -> Result<Dispatched, String> {
    let mut index_of = |claimed: &crate::model::ResourceRef| -> Result<BindingIndex, String> {
        let bindings = &mut bound.operation.bindings;
        let index = bindings
            .iter()
            .position(|binding| binding.resource.location() == claimed.location())
            .ok_or_else(|| {
                format!("the call does not bind {:?}, which claim #{position} names", claimed.location())
            })?;
        bindings[index].resource = claimed.clone();
        Ok(index as BindingIndex)
    };
    let scope = claim.impact_scope.iter().map(&mut index_of).collect::<Result<Vec<_>, _>>()?;
    let dependencies = claim.dependencies.iter().map(&mut index_of).collect::<Result<Vec<_>, _>>()?;
    let obligations = claim
        .obligations
        .iter()
        .map(|obligation| PlannedObligation {
            target: scope[obligation.target as usize],
            postcondition: obligation.postcondition.clone(),
        })
        .collect();
    let plan = ClaimPlan {
        scope: if scope.is_empty() { PlannedScope::Unknown } else { PlannedScope::Exact(scope) },
        dependencies,
        obligations,
        external: claim.external,
    };
    Ok(Dispatched {
        action_id: claim.action_id.clone(),
        bound,
        plan: Some(plan),
        claim: Some(position),
        policy_failure: claim.policy_failure.clone(),
        link: None,
        duplicate,
    })
}

/// Whether `bound` is the call `claim` recorded: its tool and its canonical
/// input's digest.
fn same_call(claim: &ClaimRecord, bound: &Bound) -> Result<(), String> {
    let recorded = &claim.operation;
    if recorded.tool != bound.operation.tool || recorded.input_sha256 != bound.operation.input_sha256 {
        return Err(format!(
            "request id {:?} was claimed for another call ({} with input sha256 {}); a request id names one call",
            recorded.request_id, recorded.tool, recorded.input_sha256
        ));
    }
    Ok(())
}

/// Whether `call` is the call `dispatched` bound: its tool and the digest of
/// its canonical input (what `bind` hashes into `input_sha256`).
fn is_call_of(call: &Call, dispatched: &Dispatched) -> bool {
    let operation = &dispatched.bound.operation;
    let digest = crate::digest::Sha256Digest::of(call.input().to_string().as_bytes()).to_string();
    call.tool() == operation.tool && digest == operation.input_sha256
}

impl Ledger {
    /// EMB-1: binds, classifies and durably claims `call` for the embedding
    /// runtime to run, its writes predicted by producer `profile` (EMB-4).
    /// The claim's executor is this process (LOG-7): while it lives the
    /// claim is its to settle; once it is gone, recovery records the claim
    /// INTERRUPTED. A claim already standing for `request_id` in `run`, made
    /// by any process, is answered as it is (`duplicate`).
    pub fn claim(&mut self, run: &Run, request_id: &str, call: Call, profile: &str) -> Claimed {
        self.claim_as(run, request_id, call, profile, crate::executor::current())
    }

    /// [`Ledger::claim`] for a tool another process runs: `executor` is that
    /// process (an agent whose hook, a short-lived child, makes the claim),
    /// and recovery leaves the claim alone while it lives (LOG-7).
    pub fn claim_as(
        &mut self,
        run: &Run,
        request_id: &str,
        call: Call,
        profile: &str,
        executor: crate::log::Executor,
    ) -> Claimed {
        if !PROFILES.contains(&profile) {
            let known = PROFILES.join(", ");
            return Claimed::not(
                ClaimStatus::Refused,
                format!("unknown producer profile {profile:?}; this ledger predicts tools with: {known}"),
            );
        }
        if call.is_background() || matches!(call, Call::BgJob(_)) {
            return Claimed::not(
                ClaimStatus::Refused,
                format!(
                    "{}: background jobs are the ledger's own (a job starts only behind its durable launch, \
                     LOG-8); run it through the ledger (effect/execute)",
                    call.tool()
                ),
            );
        }
        let key = (run.id.clone(), request_id.to_owned());
        if let Some(dispatched) = self.runtime.get(&key) {
            if !is_call_of(&call, dispatched) {
                return Claimed::not(
                    ClaimStatus::Refused,
                    format!(
                        "request id {request_id:?} was claimed for another call; a request id names one call"
                    ),
                );
            }
            return Claimed::run(dispatched, true);
        }
        match self.claim_call(run, call, None, request_id, executor, Some(profile)) {
            Dispatch::Run(dispatched) => {
                let claimed = Claimed::run(&dispatched, dispatched.duplicate);
                self.runtime.insert(key, *dispatched);
                claimed
            }
            Dispatch::Refused(reason) => Claimed::not(ClaimStatus::Refused, reason),
            Dispatch::Blocked(reason) => Claimed::not(ClaimStatus::Blocked, reason),
        }
    }

    /// The claim that already stood at `first` for a request id another
    /// process claimed: what [`Ledger::claim`] answers instead of claiming
    /// again.
    pub(super) fn standing_claim(&mut self, run: &Run, first: Position, bound: Bound) -> Dispatch {
        let claim = match self.claim_record(run, first) {
            Ok(claim) => claim,
            Err(why) => return Dispatch::Refused(why),
        };
        if let Err(why) = same_call(&claim, &bound) {
            return Dispatch::Refused(why);
        }
        match dispatched_from_claim(first, &claim, bound, true) {
            Ok(dispatched) => Dispatch::Run(Box::new(dispatched)),
            Err(why) => Dispatch::Refused(why),
        }
    }

    fn claim_record(&mut self, run: &Run, position: Position) -> Result<ClaimRecord, String> {
        let log = match self.log(&run.lineage, false) {
            Ok(Some(log)) => log,
            Ok(None) => return Err(format!("run {} has no log here", run.id)),
            Err(error) => return Err(error.to_string()),
        };
        match log.record(position).map(|framed| &framed.record) {
            Some(crate::log::Record::Claim(claim)) => Ok(claim.clone()),
            _ => Err(format!("position #{position} of run {} is not a claim this ledger can read", run.id)),
        }
    }

    /// EMB-3: settles the claim of `request_id` in `run` with the facts the
    /// runtime `reported`, then reads back the claim's files itself (EMB-4).
    /// `call` is the call again: needed when another process made the claim,
    /// and checked against the claim when given. Every answer is a step
    /// result (EMB-2): refused when there is nothing to settle or the call
    /// is not the one claimed (nothing written), the first outcome when the
    /// claim is already settled.
    pub fn settle(
        &mut self,
        run: &Run,
        request_id: &str,
        reported: &Reported,
        call: Option<Call>,
    ) -> StepResult {
        self.settle_observed(run, request_id, reported, None, call)
    }

    /// [`Ledger::settle`] with the ledger's own observation of the call's
    /// processes (SPEC 14, INV-2 extended: [`crate::runtime_window`]):
    /// `Some(true)` when it saw every process the call started gone, which
    /// closes a command's window (cleanup CLEAN); `Some(false)` when some
    /// live; `None` when nothing was observed. Never the runtime's word.
    pub fn settle_observed(
        &mut self,
        run: &Run,
        request_id: &str,
        reported: &Reported,
        processes_gone: Option<bool>,
        call: Option<Call>,
    ) -> StepResult {
        let key = (run.id.clone(), request_id.to_owned());
        let tool = match (&call, self.runtime.get(&key)) {
            (Some(call), _) => call.tool().to_owned(),
            (None, Some(dispatched)) => dispatched.bound.operation.tool.clone(),
            (None, None) => String::new(),
        };
        let result = StepResult::new(run, 0, request_id, &tool);
        let facts = reported.facts();
        if let Err(error) = facts.check() {
            let why =
                format!("the reported facts contradict each other (OUT-2): {error}; nothing was recorded");
            return result.ended(StepStatus::Refused, why);
        }
        let dispatched = match self.runtime.get(&key).cloned() {
            Some(dispatched) => match &call {
                Some(call) if !is_call_of(call, &dispatched) => {
                    let why = format!(
                        "request id {request_id:?} was claimed for another call; nothing was recorded"
                    );
                    return result.ended(StepStatus::Refused, why);
                }
                _ => dispatched,
            },
            None => {
                if let Some(first) = self.settled_elsewhere(run, request_id, result.clone()) {
                    return first;
                }
                match self.claimed_elsewhere(run, request_id, call) {
                    Ok(dispatched) => dispatched,
                    Err(why) => return result.ended(StepStatus::Refused, why),
                }
            }
        };
        self.settle_dispatched(run, &key, &dispatched, reported, processes_gone, result)
    }

    /// EMB-3 for a claim this ledger holds no more (settled here before, or
    /// by another process): when the log holds its settlement, the first
    /// outcome, nothing written, and no call needed to say so.
    fn settled_elsewhere(
        &mut self,
        run: &Run,
        request_id: &str,
        mut result: StepResult,
    ) -> Option<StepResult> {
        let log = self.log(&run.lineage, false).ok()??;
        log.refresh().ok()?;
        let position = log.claim_of_request(&run.id, request_id)?;
        let first = self.settlement(run, position)?;
        let claim = self.claim_record(run, position).ok()?;
        result.tool = claim.operation.tool.clone();
        result.action_id = Some(claim.action_id.clone());
        result.claim = Some(position);
        Some(already_settled(result, position, first))
    }

    fn bind_again(&self, action: &str, request_id: &str, call: Call) -> Result<Bound, String> {
        let mut bound = bind::bind(&self.config.root, call, Some(action), request_id, self.config.read_cap)
            .map_err(|error| error.to_string())?;
        bound.operation.producer_bound = false;
        Ok(bound)
    }

    /// A claim another process made for `request_id`, as a dispatched call
    /// over `call` bound again here.
    fn claimed_elsewhere(
        &mut self,
        run: &Run,
        request_id: &str,
        call: Option<Call>,
    ) -> Result<Dispatched, String> {
        let found = match self.log(&run.lineage, false) {
            Ok(Some(log)) => {
                log.refresh().map_err(|error| error.to_string())?;
                log.claim_of_request(&run.id, request_id)
            }
            Ok(None) => None,
            Err(error) => return Err(error.to_string()),
        };
        let Some(position) = found else {
            return Err(format!(
                "run {} has no claim of request id {request_id:?}: claim it (effect/claim) before the tool runs",
                run.id
            ));
        };
        let claim = self.claim_record(run, position)?;
        if claim.profile.is_none() {
            return Err(format!(
                "claim #{position} of request id {request_id:?} is run by the ledger's own producer; the process \
                 that runs it settles it"
            ));
        }
        let Some(call) = call else {
            return Err(format!(
                "request id {request_id:?} was claimed by another process (#{position}): give its tool and input \
                 again to settle it here"
            ));
        };
        let bound = self.bind_again(&claim.operation.action, request_id, call)?;
        same_call(&claim, &bound)?;
        dispatched_from_claim(position, &claim, bound, false)
    }

    fn settle_dispatched(
        &mut self,
        run: &Run,
        key: &(String, String),
        dispatched: &Dispatched,
        reported: &Reported,
        processes_gone: Option<bool>,
        mut result: StepResult,
    ) -> StepResult {
        result.dispatched(dispatched);
        if let Some(claim) = dispatched.claim
            && let Some(first) = self.settlement(run, claim)
        {
            self.runtime.remove(key);
            return already_settled(result, claim, first);
        }
        // OUT-2 (SPEC 14): "it never ran", against a file that holds the
        // claim's exact bytes, is contradicted: the call may have run, and
        // how it ended is unknown.
        let contradicted;
        let reported = if !reported.executed && self.shows_claimed_bytes(dispatched) {
            contradicted = Reported::ran(None);
            &contradicted
        } else {
            reported
        };
        result.result = ToolResult::reported(reported);
        // A call that never ran started nothing to observe (OUT-2: no facts
        // only a run can report).
        let facts =
            ProducerFacts { teardown_dead: processes_gone.filter(|_| reported.executed), ..reported.facts() };
        let recorded = match self.record(run, dispatched, &facts) {
            Ok(recorded) => recorded,
            Err(error) => {
                result.status_because(StepStatus::NotRecorded, error.to_string());
                return result;
            }
        };
        self.runtime.remove(key);
        result.recorded(dispatched, &recorded);
        match self.read_back_scope(run, dispatched, &recorded.observations) {
            Ok(mut observations) => {
                result.observations.extend(observations.iter().map(|(p, o)| ObservationView::of(*p, o)));
                observations.splice(0..0, recorded.observations.iter().cloned());
                result.contradict(dispatched, &observations);
            }
            Err(error) => result.status_because(StepStatus::NotRecorded, error.to_string()),
        }
        result
    }

    /// Whether a file of the claim's exact scope holds, now, the exact
    /// bytes one of its obligations names (read completely; not recorded).
    fn shows_claimed_bytes(&self, dispatched: &Dispatched) -> bool {
        let Some(plan) = &dispatched.plan else { return false };
        plan.obligations.iter().any(|obligation| {
            let crate::model::Postcondition::ContentSha256(digest) = &obligation.postcondition else {
                return false;
            };
            let Some(path) = dispatched.bound.paths.get(obligation.target as usize) else { return false };
            let request = ReadbackRequest {
                binding: obligation.target,
                mechanism: Mechanism::FilesystemRead,
                coverage: Coverage::Complete,
            };
            let (root, cap) = (&self.config.root, self.config.read_cap);
            readback::perform(root, path, &request, &dispatched.action_id, None, cap)
                .is_some_and(|seen| seen.content_sha256.as_deref() == Some(digest.as_str()))
        })
    }

    /// The position of `run`'s claim of `request_id`, by any process, if
    /// there is one.
    pub fn claim_of_request(
        &mut self,
        run: &Run,
        request_id: &str,
    ) -> Result<Option<Position>, crate::log::LogError> {
        let Some(log) = self.log(&run.lineage, false)? else { return Ok(None) };
        log.refresh()?;
        Ok(log.claim_of_request(&run.id, request_id))
    }

    /// The outcome that already settled `claim`, if one did (by any process).
    fn settlement(&mut self, run: &Run, claim: Position) -> Option<OutcomeView> {
        let log = self.log(&run.lineage, false).ok()??;
        log.refresh().ok()?;
        match log.claim_state(claim)? {
            crate::log::ClaimState::Settled(_) => {}
            crate::log::ClaimState::Attempted | crate::log::ClaimState::Running => return None,
        }
        let found = log.outcome_of(claim);
        let (position, outcome) = match found {
            Some((position, record)) => (Some(position), record.outcome.clone()),
            None => return None,
        };
        Some(OutcomeView {
            position,
            execution: outcome.execution,
            impact: outcome.impact,
            cleanup: outcome.cleanup,
        })
    }

    /// EMB-4: reads back, completely, every file of the claim's exact scope
    /// that no readback of the classifier's observed already, and records
    /// the observations.
    fn read_back_scope(
        &mut self,
        run: &Run,
        dispatched: &Dispatched,
        already: &[(Position, ObservationRecord)],
    ) -> Result<Vec<(Position, ObservationRecord)>, crate::log::LogError> {
        let Some(ClaimPlan { scope: PlannedScope::Exact(scope), .. }) = &dispatched.plan else {
            return Ok(Vec::new());
        };
        let bindings = &dispatched.bound.operation.bindings;
        let mut observations = Vec::new();
        for &index in scope {
            let resource = &bindings[index as usize].resource;
            let observed = already.iter().any(|(_, o)| o.resource.location() == resource.location());
            if observed || !matches!(resource.location(), Location::Filesystem(_)) {
                continue;
            }
            let request = ReadbackRequest {
                binding: index,
                mechanism: Mechanism::FilesystemRead,
                coverage: Coverage::Complete,
            };
            let path = &dispatched.bound.paths[index as usize];
            let cap = self.config.read_cap;
            let observation = readback::perform(
                &self.config.root,
                path,
                &request,
                &dispatched.action_id,
                dispatched.claim,
                cap,
            );
            observations.extend(observation);
        }
        let mut recorded = Vec::with_capacity(observations.len());
        if let Some(log) = self.log(&run.lineage, false)? {
            for observation in observations {
                let position = log.record_observation(&run.id, observation.clone())?;
                recorded.push((position, observation));
            }
        }
        Ok(recorded)
    }
}

/// EMB-3's answer to a settle of a claim already settled: the first outcome,
/// and nothing of this settle's own facts, which were not recorded. The
/// tool's answer is not `ok`: what the first settle's readbacks showed is not
/// at hand here, so `outcome` and the decision say how the claim stands.
fn already_settled(mut result: StepResult, claim: Position, first: OutcomeView) -> StepResult {
    let at = first.position.map(|p| format!(" (#{p})")).unwrap_or_default();
    let execution = screaming_name(&first.execution).unwrap_or_else(|| "settled".to_owned());
    let why = format!("claim #{claim} was already settled{at} as {execution}; this settle recorded nothing");
    result.result = ToolResult::error(why.clone());
    result.outcome = Some(first);
    result.reason = Some(why);
    result
}
