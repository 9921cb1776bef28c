//! The evidence ledger's columns, read back and resolved once (see the WIT's
//! `evidence-ledger`): a `string-index` is a string of its string table, a
//! claim's scope and obligations consecutive runs of one table each, and the
//! log is the four record tables merged by position. Every resource is
//! interned to its location up front, and so is every scope entry and
//! obligation, so a claim's scope and obligations are slices of these tables:
//! nothing is allocated per claim.
//!
//! Everything is checked here, once, including what no rule reads (run ids,
//! incarnations, dependencies, roles): a column of the wrong length, an index
//! outside its table, a string end out of order or inside a character, a code
//! that is no case of its type refuses the ledger instead of reading the wrong
//! thing. After that, the accessors below index the checked columns without
//! failing; only [`Strings::get`] still checks its index, for the string
//! columns read where they are used.

use std::marker::PhantomData;

use effects_evaluator_sdk::code::Code;
use effects_evaluator_sdk::types::{
    CheckResult, ClaimFlags, ClaimTable, CleanupState, Coverage, EvidenceLedger, Execution, Impact,
    JobLifecycle, Mechanism, ObservationFlags, OutcomeFlags, PostconditionKind, ResourceFlags, ResourceRole,
    StringTable, VerifierFlags,
};

use crate::locations::{LocId, Locations};

/// What an obligation asserts (CL-2), its digest read from the ledger's text.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Postcondition<'a> {
    /// The complete content has this SHA-256.
    ContentSha256(&'a str),
    /// Nothing exists there.
    Absent,
    /// Something exists there.
    Exists,
}

/// An obligation with its target's location.
#[derive(Clone, Copy)]
pub struct Obligation<'a> {
    /// The target's location.
    pub target: LocId,
    /// What must hold there.
    pub postcondition: Postcondition<'a>,
}

/// Which table a record of the log is in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Record {
    /// `claims`.
    Claim,
    /// `outcomes`.
    Outcome,
    /// `observations`.
    Observation,
    /// `verifiers`.
    Verifier,
}

/// A `code` column whose every byte was checked to stand for a `T`.
#[derive(Clone, Copy)]
pub struct Column<'a, T> {
    codes: &'a [u8],
    of: PhantomData<T>,
}

/// Why entry `i` of the code column `what`, `code`, is refused.
fn no_case<T: Code>(what: &str, i: usize, code: u8) -> String {
    format!("{what}: entry {i} is {code}, which is no {}", T::NAME)
}

impl<'a, T: Code> Column<'a, T> {
    /// Checks that every byte of `codes` stands for a `T`.
    fn new(codes: &'a [u8], what: &str) -> Result<Self, String> {
        match codes.iter().position(|&code| T::from_code(code).is_none()) {
            Some(i) => Err(no_case::<T>(what, i, codes[i])),
            None => Ok(Column { codes, of: PhantomData }),
        }
    }

    /// Entry `i`.
    pub fn get(&self, i: usize) -> T {
        T::from_code(self.codes[i]).expect("checked by Column::new")
    }
}

/// The ledger's string table, its ends checked.
#[derive(Clone, Copy)]
pub struct Strings<'a> {
    text: &'a str,
    ends: &'a [u32],
}

/// The resolved tables of one ledger.
pub struct Tables<'a> {
    /// The ledger's columns, as they crossed the boundary.
    pub ledger: &'a EvidenceLedger,
    /// Its strings.
    pub strings: Strings<'a>,
    /// Every location the resources name, interned.
    pub locations: Locations<'a>,
    /// The log: which table each record is in, in position order.
    pub order: Vec<Record>,
    /// `claims.flags` (every code column is checked; these are the ones the
    /// rules read).
    pub claim_flags: Column<'a, ClaimFlags>,
    /// `concurrent`: other runs' claims still in flight (CMP-13, 2.1.0),
    /// resolved like `claims`; never part of [`Tables::order`].
    pub concurrent: ClaimRows<'a>,
    /// `outcomes.execution`.
    pub execution: Column<'a, Execution>,
    /// `outcomes.cleanup`.
    pub cleanup: Column<'a, CleanupState>,
    /// `outcomes.flags`.
    pub outcome_flags: Column<'a, OutcomeFlags>,
    /// `observations.mechanism`.
    pub mechanism: Column<'a, Mechanism>,
    /// `observations.coverage`.
    pub coverage: Column<'a, Coverage>,
    /// `observations.flags`.
    pub observation_flags: Column<'a, ObservationFlags>,
    /// `verifiers.result`.
    pub check_result: Column<'a, CheckResult>,
    /// `verifiers.flags`.
    pub verifier_flags: Column<'a, VerifierFlags>,
    /// Per resource, its location.
    resource_loc: Vec<LocId>,
    /// `claims`, resolved.
    claims: ClaimRows<'a>,
}

