//! VER-1..3: every claim's assessment, per obligation.
//!
//! The check for an obligation is the **newest** observation of its target's
//! location that can check its kind of postcondition, and only if it came
//! after the claim settled; it decides only if it is FRESH, and otherwise the
//! obligation is UNVERIFIED: there is no fallback to an earlier check.
//!
//! - `content_sha256` is checked through the verifying mechanism of the
//!   target's kind (a filesystem read, an owned-record read, a remote
//!   readback), and decided only by a COMPLETE one (CMP-3: the newest read
//!   being PARTIAL leaves it undecided).
//! - `exists` and `absent` of a file are checked by an existence observation
//!   (VER-1, revision 2): a stat (`filesystem-stat`, which is also what a
//!   listing records of its exact path) or a COMPLETE read, including the
//!   COMPLETE absent read of a path where nothing is. A PARTIAL read is no
//!   existence observation at all: it neither proves nor hides (CMP-3). For
//!   other kinds, existence is checked like content.
//!
//! An observation of a hard link is a check of every name of its object
//! while they are aliases (ID-3, VER-2: a hard link's postcondition stands
//! for the object it names).
//!
//! VER-2: a fresh check that holds is VERIFIED only if the claim reported
//! success, STATE_OBSERVED otherwise; one that does not hold is CONTRADICTED,
//! unless an unknown-scope effect may have changed the target after the claim
//! and before the check: then the claim is history, and UNVERIFIED.
//! A check taken while the claim's own window is still open (its processes not
//! known dead, INV-2) is UNSETTLED, so it decides nothing either.
//! Job state, process ownership, browser sessions and receipts never verify
//! (VER-3): they check no postcondition of any kind.

use effects_evaluator_sdk::types::{
    Assessment, AssessmentFlags, AssessmentTable, Coverage, Execution, Mechanism,
};

use crate::history::{Freshness, History, Observation, State, verifying_mechanism};
use crate::locations::{FixedMap, Kind, LocId, SCAN_LIMIT, same};
use crate::tables::Postcondition;

/// One obligation's (or one obligation-less claim's) assessment.
#[derive(Clone, Copy)]
pub struct Assessed {
    /// The location of the obligation's target, if it has one.
    pub target: Option<LocId>,
    /// The result.
    pub assessment: Assessment,
    /// The newest check it looked at, if any.
    pub observation: Option<u64>,
    /// For a fresh check that does not hold: the unknown-scope effect (a
    /// claim index) that may have changed the target since the claim, which
    /// makes it UNVERIFIED rather than CONTRADICTED (VER-2).
    pub changed_since: Option<usize>,
}

/// Assessments of every claim, claim by claim in log order.
pub struct Assessments {
    /// Every assessment: per claim, one per obligation (or one with no target).
    pub all: Vec<Assessed>,
    /// Per claim, where its assessments start in `all`; then the end.
    starts: Vec<usize>,
    /// (claim, target) -> index of the claim's **last** obligation on that
    /// target, for claims with more obligations than a scan should read.
    last_on: FixedMap<(usize, LocId), usize>,
}

/// Does the observed state satisfy the postcondition (CL-2)?
fn holds(postcondition: Postcondition<'_>, observed: &Observation<'_>) -> bool {
    let exists = observed.exists;
    match postcondition {
        Postcondition::ContentSha256(digest) => {
            exists && observed.content_sha256.is_some_and(|seen| same(seen, digest))
        }
        Postcondition::Absent => !exists,
        Postcondition::Exists => exists,
    }
}

/// Can `observed`, of a location of `kind`, check content (`content_sha256`)?
/// Only the kind's verifying mechanism can (decided only when COMPLETE).
fn checks_content(kind: Kind, observed: &Observation<'_>) -> bool {
    verifying_mechanism(kind).is_some_and(|m| same_mechanism(m, observed.mechanism))
}

/// Can `observed`, of a location of `kind`, check existence (`exists`,
/// `absent`)? For a file a stat or a COMPLETE read, and either decides
/// (VER-1); for other kinds what checks content.
fn checks_existence(kind: Kind, observed: &Observation<'_>) -> bool {
    match kind {
        Kind::Filesystem => match observed.mechanism {
            Mechanism::FilesystemStat => true,
            Mechanism::FilesystemRead => matches!(observed.coverage, Coverage::Complete),
            _ => false,
        },
        _ => checks_content(kind, observed),
    }
}

