//! `effects`: the effect ledger's command line. A thin layer over the library:
//! it parses arguments, takes the ambient authority (paths from the command
//! line, the data directory) and hands capabilities to the library.

// Ambient authority enters only in the `cli` items that open a path from the
// command line, each marked `#[allow(clippy::disallowed_methods)]` with why
// (`clippy.toml`); the rest of the binary is checked like library code.
mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

// mimalloc: a decision over a large ledger is mostly many small allocations
// (the evidence ledger's strings, copied and lowered into the evaluator);
// glibc's malloc spends about half of the host's share of it in its own
// bookkeeping (`cargo bench --bench evaluate`, which uses the same allocator).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Diagnostics: `$EFFECTS_LOG`, else `$RUST_LOG` (tracing's filter
    // syntax), default `warn`; escape codes only when stderr is a terminal.
    let filter = tracing_subscriber::EnvFilter::try_from_env("EFFECTS_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let cli = cli::Cli::parse();
    match cli.run() {
        Ok(code) => code,
        Err(failure) => {
            if !failure.quiet {
                eprintln!("effects: {:#}", failure.error);
            }
            ExitCode::from(failure.code)
        }
    }
}
