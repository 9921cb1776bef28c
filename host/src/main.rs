//! `effects`: the effect ledger's command line. A thin layer over the library:
//! it parses arguments, takes the ambient authority (paths from the command
//! line, the data directory) and hands capabilities to the library.

// Ambient authority enters only in the `cli` items that open a path from the
// command line, each marked `#[allow(clippy::disallowed_methods)]` with why
// (`clippy.toml`); the rest of the binary is checked like library code.
mod cli;

use std::io::{IsTerminal, Write};
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
    // A program that asked for JSON gets its errors as JSON too, on stdout
    // where it reads the answers (and the message on stderr as always).
    let json = std::env::args_os().skip(1).any(|arg| arg == "--json");
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) if json && error.use_stderr() => {
            let failure = cli::Failure::new(cli::exit::BAD_INPUT, anyhow::anyhow!("{}", error.render()));
            return fail(failure, json);
        }
        Err(error) => error.exit(),
    };
    match cli.run() {
        Ok(code) => code,
        Err(failure) => fail(failure, json),
    }
}

/// Ends the process for `failure`: its message on stderr and, under
/// `--json`, `{"schema_version": 1, "error": {"exit_code": N, "message": "..."}}`
/// on stdout.
fn fail(failure: cli::Failure, json: bool) -> ExitCode {
    if failure.quiet {
        return ExitCode::from(failure.code);
    }
    let message = format!("{:#}", failure.error);
    eprintln!("effects: {}", message.trim_end());
    if json {
        let error = serde_json::json!({
            "schema_version": 1,
            "error": { "exit_code": failure.code, "message": message.trim_end() },
        });
        // A closed stdout has nobody to tell.
        let _ = writeln!(std::io::stdout(), "{error}");
    }
    ExitCode::from(failure.code)
}
