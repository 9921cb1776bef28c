//! The one module that holds generated bindings, one generation per contract
//! version the host speaks (`effects:policy@2.1.0` from `wit/policy.wit`,
//! `effects:policy@2.0.0` from the frozen `wit/2.0.0/policy.wit`), and the
//! explicit conversions between them and the crate's own [`crate::model`]
//! types. Nothing generated is re-exported: the rest of the host sees only
//! model types, and this file is where the WIT and the model are kept in step
//! (a field added to one and not the other fails to compile here).
//!
//! Directions follow the contract: the host sends operations, facts, contexts
//! (which carry [`ResourceRef`]s) and evidence ledgers (which carry the same
//! resources laid out as columns) to guests; guests send back plans,
//! outcomes, readback requests and decisions, which carry only indices. There is
//! deliberately no conversion from a guest value into a `ResourceRef` (ID-1).
//!
//! Versions: every conversion is written once, in the `conversions!` macro,
//! and expanded per generation of the types (2.1.0 and 2.0.0 for wasmtime, and
//! 2.1.0 for the natively compiled evaluator's wit-bindgen types), each
//! expansion told which 2.1.0 additions its types have. A macro rather than
//! converting 2.0.0 values through 2.1.0 ones: wasmtime checks a component's
//! types exactly, so the two generations are distinct Rust types whichever way,
//! and a macro costs no second copy of a ledger's columns on the way in. Both
//! versions meet the same model:
//! - a 2.1.0 `postcondition.content` is hashed here (SHA-256) into the model's
//!   `ContentSha256`, so the log, the ledger and a plan handed back to `settle`
//!   carry the digest as before; a 2.0.0 classifier simply never returns bytes;
//! - the reason codes 2.1.0 added have no 2.0.0 case, so a 2.0.0 evaluator
//!   cannot give them;
//! - `EvidenceLedger::concurrent` (other runs' claims in flight, CMP-13) is laid
//!   out only for 2.1.0: **a 2.0.0 evaluator cannot see other runs**.

use crate::model;

/// Both worlds of the contract in `$wit`, generated: `classifier`, and
/// `evaluator` sharing its `types`.
macro_rules! contract_bindings {
    ($wit:literal) => {
        pub(crate) mod classifier {
            //! The classifier world.
            wasmtime::component::bindgen!({ path: $wit, world: "classifier" });
        }

        pub(crate) mod evaluator {
            //! The evaluator world, sharing the classifier's `types`.
            wasmtime::component::bindgen!({
                path: $wit,
                world: "evaluator",
                with: { "effects:policy/types": super::classifier::exports::effects::policy::types },
            });
        }
    };
}

pub(crate) mod v2_1 {
    //! Generated: `effects:policy@2.1.0`, the contract components are built for.
    contract_bindings!("../wit/policy.wit");
}

pub(crate) mod v2_0 {
    //! Generated: `effects:policy@2.0.0`, frozen, for components built before
    //! 2.1.0 (SPEC revision 3, POL-1).
    contract_bindings!("../wit/2.0.0/policy.wit");
}

/// Host -> guest: build the generated value from a borrowed model value.
pub(crate) trait ToGuest<T> {
    fn to_guest(&self) -> T;
}

/// Guest -> host: turn a generated value into the model value.
pub(crate) trait IntoModel<T> {
    fn into_model(self) -> T;
}

/// Guest -> host for a whole answer: how many bytes of it the host does work
/// on while lifting it, so the answer cap can refuse them before that work,
/// then the model value.
pub(crate) trait Lift<T> {
    /// Bytes of content the host hashes while lifting (2.1.0's
    /// `postcondition.content`); they count towards the answer cap.
    fn content_bytes(&self) -> usize {
        0
    }

    /// The model value.
    fn lift(self) -> T;
}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl ToGuest<$t> for $t {
            fn to_guest(&self) -> $t { self.clone() }
        }
        impl IntoModel<$t> for $t {
            fn into_model(self) -> $t { self }
        }
    )*};
}
scalar!(String, bool, u8, u32, u64, i32);

impl<A: ToGuest<B>, B> ToGuest<Vec<B>> for Vec<A> {
    fn to_guest(&self) -> Vec<B> {
        self.iter().map(ToGuest::to_guest).collect()
    }
}

impl<A: IntoModel<B>, B> IntoModel<Vec<B>> for Vec<A> {
    fn into_model(self) -> Vec<B> {
        self.into_iter().map(IntoModel::into_model).collect()
    }
}

impl<A: ToGuest<B>, B> ToGuest<Option<B>> for Option<A> {
    fn to_guest(&self) -> Option<B> {
        self.as_ref().map(ToGuest::to_guest)
    }
}

impl<A: IntoModel<B>, B> IntoModel<Option<B>> for Option<A> {
    fn into_model(self) -> Option<B> {
        self.map(IntoModel::into_model)
    }
}

