//! Assembling the evidence ledger (SPEC section 7's input) from the durable
//! history of a run's lineage: claims, outcomes and observations in log order,
//! each resource listed once.
//!
//! The whole lineage, not just the run decided: a run's children write to
//! their root's log (LOG-1), and a parent's or sibling's later effect on a
//! file invalidates the run's own reads of it (INV-1) or was in flight when
//! they were taken (INV-2). Leaving them out could only make stale evidence
//! look fresh. The price is that deciding a child also reports what its
//! relatives left unverified. Decision records are not evidence and are left
//! out.

use std::collections::{HashMap, HashSet};

use crate::log::{Framed, Position, Record};
use crate::model::{
    ClaimEvidence, EvidenceLedger, EvidenceRecord, Execution, ObligationEvidence, ObservationEvidence,
    OutcomeEvidence, ResourceIndex, ResourceRef, VerifierEvidence,
};

/// Each resource once, by first appearance.
#[derive(Default)]
struct Resources {
    list: Vec<ResourceRef>,
    index: HashMap<ResourceRef, ResourceIndex>,
}

impl Resources {
    /// The resources of `list`, each at its index there.
    fn listed(list: Vec<ResourceRef>) -> Self {
        let index = list.iter().enumerate().map(|(i, r)| (r.clone(), i as ResourceIndex)).collect();
        Resources { list, index }
    }

    fn of(&mut self, resource: &ResourceRef) -> ResourceIndex {
        if let Some(&index) = self.index.get(resource) {
            return index;
        }
        let index = self.list.len() as ResourceIndex;
        self.list.push(resource.clone());
        self.index.insert(resource.clone(), index);
        index
    }
}

