//! `effects serve`: the ledger for a runtime not written in Rust
//! (docs/serve.md). JSON-RPC 2.0, one JSON message per line on stdin and
//! stdout (MCP's stdio framing); diagnostics on stderr.
//!
//! Two kinds of thread: the reader (one) reads each line strictly (UTF-8,
//! no key twice: `cli/strict_json.rs`), answers malformed ones and a
//! request id already in flight at once, and hands each request to a
//! worker (`workers.rs`: a fixed pool and a short queue; while the queue is
//! full the reader stops reading, so pipelining is bounded by the client's
//! own pipe); workers run the methods (`server.rs`), taking turns on the one
//! ledger only to claim and to record, and each writes its answer to stdout
//! under one lock, so answers and notifications are whole lines whatever
//! order they finish in. Claims the runtime runs name the runtime as their
//! executor (`executor.rs`, LOG-7), never this relay.
//! `shutdown` (or the end of stdin) waits for what is in flight, makes the
//! log durable and ends the process.

mod executor;
mod protocol;
mod server;
mod workers;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::anyhow;
use clap::Args;
use serde_json::Value;

use effect_ledger::bounded::{self, BoundedLine, INPUT_BOUND};

use super::Failure;
use super::output::out;
use super::runtime::{bad, open_ledger};
use super::strict_json::strict;
use protocol::{ErrorObject, JsonRpcError, RequestId, code};
use server::Server;

/// Arguments of `effects serve`.
#[derive(Args)]
#[command(after_help = "Protocol: JSON-RPC 2.0, one message per line on stdin/stdout; the methods \
are initialize, run/begin, run/continue, effect/claim (a tool the runtime runs: answered `run` only \
once its claim is durable, EMB-1), effect/settle (its facts; the ledger reads the files back \
itself), effect/execute (a tool the host runs, with notifications/progress and \
notifications/cancelled), check/run (only the operator's --check commands), run/complete, \
run/decision, run/annotate and shutdown; docs/serve.md has each one's params and result, and \
`effects serve --schema` prints the JSON Schema of every message. Domain answers (refused, blocked, \
FAILED) are results; JSON-RPC errors mean the message was wrong. Example:\n  \
effects serve --root work --data-dir state --check tests='cargo test'\n  \
{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocol_version\":\"1\"}}")]
pub struct ServeArgs {
    /// The directory the tools work beneath (a sealed root; created if missing).
    #[arg(long, required_unless_present = "schema")]
    root: Option<PathBuf>,
    /// Policy manifest (default: the policies embedded in this binary).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Operator key file: records are written HMAC-authenticated with it.
    #[arg(long, env = "EFFECTS_LOG_KEY_FILE")]
    key_file: Option<PathBuf>,
    /// Let commands write beneath PATH too (repeatable; ID-6).
    #[arg(long, value_name = "PATH")]
    allow_write: Vec<PathBuf>,
    /// A check `check/run` may run, by name (repeatable): the command is the
    /// operator's, never the model's (CMP-5). Run with `bash -c` in the root,
    /// under a 10 minute timeout.
    #[arg(long, value_name = "NAME=COMMAND", value_parser = parse_check)]
    check: Vec<(String, String)>,
    /// Print the JSON Schema of every message (docs/serve.schema.json) and exit.
    #[arg(long)]
    schema: bool,
}

