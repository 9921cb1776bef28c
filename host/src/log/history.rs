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
//! - any other outcome's facts are consistent (OUT-2: a backend that never
//!   ran reports no exit code, timeout or cancellation);
//! - impact NONE goes with NOT_EXECUTED and only with it, so an UNKNOWN
//!   outcome (OUT-1) has impact POSSIBLE;
//! - an observation's source claim, when named, is an earlier claim;
//! - a command's processes (PROC-2) are recorded once, for an earlier claim
//!   with no outcome yet: the identity is durable before the command runs;
//! - a run's claims all record the same sealed root (ID-5): the root of its
//!   first claim that records one. Checked under the writer's lock, so two
//!   processes starting one run beneath different roots cannot both claim;
//! - a decision is over earlier records only: the positions it was taken
//!   through come before its own, so a replay's cut is in the log.

use std::collections::{HashMap, HashSet};

use crate::model::{Execution, FilesystemRoot};

use super::record::{ClaimRecord, Position, Record};

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

/// What a position holds, as far as the rules care: a claim's state and
/// whether its processes are recorded, or anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Claim(ClaimState, bool),
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
    /// An obligation whose target is not in its claim's impact scope (CL-1).
    #[error("claim obligation {obligation} targets scope entry {target}, but the scope has {scope} (CL-1)")]
    ObligationOutsideScope {
        /// Index of the obligation.
        obligation: usize,
        /// Its target index.
        target: u32,
        /// The scope's length.
        scope: usize,
    },
    /// An outcome OUT-1 does not allow.
    #[error("outcome for claim {claim} is impossible: {reason} (OUT-1)")]
    ImpossibleOutcome {
        /// The claim.
        claim: Position,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// An outcome derived from facts that contradict each other (OUT-2): a
    /// backend that never ran, reporting what only a run can.
    #[error("outcome for claim {claim} is derived from {source}")]
    ContradictoryFacts {
        /// The claim.
        claim: Position,
        /// What contradicts what.
        source: crate::model::FactsError,
    },
    /// A second processes record for one claim, or one after its outcome.
    #[error("processes of claim {claim}, which {why} (PROC-2)")]
    ProcessesOutOfPlace {
        /// The claim.
        claim: Position,
        /// What is wrong.
        why: &'static str,
    },
    /// A claim beneath another root than its run's (ID-5).
    #[error(
        "claim of run {run} records the root device {device} inode {inode}, but the run works beneath device \
         {run_device} inode {run_inode} (ID-5)"
    )]
    OtherRoot {
        /// The run.
        run: String,
        /// The claim's root.
        device: u64,
        /// The claim's root.
        inode: u64,
        /// The run's root.
        run_device: u64,
        /// The run's root.
        run_inode: u64,
    },
    /// A decision that names its own position or a later one as its evidence.
    #[error("decision at {position} is taken through position {through}, which is not before it")]
    DecisionAhead {
        /// The decision's position.
        position: Position,
        /// The position it names.
        through: Position,
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
///
/// Admitting is O(1), and so is undoing a tentative batch: between
/// [`History::begin`] and [`History::commit`] every change is journaled, and
/// [`History::rollback`] undoes them, so a writer never copies the history
/// (append cost must not grow with the log).
#[derive(Debug, Clone, Default)]
pub struct History {
    slots: Vec<Slot>,
    /// Each run's root, from its first claim that records one.
    roots: HashMap<String, FilesystemRoot>,
    /// The root of the lineage's first claim that records one, by any run.
    lineage_root: Option<FilesystemRoot>,
    /// Every run with a record here.
    runs: HashSet<String>,
    journal: Option<Journal>,
}

/// Changes since `begin`: the length then, each overwritten slot, the runs
/// whose root was first seen, the runs first seen, and whether the
/// lineage's root was.
#[derive(Debug, Clone, Default)]
struct Journal {
    len: usize,
    overwritten: Vec<(usize, Slot)>,
    rooted: Vec<String>,
    seen: Vec<String>,
    lineage_rooted: bool,
}

/// A [`History`] written down, for a checkpoint (LOG-10): one character per
/// position, and the runs with their roots. A position is `o` (not a
/// claim), or a claim: `a` unsettled, `r` RUNNING, or settled, one letter
/// per [`Execution`] (`n` not executed, `s` reported success, `f` failed,
/// `t` timed out, `c` cancelled, `i` interrupted, `u` unknown); upper case
/// when its processes are recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistorySnapshot {
    slots: String,
    roots: Vec<(String, FilesystemRoot)>,
    lineage_root: Option<FilesystemRoot>,
    runs: Vec<String>,
}