/// VER-1, VER-2.
pub fn assess(history: &History<'_>) -> Assessments {
    // The newest observation per location that can check content, and the
    // newest that can check existence; a sighting of a hard link counts for
    // every name of its object (ID-3).
    let n = history.locations.len();
    let mut newest_content: Vec<Option<&Observation<'_>>> = vec![None; n];
    let mut newest_existence: Vec<Option<&Observation<'_>>> = vec![None; n];
    for (j, observation) in history.observations.iter().enumerate() {
        let kind = history.locations.kind(observation.loc);
        let (content, existence) = (checks_content(kind, observation), checks_existence(kind, observation));
        let mut check = |loc: LocId| {
            if content {
                newest_content[loc as usize] = Some(observation);
            }
            if existence {
                newest_existence[loc as usize] = Some(observation);
            }
        };
        check(observation.loc);
        history.aliases.also(j).iter().for_each(|&loc| check(loc));
    }
    let mut all = Vec::with_capacity(history.claims.len());
    let mut starts = Vec::with_capacity(history.claims.len() + 1);
    for claim in &history.claims {
        starts.push(all.len());
        let without_check = |target: Option<LocId>| Assessed {
            target,
            assessment: match claim.state {
                State::Attempted | State::Running(_) => Assessment::Pending,
                State::Settled(s) if matches!(s.execution, Execution::Failed) => Assessment::Failed,
                State::Settled(_) => Assessment::Unverified,
            },
            observation: None,
            changed_since: None,
        };
        if claim.obligations.is_empty() {
            all.push(without_check(None));
            continue;
        }
        all.extend(claim.obligations.iter().map(|obligation| {
            let target = obligation.target;
            let State::Settled(settled) = claim.state else {
                return without_check(Some(target));
            };
            if matches!(settled.execution, Execution::Failed | Execution::NotExecuted) {
                return without_check(Some(target));
            }
            let kind = history.locations.kind(target);
            let existence = matches!(obligation.postcondition, Postcondition::Absent | Postcondition::Exists);
            let newest = if existence { &newest_existence } else { &newest_content };
            let Some(check) = newest[target as usize].filter(|o| o.position > settled.position) else {
                return without_check(Some(target));
            };
            // An existence observation of a file decides existence whatever
            // its coverage (a stat is PARTIAL by nature); anything else
            // decides only when COMPLETE.
            let complete =
                (existence && kind == Kind::Filesystem) || matches!(check.coverage, Coverage::Complete);
            let decidable = check.freshness == Freshness::Fresh && complete;
            let mut changed_since = None;
            let assessment = match (decidable, holds(obligation.postcondition, check)) {
                (false, _) => Assessment::Unverified,
                (true, false) => {
                    changed_since = history.unknown_change_between(claim.position(), check.position);
                    if changed_since.is_some() { Assessment::Unverified } else { Assessment::Contradicted }
                }
                // VER-2: VERIFIED only for the claim that reported success.
                (true, true) => match settled.execution {
                    Execution::ReportedSuccess => Assessment::Verified,
                    _ => Assessment::StateObserved,
                },
            };
            Assessed { target: Some(target), assessment, observation: Some(check.position), changed_since }
        }));
    }
    starts.push(all.len());
    let mut last_on = FixedMap::default();
    for (claim, bounds) in starts.windows(2).enumerate() {
        if bounds[1] - bounds[0] > SCAN_LIMIT {
            for (index, a) in all[bounds[0]..bounds[1]].iter().enumerate() {
                if let Some(target) = a.target {
                    last_on.insert((claim, target), index);
                }
            }
        }
    }
    Assessments { all, starts, last_on }
}

fn same_mechanism(
    mechanism: effects_evaluator_sdk::types::Mechanism,
    observed: effects_evaluator_sdk::types::Mechanism,
) -> bool {
    use effects_evaluator_sdk::types::Mechanism as M;
    matches!(
        (mechanism, observed),
        (M::FilesystemRead, M::FilesystemRead)
            | (M::OwnedRead, M::OwnedRead)
            | (M::RemoteReadback, M::RemoteReadback)
    )
}

impl Assessments {
    /// The assessment of claim `index`'s last obligation on exactly `loc`, if
    /// it has one.
    pub fn on(&self, index: usize, loc: LocId) -> Option<&Assessed> {
        self.last_obligation(index, loc).map(|i| &self.of(index)[i])
    }

    /// Claim `index`'s assessments.
    pub fn of(&self, index: usize) -> &[Assessed] {
        &self.all[self.starts[index]..self.starts[index + 1]]
    }

    /// The index of claim `index`'s last obligation on exactly `loc`.
    pub fn last_obligation(&self, index: usize, loc: LocId) -> Option<usize> {
        let assessed = self.of(index);
        if assessed.len() > SCAN_LIMIT {
            return self.last_on.get(&(index, loc)).copied();
        }
        assessed.iter().rposition(|a| a.target == Some(loc))
    }

    /// CMP-11: the assessments every decision carries, as the WIT's columns.
    pub fn to_wire(&self, history: &History<'_>) -> AssessmentTable {
        let n = self.all.len();
        let mut table = AssessmentTable {
            claim: Vec::with_capacity(n),
            obligation: Vec::with_capacity(n),
            assessment: Vec::with_capacity(n),
            observation: Vec::with_capacity(n),
            flags: Vec::with_capacity(n),
        };
        for (index, claim) in history.claims.iter().enumerate() {
            let with_obligations = !claim.obligations.is_empty();
            for (i, a) in self.of(index).iter().enumerate() {
                let mut flags = AssessmentFlags::empty();
                if with_obligations {
                    flags |= AssessmentFlags::OBLIGATION;
                }
                if a.observation.is_some() {
                    flags |= AssessmentFlags::OBSERVATION;
                }
                table.claim.push(claim.position());
                table.obligation.push(if with_obligations { i as u32 } else { 0 });
                table.assessment.push(a.assessment);
                table.observation.push(a.observation.unwrap_or(0));
                table.flags.push(flags);
            }
        }
        table
    }
}
