//! The completion decision (CMP-1..9, CMP-11): reasons with stable codes, the
//! positions each relied on, and the server-authored disclosure each carries.
//! Worst verdict wins: FAILED > BLOCKED > UNVERIFIED > COMPLETED.
//!
//! Everything is indexed per location once ([`Index`]), so each rule costs the
//! depth of a location's ancestor chain per artifact or effect: no rule compares
//! every effect with every other. A claim is indexed at every location it may
//! touch ([`History::each_touched`]: its targets and what they reach through hard
//! links, ID-3), so overlap here is the same closure the freshness passes use.
//!
//! Time is measured by an effect's **end**, where its window closes (INV-2,
//! [`window_end`](crate::history::Claim::window_end)): its settled outcome's
//! position, or "never" while it is attempted or RUNNING, and for an effect
//! that ran processes, never unless it settled with cleanup CLEAN (survivors
//! may still be changing things). An effect that was in flight when a write or
//! a verifier happened may have changed things after it, so "after X" below
//! means "ends after X", not "was claimed after X".

use effects_evaluator_sdk::types::{
    Assessment, CheckResult, Coverage, Execution, Mechanism, Reason, ReasonCode, Verdict,
};

use crate::assess::{Assessed, Assessments};
use crate::history::{Freshness, History, Observation, State};
use crate::locations::{Kind, LocId, same};
use crate::tables::Postcondition;

/// The latest of something per location: for the location itself, and for
/// it or anything beneath it (so ancestor-or-self overlap is a walk up one
/// chain).
struct PerLocation {
    own: Vec<Option<(u64, usize)>>,
    below: Vec<Option<(u64, usize)>>,
}

/// Keeps the later of `slot` and `at`.
fn keep_latest(slot: &mut Option<(u64, usize)>, at: (u64, usize)) {
    *slot = Some(slot.map_or(at, |s| s.max(at)));
}

impl PerLocation {
    fn new(n: usize) -> Self {
        Self { own: vec![None; n], below: vec![None; n] }
    }

    fn note(&mut self, history: &History<'_>, target: LocId, at: (u64, usize)) {
        keep_latest(&mut self.own[target as usize], at);
        for a in history.locations.ancestors_or_self(target) {
            keep_latest(&mut self.below[a as usize], at);
        }
    }

    /// The latest entry overlapping `loc` (ancestor-or-self either way).
    fn latest(&self, history: &History<'_>, loc: LocId) -> Option<(u64, usize)> {
        let above = history.locations.ancestors_or_self(loc).filter_map(|a| self.own[a as usize]);
        self.below[loc as usize].into_iter().chain(above).max()
    }
}

/// Per location, the claims (by index, in log order, each once) with a
/// target exactly there, or on another name of the object there (a hard
/// link, ID-3), no no-ops: one table sliced per location, so a ledger of
/// many changed files allocates once, not once per file.
pub struct Changes {
    /// Per location, where its claims start in `claims`; then the end.
    starts: Vec<usize>,
    claims: Vec<usize>,
    /// Locations in the order of their first change.
    pub changed: Vec<LocId>,
}

/// Calls `f(target, claim)` for each exact target of each claim that is not a
/// no-op, and each other name of a target's object, once per claim even when
/// the claim lists a target twice.
fn each_change(history: &History<'_>, mut f: impl FnMut(LocId, usize)) {
    let mut last = vec![usize::MAX; history.locations.len()];
    for (i, claim) in history.claims.iter().enumerate().filter(|(_, c)| !c.no_op()) {
        let aliases = history.reach(i).iter().filter(|r| r.alias_of.is_some()).map(|r| r.loc);
        for &t in claim.targets.unwrap_or_default() {
            if std::mem::replace(&mut last[t as usize], i) != i {
                f(t, i);
            }
        }
        for t in aliases {
            if std::mem::replace(&mut last[t as usize], i) != i {
                f(t, i);
            }
        }
    }
}

impl Changes {
    fn new(history: &History<'_>) -> Self {
        let n = history.locations.len();
        let mut starts = vec![0usize; n + 1];
        each_change(history, |t, _| starts[t as usize + 1] += 1);
        for loc in 0..n {
            starts[loc + 1] += starts[loc];
        }
        let mut next = starts.clone();
        let mut claims = vec![0; starts[n]];
        let mut changed = Vec::new();
        each_change(history, |t, i| {
            let at = &mut next[t as usize];
            if *at == starts[t as usize] {
                changed.push(t);
            }
            claims[*at] = i;
            *at += 1;
        });
        Changes { starts, claims, changed }
    }

    /// The claims changing exactly `loc`.
    pub fn of(&self, loc: LocId) -> &[usize] {
        &self.claims[self.starts[loc as usize]..self.starts[loc as usize + 1]]
    }
}

/// Per-location facts every rule reads.
pub struct Index<'h, 'a> {
    /// The history.
    pub history: &'h History<'a>,
    /// The assessments.
    pub assessments: &'h Assessments,
    /// Per location: claims (by index) with a target exactly there, or on
    /// another name of its object, no no-ops.
    pub changes: Changes,
    /// Unresolved exact claims (CMP-2) by (end, claim), per location; and the
    /// latest unresolved unknown-scope claim, and the latest of any scope.
    unresolved: PerLocation,
    unresolved_unknown: Option<(u64, usize)>,
    unresolved_any: Option<(u64, usize)>,
    /// Every exact claim that is not a no-op, by (end, claim) and by (start,
    /// claim).
    touched_end: PerLocation,
    touched_start: PerLocation,
    /// Per location, the start of the latest claim on exactly it that
    /// reported success (CMP-2's last successful mutation is the latest of
    /// these on a file or its directories; nothing lies beneath a file).
    succeeded: Vec<Option<u64>>,
    /// The latest unknown-scope claim by end, leaving out the latest check's
    /// own run once its window closed (CMP-5: a check covers its own run);
    /// and the latest by start, the check's run included (it may have
    /// changed files: a formatter supersedes a write).
    unknown_end: Option<(u64, usize)>,
    unknown_start: Option<(u64, usize)>,
    /// Per location: the position of the latest observation that saw a
    /// different incarnation than the one before it (a replacement, INV-1).
    replaced: Vec<Option<u64>>,
    /// Per location: the newest existence observation of a file (VER-1: a
    /// stat or a COMPLETE read; never a receipt, a job, process or browser
    /// observation, VER-3, nor a PARTIAL read, CMP-3).
    newest_seen: Vec<Option<usize>>,
}