/// A record whose fields have the same names on both sides; `to` and/or `from`
/// say which directions exist.
macro_rules! record {
    (to $model:ident { $($field:ident),* $(,)? }) => {
        impl ToGuest<wit::$model> for model::$model {
            fn to_guest(&self) -> wit::$model {
                wit::$model { $($field: self.$field.to_guest()),* }
            }
        }
    };
    (from $model:ident { $($field:ident),* $(,)? }) => {
        impl IntoModel<model::$model> for wit::$model {
            fn into_model(self) -> model::$model {
                model::$model { $($field: self.$field.into_model()),* }
            }
        }
    };
    (both $model:ident { $($field:ident),* $(,)? }) => {
        record!(to $model { $($field),* });
        record!(from $model { $($field),* });
    };
}

/// An enum of unit cases with the same names on both sides, both directions
/// (`from`: guest -> host only, for an enum a guest can have fewer cases of).
macro_rules! unit_enum {
    (from $model:ident { $($case:ident),* $(,)? }) => {
        impl IntoModel<model::$model> for wit::$model {
            fn into_model(self) -> model::$model {
                match self { $(wit::$model::$case => model::$model::$case),* }
            }
        }
    };
    ($model:ident { $($case:ident),* $(,)? }) => {
        impl ToGuest<wit::$model> for model::$model {
            fn to_guest(&self) -> wit::$model {
                match self { $(model::$model::$case => wit::$model::$case),* }
            }
        }
        impl IntoModel<model::$model> for wit::$model {
            fn into_model(self) -> model::$model {
                match self { $(wit::$model::$case => model::$model::$case),* }
            }
        }
    };
}

/// A model enum's ledger `code` through `wit::$wit`: the index of its case in
/// the WIT's declaration, which is how both bindings number their `repr(u8)`
/// enums (the evaluator SDK's `code` tests pin its side).
macro_rules! code {
    ($wit:ident, $value:expr) => {{
        let case: wit::$wit = $value.to_guest();
        case as u8
    }};
}

/// A whole answer whose lifting is its conversion.
macro_rules! lift {
    ($($wit:ty => $model:ty),* $(,)?) => {$(
        impl Lift<$model> for $wit {
            fn lift(self) -> $model {
                self.into_model()
            }
        }
    )*};
}

