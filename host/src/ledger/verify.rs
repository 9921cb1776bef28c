//! Verifier runs (CMP-5, CMP-7): a command the runtime designates as a check
//! (the test suite, a linter) runs in the root through the process producer,
//! and its pass or fail is recorded as evidence. A passing check after the
//! last change covers it; a later unsettled effect makes it stale; a failing
//! latest check fails the run. The evaluator applies those rules; this only
//! runs the check and records what it said.
//!
//! A check is a command like any other: it may change files (a formatter, a
//! build), so its run is claimed first (unknown scope, `bash` with action
//! `verify`), settled, and only then is the verifier record appended, naming
//! that claim. A check killed with its session leaves an INTERRUPTED claim
//! and no record. Its own run ends before its record, so it never makes its
//! own check stale; a passing check vouches for the state it leaves, changes
//! of its own included (the runtime designated it as the judge).

use std::time::Duration;

use crate::log::{LogError, Position, VerifierRecord};
use crate::tools::{Call, Command};

use crate::producers::process::CancelToken;

use super::envelope::{StepResult, StepStatus, VerifierView};
use super::step::{Running, Waited};
use super::{Dispatch, Ledger, Run};

/// What a verifier run said and where it was recorded.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The record (its run's claim, pass or fail, exit status, timeout).
    pub record: VerifierRecord,
    /// Its log position.
    pub position: Position,
    /// The check's run as a step: its claim, outcome, both output streams,
    /// and the verifier record (`verifier`).
    pub step: StepResult,
}

/// Why a check was not run or not recorded.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// Its run was refused before a claim: it never ran.
    #[error("the check was not run: {0}")]
    Refused(String),
    /// Its claim could not be made durable (LOG-4): it never ran.
    #[error("the check was not run: {0}")]
    Blocked(String),
    /// The log refused or failed a write.
    #[error(transparent)]
    Log(#[from] LogError),
}

impl VerifyError {
    /// The check's step result when it was not run or not recorded: the
    /// status says which.
    pub fn step(&self, run: &Run, step: u64) -> StepResult {
        let status = match self {
            VerifyError::Refused(_) => StepStatus::Refused,
            VerifyError::Blocked(_) => StepStatus::Blocked,
            VerifyError::Log(_) => StepStatus::NotRecorded,
        };
        StepResult::unrun(run, step, "verify", "bash", status, self.to_string())
    }
}

impl Ledger {
    /// Runs `command` with `bash` in the root as a check, under `timeout`,
    /// and records whether it passed: exit 0 within the timeout, nothing
    /// else.
    pub fn verify(&mut self, run: &Run, command: &str, timeout: Duration) -> Result<Verified, VerifyError> {
        let running = self.start_check(run, command, timeout, None)?;
        let waited = running.wait();
        self.finish_check(run, waited)
    }

    /// [`Ledger::verify`] up to its run: the check claimed and started
    /// (cancellable by `cancel`), for [`Running::wait`] to run without the
    /// ledger and [`Ledger::finish_check`] to record.
    pub fn start_check(
        &mut self,
        run: &Run,
        command: &str,
        timeout: Duration,
        cancel: Option<CancelToken>,
    ) -> Result<Running, VerifyError> {
        let check = Call::Bash(Command {
            command: command.to_owned(),
            timeout_ms: Some(timeout.as_millis() as u64),
            background: false,
        });
        let executor = crate::executor::current();
        let dispatched = match self.claim_call(run, check, Some("verify"), "verify", executor, None) {
            Dispatch::Run(dispatched) => dispatched,
            Dispatch::Refused(reason) => return Err(VerifyError::Refused(reason)),
            Dispatch::Blocked(reason) => return Err(VerifyError::Blocked(reason)),
        };
        if dispatched.claim.is_none() {
            return Err(VerifyError::Refused("the process policy admitted a command without a claim".into()));
        }
        // The reference producer runs the very call that was claimed.
        let work = self.start_work(run, &dispatched, cancel);
        let mut step = StepResult::new(run, 0, "verify", "bash");
        step.dispatched(&dispatched);
        Ok(Running::new(step, dispatched, work, Some(command.to_owned())))
    }

    /// Records a check that [`Ledger::start_check`] started and
    /// [`Running::wait`] ran: its outcome, then what it said. A check that
    /// timed out or was cancelled neither passed nor failed (CMP-5).
    pub fn finish_check(&mut self, run: &Run, waited: Waited) -> Result<Verified, VerifyError> {
        let (mut step, dispatched, facts, command) = waited.into_parts();
        let claim = dispatched.claim.expect("a check runs under its claim");
        let recorded = self.record_facts(run, &dispatched, &facts)?;
        step.recorded(&dispatched, &recorded);
        let record = VerifierRecord {
            claim,
            command: command.unwrap_or_default(),
            passed: facts.executed && !facts.timed_out && !facts.cancelled && facts.exit_code == Some(0),
            exit_code: facts.exit_code,
            timed_out: facts.timed_out,
            cancelled: facts.cancelled,
        };
        let log = self.log(&run.lineage, true)?.expect("created on demand");
        let position = log.record_verifier(&run.id, record.clone())?;
        step.verifier = Some(VerifierView { position, passed: record.passed });
        Ok(Verified { record, position, step })
    }
}
