//! Policy impact replay (SPEC 9, POL-3; `effects policy replay`): which
//! recorded decisions a candidate evaluator would change, before it is
//! pinned.
//!
//! Each run's last recorded decision is rebuilt from the log alone
//! ([`Recorded::find`]: the evidence as it was, the required files as they
//! were resolved, the answer as given) and decided by the candidate. The
//! candidate's decision is compared with the **baseline**: the recorded
//! evaluator's decision taken again when that evaluator is at hand (its
//! digest is the recorded one), else the decision as the log recorded it.
//! Taking it again also checks the record: where the recorded evaluator does
//! not re-derive it (`drift`), the record or the evaluator is not what it
//! claims, and the report says so beside the candidate's changes.
//!
//! Nothing here writes: it works on records already read.

use std::collections::HashMap;

use serde::Serialize;

use super::replay::differences;
use super::{Difference, Recorded};
use crate::log::{DecisionRecord, Framed, Position, Record};
use crate::model::{ReasonCode, Verdict};
use crate::policy::EvaluatorComponent;

/// What a candidate's decision was compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Baseline {
    /// The recorded evaluator, at hand, decided again.
    Replayed,
    /// The recorded evaluator was not at hand: the decision as recorded.
    Recorded,
}

/// A decision in brief: what a reviewer scans first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// The verdict.
    pub verdict: Verdict,
    /// Its reasons' codes, in order.
    pub reasons: Vec<ReasonCode>,
    /// The disclosures the answer carries.
    pub disclosures: Vec<String>,
    /// Why evaluation failed, if it did.
    pub policy_failure: Option<String>,
}

impl Summary {
    fn of(record: &DecisionRecord) -> Self {
        Self {
            verdict: record.verdict,
            reasons: record.reasons.clone(),
            disclosures: record.disclosures.clone(),
            policy_failure: record.policy_failure.clone(),
        }
    }
}

/// One recorded decision, decided by the candidate.
#[derive(Debug, Clone, Serialize)]
pub struct Impact {
    /// The run that recorded the decision.
    pub run_id: String,
    /// The decision's position in its lineage's log.
    pub position: Position,
    /// What the candidate was compared with.
    pub baseline: Baseline,
    /// Where the recorded evaluator, decided again, does not re-derive the
    /// record; empty when it does, or was not at hand.
    pub drift: Vec<Difference>,
    /// The baseline decision.
    pub before: Summary,
    /// The candidate's decision.
    pub after: Summary,
    /// Every way the candidate's decision differs from the baseline (verdict,
    /// reasons, disclosures, assessments, presented answer, policy failure);
    /// empty when it would decide the same.
    pub changes: Vec<Difference>,
}

impl Impact {
    /// Whether the candidate decides differently.
    pub fn changed(&self) -> bool {
        !self.changes.is_empty()
    }

    /// Whether the verdict itself changes.
    pub fn verdict_changed(&self) -> bool {
        self.before.verdict != self.after.verdict
    }
}

/// The position of each run's last decision in `history`, in log order:
/// the decision that run's answer stands on now.
pub fn last_decisions(history: &[Framed]) -> Vec<Position> {
    let mut last: HashMap<&str, Position> = HashMap::new();
    for framed in history {
        if let Record::Decision(_) = framed.record {
            last.insert(&framed.run_id, framed.position);
        }
    }
    let mut positions: Vec<Position> = last.into_values().collect();
    positions.sort_unstable();
    positions
}

/// `recorded` decided by `candidate`, compared with the baseline: `recorded`
/// taken again by `baseline` when that is the recorded evaluator (same
/// digest), else the record itself.
pub fn impact(
    recorded: &Recorded,
    baseline: Option<&mut EvaluatorComponent>,
    candidate: &mut EvaluatorComponent,
) -> Impact {
    let at_hand =
        baseline.filter(|evaluator| recorded.check_evaluator(evaluator.name(), &evaluator.sha256()).is_ok());
    let (basis, before, drift) = match at_hand {
        Some(evaluator) => {
            let (_, again) = recorded.decide_with(evaluator);
            let drift = differences(&recorded.record, &again);
            (Baseline::Replayed, again, drift)
        }
        None => (Baseline::Recorded, recorded.record.clone(), Vec::new()),
    };
    let (_, after) = recorded.decide_with(candidate);
    Impact {
        run_id: recorded.run_id.clone(),
        position: recorded.position,
        baseline: basis,
        drift,
        before: Summary::of(&before),
        after: Summary::of(&after),
        changes: differences(&before, &after),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::ProcessesRecord;

    fn framed(position: Position, run_id: &str, record: Record) -> Framed {
        Framed { position, run_id: run_id.into(), record, check: [0; 32], line: 0..0 }
    }

    fn decision() -> Record {
        let record = r#"{"decision":{"through":null,"required":[],"answer_sha256":"x","verdict":"COMPLETED",
            "reasons":[],"disclosures":[],"evaluator":null,"policy_failure":null}}"#;
        serde_json::from_str(record).unwrap()
    }

    #[test]
    fn each_run_is_replayed_at_its_last_decision() {
        let processes = Record::Processes(ProcessesRecord {
            claim: 0,
            leader: crate::procfs::current(),
            group: 1,
            session: 1,
        });
        let history = vec![
            framed(0, "a", decision()),
            framed(1, "a.child", decision()),
            framed(2, "a", processes),
            framed(3, "a", decision()),
            framed(4, "b", decision()),
        ];
        assert_eq!(last_decisions(&history), [1, 3, 4]);
        // Only decisions count: a log of other records has none to replay.
        assert!(last_decisions(&history[2..3]).is_empty());
    }
}
