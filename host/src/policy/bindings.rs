//! The one module that holds generated bindings for `effects:policy@1.0.0`, and
//! the explicit conversions between them and the crate's own [`crate::model`]
//! types. Nothing generated is re-exported: the rest of the host sees only model
//! types, and this file is where the WIT and the model are kept in step (a field
//! added to one and not the other fails to compile here).
//!
//! Directions follow the contract: the host sends operations, facts, contexts
//! and ledgers (which carry [`ResourceRef`]s) to guests; guests send back plans,
//! outcomes, readback requests and decisions, which carry only indices. There is
//! deliberately no conversion from a guest value into a `ResourceRef` (ID-1).

use crate::model;

pub(crate) mod classifier {
    //! Generated: the classifier world.
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "classifier",
    });
}

pub(crate) mod evaluator {
    //! Generated: the evaluator world, sharing the classifier's `types`.
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "evaluator",
        with: { "effects:policy/types": super::classifier::exports::effects::policy::types },
    });
}

pub(crate) use classifier::ClassifierPre;
pub(crate) use evaluator::EvaluatorPre;

/// Host -> guest: build the generated value from a borrowed model value.
pub(crate) trait ToGuest<T> {
    fn to_guest(&self) -> T;
}

/// Guest -> host: turn a generated value into the model value.
pub(crate) trait IntoModel<T> {
    fn into_model(self) -> T;
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

/// An enum of unit cases with the same names on both sides, both directions.
macro_rules! unit_enum {
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

/// Every conversion between the model and one generation of the WIT types,
/// `wit` being that generation's `types` module at the expansion site. Expanded
/// twice: for wasmtime's host bindings (components) and for wit-bindgen's guest
/// types (the evaluator compiled natively), so both stay in step with the model.
macro_rules! conversions {
    () => {
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
                }
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
        unit_enum!(Execution { NotExecuted, ReportedSuccess, Failed, TimedOut, Cancelled, Running, Interrupted });
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

        // The evidence ledger: host -> guest.
        record!(to ObligationEvidence { target, postcondition });
        record!(to ClaimEvidence {
            position, run_id, action_id, tool, scope, dependencies, obligations, external, no_op,
        });
        record!(to OutcomeEvidence { position, claim, outcome, recovery, mutation_attempted });
        record!(to ObservationEvidence {
            position, resource, mechanism, coverage, source_action, source_claim, exists,
            content_sha256, job_state,
        });
        record!(to VerifierEvidence { position, command, passed });
        record!(to EvidenceLedger { resources, required, records, answer });

        impl ToGuest<wit::EvidenceRecord> for model::EvidenceRecord {
            fn to_guest(&self) -> wit::EvidenceRecord {
                use model::EvidenceRecord as M;
                match self {
                    M::Claim(r) => wit::EvidenceRecord::Claim(r.to_guest()),
                    M::Outcome(r) => wit::EvidenceRecord::Outcome(r.to_guest()),
                    M::Observation(r) => wit::EvidenceRecord::Observation(r.to_guest()),
                    M::Verifier(r) => wit::EvidenceRecord::Verifier(r.to_guest()),
                }
            }
        }

        // The decision: guest -> host.
        unit_enum!(Verdict { Completed, Failed, Blocked, Unverified });
        unit_enum!(ReasonCode {
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
        });
        unit_enum!(Assessment { Verified, StateObserved, Failed, Contradicted, Unverified, Pending });
        record!(from Reason { code, verdict, message, evidence, disclosure });
        record!(from EffectAssessment { claim, obligation, assessment, observation });
        record!(from Decision { verdict, reasons, disclosures, assessments, presented_answer });
    };
}

/// Conversions for the wasmtime bindings every component call goes through.
mod component {
    use super::classifier::exports::effects::policy::types as wit;
    use super::{IntoModel, ToGuest};
    use crate::model::{self, ResourceRef};

    conversions!();
}

/// Conversions for the guest types of the shipped evaluator compiled natively
/// (`NativeEvaluator`), the same code as its component.
mod native {
    use super::{IntoModel, ToGuest};
    use crate::model::{self, ResourceRef};
    use effects_evaluate::types as wit;

    conversions!();
}

/// The shipped evaluator compiled natively, called through the same
/// conversions as its component (`native::NativeEvaluator` is the public face).
pub(crate) fn evaluate_natively(ledger: &model::EvidenceLedger) -> Result<model::Decision, String> {
    let argument: effects_evaluate::types::EvidenceLedger = ledger.to_guest();
    Ok(effects_evaluate::evaluate(&argument)?.into_model())
}
