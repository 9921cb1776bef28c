//! The ledger as a history: each claim's state (ATTEMPTED, RUNNING or settled,
//! OUT-1, HIS-1), its window (INV-2, [`Claim::window_end`]) and each
//! observation's freshness (INV-1..3).
//!
//! A claim's window opens at the claim and closes at its settled outcome,
//! except that an effect that ran processes (the `processes` claim flag,
//! PROC-2) closes only when they are known dead: at a settled outcome whose
//! cleanup is CLEAN. One that settled otherwise (cleanup FAILED, UNKNOWN, or an
//! INTERRUPTED one whose recovery observed no cleanup) stays open for good. An
//! in-process producer's effect (a file tool) ends with its executor.
//!
//! What a claim may touch is its exact scope plus what that reaches through
//! hard links ([`aliases`](crate::aliases), ID-3), or everything for an
//! unknown scope; [`History::each_touched`] is that list, and every pass and rule
//! that asks "may this claim touch that location" walks it.
//!
//! Cost: three passes over the records. The alias pass (forward) follows
//! which names share an object; the freshness passes are one forward, which
//! tracks which claims' windows are still open per location, and one
//! reverse, which tracks the nearest later claim and the later incarnations
//! per location. Each record costs the depth of its locations' ancestor
//! chains, never the number of other records, so a ledger of n effects is
//! evaluated in O(n log n) at worst (the log is an outcome's search for a
//! claim it settles that is not the latest one), O(n) otherwise; hard links
//! add what [`aliases`](crate::aliases) says.

use effects_evaluator_sdk::types::{
    CheckResult, ClaimFlags, CleanupState, Coverage, Execution, Mechanism, ObservationFlags, OutcomeFlags,
    VerifierFlags,
};

use crate::aliases::{Aliases, Reach};
use crate::locations::{FixedMap, Kind, LocId, Locations, SCAN_LIMIT, same};
use crate::tables::{Obligation, Record, Tables};

/// A settled outcome (not RUNNING).
#[derive(Clone, Copy)]
pub struct Settled {
    /// Its position.
    pub position: u64,
    /// How execution ended.
    pub execution: Execution,
    /// Cleanup.
    pub cleanup: CleanupState,
    /// A failure after the truncating open (CMP-2).
    pub mutation_attempted: bool,
}

/// Where a claim stands at the end of the ledger.
#[derive(Clone, Copy)]
pub enum State {
    /// No outcome (OUT-1: ATTEMPTED is derived).
    Attempted,
    /// A RUNNING outcome at this position, not settled yet.
    Running(u64),
    /// Settled.
    Settled(Settled),
}

/// A claim with its resolved locations and state.
pub struct Claim<'a> {
    /// Its log position (read with [`Claim::position`]).
    position: u64,
    /// An external effect.
    pub external: bool,
    /// Its tool fell to the unbound fallback: nothing the host produced or
    /// read speaks for it (CMP-6).
    pub unbound: bool,
    /// It ran processes (PROC-2); see [`Claim::window_end`] for what that changes.
    pub processes: bool,
    /// A command without the flag: a `bash` or `python` call, or a check's
    /// own run. Its processes are not known dead when its cleanup is not
    /// known ([`Claim::window_end`]).
    pub command: bool,
    /// A command that ran without write confinement (ID-6).
    pub unconfined: bool,
    /// Its tool.
    pub tool: &'a str,
    /// What it called when its scope cannot say (an external call's
    /// `server/tool`); may be empty.
    pub subject: &'a str,
    /// Its exact scope, or `None` for unknown scope.
    pub targets: Option<&'a [LocId]>,
    /// Its obligations, in order.
    pub obligations: &'a [Obligation<'a>],
    /// Its state at the end of the ledger.
    pub state: State,
}

/// A verifier run.
pub struct Verifier<'a> {
    /// Its log position.
    pub position: u64,
    /// The command as run.
    pub command: &'a str,
    /// How it ended (CMP-5).
    pub result: CheckResult,
    /// The index (in [`History::claims`]) of its own run's claim, when the
    /// ledger links it (CMP-5: a check covers its own run).
    pub claim: Option<usize>,
}

impl Verifier<'_> {
    /// It ran to the end and passed.
    pub fn passed(&self) -> bool {
        matches!(self.result, CheckResult::Passed)
    }
}

