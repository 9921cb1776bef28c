//! The evaluator world's bindings for `effects:policy@2.0.0`.
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