/// A reason under construction: what fired, what would clear it (`remedy`),
/// the evidence it relied on and the sentence the answer must carry.
fn reason(
    code: ReasonCode,
    verdict: Verdict,
    message: String,
    remedy: String,
    evidence: Vec<u64>,
    disclosure: Option<String>,
) -> Reason {
    Reason { code, verdict, message, remedy, evidence, disclosure }
}

/// CMP-1 / CMP-4: a fresh complete read contradicts the latest change of `name`.
fn contradicted(code: ReasonCode, name: &str, tool: &str, evidence: Vec<u64>) -> Reason {
    reason(
        code,
        Verdict::Failed,
        format!("{name}: a fresh complete read contradicts its latest change ({tool})"),
        format!("make {name} hold what was intended, then read it back completely"),
        evidence,
        Some(format!("{name} does not hold what its latest change wrote: a fresh read found otherwise.")),
    )
}

/// Rank for "worst wins".
pub fn severity(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Completed => 0,
        Verdict::Unverified => 1,
        Verdict::Blocked => 2,
        Verdict::Failed => 3,
    }
}

/// The worst verdict of `reasons`, COMPLETED when there are none.
pub fn worst(reasons: &[Reason]) -> Verdict {
    reasons.iter().map(|r| r.verdict).max_by_key(|&v| severity(v)).unwrap_or(Verdict::Completed)
}

fn execution_name(execution: Execution) -> &'static str {
    match execution {
        Execution::NotExecuted => "not executed",
        Execution::ReportedSuccess => "reported success",
        Execution::Failed => "failed",
        Execution::TimedOut => "timed out",
        Execution::Cancelled => "cancelled",
        Execution::Running => "running",
        Execution::Interrupted => "interrupted",
        Execution::Unknown => "has an unknown outcome",
    }
}

/// A claim's end: where its window closes
/// ([`window_end`](crate::history::Claim::window_end)), or never (`u64::MAX`).
fn end(history: &History<'_>, claim: usize) -> u64 {
    history.claims[claim].window_end().unwrap_or(u64::MAX)
}

impl<'h, 'a> Index<'h, 'a> {
    /// Indexes `history` once.
    pub fn new(history: &'h History<'a>, assessments: &'h Assessments) -> Self {
        let n = history.locations.len();
        let mut index = Index {
            history,
            assessments,
            changes: Changes::new(history),
            unresolved: PerLocation::new(n),
            unresolved_unknown: None,
            unresolved_any: None,
            touched_end: PerLocation::new(n),
            touched_start: PerLocation::new(n),
            succeeded: vec![None; n],
            unknown_end: None,
            unknown_start: None,
            replaced: vec![None; n],
            newest_seen: vec![None; n],
        };
        let own_check = history.latest_check_own_run();
        for (i, claim) in history.claims.iter().enumerate() {
            if claim.no_op() {
                continue;
            }
            let (start, end) = ((claim.position(), i), (end(history, i), i));
            let unresolved = claim.unresolved() && !index.resolved_by_observation(i);
            if unresolved {
                keep_latest(&mut index.unresolved_any, end);
            }
            if claim.targets.is_none() {
                if own_check != Some(i) {
                    keep_latest(&mut index.unknown_end, end);
                }
                keep_latest(&mut index.unknown_start, start);
                if unresolved {
                    keep_latest(&mut index.unresolved_unknown, end);
                }
                continue;
            }
            let succeeded =
                matches!(claim.state.settled(), Some(s) if matches!(s.execution, Execution::ReportedSuccess));
            history.each_touched(i, |t| {
                index.touched_end.note(history, t, end);
                index.touched_start.note(history, t, start);
                if unresolved {
                    index.unresolved.note(history, t, end);
                }
                if succeeded {
                    index.succeeded[t as usize] = Some(claim.position());
                }
            });
        }
        let mut seen: Vec<Option<&str>> = vec![None; n];
        for (i, observation) in history.observations.iter().enumerate() {
            let loc = observation.loc as usize;
            if seen[loc].is_some_and(|before| !same(before, observation.incarnation)) {
                index.replaced[loc] = Some(observation.position);
            }
            seen[loc] = Some(observation.incarnation);
            let existence = match observation.mechanism {
                Mechanism::FilesystemStat => true,
                Mechanism::FilesystemRead => matches!(observation.coverage, Coverage::Complete),
                _ => false,
            };
            if existence && history.locations.kind(observation.loc) == Kind::Filesystem {
                index.newest_seen[loc] = Some(i);
            }
        }
        index
    }

    /// An exact-scope claim that did not finish cleanly is resolved when a
    /// fresh complete check shows every target in its intended state
    /// (STATE_OBSERVED: crash-honest settlement, SPEC section 9).
    fn resolved_by_observation(&self, claim: usize) -> bool {
        let c = &self.history.claims[claim];
        let Some(targets) = c.targets else { return false };
        !targets.is_empty()
            && targets.iter().all(|&t| {
                self.assessments
                    .on(claim, t)
                    .is_some_and(|a| matches!(a.assessment, Assessment::StateObserved))
            })
    }

    /// The unresolved claim that may touch `loc` and ends last (CMP-2).
    fn unresolved_touching(&self, loc: LocId) -> Option<(u64, usize)> {
        self.unresolved.latest(self.history, loc).into_iter().chain(self.unresolved_unknown).max()
    }

