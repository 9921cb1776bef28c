//! The evaluator world's bindings for `effects:policy@2.1.0`.
//!
//! A separate crate from `effects-policy-sdk` because both worlds export the
//! `types` interface (so that neither imports it) and wit-bindgen's export
//! macros for it would collide in one crate. wit-bindgen's `with` does not apply
//! to exported interfaces, so these `types` are a second, identical generation:
//! helpers over them live here, not in the classifier SDK.
//!
//! ```ignore
//! struct Policy;
//! impl effects_evaluator_sdk::evaluator::Guest for Policy { /* ... */ }
//! effects_evaluator_sdk::export_evaluator!(Policy with_types_in effects_evaluator_sdk::bindings);
//! ```
//!
//! Like the classifier SDK, this crate imports nothing from the host (POL-1).

pub mod bindings {
    //! Generated bindings for the evaluator world.
    wit_bindgen::generate!({
        path: "../../wit",
        world: "evaluator",
        pub_export_macro: true,
        export_macro_name: "export_evaluator",
        default_bindings_module: "effects_evaluator_sdk::bindings",
    });
}

pub mod code;

pub use bindings::export_evaluator;
pub use bindings::exports::effects::policy::evaluate as evaluator;
pub use bindings::exports::effects::policy::types;

impl Default for types::AssessmentTable {
    /// Empty columns: no assessments.
    fn default() -> Self {
        types::AssessmentTable {
            claim: Vec::new(),
            obligation: Vec::new(),
            assessment: Vec::new(),
            observation: Vec::new(),
            flags: Vec::new(),
        }
    }
}

impl Default for types::ClaimTable {
    /// Empty columns: no claims (a ledger's `concurrent` when no other run is
    /// in flight).
    fn default() -> Self {
        types::ClaimTable {
            position: Vec::new(),
            run_id: Vec::new(),
            action_id: Vec::new(),
            tool: Vec::new(),
            subject: Vec::new(),
            scope: Vec::new(),
            scope_ends: Vec::new(),
            dependencies: Vec::new(),
            dependency_ends: Vec::new(),
            obligations: types::ObligationTable { target: Vec::new(), kind: Vec::new(), digest: Vec::new() },
            obligation_ends: Vec::new(),
            flags: Vec::new(),
        }
    }
}