/// INV-2.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Freshness {
    /// Nothing later may have touched it, nothing earlier was in flight.
    Fresh,
    /// Invalidated by the record at this position (INV-1).
    Stale(u64),
    /// An earlier overlapping effect's window was still open: attempted,
    /// running, or its processes not known dead ([`Claim::window_end`]).
    Unsettled,
}

/// An observation with its location and freshness.
pub struct Observation<'a> {
    /// Its log position.
    pub position: u64,
    /// How it was taken.
    pub mechanism: Mechanism,
    /// How much it covers.
    pub coverage: Coverage,
    /// Whether anything existed there.
    pub exists: bool,
    /// Its location.
    pub loc: LocId,
    /// The incarnation it saw there.
    pub incarnation: &'a str,
    /// Digest of the complete content, when COMPLETE and a file.
    pub content_sha256: Option<&'a str>,
    /// INV-2.
    pub freshness: Freshness,
}

/// Another run's claim still in flight at decision time (CMP-13): never
/// part of this ledger's order, known only by what it may touch.
pub struct Concurrent<'a> {
    /// The run that made it.
    pub run: &'a str,
    /// Its position, in its own lineage.
    pub position: u64,
    /// Its tool.
    pub tool: &'a str,
    /// Its exact scope, or `None` for unknown scope (it may touch anything).
    pub targets: Option<&'a [LocId]>,
}

/// The history of one ledger.
pub struct History<'a> {
    /// Interned locations.
    pub locations: &'a Locations<'a>,
    /// Claims in log order.
    pub claims: Vec<Claim<'a>>,
    /// Observations in log order.
    pub observations: Vec<Observation<'a>>,
    /// Verifier runs in log order.
    pub verifiers: Vec<Verifier<'a>>,
    /// Required artifacts' locations, in the ledger's order, without repeats.
    pub required: Vec<LocId>,
    /// Other runs' claims in flight at decision time (CMP-13).
    pub concurrent: Vec<Concurrent<'a>>,
    /// What claims reach and observations see through hard links (ID-3).
    pub aliases: Aliases,
    /// Unknown-scope effects (no no-ops): their starts in log order, and per
    /// prefix the latest (end, claim) among them (VER-2's "later unknown-scope
    /// change").
    unknown_starts: Vec<u64>,
    unknown_latest_end: Vec<(u64, usize)>,
}

impl State {
    /// The settled outcome, if any.
    pub fn settled(&self) -> Option<&Settled> {
        match self {
            State::Settled(settled) => Some(settled),
            _ => None,
        }
    }
}

impl Claim<'_> {
    /// The claim's log position.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// INV-1: an effect whose backend never ran changes nothing, so it
    /// neither invalidates nor counts as a change. Only a NOT_EXECUTED
    /// outcome says so: the claim's `no-op` flag counts only together with
    /// one (revision 2), so a flagged claim with no outcome, or with any
    /// other, is an effect like every other.
    pub fn no_op(&self) -> bool {
        matches!(self.state, State::Settled(Settled { execution: Execution::NotExecuted, .. }))
    }

    /// INV-2: where the effect's window closes, `None` while it is open (or
    /// never closes). It closes at the settled outcome, but an effect that ran
    /// processes only when they are known dead: at a settled outcome whose
    /// cleanup is CLEAN (NOT_EXECUTED ran none). Every rule that takes
    /// settlement as the end of an effect asks this.
    ///
    /// Without the flag, the cleanup still speaks: FAILED says processes
    /// survived teardown (only processes have a teardown to fail), and a
    /// command's UNKNOWN says its processes were never seen to end. An
    /// in-process producer's UNKNOWN (a file tool recovered INTERRUPTED)
    /// ends with its executor.
    pub fn window_end(&self) -> Option<u64> {
        let State::Settled(s) = self.state else { return None };
        let open = match (s.execution, s.cleanup) {
            (Execution::NotExecuted, _) | (_, CleanupState::Clean) => false,
            (_, CleanupState::Failed) => true,
            (_, CleanupState::Unknown) => self.processes || self.command,
            (_, CleanupState::NotApplicable) => self.processes,
        };
        (!open).then_some(s.position)
    }

    /// CMP-2: may this effect have changed state without settled evidence?
    pub fn unresolved(&self) -> bool {
        if self.no_op() {
            return false;
        }
        match (&self.state, self.targets.is_some()) {
            (State::Attempted | State::Running(_), _) => true,
            // Settled, but its processes may still be alive and change things
            // (INV-2), whatever its scope.
            (State::Settled(_), _) if self.window_end().is_none() => true,
            // OUT-1's UNKNOWN whose window closed (the call finished and
            // its processes are known gone) is no longer unresolved (CMP-2
            // as changed in revision 3): it is a settled change of unknown
            // result, which supersedes what came before it on what it may
            // touch and is disclosed ("exit status unknown"). Only a cut-off
            // call (interrupted, cancelled, timed out) stays unresolved.
            (State::Settled(s), true) => match s.execution {
                Execution::Interrupted | Execution::Cancelled | Execution::TimedOut => true,
                Execution::Failed => s.mutation_attempted,
                _ => false,
            },
            // Unknown scope: a timed-out command was cut off as surely as a
            // cancelled one (CMP-2, points settled in revision 2).
            (State::Settled(s), false) => {
                matches!(s.execution, Execution::Interrupted | Execution::Cancelled | Execution::TimedOut)
                    || matches!(s.cleanup, CleanupState::Failed)
            }
        }
    }
}

