//! Test binary `policies`: the policy platform (hostile guests, the shipped
//! components, the filesystem classifier on real files, the policy CLI, the
//! compiled-component cache, the conformance vectors, the components of the
//! previous contract). One binary for many
//! files, because each test binary links the whole host and wasmtime again; a
//! file here is one module, and a test's name is `FILE::TEST` (`cargo test
//! --release --test policies conformance::`). To add a file: write
//! `tests/NAME.rs` (with `use crate::support;` if it needs the helpers) and
//! list it below.

// Tests are not library code: they set up and inspect files by path.
#![allow(clippy::disallowed_methods)]

mod support;

mod classify_fs;
mod conformance;
mod hostile_guests;
mod policy_cache;
mod policy_cli;
mod policy_new_cli;
mod previous_contract;
mod shipped_policies;
