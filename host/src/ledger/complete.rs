//! Completing a run (SPEC section 7, POL-4): claims of dead executors are
//! recovered first (LOG-7: their surviving processes torn down, PROC-2) and
//! launches whose jobs have ended are settled (the monitor, `jobs.rs`); then
//! the required artifacts (by default every file the run's latest changes
//! left in place and every file its decisions required, CMP-7 as SPEC 14
//! extends it, `required.rs`; plus what the caller names) are resolved and
//! **read completely** (CMP-7b: up to
//! the read cap, identity checked; a file over the cap is observed by a stat
//! too, so it exists, unverified), and those observations are recorded
//! before the evaluator decides, so a change made outside the ledger since
//! the last readback contradicts or stales the evidence instead of passing
//! unseen. The evidence ledger is assembled from the run's durable history,
//! the evaluator decides once, and the decision is recorded with the
//! evaluator's digest and fuel, and with the answer, the full decision and
//! where the history ended, so it can be replayed from the log alone
//! (`completion::replay`).
//!
//! A run with no log stays without one (CMP-9): its observations are taken
//! but not written, and the decision is returned, not recorded. A read-only
//! ledger (`effects decide --dry-run`) decides the same way over a run that
//! has one: it recovers nothing and settles no launch (both write), reads
//! the required artifacts without recording the reads, and records no
//! decision; the claims it left unsettled are returned with the decision.

use crate::completion::{Concurrent, Decided, add_concurrent, assemble, decision_record, evaluator_of};
use crate::identity::IdentityError;
use crate::log::{LogError, ObservationRecord, Position, Record};
use crate::model::{Coverage, EvidenceLedger, Mechanism, ReadbackRequest, ResourceRole};

use super::{Ledger, Run, inflight, readback};

/// Why a run could not be completed (the decision itself never fails: an
/// evaluator failure is BLOCKED `POLICY_FAILURE`).
#[derive(Debug, thiserror::Error)]
pub enum CompleteError {
    /// A required artifact's path is refused (escape, symlink, the store).
    #[error("required artifact {path:?} is refused")]
    Required {
        /// The path as given.
        path: String,
        /// Why.
        source: IdentityError,
    },
    /// A required artifact is a directory: required artifacts are files (CMP-7).
    #[error("required artifact {path:?} is a directory; require the files in it")]
    Directory {
        /// The path as given.
        path: String,
    },
    /// A required artifact resolved, then no longer did when it was read
    /// back (a symlink or a directory swapped in): nothing fresh can be said
    /// of it, and a decision over its last readback would pass the change
    /// unseen (CMP-7b).
    #[error(
        "required artifact {path:?} changed while it was being read back: it no longer resolves to a file \
         beneath the root; nothing was decided, decide again once it holds still"
    )]
    Changed {
        /// The path as given.
        path: String,
    },
    /// The log could not be read or appended to.
    #[error(transparent)]
    Log(#[from] LogError),
}

/// What completing a run decided and wrote.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The decision and the evaluator that took it.
    pub decided: Decided,
    /// The ledger it was taken over.
    pub ledger: EvidenceLedger,
    /// Where the decision was recorded; `None` for a run without a log,
    /// or a read-only ledger.
    pub recorded: Option<Position>,
    /// The decision's own readbacks that were not written (a run without a
    /// log, a read-only ledger): the ledger's last records.
    pub unrecorded: usize,
    /// A read-only ledger's: the lineage's claims with no outcome, which a
    /// decision that writes would first have recovered where their
    /// executors are dead (LOG-7). Empty for a ledger that writes.
    pub unsettled: Vec<Position>,
}

impl Completion {
    /// The first position of the decision's own readbacks that were not
    /// written (`Position::MAX` when all were, or there were none): the
    /// ledger's last [`Completion::unrecorded`] records.
    pub fn unwritten_from(&self) -> Position {
        let records = &self.ledger.records;
        match records.len().checked_sub(self.unrecorded) {
            Some(first) if self.unrecorded > 0 => records[first].position(),
            _ => Position::MAX,
        }
    }
}

impl Ledger {
    /// Decides completion of `run` over its durable history, presenting
    /// `answer`, and requiring what the run requires by default (CMP-7 as
    /// SPEC 14 extends it: [`Ledger::required_by_default`]) and the files
    /// `required` (paths beneath the root) besides. Every surface decides
    /// through this, so one run has one notion of "required".
    pub fn complete(
        &mut self,
        run: &Run,
        required: &[String],
        answer: &str,
    ) -> Result<Completion, CompleteError> {
        let mut all = self.required_by_default(run)?;
        for path in required {
            if !all.contains(path) {
                all.push(path.clone());
            }
        }
        self.complete_exactly(run, &all, answer)
    }

