//! The pure core's value types for the policy boundary: resources, operations,
//! outcomes, evidence and decisions, mirroring `wit/policy.wit` one for one.
//!
//! These are the crate's own types. The generated bindings live in
//! `policy::bindings` and are converted there, so nothing generated leaks into the
//! rest of the host. This module does no IO and knows nothing about wasm.

mod evidence;
mod operation;
mod outcome;
pub(crate) mod resource;
mod wire_size;

pub use evidence::{
    Assessment, CheckResult, ClaimEvidence, Decision, EffectAssessment, EvidenceLedger, EvidenceRecord,
    ObligationEvidence, ObservationEvidence, OutcomeEvidence, Position, Reason, ReasonCode, ResourceIndex,
    Verdict, VerifierEvidence,
};
pub use operation::{
    Binding, BindingIndex, BoundOperation, BoundPreState, ClaimPlan, Classification, PlannedObligation,
    PlannedScope, Postcondition, PreState,
};
pub use outcome::{
    CleanupState, Coverage, Execution, FactsError, Impact, JobLifecycle, Mechanism, Outcome, ProducerFacts,
    ReadbackContext, ReadbackRequest, SettleRequest,
};
pub use resource::{
    BrowserLocation, ExternalLocation, FilesystemLocation, FilesystemRoot, JobLocation, Location,
    OwnedLocation, ProcessLocation, ResourceRef, ResourceRole,
};
pub use wire_size::WireSize;
