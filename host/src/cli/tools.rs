//! `effects tools`: the typed tool catalogue (`tools::catalogue`), for a
//! person (one line per tool) or, with `--json`, for a program: a JSON array
//! of `{name, description, input_schema, family, runs_by}`, the shape model
//! APIs take for tool definitions (`input_schema` is a JSON Schema).

use std::process::ExitCode;

use clap::Args;

use effect_ledger::tools::{RunsBy, catalogue};

use super::Failure;
use super::output::out;

/// Arguments of `effects tools`.
#[derive(Args)]
#[command(after_help = "Tools the host runs (RUNS_BY HOST) run through its reference producers \
under their claims; tools the embedding runtime runs (RUNS_BY RUNTIME) are claimed, and settled \
from the facts the runtime reports (`reported` in a session script). A tool not listed here may \
still be used with reported facts: it binds no resource, so its claim has unknown scope and its \
outcome comes from its exit status only.")]
pub struct ToolsArgs {
    /// A JSON array of tool definitions with their input schemas.
    #[arg(long)]
    json: bool,
}

impl ToolsArgs {
    pub fn run(self) -> Result<ExitCode, Failure> {
        let tools = catalogue();
        if self.json {
            out!("{}", serde_json::to_string_pretty(&tools).expect("the catalogue serializes"));
            return Ok(ExitCode::SUCCESS);
        }
        for tool in &tools {
            let runs = match tool.runs_by {
                RunsBy::Host => "host",
                RunsBy::Runtime => "runtime",
            };
            let fields = tool.input_schema.get("properties").and_then(|p| p.as_object());
            let required = tool.input_schema.get("required").and_then(|r| r.as_array());
            let fields: Vec<String> = fields
                .into_iter()
                .flatten()
                .map(|(name, _)| {
                    let needed = required.is_some_and(|r| r.iter().any(|n| n == name.as_str()));
                    if needed { name.clone() } else { format!("[{name}]") }
                })
                .collect();
            out!("{:<12} {:<8} {}", tool.name, runs, tool.description);
            out!("{:<12} {:<8} input: {{{}}}", "", "", fields.join(", "));
        }
        Ok(ExitCode::SUCCESS)
    }
}