    /// [`Ledger::complete`] requiring `required` alone: the narrower
    /// question an operator asks on purpose (`effects decide --only`).
    pub fn complete_exactly(
        &mut self,
        run: &Run,
        required: &[String],
        answer: &str,
    ) -> Result<Completion, CompleteError> {
        // Claims of executors that died since the log was opened (LOG-7).
        self.recover(&run.lineage)?;
        // Launches whose jobs have ended are settled first (the monitor). If
        // that fails the decision is still taken: an unsettled launch only
        // makes it more cautious (CMP-2, CMP-8). A read-only ledger settles
        // nothing: the claims stay open, which is as cautious.
        if !self.read_only
            && let Err(error) = self.monitor(run)
        {
            tracing::warn!("the monitor could not settle finished launches: {error}");
        }
        let root = &self.config.root;
        let mut resolved = Vec::with_capacity(required.len());
        for path in required {
            let found = root
                .resolve(path, ResourceRole::Target)
                .map_err(|source| CompleteError::Required { path: path.clone(), source })?;
            // A stat that follows no symlink and opens nothing: a FIFO here is
            // read (and refused) by the readback below, never waited on.
            let is_dir = root.dir().symlink_metadata(&found.relative).is_ok_and(|m| m.is_dir());
            if found.relative.is_empty() || is_dir {
                return Err(CompleteError::Directory { path: path.clone() });
            }
            resolved.push(found);
        }
        // CMP-13: other runs' claims in flight before the reads, and again
        // after them (`add_concurrent`).
        let earlier =
            inflight::in_flight(&self.config.data_dir, &run.lineage, self.config.key.as_ref(), false);
        let read = ReadbackRequest {
            binding: 0,
            mechanism: Mechanism::FilesystemRead,
            coverage: Coverage::Complete,
        };
        let stat =
            ReadbackRequest { binding: 0, mechanism: Mechanism::FilesystemStat, coverage: Coverage::Partial };
        let action = format!("{}-complete-{}", run.id, std::process::id());
        let cap = self.config.read_cap;
        let mut observations: Vec<ObservationRecord> = Vec::with_capacity(resolved.len());
        for (path, r) in required.iter().zip(&resolved) {
            let Some(observation) = readback::perform(root, &r.relative, &read, &action, None, cap) else {
                return Err(CompleteError::Changed { path: path.clone() });
            };
            // A read that could not be complete (over the cap, not the object
            // resolved) decides nothing, existence included (CMP-3): a stat
            // says the file is there.
            let partial = observation.coverage == Coverage::Partial;
            observations.push(observation);
            if partial {
                observations.extend(readback::perform(root, &r.relative, &stat, &action, None, cap));
            }
        }
        let required_refs: Vec<_> = resolved.into_iter().map(|r| r.resource).collect();
        // Assembled from the log's own records, borrowed: no copy of the
        // history. Where that history ended is recorded with the decision,
        // so a replay assembles the same ledger from the log alone.
        let read_only = self.read_only;
        let mut unsettled = Vec::new();
        let unrecorded = if read_only { observations.len() } else { 0 };
        let (ledger, history_through) = match self.log(&run.lineage, false)? {
            Some(log) if read_only => {
                log.refresh()?;
                unsettled.extend(log.rules().unsettled_claims());
                let unrecorded: Vec<Record> = observations.into_iter().map(Record::Observation).collect();
                let history = log.history()?;
                (assemble(history, &unrecorded, &required_refs, answer), history.last().map(|f| f.position))
            }
            Some(log) => {
                // One batch, one fsync, however many artifacts are required.
                if !observations.is_empty() {
                    log.record_observations(&run.id, observations)?;
                }
                let history = log.history()?;
                (assemble(history, &[], &required_refs, answer), history.last().map(|f| f.position))
            }
            None => {
                let count = observations.len();
                let unrecorded: Vec<Record> = observations.into_iter().map(Record::Observation).collect();
                let mut ledger = assemble(&[], &unrecorded, &required_refs, answer);
                self.add_concurrent(run, earlier, &mut ledger);
                let decided = evaluator_of(self.config.policies.evaluator()).decide(&ledger);
                return Ok(Completion { decided, ledger, recorded: None, unrecorded: count, unsettled });
            }
        };
        let mut ledger = ledger;
        self.add_concurrent(run, earlier, &mut ledger);
        let decided = evaluator_of(self.config.policies.evaluator()).decide(&ledger);
        let recorded = match self.log(&run.lineage, false)? {
            Some(log) if !read_only => {
                Some(log.record_decision(&run.id, decision_record(&ledger, history_through, &decided))?)
            }
            _ => None,
        };
        Ok(Completion { decided, ledger, recorded, unrecorded, unsettled })
    }
}

