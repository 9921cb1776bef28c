//! Capturing the exact argument of every policy call (`effects session
//! --trace-policies DIR`): a policy author sees what a real session sent,
//! and runs any of it again with `effects policy run`.
//!
//! Each call writes one file, `NNNNNN-CALL-COMPONENT.json` (a sequence
//! number per process, the call as `policy run --call` names it, the
//! component), holding the argument as `policy run --input` takes it: a bound
//! operation, a settle request, a readback context, an evidence ledger. A
//! trace is a diagnostic: a file that cannot be written is warned about and
//! never fails the call. It holds what the tools were given (a write's
//! content included), so keep it where the tools cannot read it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::Dir;
use serde::Serialize;

use super::PolicyCall;

/// Where a policy set's calls are traced. Cheap to clone: every clone
/// writes to the same directory with the same numbering.
#[derive(Clone)]
pub struct Trace {
    dir: Arc<Dir>,
    display: String,
    next: Arc<AtomicU64>,
}

impl Trace {
    /// Traces into `dir`, named `display` in warnings.
    pub fn new(dir: Dir, display: &str) -> Self {
        Self { dir: Arc::new(dir), display: display.to_owned(), next: Arc::new(AtomicU64::new(1)) }
    }

    /// Writes `argument` of `call` to `component` as the next file.
    pub(crate) fn record(&self, call: PolicyCall, component: &str, argument: &impl Serialize) {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let name = format!("{number:06}-{call}-{component}.json");
        let text = serde_json::to_string_pretty(argument).expect("a policy argument serializes") + "\n";
        if let Err(error) = self.dir.write(&name, text) {
            tracing::warn!("the policy trace {}/{name} could not be written: {error}", self.display);
        }
    }
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace").field("dir", &self.display).finish()
    }
}