impl<'a> Strings<'a> {
    /// Checks that every end is in order, inside the text and on a character
    /// boundary, so every string can be read.
    fn new(table: &'a StringTable) -> Result<Self, String> {
        let text = table.text.as_str();
        let mut previous = 0u32;
        for (i, &end) in table.ends.iter().enumerate() {
            if end < previous || !text.is_char_boundary(end as usize) {
                return Err(format!(
                    "string {i} ends at byte {end}, before its start ({previous}), outside the ledger's \
                     text ({} bytes) or inside a character",
                    text.len()
                ));
            }
            previous = end;
        }
        Ok(Strings { text, ends: &table.ends })
    }

    /// String `index`.
    pub fn get(&self, index: u32) -> Result<&'a str, String> {
        let i = index as usize;
        let end = *self
            .ends
            .get(i)
            .ok_or_else(|| format!("string index {index} is out of range ({} strings)", self.ends.len()))?;
        let start = i.checked_sub(1).map_or(0, |p| self.ends[p]);
        // SAFETY: `Strings::new` checked that the ends never decrease and
        // that each is a character boundary of the text (so at most its
        // length); `start` is the previous end, or 0.
        Ok(unsafe { self.text.get_unchecked(start as usize..end as usize) })
    }

    /// Checks that every index of `column` names a string.
    fn check(&self, column: &[u32], what: &str) -> Result<(), String> {
        match column.iter().find(|&&i| i as usize >= self.ends.len()) {
            Some(bad) => {
                Err(format!("{what}: string index {bad} is out of range ({} strings)", self.ends.len()))
            }
            None => Ok(()),
        }
    }
}

/// The number of rows of a table whose columns are `columns`, or an error
/// naming the first column of another length.
fn rows(table: &str, columns: &[(&str, usize)]) -> Result<usize, String> {
    let rows = columns.first().map_or(0, |&(_, len)| len);
    match columns.iter().find(|&&(_, len)| len != rows) {
        Some((column, len)) => {
            Err(format!("{table}.{column} has {len} entries, but {table}.{} has {rows}", columns[0].0))
        }
        None => Ok(rows),
    }
}

/// Checks that `ends` cut `entries` entries into `rows` consecutive runs.
fn check_runs(ends: &[u32], rows: usize, entries: usize, what: &str) -> Result<(), String> {
    if ends.len() != rows {
        return Err(format!("{what} has {} ends for {rows} claims", ends.len()));
    }
    let mut previous = 0u32;
    for (i, &end) in ends.iter().enumerate() {
        if end < previous || end as usize > entries {
            return Err(format!(
                "{what}: claim {i}'s run ends at {end}, before its start ({previous}) or past the \
                 table's {entries} entries"
            ));
        }
        previous = end;
    }
    if previous as usize != entries {
        return Err(format!("{what}: the runs end at {previous}, but the table has {entries} entries"));
    }
    Ok(())
}

/// Row `i`'s run of `values`, given `ends` checked by [`check_runs`].
fn run<'t, T>(values: &'t [T], ends: &[u32], i: usize) -> &'t [T] {
    let start = i.checked_sub(1).map_or(0, |p| ends[p]);
    &values[start as usize..ends[i] as usize]
}

/// The location of resource `index`, given every resource's location.
fn loc_in(resource_loc: &[LocId], index: u32) -> Result<LocId, String> {
    resource_loc
        .get(index as usize)
        .copied()
        .ok_or_else(|| format!("resource index {index} is out of range ({} resources)", resource_loc.len()))
}

/// The log: the record tables merged by position, refusing a position that
/// is not after the one before it (within a table or across them).
fn merge(tables: [(&[u64], Record); 4]) -> Result<Vec<Record>, String> {
    let mut next = [0usize; 4];
    let total = tables.iter().map(|(positions, _)| positions.len()).sum();
    let mut order = Vec::with_capacity(total);
    let mut last: Option<u64> = None;
    for _ in 0..total {
        let mut pick: Option<(usize, u64)> = None;
        for (t, (positions, _)) in tables.iter().enumerate() {
            if let Some(&p) = positions.get(next[t])
                && pick.is_none_or(|(_, best)| p < best)
            {
                pick = Some((t, p));
            }
        }
        let (table, position) = pick.expect("a record is left");
        if let Some(last) = last.filter(|&last| position <= last) {
            return Err(format!("position {position} is not after {last} (positions must increase)"));
        }
        last = Some(position);
        next[table] += 1;
        order.push(tables[table].1);
    }
    Ok(order)
}