/// Every conversion between the model and one generation of the WIT types,
/// `wit` being that generation's `types` module at the expansion site. Expanded
/// per generation: wasmtime's host bindings of each contract version
/// (components) and wit-bindgen's guest types (the evaluator compiled
/// natively), so all stay in step with the model. What 2.1.0 added is named
/// by the expansion: `content` (the postcondition case of derived bytes),
/// `concurrent` (the ledger's table of other runs' claims) and the reason
/// codes after the 2.0.0 ones; an expansion without them is 2.0.0's.
macro_rules! conversions {
    (
        $(content: $content:ident,)?
        $(concurrent: $concurrent:ident,)?
        reasons: [$($reason:ident),* $(,)?] $(,)?
    ) => {
        // Resources: host -> guest only.
        record!(to FilesystemRoot { scope, owner, path, device, inode });
        record!(to FilesystemLocation { root, path });
        record!(to ProcessLocation { namespace, owner, request, thread, pid, start_token });
        record!(to OwnedLocation { namespace, owner, thread, collection, record });
        record!(to ExternalLocation { namespace, owner, endpoint, server, tool });
        record!(to BrowserLocation { owner, thread, session_key });
        record!(to JobLocation { job_id, generation });
        unit_enum!(ResourceRole { Target, Source, SearchRoot, Dependency, Executor });

        impl ToGuest<wit::Location> for model::Location {
            fn to_guest(&self) -> wit::Location {
                use model::Location as M;
                match self {
                    M::Filesystem(l) => wit::Location::Filesystem(l.to_guest()),
                    M::Process(l) => wit::Location::Process(l.to_guest()),
                    M::ProcessLaunch(generation) => wit::Location::ProcessLaunch(*generation),
                    M::BackgroundJob(l) => wit::Location::BackgroundJob(l.to_guest()),
                    M::Owned(l) => wit::Location::Owned(l.to_guest()),
                    M::External(l) => wit::Location::External(l.to_guest()),
                    M::BrowserSession(l) => wit::Location::BrowserSession(l.to_guest()),
                }
            }
        }

        impl ToGuest<wit::ResourceRef> for ResourceRef {
            fn to_guest(&self) -> wit::ResourceRef {
                wit::ResourceRef {
                    role: self.role().to_guest(),
                    location: self.location().to_guest(),
                    incarnation: self.incarnation().to_owned(),
                    snapshot_sha256: self.snapshot_sha256().map(str::to_owned),
                }
            }
        }

        // Operations.
        record!(to Binding { name, resource });
        record!(to BoundPreState { binding, state });
        record!(to BoundOperation {
            tool, action, request_id, input_json, input_sha256, bindings, pre_states, producer_bound,
        });

        impl ToGuest<wit::PreState> for model::PreState {
            fn to_guest(&self) -> wit::PreState {
                use model::PreState as M;
                match self {
                    M::Absent => wit::PreState::Absent,
                    M::Content(bytes) => wit::PreState::Content(bytes.clone()),
                    M::Directory => wit::PreState::Directory,
                    M::Oversized(size) => wit::PreState::Oversized(*size),
                    M::Unreadable(why) => wit::PreState::Unreadable(why.clone()),
                }
            }
        }

        // Plans: both directions (a plan comes back from classify, goes into settle).
        record!(both PlannedObligation { target, postcondition });
        record!(both ClaimPlan { scope, dependencies, obligations, external });

        impl ToGuest<wit::Postcondition> for model::Postcondition {
            fn to_guest(&self) -> wit::Postcondition {
                match self {
                    model::Postcondition::ContentSha256(d) => wit::Postcondition::ContentSha256(d.clone()),
                    model::Postcondition::Absent => wit::Postcondition::Absent,
                    model::Postcondition::Exists => wit::Postcondition::Exists,
                }
            }
        }

        impl IntoModel<model::Postcondition> for wit::Postcondition {
            fn into_model(self) -> model::Postcondition {
                match self {
                    wit::Postcondition::ContentSha256(d) => model::Postcondition::ContentSha256(d),
                    wit::Postcondition::Absent => model::Postcondition::Absent,
                    wit::Postcondition::Exists => model::Postcondition::Exists,
                    // 2.1.0: the bytes a policy derived, hashed by the host
                    // into the obligation it records (the answer cap has
                    // measured them first: `Lift::content_bytes`).
                    $(wit::Postcondition::$content(bytes) => model::Postcondition::ContentSha256(
                        crate::digest::Sha256Digest::of(&bytes).to_string(),
                    ),)?
                }
            }
        }

        /// Bytes of content a postcondition carries for the host to hash.
        fn content_len(postcondition: &wit::Postcondition) -> usize {
            match postcondition {
                $(wit::Postcondition::$content(bytes) => bytes.len(),)?
                wit::Postcondition::ContentSha256(_) | wit::Postcondition::Absent | wit::Postcondition::Exists => 0,
            }
        }

        impl ToGuest<wit::PlannedScope> for model::PlannedScope {
            fn to_guest(&self) -> wit::PlannedScope {
                match self {
                    model::PlannedScope::Unknown => wit::PlannedScope::Unknown,
                    model::PlannedScope::Exact(bindings) => wit::PlannedScope::Exact(bindings.clone()),
                }
            }
        }

        impl IntoModel<model::PlannedScope> for wit::PlannedScope {
            fn into_model(self) -> model::PlannedScope {
                match self {
                    wit::PlannedScope::Unknown => model::PlannedScope::Unknown,
                    wit::PlannedScope::Exact(bindings) => model::PlannedScope::Exact(bindings),
                }
            }
        }

        impl Lift<model::Classification> for wit::Classification {
            fn content_bytes(&self) -> usize {
                match self {
                    wit::Classification::Effect(plan) => {
                        plan.obligations.iter().map(|o| content_len(&o.postcondition)).sum()
                    }
                    wit::Classification::ReadOnly | wit::Classification::Refused(_) => 0,
                }
            }

            fn lift(self) -> model::Classification {
                self.into_model()
            }
        }

        impl IntoModel<model::Classification> for wit::Classification {
            fn into_model(self) -> model::Classification {
                match self {
                    wit::Classification::Effect(plan) => model::Classification::Effect(plan.into_model()),
                    wit::Classification::ReadOnly => model::Classification::ReadOnly,
                    wit::Classification::Refused(why) => model::Classification::Refused(why),
                }
            }
        }

        // Facts and outcomes.
        unit_enum!(JobLifecycle { Running, Exited, Killed, Lost });
        unit_enum!(Execution {
            NotExecuted,
            ReportedSuccess,
            Failed,
            TimedOut,
            Cancelled,
            Running,
            Interrupted,
            Unknown,
        });
        unit_enum!(CheckResult { Passed, Failed, Incomplete });
        unit_enum!(Impact { None, Possible });
        unit_enum!(CleanupState { NotApplicable, Clean, Failed, Unknown });
        unit_enum!(Mechanism {
            FilesystemRead,
            FilesystemStat,
            OwnedRead,
            RemoteReadback,
            JobState,
            ProcessOwnership,
            BrowserSession,
            Receipt,
        });
        unit_enum!(Coverage { Complete, Partial });
        record!(to ProducerFacts {
            executed, exit_code, timed_out, teardown_dead, background_job_id, mutation_attempted,
            detached, remote_acknowledged, job_state, cancelled,
        });
        record!(both Outcome { execution, impact, cleanup, replayed, remote_acknowledged, detached });
        record!(to SettleRequest { operation, plan, facts });
        record!(from ReadbackRequest { binding, mechanism, coverage });
        record!(to ReadbackContext { operation, outcome });
        lift!(
            wit::Outcome => model::Outcome,
            Vec<wit::ReadbackRequest> => Vec<model::ReadbackRequest>,
            wit::Decision => Result<model::Decision, String>,
        );

        // The evidence ledger: host -> guest, as the WIT's columns.
        impl ToGuest<wit::EvidenceLedger> for model::EvidenceLedger {
            fn to_guest(&self) -> wit::EvidenceLedger {
                let mut layout = Layout::new(self);
                for resource in &self.resources {
                    layout.resource(resource);
                }
                for record in &self.records {
                    layout.record(record);
                }
                // 2.1.0: other runs' claims in flight (CMP-13), in their own
                // table; a 2.0.0 ledger has none (its evaluator cannot see them).
                $(for claim in &self.$concurrent {
                    layout.claim(claim, |ledger| &mut ledger.$concurrent);
                })?
                layout.ledger
            }
        }

        /// An empty claim table with room for `sizes`.
        fn claim_table(sizes: &ClaimSizes) -> wit::ClaimTable {
            wit::ClaimTable {
                position: Vec::with_capacity(sizes.claims),
                run_id: Vec::with_capacity(sizes.claims),
                action_id: Vec::with_capacity(sizes.claims),
                tool: Vec::with_capacity(sizes.claims),
                subject: Vec::with_capacity(sizes.claims),
                scope: Vec::with_capacity(sizes.scope),
                scope_ends: Vec::with_capacity(sizes.claims),
                dependencies: Vec::with_capacity(sizes.dependencies),
                dependency_ends: Vec::with_capacity(sizes.claims),
                obligations: wit::ObligationTable {
                    target: Vec::with_capacity(sizes.obligations),
                    kind: Vec::with_capacity(sizes.obligations),
                    digest: Vec::with_capacity(sizes.obligations),
                },
                obligation_ends: Vec::with_capacity(sizes.claims),
                flags: Vec::with_capacity(sizes.claims),
            }
        }

        /// The evidence ledger being laid out as the WIT's columns: strings
        /// appended to its string table, each record to its kind's table, roots
        /// once each.
        struct Layout<'m> {
            ledger: wit::EvidenceLedger,
            roots: Vec<&'m model::FilesystemRoot>,
            /// Per repeating column, the string it laid out last and its index.
            last: [Option<(&'m str, u32)>; 4],
        }

        /// The columns whose strings often equal the one before them: a
        /// write's target and its readback are adjacent resources on one path,
        /// and a run's claims share its run id and often a tool. Such a string
        /// is laid out once and its index repeated, which also lets the guest
        /// see an unchanged path without hashing it again.
        #[derive(Clone, Copy)]
        enum Repeating {
            Path,
            RunId,
            Tool,
            Subject,
        }

        impl<'m> Layout<'m> {
            fn new(model: &model::EvidenceLedger) -> Self {
                use model::EvidenceRecord as M;
                // Sized in one pass, so no table grows while it is filled: the
                // tables exactly, the text and the string ends at most (a
                // missing snapshot or digest adds no string, a repeated path,
                // run id or tool neither string nor text). Fresh pages cost,
                // so the text, the largest, is reserved for no more than that.
                let resources = model.resources.len();
                let (mut outcomes, mut observations, mut verifiers) = (0, 0, 0);
                let (mut strings, mut text) = (3 * resources, 0);
                for resource in &model.resources {
                    if let model::Location::Filesystem(file) = resource.location() {
                        text += file.path.len();
                    }
                    text += resource.incarnation().len() + resource.snapshot_sha256().map_or(0, str::len);
                }
                let mut own = ClaimSizes::default();
                for record in &model.records {
                    match record {
                        M::Claim(c) => own.add(c),
                        M::Outcome(_) => outcomes += 1,
                        M::Observation(o) => {
                            observations += 1;
                            strings += 2;
                            text += o.source_action.len() + o.content_sha256.as_ref().map_or(0, String::len);
                        }
                        M::Verifier(v) => {
                            verifiers += 1;
                            strings += 1;
                            text += v.command.len();
                        }
                    }
                }
                (strings, text) = (strings + own.strings, text + own.text);
                $(
                    let mut $concurrent = ClaimSizes::default();
                    model.$concurrent.iter().for_each(|c| $concurrent.add(c));
                    (strings, text) = (strings + $concurrent.strings, text + $concurrent.text);
                )?
                let ledger = wit::EvidenceLedger {
                    strings: wit::StringTable {
                        text: String::with_capacity(text),
                        ends: Vec::with_capacity(strings),
                    },
                    roots: Vec::new(),
                    resources: wit::ResourceTable {
                        role: Vec::with_capacity(resources),
                        location: Vec::with_capacity(resources),
                        path: Vec::with_capacity(resources),
                        incarnation: Vec::with_capacity(resources),
                        snapshot_sha256: Vec::with_capacity(resources),
                        flags: Vec::with_capacity(resources),
                        others: Vec::new(),
                    },
                    required: model.required.clone(),
                    claims: claim_table(&own),
                    outcomes: wit::OutcomeTable {
                        position: Vec::with_capacity(outcomes),
                        claim: Vec::with_capacity(outcomes),
                        execution: Vec::with_capacity(outcomes),
                        impact: Vec::with_capacity(outcomes),
                        cleanup: Vec::with_capacity(outcomes),
                        flags: Vec::with_capacity(outcomes),
                    },
                    observations: wit::ObservationTable {
                        position: Vec::with_capacity(observations),
                        resource: Vec::with_capacity(observations),
                        mechanism: Vec::with_capacity(observations),
                        coverage: Vec::with_capacity(observations),
                        source_action: Vec::with_capacity(observations),
                        source_claim: Vec::with_capacity(observations),
                        content_sha256: Vec::with_capacity(observations),
                        job_state: Vec::with_capacity(observations),
                        flags: Vec::with_capacity(observations),
                    },
                    verifiers: wit::VerifierTable {
                        position: Vec::with_capacity(verifiers),
                        command: Vec::with_capacity(verifiers),
                        result: Vec::with_capacity(verifiers),
                        claim: Vec::with_capacity(verifiers),
                        flags: Vec::with_capacity(verifiers),
                    },
                    answer: model.answer.clone(),
                    $($concurrent: claim_table(&$concurrent),)?
                };
                Layout { ledger, roots: Vec::new(), last: [None; 4] }
            }

            /// Appends `text` to the string table; its index.
            fn string(&mut self, text: &str) -> u32 {
                let strings = &mut self.ledger.strings;
                strings.text.push_str(text);
                strings.ends.push(wire_u32(strings.text.len()));
                wire_u32(strings.ends.len() - 1)
            }

            /// `text`'s index in a column of `kind`: the last one's again when
            /// it is the same string, else a new one.
            fn repeating(&mut self, kind: Repeating, text: &'m str) -> u32 {
                if let Some((seen, index)) = self.last[kind as usize]
                    && seen == text
                {
                    return index;
                }
                let index = self.string(text);
                self.last[kind as usize] = Some((text, index));
                index
            }

            /// The root's index, adding it on first sight (a ledger has a
            /// handful of roots, so a scan is the cheapest lookup).
            fn root(&mut self, root: &'m model::FilesystemRoot) -> u32 {
                if let Some(at) = self.roots.iter().rposition(|&r| r == root) {
                    return wire_u32(at);
                }
                self.roots.push(root);
                self.ledger.roots.push(root.to_guest());
                wire_u32(self.roots.len() - 1)
            }

            fn resource(&mut self, resource: &'m ResourceRef) {
                let mut flags = wit::ResourceFlags::empty();
                let (location, path) = match resource.location() {
                    model::Location::Filesystem(file) => {
                        (self.root(&file.root), self.repeating(Repeating::Path, &file.path))
                    }
                    other => {
                        flags |= wit::ResourceFlags::OTHER;
                        self.ledger.resources.others.push(other.to_guest());
                        (wire_u32(self.ledger.resources.others.len() - 1), 0)
                    }
                };
                let incarnation = self.string(resource.incarnation());
                let snapshot = resource.snapshot_sha256().map_or(0, |digest| {
                    flags |= wit::ResourceFlags::SNAPSHOT;
                    self.string(digest)
                });
                let table = &mut self.ledger.resources;
                table.role.push(code!(ResourceRole, resource.role()));
                table.location.push(location);
                table.path.push(path);
                table.incarnation.push(incarnation);
                table.snapshot_sha256.push(snapshot);
                table.flags.push(flags.code());
            }

            fn record(&mut self, record: &'m model::EvidenceRecord) {
                use model::EvidenceRecord as M;
                match record {
                    M::Claim(claim) => self.claim(claim, |ledger| &mut ledger.claims),
                    M::Outcome(outcome) => {
                        let mut flags = wit::OutcomeFlags::empty();
                        let settled = &outcome.outcome;
                        for (set, flag) in [
                            (outcome.recovery, wit::OutcomeFlags::RECOVERY),
                            (outcome.mutation_attempted, wit::OutcomeFlags::MUTATION_ATTEMPTED),
                            (settled.replayed, wit::OutcomeFlags::REPLAYED),
                            (settled.remote_acknowledged, wit::OutcomeFlags::REMOTE_ACKNOWLEDGED),
                            (settled.detached, wit::OutcomeFlags::DETACHED),
                        ] {
                            if set {
                                flags |= flag;
                            }
                        }
                        let table = &mut self.ledger.outcomes;
                        table.position.push(outcome.position);
                        table.claim.push(outcome.claim);
                        table.execution.push(code!(Execution, settled.execution));
                        table.impact.push(code!(Impact, settled.impact));
                        table.cleanup.push(code!(CleanupState, settled.cleanup));
                        table.flags.push(flags.code());
                    }
                    M::Observation(o) => {
                        let mut flags = wit::ObservationFlags::empty();
                        if o.exists {
                            flags |= wit::ObservationFlags::EXISTS;
                        }
                        if o.source_claim.is_some() {
                            flags |= wit::ObservationFlags::SOURCE_CLAIM;
                        }
                        let source_action = self.string(&o.source_action);
                        let digest = o.content_sha256.as_deref().map_or(0, |digest| {
                            flags |= wit::ObservationFlags::CONTENT_SHA256;
                            self.string(digest)
                        });
                        let job_state = o.job_state.map_or(0, |state| {
                            flags |= wit::ObservationFlags::JOB_STATE;
                            code!(JobLifecycle, state)
                        });
                        let table = &mut self.ledger.observations;
                        table.position.push(o.position);
                        table.resource.push(o.resource);
                        table.mechanism.push(code!(Mechanism, o.mechanism));
                        table.coverage.push(code!(Coverage, o.coverage));
                        table.source_action.push(source_action);
                        table.source_claim.push(o.source_claim.unwrap_or(0));
                        table.content_sha256.push(digest);
                        table.job_state.push(job_state);
                        table.flags.push(flags.code());
                    }
                    M::Verifier(v) => {
                        let command = self.string(&v.command);
                        let table = &mut self.ledger.verifiers;
                        table.position.push(v.position);
                        table.command.push(command);
                        table.result.push(code!(CheckResult, v.result));
                        table.claim.push(v.claim.unwrap_or(0));
                        let mut flags = wit::VerifierFlags::empty();
                        if v.claim.is_some() {
                            flags |= wit::VerifierFlags::CLAIM;
                        }
                        table.flags.push(flags.code());
                    }
                }
            }

            /// Lays out `claim` into the claim table `into` picks.
            fn claim(
                &mut self,
                claim: &'m model::ClaimEvidence,
                into: fn(&mut wit::EvidenceLedger) -> &mut wit::ClaimTable,
            ) {
                let mut flags = wit::ClaimFlags::empty();
                if claim.external {
                    flags |= wit::ClaimFlags::EXTERNAL;
                }
                if claim.no_op {
                    flags |= wit::ClaimFlags::NO_OP;
                }
                if claim.scope.is_none() {
                    flags |= wit::ClaimFlags::UNKNOWN_SCOPE;
                }
                if claim.processes {
                    flags |= wit::ClaimFlags::PROCESSES;
                }
                if claim.unbound {
                    flags |= wit::ClaimFlags::UNBOUND;
                }
                if claim.unconfined {
                    flags |= wit::ClaimFlags::UNCONFINED;
                }
                let run_id = self.repeating(Repeating::RunId, &claim.run_id);
                let action_id = self.string(&claim.action_id);
                let tool = self.repeating(Repeating::Tool, &claim.tool);
                let subject = self.repeating(Repeating::Subject, &claim.subject);
                for obligation in &claim.obligations {
                    let (kind, digest) = match &obligation.postcondition {
                        model::Postcondition::ContentSha256(digest) => {
                            (wit::PostconditionKind::ContentSha256, self.string(digest))
                        }
                        model::Postcondition::Absent => (wit::PostconditionKind::Absent, 0),
                        model::Postcondition::Exists => (wit::PostconditionKind::Exists, 0),
                    };
                    let obligations = &mut into(&mut self.ledger).obligations;
                    obligations.target.push(obligation.target);
                    obligations.kind.push(kind as u8); // its `code`, as `code!` gives
                    obligations.digest.push(digest);
                }
                let table = into(&mut self.ledger);
                table.position.push(claim.position);
                table.run_id.push(run_id);
                table.action_id.push(action_id);
                table.tool.push(tool);
                table.subject.push(subject);
                table.scope.extend_from_slice(claim.scope.as_deref().unwrap_or_default());
                table.scope_ends.push(wire_u32(table.scope.len()));
                table.dependencies.extend_from_slice(&claim.dependencies);
                table.dependency_ends.push(wire_u32(table.dependencies.len()));
                table.obligation_ends.push(wire_u32(table.obligations.target.len()));
                table.flags.push(flags.code());
            }
        }

        // The decision: guest -> host.
        unit_enum!(Verdict { Completed, Failed, Blocked, Unverified });
        unit_enum!(from ReasonCode {
            ContradictedArtifact,
            ContradictedEffect,
            UnsettledArtifact,
            StaleVerifier,
            FailingVerifier,
            ExternalEffectUnverified,
            UnverifiedArtifact,
            MissingArtifact,
            RunningLaunch,
            UnsupportedClaim,
            FailedEffect,
            PolicyFailure,
            IncompleteVerifier,
            OwnedEffectUnverified,
            UnboundEffectUnverified,
            UnconfinedCommand,
            $($reason,)*
        });
        unit_enum!(Assessment { Verified, StateObserved, Failed, Contradicted, Unverified, Pending });
        record!(from Reason { code, verdict, message, remedy, evidence, disclosure });

        /// A decision, its assessments read back from the WIT's columns; `Err`
        /// names a column whose length is not the claim column's (a malformed
        /// answer).
        impl IntoModel<Result<model::Decision, String>> for wit::Decision {
            fn into_model(self) -> Result<model::Decision, String> {
                let table = self.assessments;
                let rows = table.claim.len();
                let columns = [
                    ("obligation", table.obligation.len()),
                    ("assessment", table.assessment.len()),
                    ("observation", table.observation.len()),
                    ("flags", table.flags.len()),
                ];
                if let Some((column, len)) = columns.into_iter().find(|&(_, len)| len != rows) {
                    return Err(format!("assessments.{column} has {len} entries, but assessments.claim has {rows}"));
                }
                let assessments = (0..rows)
                    .map(|i| {
                        let flags = table.flags[i];
                        model::EffectAssessment {
                            claim: table.claim[i],
                            obligation: flags.contains(wit::AssessmentFlags::OBLIGATION).then_some(table.obligation[i]),
                            assessment: table.assessment[i].into_model(),
                            observation: flags
                                .contains(wit::AssessmentFlags::OBSERVATION)
                                .then_some(table.observation[i]),
                        }
                    })
                    .collect();
                Ok(model::Decision {
                    verdict: self.verdict.into_model(),
                    reasons: self.reasons.into_model(),
                    disclosures: self.disclosures,
                    assessments,
                    presented_answer: self.presented_answer,
                })
            }
        }
    };
}

/// A string end, string index or run end in the evidence ledger's columns,
/// saturating rather than wrapping. Only a text past 4 GiB, or more than four
/// billion strings or entries, could saturate, and such a ledger never reaches
/// a component: its memory limit refuses it while it is lowered.
/// `evaluate_natively` refuses such a text before the call, but not a table
/// of four billion entries (16 GiB of indices), which it does not guard.
fn wire_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A flags value as the ledger's `code` byte: its bits, the first flag bit 0.
/// (The two bindings spell "its bits" differently, so each implements it.)
trait Code {
    /// The `code` byte.
    fn code(self) -> u8;
}

/// What laying out some claims takes: rows, strings, text bytes (at most),
/// and entries of the scope, dependency and obligation tables.
#[derive(Default)]
struct ClaimSizes {
    claims: usize,
    strings: usize,
    text: usize,
    scope: usize,
    dependencies: usize,
    obligations: usize,
}

impl ClaimSizes {
    fn add(&mut self, c: &model::ClaimEvidence) {
        self.claims += 1;
        self.strings += 4 + c.obligations.len();
        self.text += c.run_id.len() + c.action_id.len() + c.tool.len() + c.subject.len();
        for obligation in &c.obligations {
            if let model::Postcondition::ContentSha256(digest) = &obligation.postcondition {
                self.text += digest.len();
            }
        }
        self.scope += c.scope.as_ref().map_or(0, Vec::len);
        self.dependencies += c.dependencies.len();
        self.obligations += c.obligations.len();
    }
}

/// `Code` for wasmtime's flags types: their bits.
macro_rules! wasmtime_flags_code {
    ($($flags:ident),*) => {$(
        impl Code for wit::$flags {
            fn code(self) -> u8 {
                // Eight flags at most (the WIT's), so the bits fit a byte.
                self.as_array()[0] as u8
            }
        }
    )*};
}

/// Conversions for the wasmtime bindings of 2.1.0, which every component
/// built today is called through.
mod component_v2_1 {
    use super::v2_1::classifier::exports::effects::policy::types as wit;
    use super::{ClaimSizes, Code, IntoModel, Lift, ToGuest, wire_u32};
    use crate::model::{self, ResourceRef};

    conversions! {
        content: Content,
        concurrent: concurrent,
        reasons: [ConcurrentRun, UnknownExitStatus],
    }
    wasmtime_flags_code!(ResourceFlags, ClaimFlags, OutcomeFlags, ObservationFlags, VerifierFlags);
}

/// Conversions for the wasmtime bindings of 2.0.0: no content, no other runs,
/// the 2.0.0 reason codes.
mod component_v2_0 {
    use super::v2_0::classifier::exports::effects::policy::types as wit;
    use super::{ClaimSizes, Code, IntoModel, Lift, ToGuest, wire_u32};
    use crate::model::{self, ResourceRef};

    conversions! { reasons: [] }
    wasmtime_flags_code!(ResourceFlags, ClaimFlags, OutcomeFlags, ObservationFlags, VerifierFlags);
}

/// Conversions for the guest types of the shipped evaluator compiled natively
/// (`NativeEvaluator`), the same code as its component.
mod native {
    use super::{ClaimSizes, Code, IntoModel, Lift, ToGuest, wire_u32};
    use crate::model::{self, ResourceRef};
    use effects_evaluate::types as wit;

    conversions! {
        content: Content,
        concurrent: concurrent,
        reasons: [ConcurrentRun, UnknownExitStatus],
    }

    macro_rules! flags_code {
        ($($flags:ident),*) => {$(
            impl Code for wit::$flags {
                fn code(self) -> u8 {
                    self.bits()
                }
            }
        )*};
    }
    flags_code!(ResourceFlags, ClaimFlags, OutcomeFlags, ObservationFlags, VerifierFlags);
}

/// The shipped evaluator compiled natively, called through the same
/// conversions as its component (`native::NativeEvaluator` is the public face).
pub(crate) fn evaluate_natively(ledger: &model::EvidenceLedger) -> Result<model::Decision, String> {
    let argument: effects_evaluate::types::EvidenceLedger = ledger.to_guest();
    if u32::try_from(argument.strings.text.len()).is_err() {
        return Err(format!(
            "the ledger's text is {} bytes, past the 4 GiB its string ends can address",
            argument.strings.text.len()
        ));
    }
    effects_evaluate::evaluate(&argument)?.into_model()
}

#[cfg(test)]
mod tests {
    use super::{Code, ToGuest};
    use crate::model::{
        CheckResult, CleanupState, Coverage, Execution, Impact, JobLifecycle, Mechanism, ResourceRole,
    };

    /// The last case of each enum the ledger carries as a `code`, and one bit
    /// of each flags type (several of claim-flags: `processes` came with 2.0.0,
    /// after the others), through one generation of the bindings.
    macro_rules! codes {
        () => {
            (
                [
                    code!(Mechanism, Mechanism::Receipt),
                    code!(Execution, Execution::Unknown),
                    code!(CheckResult, CheckResult::Incomplete),
                    code!(JobLifecycle, JobLifecycle::Lost),
                    code!(CleanupState, CleanupState::Unknown),
                    code!(ResourceRole, ResourceRole::Executor),
                    code!(Impact, Impact::Possible),
                    code!(Coverage, Coverage::Partial),
                    wit::PostconditionKind::Exists as u8,
                ],
                [
                    wit::ResourceFlags::SNAPSHOT.code(),
                    wit::ClaimFlags::UNKNOWN_SCOPE.code(),
                    wit::ClaimFlags::PROCESSES.code(),
                    wit::ClaimFlags::UNBOUND.code(),
                    wit::ClaimFlags::UNCONFINED.code(),
                    wit::VerifierFlags::CLAIM.code(),
                    wit::OutcomeFlags::DETACHED.code(),
                    wit::ObservationFlags::JOB_STATE.code(),
                ],
            )
        };
    }

    /// Every binding numbers enum cases and flags bits as the WIT declares
    /// them, so a component of either version and the native evaluator read
    /// the same codes (2.1.0 moved none of 2.0.0's).
    #[test]
    fn every_binding_gives_the_codes_the_wit_declares() {
        let host = {
            use super::v2_1::classifier::exports::effects::policy::types as wit;
            codes!()
        };
        let previous = {
            use super::v2_0::classifier::exports::effects::policy::types as wit;
            codes!()
        };
        assert_eq!(host, previous);
        let native = {
            use effects_evaluate::types as wit;
            codes!()
        };
        assert_eq!(host, native);
        assert_eq!(
            host,
            ([7, 7, 2, 3, 3, 4, 1, 1, 2], [1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5, 1, 1 << 4, 1 << 3])
        );
    }

    /// A string equal to the one before it in a repeating column is laid out
    /// once: a write's target and its readback share the path, two claims
    /// the run id and tool; action ids stay apart.
    #[test]
    fn a_repeated_path_run_id_or_tool_is_laid_out_once() {
        use super::v2_1::classifier::exports::effects::policy::types as wit;
        let write = r#"{"claim": {"tool": "write_file", "scope": ["a.txt"]}}"#;
        let edit = r#"{"claim": {"tool": "edit_file", "scope": ["b.txt"]}}"#;
        let read = |file: &str| format!(r#"{{"observation": {{"resource": "{file}"}}}}"#);
        let (read_a, read_b) = (read("a.txt"), read("b.txt"));
        let vector = format!(
            r#"{{"rule": "VER-1", "title": "writes", "expect": {{"verdict": "UNVERIFIED", "reasons": []}},
                "records": [{write}, {read_a}, {write}, {read_b}, {edit}]}}"#
        );
        let vector: crate::completion::vectors::Vector = serde_json::from_str(&vector).unwrap();
        let ledger: wit::EvidenceLedger = vector.ledger().unwrap().to_guest();
        let string = |i: u32| {
            let ends = &ledger.strings.ends;
            let start = if i == 0 { 0 } else { ends[i as usize - 1] as usize };
            &ledger.strings.text[start..ends[i as usize] as usize]
        };
        // Resources in order of first use: a.txt's target and source, then
        // b.txt's source and target.
        let (paths, claims) = (&ledger.resources.path, &ledger.claims);
        assert_eq!(
            paths.iter().map(|&p| string(p)).collect::<Vec<_>>(),
            ["a.txt", "a.txt", "b.txt", "b.txt"]
        );
        assert_eq!((paths[0], paths[2]), (paths[1], paths[3]), "a path next to itself is laid out once");
        assert_eq!(claims.run_id[0], claims.run_id[2]);
        assert_eq!(claims.tool[0], claims.tool[1]);
        assert_eq!(string(claims.tool[2]), "edit_file", "another tool is another string");
        assert_ne!(claims.action_id[0], claims.action_id[1]);
        assert_eq!(ledger.strings.text.matches("a.txt").count(), 1);
    }
}
