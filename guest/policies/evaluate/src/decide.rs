//! The completion decision (CMP-1..9, CMP-11): reasons with stable codes, the
//! positions each relied on, and the server-authored disclosure each carries.
//! Worst verdict wins: FAILED > BLOCKED > UNVERIFIED > COMPLETED.
//!
//! Everything is indexed per location once ([`Index`]), so each rule costs the
//! depth of a location's ancestor chain per artifact or effect: no rule compares
//! every effect with every other.

use effects_evaluator_sdk::types::{Assessment, Execution, Reason, ReasonCode, Verdict};

use crate::assess::Assessments;
use crate::history::{Freshness, History, State};
use crate::locations::{Kind, LocId};

/// Per-location facts every rule reads.
pub struct Index<'h, 'a> {
    /// The history.
    pub history: &'h History<'a>,
    /// The assessments.
    pub assessments: &'h Assessments,
    /// Per location: claims (by index) with a target exactly there, no no-ops.
    pub changes: Vec<Vec<usize>>,
    /// Locations in the order of their first change.
    pub changed: Vec<LocId>,
    /// Per location: the latest unresolved exact claim targeting it, and the
    /// latest targeting it or anything below it.
    unresolved_self: Vec<Option<usize>>,
    unresolved_below: Vec<Option<usize>>,
    /// The latest unresolved unknown-scope claim, and the latest of any scope.
    unresolved_unknown: Option<usize>,
    unresolved_any: Option<usize>,
    /// The same three for every claim that is not a no-op (verifier coverage).
    touched_self: Vec<Option<u64>>,
    touched_below: Vec<Option<u64>>,
    touched_unknown: Option<u64>,
    /// The first executed unknown-scope claim (it may have produced anything).
    first_unknown_executed: Option<usize>,
    /// Per location: the newest filesystem observation of any mechanism.
    newest_seen: Vec<Option<usize>>,
}

/// A reason under construction.
fn reason(
    code: ReasonCode,
    verdict: Verdict,
    message: String,
    evidence: Vec<u64>,
    disclosure: Option<String>,
) -> Reason {
    Reason { code, verdict, message, evidence, disclosure }
}

/// CMP-1 / CMP-4: a fresh complete read contradicts the latest change of `name`.
fn contradicted(code: ReasonCode, name: &str, tool: &str, evidence: Vec<u64>) -> Reason {
    reason(
        code,
        Verdict::Failed,
        format!("{name}: a fresh complete read contradicts its latest change ({tool})"),
        evidence,
        Some(format!("{name} does not hold what its latest change wrote: a fresh read found otherwise.")),
    )
}

/// Rank for "worst wins".
pub fn severity(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Completed => 0,
        Verdict::Unverified => 1,
        Verdict::Blocked => 2,
        Verdict::Failed => 3,
    }
}

/// The worst verdict of `reasons`, COMPLETED when there are none.
pub fn worst(reasons: &[Reason]) -> Verdict {
    reasons.iter().map(|r| r.verdict).max_by_key(|&v| severity(v)).unwrap_or(Verdict::Completed)
}

fn execution_name(execution: Execution) -> &'static str {
    match execution {
        Execution::NotExecuted => "not executed",
        Execution::ReportedSuccess => "reported success",
        Execution::Failed => "failed",
        Execution::TimedOut => "timed out",
        Execution::Cancelled => "cancelled",
        Execution::Running => "running",
        Execution::Interrupted => "interrupted",
    }
}