/// One claim table (`claims`, or `concurrent`), checked and resolved: its
/// flags, and each scope entry and obligation interned to its location.
pub struct ClaimRows<'a> {
    /// The table, as it crossed the boundary.
    pub table: &'a ClaimTable,
    /// `flags`.
    pub flags: Column<'a, ClaimFlags>,
    /// Per entry of `scope`, its resource's location.
    scope_loc: Vec<LocId>,
    /// Per entry of `obligations`, resolved.
    obligations: Vec<Obligation<'a>>,
}

impl<'a> ClaimRows<'a> {
    /// Checks the claim table `claims` (named `what` in messages) against
    /// the ledger's strings and resources.
    fn new(
        claims: &'a ClaimTable,
        what: &str,
        strings: &Strings<'a>,
        resource_loc: &[LocId],
    ) -> Result<Self, String> {
        let loc = |index: u32| loc_in(resource_loc, index);
        let claim_rows = rows(
            what,
            &[
                ("position", claims.position.len()),
                ("run-id", claims.run_id.len()),
                ("action-id", claims.action_id.len()),
                ("tool", claims.tool.len()),
                ("subject", claims.subject.len()),
                ("flags", claims.flags.len()),
            ],
        )?;
        for (column, name) in [
            (&claims.run_id, "run-id"),
            (&claims.action_id, "action-id"),
            (&claims.tool, "tool"),
            (&claims.subject, "subject"),
        ] {
            strings.check(column, &format!("{what}.{name}"))?;
        }
        check_runs(&claims.scope_ends, claim_rows, claims.scope.len(), &format!("{what}.scope-ends"))?;
        check_runs(
            &claims.dependency_ends,
            claim_rows,
            claims.dependencies.len(),
            &format!("{what}.dependency-ends"),
        )?;
        let duties = &claims.obligations;
        rows(
            &format!("{what}.obligations"),
            &[("target", duties.target.len()), ("kind", duties.kind.len()), ("digest", duties.digest.len())],
        )?;
        check_runs(
            &claims.obligation_ends,
            claim_rows,
            duties.target.len(),
            &format!("{what}.obligation-ends"),
        )?;
        let flags = Column::<ClaimFlags>::new(&claims.flags, &format!("{what}.flags"))?;
        for i in 0..claim_rows {
            if flags.get(i).contains(ClaimFlags::UNKNOWN_SCOPE)
                && !run(&claims.scope, &claims.scope_ends, i).is_empty()
            {
                return Err(format!("claim {}: an unknown scope with entries", claims.position[i]));
            }
        }
        // Filled entry by entry, not collected: collecting `Result`s cannot
        // know the length up front, and would grow (and copy) as it goes.
        let mut scope_loc = Vec::with_capacity(claims.scope.len());
        for &i in &claims.scope {
            scope_loc.push(loc(i)?);
        }
        claims.dependencies.iter().try_for_each(|&i| loc(i).map(drop))?;
        let kinds = Column::<PostconditionKind>::new(&duties.kind, &format!("{what}.obligations.kind"))?;
        let mut obligations = Vec::with_capacity(duties.target.len());
        for (i, (&target, &digest)) in duties.target.iter().zip(&duties.digest).enumerate() {
            let postcondition = match kinds.get(i) {
                PostconditionKind::ContentSha256 => Postcondition::ContentSha256(strings.get(digest)?),
                PostconditionKind::Absent => Postcondition::Absent,
                PostconditionKind::Exists => Postcondition::Exists,
            };
            obligations.push(Obligation { target: loc(target)?, postcondition });
        }
        Ok(ClaimRows { table: claims, flags, scope_loc, obligations })
    }

    /// Claim `i`'s exact scope, or `None` for an unknown one.
    pub fn scope(&self, i: usize) -> Option<&[LocId]> {
        let unknown = self.flags.get(i).contains(ClaimFlags::UNKNOWN_SCOPE);
        (!unknown).then(|| run(&self.scope_loc, &self.table.scope_ends, i))
    }

    /// Claim `i`'s obligations, in order.
    pub fn obligations(&self, i: usize) -> &[Obligation<'a>] {
        run(&self.obligations, &self.table.obligation_ends, i)
    }
}

