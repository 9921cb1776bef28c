//! The policy manifest (`policies/manifest.toml`) and the SHA-256 pins it
//! holds (POL-1, POL-5): the types both the host, which loads components by
//! them, and `cargo xtask policies`, which writes them, speak.
//!
//! A crate of its own so that building one policy component never compiles
//! the host and its wasm runtime: the policy author's loop stays seconds.

pub mod digest;
mod manifest;

pub use manifest::{ComponentEntry, Contract, FALLBACK_TOOL, Manifest, World};

/// The WIT package components are built against today (`wit/policy.wit`);
/// the host also speaks every older [`Contract`] it lists.
pub const WIT_PACKAGE: &str = Contract::CURRENT.package();
