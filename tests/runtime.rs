//! Test binary `runtime`: the host library through its Rust API on real files
//! and processes (sealed roots and opens, producers, the ledger chain, the
//! effect log in memory and on disk, commands and jobs). One binary for many
//! files, because each test binary links the whole host and wasmtime again; a
//! file here is one module, and a test's name is `FILE::TEST` (`cargo test
//! --release --test runtime log_disk::`). To add a file: write
//! `tests/NAME.rs` (with `use crate::support;` if it needs the helpers) and
//! list it below.

// Tests are not library code: they set up and inspect files by path.
#![allow(clippy::disallowed_methods)]

mod support;

mod effect_log;
mod embed;
mod every_store;
mod fleet_store;
mod identity;
mod identity_open;
mod jobs;
mod ledger;
mod log_disk;
mod log_durability;
mod process;
mod producers;