/// Checks the resource table and interns every resource's location.
fn resources<'a>(
    ledger: &'a EvidenceLedger,
    strings: &Strings<'a>,
) -> Result<(Locations<'a>, Vec<LocId>), String> {
    let table = &ledger.resources;
    let n = rows(
        "resources",
        &[
            ("role", table.role.len()),
            ("location", table.location.len()),
            ("path", table.path.len()),
            ("incarnation", table.incarnation.len()),
            ("snapshot-sha256", table.snapshot_sha256.len()),
            ("flags", table.flags.len()),
        ],
    )?;
    strings.check(&table.incarnation, "resources.incarnation")?;
    Column::<ResourceRole>::new(&table.role, "resources.role")?;
    let flags = Column::<ResourceFlags>::new(&table.flags, "resources.flags")?;
    let mut locations = Locations::with_capacity(n);
    let roots: Vec<u32> = ledger.roots.iter().map(|root| locations.root(root)).collect();
    let mut resource_loc = Vec::with_capacity(n);
    // The last file's root index, path string and location: the next file on
    // the same string beneath the same root is the same location, found
    // without hashing its path again (the host repeats a path's string index
    // for adjacent resources on one path).
    let mut last_file: Option<(u32, u32, LocId)> = None;
    for i in 0..n {
        let (flags, at) = (flags.get(i), table.location[i]);
        resource_loc.push(if flags.contains(ResourceFlags::OTHER) {
            let other = table.others.get(at as usize).ok_or_else(|| {
                format!("resource {i}: other location {at} is out of range ({} others)", table.others.len())
            })?;
            locations.intern(other)
        } else {
            let path = table.path[i];
            match last_file {
                Some((last_at, last_path, loc)) if (last_at, last_path) == (at, path) => loc,
                _ => {
                    let root = *roots.get(at as usize).ok_or_else(|| {
                        format!("resource {i}: root index {at} is out of range ({} roots)", roots.len())
                    })?;
                    let loc = locations.intern_path(root, strings.get(path)?);
                    last_file = Some((at, path, loc));
                    loc
                }
            }
        });
        if flags.contains(ResourceFlags::SNAPSHOT) {
            strings.get(table.snapshot_sha256[i])?;
        }
    }
    Ok((locations, resource_loc))
}

impl<'a> Tables<'a> {
    /// Checks and resolves every table of `ledger`.
    pub fn new(ledger: &'a EvidenceLedger) -> Result<Self, String> {
        let strings = Strings::new(&ledger.strings)?;
        let (locations, resource_loc) = resources(ledger, &strings)?;
        let loc = |index: u32| loc_in(&resource_loc, index);

        let claims = ClaimRows::new(&ledger.claims, "claims", &strings, &resource_loc)?;
        // Other runs' claims (CMP-13), checked as strictly; their positions
        // are their own lineage's, so they stay out of the merged log.
        let concurrent = ClaimRows::new(&ledger.concurrent, "concurrent", &strings, &resource_loc)?;
        let claim_flags = claims.flags;

        let outcomes = &ledger.outcomes;
        rows(
            "outcomes",
            &[
                ("position", outcomes.position.len()),
                ("claim", outcomes.claim.len()),
                ("execution", outcomes.execution.len()),
                ("impact", outcomes.impact.len()),
                ("cleanup", outcomes.cleanup.len()),
                ("flags", outcomes.flags.len()),
            ],
        )?;
        let execution = Column::new(&outcomes.execution, "outcomes.execution")?;
        Column::<Impact>::new(&outcomes.impact, "outcomes.impact")?;
        let cleanup = Column::new(&outcomes.cleanup, "outcomes.cleanup")?;
        let outcome_flags = Column::new(&outcomes.flags, "outcomes.flags")?;

        let seen = &ledger.observations;
        rows(
            "observations",
            &[
                ("position", seen.position.len()),
                ("resource", seen.resource.len()),
                ("mechanism", seen.mechanism.len()),
                ("coverage", seen.coverage.len()),
                ("source-action", seen.source_action.len()),
                ("source-claim", seen.source_claim.len()),
                ("content-sha256", seen.content_sha256.len()),
                ("job-state", seen.job_state.len()),
                ("flags", seen.flags.len()),
            ],
        )?;
        seen.resource.iter().try_for_each(|&i| loc(i).map(drop))?;
        strings.check(&seen.source_action, "observations.source-action")?;
        let mechanism = Column::new(&seen.mechanism, "observations.mechanism")?;
        let coverage = Column::new(&seen.coverage, "observations.coverage")?;
        let observation_flags = Column::<ObservationFlags>::new(&seen.flags, "observations.flags")?;
        for i in 0..seen.flags.len() {
            let flags = observation_flags.get(i);
            if flags.contains(ObservationFlags::CONTENT_SHA256) {
                strings.get(seen.content_sha256[i])?;
            }
            let job_state = seen.job_state[i];
            if flags.contains(ObservationFlags::JOB_STATE) && JobLifecycle::from_code(job_state).is_none() {
                return Err(no_case::<JobLifecycle>("observations.job-state", i, job_state));
            }
        }

        let verifiers = &ledger.verifiers;
        rows(
            "verifiers",
            &[
                ("position", verifiers.position.len()),
                ("command", verifiers.command.len()),
                ("result", verifiers.result.len()),
                ("claim", verifiers.claim.len()),
                ("flags", verifiers.flags.len()),
            ],
        )?;
        strings.check(&verifiers.command, "verifiers.command")?;
        let check_result = Column::new(&verifiers.result, "verifiers.result")?;
        let verifier_flags = Column::<VerifierFlags>::new(&verifiers.flags, "verifiers.flags")?;
        ledger.required.iter().try_for_each(|&i| loc(i).map(drop))?;

        let order = merge([
            (&ledger.claims.position, Record::Claim),
            (&outcomes.position, Record::Outcome),
            (&seen.position, Record::Observation),
            (&verifiers.position, Record::Verifier),
        ])?;
        Ok(Tables {
            ledger,
            strings,
            locations,
            order,
            claim_flags,
            concurrent,
            execution,
            cleanup,
            outcome_flags,
            mechanism,
            coverage,
            observation_flags,
            check_result,
            verifier_flags,
            resource_loc,
            claims,
        })
    }

