//! Test binary `cli`: the `effects` binary end to end, run as its users run
//! it (sessions, completion, commands and jobs, checks, replay, confinement,
//! the store's defences). One binary for many files, because each test
//! binary links the whole host and wasmtime again; a file here is one module,
//! and a test's name is `FILE::TEST` (`cargo test --release --test cli
//! session_cli::`). To add a file: write `tests/NAME.rs` (with `use
//! crate::support;` if it needs the helpers) and list it below.

// Tests are not library code: they set up and inspect files by path.
#![allow(clippy::disallowed_methods)]

mod support;

mod completion_cli;
mod confine;
mod hook_cli;
mod hook_commands_cli;
mod jobs_cli;
mod mcp_proxy_cli;
mod process_cli;
mod processes_cli;
mod readme_cli;
mod replay_cli;
mod retention_cli;
mod serve_cli;
mod session_cli;
mod store_cli;
mod verifier_cli;