/// `NAME=COMMAND`, with a name of letters, digits, `-`, `_` and `.`.
pub(super) fn parse_check(text: &str) -> Result<(String, String), String> {
    let (name, command) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}`: give NAME=COMMAND, e.g. tests='cargo test'"))?;
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !valid {
        return Err(format!("check name `{name}`: use letters, digits, `-`, `_` and `.`"));
    }
    if command.trim().is_empty() {
        return Err(format!("check `{name}` has no command"));
    }
    Ok((name.to_owned(), command.to_owned()))
}

/// Where answers and notifications go: stdout, one whole line per write,
/// written by whichever thread has one (under the server's lock, so lines
/// never interleave). Written where it is made, not handed to a writer
/// thread: an answer costs no extra thread wake-up.
pub(crate) struct Outgoing(Option<std::io::Stdout>);

impl Outgoing {
    fn stdout() -> Self {
        Self(Some(std::io::stdout()))
    }

    /// Writes `line` and its newline, flushed (a client waits on it).
    pub(crate) fn send(&mut self, line: String) {
        let Some(stdout) = &mut self.0 else { return };
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        let mut stdout = stdout.lock();
        if stdout.write_all(&bytes).and_then(|()| stdout.flush()).is_err() {
            // The client went away: nothing to answer to; in-flight work
            // still finishes and is recorded.
            self.0 = None;
        }
    }
}

/// An error answer's line.
pub(crate) fn error_line(id: Option<RequestId>, code: i64, message: String) -> String {
    let error = JsonRpcError { jsonrpc: "2.0".into(), id, error: ErrorObject { code, message } };
    serde_json::to_string(&error).expect("an error serializes")
}

impl ServeArgs {
    pub fn run(self, data_dir: &std::path::Path) -> Result<ExitCode, Failure> {
        if self.schema {
            out!("{}", serde_json::to_string_pretty(&protocol::schema()).expect("the schema serializes"));
            return Ok(ExitCode::SUCCESS);
        }
        let root = self.root.expect("clap requires --root without --schema");
        let mut checks = BTreeMap::new();
        for (name, command) in self.check {
            if checks.insert(name.clone(), command).is_some() {
                return Err(bad(anyhow!("--check {name} is given twice")));
            }
        }
        #[allow(clippy::disallowed_methods)] // `--root` from the command line, created when missing
        if !root.exists() {
            std::fs::create_dir_all(&root)
                .map_err(|e| bad(anyhow!("creating root {}: {e}", root.display())))?;
            tracing::info!("created root {}", root.display());
        }
        let (ledger, display_data) = open_ledger(
            &root,
            data_dir,
            self.manifest.as_deref(),
            self.key_file.as_deref(),
            &self.allow_write,
        )?;
        let server = Arc::new(Server::new(ledger, display_data, checks, Outgoing::stdout()));
        eprintln!(
            "effects serve: ready (protocol {}); one JSON-RPC message per line",
            protocol::PROTOCOL_VERSION
        );
        let ended = serve(&server);
        server.drain();
        let synced = server.sync();
        if let Some(id) = ended {
            server.send(server::result_line(id, &protocol::Empty::default()));
        }
        synced.map_err(|e| Failure::new(super::exit::PROBLEMS, anyhow!("making the log durable: {e}")))?;
        Ok(ExitCode::SUCCESS)
    }
}

/// Reads requests until `shutdown` (its id returned, to be answered once
/// everything in flight has) or the end of stdin (`None`).
fn serve(server: &Arc<Server>) -> Option<RequestId> {
    let stdin = std::io::stdin();
    let mut reader = stdin.lock();
    let mut line = Vec::new();
    loop {
        // One message per line, at most the library's input bound.
        match bounded::read_line(&mut reader, &mut line, INPUT_BOUND) {
            Ok(BoundedLine::Line) => {}
            Ok(BoundedLine::End) => return None,
            Ok(BoundedLine::Overlong) => {
                server.send(error_line(
                    None,
                    code::INVALID_REQUEST,
                    format!(
                        "a message is over {INPUT_BOUND} bytes; it was not read (the rest of its line is skipped)"
                    ),
                ));
                continue;
            }
            Err(error) => {
                tracing::error!("reading stdin: {error}");
                return None;
            }
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // Read only what every parser reads alike (no lossy decoding, no
        // key given twice at any depth): a path is never claimed with a
        // U+FFFD where the runtime's own parser saw other bytes.
        let message = strict(&line).and_then(|()| serde_json::from_slice::<Value>(&line));
        let message = match message {
            Ok(message) => message,
            Err(error) => {
                server.send(error_line(
                    None,
                    code::PARSE_ERROR,
                    format!(
                        "the line is not strict JSON ({error}): one UTF-8 JSON message, no key given twice"
                    ),
                ));
                continue;
            }
        };
        if let Some(shutdown) = server.accept(message) {
            return Some(shutdown);
        }
    }
}