/// The command tools SPEC section 6 names (`bash`, `python`): their effects
/// run processes (INV-2) whether or not the host set the `processes` flag.
fn is_command(tool: &str) -> bool {
    matches!(tool, "bash" | "python")
}

/// The verifying mechanism for a location's kind (VER-1), if it has one.
pub fn verifying_mechanism(kind: Kind) -> Option<Mechanism> {
    match kind {
        Kind::Filesystem => Some(Mechanism::FilesystemRead),
        Kind::Owned => Some(Mechanism::OwnedRead),
        Kind::External => Some(Mechanism::RemoteReadback),
        Kind::Process | Kind::Launch | Kind::Job | Kind::Browser => None,
    }
}

/// Nearest later position, keeping the smaller.
fn nearer(current: &mut Option<u64>, position: u64) {
    *current = Some(current.map_or(position, |c| c.min(position)));
}

/// Later observations' incarnations at one location, seen in reverse.
#[derive(Clone, Copy)]
enum Later<'a> {
    None,
    One(&'a str, u64),
    Several(u64),
}

impl History<'_> {
    /// Where a check started: its own run's claim when the ledger links it,
    /// else its record (CMP-5: it covers the changes whose windows closed
    /// before it started).
    pub fn check_start(&self, check: &Verifier<'_>) -> u64 {
        check.claim.map_or(check.position, |i| self.claims[i].position())
    }

    /// The latest check's own run (by claim index), once its window closed:
    /// the judge's own work, not a change it must vouch for (CMP-5). While
    /// its processes may live, it is a change like any other.
    pub fn latest_check_own_run(&self) -> Option<usize> {
        self.verifiers.last().and_then(|v| v.claim).filter(|&i| self.claims[i].window_end().is_some())
    }
}

