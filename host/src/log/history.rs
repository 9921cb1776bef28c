//! The history rules (HIS-1, LOG-2, LOG-7) over records in log order: pure,
//! no IO. Both the writer (before it appends) and the reader (while it loads)
//! run every record through [`History::admit`], so a log can never hold a
//! history the writer would have refused.
//!
//! Rules:
//! - an outcome needs an earlier claim at the position it names;
//! - a claim's outcomes are none, one settled, one RUNNING, or RUNNING then
//!   one settled: a settled outcome is never replaced, RUNNING never repeats;
//! - a recovery outcome (LOG-7) only settles a claim with no outcome at all,
//!   and is always INTERRUPTED;
//! - an observation's source claim, when named, is an earlier claim.

use crate::model::Execution;

use super::record::{Position, Record};

/// Where a claim's settlement stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    /// Claimed, no outcome yet (ATTEMPTED, derived: OUT-1).
    Attempted,
    /// A RUNNING outcome, not yet settled.
    Running,
    /// Settled.
    Settled(Execution),
}

/// What a position holds, as far as the rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Claim(ClaimState),
    Other,
}

/// A record the history refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// An outcome or observation names a position that is not a claim.
    #[error("record names claim {claim}, but position {claim} is not an earlier claim")]
    NoSuchClaim {
        /// The position named.
        claim: Position,
    },
    /// A second settled outcome, or a RUNNING after RUNNING or settlement.
    #[error("claim {claim} is already {state}; a settled outcome is never replaced (HIS-1)")]
    AlreadySettled {
        /// The claim.
        claim: Position,
        /// Its state, for the message.
        state: &'static str,
    },
    /// A recovery outcome for a claim that has any outcome.
    #[error(
        "recovery outcome for claim {claim}, which is {state}; recovery only settles unsettled claims (LOG-7)"
    )]
    RecoveryOfSettled {
        /// The claim.
        claim: Position,
        /// Its state.
        state: &'static str,
    },
    /// A recovery outcome that is not INTERRUPTED.
    #[error("recovery outcome for claim {claim} is {execution:?}; recovery only writes INTERRUPTED (LOG-7)")]
    RecoveryNotInterrupted {
        /// The claim.
        claim: Position,
        /// What it said.
        execution: Execution,
    },
}

fn describe(state: ClaimState) -> &'static str {
    match state {
        ClaimState::Attempted => "unsettled",
        ClaimState::Running => "RUNNING",
        ClaimState::Settled(_) => "settled",
    }
}

/// The rules' view of a log: one slot per position.
#[derive(Debug, Clone, Default)]
pub struct History {
    slots: Vec<Slot>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of records admitted; also the next position.
    pub fn len(&self) -> u64 {
        self.slots.len() as u64
    }

    /// True when nothing has been admitted.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The state of the claim at `position`, if it is one.
    pub fn claim_state(&self, position: Position) -> Option<ClaimState> {
        match self.slots.get(usize::try_from(position).ok()?)? {
            Slot::Claim(state) => Some(*state),
            Slot::Other => None,
        }
    }

    /// Claims with no outcome at all, in order (what LOG-7 recovers).
    pub fn unsettled_claims(&self) -> impl Iterator<Item = Position> + '_ {
        self.slots.iter().enumerate().filter_map(|(position, slot)| {
            (*slot == Slot::Claim(ClaimState::Attempted)).then_some(position as Position)
        })
    }

    /// Checks `record` as the next record, without admitting it.
    pub fn check(&self, record: &Record) -> Result<(), HistoryError> {
        self.next_state(record).map(drop)
    }

    /// Checks and admits `record` as the next record.
    pub fn admit(&mut self, record: &Record) -> Result<(), HistoryError> {
        let update = self.next_state(record)?;
        if let Some((claim, state)) = update {
            self.slots[claim as usize] = Slot::Claim(state);
        }
        self.slots.push(match record {
            Record::Claim(_) => Slot::Claim(ClaimState::Attempted),
            _ => Slot::Other,
        });
        Ok(())
    }

    /// The claim state change `record` makes, if it is allowed.
    fn next_state(&self, record: &Record) -> Result<Option<(Position, ClaimState)>, HistoryError> {
        match record {
            Record::Claim(_) => Ok(None),
            Record::Observation(observation) => match observation.source_claim {
                Some(claim) if self.claim_state(claim).is_none() => Err(HistoryError::NoSuchClaim { claim }),
                _ => Ok(None),
            },
            Record::Outcome(outcome) => {
                let claim = outcome.claim;
                let state = self.claim_state(claim).ok_or(HistoryError::NoSuchClaim { claim })?;
                let execution = outcome.outcome.execution;
                if outcome.recovery {
                    if state != ClaimState::Attempted {
                        return Err(HistoryError::RecoveryOfSettled { claim, state: describe(state) });
                    }
                    if execution != Execution::Interrupted {
                        return Err(HistoryError::RecoveryNotInterrupted { claim, execution });
                    }
                }
                let next = match (state, execution) {
                    (ClaimState::Attempted, Execution::Running) => ClaimState::Running,
                    (ClaimState::Attempted | ClaimState::Running, settled)
                        if settled != Execution::Running =>
                    {
                        ClaimState::Settled(settled)
                    }
                    (state, _) => return Err(HistoryError::AlreadySettled { claim, state: describe(state) }),
                };
                Ok(Some((claim, next)))
            }
        }
    }
}
