//! `effects mcp` and `effects mcp-proxy`: the ledger for an MCP client
//! (docs/mcp.md), both on the official Rust SDK's types, over stdio.
//!
//! `effects mcp` (`server.rs`) is an MCP server whose tools are the
//! ledger's reference tools, each call a step of one run (claimed before it
//! acts, settled, read back), plus `complete` and the operator's checks.
//! `effects mcp-proxy` (`proxy.rs`) puts any MCP server behind the ledger:
//! every `tools/call` claimed as an external effect before it is forwarded
//! and settled from the upstream's answer, and a name a lenient upstream
//! may read as a call refused (`lenient.rs`, its table `fold_table.rs`).
//! `effects mcp` speaks through `stdio.rs`, which answers every line that
//! is no message and bounds the requests read and not yet answered.

mod fold_table;
mod lenient;
mod proxy;
mod server;
mod stdio;
mod wire;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::anyhow;
use clap::Args;

use effect_ledger::ledger::{Ledger, Run, RunError};

use super::Failure;
use super::runtime::{bad, open_ledger, state_dir};
use super::serve::parse_check;

pub use proxy::ProxyArgs;

/// Arguments of `effects mcp`.
#[derive(Args)]
#[command(after_help = "Speaks MCP over stdio (the 2026-07-28 revision and the 2025-11-25 \
handshake). Add it to an MCP client's servers, e.g. Claude Desktop's claude_desktop_config.json:\n  \
{\"mcpServers\": {\"effects\": {\"command\": \"effects\", \"args\": [\"mcp\", \"--root\", \
\"/home/me/project\", \"--check\", \"tests=cargo test\"]}}}\n\
The data dir defaults to $XDG_STATE_HOME/effect-ledger (an MCP host picks the working directory). \
Every tool call is a step of one run (begun at start, or --run); `complete` decides it; the \
resources effects://run/ID/decision and effects://run/ID/log show it (docs/mcp.md).")]
pub struct McpArgs {
    /// The directory the tools work beneath (a sealed root; created if missing).
    #[arg(long)]
    root: PathBuf,
    /// Policy manifest (default: the policies embedded in this binary).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Operator key file: records are written HMAC-authenticated with it.
    #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
    key_file: Option<PathBuf>,
    /// Let commands write beneath PATH too (repeatable; ID-6).
    #[arg(long, value_name = "PATH")]
    allow_write: Vec<PathBuf>,
    /// A check the `check` tool may run, by name (repeatable): the command is
    /// the operator's, never the model's (CMP-5). Run with `bash -c` in the
    /// root, under a 10 minute timeout.
    #[arg(long, value_name = "NAME=COMMAND", value_parser = parse_check)]
    check: Vec<(String, String)>,
    /// Continue this run (or begin it under this id) instead of beginning a
    /// new one: one agent session across server restarts.
    #[arg(long, value_name = "ID")]
    run: Option<String>,
}

/// Creates `root` when it is missing (the MCP host's configuration names it).
#[allow(clippy::disallowed_methods)] // `--root` from the command line, created when missing
fn ensure_root(root: &Path) -> Result<(), Failure> {
    if !root.exists() {
        std::fs::create_dir_all(root).map_err(|e| bad(anyhow!("creating root {}: {e}", root.display())))?;
        tracing::info!("created root {}", root.display());
    }
    Ok(())
}

/// The ledger over `root` (created when missing; the store in the state
/// directory unless a data dir is named) and the run a process's calls are
/// steps of: `run` continued (or begun under that id), else a new one.
/// Returns them with the data dir's display name.
fn open(
    root: &Path,
    run: Option<&str>,
    data_dir: &Path,
    manifest: Option<&Path>,
    key_file: Option<&Path>,
    allow_write: &[PathBuf],
) -> Result<(Ledger, Run, String), Failure> {
    ensure_root(root)?;
    let (mut ledger, display) = open_ledger(root, &state_dir(data_dir), manifest, key_file, allow_write)?;
    let run = match run {
        None => ledger.begin_run(None),
        Some(id) => match ledger.continue_run(id) {
            Ok(run) => run,
            // Only a run with no log yet is begun; any other reason it
            // cannot be continued (another root, a damaged log) is an error,
            // never a silent second run beside it.
            Err(RunError::NoSuchRun { .. }) => {
                let run = ledger.new_run(id).map_err(|e| bad(anyhow!("--run {id}: {e}")))?;
                tracing::info!("run {id} has no log yet: begun");
                run
            }
            Err(error) => return Err(bad(anyhow!("--run {id}: {error}"))),
        },
    };
    Ok((ledger, run, display))
}

/// A prefix for the request ids a process gives its calls,
/// `<kind>-<pid>-<start>`: unique across the processes that continue one
/// run (EMB-3 keys a claim by its request id).
fn request_prefix(kind: &str) -> String {
    let started = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default();
    format!("{kind}-{}-{started:x}", std::process::id())
}

/// A single-threaded async runtime for rmcp's service loop; commands run on
/// its blocking pool, so the loop keeps reading (cancellations, pings)
/// while one runs.
fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(super::exit::PROBLEMS, anyhow!("starting the async runtime: {e}")))
}

impl McpArgs {
    pub fn run(self, data_dir: &Path) -> Result<ExitCode, Failure> {
        let mut checks = BTreeMap::new();
        for (name, command) in self.check {
            if checks.insert(name.clone(), command).is_some() {
                return Err(bad(anyhow!("--check {name} is given twice")));
            }
        }
        let (ledger, run, display_data) = open(
            &self.root,
            self.run.as_deref(),
            data_dir,
            self.manifest.as_deref(),
            self.key_file.as_deref(),
            &self.allow_write,
        )?;
        eprintln!("effects mcp: run {} in {display_data}; speaking MCP on stdio", run.id);
        let server = server::Ledgered::new(ledger, run, checks);
        let runtime = runtime()?;
        let served = runtime.block_on(server.clone().serve());
        // The client has gone: what still runs is cancelled, its end
        // recorded (dropping the runtime waits for its blocking tasks), and
        // the log made durable, before the process ends.
        server.shut_down();
        drop(runtime);
        let synced = server.sync();
        served.map_err(|e| Failure::new(super::exit::PROBLEMS, e))?;
        synced.map_err(|e| Failure::new(super::exit::PROBLEMS, anyhow!("making the log durable: {e}")))?;
        Ok(ExitCode::SUCCESS)
    }
}
