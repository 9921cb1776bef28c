//! The conformance suite `effects policy test` runs: evaluator vectors
//! (`vectors.rs`: a ledger in, a decision out) and **classifier vectors** (a
//! bound operation in, a classification out), from any mix of files and
//! directories.
//!
//! A classifier vector is a file holding a `classify` object, the bound
//! operation exactly as `effects policy run --call classify` takes it, and
//! the classification it must get, exactly as that command prints its
//! `value` (`{"effect": {...}}`, `"read_only"`, `{"refused": "why"}`):
//!
//! ```json
//! {
//!   "rule": "CL-1",
//!   "title": "a write to an absent file claims it with its content",
//!   "classify": {"tool": "write_file", "input_json": "...", "bindings": [...], ...},
//!   "expect": {"effect": {"scope": {"exact": [0]}, "obligations": [...], ...}}
//! }
//! ```
//!
//! A vector whose `expect` is `{"error": "text"}` expects the classifier to
//! fail with a message containing `text` (a refusal to plan, POL-4's
//! failure: the host then claims unknown scope).
//!
//! The classifier that answers is the one the policy set routes the
//! operation's tool to, unless the caller gives one component for every
//! classifier vector.
//!
//! One bad vector fails that vector, not the run: a file that cannot be read
//! or parsed, a ledger that cannot be built and a call that fails are each
//! that vector's failure, named, and every other vector still runs.

use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::Deserialize;
use serde_json::Value;

use super::Decided;
use super::vectors::{Vector, VectorResult};
use crate::model::{EvidenceLedger, ReasonCode};

/// What a vector file checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VectorKind {
    /// A ledger and its decision.
    Evaluator,
    /// A bound operation and its classification.
    Classifier,
}

/// A classifier vector (see the module docs).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifierVector {
    /// The rule it pins.
    pub rule: String,
    /// Further rules it exercises.
    #[serde(default)]
    pub rules: Vec<String>,
    /// What it shows.
    pub title: String,
    /// The bound operation, as `policy run --call classify` takes it.
    pub classify: Value,
    /// The classification it must get, exactly.
    pub expect: Value,
}

/// The vector files beneath `paths`: a directory's `*.json` files sorted by
/// name (not its subdirectories), a file as given, in the order given. A
/// path that cannot be opened or listed is an error naming it; a directory
/// with no vectors is one too.
// `effects policy test` names these paths; see `vectors::load`.
#[allow(clippy::disallowed_methods)]
pub fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for path in paths {
        if !path.is_dir() {
            if !path.exists() {
                return Err(format!("{}: no such vector file or directory", path.display()));
            }
            files.push(path.clone());
            continue;
        }
        let (_, names) = super::vectors::json_files_in(path)?;
        files.extend(names.into_iter().map(|name| path.join(name)));
    }
    Ok(files)
}

/// Who answers the suite's vectors.
pub struct Answerers<'a> {
    /// Decides an evaluator vector's ledger.
    pub decide: &'a mut dyn FnMut(&EvidenceLedger) -> Decided,
    /// Classifies a classifier vector's operation (the bound operation as
    /// JSON): the classification as JSON, or why there is none.
    pub classify: &'a mut dyn FnMut(&Value) -> Result<Value, String>,
}

/// One vector file's result, with what it is.
#[derive(Debug)]
pub struct Checked {
    /// The result (file, rule, rules exercised, title, failures).
    pub result: VectorResult,
    /// What it checks; `None` for a file that is no vector at all.
    pub kind: Option<VectorKind>,
    /// The reason codes an evaluator vector expects (reason coverage).
    pub reasons: Vec<ReasonCode>,
}

/// Runs the vector in `file`. Never an error: whatever goes wrong is this
/// vector's failure.
pub fn check(file: &Path, answerers: &mut Answerers<'_>) -> Checked {
    let failed = |why: String, kind| Checked {
        result: VectorResult {
            file: file.to_owned(),
            rule: "-".into(),
            exercises: Vec::new(),
            title: "-".into(),
            failures: vec![why],
            since: None,
        },
        kind,
        reasons: Vec::new(),
    };
    let text = match read(file) {
        Ok(text) => text,
        Err(why) => return failed(why, None),
    };
    let value: Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(e) => return failed(format!("not JSON: {e}"), None),
    };
    if value.get("classify").is_some() {
        let vector: ClassifierVector = match serde_json::from_value(value) {
            Ok(vector) => vector,
            Err(e) => {
                return failed(format!("not a valid classifier vector: {e}"), Some(VectorKind::Classifier));
            }
        };
        let refusal = vector.expect.get("error").and_then(Value::as_str);
        let failures = match ((answerers.classify)(&vector.classify), refusal) {
            (Ok(got), None) if got == vector.expect => Vec::new(),
            (Ok(got), None) => vec![format!("classification: expected {}, got {got}", vector.expect)],
            (Err(why), None) => vec![format!("the classifier gave no answer: {why}")],
            (Err(why), Some(text)) if why.contains(text) => Vec::new(),
            (Err(why), Some(text)) => vec![format!("expected an error mentioning {text:?}, got: {why}")],
            (Ok(got), Some(text)) => vec![format!("expected an error mentioning {text:?}, got {got}")],
        };
        let exercises = super::vectors::exercises(&vector.rule, &vector.rules);
        let result = VectorResult {
            file: file.to_owned(),
            rule: vector.rule,
            exercises,
            title: vector.title,
            failures,
            since: None,
        };
        return Checked { result, kind: Some(VectorKind::Classifier), reasons: Vec::new() };
    }
    let vector: Vector = match serde_json::from_value(value) {
        Ok(vector) => vector,
        Err(e) => return failed(format!("not a valid vector: {e}"), Some(VectorKind::Evaluator)),
    };
    let reasons = vector.expect.reasons.clone();
    let failures = match vector.ledger() {
        Ok(ledger) => vector.check(&(answerers.decide)(&ledger)),
        Err(why) => vec![format!("its ledger cannot be built: {why}")],
    };
    let exercises = vector.exercises();
    let (rule, title, since) = (vector.rule, vector.title, vector.since);
    let result = VectorResult { file: file.to_owned(), rule, exercises, title, failures, since };
    Checked { result, kind: Some(VectorKind::Evaluator), reasons }
}

/// The file's text, under the input bound.
#[allow(clippy::disallowed_methods)] // a vector file `effects policy test` names
fn read(file: &Path) -> Result<String, String> {
    let parent = file.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = file.file_name().and_then(|n| n.to_str()).ok_or_else(|| "not a UTF-8 file name".to_owned())?;
    let dir = Dir::open_ambient_dir(parent, ambient_authority()).map_err(|e| format!("cannot open: {e}"))?;
    crate::bounded::read_to_string(&dir, name).map_err(|e| format!("cannot read: {e}"))
}