impl<'a> History<'a> {
    /// Builds the history of the ledger `tables` resolved, refusing a ledger
    /// that settles what is no earlier claim, settles a claim twice, or has
    /// an obligation outside its claim's scope (CL-1). `tables` has checked
    /// every index, string and position already.
    pub fn build(tables: &'a Tables<'a>) -> Result<Self, String> {
        let ledger = tables.ledger;
        let claim_table = &ledger.claims;
        let mut claims: Vec<Claim<'a>> = Vec::with_capacity(claim_table.position.len());
        for (i, &position) in claim_table.position.iter().enumerate() {
            let flags = tables.claim_flags.get(i);
            let targets = tables.scope(i);
            let obligations = tables.obligations(i);
            let tool = tables.strings.get(claim_table.tool[i])?;
            if let Some(stray) = outside_scope(targets.unwrap_or_default(), obligations) {
                return Err(format!(
                    "claim {position}: obligation on {} is outside its scope (CL-1)",
                    tables.locations.name(stray.target)
                ));
            }
            claims.push(Claim {
                position,
                external: flags.contains(ClaimFlags::EXTERNAL),
                unbound: flags.contains(ClaimFlags::UNBOUND),
                processes: flags.contains(ClaimFlags::PROCESSES),
                command: is_command(tool),
                unconfined: flags.contains(ClaimFlags::UNCONFINED),
                tool,
                subject: tables.strings.get(claim_table.subject[i])?,
                targets,
                obligations,
                state: State::Attempted,
            });
        }
        // Per outcome, in log order, the claim it settles: one of the claims
        // before it (a prefix of the claims, whose positions increase as
        // every position does), most often the last of them, otherwise found
        // by binary search over them.
        let outcome_table = &ledger.outcomes;
        let mut settles: Vec<usize> = Vec::with_capacity(outcome_table.position.len());
        let mut before = 0;
        for (i, (&position, &settled)) in outcome_table.position.iter().zip(&outcome_table.claim).enumerate()
        {
            before += claim_table.position[before..].iter().take_while(|&&p| p < position).count();
            let earlier = &claim_table.position[..before];
            let index = if earlier.last() == Some(&settled) {
                Some(before - 1)
            } else {
                earlier.binary_search(&settled).ok()
            }
            .ok_or_else(|| format!("outcome {position} settles {settled}, which is no earlier claim"))?;
            settles.push(index);
            let claim = &mut claims[index];
            claim.state = match (claim.state, tables.execution.get(i)) {
                (State::Settled(_), _) => {
                    return Err(format!(
                        "outcome {position} replaces the settled outcome of claim {settled}"
                    ));
                }
                (State::Running(_), Execution::Running) => {
                    return Err(format!("outcome {position}: claim {settled} is already RUNNING"));
                }
                (State::Attempted, Execution::Running) => State::Running(position),
                (_, execution) => State::Settled(Settled {
                    position,
                    execution,
                    cleanup: tables.cleanup.get(i),
                    mutation_attempted: tables
                        .outcome_flags
                        .get(i)
                        .contains(OutcomeFlags::MUTATION_ATTEMPTED),
                }),
            };
        }
        // Filled row by row, not collected: collecting `Result`s cannot know
        // the length up front, and would grow (and copy) the vector as it goes.
        let seen = &ledger.observations;
        let mut observations = Vec::with_capacity(seen.position.len());
        for i in 0..seen.position.len() {
            let flags = tables.observation_flags.get(i);
            observations.push(Observation {
                position: seen.position[i],
                mechanism: tables.mechanism.get(i),
                coverage: tables.coverage.get(i),
                exists: flags.contains(ObservationFlags::EXISTS),
                loc: tables.loc(seen.resource[i]),
                incarnation: tables.incarnation(seen.resource[i]),
                content_sha256: if flags.contains(ObservationFlags::CONTENT_SHA256) {
                    Some(tables.strings.get(seen.content_sha256[i])?)
                } else {
                    None
                },
                freshness: Freshness::Fresh,
            });
        }
        let run = &ledger.verifiers;
        let mut verifiers = Vec::with_capacity(run.position.len());
        for i in 0..run.position.len() {
            let position = run.position[i];
            // A check's own run is claimed before it runs (CMP-5): a link to
            // anything but an earlier claim is a malformed ledger.
            let claim = if tables.verifier_flags.get(i).contains(VerifierFlags::CLAIM) {
                let own = run.claim[i];
                let index = claim_table.position.binary_search(&own).ok().filter(|_| own < position);
                Some(index.ok_or_else(|| {
                    format!("verifier {position} names claim {own}, which is no earlier claim")
                })?)
            } else {
                None
            };
            // A check is a command: its own run ran processes (INV-2).
            if let Some(own) = claim {
                claims[own].command = true;
            }
            verifiers.push(Verifier {
                position,
                command: tables.strings.get(run.command[i])?,
                result: tables.check_result.get(i),
                claim,
            });
        }
        let locations = &tables.locations;
        let mut required = Vec::new();
        let mut seen = vec![false; locations.len()];
        for &index in &ledger.required {
            let id = tables.loc(index);
            if !std::mem::replace(&mut seen[id as usize], true) {
                required.push(id);
            }
        }
        let mut unknown_starts = Vec::new();
        let mut unknown_latest_end: Vec<(u64, usize)> = Vec::new();
        for (i, claim) in claims.iter().enumerate() {
            if claim.targets.is_none() && !claim.no_op() {
                let latest = (claim.window_end().unwrap_or(u64::MAX), i);
                unknown_starts.push(claim.position);
                unknown_latest_end.push(unknown_latest_end.last().map_or(latest, |&l| l.max(latest)));
            }
        }
        let other = &ledger.concurrent;
        let mut concurrent = Vec::with_capacity(other.position.len());
        for i in 0..other.position.len() {
            concurrent.push(Concurrent {
                run: tables.strings.get(other.run_id[i])?,
                position: other.position[i],
                tool: tables.strings.get(other.tool[i])?,
                targets: tables.concurrent.scope(i),
            });
        }
        let aliases = Aliases::build(tables);
        let mut history = History {
            locations,
            claims,
            observations,
            verifiers,
            required,
            concurrent,
            aliases,
            unknown_starts,
            unknown_latest_end,
        };
        history.mark_unsettled(tables, &settles);
        history.mark_stale(&tables.order);
        Ok(history)
    }