impl Ledger {
    /// CMP-13: the claims of other runs of this data dir in flight now
    /// ([`inflight::in_flight`]), together with `earlier` (those in flight
    /// before the required files were read: one that settled in between
    /// may have changed a file after its read), that may touch this run's
    /// root, as the ledger's `concurrent` claims. A claim of this root
    /// counts; so does one of unknown scope of another root unless it ran
    /// confined (ID-6: Landlock kept it beneath its own root), and a log that
    /// could not be read (unknown scope). Another root nested in this one, or
    /// around it, is not matched path by path: its claims of an exact scope
    /// are not seen (docs/limitations.md).
    fn add_concurrent(&self, run: &Run, earlier: Vec<inflight::InFlight>, ledger: &mut EvidenceLedger) {
        let root = self.config.root.root();
        let key = self.config.key.as_ref();
        let now = inflight::in_flight(&self.config.data_dir, &run.lineage, key, !self.read_only);
        let mut seen = std::collections::BTreeSet::new();
        let mut claims = Vec::new();
        for other in earlier.into_iter().chain(now) {
            let (run_id, position) = other.key();
            if !seen.insert((run_id.to_owned(), position)) {
                continue;
            }
            claims.push(match other {
                inflight::InFlight::Claim { run_id, position, claim } => {
                    let same_root =
                        claim.root.as_ref().is_some_and(|r| (r.device, r.inode) == (root.device, root.inode));
                    // Another root's: only an unconfined one of unknown scope may reach ours.
                    let may_reach = claim.impact_scope.is_empty() && !claim.confined;
                    if !same_root && !may_reach {
                        continue;
                    }
                    Concurrent {
                        run_id,
                        position,
                        action_id: claim.action_id,
                        tool: claim.operation.tool,
                        scope: claim.impact_scope,
                        external: claim.external,
                    }
                }
                inflight::InFlight::Unreadable { lineage, why } => Concurrent {
                    action_id: lineage.clone(),
                    run_id: lineage,
                    position: 0,
                    tool: format!("a claim in a log this run cannot read ({why})"),
                    scope: Vec::new(),
                    external: false,
                },
            });
        }
        add_concurrent(ledger, claims);
    }

    /// CMP-12: why a decision recorded at `at` (`None`: not recorded, the
    /// run had no log then) is no longer current: the first evidence record
    /// after it in the run's lineage, by any process. `Ok(None)` while it is
    /// current; an error when the log cannot be read, so currency cannot be
    /// shown.
    pub fn stale_since(&mut self, run: &Run, at: Option<Position>) -> Result<Option<Position>, LogError> {
        // The log's own records, not a copy of them: a session asks at its
        // end. Past a checkpoint, the whole log only when the decision is
        // older than what this handle holds.
        let Some(log) = self.log(&run.lineage, false)? else { return Ok(None) };
        log.refresh()?;
        let records = match at {
            Some(at) if at + 1 >= log.base() => log.records(),
            _ => log.history()?,
        };
        Ok(records
            .iter()
            .filter(|framed| at.is_none_or(|at| framed.position > at))
            .find(|framed| !matches!(framed.record, Record::Decision(_)))
            .map(|framed| framed.position))
    }
}

impl Ledger {
    /// The prose gate for a message shown mid-run (an `ask_user` question, a
    /// progress report): the evaluator decides over `run`'s durable history
    /// with `text` as the answer, requiring no artifact, and **nothing is
    /// written**, neither readbacks nor the decision. The presented answer
    /// is `text` with the disclosures it must carry.
    pub fn annotate(&mut self, run: &Run, text: &str) -> Result<Decided, LogError> {
        let ledger = match self.log(&run.lineage, false)? {
            Some(log) => assemble(log.history()?, &[], &[], text),
            None => assemble(&[], &[], &[], text),
        };
        Ok(evaluator_of(self.config.policies.evaluator()).decide(&ledger))
    }

    /// The policy manifest this ledger classifies and decides with.
    pub fn manifest(&self) -> &crate::policy::Manifest {
        self.config.policies.manifest()
    }
}
