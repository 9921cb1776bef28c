//! Contract checks on what a guest answers, beyond what the types already
//! enforce: indices in range, obligations inside their scope, outcomes OUT-1
//! allows, decisions whose verdict follows from their reasons. A guest is
//! untrusted code; an answer that fails here is refused as malformed.
//!
//! Every check is linear in the answer (the decision check is linear in the
//! ledger, plus the answer times the log of the ledger), so a large answer
//! cannot make the host quadratic.

use std::collections::HashSet;

use crate::digest::Sha256Digest;
use crate::model::SettleRequest;
use crate::model::{
    BindingIndex, BoundOperation, Classification, Decision, EvidenceLedger, EvidenceRecord, Execution,
    Impact, Outcome, PlannedScope, Postcondition, ReadbackRequest, Verdict,
};

fn binding_in_range(operation: &BoundOperation, index: BindingIndex, what: &str) -> Result<(), String> {
    if (index as usize) < operation.bindings.len() {
        Ok(())
    } else {
        Err(format!("{what} names binding {index}, but the operation has {}", operation.bindings.len()))
    }
}

/// A plan may name only the operation's bindings; each obligation targets a
/// binding in the exact scope (CL-1); content digests are digests.
pub(crate) fn check_classification(
    operation: &BoundOperation,
    answer: &Classification,
) -> Result<(), String> {
    let Classification::Effect(plan) = answer else { return Ok(()) };
    let scope: &[BindingIndex] = match &plan.scope {
        PlannedScope::Exact(bindings) => bindings,
        PlannedScope::Unknown => &[],
    };
    for &index in scope {
        binding_in_range(operation, index, "the scope")?;
    }
    for &index in &plan.dependencies {
        binding_in_range(operation, index, "a dependency")?;
    }
    let in_scope: HashSet<BindingIndex> = scope.iter().copied().collect();
    for obligation in &plan.obligations {
        binding_in_range(operation, obligation.target, "an obligation")?;
        if !in_scope.contains(&obligation.target) {
            return Err(format!(
                "an obligation targets binding {}, which is not in the exact scope",
                obligation.target
            ));
        }
        if let Postcondition::ContentSha256(digest) = &obligation.postcondition {
            digest.parse::<Sha256Digest>().map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// OUT-1 and TRU-1 against the facts the settlement was asked about:
/// `impact: none` exactly with NOT_EXECUTED, and NOT_EXECUTED exactly when the
/// backend was never invoked; acknowledgement and detachment only when the
/// facts say so; RUNNING only from a bound producer that started a job.
pub(crate) fn check_outcome(request: &SettleRequest, answer: &Outcome) -> Result<(), String> {
    let not_executed = answer.execution == Execution::NotExecuted;
    if not_executed != (answer.impact == Impact::None) {
        return Err(format!(
            "execution {:?} with impact {:?}: impact NONE goes with NOT_EXECUTED and only with it",
            answer.execution, answer.impact
        ));
    }
    if not_executed == request.facts.executed {
        return Err(format!(
            "execution {:?}, but the facts say the backend {} invoked",
            answer.execution,
            if request.facts.executed { "was" } else { "was not" }
        ));
    }
    if answer.remote_acknowledged && !request.facts.remote_acknowledged {
        return Err("remote_acknowledged without the captured acknowledgement (TRU-1)".into());
    }
    if answer.detached && !request.facts.detached {
        return Err("detached without the server saying so (TRU-1)".into());
    }
    if answer.execution == Execution::Running
        && !(request.operation.producer_bound && request.facts.background_job_id.is_some())
    {
        return Err("RUNNING needs a bound producer that started a background job (TRU-1)".into());
    }
    Ok(())
}

/// Readbacks name only the operation's bindings.
pub(crate) fn check_readbacks(operation: &BoundOperation, answer: &[ReadbackRequest]) -> Result<(), String> {
    answer.iter().try_for_each(|request| binding_in_range(operation, request.binding, "a readback"))
}

/// The verdict is the worst of the reasons' verdicts (COMPLETED with none);
/// the presented answer carries every disclosure, in order (CMP-6), under the
/// one disclosure heading it has, which ends it (CMP-10); every
/// position a reason or assessment cites is a record of the ledger.
pub(crate) fn check_decision(ledger: &EvidenceLedger, answer: &Decision) -> Result<(), String> {
    let worst =
        answer.reasons.iter().map(|r| r.verdict).max_by_key(|v| v.severity()).unwrap_or(Verdict::Completed);
    if worst != answer.verdict {
        return Err(format!(
            "verdict {:?} does not follow from its reasons (worst is {worst:?})",
            answer.verdict
        ));
    }
    // CMP-6 is structural: every reason's disclosure is listed, and every
    // listed disclosure is carried by the presented answer.
    let listed: HashSet<&str> = answer.disclosures.iter().map(String::as_str).collect();
    if let Some(missing) =
        answer.reasons.iter().filter_map(|r| r.disclosure.as_deref()).find(|d| !listed.contains(d))
    {
        return Err(format!("the disclosure {missing:?} of a reason is not in its disclosures"));
    }
    // In order, each searched after the previous one: linear in the answer.
    let mut rest = answer.presented_answer.as_str();
    for disclosure in &answer.disclosures {
        match rest.find(disclosure.as_str()) {
            Some(at) => rest = &rest[at + disclosure.len()..],
            None => {
                return Err(format!(
                    "the presented answer does not carry the disclosure {disclosure:?} (in order)"
                ));
            }
        }
    }
    // CMP-10: the ledger's section is the only one under its heading, and it
    // ends the answer, whatever evaluator wrote it: a line of the agent's
    // text (or of a disclosure) that reads as the heading must have been
    // escaped, and the section holds exactly the listed disclosures.
    let presented = answer.presented_answer.as_str();
    let headings = effects_evaluate::imitations(presented);
    let section: String = std::iter::once(effects_evaluate::DISCLOSURE_HEADING)
        .chain(answer.disclosures.iter().flat_map(|d| ["\n- ", d.as_str()]))
        .collect();
    let well_formed = if answer.disclosures.is_empty() {
        headings == 0
    } else {
        headings == 1 && presented.ends_with(&section)
    };
    if !well_formed {
        return Err(format!(
            "the presented answer has {headings} line(s) reading as the disclosure heading; only the ledger's \
             own section, listing exactly the {} disclosure(s) at the end, may (CMP-10)",
            answer.disclosures.len()
        ));
    }
    // Searched in the records themselves, which are in log order (checked
    // before the call: `EvidenceLedger::check_order`). Were they not, a
    // search could only miss, refusing the answer: never a false COMPLETED.
    let mut recorded = Recorded { records: &ledger.records, at: 0 };
    let cited = answer
        .reasons
        .iter()
        .flat_map(|r| r.evidence.iter().copied())
        .chain(answer.assessments.iter().flat_map(|a| std::iter::once(a.claim).chain(a.observation)));
    for position in cited {
        if !recorded.contains(position) {
            return Err(format!("it cites position {position}, which is not in the ledger"));
        }
    }
    Ok(())
}

/// Records in log order, searched by position from where the last search
/// ended: a decision cites them mostly in log order, so most searches end a
/// step or two on. Only a citation outside the next [`Recorded::WINDOW`]
/// records costs a binary search of them all.
struct Recorded<'r> {
    records: &'r [EvidenceRecord],
    at: usize,
}

impl Recorded<'_> {
    const WINDOW: usize = 4;

    fn contains(&mut self, position: u64) -> bool {
        let window = &self.records[self.at..(self.at + Self::WINDOW).min(self.records.len())];
        let nearby = window.first().is_some_and(|r| r.position() <= position)
            && window.last().is_some_and(|r| r.position() >= position);
        let found = if nearby {
            window.binary_search_by_key(&position, EvidenceRecord::position).map(|i| self.at + i)
        } else {
            self.records.binary_search_by_key(&position, EvidenceRecord::position)
        };
        found.inspect(|&i| self.at = i).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        Binding, CheckResult, ClaimPlan, FilesystemLocation, FilesystemRoot, Location, PlannedObligation,
        Reason, ReasonCode, ResourceRef, ResourceRole, VerifierEvidence,
    };

    fn operation_with(bindings: usize) -> BoundOperation {
        let root =
            FilesystemRoot { scope: "s".into(), owner: "o".into(), path: "/r".into(), device: 1, inode: 2 };
        let binding = |i: usize| Binding {
            name: format!("path{i}"),
            resource: ResourceRef::new(
                ResourceRole::Target,
                Location::Filesystem(FilesystemLocation { root: root.clone(), path: format!("f{i}") }),
                "absent:".into(),
                None,
            ),
        };
        BoundOperation {
            tool: "write_file".into(),
            action: String::new(),
            request_id: "r".into(),
            input_json: "{}".into(),
            input_sha256: String::new(),
            bindings: (0..bindings).map(binding).collect(),
            pre_states: Vec::new(),
            producer_bound: true,
        }
    }

    fn plan(scope: PlannedScope, obligations: Vec<PlannedObligation>) -> Classification {
        Classification::Effect(ClaimPlan { scope, dependencies: Vec::new(), obligations, external: false })
    }

    const DIGEST: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn plans_may_name_only_the_operations_bindings() {
        let op = operation_with(2);
        let good = plan(
            PlannedScope::Exact(vec![0, 1]),
            vec![PlannedObligation { target: 1, postcondition: Postcondition::ContentSha256(DIGEST.into()) }],
        );
        assert_eq!(check_classification(&op, &good), Ok(()));
        let out_of_range = plan(PlannedScope::Exact(vec![2]), Vec::new());
        assert!(check_classification(&op, &out_of_range).unwrap_err().contains("names binding 2"));
    }

    #[test]
    fn obligations_must_target_the_exact_scope_with_real_digests() {
        let op = operation_with(2);
        let outside = plan(
            PlannedScope::Exact(vec![0]),
            vec![PlannedObligation { target: 1, postcondition: Postcondition::Exists }],
        );
        assert!(check_classification(&op, &outside).unwrap_err().contains("not in the exact scope"));
        let unknown = plan(
            PlannedScope::Unknown,
            vec![PlannedObligation { target: 0, postcondition: Postcondition::Exists }],
        );
        assert!(check_classification(&op, &unknown).unwrap_err().contains("not in the exact scope"));
        let bad_digest = plan(
            PlannedScope::Exact(vec![0]),
            vec![PlannedObligation { target: 0, postcondition: Postcondition::ContentSha256("zz".into()) }],
        );
        assert!(check_classification(&op, &bad_digest).unwrap_err().contains("SHA-256"));
    }

    fn settle_request(executed: bool) -> SettleRequest {
        SettleRequest {
            operation: operation_with(0),
            plan: None,
            facts: crate::model::ProducerFacts { executed, ..Default::default() },
        }
    }

    fn outcome(execution: Execution, impact: Impact) -> Outcome {
        Outcome {
            execution,
            impact,
            cleanup: crate::model::CleanupState::NotApplicable,
            replayed: false,
            remote_acknowledged: false,
            detached: false,
        }
    }

    #[test]
    fn impact_none_goes_with_not_executed_only() {
        let (ran, idle) = (settle_request(true), settle_request(false));
        assert!(check_outcome(&idle, &outcome(Execution::NotExecuted, Impact::None)).is_ok());
        assert!(check_outcome(&ran, &outcome(Execution::Failed, Impact::Possible)).is_ok());
        assert!(check_outcome(&ran, &outcome(Execution::ReportedSuccess, Impact::None)).is_err());
        assert!(check_outcome(&idle, &outcome(Execution::NotExecuted, Impact::Possible)).is_err());
    }

    #[test]
    fn an_outcome_cannot_contradict_or_embellish_the_facts() {
        let ran = settle_request(true);
        let hidden = outcome(Execution::NotExecuted, Impact::None);
        assert!(check_outcome(&ran, &hidden).unwrap_err().contains("was invoked"));
        let acknowledged =
            Outcome { remote_acknowledged: true, ..outcome(Execution::ReportedSuccess, Impact::Possible) };
        assert!(check_outcome(&ran, &acknowledged).unwrap_err().contains("TRU-1"));
        let detached = Outcome { detached: true, ..outcome(Execution::ReportedSuccess, Impact::Possible) };
        assert!(check_outcome(&ran, &detached).unwrap_err().contains("TRU-1"));
        let running = outcome(Execution::Running, Impact::Possible);
        assert!(check_outcome(&ran, &running).unwrap_err().contains("RUNNING"));
        let mut launched = settle_request(true);
        launched.operation.producer_bound = true;
        launched.facts.background_job_id = Some("job-1".into());
        assert!(check_outcome(&launched, &running).is_ok());
    }

    #[test]
    fn a_decision_verdict_follows_from_its_reasons_and_cites_real_positions() {
        let ledger = EvidenceLedger {
            resources: Vec::new(),
            required: Vec::new(),
            records: vec![EvidenceRecord::Verifier(VerifierEvidence {
                position: 4,
                command: "t".into(),
                result: CheckResult::Failed,
                claim: None,
            })],
            answer: String::new(),
            concurrent: Vec::new(),
        };
        let reason = |verdict, evidence: Vec<u64>| Reason {
            code: ReasonCode::FailingVerifier,
            verdict,
            message: String::new(),
            remedy: String::new(),
            evidence,
            disclosure: None,
        };
        let decision = |verdict, reasons| Decision {
            verdict,
            reasons,
            disclosures: Vec::new(),
            assessments: Vec::new(),
            presented_answer: String::new(),
        };
        assert!(check_decision(&ledger, &decision(Verdict::Completed, Vec::new())).is_ok());
        assert!(
            check_decision(&ledger, &decision(Verdict::Failed, vec![reason(Verdict::Failed, vec![4])]))
                .is_ok()
        );
        let hidden = decision(Verdict::Completed, vec![reason(Verdict::Failed, vec![4])]);
        assert!(check_decision(&ledger, &hidden).unwrap_err().contains("does not follow"));
        let invented = decision(Verdict::Failed, vec![reason(Verdict::Failed, vec![9])]);
        assert!(check_decision(&ledger, &invented).unwrap_err().contains("position 9"));
    }

    #[test]
    fn recorded_positions_are_found_forwards_backwards_and_far_away() {
        let verifier = |i: u64| {
            EvidenceRecord::Verifier(VerifierEvidence {
                position: 3 * i,
                command: "t".into(),
                result: CheckResult::Passed,
                claim: None,
            })
        };
        let records: Vec<EvidenceRecord> = (0..100).map(verifier).collect();
        let mut recorded = Recorded { records: &records, at: 0 };
        let cited = [0, 3, 6, 9, 270, 12, 150, 3, 297, 0];
        assert!(cited.iter().all(|&p| recorded.contains(p)), "every cited position is recorded");
        for missing in [1, 4, 151, 298, 300, u64::MAX] {
            assert!(!recorded.contains(missing), "{missing} is not recorded");
        }
        assert!(!Recorded { records: &[], at: 0 }.contains(0));
    }
}
