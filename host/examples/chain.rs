//! The runtime chain through the Rust API, end to end, in a temporary
//! directory: `cargo run --release --example chain`.
//!
//! It writes a file through the ledger (claim durable before the write), reads
//! it back (an admitted read whose observation carries the digest), prints
//! the lineage's history as the log has it, and asks for the completion
//! decision (COMPLETED: the write is verified by the read).

#![allow(clippy::disallowed_methods)] // an example takes its paths with ambient authority

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, SealedRoot};
use effect_ledger::ledger::{Dispatch, Ledger, LedgerConfig};
use effect_ledger::log::Record;
use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
use effect_ledger::producers::fs::{read_file, write_file};
use serde_json::json;

fn main() -> anyhow::Result<()> {
    let scratch = tempfile::tempdir()?;
    let (workspace, data) = (scratch.path().join("workspace"), scratch.path().join("data"));
    std::fs::create_dir_all(&workspace)?;
    std::fs::create_dir_all(&data)?;

    // Authority enters here: the caller opens the root and the data dir.
    let root_dir = Dir::open_ambient_dir(&workspace, ambient_authority())?;
    let root = SealedRoot::new(root_dir, "workspace", "example", "agent", ControlPlane::default())?;
    let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default())?;
    let data_dir = Dir::open_ambient_dir(&data, ambient_authority())?;
    let mut ledger = Ledger::new(LedgerConfig::new(data_dir, "data", root, policies));
    let run = ledger.begin_run(None);

    // 1. A write: classified, claimed durably, only then produced, then settled.
    let input = json!({ "path": "notes/hello.txt", "content": "hello\n" });
    match ledger.dispatch(&run, "write_file", &input, "request-1") {
        Dispatch::Run(dispatched) => {
            println!("claimed at #{:?} before writing", dispatched.claim);
            // The producer opens what was resolved at binding (ID-3).
            let target = &dispatched.bound.targets(ledger.root())[0];
            let produced = write_file(ledger.root(), target, "hello\n");
            let recorded = ledger.record(&run, &dispatched, &produced.facts)?;
            println!("outcome {:?} at #{:?}", recorded.outcome.execution, recorded.outcome_position);
        }
        Dispatch::Refused(reason) | Dispatch::Blocked(reason) => anyhow::bail!("not run: {reason}"),
    }

    // 2. A read: admitted without a claim; its readback is an observation.
    let input = json!({ "path": "notes/hello.txt" });
    if let Dispatch::Run(dispatched) = ledger.dispatch(&run, "read_file", &input, "request-2") {
        let target = &dispatched.bound.targets(ledger.root())[0];
        let produced = read_file(ledger.root(), target, 0, None, 1 << 20);
        let recorded = ledger.record(&run, &dispatched, &produced.facts)?;
        for (position, observation) in &recorded.observations {
            println!(
                "observation #{position}: {:?} sha256 {:?}",
                observation.coverage, observation.content_sha256
            );
        }
    }

    // 3. The durable history of the run's lineage.
    for framed in ledger.history(&run.lineage)? {
        let what = match &framed.record {
            Record::Claim(claim) => {
                format!("claim by {} ({} target(s))", claim.operation.tool, claim.impact_scope.len())
            }
            Record::Outcome(outcome) => {
                format!("outcome {:?} of #{}", outcome.outcome.execution, outcome.claim)
            }
            Record::Observation(observation) => format!("observation exists={}", observation.exists),
            Record::Verifier(verifier) => format!("check `{}` passed={}", verifier.command, verifier.passed),
            Record::Decision(decision) => format!("decision {:?}", decision.verdict),
            Record::Processes(processes) => format!("processes of #{}", processes.claim),
        };
        println!("#{} {what}", framed.position);
    }

    // 4. The completion decision over that history, recorded with the
    //    evaluator's digest and fuel.
    let completion = ledger.complete(&run, &["notes/hello.txt".to_owned()], "I wrote notes/hello.txt.")?;
    let decision = &completion.decided.decision;
    println!("decision: {:?} ({} reason(s))", decision.verdict, decision.reasons.len());
    println!("presented answer: {}", decision.presented_answer);
    Ok(())
}