impl<'h, 'a> Index<'h, 'a> {
    /// Indexes `history` once.
    pub fn new(history: &'h History<'a>, assessments: &'h Assessments) -> Self {
        let n = history.locations.len();
        let mut index = Index {
            history,
            assessments,
            changes: vec![Vec::new(); n],
            changed: Vec::new(),
            unresolved_self: vec![None; n],
            unresolved_below: vec![None; n],
            unresolved_unknown: None,
            unresolved_any: None,
            touched_self: vec![None; n],
            touched_below: vec![None; n],
            touched_unknown: None,
            first_unknown_executed: None,
            newest_seen: vec![None; n],
        };
        for (i, claim) in history.claims.iter().enumerate() {
            if claim.no_op() {
                continue;
            }
            let position = claim.position();
            let unresolved = claim.unresolved() && !index.resolved_by_observation(i);
            if unresolved {
                index.unresolved_any = Some(i);
            }
            match &claim.targets {
                None => {
                    index.touched_unknown = Some(position);
                    if unresolved {
                        index.unresolved_unknown = Some(i);
                    }
                    index.first_unknown_executed.get_or_insert(i);
                }
                Some(targets) => {
                    for &t in targets {
                        if index.changes[t as usize].is_empty() {
                            index.changed.push(t);
                        }
                        index.changes[t as usize].push(i);
                        index.touched_self[t as usize] = Some(position);
                        if unresolved {
                            index.unresolved_self[t as usize] = Some(i);
                        }
                        for a in history.locations.ancestors_or_self(t) {
                            index.touched_below[a as usize] = Some(position);
                            if unresolved {
                                index.unresolved_below[a as usize] = Some(i);
                            }
                        }
                    }
                }
            }
        }
        for (i, observation) in history.observations.iter().enumerate() {
            if history.locations.kind(observation.loc) == Kind::Filesystem {
                index.newest_seen[observation.loc as usize] = Some(i);
            }
        }
        index
    }

    /// An exact-scope claim that did not finish cleanly is resolved when a
    /// fresh complete check shows every target in its intended state
    /// (STATE_OBSERVED: crash-honest settlement, SPEC section 9).
    fn resolved_by_observation(&self, claim: usize) -> bool {
        let c = &self.history.claims[claim];
        let Some(targets) = &c.targets else { return false };
        !targets.is_empty()
            && targets.iter().all(|&t| {
                self.assessments
                    .on(claim, t)
                    .is_some_and(|a| matches!(a.assessment, Assessment::StateObserved))
            })
    }

    /// The latest unresolved claim that may touch `loc` (CMP-2).
    fn unresolved_touching(&self, loc: LocId) -> Option<usize> {
        let below = self.unresolved_below[loc as usize];
        let above =
            self.history.locations.ancestors_or_self(loc).filter_map(|a| self.unresolved_self[a as usize]);
        below.into_iter().chain(above).chain(self.unresolved_unknown).max()
    }

    /// The latest position of any claim that may touch `loc`.
    fn touched_after(&self, loc: LocId) -> Option<u64> {
        let below = self.touched_below[loc as usize];
        let above =
            self.history.locations.ancestors_or_self(loc).filter_map(|a| self.touched_self[a as usize]);
        below.into_iter().chain(above).chain(self.touched_unknown).max()
    }

    /// The claim's position plus its outcome's, when it has one.
    fn claim_evidence(&self, claim: usize) -> Vec<u64> {
        let c = &self.history.claims[claim];
        let mut evidence = vec![c.position()];
        match c.state {
            State::Attempted => {}
            State::Running(p) => evidence.push(p),
            State::Settled(s) => evidence.push(s.position),
        }
        evidence
    }

    fn tool(&self, claim: usize) -> &str {
        &self.history.claims[claim].evidence.tool
    }

    /// A passing latest verifier after `after` with no claim touching `loc`
    /// since it (CMP-7's "covered by a fresh passing verifier run after it").
    fn verifier_covers(&self, loc: LocId, after: u64) -> Option<u64> {
        let latest = self.history.verifiers.last()?;
        let fresh = self.touched_after(loc).is_none_or(|p| p < latest.position);
        (latest.passed && latest.position > after && fresh).then_some(latest.position)
    }

