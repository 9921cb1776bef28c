//! What a run requires when nobody narrows it (CMP-7 as extended in SPEC
//! 14): every file its latest changes left in place, and every path a
//! decision of the run already required.
//!
//! One notion of "required" for a run, whichever surface asks: the hook at
//! stop and `effects decide --run` with no `--only` decide the same set, so
//! a decide from outside can never say COMPLETED over less than the run's
//! own surface decided (a file the agent wrote, then a command overwrote).
//!
//! - A change's files are the targets of its claim's obligations: what a
//!   write, an edit or a patch promised to leave. Per file the latest such
//!   claim counts: one that leaves it absent (a delete, a move away) takes
//!   it out of the set; a claim whose call never ran (NOT_EXECUTED) changed
//!   nothing and counts for nothing (INV-1).
//! - A decision records the files it required (`DecisionRecord::required`):
//!   those beyond what the run's changes had left in place at that point
//!   were named by a surface or an operator, and stay required. The rest
//!   was this default set, so a later delete by the run takes such a file
//!   out (a hook's stop at every turn must not make a scratch file the
//!   agent then deleted required for good). A file a surface named that
//!   the run had also written is judged as written: a hook names its
//!   `--require` files again at every stop.
//!
//! The whole lineage counts: a run is decided over its lineage.

use std::collections::{HashMap, HashSet};

use crate::log::{Framed, LogError, Position, Record};
use crate::model::{Execution, Location, Postcondition};

use super::{Ledger, Run};

/// The paths (beneath the root) `history` requires by default, in the
/// order they first appear.
pub fn required_by_default(history: &[Framed]) -> Vec<String> {
    let never_ran: HashSet<Position> = history
        .iter()
        .filter_map(|framed| match &framed.record {
            Record::Outcome(o) if o.outcome.execution == Execution::NotExecuted => Some(o.claim),
            _ => None,
        })
        .collect();
    // Per path: whether its latest change leaves it in place; and the paths
    // a decision required beyond what the run's changes left in place at
    // that point (what a surface or operator named: the rest of what it
    // required was this same default set, which a later delete undoes).
    let mut order: Vec<String> = Vec::new();
    let mut in_place: HashMap<String, bool> = HashMap::new();
    let mut named: HashSet<String> = HashSet::new();
    for framed in history {
        match &framed.record {
            Record::Claim(claim) if !never_ran.contains(&framed.position) => {
                for obligation in &claim.obligations {
                    let Some(resource) = claim.impact_scope.get(obligation.target as usize) else { continue };
                    if let Location::Filesystem(file) = resource.location() {
                        note(&mut order, &file.path);
                        in_place.insert(file.path.clone(), obligation.postcondition != Postcondition::Absent);
                    }
                }
            }
            Record::Decision(decision) => {
                for resource in &decision.required {
                    if let Location::Filesystem(file) = resource.location()
                        && in_place.get(&file.path) != Some(&true)
                    {
                        note(&mut order, &file.path);
                        named.insert(file.path.clone());
                    }
                }
            }
            _ => {}
        }
    }
    order.retain(|path| named.contains(path) || in_place.get(path).copied().unwrap_or(false));
    order
}

/// Adds `path` to `order` unless it is there already.
fn note(order: &mut Vec<String>, path: &str) {
    if !order.iter().any(|p| p == path) {
        order.push(path.to_owned());
    }
}

impl Ledger {
    /// [`required_by_default`] over `run`'s lineage as it is now (empty for
    /// a run with no log).
    pub fn required_by_default(&mut self, run: &Run) -> Result<Vec<String>, LogError> {
        let Some(log) = self.log(&run.lineage, false)? else { return Ok(Vec::new()) };
        // `history` merges what other writers appended too.
        Ok(required_by_default(log.history()?))
    }
}