/// The ledger of a lineage's `history`, deciding about `required` with the
/// agent's `answer`. `unrecorded` records (the completion's own observations
/// for a run that has no log, so nothing was written: CMP-9) follow the
/// history at the next positions.
pub fn assemble(
    history: &[Framed],
    unrecorded: &[Record],
    required: &[ResourceRef],
    answer: &str,
) -> EvidenceLedger {
    let mut resources = Resources::default();
    let required = required.iter().map(|r| resources.of(r)).collect();
    // INV-1's no-op: an effect whose backend never ran changed nothing. And
    // INV-2's process effects: claims whose commands' processes the log
    // records (PROC-2), whose windows close only once those are known dead.
    let mut not_executed: HashSet<Position> = HashSet::new();
    let mut processes: HashSet<Position> = HashSet::new();
    let mut seen_gone: HashSet<Position> = HashSet::new();
    for framed in history {
        match &framed.record {
            Record::Outcome(o) if o.outcome.execution == Execution::NotExecuted => {
                not_executed.insert(o.claim);
            }
            Record::Processes(p) => {
                processes.insert(p.claim);
            }
            _ => {}
        }
        // The ledger's own look at a runtime-run command's processes, found
        // gone when it settled (`Ledger::settle_observed`): no runtime can
        // report this fact (`Reported` has no such field).
        if let Record::Outcome(o) = &framed.record
            && o.facts.teardown_dead == Some(true)
        {
            seen_gone.insert(o.claim);
        }
    }
    let next = history.last().map_or(0, |framed| framed.position + 1);
    let all = history
        .iter()
        .map(|framed| (framed.position, framed.run_id.as_str(), &framed.record))
        .chain(unrecorded.iter().enumerate().map(|(i, record)| (next + i as Position, "", record)));
    let mut records = Vec::new();
    for (position, run_id, record) in all {
        match record {
            Record::Claim(claim) => {
                let scope: Vec<ResourceIndex> = claim.impact_scope.iter().map(|r| resources.of(r)).collect();
                let obligations = claim
                    .obligations
                    .iter()
                    .map(|o| ObligationEvidence {
                        // In range: the log admits no other (CL-1).
                        target: scope[o.target as usize],
                        postcondition: o.postcondition.clone(),
                    })
                    .collect();
                records.push(EvidenceRecord::Claim(ClaimEvidence {
                    position,
                    run_id: run_id.to_owned(),
                    action_id: claim.action_id.clone(),
                    tool: claim.operation.tool.clone(),
                    subject: match claim.external {
                        true => claim.operation.action.clone(),
                        false => String::new(),
                    },
                    dependencies: claim.dependencies.iter().map(|r| resources.of(r)).collect(),
                    scope: (!scope.is_empty()).then_some(scope),
                    obligations,
                    external: claim.external,
                    no_op: not_executed.contains(&position),
                    // A command the runtime ran (it has a producer profile)
                    // started processes no supervisor of ours led: its
                    // window closes only on the surface's own observation
                    // that they are gone (SPEC 14, INV-2 extended), which
                    // its settlement's facts carry.
                    processes: processes.contains(&position)
                        || (claim.profile.is_some()
                            && crate::tools::is_command(&claim.operation.tool)
                            && !seen_gone.contains(&position)),
                    unbound: !crate::tools::producer_bound(&claim.operation.tool),
                    // ID-6: a command is confined only when its claim says
                    // so (a log from before ID-6 says nothing: unconfined).
                    unconfined: crate::tools::is_command(&claim.operation.tool) && !claim.confined,
                }));
            }
            Record::Outcome(outcome) => {
                records.push(EvidenceRecord::Outcome(OutcomeEvidence {
                    position,
                    claim: outcome.claim,
                    outcome: outcome.outcome.clone(),
                    recovery: outcome.recovery,
                    mutation_attempted: outcome.facts.mutation_attempted,
                }));
            }
            Record::Observation(observation) => {
                records.push(EvidenceRecord::Observation(ObservationEvidence {
                    position,
                    resource: resources.of(&observation.resource),
                    mechanism: observation.mechanism,
                    coverage: observation.coverage,
                    source_action: observation.source_action.clone(),
                    source_claim: observation.source_claim,
                    exists: observation.exists,
                    content_sha256: observation.content_sha256.clone(),
                    job_state: observation.job_state,
                }));
            }
            Record::Verifier(verifier) => records.push(EvidenceRecord::Verifier(VerifierEvidence {
                position,
                command: verifier.command.clone(),
                result: verifier.result(),
                claim: Some(verifier.claim),
            })),
            // A command's processes are a fact about its claim (INV-2), not a
            // record of the evidence.
            Record::Decision(_) | Record::Processes(_) => {}
        }
    }
    // Other runs' claims in flight (CMP-13) are the caller's: `add_concurrent`.
    EvidenceLedger {
        resources: resources.list,
        required,
        records,
        answer: answer.to_owned(),
        concurrent: Vec::new(),
    }
}

/// Another run's claim in flight as a decision sees it (CMP-13): whose it is,
/// where in its own lineage, and what it may touch.
pub struct Concurrent {
    /// The run that made it (for a log that could not be read, its lineage).
    pub run_id: String,
    /// Its position in its own lineage.
    pub position: Position,
    /// Its action id.
    pub action_id: String,
    /// Its tool, or what stands for it.
    pub tool: String,
    /// Its exact scope; empty for an unknown one.
    pub scope: Vec<ResourceRef>,
    /// An external effect.
    pub external: bool,
}

/// Adds `claims` to `ledger` as its `concurrent` claims, each resource of
/// their scopes listed once beside the ledger's own.
pub fn add_concurrent(ledger: &mut EvidenceLedger, claims: impl IntoIterator<Item = Concurrent>) {
    let mut resources = Resources::listed(std::mem::take(&mut ledger.resources));
    for claim in claims {
        let scope: Vec<ResourceIndex> = claim.scope.iter().map(|r| resources.of(r)).collect();
        let scope = (!scope.is_empty()).then_some(scope);
        let bare = ClaimEvidence::bare(claim.position, claim.run_id, claim.action_id, claim.tool, scope);
        ledger.concurrent.push(ClaimEvidence { external: claim.external, ..bare });
    }
    ledger.resources = resources.list;
}