    /// Calls `f` with each location claim `i` may touch: its exact targets,
    /// then what they reach through hard links (ID-3); nothing for an
    /// unknown scope, which may touch anything. (Two loops rather than a
    /// chained iterator: this is every pass's inner loop.)
    pub fn each_touched(&self, i: usize, mut f: impl FnMut(LocId)) {
        for &t in self.claims[i].targets.unwrap_or_default() {
            f(t);
        }
        for reached in self.aliases.reach(i) {
            f(reached.loc);
        }
    }

    /// What claim `i` reaches through hard links, besides its targets.
    pub fn reach(&self, i: usize) -> &[Reach] {
        self.aliases.reach(i)
    }

    /// VER-2: the unknown-scope effect that may have changed a target after
    /// `after` and before `before`, if any: one claimed before `before` whose
    /// window had not closed by `after` (the latest-ending such one).
    pub fn unknown_change_between(&self, after: u64, before: u64) -> Option<usize> {
        let started = self.unknown_starts.partition_point(|&start| start < before);
        let (end, i) = *self.unknown_latest_end.get(started.checked_sub(1)?)?;
        (end > after).then_some(i)
    }

    /// INV-2, UNSETTLED: an earlier overlapping effect's window was open when
    /// the observation was taken (forward pass over open claims: a claim
    /// opens one, the outcome at its [`Claim::window_end`] closes it).
    fn mark_unsettled(&mut self, tables: &Tables<'_>, settles: &[usize]) {
        let n = self.locations.len();
        let (mut open_self, mut open_below) = (vec![0u32; n], vec![0u32; n]);
        let mut open_unknown = 0u32;
        let (mut next_claim, mut next_outcome, mut next_observation) = (0, 0, 0);
        for record in &tables.order {
            match record {
                Record::Claim => {
                    let i = next_claim;
                    next_claim += 1;
                    if self.claims[i].no_op() {
                        continue;
                    }
                    self.open(i, 1, &mut open_self, &mut open_below, &mut open_unknown);
                }
                Record::Outcome => {
                    let position = tables.ledger.outcomes.position[next_outcome];
                    let i = settles[next_outcome];
                    next_outcome += 1;
                    let claim = &self.claims[i];
                    if claim.window_end() == Some(position) && !claim.no_op() {
                        self.open(i, -1, &mut open_self, &mut open_below, &mut open_unknown);
                    }
                }
                Record::Observation => {
                    let observation = &mut self.observations[next_observation];
                    next_observation += 1;
                    let loc = observation.loc;
                    let in_flight = open_unknown > 0
                        || open_below[loc as usize] > 0
                        || self.locations.ancestors_or_self(loc).any(|a| open_self[a as usize] > 0);
                    if in_flight && !matches!(observation.mechanism, Mechanism::Receipt) {
                        observation.freshness = Freshness::Unsettled;
                    }
                }
                Record::Verifier => {}
            }
        }
    }

    /// Opens (`delta` 1) or closes (-1) claim `i`'s window on everything it
    /// may touch.
    fn open(&self, i: usize, delta: i32, own: &mut [u32], below: &mut [u32], unknown: &mut u32) {
        let add = |count: &mut u32| *count = count.saturating_add_signed(delta);
        if self.claims[i].targets.is_none() {
            return add(unknown);
        }
        self.each_touched(i, |t| {
            add(&mut own[t as usize]);
            for a in self.locations.ancestors_or_self(t) {
                add(&mut below[a as usize]);
            }
        });
    }