const EXECUTIONS: [(Execution, u8); 8] = [
    (Execution::NotExecuted, b'n'),
    (Execution::ReportedSuccess, b's'),
    (Execution::Failed, b'f'),
    (Execution::TimedOut, b't'),
    (Execution::Cancelled, b'c'),
    (Execution::Running, b'r'),
    (Execution::Interrupted, b'i'),
    (Execution::Unknown, b'u'),
];

fn slot_code(slot: Slot) -> u8 {
    let (state, processes) = match slot {
        Slot::Other => return b'o',
        Slot::Claim(state, processes) => (state, processes),
    };
    let code = match state {
        ClaimState::Attempted => b'a',
        ClaimState::Running => b'r',
        ClaimState::Settled(execution) => EXECUTIONS
            .iter()
            .find(|(e, _)| *e == execution)
            .map(|(_, c)| *c)
            .expect("every execution has a code"),
    };
    if processes { code.to_ascii_uppercase() } else { code }
}

fn slot_of(code: u8) -> Option<Slot> {
    let processes = code.is_ascii_uppercase();
    let state = match code.to_ascii_lowercase() {
        b'o' if !processes => return Some(Slot::Other),
        b'a' => ClaimState::Attempted,
        // A settled RUNNING is not a state (RUNNING is its own): `r` is RUNNING.
        b'r' => ClaimState::Running,
        other => ClaimState::Settled(EXECUTIONS.iter().find(|(_, c)| *c == other)?.0),
    };
    Some(Slot::Claim(state, processes))
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
            Slot::Claim(state, _) => Some(*state),
            Slot::Other => None,
        }
    }

    /// Whether admitting `claim` for `run_id` reads nothing but the claim
    /// itself and this history's root for the run, so that records not yet
    /// admitted cannot change the answer: true when the claim names no root,
    /// or the run already has one (a run's root is set once, by its first
    /// claim that names one). What lets an append of claims pass over
    /// others' records under the lock and admit them after (LOG-2,
    /// `effect_log`). Kept beside [`History::admit`]: a rule added there
    /// that reads other records must be reflected here.
    pub fn admits_claim_alone(&self, run_id: &str, claim: &ClaimRecord) -> bool {
        claim.root.is_none() || self.roots.contains_key(run_id)
    }

    /// Whether the claim at `position` has its processes recorded (PROC-2).
    pub fn has_processes(&self, position: Position) -> bool {
        matches!(self.slots.get(position as usize), Some(Slot::Claim(_, true)))
    }

    /// Claims with no settled outcome (none, or RUNNING), in order: what a
    /// checkpoint keeps the records of (LOG-10).
    pub fn open_claims(&self) -> impl Iterator<Item = Position> + '_ {
        self.slots.iter().enumerate().filter_map(|(position, slot)| {
            matches!(slot, Slot::Claim(ClaimState::Attempted | ClaimState::Running, _))
                .then_some(position as Position)
        })
    }

    /// RUNNING claims, in order (background launches: what the monitor reads).
    pub fn running_claims(&self) -> impl Iterator<Item = Position> + '_ {
        self.slots.iter().enumerate().filter_map(|(position, slot)| {
            matches!(slot, Slot::Claim(ClaimState::Running, _)).then_some(position as Position)
        })
    }

    /// The root `run`'s claims record (ID-5), from its first that records one.
    pub fn run_root(&self, run: &str) -> Option<&FilesystemRoot> {
        self.roots.get(run)
    }

    /// The root of the lineage's first claim that records one.
    pub fn lineage_root(&self) -> Option<&FilesystemRoot> {
        self.lineage_root.as_ref()
    }

    /// Whether `run` has any record here.
    pub fn has_run(&self, run: &str) -> bool {
        self.runs.contains(run)
    }

    /// This history written down, for a checkpoint.
    pub fn snapshot(&self) -> HistorySnapshot {
        let mut roots: Vec<_> = self.roots.iter().map(|(run, root)| (run.clone(), root.clone())).collect();
        roots.sort_by(|a, b| a.0.cmp(&b.0));
        let mut runs: Vec<_> = self.runs.iter().cloned().collect();
        runs.sort();
        HistorySnapshot {
            slots: self.slots.iter().map(|slot| slot_code(*slot) as char).collect(),
            roots,
            lineage_root: self.lineage_root.clone(),
            runs,
        }
    }

    /// The history a snapshot wrote down; `None` when it is not one
    /// [`History::snapshot`] writes (an unknown code, a root of a run with
    /// no records, a root for the lineage without one of a run).
    pub fn restore(snapshot: HistorySnapshot) -> Option<History> {
        let slots = snapshot.slots.bytes().map(slot_of).collect::<Option<Vec<_>>>()?;
        let runs: HashSet<String> = snapshot.runs.into_iter().collect();
        let roots: HashMap<String, FilesystemRoot> = snapshot.roots.into_iter().collect();
        let consistent = roots.keys().all(|run| runs.contains(run))
            && snapshot.lineage_root.as_ref().is_none_or(|root| roots.values().any(|r| r == root))
            && (snapshot.lineage_root.is_some() || roots.is_empty());
        consistent.then_some(History {
            slots,
            roots,
            lineage_root: snapshot.lineage_root,
            runs,
            journal: None,
        })
    }

    /// Claims with no outcome at all, in order (what LOG-7 recovers).
    pub fn unsettled_claims(&self) -> impl Iterator<Item = Position> + '_ {
        self.slots.iter().enumerate().filter_map(|(position, slot)| {
            matches!(slot, Slot::Claim(ClaimState::Attempted, _)).then_some(position as Position)
        })
    }

    /// Checks `record` of `run_id` as the next record, without admitting it.
    pub fn check(&self, run_id: &str, record: &Record) -> Result<(), HistoryError> {
        self.check_root(run_id, record)?;
        self.next_state(record).map(drop)
    }

    /// ID-5: a claim's root is its run's.
    fn check_root(&self, run_id: &str, record: &Record) -> Result<(), HistoryError> {
        let Record::Claim(claim) = record else { return Ok(()) };
        let (Some(root), Some(run_root)) = (&claim.root, self.roots.get(run_id)) else {
            return Ok(());
        };
        let (run_device, run_inode) = (run_root.device, run_root.inode);
        if (root.device, root.inode) == (run_device, run_inode) {
            return Ok(());
        }
        Err(HistoryError::OtherRoot {
            run: run_id.to_owned(),
            device: root.device,
            inode: root.inode,
            run_device,
            run_inode,
        })
    }

    /// Starts journaling changes, for a [`History::rollback`].
    pub fn begin(&mut self) {
        self.journal = Some(Journal { len: self.slots.len(), ..Journal::default() });
    }

    /// Keeps every change since [`History::begin`].
    pub fn commit(&mut self) {
        self.journal = None;
    }

    /// Undoes every change since [`History::begin`].
    pub fn rollback(&mut self) {
        if let Some(journal) = self.journal.take() {
            for (index, slot) in journal.overwritten.into_iter().rev() {
                self.slots[index] = slot;
            }
            self.slots.truncate(journal.len);
            for run in journal.rooted {
                self.roots.remove(&run);
            }
            for run in journal.seen {
                self.runs.remove(&run);
            }
            if journal.lineage_rooted {
                self.lineage_root = None;
            }
        }
    }

    /// Checks and admits `record` of `run_id` as the next record.
    pub fn admit(&mut self, run_id: &str, record: &Record) -> Result<(), HistoryError> {
        self.check_root(run_id, record)?;
        let update = self.next_state(record)?;
        if let Record::Claim(claim) = record
            && let Some(root) = &claim.root
            && !self.roots.contains_key(run_id)
        {
            self.roots.insert(run_id.to_owned(), root.clone());
            if let Some(journal) = &mut self.journal {
                journal.rooted.push(run_id.to_owned());
            }
            if self.lineage_root.is_none() {
                self.lineage_root = Some(root.clone());
                if let Some(journal) = &mut self.journal {
                    journal.lineage_rooted = true;
                }
            }
        }
        if !self.runs.contains(run_id) {
            self.runs.insert(run_id.to_owned());
            if let Some(journal) = &mut self.journal {
                journal.seen.push(run_id.to_owned());
            }
        }
        if let Some((claim, state)) = update {
            let index = claim as usize;
            if let Some(journal) = &mut self.journal {
                journal.overwritten.push((index, self.slots[index]));
            }
            let processes = matches!(record, Record::Processes(_)) || self.has_processes(claim);
            self.slots[index] = Slot::Claim(state, processes);
        }
        self.slots.push(match record {
            Record::Claim(_) => Slot::Claim(ClaimState::Attempted, false),
            _ => Slot::Other,
        });
        Ok(())
    }

    /// The claim state change `record` makes, if it is allowed.
    fn next_state(&self, record: &Record) -> Result<Option<(Position, ClaimState)>, HistoryError> {
        match record {
            Record::Claim(claim) => {
                let scope = claim.impact_scope.len();
                match claim.obligations.iter().enumerate().find(|(_, o)| o.target as usize >= scope) {
                    Some((obligation, o)) => {
                        Err(HistoryError::ObligationOutsideScope { obligation, target: o.target, scope })
                    }
                    None => Ok(None),
                }
            }
            Record::Decision(decision) => {
                let position = self.len();
                let history_through = decision.detail.as_ref().and_then(|d| d.history_through);
                match decision.through.max(history_through) {
                    Some(through) if through >= position => {
                        Err(HistoryError::DecisionAhead { position, through })
                    }
                    _ => Ok(None),
                }
            }
            Record::Processes(processes) => {
                let claim = processes.claim;
                match self.claim_state(claim) {
                    None => Err(HistoryError::NoSuchClaim { claim }),
                    Some(ClaimState::Attempted) if !self.has_processes(claim) => {
                        Ok(Some((claim, ClaimState::Attempted)))
                    }
                    Some(ClaimState::Attempted) => {
                        Err(HistoryError::ProcessesOutOfPlace { claim, why: "already has its processes" })
                    }
                    Some(_) => Err(HistoryError::ProcessesOutOfPlace {
                        claim,
                        why: "already has an outcome: the identity must be durable before the command runs",
                    }),
                }
            }
            // A check reports on its own run, which must have settled.
            Record::Verifier(verifier) => match self.claim_state(verifier.claim) {
                None => Err(HistoryError::NoSuchClaim { claim: verifier.claim }),
                Some(ClaimState::Settled(_)) => Ok(None),
                Some(_) => Err(HistoryError::ImpossibleOutcome {
                    claim: verifier.claim,
                    reason: "a check is recorded only after its own run settled",
                }),
            },
            Record::Observation(observation) => match observation.source_claim {
                Some(claim) if self.claim_state(claim).is_none() => Err(HistoryError::NoSuchClaim { claim }),
                _ => Ok(None),
            },
            Record::Outcome(outcome) => {
                let claim = outcome.claim;
                let state = self.claim_state(claim).ok_or(HistoryError::NoSuchClaim { claim })?;
                let execution = outcome.outcome.execution;
                let not_executed = execution == Execution::NotExecuted;
                if not_executed != (outcome.outcome.impact == crate::model::Impact::None) {
                    let reason = "impact NONE goes with NOT_EXECUTED and only with it";
                    return Err(HistoryError::ImpossibleOutcome { claim, reason });
                }
                if not_executed && state == ClaimState::Running {
                    let reason = "a RUNNING launch reached its backend, so it cannot end NOT_EXECUTED";
                    return Err(HistoryError::ImpossibleOutcome { claim, reason });
                }
                // OUT-2: a writer's facts are consistent. Recovery's are only
                // the cleanup it observed of a claim whose run it never saw.
                if !outcome.recovery
                    && let Err(source) = outcome.facts.check()
                {
                    return Err(HistoryError::ContradictoryFacts { claim, source });
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::record::{OperationRef, OutcomeRecord};
    use crate::model::{CleanupState, Impact, Outcome, ProducerFacts};

    fn claim() -> Record {
        Record::Claim(ClaimRecord {
            action_id: "a".into(),
            operation: OperationRef {
                tool: "t".into(),
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

    fn settle(claim: Position, execution: Execution) -> Record {
        Record::Outcome(OutcomeRecord {
            claim,
            outcome: Outcome {
                execution,
                impact: Impact::Possible,
                cleanup: CleanupState::Unknown,
                replayed: false,
                remote_acknowledged: false,
                detached: false,
            },
            facts: ProducerFacts::default(),
            recovery: false,
        })
    }

    fn processes(claim: Position) -> Record {
        Record::Processes(crate::log::record::ProcessesRecord {
            claim,
            leader: crate::procfs::current(),
            group: 1,
            session: 1,
        })
    }

    fn outcome(claim: Position, execution: Execution, impact: Impact, facts: ProducerFacts) -> Record {
        let Record::Outcome(record) = settle(claim, execution) else { unreachable!() };
        Record::Outcome(OutcomeRecord { outcome: Outcome { impact, ..record.outcome }, facts, ..record })
    }

    #[test]
    fn unknown_is_admitted_with_possible_impact_only() {
        let mut history = History::new();
        history.admit("r", &claim()).unwrap();
        let ran = ProducerFacts { executed: true, ..ProducerFacts::default() };
        let none = outcome(0, Execution::Unknown, Impact::None, ran.clone());
        assert!(matches!(history.check("r", &none), Err(HistoryError::ImpossibleOutcome { claim: 0, .. })));
        history.admit("r", &outcome(0, Execution::Unknown, Impact::Possible, ran)).unwrap();
        assert_eq!(history.claim_state(0), Some(ClaimState::Settled(Execution::Unknown)));
    }

    #[test]
    fn an_outcome_of_contradictory_facts_is_refused_but_recovery_s_cleanup_is_not() {
        let mut history = History::new();
        history.admit("r", &claim()).unwrap();
        let never_ran_but_exited = ProducerFacts { exit_code: Some(3), ..ProducerFacts::default() };
        let refused = outcome(0, Execution::NotExecuted, Impact::None, never_ran_but_exited);
        match history.check("r", &refused) {
            Err(HistoryError::ContradictoryFacts { claim: 0, source }) => {
                assert_eq!(source.facts, ["exit_code"]);
            }
            other => panic!("expected contradictory facts, got {other:?}"),
        }
        // Recovery records the cleanup it observed of a run it never saw
        // (`teardown_dead` without `executed`): that is not a contradiction.
        let Record::Outcome(recovered) = settle(0, Execution::Interrupted) else { unreachable!() };
        let facts = ProducerFacts { teardown_dead: Some(true), ..ProducerFacts::default() };
        history.admit("r", &Record::Outcome(OutcomeRecord { recovery: true, facts, ..recovered })).unwrap();
    }

    #[test]
    fn processes_are_recorded_once_and_only_before_the_outcome() {
        let mut history = History::new();
        history.admit("r", &claim()).unwrap();
        assert!(!history.has_processes(0));
        history.admit("r", &processes(0)).unwrap();
        assert!(history.has_processes(0));
        assert!(matches!(history.check("r", &processes(0)), Err(HistoryError::ProcessesOutOfPlace { .. })));
        assert!(matches!(history.check("r", &processes(1)), Err(HistoryError::NoSuchClaim { claim: 1 })));
        history.admit("r", &settle(0, Execution::ReportedSuccess)).unwrap();
        assert!(history.has_processes(0), "settling keeps the processes mark");
        history.admit("r", &claim()).unwrap();
        history.admit("r", &settle(3, Execution::Failed)).unwrap();
        assert!(matches!(history.check("r", &processes(3)), Err(HistoryError::ProcessesOutOfPlace { .. })));
        history.begin();
        history.admit("r", &claim()).unwrap();
        history.admit("r", &processes(5)).unwrap();
        history.rollback();
        assert_eq!(history.len(), 5);
    }

    fn claim_beneath(inode: u64) -> Record {
        let Record::Claim(claim) = claim() else { unreachable!() };
        let root = crate::model::FilesystemRoot {
            scope: "s".into(),
            owner: "o".into(),
            path: "/r".into(),
            device: 1,
            inode,
        };
        Record::Claim(ClaimRecord { root: Some(root), ..claim })
    }

    #[test]
    fn a_run_keeps_the_root_of_its_first_claim() {
        let mut history = History::new();
        history.admit("x", &claim()).unwrap(); // a claim from before roots were recorded
        history.admit("x", &claim_beneath(7)).unwrap();
        history.admit("x", &claim_beneath(7)).unwrap();
        assert!(matches!(history.check("x", &claim_beneath(8)), Err(HistoryError::OtherRoot { .. })));
        history.admit("y", &claim_beneath(8)).unwrap(); // another run, another root
        // A tentative first claim's root is forgotten with its batch.
        history.begin();
        history.admit("z", &claim_beneath(9)).unwrap();
        history.rollback();
        history.admit("z", &claim_beneath(10)).unwrap();
    }

    #[test]
    fn rollback_undoes_a_tentative_batch_exactly() {
        let mut history = History::new();
        history.admit("r", &claim()).unwrap();
        history.admit("r", &settle(0, Execution::Running)).unwrap();
        history.begin();
        history.admit("r", &claim()).unwrap();
        history.admit("r", &settle(0, Execution::ReportedSuccess)).unwrap();
        assert_eq!(history.claim_state(0), Some(ClaimState::Settled(Execution::ReportedSuccess)));
        history.rollback();
        assert_eq!(history.len(), 2);
        assert_eq!(history.claim_state(0), Some(ClaimState::Running));
        assert_eq!(history.unsettled_claims().count(), 0);
        history.begin();
        history.admit("r", &claim()).unwrap();
        history.commit();
        history.rollback(); // nothing journaled any more
        assert_eq!(history.len(), 3);
    }

    fn decision(through: Option<Position>, history_through: Option<Position>) -> Record {
        Record::Decision(crate::log::record::DecisionRecord {
            through,
            required: Vec::new(),
            answer_sha256: String::new(),
            verdict: crate::model::Verdict::Unverified,
            reasons: Vec::new(),
            disclosures: Vec::new(),
            evaluator: None,
            policy_failure: None,
            detail: Some(crate::log::record::DecisionDetail {
                answer: String::new(),
                history_through,
                reasons: Vec::new(),
                assessments: Vec::new(),
                presented_answer: String::new(),
            }),
        })
    }

    #[test]
    fn a_decision_is_taken_over_earlier_records_only() {
        let mut history = History::new();
        history.admit("r", &decision(None, None)).unwrap();
        history.admit("r", &claim()).unwrap();
        history.admit("r", &decision(Some(1), Some(1))).unwrap();
        assert_eq!(
            history.check("r", &decision(Some(3), Some(3))),
            Err(HistoryError::DecisionAhead { position: 3, through: 3 })
        );
        assert_eq!(
            history.check("r", &decision(Some(1), Some(4))),
            Err(HistoryError::DecisionAhead { position: 3, through: 4 })
        );
        assert!(history.check("r", &decision(Some(1), Some(2))).is_ok());
    }
}
