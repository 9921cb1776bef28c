//! How many bytes a policy answer occupies, so the host can refuse an answer
//! larger than it admits (POL-2) without serializing it first.
//!
//! The count is the canonical ABI's flat payload: string bytes, list elements at
//! their fixed size, scalars at theirs. It is only ever compared against a cap, so
//! it must be cheap and never undercount a large answer; small padding
//! differences do not matter.

use super::{
    ClaimPlan, Classification, Decision, EffectAssessment, Outcome, PlannedObligation, PlannedScope,
    Postcondition, ReadbackRequest, Reason,
};

/// Bytes an answer occupies on the wire (an upper-bound-ish estimate).
pub trait WireSize {
    /// The estimate.
    fn wire_size(&self) -> usize;
}

/// Fixed size charged for every list element or record header.
const SLOT: usize = 8;

impl WireSize for String {
    fn wire_size(&self) -> usize {
        SLOT + self.len()
    }
}

impl<T: WireSize> WireSize for Vec<T> {
    fn wire_size(&self) -> usize {
        SLOT + self.iter().map(WireSize::wire_size).sum::<usize>()
    }
}

/// An answer, or why it could not be read back (then the message is what
/// crossed, as far as the size limit is concerned).
impl<T: WireSize> WireSize for Result<T, String> {
    fn wire_size(&self) -> usize {
        SLOT + self.as_ref().map_or_else(WireSize::wire_size, WireSize::wire_size)
    }
}

impl<T: WireSize> WireSize for Option<T> {
    fn wire_size(&self) -> usize {
        SLOT + self.as_ref().map_or(0, WireSize::wire_size)
    }
}

impl WireSize for u32 {
    fn wire_size(&self) -> usize {
        4
    }
}

impl WireSize for u64 {
    fn wire_size(&self) -> usize {
        8
    }
}

impl WireSize for Postcondition {
    fn wire_size(&self) -> usize {
        match self {
            Postcondition::ContentSha256(digest) => SLOT + digest.wire_size(),
            Postcondition::Absent | Postcondition::Exists => SLOT,
        }
    }
}

impl WireSize for PlannedObligation {
    fn wire_size(&self) -> usize {
        4 + self.postcondition.wire_size()
    }
}

impl WireSize for ClaimPlan {
    fn wire_size(&self) -> usize {
        let scope = match &self.scope {
            PlannedScope::Unknown => SLOT,
            PlannedScope::Exact(bindings) => SLOT + bindings.wire_size(),
        };
        scope + self.dependencies.wire_size() + self.obligations.wire_size() + 1
    }
}

impl WireSize for Classification {
    fn wire_size(&self) -> usize {
        SLOT + match self {
            Classification::Effect(plan) => plan.wire_size(),
            Classification::ReadOnly => 0,
            Classification::Refused(reason) => reason.wire_size(),
        }
    }
}

impl WireSize for Outcome {
    fn wire_size(&self) -> usize {
        SLOT
    }
}

impl WireSize for ReadbackRequest {
    fn wire_size(&self) -> usize {
        SLOT
    }
}

impl WireSize for Reason {
    fn wire_size(&self) -> usize {
        SLOT + self.message.wire_size() + self.evidence.wire_size() + self.disclosure.wire_size()
    }
}

impl WireSize for EffectAssessment {
    fn wire_size(&self) -> usize {
        3 * SLOT + 8
    }
}

impl WireSize for Decision {
    fn wire_size(&self) -> usize {
        SLOT + self.reasons.wire_size()
            + self.disclosures.wire_size()
            + self.assessments.wire_size()
            + self.presented_answer.wire_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_refusal_counts_its_bytes() {
        let small = Classification::Refused("no".into()).wire_size();
        let large = Classification::Refused("x".repeat(1 << 20)).wire_size();
        assert!(small < 64, "{small}");
        assert!(large > 1 << 20, "{large}");
    }

    #[test]
    fn many_obligations_count_each() {
        let plan = |n: u32| ClaimPlan {
            scope: PlannedScope::Exact((0..n).collect()),
            dependencies: Vec::new(),
            obligations: (0..n)
                .map(|target| PlannedObligation { target, postcondition: Postcondition::Exists })
                .collect(),
            external: false,
        };
        assert!(plan(10_000).wire_size() > 100 * plan(10).wire_size());
    }
}
