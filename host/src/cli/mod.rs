//! Argument parsing and dispatch for the `effects` binary, plus the exit-code
//! convention every subcommand follows.

mod decide;
mod doctor;
mod hook;
mod input;
mod log;
mod mcp;
pub(crate) mod output;
mod policy;
mod policy_new;
mod policy_replay;
mod policy_test;
mod retention;
mod runtime;
mod serve;
mod session;
mod strict_json;
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit codes other than 0 (also in `--help`).
pub mod exit {
    /// A check found problems (`policy verify`), the policy returned an error,
    /// or a session step was BLOCKED or NOT RECORDED.
    pub const PROBLEMS: u8 = 1;
    /// Bad input: unreadable file, malformed JSON, wrong arguments.
    pub const BAD_INPUT: u8 = 2;
    /// A component was refused at load (pin, imports, world, not a component).
    pub const REFUSED: u8 = 3;
    /// A call failed in the sandbox (trap, fuel, memory, stack, bad answer).
    pub const CALL_FAILED: u8 = 4;
    /// Standard output was closed before the command finished (a reader
    /// like `head` that went away): quiet, as if killed by SIGPIPE.
    pub const OUTPUT_CLOSED: u8 = 141;
}

/// Opens the directory that holds `path` (the current directory for a bare
/// file name): the ambient authority a file argument brings.
#[allow(clippy::disallowed_methods)] // a file argument's directory, opened by its path
pub fn open_parent(path: &std::path::Path) -> std::io::Result<(cap_std::fs::Dir, &std::path::Path)> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => std::path::Path::new("."),
    };
    Ok((cap_std::fs::Dir::open_ambient_dir(parent, cap_std::ambient_authority())?, parent))
}

/// An error with the exit code it ends the process with.
pub struct Failure {
    pub error: anyhow::Error,
    pub code: u8,
    /// Nothing to say: standard output is gone (`output::line`).
    pub quiet: bool,
}

impl Failure {
    pub fn new(code: u8, error: impl Into<anyhow::Error>) -> Self {
        Self { error: error.into(), code, quiet: false }
    }

    /// The end of a command whose standard output was closed: no message,
    /// exit [`exit::OUTPUT_CLOSED`].
    pub fn quiet() -> Self {
        Self { error: anyhow::anyhow!("standard output was closed"), code: exit::OUTPUT_CLOSED, quiet: true }
    }
}

/// The effect ledger: durable claims before tools act, settled outcomes,
/// readbacks, and one truthful completion decision.
#[derive(Parser)]
#[command(name = "effects", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    /// Data directory (effect logs, launch index, jobs, compiled-policy
    /// cache), the same for every command: $EFFECTS_DATA_DIR, else `.effects`
    /// in the current directory. `session` and `decide` print it. It must
    /// lie outside the root and not contain it (ID-4).
    #[arg(long, global = true, env = "EFFECTS_DATA_DIR", default_value = DEFAULT_DATA_DIR)]
    data_dir: PathBuf,

    /// The fleet store: a PostgreSQL URL (`postgres://USER@HOST:PORT/DB`),
    /// $EFFECTS_STORE. The runs' logs go there instead of the data dir's
    /// `effects/`, for every command; the data dir keeps the rest (launch
    /// index, jobs, policy cache). Commands the ledger runs do not inherit
    /// $EFFECTS_STORE; prefer it to --store, which any process of the same
    /// user can read in the process list. See docs/fleet.md.
    #[arg(long, global = true, env = "EFFECTS_STORE", value_name = "URL")]
    store: Option<String>,

    #[command(subcommand)]
    command: Command,
}

/// The data dir when neither `--data-dir` nor `$EFFECTS_DATA_DIR` names one:
/// relative, so every command run from one directory finds the same store.
pub(crate) const DEFAULT_DATA_DIR: &str = ".effects";

const EXIT_CODES: &str = "Exit codes: 0 ok; 1 problems found, the policy returned an error, or a \
session step was BLOCKED or NOT RECORDED; 2 bad input (also: an input over 16 MiB, a data dir that \
is the root, beneath it or containing it); 3 component refused at load; 4 call failed in the \
sandbox; 141 standard output was closed before the command finished (quiet). Diagnostics go \
to stderr, filtered by $EFFECTS_LOG (else $RUST_LOG; `tracing` filter syntax, e.g. \
EFFECTS_LOG=effect_ledger=debug; default warn), in colour only on a terminal.";

#[derive(Subcommand)]
enum Command {
    /// Run a script of tool calls through the ledger: every effect claimed
    /// durably before it runs, settled, read back; a report per step.
    Session(session::SessionArgs),
    /// Decide completion of a recorded run (without executing anything):
    /// COMPLETED, FAILED, BLOCKED or UNVERIFIED, with disclosures.
    Decide(decide::DecideArgs),
    /// Inspect, verify and run policy components (for runtimes and policy authors).
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// List, verify, show and recover effect logs (for operators).
    #[command(subcommand)]
    Log(log::LogCommand),
    /// Serve the ledger to a runtime over JSON-RPC on stdin/stdout (Python,
    /// TypeScript, any language): claims, settlements, steps, checks and
    /// decisions, one message per line (docs/serve.md).
    Serve(serve::ServeArgs),
    /// Gate an agent's own tools and its "done" through its hook contract
    /// (Claude Code, Codex CLI, Gemini CLI): claim before each tool, read
    /// back after it, decide at stop (docs/hooks.md).
    Hook(hook::HookArgs),
    /// Serve the ledger's tools to an MCP client over stdio: every call
    /// claimed, settled and read back; `complete` decides (docs/mcp.md).
    Mcp(mcp::McpArgs),
    /// Put any MCP server behind the ledger: each `tools/call` claimed as an
    /// external effect before it is forwarded, settled from its answer.
    McpProxy(mcp::ProxyArgs),
    /// Say whether commands run confined here (Landlock, ID-6).
    Doctor(doctor::DoctorArgs),
    /// List the tools the ledger knows, with their input schemas (`--json`:
    /// ready to hand to a model API).
    Tools(tools::ToolsArgs),
}

impl Cli {
    /// Runs the chosen subcommand.
    pub fn run(self) -> Result<ExitCode, Failure> {
        // Resolved once, by clap: every subcommand gets the same data dir.
        let data_dir = self.data_dir.as_path();
        runtime::choose_store(self.store);
        match self.command {
            Command::Session(args) => args.run(data_dir),
            Command::Decide(args) => args.run(data_dir),
            Command::Policy(command) => command.run(data_dir),
            Command::Log(command) => command.run(data_dir),
            Command::Serve(args) => args.run(data_dir),
            Command::Hook(args) => args.run(data_dir),
            Command::Mcp(args) => args.run(data_dir),
            Command::McpProxy(args) => args.run(data_dir),
            Command::Doctor(args) => args.run(),
            Command::Tools(args) => args.run(),
        }
    }
}