    /// The latest end of any claim that may touch `loc`.
    fn touched_until(&self, loc: LocId) -> Option<u64> {
        let latest = self.touched_end.latest(self.history, loc).into_iter().chain(self.unknown_end).max();
        latest.map(|(end, _)| end)
    }

    /// The latest claim (by start) that may touch `loc`.
    fn last_touch(&self, loc: LocId) -> Option<usize> {
        let latest = self.touched_start.latest(self.history, loc).into_iter().chain(self.unknown_start).max();
        latest.map(|(_, claim)| claim)
    }

    /// The newest existence observation of the file `loc` (VER-1, VER-3), if any.
    fn newest_sighting(&self, loc: LocId) -> Option<&Observation<'a>> {
        self.newest_seen[loc as usize].map(|i| &self.history.observations[i])
    }

    /// Claim `claim`'s assessment of its last obligation on `loc`, or, when
    /// `loc` is another name of the object a target of it names (a hard
    /// link), of its last obligation on that target: a hard link's
    /// postcondition stands for the object it names (VER-2), except that a
    /// name is `absent` alone (removing one name leaves the others).
    fn obligation_on(&self, claim: usize, loc: LocId) -> Option<&Assessed> {
        if let Some(assessed) = self.assessments.on(claim, loc) {
            return Some(assessed);
        }
        let name = self.history.reach(claim).iter().find(|r| r.loc == loc)?.alias_of?;
        let index = self.assessments.last_obligation(claim, name)?;
        let postcondition = self.history.claims[claim].obligations[index].postcondition;
        (!matches!(postcondition, Postcondition::Absent)).then(|| &self.assessments.of(claim)[index])
    }

    /// The claim's position plus its outcome's, when it has one.
    fn claim_evidence(&self, claim: usize) -> Vec<u64> {
        let c = &self.history.claims[claim];
        let mut evidence = vec![c.position()];
        match c.state {
            State::Attempted => {}
            State::Running(p) => evidence.push(p),
            State::Settled(s) => evidence.push(s.position),
        }
        evidence
    }

    fn tool(&self, claim: usize) -> &str {
        self.history.claims[claim].tool
    }

    /// A passing latest check that started after `after` with no claim that
    /// may touch `loc` ending since it started (its own run aside, CMP-5) and
    /// no replacement of `loc` seen since (CMP-7's "covered by a fresh passing
    /// verifier run after it").
    fn verifier_covers(&self, loc: LocId, after: u64) -> Option<u64> {
        let latest = self.history.verifiers.last()?;
        let start = self.history.check_start(latest);
        let untouched = self.touched_until(loc).is_none_or(|end| end < start);
        let unreplaced = self.replaced[loc as usize].is_none_or(|at| at < start);
        (latest.passed() && after < start && untouched && unreplaced).then_some(latest.position)
    }

    /// Every reason the evidence gives, in the order a decision lists them:
    /// each required artifact's (CMP-1, CMP-2, CMP-7, CMP-13), then the
    /// run's effects (CMP-4), checks (CMP-5), external, owned and unbound
    /// effects (CMP-6), unconfined commands (ID-6), settled unknown exit
    /// statuses (CMP-2) and what still runs (CMP-8). The prose gate (CMP-10)
    /// comes after, over these. Every evaluator built on these modules (the
    /// shipped one, a fixture, `effects policy new`'s) starts from this list,
    /// so a rule added here reaches them all.
    pub fn reasons(&self) -> Vec<Reason> {
        let mut reasons = Vec::new();
        for &loc in &self.history.required {
            self.artifact(loc, &mut reasons);
        }
        self.contradicted_effects(&mut reasons);
        self.verifiers(&mut reasons);
        self.external_effects(&mut reasons);
        self.owned_effects(&mut reasons);
        self.unbound_effects(&mut reasons);
        self.unconfined_commands(&mut reasons);
        self.unknown_exit_statuses(&mut reasons);
        self.running(&mut reasons);
        reasons
    }

    /// CMP-1, CMP-2, CMP-7 for one artifact: the reasons it gives (none when
    /// its latest change is verified or covered, or it exists untouched).
    ///
    /// Its latest change is the latest effect whose scope overlaps it (ID-3:
    /// a claim on it, on another name of its object, or on a directory above
    /// it). What verifies it is its **last explicit postcondition**: the last
    /// obligation on it (or on another name of its object) of a claim that
    /// changed it, checked by a fresh complete read. Freshness puts that read
    /// after every later change, so it verifies the latest change too.
    pub fn artifact(&self, loc: LocId, reasons: &mut Vec<Reason>) {
        let name = self.history.locations.name(loc);
        // CMP-2: after its last successful mutation (a successful claim on
        // it, on another name of its object, or on a directory above it:
        // revision 2), something unresolved may have touched it. An effect
        // whose window is still open ends after any of them.
        let last_success =
            self.history.locations.ancestors_or_self(loc).filter_map(|a| self.succeeded[a as usize]).max();
        let unsettled =
            self.unresolved_touching(loc).filter(|&(end, _)| last_success.is_none_or(|p| end > p));
        if let Some((_, i)) = unsettled {
            let position = self.history.claims[i].position();
            reasons.push(reason(
                ReasonCode::UnsettledArtifact,
                Verdict::Blocked,
                format!("{name}: {} at position {position} may have changed it without settled evidence", self.tool(i)),
                self.unsettled_remedy(i, name),
                self.claim_evidence(i),
                Some(format!(
                    "A later operation ({}, position {position}) may have changed {name} without settled evidence.",
                    self.tool(i)
                )),
            ));
        }
        // While another run may be changing it, no read of it decides it:
        // BLOCKED, never FAILED (CMP-2 made precise, CMP-13).
        if self.concurrent_runs(loc, name, reasons) {
            return;
        }
        let Some((_, latest)) = self.touched_start.latest(self.history, loc) else {
            self.never_changed(loc, reasons);
            return;
        };
        let claim = &self.history.claims[latest];
        // A read verifies only against a postcondition some change of it
        // stated; without one, only a check (or a claimed write) can.
        let postcondition = self.changes.of(loc).iter().any(|&i| self.obligation_on(i, loc).is_some());
        let remedy = if postcondition {
            format!("read {name} back completely, or run the check again after position {}", claim.position())
        } else {
            format!(
                "run the check again after position {} (a read cannot verify it: no change stated what {name} must hold), or write {name} with a claimed change and read it back",
                claim.position()
            )
        };
        let unverified = |reasons: &mut Vec<Reason>, evidence: Vec<u64>| {
            reasons.push(reason(
                ReasonCode::UnverifiedArtifact,
                Verdict::Unverified,
                format!("{name}: its latest change ({}) has no fresh complete readback", claim.tool),
                remedy.clone(),
                evidence,
                Some(format!(
                    "{name} was changed, but the change was not verified by a fresh complete read."
                )),
            ))
        };
        let State::Settled(settled) = claim.state else {
            // Attempted or RUNNING is unresolved: CMP-2 has said so.
            if unsettled.is_none() {
                unverified(reasons, self.claim_evidence(latest));
            }
            return;
        };
        // CMP-7: absent when last observed is missing, also when the run
        // deleted it (revision 2: a required artifact is a file that must
        // exist, whatever an `absent` obligation said).
        if let Some(o) = self.newest_sighting(loc).filter(|o| o.freshness == Freshness::Fresh && !o.exists) {
            reasons.push(reason(
                ReasonCode::MissingArtifact,
                Verdict::Failed,
                format!(
                    "{name}: changed by {} at position {}, but a fresh observation finds nothing there",
                    claim.tool,
                    claim.position()
                ),
                format!("produce {name} again, then read it back completely"),
                vec![claim.position(), o.position],
                Some(format!("{name} was required but no longer exists.")),
            ));
            return;
        }
        let explicit =
            self.changes.of(loc).iter().rev().find_map(|&i| self.obligation_on(i, loc).map(|a| (i, a)));
        let assessment = explicit.map(|(_, a)| a.assessment);
        let mut evidence = self.claim_evidence(latest);
        if let Some((i, assessed)) = explicit {
            evidence.extend((i != latest).then(|| self.history.claims[i].position()));
            evidence.extend(assessed.observation);
        }
        // A later claim that may touch it (a formatter, a parent directory)
        // supersedes the change: its contradiction is history (CMP-4), and
        // the change is at best unverified.
        let superseded = explicit.is_none_or(|(i, _)| self.last_touch(loc) != Some(i));
        if let Some((i, _)) =
            explicit.filter(|_| matches!(assessment, Some(Assessment::Contradicted)) && !superseded)
        {
            reasons.push(contradicted(ReasonCode::ContradictedArtifact, name, self.tool(i), evidence));
            return;
        }
        // The state matches the last explicit postcondition, but the claim
        // that asked for it did not report success (VER-2).
        let state_observed = |reasons: &mut Vec<Reason>, evidence: Vec<u64>| {
            let Some((i, _)) = explicit else { return };
            let execution =
                self.history.claims[i].state.settled().map_or(Execution::Unknown, |s| s.execution);
            reasons.push(reason(
                ReasonCode::UnverifiedArtifact,
                Verdict::Unverified,
                format!("{name}: the state matches but its latest change {}", execution_name(execution)),
                format!("change {name} again with an operation that reports success, then read it back"),
                evidence,
                Some(format!(
                    "{name} holds the intended content, but the operation that wrote it {}, so it is not verified that it did.",
                    execution_name(execution)
                )),
            ));
        };
        // A failure that changed nothing, on the file itself: the latest
        // attempt to produce it failed. On a directory above it, it changed
        // nothing of the file, which is judged by what was there before.
        // A later unknown-scope change (a command, a check's own run) makes
        // the failure history, as it makes a contradiction history.
        let clean_failure = matches!(settled.execution, Execution::Failed) && !settled.mutation_attempted;
        let on_file = self.changes.of(loc).last() == Some(&latest);
        let here = on_file && self.last_touch(loc) == Some(latest);
        if clean_failure && here {
            reasons.push(reason(
                ReasonCode::FailedEffect,
                Verdict::Failed,
                format!("{name}: its latest change ({}) failed", claim.tool),
                format!("change {name} again successfully, then read it back completely"),
                evidence,
                Some(format!("The latest change to {name} ({}) failed.", claim.tool)),
            ));
        } else if clean_failure && on_file {
            // Its failure is history, but never forgotten: what came after
            // (a command, a check's own run) stated nothing of it, and no
            // check speaks for a write that failed.
            let later = self.last_touch(loc).filter(|&u| u != latest).unwrap_or(latest);
            let position = self.history.claims[later].position();
            reasons.push(reason(
                ReasonCode::UnverifiedArtifact,
                Verdict::Unverified,
                format!(
                    "{name}: its last claimed change ({}) failed, and {} at position {position} may have changed it since",
                    claim.tool,
                    self.tool(later)
                ),
                format!(
                    "write {name} again with a claimed change that reports success after position {position}, then read it back completely"
                ),
                evidence,
                Some(format!(
                    "The last claimed change to {name} ({}) failed, and what it holds now was not verified.",
                    claim.tool
                )),
            ));
        } else if matches!(settled.execution, Execution::ReportedSuccess) || clean_failure {
            if matches!(assessment, Some(Assessment::Verified))
                || self.verifier_covers(loc, end(self.history, latest)).is_some()
            {
                return;
            }
            if matches!(assessment, Some(Assessment::StateObserved)) {
                return state_observed(reasons, evidence);
            }
            let Some((i, u)) = explicit.and_then(|(i, a)| a.changed_since.map(|u| (i, u))) else {
                return unverified(reasons, evidence);
            };
            // VER-2: a fresh read that does not match after a later
            // unknown-scope change: the claimed change is history.
            let position = self.history.claims[u].position();
            evidence.extend(self.claim_evidence(u));
            reasons.push(reason(
                ReasonCode::UnverifiedArtifact,
                Verdict::Unverified,
                format!(
                    "{name}: a fresh read does not match its last claimed change ({}), and {} at position {position} may have changed it since",
                    self.tool(i),
                    self.tool(u)
                ),
                format!("change {name} with a claimed write after position {position}, then read it back completely"),
                evidence,
                Some(format!(
                    "{name} was changed by {} (position {position}) after its last claimed change; what it holds now was not verified.",
                    self.tool(u)
                )),
            ));
        } else if matches!(assessment, Some(Assessment::StateObserved))
            && explicit.is_some_and(|(i, _)| i == latest)
        {
            state_observed(reasons, evidence);
        } else if unsettled.is_none() {
            // Unresolved, and CMP-2 has said so, unless a fresh check
            // resolved it: then it is still not verified.
            unverified(reasons, evidence);
        }
    }

    /// CMP-13: another run's claim still in flight that may touch `loc`
    /// (its exact scope names it or a directory above it, or its scope is
    /// unknown) makes it unsettled, whatever this run's own evidence says:
    /// that run may be changing it now. One reason per such claim.
    /// Says whether any did.
    fn concurrent_runs(&self, loc: LocId, name: &str, reasons: &mut Vec<Reason>) -> bool {
        let before = reasons.len();
        let locations = self.history.locations;
        for other in &self.history.concurrent {
            let touches = other
                .targets
                .is_none_or(|targets| locations.ancestors_or_self(loc).any(|a| targets.contains(&a)));
            if !touches {
                continue;
            }
            let (run, tool, position) = (other.run, other.tool, other.position);
            reasons.push(reason(
                ReasonCode::ConcurrentRun,
                Verdict::Blocked,
                format!("{name}: run {run}'s {tool} (its position {position}) is still in flight and may change it"),
                format!(
                    "let run {run}'s {tool} at its position {position} settle (or its process end), then read {name} back completely and decide again"
                ),
                Vec::new(),
                Some(format!("Another run ({run}) was still changing what may include {name} ({tool}, its position {position})."),
                ),
            ));
        }
        reasons.len() > before
    }

    /// CMP-15: what clears CMP-2 for claim `i` on `name`, as its state
    /// stands. In flight, its settlement may; settled with its processes
    /// not known dead, nothing in this run can (no later record closes that
    /// window); settled with an unresolved outcome, only a later claimed
    /// change that reports success (a read cannot say what an unknown-scope
    /// effect did, nor undo a contradiction of an exact one).
    fn unsettled_remedy(&self, i: usize, name: &str) -> String {
        let claim = &self.history.claims[i];
        let position = claim.position();
        match claim.state {
            State::Attempted | State::Running(_) => format!(
                "let position {position} settle (its processes known dead), then read {name} back completely and decide again"
            ),
            State::Settled(_) if claim.window_end().is_none() => format!(
                "nothing the ledger can do clears this in this run: the processes of position {position} were never seen to end, so they may still change {name}; once they are gone, make the change again in a new run"
            ),
            State::Settled(_) => format!(
                "write {name} again with a claimed change that reports success after position {position}, then read it back completely (reading it alone does not say what position {position} did)"
            ),
        }
    }

    /// CMP-15: what clears CMP-5's staleness for claim `i`: a run of the
    /// check after the claim's window closed, which an open window never
    /// does in this run.
    fn stale_remedy(&self, i: usize, command: &str) -> String {
        let claim = &self.history.claims[i];
        let position = claim.position();
        match claim.state {
            State::Attempted | State::Running(_) => {
                format!(
                    "let position {position} settle (its processes known dead), then run `{command}` again"
                )
            }
            State::Settled(_) if claim.window_end().is_none() => format!(
                "nothing the ledger can do clears this in this run: the processes of position {position} were never seen to end, so no later check can vouch for the state; once they are gone, run `{command}` in a new run"
            ),
            State::Settled(_) => format!("run `{command}` again (position {position} has settled)"),
        }
    }

    /// CMP-7 for an artifact no claimed change targeted. Observed absent:
    /// missing. Any unknown-scope operation may have produced or changed it,
    /// and nothing verifies those (section 6): unverified, unless a fresh
    /// passing verifier ran after the last of them. Otherwise (nothing could
    /// have touched it, or only the latest check's own run, which it covers:
    /// CMP-5) it must be freshly observed to exist, by an existence
    /// observation (VER-1, VER-3).
    fn never_changed(&self, loc: LocId, reasons: &mut Vec<Reason>) {
        let name = self.history.locations.name(loc);
        let newest = self.newest_sighting(loc);
        let fresh = newest.filter(|o| o.freshness == Freshness::Fresh);
        let seen: Vec<u64> = newest.map(|o| o.position).into_iter().collect();
        if let Some(o) = fresh.filter(|o| !o.exists) {
            reasons.push(reason(
                ReasonCode::MissingArtifact,
                Verdict::Failed,
                format!("{name}: required, and a fresh observation found nothing there"),
                format!("produce {name}, then read it back completely"),
                vec![o.position],
                Some(format!("{name} was required but does not exist.")),
            ));
            return;
        }
        let exists = fresh.is_some();
        match (self.unknown_end, self.unknown_start) {
            (Some((end, i)), _) if !(exists && self.verifier_covers(loc, end).is_some()) => reasons.push(reason(
                ReasonCode::UnverifiedArtifact,
                Verdict::Unverified,
                format!("{name}: no claimed change produced it; {} may have, and nothing verified it", self.tool(i)),
                format!(
                    "read {name} back completely and run the check again after position {} (a check covers what that command did only for a file seen to exist), or write {name} with a claimed change and read it back",
                    self.history.claims[i].position()
                ),
                self.claim_evidence(i).into_iter().chain(seen).collect(),
                Some(format!(
                    "{name} was not produced by a verified change: {} (position {}) may have produced or changed it.",
                    self.tool(i),
                    self.history.claims[i].position()
                )),
            )),
            (Some(_), _) => {}
            (None, _) if exists => {}
            // Only the latest check's own run could have produced it (CMP-5
            // covers that run, but not a file nobody saw): not verified.
            (None, Some((_, i))) => {
                let position = self.history.claims[i].position();
                reasons.push(reason(
                    ReasonCode::UnverifiedArtifact,
                    Verdict::Unverified,
                    format!("{name}: no claimed change produced it; {} may have, and nothing observed it", self.tool(i)),
                    format!("read {name} back completely (it was never observed after position {position})"),
                    self.claim_evidence(i).into_iter().chain(seen).collect(),
                    Some(format!(
                        "{name} was not produced by a verified change: {} (position {position}) may have produced it, and it was never observed.",
                        self.tool(i)
                    )),
                ))
            }
            (None, None) => reasons.push(reason(
                ReasonCode::MissingArtifact,
                Verdict::Failed,
                format!("{name}: required, never produced and not observed to exist"),
                format!("produce {name}, then read it back completely"),
                seen,
                Some(format!("{name} was required but was never produced.")),
            )),
        }
    }

    /// CMP-4: the latest change of every changed location that is not
    /// required, contradicted by a fresh readback.
    fn contradicted_effects(&self, reasons: &mut Vec<Reason>) {
        let mut required = vec![false; self.history.locations.len()];
        for &loc in &self.history.required {
            required[loc as usize] = true;
        }
        for &loc in &self.changes.changed {
            if required[loc as usize] {
                continue;
            }
            let latest = *self.changes.of(loc).last().expect("changed locations have changes");
            let Some(assessed) = self.assessments.on(latest, loc) else { continue };
            let superseded = self.last_touch(loc) != Some(latest);
            if matches!(assessed.assessment, Assessment::Contradicted) && !superseded {
                let name = self.history.locations.name(loc);
                let mut evidence = self.claim_evidence(latest);
                evidence.extend(assessed.observation);
                reasons.push(contradicted(ReasonCode::ContradictedEffect, name, self.tool(latest), evidence));
            }
        }
    }

    /// CMP-5: the latest verifier failed, did not finish (timed out or
    /// cancelled: neither pass nor fail), or passed before an unresolved
    /// effect ended: one whose window had not closed when the check started
    /// (its own claim, when the ledger links it). Its own run, settled with
    /// its processes known dead, is resolved, so it never stales itself.
    fn verifiers(&self, reasons: &mut Vec<Reason>) {
        let Some(latest) = self.history.verifiers.last() else { return };
        match latest.result {
            CheckResult::Passed => {}
            CheckResult::Failed => {
                reasons.push(reason(
                    ReasonCode::FailingVerifier,
                    Verdict::Failed,
                    format!("the latest check `{}` failed", latest.command),
                    format!("fix what `{}` reports, then run it again", latest.command),
                    vec![latest.position],
                    Some(format!("The latest check (`{}`) failed.", latest.command)),
                ));
                return;
            }
            CheckResult::Incomplete => {
                reasons.push(reason(
                    ReasonCode::IncompleteVerifier,
                    Verdict::Blocked,
                    format!("the latest check `{}` did not finish (timed out or cancelled)", latest.command),
                    format!("run `{}` again to the end", latest.command),
                    vec![latest.position],
                    Some(format!(
                        "The latest check (`{}`) did not finish, so it neither passed nor failed.",
                        latest.command
                    )),
                ));
                return;
            }
        }
        // Stale: an unresolved effect ended after the check started, or has
        // not ended.
        let start = self.history.check_start(latest);
        let Some((_, i)) = self.unresolved_any.filter(|&(end, _)| end > start) else {
            return;
        };
        let position = self.history.claims[i].position();
        let mut evidence = vec![latest.position];
        evidence.extend(self.claim_evidence(i));
        reasons.push(reason(
            ReasonCode::StaleVerifier,
            Verdict::Blocked,
            format!("the check `{}` passed before {} at position {position}, whose effect is unsettled", latest.command, self.tool(i)),
            self.stale_remedy(i, latest.command),
            evidence,
            Some(format!(
                "The last passing check (`{}`) ran before an operation ({}, position {position}) whose effect is unsettled; it no longer vouches for the current state.",
                latest.command,
                self.tool(i)
            )),
        ));
    }

    /// CMP-6: every executed external effect that is not VERIFIED caps the
    /// decision at UNVERIFIED and always discloses what is known of it.
    fn external_effects(&self, reasons: &mut Vec<Reason>) {
        for (i, claim) in self.history.claims.iter().enumerate() {
            // Structural, whatever the answer says, unless a fresh remote
            // readback VERIFIED it (CMP-6 caps only effects that are not
            // VERIFIED): a decision that verified the effect never also
            // discloses it as unverified.
            if !claim.external || claim.no_op() {
                continue;
            }
            let target = claim
                .targets
                .unwrap_or_default()
                .iter()
                .find(|&&t| self.history.locations.kind(t) == Kind::External);
            // Read back at the remote end itself: every obligation VERIFIED,
            // one of them on the external target (a verified file beside it
            // says nothing of the remote change).
            let read_back = target.is_some_and(|&t| {
                self.assessments.on(i, t).is_some_and(|a| matches!(a.assessment, Assessment::Verified))
            });
            if read_back && self.verified(i) {
                continue;
            }
            // Its external target's name; a runtime-run call's claim has
            // unknown scope (TRU-1) and names it by its subject instead.
            let name = match target {
                Some(&t) => self.history.locations.name(t),
                None if !claim.subject.is_empty() => claim.subject,
                None => claim.tool,
            };
            let fact = match claim.state.settled().map(|s| s.execution) {
                Some(Execution::ReportedSuccess) => {
                    "reported success; any external change it made was not independently verified"
                }
                Some(Execution::Failed) => "reported failure",
                _ => "unknown outcome",
            };
            reasons.push(reason(
                ReasonCode::ExternalEffectUnverified,
                Verdict::Unverified,
                format!("external effect {name} at position {}: {fact}", claim.position()),
                "nothing the ledger can do clears this: disclose the external effect".to_owned(),
                self.claim_evidence(i),
                Some(format!("External call {name} (position {}): {fact}.", claim.position())),
            ));
        }
    }

    /// CMP-6 (revision 2): every executed owned-record effect that is not
    /// VERIFIED caps the decision at UNVERIFIED and is disclosed like an
    /// external one. The reference runtime reads owned records PARTIAL
    /// (existence only), so in practice none is verified.
    fn owned_effects(&self, reasons: &mut Vec<Reason>) {
        for (i, claim) in self.history.claims.iter().enumerate() {
            let target = claim
                .targets
                .unwrap_or_default()
                .iter()
                .find(|&&t| self.history.locations.kind(t) == Kind::Owned);
            let Some(&target) = target.filter(|_| !claim.no_op() && !self.verified(i)) else { continue };
            let name = self.history.locations.name(target);
            let fact = match claim.state.settled().map(|s| s.execution) {
                Some(Execution::ReportedSuccess) => {
                    "reported success; the change it made to the record was not independently verified"
                }
                Some(Execution::Failed) => "reported failure",
                _ => "unknown outcome",
            };
            reasons.push(reason(
                ReasonCode::OwnedEffectUnverified,
                Verdict::Unverified,
                format!("owned-record effect {name} at position {}: {fact}", claim.position()),
                format!(
                    "read {name} back completely at the revision it wrote (an owned-record read of complete coverage; the reference runtime reads owned records for existence only, so with it nothing clears this: disclose the change)"
                ),
                self.claim_evidence(i),
                Some(format!("Owned record {name} (position {}): {fact}.", claim.position())),
            ));
        }
    }

    /// CMP-6 (revision 2): every executed effect of a tool no family bound
    /// (the unbound fallback claimed it: unknown scope, exit status only,
    /// TRU-1) is disclosed by name with what its execution says. Nothing the
    /// host produced or read speaks for it, and a passing check does not
    /// either. One still attempted or RUNNING is CMP-8's, which names it.
    fn unbound_effects(&self, reasons: &mut Vec<Reason>) {
        for (i, claim) in self.history.claims.iter().enumerate() {
            let Some(settled) = claim.state.settled().filter(|_| claim.unbound && !claim.no_op()) else {
                continue;
            };
            if self.verified(i) {
                continue;
            }
            let fact = match settled.execution {
                Execution::ReportedSuccess => "reported exit 0",
                Execution::Failed => "reported failure",
                Execution::TimedOut => "timed out",
                Execution::Cancelled => "was cancelled",
                Execution::Interrupted => "was interrupted",
                Execution::NotExecuted | Execution::Running | Execution::Unknown => {
                    "ran with an unknown outcome"
                }
            };
            let position = claim.position();
            reasons.push(reason(
                ReasonCode::UnboundEffectUnverified,
                Verdict::Unverified,
                format!("{} at position {position} is no bound tool: it {fact}, and nothing verified its effects", claim.tool),
                format!(
                    "nothing the ledger can do clears this for an unbound tool: run the work through a bound tool, or disclose what {} did",
                    claim.tool
                ),
                self.claim_evidence(i),
                Some(format!("Tool {} (position {position}) {fact}; its effects were not verified.", claim.tool)),
            ));
        }
    }

    /// ID-6 (revision 2): where commands ran without write confinement
    /// (Landlock absent or off, or a command another process ran), anything
    /// the ledger trusts (its logs, a job's files, a file a readback saw)
    /// could have been changed by them with the user's authority, so every
    /// decision over such a run says so, once. It changes no verdict: what
    /// the evidence gives stands, disclosed. A command that never ran
    /// (NOT_EXECUTED) is not counted.
    fn unconfined_commands(&self, reasons: &mut Vec<Reason>) {
        let commands: Vec<usize> = (0..self.history.claims.len())
            .filter(|&i| {
                let claim = &self.history.claims[i];
                claim.unconfined && !claim.no_op()
            })
            .collect();
        if commands.is_empty() {
            return;
        }
        let named: Vec<String> = commands
            .iter()
            .map(|&i| {
                format!("{} at position {}", self.history.claims[i].tool, self.history.claims[i].position())
            })
            .collect();
        reasons.push(reason(
            ReasonCode::UnconfinedCommand,
            Verdict::Completed,
            format!(
                "commands ran without write confinement ({}): they could write anything their user may, the ledger's store included",
                named.join(", ")
            ),
            "nothing clears this for commands that already ran: the disclosure stays. A later command is confined only when the ledger runs it itself (its own process tools, not a runtime's shell or hook), with Landlock available, the `effects-supervisor` helper beside `effects`, and EFFECTS_CONFINE not off: `effects doctor` names which of these is missing".into(),
            commands.iter().flat_map(|&i| self.claim_evidence(i)).collect(),
            Some("Commands ran without write confinement.".into()),
        ));
    }

    /// Every assessment of claim `i` is VERIFIED (a claim without obligations
    /// is assessed once, and never VERIFIED).
    fn verified(&self, i: usize) -> bool {
        self.assessments.of(i).iter().all(|a| matches!(a.assessment, Assessment::Verified))
    }

    /// CMP-2 (revision 3): every call that settled UNKNOWN once its window
    /// closed (the runtime said it finished, its processes are known gone)
    /// is a settled change of unknown result, disclosed as such. Its verdict
    /// is COMPLETED: what it may have changed is judged by the artifact
    /// rules, which take it as the latest change of what it may touch. An
    /// external call's and an unbound tool's unknown outcome are CMP-6's,
    /// which name them already; one whose window is open is CMP-2's
    /// unsettled effect.
    fn unknown_exit_statuses(&self, reasons: &mut Vec<Reason>) {
        for (i, claim) in self.history.claims.iter().enumerate() {
            let Some(settled) = claim.state.settled() else { continue };
            let settled_unknown =
                matches!(settled.execution, Execution::Unknown) && claim.window_end().is_some();
            if !settled_unknown || claim.external || claim.unbound {
                continue;
            }
            let position = claim.position();
            reasons.push(reason(
                ReasonCode::UnknownExitStatus,
                Verdict::Completed,
                format!("{} at position {position} finished, and the runtime reported no exit status", claim.tool),
                format!(
                    "nothing the ledger can do clears this for position {position}: the runtime never said how it ended, and the disclosure stays; a check after it judges what it left"
                ),
                self.claim_evidence(i),
                Some(format!("{} (position {position}) finished with its exit status unknown.", claim.tool)),
            ));
        }
    }

    /// CMP-8: a launch still RUNNING (or an effect with no outcome at all)
    /// leaves the run UNVERIFIED, not BLOCKED, unless a required artifact or a
    /// verifier says otherwise (CMP-2, CMP-5).
    fn running(&self, reasons: &mut Vec<Reason>) {
        for (i, claim) in self.history.claims.iter().enumerate() {
            if claim.no_op() {
                continue;
            }
            let position = claim.position();
            let (message, disclosure) = match claim.state {
                State::Running(_) => (
                    format!("{} at position {position} is still running", claim.tool),
                    format!(
                        "{} (position {position}) was still running; its effects are not known yet.",
                        claim.tool
                    ),
                ),
                State::Attempted => (
                    format!("{} at position {position} has no outcome", claim.tool),
                    format!(
                        "{} (position {position}) has no settled outcome; its effects are not known.",
                        claim.tool
                    ),
                ),
                State::Settled(_) => continue,
            };
            reasons.push(reason(
                ReasonCode::RunningLaunch,
                Verdict::Unverified,
                message,
                format!("wait for position {position} to settle, then decide again"),
                self.claim_evidence(i),
                Some(disclosure),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use effects_evaluator_sdk::types::{CleanupState, Execution, ReasonCode, Verdict};

    use crate::tables::tests::Built;

    fn decided(built: &Built) -> (Verdict, Vec<ReasonCode>) {
        let decision = crate::evaluate(&built.ledger).expect("a consistent ledger");
        let mut codes: Vec<ReasonCode> = decision.reasons.iter().map(|r| r.code).collect();
        codes.sort_by_key(|&c| c as u8);
        (decision.verdict, codes)
    }

    /// A command with processes settled with `cleanup`, then a write of the
    /// required `d/a.txt` read back as intended.
    fn write_after_command(cleanup: CleanupState) -> Built {
        let mut built = Built::new();
        let command = built.command(true);
        built.settle(command, Execution::ReportedSuccess, cleanup);
        let write = built.write();
        built.settle(write, Execution::ReportedSuccess, CleanupState::NotApplicable);
        built.read();
        built
    }

    #[test]
    fn a_process_effect_not_known_dead_ends_never_so_a_later_write_is_unsettled() {
        // CMP-2: it ends after the write, so it may have changed the file since.
        for cleanup in [CleanupState::Failed, CleanupState::Unknown, CleanupState::NotApplicable] {
            assert_eq!(
                decided(&write_after_command(cleanup)),
                (Verdict::Blocked, vec![ReasonCode::UnsettledArtifact, ReasonCode::UnverifiedArtifact]),
                "{cleanup:?}"
            );
        }
        assert_eq!(decided(&write_after_command(CleanupState::Clean)), (Verdict::Completed, vec![]));
    }

    /// A passing verifier and a command with (or without) the processes
    /// flag settled with `cleanup`, in the order `command_first` says; no
    /// artifact.
    fn verifier_and_command(command_first: bool, processes: bool, cleanup: CleanupState) -> Built {
        let mut built = Built::new();
        built.ledger.required.clear();
        if !command_first {
            built.verifier(true);
        }
        let command = built.command(processes);
        built.settle(command, Execution::ReportedSuccess, cleanup);
        if command_first {
            built.verifier(true);
        }
        built
    }

    #[test]
    fn a_process_effect_not_known_dead_stales_a_verifier_before_or_after_its_outcome() {
        // CMP-5: it ends never, so after any check. A `bash` call is a
        // command with or without the flag: its UNKNOWN cleanup leaves its
        // processes not known dead; without the flag, nothing to clean up
        // (NOT_APPLICABLE) closes it.
        use CleanupState as C;
        for command_first in [false, true] {
            for (processes, cleanup) in [(true, C::Unknown), (false, C::Unknown), (true, C::NotApplicable)] {
                assert_eq!(
                    decided(&verifier_and_command(command_first, processes, cleanup)),
                    (Verdict::Blocked, vec![ReasonCode::StaleVerifier]),
                    "command first: {command_first}, flag {processes}, {cleanup:?}"
                );
            }
            let closed = verifier_and_command(command_first, false, C::NotApplicable);
            assert_eq!(decided(&closed), (Verdict::Completed, vec![]));
        }
    }

    #[test]
    fn a_verifier_covers_a_change_only_once_every_process_effect_before_it_ended() {
        // CMP-7: an unread write covered by a passing check after it, unless a
        // command's processes may still be changing things.
        for (cleanup, covered) in [(CleanupState::Clean, true), (CleanupState::Failed, false)] {
            let mut built = Built::new();
            let write = built.write();
            built.settle(write, Execution::ReportedSuccess, CleanupState::NotApplicable);
            let command = built.command(true);
            built.settle(command, Execution::ReportedSuccess, cleanup);
            built.verifier(true);
            let (verdict, codes) = decided(&built);
            if covered {
                assert_eq!((verdict, codes), (Verdict::Completed, vec![]));
            } else {
                assert_eq!(verdict, Verdict::Blocked);
                assert!(codes.contains(&ReasonCode::UnverifiedArtifact), "{codes:?}");
            }
        }
    }
}
