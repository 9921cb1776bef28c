//! Re-deriving a recorded decision from the log alone (POL-3: the same inputs
//! give the same outputs, so any decision can be re-derived offline from a
//! log; SPEC 9, policy impact replay).
//!
//! [`Recorded::find`] takes a lineage's history and the position of a
//! decision record, and rebuilds the evidence ledger exactly as it was when
//! the decision was taken: the records up to the history's end the decision
//! recorded, the required artifacts as they were resolved then, the agent's
//! answer as it was given, through the same `assemble` that `Ledger::complete`
//! uses. Nothing is read from the root and no path is resolved again: a file
//! that changed since is not evidence of that decision. [`Recorded::replay`]
//! lets the evaluator the record names decide again (its digest must be the
//! recorded one) and lists every way the new decision differs from the
//! recorded one.
//!
//! Replay never writes: it works on records already read, and the caller
//! opens the log read-only.

use serde::Serialize;
use serde_json::Value;

use super::{Decided, Evaluator, assemble, decision_record};
use crate::digest::Sha256Digest;
use crate::log::{DecisionRecord, EvaluatorRun, Framed, Position, Record};
use crate::model::EvidenceLedger;
use crate::policy::EvaluatorComponent;

/// Why a decision cannot be replayed. Never "it differs": that is a
/// [`Replay`] with differences.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// No record at that position.
    #[error(
        "the log has no record at position {position}; it holds {records} record(s), positions 0 to {last}"
    )]
    NoRecord {
        /// The position asked for.
        position: Position,
        /// How many records the log holds.
        records: usize,
        /// Its last position (`-` for an empty log).
        last: String,
    },
    /// The record there is not a decision.
    #[error(
        "the record at position {position} is of kind `{kind}`, not a decision; `effects log show` lists \
         the records, and the decisions are those of kind `decision`"
    )]
    NotADecision {
        /// The position asked for.
        position: Position,
        /// What it holds.
        kind: &'static str,
    },
    /// The decision predates decisions that keep their answer and assessments.
    #[error(
        "the decision at position {position} was recorded before decisions kept their answer, reasons and \
         assessments, so the log alone cannot re-derive it; decide the run again to record a decision that \
         can be replayed"
    )]
    NotReplayable {
        /// The decision's position.
        position: Position,
    },
    /// No evaluator answered: there is nothing to run again.
    #[error(
        "no evaluator was loaded for the decision at position {position} (it is BLOCKED POLICY_FAILURE: {why}); \
         there is no evaluator to run again"
    )]
    NoEvaluator {
        /// The decision's position.
        position: Position,
        /// The recorded policy failure.
        why: String,
    },
    /// The evaluator offered is not the one the decision names.
    #[error(
        "the decision at position {position} was taken by evaluator {recorded_component} (sha256 \
         {recorded_sha256}), not by {offered_component} (sha256 {offered_sha256}): only the recorded \
         evaluator re-derives it"
    )]
    OtherEvaluator {
        /// The decision's position.
        position: Position,
        /// The recorded component's name.
        recorded_component: String,
        /// The recorded component's digest.
        recorded_sha256: String,
        /// The offered component's name.
        offered_component: String,
        /// The offered component's digest.
        offered_sha256: String,
    },
}

/// A recorded decision and the evidence ledger it was taken over, rebuilt.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The decision's position.
    pub position: Position,
    /// The run that recorded it.
    pub run_id: String,
    /// The record as the log holds it.
    pub record: DecisionRecord,
    /// The evidence ledger as it was at the decision.
    pub ledger: EvidenceLedger,
    history_through: Option<Position>,
}

/// One way a replayed decision differs from the recorded one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// What differs: `verdict`, `reasons`, `disclosures`, `assessments`,
    /// `presented_answer`, `policy_failure`, `reason_codes` (the record's
    /// summary of its reasons), `through` (the last evidence position) or
    /// `answer_sha256` (the recorded answer text against its digest).
    pub field: &'static str,
    /// The recorded value.
    pub recorded: Value,
    /// The value the replay gave.
    pub replayed: Value,
}

/// A decision taken again.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The new decision and the evaluator run that took it.
    pub decided: Decided,
    /// Every way it differs from the recorded one; empty when identical.
    pub differences: Vec<Difference>,
}

impl Replay {
    /// True when the replay re-derived the recorded decision exactly.
    pub fn identical(&self) -> bool {
        self.differences.is_empty()
    }
}