    /// INV-1: later claims that may touch it, or a later observation of the
    /// same location with a different incarnation, make it STALE; receipts are
    /// never invalidated (INV-3). Reverse pass.
    fn mark_stale(&mut self, order: &[Record]) {
        let n = self.locations.len();
        let (mut later_self, mut later_below) = (vec![None; n], vec![None; n]);
        let mut later_unknown: Option<u64> = None;
        let mut later_seen = vec![Later::None; n];
        let (mut next_claim, mut next_observation) = (self.claims.len(), self.observations.len());
        for record in order.iter().rev() {
            match record {
                Record::Claim => {
                    next_claim -= 1;
                    let claim = &self.claims[next_claim];
                    if claim.no_op() {
                        continue;
                    }
                    let position = claim.position();
                    if claim.targets.is_none() {
                        nearer(&mut later_unknown, position);
                        continue;
                    }
                    self.each_touched(next_claim, |t| {
                        nearer(&mut later_self[t as usize], position);
                        for a in self.locations.ancestors_or_self(t) {
                            nearer(&mut later_below[a as usize], position);
                        }
                    });
                }
                Record::Observation => {
                    next_observation -= 1;
                    let observation = &mut self.observations[next_observation];
                    // INV-3: a receipt is never invalidated, but a receipt of
                    // another incarnation still shows a replacement (VER-3).
                    let receipt = matches!(observation.mechanism, Mechanism::Receipt);
                    let loc = observation.loc as usize;
                    let incarnation = observation.incarnation;
                    let mut by = later_unknown;
                    if let Some(p) = later_below[loc] {
                        nearer(&mut by, p);
                    }
                    for a in self.locations.ancestors_or_self(observation.loc) {
                        if let Some(p) = later_self[a as usize] {
                            nearer(&mut by, p);
                        }
                    }
                    match later_seen[loc] {
                        Later::One(other, p) if !same(other, incarnation) => nearer(&mut by, p),
                        Later::Several(p) => nearer(&mut by, p),
                        _ => {}
                    }
                    if let Some(by) = by.filter(|_| !receipt) {
                        observation.freshness = Freshness::Stale(by);
                    }
                    let position = observation.position;
                    later_seen[loc] = match later_seen[loc] {
                        Later::None => Later::One(incarnation, position),
                        Later::One(other, _) if same(other, incarnation) => Later::One(incarnation, position),
                        _ => Later::Several(position),
                    };
                }
                Record::Outcome | Record::Verifier => {}
            }
        }
    }
}

