//! Verifier runs (CMP-5, CMP-7): a command the runtime designates as a check
//! (the test suite, a linter) runs in the root through the process producer,
//! and its pass or fail is recorded as evidence. A passing check after the
//! last change covers it; a later unsettled effect makes it stale; a failing
//! latest check fails the run. The evaluator applies those rules; this only
//! runs the check and records what it said.
//!
//! A check is evidence, not an effect, so it is not claimed. A run that has
//! no log yet (nothing claimed: CMP-9, LOG-5) keeps its checks in memory;
//! they are written, in order, when the run's first claim creates the log,
//! and a completion before that sees them as unrecorded evidence.

use std::time::Duration;

use crate::log::{LogError, Position, VerifierRecord};
use crate::producers::Produced;
use crate::producers::process::{self, ProcessRequest, Ran};

use super::{Ledger, Run};

/// What a verifier run said and where it was recorded.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The record (pass or fail, exit status, timeout).
    pub record: VerifierRecord,
    /// Its log position; `None` while the run has no log.
    pub position: Option<Position>,
    /// The command's captured output, or why it could not start.
    pub output: Result<Ran, String>,
}

impl Ledger {
    /// Runs `command` with `bash` in the root as a check, under `timeout`,
    /// and records whether it passed: exit 0 within the timeout, nothing
    /// else.
    pub fn verify(&mut self, run: &Run, command: &str, timeout: Duration) -> Result<Verified, LogError> {
        let Produced { facts, result } =
            process::run(&self.config.root, &ProcessRequest::new("bash", command, timeout));
        let record = VerifierRecord {
            command: command.to_owned(),
            passed: facts.executed && !facts.timed_out && facts.exit_code == Some(0),
            exit_code: facts.exit_code,
            timed_out: facts.timed_out,
        };
        let position = match self.log(&run.lineage, false)? {
            Some(log) => Some(log.record_verifier(&run.id, record.clone())?),
            None => {
                self.unrecorded
                    .entry(run.lineage.clone())
                    .or_default()
                    .push((run.id.clone(), record.clone()));
                None
            }
        };
        Ok(Verified { record, position, output: result })
    }
}