impl Recorded {
    /// The decision at `position` of `history` (a lineage's records in
    /// order), with its evidence ledger rebuilt from the records before it.
    pub fn find(history: &[Framed], position: Position) -> Result<Self, ReplayError> {
        let framed = usize::try_from(position).ok().and_then(|i| history.get(i)).ok_or_else(|| {
            ReplayError::NoRecord {
                position,
                records: history.len(),
                last: history.last().map_or_else(|| "-".to_owned(), |f| f.position.to_string()),
            }
        })?;
        let Record::Decision(record) = &framed.record else {
            return Err(ReplayError::NotADecision { position, kind: framed.record.kind() });
        };
        let Some(detail) = &record.detail else { return Err(ReplayError::NotReplayable { position }) };
        if record.evaluator.is_none() {
            let why = record.policy_failure.clone().unwrap_or_else(|| "no reason recorded".to_owned());
            return Err(ReplayError::NoEvaluator { position, why });
        }
        // The history as the decision saw it. The log refuses a decision
        // that names its own position or a later one, so this cut lies
        // before the record.
        let seen =
            detail.history_through.map_or(0, |through| history.partition_point(|f| f.position <= through));
        let ledger = assemble(&history[..seen.min(position as usize)], &[], &record.required, &detail.answer);
        Ok(Self {
            position,
            run_id: framed.run_id.clone(),
            record: record.clone(),
            ledger,
            history_through: detail.history_through,
        })
    }

    /// The evaluator the decision names (`find` refuses one that names none).
    pub fn evaluator(&self) -> &EvaluatorRun {
        self.record.evaluator.as_ref().expect("find refuses a decision without an evaluator")
    }

    /// Refuses an evaluator whose digest is not the recorded one. Check a
    /// component file's bytes with this before compiling them (POL-1).
    pub fn check_evaluator(&self, component: &str, sha256: &Sha256Digest) -> Result<(), ReplayError> {
        let recorded = self.evaluator();
        if recorded.sha256 == sha256.to_string() {
            return Ok(());
        }
        Err(ReplayError::OtherEvaluator {
            position: self.position,
            recorded_component: recorded.component.clone(),
            recorded_sha256: recorded.sha256.clone(),
            offered_component: component.to_owned(),
            offered_sha256: sha256.to_string(),
        })
    }

    /// Lets `evaluator`, which must be the recorded one, decide again over
    /// the rebuilt ledger, the way `Ledger::complete` decides, and compares.
    pub fn replay(&self, evaluator: &mut EvaluatorComponent) -> Result<Replay, ReplayError> {
        self.check_evaluator(evaluator.name(), &evaluator.sha256())?;
        let (decided, again) = self.decide_with(evaluator);
        Ok(Replay { differences: differences(&self.record, &again), decided })
    }

    /// Lets any `evaluator` decide over the rebuilt ledger, the way
    /// `Ledger::complete` decides: the decision, and the record the log would
    /// keep of it. No digest is checked: a candidate evaluator's decision is
    /// compared with the recorded one, never taken for it (policy impact
    /// replay, `impact`).
    pub fn decide_with(&self, evaluator: &mut EvaluatorComponent) -> (Decided, DecisionRecord) {
        let decided = Evaluator::Component(evaluator).decide(&self.ledger);
        let record = decision_record(&self.ledger, self.history_through, &decided);
        (decided, record)
    }
}