    /// CMP-1, CMP-2, CMP-7 for one artifact: the reasons it gives (none when
    /// its latest change is verified or covered, or it exists untouched).
    pub fn artifact(&self, loc: LocId, reasons: &mut Vec<Reason>) {
        let name = self.history.locations.name(loc);
        let changes = &self.changes[loc as usize];
        let last_success = changes
            .iter()
            .rev()
            .find(|&&i| {
                matches!(self.history.claims[i].state.settled(), Some(s) if matches!(s.execution, Execution::ReportedSuccess))
            })
            .map(|&i| self.history.claims[i].position());
        // CMP-2: after its last successful mutation, something unresolved may
        // have touched it.
        let unsettled = self
            .unresolved_touching(loc)
            .filter(|&i| last_success.is_none_or(|p| self.history.claims[i].position() > p));
        if let Some(i) = unsettled {
            let position = self.history.claims[i].position();
            reasons.push(reason(
                ReasonCode::UnsettledArtifact,
                Verdict::Blocked,
                format!("{name}: {} at position {position} may have changed it without settled evidence", self.tool(i)),
                self.claim_evidence(i),
                Some(format!(
                    "A later operation ({}, position {position}) may have changed {name} without settled evidence.",
                    self.tool(i)
                )),
            ));
        }
        let Some(&latest) = changes.last() else {
            self.never_changed(loc, reasons);
            return;
        };
        let claim = &self.history.claims[latest];
        let State::Settled(settled) = claim.state else { return };
        let assessed = self.assessments.on(latest, loc);
        let assessment = assessed.map(|a| a.assessment);
        let mut evidence = self.claim_evidence(latest);
        evidence.extend(assessed.and_then(|a| a.observation));
        if matches!(assessment, Some(Assessment::Contradicted)) {
            reasons.push(contradicted(ReasonCode::ContradictedArtifact, name, self.tool(latest), evidence));
            return;
        }
        match settled.execution {
            Execution::ReportedSuccess => {
                if matches!(assessment, Some(Assessment::Verified)) || self.verifier_covers(loc, settled.position).is_some() {
                    return;
                }
                reasons.push(reason(
                    ReasonCode::UnverifiedArtifact,
                    Verdict::Unverified,
                    format!("{name}: its latest change ({}) has no fresh complete readback", self.tool(latest)),
                    evidence,
                    Some(format!("{name} was changed, but the change was not verified by a fresh complete read.")),
                ));
            }
            Execution::Failed if !settled.mutation_attempted => reasons.push(reason(
                ReasonCode::FailedEffect,
                Verdict::Failed,
                format!("{name}: its latest change ({}) failed", self.tool(latest)),
                evidence,
                Some(format!("The latest change to {name} ({}) failed.", self.tool(latest))),
            )),
            execution if matches!(assessment, Some(Assessment::StateObserved)) => reasons.push(reason(
                ReasonCode::UnverifiedArtifact,
                Verdict::Unverified,
                format!("{name}: the state matches but its latest change {}", execution_name(execution)),
                evidence,
                Some(format!(
                    "{name} holds the intended content, but the operation that wrote it {}, so it is not verified that it did.",
                    execution_name(execution)
                )),
            )),
            // Unresolved: CMP-2 above has said so.
            _ => {}
        }
    }

    /// CMP-7 for an artifact no claimed change targeted: it must be observed
    /// to exist (freshly), else it is missing, or unverified when an
    /// unknown-scope operation might have produced it.
    fn never_changed(&self, loc: LocId, reasons: &mut Vec<Reason>) {
        let name = self.history.locations.name(loc);
        let newest = self.newest_seen[loc as usize].map(|i| &self.history.observations[i]);
        let fresh = newest.filter(|o| o.freshness == Freshness::Fresh);
        match fresh {
            Some(o) if o.evidence.exists => {}
            Some(o) => reasons.push(reason(
                ReasonCode::MissingArtifact,
                Verdict::Failed,
                format!("{name}: required, and a fresh observation found nothing there"),
                vec![o.evidence.position],
                Some(format!("{name} was required but does not exist.")),
            )),
            None => match self.first_unknown_executed {
                Some(i) => reasons.push(reason(
                    ReasonCode::UnverifiedArtifact,
                    Verdict::Unverified,
                    format!(
                        "{name}: no claimed change produced it and it was not freshly observed since {} ran",
                        self.tool(i)
                    ),
                    self.claim_evidence(i).into_iter().chain(newest.map(|o| o.evidence.position)).collect(),
                    Some(format!(
                        "{name} was not observed to exist after the operations that may have produced it."
                    )),
                )),
                None => reasons.push(reason(
                    ReasonCode::MissingArtifact,
                    Verdict::Failed,
                    format!("{name}: required, never produced and not observed to exist"),
                    newest.map(|o| o.evidence.position).into_iter().collect(),
                    Some(format!("{name} was required but was never produced.")),
                )),
            },
        }
    }