    /// The location of resource `index` (checked by [`Tables::new`] for every
    /// index the records hold).
    pub fn loc(&self, index: u32) -> LocId {
        self.resource_loc[index as usize]
    }

    /// Claim `i`'s exact scope, or `None` for an unknown one.
    pub fn scope(&self, i: usize) -> Option<&[LocId]> {
        self.claims.scope(i)
    }

    /// Claim `i`'s exact scope as resource indices (each entry's incarnation
    /// is the object its claim saw there: ID-3's aliases read it); empty for
    /// an unknown one.
    pub fn scope_resources(&self, i: usize) -> &'a [u32] {
        let claims = &self.ledger.claims;
        run(&claims.scope, &claims.scope_ends, i)
    }

    /// Claim `i`'s obligations, in order.
    pub fn obligations(&self, i: usize) -> &[Obligation<'a>] {
        self.claims.obligations(i)
    }

    /// The incarnation resource `index` was seen as.
    pub fn incarnation(&self, index: u32) -> &'a str {
        let string = self.ledger.resources.incarnation[index as usize];
        self.strings.get(string).expect("checked by Tables::new")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use effects_evaluator_sdk::types::{
        ClaimTable, CleanupState, Coverage, Execution, FilesystemRoot, Impact, Mechanism, ObligationTable,
        ObservationTable, OutcomeFlags, OutcomeTable, ResourceRole, ResourceTable, VerifierTable,
    };

    /// One file, `d/a.txt`, written (claim 1), settled (2) and read back (3);
    /// `history`'s tests start from it too.
    pub(crate) fn ledger() -> EvidenceLedger {
        let strings = ["d/a.txt", "1:2@", "run", "act", "write_file", "read"];
        let mut ends = Vec::new();
        let mut text = String::new();
        for s in strings {
            text.push_str(s);
            ends.push(text.len() as u32);
        }
        let root =
            FilesystemRoot { scope: "s".into(), owner: "o".into(), path: "/w".into(), device: 1, inode: 2 };
        EvidenceLedger {
            strings: StringTable { text, ends },
            roots: vec![root],
            resources: ResourceTable {
                role: vec![ResourceRole::Target as u8],
                location: vec![0],
                path: vec![0],
                incarnation: vec![1],
                snapshot_sha256: vec![0],
                flags: vec![ResourceFlags::empty().bits()],
                others: Vec::new(),
            },
            required: vec![0],
            claims: ClaimTable {
                position: vec![1],
                run_id: vec![2],
                action_id: vec![3],
                tool: vec![4],
                subject: vec![4],
                scope: vec![0],
                scope_ends: vec![1],
                dependencies: Vec::new(),
                dependency_ends: vec![0],
                obligations: ObligationTable {
                    target: vec![0],
                    kind: vec![PostconditionKind::Exists as u8],
                    digest: vec![0],
                },
                obligation_ends: vec![1],
                flags: vec![ClaimFlags::empty().bits()],
            },
            outcomes: OutcomeTable {
                position: vec![2],
                claim: vec![1],
                execution: vec![Execution::ReportedSuccess as u8],
                impact: vec![Impact::Possible as u8],
                cleanup: vec![CleanupState::NotApplicable as u8],
                flags: vec![OutcomeFlags::empty().bits()],
            },
            observations: ObservationTable {
                position: vec![3],
                resource: vec![0],
                mechanism: vec![Mechanism::FilesystemRead as u8],
                coverage: vec![Coverage::Complete as u8],
                source_action: vec![5],
                source_claim: vec![0],
                content_sha256: vec![0],
                job_state: vec![0],
                flags: vec![ObservationFlags::EXISTS.bits()],
            },
            verifiers: VerifierTable {
                position: Vec::new(),
                command: Vec::new(),
                result: Vec::new(),
                claim: Vec::new(),
                flags: Vec::new(),
            },
            answer: String::new(),
            concurrent: ClaimTable::default(),
        }
    }

    /// `d/a.txt` (required), built record by record, each at the next
    /// position: for the rules' tests. Claims name tool `write_file` or
    /// `bash`, reads `read`, verifiers `cargo test`.
    pub(crate) struct Built {
        pub(crate) ledger: EvidenceLedger,
        next: u64,
    }

    impl Built {
        pub(crate) fn new() -> Self {
            let mut ledger = ledger();
            let strings = &mut ledger.strings;
            for s in ["bash", "cargo test"] {
                strings.text.push_str(s);
                strings.ends.push(strings.text.len() as u32);
            }
            ledger.claims = ClaimTable::default();
            let o = &mut ledger.outcomes;
            for column in [&mut o.position, &mut o.claim] {
                column.clear();
            }
            for column in [&mut o.execution, &mut o.impact, &mut o.cleanup, &mut o.flags] {
                column.clear();
            }
            let seen = &mut ledger.observations;
            for column in [&mut seen.position, &mut seen.source_claim] {
                column.clear();
            }
            for column in [&mut seen.resource, &mut seen.source_action, &mut seen.content_sha256] {
                column.clear();
            }
            for column in [&mut seen.mechanism, &mut seen.coverage, &mut seen.job_state, &mut seen.flags] {
                column.clear();
            }
            Built { ledger, next: 0 }
        }

        fn position(&mut self) -> u64 {
            self.next += 1;
            self.next
        }

        fn claim(&mut self, tool: u32, scope: &[u32], flags: ClaimFlags) -> u64 {
            let position = self.position();
            let c = &mut self.ledger.claims;
            c.position.push(position);
            c.run_id.push(2);
            c.action_id.push(3);
            c.tool.push(tool);
            c.subject.push(tool);
            c.scope.extend_from_slice(scope);
            c.scope_ends.push(c.scope.len() as u32);
            c.dependency_ends.push(0);
            for &target in scope {
                c.obligations.target.push(target);
                c.obligations.kind.push(PostconditionKind::Exists as u8);
                c.obligations.digest.push(0);
            }
            c.obligation_ends.push(c.obligations.target.len() as u32);
            c.flags.push(flags.bits());
            position
        }

        /// A write of `d/a.txt` that must leave it existing.
        pub(crate) fn write(&mut self) -> u64 {
            self.claim(4, &[0], ClaimFlags::empty())
        }

        /// An unknown-scope command, with the `processes` flag if asked.
        pub(crate) fn command(&mut self, processes: bool) -> u64 {
            let flags = if processes { ClaimFlags::PROCESSES } else { ClaimFlags::empty() };
            self.claim(6, &[], ClaimFlags::UNKNOWN_SCOPE | flags)
        }

        /// An outcome of `claim`.
        pub(crate) fn settle(&mut self, claim: u64, execution: Execution, cleanup: CleanupState) -> u64 {
            let position = self.position();
            let impact =
                if matches!(execution, Execution::NotExecuted) { Impact::None } else { Impact::Possible };
            let o = &mut self.ledger.outcomes;
            o.position.push(position);
            o.claim.push(claim);
            o.execution.push(execution as u8);
            o.impact.push(impact as u8);
            o.cleanup.push(cleanup as u8);
            o.flags.push(OutcomeFlags::empty().bits());
            position
        }

        /// A COMPLETE read of `d/a.txt` that finds it.
        pub(crate) fn read(&mut self) -> u64 {
            let position = self.position();
            let seen = &mut self.ledger.observations;
            seen.position.push(position);
            seen.resource.push(0);
            seen.mechanism.push(Mechanism::FilesystemRead as u8);
            seen.coverage.push(Coverage::Complete as u8);
            seen.source_action.push(5);
            seen.source_claim.push(0);
            seen.content_sha256.push(0);
            seen.job_state.push(0);
            seen.flags.push(ObservationFlags::EXISTS.bits());
            position
        }

        /// A verifier run with no link to its own claim.
        pub(crate) fn verifier(&mut self, passed: bool) -> u64 {
            let result = if passed { CheckResult::Passed } else { CheckResult::Failed };
            let position = self.position();
            let run = &mut self.ledger.verifiers;
            run.position.push(position);
            run.command.push(7);
            run.result.push(result as u8);
            run.claim.push(0);
            run.flags.push(VerifierFlags::empty().bits());
            position
        }
    }

    fn refusal(ledger: &EvidenceLedger) -> String {
        Tables::new(ledger).err().expect("the ledger is refused")
    }

    #[test]
    fn a_well_formed_ledger_resolves_and_merges_by_position() {
        let ledger = ledger();
        let tables = Tables::new(&ledger).expect("a well-formed ledger");
        let loc = tables.loc(0);
        assert_eq!(tables.locations.name(loc), "d/a.txt");
        assert_eq!(tables.scope(0), Some(&[loc][..]));
        assert!(matches!(tables.obligations(0), [Obligation { postcondition: Postcondition::Exists, .. }]));
        assert_eq!(tables.incarnation(0), "1:2@");
        assert_eq!(tables.order, [Record::Claim, Record::Outcome, Record::Observation]);
        assert!(crate::evaluate(&ledger).is_ok());
    }

    #[test]
    fn a_repeated_path_string_is_the_same_location_beneath_the_same_root_only() {
        let mut ledger = ledger();
        let mut other_root = ledger.roots[0].clone();
        other_root.device = 9;
        ledger.roots.push(other_root);
        // Resource 1 repeats resource 0's root and path string; resource 2
        // the path string beneath the other root; resource 3 is back on the
        // first root, after resource 2.
        let table = &mut ledger.resources;
        for root in [0, 1, 0] {
            table.location.push(root);
            for column in [&mut table.role, &mut table.flags] {
                column.push(column[0]);
            }
            for column in [&mut table.path, &mut table.incarnation, &mut table.snapshot_sha256] {
                column.push(column[0]);
            }
        }
        let tables = Tables::new(&ledger).expect("well-formed tables");
        let [a, again, elsewhere, back] = [0, 1, 2, 3].map(|i| tables.loc(i));
        assert_eq!(again, a);
        assert_ne!(elsewhere, a, "the same path beneath another root is another location");
        assert_eq!(back, a, "found again by hashing, after another root's file");
    }

    #[test]
    fn an_unknown_scope_is_none_and_must_have_no_entries() {
        let mut unknown = ledger();
        unknown.claims.flags[0] = ClaimFlags::UNKNOWN_SCOPE.bits();
        (unknown.claims.scope, unknown.claims.scope_ends) = (Vec::new(), vec![0]);
        unknown.claims.obligations =
            ObligationTable { target: Vec::new(), kind: Vec::new(), digest: Vec::new() };
        unknown.claims.obligation_ends = vec![0];
        assert_eq!(Tables::new(&unknown).expect("well-formed").scope(0), None);
        let mut both = ledger();
        both.claims.flags[0] = ClaimFlags::UNKNOWN_SCOPE.bits();
        assert!(refusal(&both).contains("an unknown scope with entries"));
    }

    #[test]
    fn a_string_end_out_of_order_outside_the_text_or_inside_a_character_is_refused() {
        let mut backwards = ledger();
        backwards.strings.ends.swap(0, 1);
        assert!(refusal(&backwards).contains("string 1 ends at byte 7, before its start"));
        let mut past_end = ledger();
        *past_end.strings.ends.last_mut().unwrap() += 1;
        assert!(refusal(&past_end).contains("outside the ledger's text"));
        let mut split = ledger();
        split.strings.text.push('é');
        split.strings.ends.push(split.strings.text.len() as u32 - 1);
        assert!(refusal(&split).contains("inside a character"));
    }

    #[test]
    fn other_runs_claims_are_resolved_apart_from_the_log_and_checked_as_strictly() {
        // Another run's claim on the same file, at a position of its own
        // lineage that equals this run's claim's: never merged by position.
        let mut ledger = ledger();
        ledger.concurrent = ledger.claims.clone();
        let tables = Tables::new(&ledger).expect("a well-formed ledger with another run in flight");
        assert_eq!(tables.concurrent.scope(0), Some(&[tables.loc(0)][..]));
        assert!(matches!(
            tables.concurrent.obligations(0),
            [Obligation { postcondition: Postcondition::Exists, .. }]
        ));
        assert_eq!(tables.order, [Record::Claim, Record::Outcome, Record::Observation]);
        let mut out_of_range = ledger.clone();
        out_of_range.concurrent.scope = vec![7];
        assert!(refusal(&out_of_range).contains("resource index 7 is out of range"));
        let mut short = ledger;
        short.concurrent.flags.clear();
        assert!(refusal(&short).contains("concurrent.flags has 0 entries"));
    }

    #[test]
    fn an_index_no_rule_reads_is_still_checked() {
        let mut run_id = ledger();
        run_id.claims.run_id[0] = 99;
        assert!(refusal(&run_id).contains("claims.run-id: string index 99 is out of range"));
        let mut incarnation = ledger();
        incarnation.resources.incarnation[0] = 6;
        assert!(refusal(&incarnation).contains("resources.incarnation"));
        let mut dependency = ledger();
        dependency.claims.dependencies = vec![4];
        dependency.claims.dependency_ends = vec![1];
        assert!(refusal(&dependency).contains("resource index 4 is out of range"));
        let mut root = ledger();
        root.resources.location[0] = 3;
        assert!(refusal(&root).contains("root index 3"));
        let mut other = ledger();
        other.resources.flags[0] = ResourceFlags::OTHER.bits();
        assert!(refusal(&other).contains("other location 0 is out of range (0 others)"));
    }

    #[test]
    fn a_code_that_is_no_case_or_sets_an_unknown_bit_is_refused() {
        let mut mechanism = ledger();
        mechanism.observations.mechanism[0] = 8;
        assert!(refusal(&mechanism).contains("observations.mechanism: entry 0 is 8, which is no mechanism"));
        let mut role = ledger();
        role.resources.role[0] = 5;
        assert!(refusal(&role).contains("resources.role: entry 0 is 5, which is no resource-role"));
        let mut bits = ledger();
        bits.claims.flags[0] = 1 << 6;
        assert!(refusal(&bits).contains("claims.flags: entry 0 is 64, which is no claim-flags"));
        // A second observation, at 4, with a job state that is no case.
        let mut job = ledger();
        let seen = &mut job.observations;
        seen.position.push(4);
        for column in [&mut seen.resource, &mut seen.source_action, &mut seen.content_sha256] {
            column.push(column[0]);
        }
        for column in [&mut seen.mechanism, &mut seen.coverage, &mut seen.flags] {
            column.push(column[0]);
        }
        seen.source_claim.push(0);
        seen.job_state.push(4);
        assert!(Tables::new(&job).is_ok(), "job-state is not read without its flag");
        job.observations.flags[1] |= ObservationFlags::JOB_STATE.bits();
        assert!(refusal(&job).contains("observations.job-state: entry 1 is 4, which is no job-lifecycle"));
    }

    #[test]
    fn columns_of_different_lengths_and_runs_that_do_not_tile_are_refused() {
        let mut short = ledger();
        short.observations.coverage.clear();
        assert!(
            refusal(&short).contains("observations.coverage has 0 entries, but observations.position has 1")
        );
        let mut gap = ledger();
        gap.claims.scope.push(0);
        assert!(refusal(&gap).contains("claims.scope-ends: the runs end at 1, but the table has 2 entries"));
        let mut past = ledger();
        past.claims.obligation_ends = vec![2];
        assert!(refusal(&past).contains("past the table's 1 entries"));
        let mut missing = ledger();
        missing.claims.dependency_ends.clear();
        assert!(refusal(&missing).contains("claims.dependency-ends has 0 ends for 1 claims"));
    }

    #[test]
    fn positions_must_increase_within_and_across_tables() {
        let mut last = ledger();
        last.observations.position[0] = u64::MAX;
        let order = Tables::new(&last).expect("the largest position is a position").order;
        assert_eq!(order, [Record::Claim, Record::Outcome, Record::Observation]);
        let mut equal = ledger();
        equal.observations.position[0] = 2;
        assert!(refusal(&equal).contains("position 2 is not after 2"));
        let mut backwards = ledger();
        backwards.outcomes.position = vec![2, 1];
        backwards.outcomes.claim = vec![1, 1];
        let outcomes = &mut backwards.outcomes;
        for column in
            [&mut outcomes.execution, &mut outcomes.impact, &mut outcomes.cleanup, &mut outcomes.flags]
        {
            column.push(column[0]);
        }
        assert!(refusal(&backwards).contains("position 1 is not after"));
    }
}