/// CL-1: the first obligation whose target is not in `scope`, if any (a scan
/// for the usual handful of targets, a set beyond that).
fn outside_scope<'o, 'a>(scope: &[LocId], obligations: &'o [Obligation<'a>]) -> Option<&'o Obligation<'a>> {
    if scope.len() <= SCAN_LIMIT {
        return obligations.iter().find(|o| !scope.contains(&o.target));
    }
    let scope: FixedMap<LocId, ()> = scope.iter().map(|&t| (t, ())).collect();
    obligations.iter().find(|o| !scope.contains_key(&o.target))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::tests::{Built, ledger};
    use effects_evaluator_sdk::types::EvidenceLedger;

    /// A claim at 1 in `state`, with or without processes, of exact or unknown scope.
    fn claim(processes: bool, exact: bool, state: State) -> Claim<'static> {
        const TARGETS: &[LocId] = &[0];
        Claim {
            position: 1,
            external: false,
            unbound: false,
            processes,
            command: false,
            unconfined: false,
            tool: "bash",
            subject: "",
            targets: exact.then_some(TARGETS),
            obligations: &[],
            state,
        }
    }

    fn settled(execution: Execution, cleanup: CleanupState) -> State {
        State::Settled(Settled { position: 2, execution, cleanup, mutation_attempted: false })
    }

    #[test]
    fn a_process_effect_s_window_closes_only_at_a_clean_settlement() {
        use CleanupState as C;
        use Execution as E;
        for exact in [true, false] {
            for execution in [E::ReportedSuccess, E::Failed, E::TimedOut, E::Cancelled, E::Interrupted] {
                for cleanup in [C::NotApplicable, C::Clean, C::Failed, C::Unknown] {
                    let state = settled(execution, cleanup);
                    let why = format!("{execution:?} with cleanup {cleanup:?}, exact scope {exact}");
                    // An in-process producer's effect ends with its settlement,
                    // unless its cleanup says processes survived.
                    let survivors = matches!(cleanup, C::Failed);
                    assert_eq!(claim(false, exact, state).window_end(), (!survivors).then_some(2), "{why}");
                    // A command without the flag: its processes are not known
                    // dead when its cleanup is not known either.
                    let command = Claim { command: true, ..claim(false, exact, state) };
                    let unknown = matches!(cleanup, C::Unknown | C::Failed);
                    assert_eq!(command.window_end(), (!unknown).then_some(2), "{why}");
                    let process = claim(true, exact, state);
                    let clean = matches!(cleanup, C::Clean);
                    assert_eq!(process.window_end(), clean.then_some(2), "{why}");
                    // Its processes may still change things: unresolved (CMP-2).
                    if !clean {
                        assert!(process.unresolved(), "{why}");
                    }
                }
            }
            for state in [State::Attempted, State::Running(2)] {
                assert_eq!(claim(false, exact, state).window_end(), None);
                assert_eq!(claim(true, exact, state).window_end(), None);
            }
            // NOT_EXECUTED ran nothing: a no-op, closed, never unresolved.
            let not_executed = claim(true, exact, settled(E::NotExecuted, C::NotApplicable));
            assert_eq!(not_executed.window_end(), Some(2));
            assert!(!not_executed.unresolved());
        }
        // A clean, successful command is resolved; without processes and
        // not a command, an unknown cleanup is too (as before 2.0.0), but a
        // failed teardown never is: something survived it.
        assert!(!claim(true, false, settled(E::ReportedSuccess, C::Clean)).unresolved());
        assert!(!claim(false, false, settled(E::ReportedSuccess, C::Unknown)).unresolved());
        assert!(claim(false, true, settled(E::ReportedSuccess, C::Failed)).unresolved());
    }

    /// The freshness of a read of `d/a.txt` written after a command that
    /// settled with `execution` and `cleanup`, with or without processes.
    fn read_after_command(processes: bool, execution: Execution, cleanup: CleanupState) -> Freshness {
        let mut built = Built::new();
        let command = built.command(processes);
        built.settle(command, execution, cleanup);
        let write = built.write();
        built.settle(write, Execution::ReportedSuccess, CleanupState::NotApplicable);
        built.read();
        let tables = Tables::new(&built.ledger).expect("well-formed tables");
        let history = History::build(&tables).expect("a consistent history");
        history.observations[0].freshness
    }

    #[test]
    fn a_read_after_a_process_effect_not_known_dead_is_unsettled() {
        use CleanupState as C;
        use Execution as E;
        assert_eq!(read_after_command(true, E::ReportedSuccess, C::Failed), Freshness::Unsettled);
        assert_eq!(read_after_command(true, E::ReportedSuccess, C::NotApplicable), Freshness::Unsettled);
        assert_eq!(read_after_command(true, E::Interrupted, C::Unknown), Freshness::Unsettled);
        assert_eq!(read_after_command(true, E::ReportedSuccess, C::Clean), Freshness::Fresh);
        assert_eq!(read_after_command(true, E::Interrupted, C::Clean), Freshness::Fresh);
        // Without the flag, a teardown that failed still left processes.
        assert_eq!(read_after_command(false, E::ReportedSuccess, C::Failed), Freshness::Unsettled);
        assert_eq!(read_after_command(false, E::ReportedSuccess, C::NotApplicable), Freshness::Fresh);
    }

    #[test]
    fn an_outcome_settles_an_earlier_claim_only() {
        let history = |ledger: &EvidenceLedger| {
            let tables = Tables::new(ledger).expect("well-formed tables");
            History::build(&tables)
                .map(|h| h.claims.iter().map(|c| c.state.settled().is_some()).collect::<Vec<_>>())
        };
        // Claims at 1 and 2; the outcome at 4 settles the first, not the last.
        let mut two = ledger();
        let claims = &mut two.claims;
        claims.position.push(2);
        for column in [&mut claims.run_id, &mut claims.action_id, &mut claims.tool, &mut claims.subject] {
            column.push(column[0]);
        }
        claims.scope_ends.push(1);
        claims.dependency_ends.push(0);
        claims.obligation_ends.push(1);
        claims.flags.push(0);
        two.outcomes.position[0] = 4;
        two.observations.position[0] = 5;
        assert_eq!(history(&two), Ok(vec![true, false]));
        let mut observation = ledger();
        observation.outcomes.position[0] = 4;
        observation.outcomes.claim[0] = 3;
        assert_eq!(history(&observation), Err("outcome 4 settles 3, which is no earlier claim".into()));
        let mut later = ledger();
        later.claims.position[0] = 3;
        later.observations.position[0] = 1;
        later.outcomes.claim[0] = 3;
        assert_eq!(history(&later), Err("outcome 2 settles 3, which is no earlier claim".into()));
    }

    #[test]
    fn the_no_op_flag_counts_only_with_a_not_executed_outcome() {
        // A write flagged as a no-op (revision 2: the flag counts only with a
        // NOT_EXECUTED outcome), with no outcome, or with the one given.
        let flagged = |outcome: Option<Execution>| {
            let mut built = Built::new();
            let write = built.write();
            if let Some(execution) = outcome {
                built.settle(write, execution, CleanupState::NotApplicable);
            }
            built.ledger.claims.flags[0] = ClaimFlags::NO_OP.bits();
            let tables = Tables::new(&built.ledger).expect("well-formed tables");
            let history = History::build(&tables).expect("a consistent history");
            (history.claims[0].no_op(), history.claims[0].unresolved())
        };
        assert_eq!(flagged(Some(Execution::NotExecuted)), (true, false));
        assert_eq!(flagged(None), (false, true), "no outcome: it may have run");
        // UNKNOWN, its window closed: a settled change of unknown result
        // (CMP-2, revision 3), an effect like any other, not unresolved.
        assert_eq!(flagged(Some(Execution::Unknown)), (false, false));
        assert_eq!(flagged(Some(Execution::ReportedSuccess)), (false, false));
    }

    #[test]
    fn an_unknown_outcome_is_unresolved_only_while_its_window_is_open() {
        // OUT-1's UNKNOWN reached its backend and nobody said how it ended:
        // unresolved while its processes may live, a settled change of
        // unknown result once they are known gone (CMP-2, revision 3).
        for exact in [true, false] {
            assert!(
                !claim(false, exact, settled(Execution::Unknown, CleanupState::NotApplicable)).unresolved()
            );
            assert!(claim(true, exact, settled(Execution::Unknown, CleanupState::Unknown)).unresolved());
            assert!(!claim(true, exact, settled(Execution::Unknown, CleanupState::Clean)).unresolved());
            assert!(
                claim(false, exact, settled(Execution::TimedOut, CleanupState::NotApplicable)).unresolved()
            );
            assert!(
                !claim(false, exact, settled(Execution::ReportedSuccess, CleanupState::NotApplicable))
                    .unresolved()
            );
        }
    }

    #[test]
    fn an_unknown_scope_change_between_two_positions_is_found_by_its_window() {
        // A write (1, 2), a command claimed at 3 and settled at 4, a read at 5.
        let mut built = Built::new();
        let write = built.write();
        built.settle(write, Execution::ReportedSuccess, CleanupState::NotApplicable);
        let command = built.command(false);
        built.settle(command, Execution::ReportedSuccess, CleanupState::NotApplicable);
        built.read();
        let tables = Tables::new(&built.ledger).expect("well-formed tables");
        let history = History::build(&tables).expect("a consistent history");
        // Between the write and the read: the command (claim index 1).
        assert_eq!(history.unknown_change_between(1, 5), Some(1));
        // Claimed at 3: not before 3; its window closed at 4, so not after 4.
        assert_eq!(history.unknown_change_between(1, 3), None);
        assert_eq!(history.unknown_change_between(4, 5), None);
        // In flight across 3.5: claimed before, ended after.
        assert_eq!(history.unknown_change_between(3, 5), Some(1));
    }

    #[test]
    fn a_check_names_an_earlier_claim_as_its_own_run_or_the_ledger_is_refused() {
        let build = |own: u64| {
            let mut built = Built::new();
            let command = built.command(true);
            built.settle(command, Execution::ReportedSuccess, CleanupState::Clean);
            built.verifier(true);
            let run = &mut built.ledger.verifiers;
            (run.flags[0], run.claim[0]) = (VerifierFlags::CLAIM.bits(), own);
            let tables = Tables::new(&built.ledger).expect("well-formed tables");
            History::build(&tables).map(|h| h.verifiers[0].claim)
        };
        assert_eq!(build(1), Ok(Some(0)));
        assert_eq!(build(2), Err("verifier 3 names claim 2, which is no earlier claim".into()));
        assert_eq!(build(4), Err("verifier 3 names claim 4, which is no earlier claim".into()));
    }
}