    /// CMP-4: the latest change of every changed location that is not
    /// required, contradicted by a fresh readback.
    pub fn contradicted_effects(&self, reasons: &mut Vec<Reason>) {
        for &loc in &self.changed {
            if self.history.required.contains(&loc) {
                continue;
            }
            let latest = *self.changes[loc as usize].last().expect("changed locations have changes");
            let Some(assessed) = self.assessments.on(latest, loc) else { continue };
            if matches!(assessed.assessment, Assessment::Contradicted) {
                let name = self.history.locations.name(loc);
                let mut evidence = self.claim_evidence(latest);
                evidence.extend(assessed.observation);
                reasons.push(contradicted(ReasonCode::ContradictedEffect, name, self.tool(latest), evidence));
            }
        }
    }

    /// CMP-5: the latest verifier failed, or passed before an unresolved effect.
    pub fn verifiers(&self, reasons: &mut Vec<Reason>) {
        let Some(latest) = self.history.verifiers.last() else { return };
        if !latest.passed {
            reasons.push(reason(
                ReasonCode::FailingVerifier,
                Verdict::Failed,
                format!("the latest check `{}` failed", latest.command),
                vec![latest.position],
                Some(format!("The latest check (`{}`) failed.", latest.command)),
            ));
            return;
        }
        let Some(i) = self.unresolved_any.filter(|&i| self.history.claims[i].position() > latest.position)
        else {
            return;
        };
        let position = self.history.claims[i].position();
        let mut evidence = vec![latest.position];
        evidence.extend(self.claim_evidence(i));
        reasons.push(reason(
            ReasonCode::StaleVerifier,
            Verdict::Blocked,
            format!("the check `{}` passed before {} at position {position}, whose effect is unsettled", latest.command, self.tool(i)),
            evidence,
            Some(format!(
                "The last passing check (`{}`) ran before an operation ({}, position {position}) whose effect is unsettled; it no longer vouches for the current state.",
                latest.command,
                self.tool(i)
            )),
        ));
    }

    /// CMP-6: every executed external effect that is not VERIFIED caps the
    /// decision at UNVERIFIED and always discloses what is known of it.
    pub fn external_effects(&self, reasons: &mut Vec<Reason>) {
        for (i, claim) in self.history.claims.iter().enumerate() {
            if !claim.evidence.external || claim.no_op() {
                continue;
            }
            let verified =
                self.assessments.per_claim[i].iter().all(|a| matches!(a.assessment, Assessment::Verified));
            if verified && !claim.evidence.obligations.is_empty() {
                continue;
            }
            let target =
                claim.targets.iter().flatten().find(|&&t| self.history.locations.kind(t) == Kind::External);
            let name = target.map_or(&*claim.evidence.tool, |&t| self.history.locations.name(t));
            let fact = match claim.state.settled().map(|s| s.execution) {
                Some(Execution::ReportedSuccess) => {
                    "reported success; any external change it made was not independently verified"
                }
                Some(Execution::Failed) => "reported failure",
                _ => "unknown outcome",
            };
            reasons.push(reason(
                ReasonCode::ExternalEffectUnverified,
                Verdict::Unverified,
                format!("external effect {name} at position {}: {fact}", claim.position()),
                self.claim_evidence(i),
                Some(format!("External call {name} (position {}): {fact}.", claim.position())),
            ));
        }
    }

    /// CMP-8: a launch still RUNNING (or an effect with no outcome at all)
    /// leaves the run UNVERIFIED, not BLOCKED, unless a required artifact or a
    /// verifier says otherwise (CMP-2, CMP-5).
    pub fn running(&self, reasons: &mut Vec<Reason>) {
        for (i, claim) in self.history.claims.iter().enumerate() {
            if claim.evidence.no_op {
                continue;
            }
            let position = claim.position();
            let (message, disclosure) = match claim.state {
                State::Running(_) => (
                    format!("{} at position {position} is still running", claim.evidence.tool),
                    format!(
                        "{} (position {position}) was still running; its effects are not known yet.",
                        claim.evidence.tool
                    ),
                ),
                State::Attempted => (
                    format!("{} at position {position} has no outcome", claim.evidence.tool),
                    format!(
                        "{} (position {position}) has no settled outcome; its effects are not known.",
                        claim.evidence.tool
                    ),
                ),
                State::Settled(_) => continue,
            };
            reasons.push(reason(
                ReasonCode::RunningLaunch,
                Verdict::Unverified,
                message,
                self.claim_evidence(i),
                Some(disclosure),
            ));
        }
    }
}
