//! The sandboxed policy runtime (SPEC section 8, POL-1..5).
//!
//! Classification and completion evaluation are WebAssembly components behind
//! the WIT contract `effects:policy@2.1.0` (`wit/policy.wit`); components built
//! for `effects:policy@2.0.0` (`wit/2.0.0/policy.wit`) still load and run (see
//! [`Contract`]). This module loads them only by SHA-256 pin from a manifest,
//! refuses any that import anything or export the wrong world, and calls them
//! under fuel, a memory cap and a bounded stack. Guests get no authority at
//! all: the linker is empty.
//!
//! ```no_run
//! use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default())?;
//! let classifier = policies.classifier("bash")?;
//! # let operation: effect_ledger::model::BoundOperation = unimplemented!();
//! let called = classifier.classify(&operation)?;
//! println!("{:?} ({} fuel)", called.value, called.report.fuel_used);
//! # Ok(()) }
//! ```
//!
//! Layout: `bindings` (the only generated code, one generation per contract
//! version, converted to `crate::model`),
//! `inspect` (reading a component's shape without compiling it), `manifest`,
//! `source` (embedded or directory), `sandbox` (engine and limits), `cache`
//! (compiled components on disk, each entry bound to its pin), `component` (one loaded component and its call
//! protocol), `answer` (contract checks on guest answers), `set` (routing),
//! `native` (the shipped evaluator compiled natively, for conformance),
//! `json_call` (one call with JSON in and out, its argument parsed inside the
//! crate: ID-1), `trace` (every call's argument written to a directory).

mod answer;
mod bindings;
mod cache;
mod component;
mod error;
mod inspect;
mod json_call;
mod native;
mod sandbox;
mod set;
mod source;
mod trace;

pub use cache::{CacheError, CompileCache, EntryState};
pub use component::{CallReport, Called, ClassifierComponent, EvaluatorComponent, InstanceReuse};
pub use effects_manifest::{ComponentEntry, Contract, FALLBACK_TOOL, Manifest, WIT_PACKAGE, World};
pub use error::{PolicyCall, PolicyError};
pub use inspect::{ComponentShape, inspect};
pub use json_call::{JsonCall, JsonCallError, call_json, classify_json};
pub use native::NativeEvaluator;
pub use sandbox::SandboxLimits;
pub use set::{CacheCheck, ComponentCheck, LoadedComponent, PolicyOptions, PolicySet, load_unpinned};
pub use source::{PolicySource, embedded_differences};
pub use trace::Trace;
