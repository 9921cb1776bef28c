//! `effects doctor [--json]`: what this machine gives the ledger that the
//! ledger cannot give itself. Today that is one thing: whether commands can
//! be confined (ID-6), which needs Landlock (ABI 3 or later) and the
//! `effects-supervisor` helper beside the binary. Where they cannot, every
//! decision over a run with commands discloses "commands ran without write
//! confinement"; the doctor says so before any run does.

use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use effect_ledger::producers::confine::{self, Confinement, Landlock};

use super::Failure;
use super::output::out;

/// Report the machine's confinement of commands (ID-6).
#[derive(Args)]
pub struct DoctorArgs {
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
}

impl DoctorArgs {
    /// Prints the report; exits 0 either way (an unconfined machine is a
    /// fact to know, not an error: its decisions disclose it).
    pub fn run(self) -> Result<ExitCode, Failure> {
        let kernel = confine::landlock();
        let confinement = Confinement::detect();
        let (landlock, abi) = match kernel {
            Landlock::Available { abi } => (format!("available, ABI {abi}"), Some(*abi)),
            Landlock::Absent { why } => (format!("absent: {why}"), None),
        };
        let commands = match confinement.landlock() {
            Landlock::Available { .. } => {
                "confined: writes beneath the root, a private TMPDIR and --allow-write paths only".to_owned()
            }
            Landlock::Absent { why } => {
                format!("unconfined ({why}); every decision over a run in which one ran discloses it")
            }
        };
        if self.json {
            let report = json!({
                "landlock": { "available": abi.is_some(), "abi": abi, "detail": landlock },
                "commands": { "confined": confinement.confined(), "detail": commands },
            });
            out!("{report}");
        } else {
            out!("landlock: {landlock}");
            out!("commands: {commands}");
        }
        Ok(ExitCode::SUCCESS)
    }
}