/// The fields of two records of one decision that differ. The evaluator run
/// is left out: its digest was checked, and its fuel is a cost, not a finding.
pub(super) fn differences(recorded: &DecisionRecord, replayed: &DecisionRecord) -> Vec<Difference> {
    fn json(value: &impl Serialize) -> Value {
        serde_json::to_value(value).expect("log records always serialize")
    }
    let empty = crate::log::DecisionDetail {
        answer: String::new(),
        history_through: None,
        reasons: Vec::new(),
        assessments: Vec::new(),
        presented_answer: String::new(),
    };
    let (was, now) = (recorded.detail.as_ref().unwrap_or(&empty), replayed.detail.as_ref().unwrap_or(&empty));
    let fields: [(&'static str, Value, Value); 9] = [
        ("verdict", json(&recorded.verdict), json(&replayed.verdict)),
        ("reasons", json(&was.reasons), json(&now.reasons)),
        ("disclosures", json(&recorded.disclosures), json(&replayed.disclosures)),
        ("assessments", json(&was.assessments), json(&now.assessments)),
        ("presented_answer", json(&was.presented_answer), json(&now.presented_answer)),
        ("policy_failure", json(&recorded.policy_failure), json(&replayed.policy_failure)),
        ("reason_codes", json(&recorded.reasons), json(&replayed.reasons)),
        ("through", json(&recorded.through), json(&replayed.through)),
        ("answer_sha256", json(&recorded.answer_sha256), json(&replayed.answer_sha256)),
    ];
    fields
        .into_iter()
        .filter(|(_, recorded, replayed)| recorded != replayed)
        .map(|(field, recorded, replayed)| Difference { field, recorded, replayed })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{ClaimRecord, DecisionDetail, OperationRef, ProcessesRecord};
    use crate::model::{EvidenceRecord, ReasonCode, Verdict};

    fn framed(position: Position, record: Record) -> Framed {
        Framed { position, run_id: "r".into(), record, check: [0; 32], line: 0..0 }
    }

    fn claim() -> Record {
        Record::Claim(ClaimRecord {
            action_id: "a".into(),
            operation: OperationRef {
                tool: "bash".into(),
                action: String::new(),
                input_sha256: String::new(),
                request_id: String::new(),
            },
            impact_scope: Vec::new(),
            dependencies: Vec::new(),
            obligations: Vec::new(),
            parent_run_id: None,
            external: false,
            policy_failure: None,
            executor: None,
            root: None,
            confined: false,
            profile: None,
            classifier: None,
        })
    }

    fn processes(claim: Position) -> Record {
        Record::Processes(ProcessesRecord { claim, leader: crate::procfs::current(), group: 1, session: 1 })
    }

    fn decision(through: Option<Position>, history_through: Option<Position>) -> DecisionRecord {
        DecisionRecord {
            through,
            required: Vec::new(),
            answer_sha256: Sha256Digest::of(b"done").to_string(),
            verdict: Verdict::Blocked,
            reasons: vec![ReasonCode::UnsettledArtifact],
            disclosures: Vec::new(),
            evaluator: Some(EvaluatorRun {
                component: "evaluate".into(),
                sha256: Sha256Digest::of(b"evaluator").to_string(),
                wit: crate::policy::WIT_PACKAGE.into(),
                fuel_used: Some(1),
            }),
            policy_failure: None,
            detail: Some(DecisionDetail {
                answer: "done".into(),
                history_through,
                reasons: Vec::new(),
                assessments: Vec::new(),
                presented_answer: "done".into(),
            }),
        }
    }

    #[test]
    fn the_ledger_is_rebuilt_from_the_history_the_decision_saw_and_no_further() {
        // A command claimed at 0 whose processes (1) are recorded after the
        // last evidence record: the decision saw them, so its claim carries
        // the INV-2 flag. What came after the decision is no part of it.
        let history = vec![
            framed(0, claim()),
            framed(1, processes(0)),
            framed(2, Record::Decision(decision(Some(0), Some(1)))),
            framed(3, claim()),
        ];
        let recorded = Recorded::find(&history, 2).unwrap();
        assert_eq!(recorded.ledger.records.len(), 1);
        let EvidenceRecord::Claim(claim) = &recorded.ledger.records[0] else { panic!("a claim") };
        assert!(claim.processes, "the processes record before the decision flags its claim");
        assert_eq!(recorded.ledger.answer, "done");
        // Without the history's end, the cut at `through` would lose the flag.
        let history_without = vec![
            history[0].clone(),
            history[1].clone(),
            framed(2, Record::Decision(decision(Some(0), Some(0)))),
        ];
        let EvidenceRecord::Claim(claim) = &Recorded::find(&history_without, 2).unwrap().ledger.records[0]
        else {
            panic!("a claim")
        };
        assert!(!claim.processes);
    }

    #[test]
    fn only_a_replayable_decision_is_found() {
        let history = vec![framed(0, claim()), framed(1, Record::Decision(decision(Some(0), Some(0))))];
        assert_eq!(
            Recorded::find(&history, 0).unwrap_err(),
            ReplayError::NotADecision { position: 0, kind: "claim" }
        );
        assert!(matches!(
            Recorded::find(&history, 2),
            Err(ReplayError::NoRecord { position: 2, records: 2, .. })
        ));
        // A decision written before decisions kept their detail still loads
        // (the field defaults), and is refused by name.
        let old = r#"{"decision":{"through":0,"required":[],"answer_sha256":"x","verdict":"COMPLETED",
            "reasons":[],"disclosures":[],"evaluator":null,"policy_failure":null}}"#;
        let old: Record = serde_json::from_str(old).unwrap();
        let history = vec![framed(0, claim()), framed(1, old)];
        assert_eq!(Recorded::find(&history, 1).unwrap_err(), ReplayError::NotReplayable { position: 1 });
        let mut unloaded = decision(Some(0), Some(0));
        unloaded.evaluator = None;
        unloaded.policy_failure = Some("no evaluator in the manifest".into());
        let history = vec![framed(0, claim()), framed(1, Record::Decision(unloaded))];
        assert!(matches!(Recorded::find(&history, 1), Err(ReplayError::NoEvaluator { position: 1, .. })));
    }

    #[test]
    fn another_evaluator_digest_is_refused() {
        let history = vec![framed(0, claim()), framed(1, Record::Decision(decision(Some(0), Some(0))))];
        let recorded = Recorded::find(&history, 1).unwrap();
        assert!(recorded.check_evaluator("evaluate", &Sha256Digest::of(b"evaluator")).is_ok());
        let refused = recorded.check_evaluator("other.wasm", &Sha256Digest::of(b"other")).unwrap_err();
        assert!(matches!(refused, ReplayError::OtherEvaluator { .. }));
        assert!(refused.to_string().contains(&Sha256Digest::of(b"evaluator").to_string()), "{refused}");
    }

    #[test]
    fn every_compared_field_is_told_apart() {
        let recorded = decision(Some(0), Some(0));
        assert!(differences(&recorded, &recorded).is_empty());
        let mut replayed = recorded.clone();
        replayed.verdict = Verdict::Completed;
        replayed.reasons.clear();
        let detail = replayed.detail.as_mut().unwrap();
        detail.presented_answer = "done, verified".into();
        detail.answer = "other".into();
        replayed.answer_sha256 = Sha256Digest::of(b"other").to_string();
        let fields: Vec<_> = differences(&recorded, &replayed).into_iter().map(|d| d.field).collect();
        assert_eq!(fields, ["verdict", "presented_answer", "reason_codes", "answer_sha256"]);
    }
}
