//! The effect ledger host: the only part of the project that touches the OS.
//!
//! It owns the pure core's value types ([`model`]), digests ([`digest`]) and the
//! sandboxed policy runtime ([`policy`]) that runs classification and completion
//! evaluation as WebAssembly components with no imports. See `ARCHITECTURE.md`
//! for the map and `docs/rules.md` for the rules cited in comments (`POL-2`, ...).

pub mod bounded;
pub mod completion;
pub mod data_dir;
pub use effects_manifest::digest;
pub mod executor;
pub mod identity;
pub mod ledger;
pub mod log;
pub mod model;
pub mod policy;
pub mod procfs;
pub mod producers;
pub mod retention;
pub mod runtime_window;
pub mod tools;
