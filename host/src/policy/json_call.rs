//! One sandboxed call with JSON in and JSON out, for a policy author's loop
//! (`effects policy run`): the call's argument is parsed here, inside the
//! crate, and only the answer goes back.
//!
//! The argument names resources (a bound operation's bindings, a ledger's
//! resources), and a resource reference is made by the host only (ID-1):
//! nothing outside the crate may turn JSON into one. So the parsing happens
//! under `model::resource::trusted`, the parsed value goes straight into the
//! component, and the caller never holds it; the answer (a classification, an
//! outcome, readback requests, a decision) names resources by index only.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::model::resource::trusted;
use crate::model::{BoundOperation, EvidenceLedger, ReadbackContext, SettleRequest};

use super::{Called, ClassifierComponent, LoadedComponent, PolicyError};

/// Which export to call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonCall {
    /// `classify`, given a bound operation.
    Classify,
    /// `settle`, given a settle request.
    Settle,
    /// `readbacks`, given a readback context.
    Readbacks,
    /// `evaluate`, given an evidence ledger.
    Evaluate,
}

/// Why a JSON call gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum JsonCallError {
    /// The input is not the call's argument.
    #[error("not a valid {what}: {message}")]
    Input {
        /// The argument's type.
        what: &'static str,
        /// What is wrong, and where.
        message: String,
    },
    /// A ledger whose records are not in log order (`EvidenceLedger::check_order`).
    #[error("records out of log order: {0}")]
    OutOfOrder(String),
    /// The component exports the other world.
    #[error("a {0} component has no such export")]
    WrongWorld(&'static str),
    /// The call failed (a trap, fuel, a limit, a refused answer).
    #[error(transparent)]
    Call(#[from] PolicyError),
}

/// `input` parsed as `T`, resource references included (ID-1: here only).
fn parse<T: DeserializeOwned>(what: &'static str, input: &str) -> Result<T, JsonCallError> {
    trusted(|| serde_json::from_str(input)).map_err(|e| JsonCallError::Input { what, message: e.to_string() })
}

fn answer<T: Serialize>(called: Called<T>) -> serde_json::Value {
    serde_json::to_value(called).expect("an answer and its report always serialize")
}

/// Calls `call` of `component` with `input` (the argument as JSON: field
/// names as in `wit/policy.wit`, with `_` for `-`; a ledger nested, each
/// resource with its location) and returns the answer and its call report
/// as JSON.
pub fn call_json(
    component: &mut LoadedComponent,
    call: JsonCall,
    input: &str,
) -> Result<serde_json::Value, JsonCallError> {
    match (component, call) {
        (LoadedComponent::Classifier(c), JsonCall::Classify) => {
            let operation: BoundOperation = parse("BoundOperation", input)?;
            Ok(answer(c.classify(&operation)?))
        }
        (LoadedComponent::Classifier(c), JsonCall::Settle) => {
            let request: SettleRequest = parse("SettleRequest", input)?;
            Ok(answer(c.settle(&request)?))
        }
        (LoadedComponent::Classifier(c), JsonCall::Readbacks) => {
            let context: ReadbackContext = parse("ReadbackContext", input)?;
            Ok(answer(c.readbacks(&context)?))
        }
        (LoadedComponent::Evaluator(e), JsonCall::Evaluate) => {
            let ledger: EvidenceLedger = parse("EvidenceLedger", input)?;
            ledger.check_order().map_err(JsonCallError::OutOfOrder)?;
            Ok(answer(e.evaluate(&ledger)?))
        }
        (LoadedComponent::Classifier(_), JsonCall::Evaluate) => Err(JsonCallError::WrongWorld("classifier")),
        (LoadedComponent::Evaluator(_), _) => Err(JsonCallError::WrongWorld("evaluator")),
    }
}

/// `classify` of `component` with `operation`, a bound operation as JSON
/// (parsed here, ID-1): the classification as JSON, as `call_json` gives its
/// `value` (classifier vectors, `completion::suite`).
pub fn classify_json(
    component: &mut ClassifierComponent,
    operation: &serde_json::Value,
) -> Result<serde_json::Value, JsonCallError> {
    let operation: BoundOperation = trusted(|| BoundOperation::deserialize(operation))
        .map_err(|e| JsonCallError::Input { what: "BoundOperation", message: e.to_string() })?;
    let classified = component.classify(&operation)?;
    Ok(serde_json::to_value(classified.value).expect("a classification always serializes"))
}
