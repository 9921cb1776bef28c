//! The policy SDK: the one place guest bindings for `effects:policy@2.1.0` are
//! generated, plus small helpers every policy needs.
//!
//! A policy crate writes its logic as plain functions over the types re-exported
//! here, unit-tests them natively (`cargo test` in `guest/`), and exports them with
//! one line of glue:
//!
//! ```ignore
//! struct Policy;
//! impl effects_policy_sdk::classifier::Guest for Policy { /* ... */ }
//! effects_policy_sdk::export_classifier!(Policy with_types_in effects_policy_sdk::bindings);
//! ```
//!
//! Evaluators use `effects-evaluator-sdk` the same way.
//!
//! This crate must never import anything from the host: components built with it
//! have zero imports (SPEC section 2), which the host checks at load (POL-1).

pub mod bindings {
    //! Generated bindings for the classifier world, including the `types`
    //! interface. Evaluator bindings live in the `effects-evaluator-sdk` crate:
    //! both worlds export `types` (so neither imports it), and their generated
    //! export macros would collide in one crate.
    wit_bindgen::generate!({
        path: "../../wit",
        world: "classifier",
        pub_export_macro: true,
        export_macro_name: "export_classifier",
        default_bindings_module: "effects_policy_sdk::bindings",
        additional_derives: [PartialEq, Eq],
    });
}

pub mod arena;
pub mod outcome;

/// Every classifier allocates from its arena first (see [`arena`]).
#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: arena::Arena = arena::Arena::new();

pub use bindings::export_classifier;
pub use bindings::exports::effects::policy::classify as classifier;
pub use bindings::exports::effects::policy::types;
