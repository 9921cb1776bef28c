//! Conformance vectors (SPEC section 4 INV/VER, section 7 CMP): each file in a
//! vectors directory is one small ledger and the decision it must get, in a
//! form a reader checks without Rust.
//!
//! ```json
//! {
//!   "rule": "CMP-7",
//!   "title": "a write with no readback is unverified",
//!   "required": ["a.txt"],
//!   "answer": "I wrote a.txt.",
//!   "records": [
//!     {"claim": {"tool": "write_file", "scope": ["a.txt"],
//!                "obligations": [{"target": "a.txt", "content": "hi\n"}]}},
//!     {"outcome": {"claim": 0, "execution": "REPORTED_SUCCESS"}}
//!   ],
//!   "expect": {"verdict": "UNVERIFIED", "reasons": ["UNVERIFIED_ARTIFACT", "UNSUPPORTED_CLAIM"]}
//! }
//! ```
//!
//! Records take positions 0, 1, 2... in file order unless they say `"at"`. A
//! resource is a file path (`"a.txt"`) or one of `{"external": "server/tool"}`,
//! `{"launch": 7}`, `{"job": "j1"}`, `{"owned": "collection/record"}`. A file
//! is seen with incarnation `1` unless it is named with one,
//! `{"file": "h.txt", "incarnation": "7:42@abc"}` (device:inode`@`ancestors,
//! as the host spells it: two files seen with one device:inode are hard links,
//! ID-3); an obligation's target takes the incarnation its claim's scope gives
//! that file, and an observation's `incarnation` field is the default for its
//! resource. Contents
//! may be given as text (`"content"`, hashed here) or as a digest
//! (`"content_sha256"`). `expect` must give `verdict` and the exact multiset of
//! reason codes; it may also pin each code's evidence positions, the exact
//! assessments, the number of disclosures, and text the disclosures or the
//! presented answer must (or must not) contain.
//!
//! A vector that pins more than one rule names the others in an optional
//! `"rules": ["CL-2"]` list beside `rule`: `effects policy test` counts it for
//! each (`coverage.rs`), and its file stays named after `rule`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::Deserialize;

use super::{Decided, Evaluator};
use crate::digest::Sha256Digest;
use crate::model::{
    Assessment, CheckResult, ClaimEvidence, CleanupState, Coverage, EvidenceLedger, EvidenceRecord,
    Execution, ExternalLocation, FilesystemLocation, FilesystemRoot, Impact, JobLocation, Location,
    Mechanism, ObligationEvidence, ObservationEvidence, Outcome, OutcomeEvidence, OwnedLocation,
    Postcondition, ReasonCode, ResourceIndex, ResourceRef, ResourceRole, Verdict, VerifierEvidence,
};

/// One vector file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vector {
    /// The rule it pins (`CMP-2`, `INV-1`, ...).
    pub rule: String,
    /// Further rules it exercises, if any (rule coverage counts it for each).
    #[serde(default)]
    pub rules: Vec<String>,
    /// What it shows.
    pub title: String,
    /// Required artifacts (file paths).
    #[serde(default)]
    pub required: Vec<String>,
    /// The agent's answer.
    #[serde(default)]
    pub answer: String,
    /// The contract whose shipped evaluator first decides it as expected
    /// (`"2.1.0"`), when an earlier one's evaluator, which the host still
    /// runs (POL-1), decides it otherwise: a rule revision 3 changed, or a
    /// defect fixed since. Absent: every evaluator the host runs must pass it.
    #[serde(default)]
    pub since: Option<String>,
    /// The ledger's records, in order.
    pub records: Vec<VectorRecord>,
    /// Other runs' claims in flight at decision time (CMP-13).
    #[serde(default)]
    pub concurrent: Vec<VectorConcurrent>,
    /// The decision it must get.
    pub expect: Expect,
}

/// Another run's claim in flight (CMP-13): exact `scope`, or unknown scope
/// when it is absent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorConcurrent {
    /// The run that made it.
    pub run: String,
    /// Its position in its own lineage.
    pub at: u64,
    /// Its tool.
    #[serde(default = "write_file")]
    pub tool: String,
    /// What it may touch; absent for unknown scope.
    pub scope: Option<Vec<VectorResource>>,
}

/// A resource named in a vector.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum VectorResource {
    /// A file path beneath the vectors' root.
    File(String),
    /// A file seen with a given incarnation.
    Seen(SeenFile),
    /// Another kind.
    Other(OtherResource),
}

/// A file path with the incarnation a record saw it as (ID-3's hard links
/// need real device:inode incarnations).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeenFile {
    /// The path beneath the vectors' root.
    pub file: String,
    /// The incarnation, e.g. `7:42@abc` or `absent:abc`.
    pub incarnation: String,
}

/// The non-file resources a vector can name.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum OtherResource {
    /// `server/tool`.
    External(String),
    /// A launch generation.
    Launch(u64),
    /// A job id (generation 1).
    Job(String),
    /// `collection/record` (`*` for the collection).
    Owned(String),
}

/// One record of a vector.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum VectorRecord {
    /// A claim.
    Claim(VectorClaim),
    /// An outcome.
    Outcome(VectorOutcome),
    /// An observation.
    Observation(VectorObservation),
    /// A verifier run.
    Verifier(VectorVerifier),
}

fn write_file() -> String {
    "write_file".to_owned()
}

/// A claim: exact `scope`, or unknown scope when it is absent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorClaim {
    /// Position override.
    pub at: Option<u64>,
    /// Tool (default `write_file`).
    #[serde(default = "write_file")]
    pub tool: String,
    /// What it called when its scope cannot say (an external call's
    /// `server/tool`); default empty.
    #[serde(default)]
    pub subject: String,
    /// Exact scope; absent for unknown.
    pub scope: Option<Vec<VectorResource>>,
    /// Obligations.
    #[serde(default)]
    pub obligations: Vec<VectorObligation>,
    /// External effect.
    #[serde(default)]
    pub external: bool,
    /// Refused as a no-op.
    #[serde(default)]
    pub no_op: bool,
    /// It ran processes (PROC-2; INV-2 keeps its window open until a CLEAN cleanup).
    #[serde(default)]
    pub processes: bool,
    /// Its tool fell to the unbound fallback (CMP-6).
    #[serde(default)]
    pub unbound: bool,
    /// A command that ran without write confinement (ID-6).
    #[serde(default)]
    pub unconfined: bool,
}

/// An obligation: exactly one of `content`, `content_sha256`, `absent`, `exists`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorObligation {
    /// Target (must be in the scope).
    pub target: VectorResource,
    /// Expected content as text.
    pub content: Option<String>,
    /// Expected content digest.
    pub content_sha256: Option<String>,
    /// Nothing there.
    #[serde(default)]
    pub absent: bool,
    /// Something there.
    #[serde(default)]
    pub exists: bool,
}

/// An outcome; impact follows execution (OUT-1).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorOutcome {
    /// Position override.
    pub at: Option<u64>,
    /// Position of its claim.
    pub claim: u64,
    /// How it ended.
    pub execution: Execution,
    /// Cleanup (default NOT_APPLICABLE).
    pub cleanup: Option<CleanupState>,
    /// Failure after the truncating open.
    #[serde(default)]
    pub mutation_attempted: bool,
    /// Written by recovery.
    #[serde(default)]
    pub recovery: bool,
    /// Remote acknowledgement.
    #[serde(default)]
    pub remote_acknowledged: bool,
}

fn one() -> String {
    "1".to_owned()
}

fn yes() -> bool {
    true
}

/// An observation (default: a COMPLETE filesystem read of something that exists).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorObservation {
    /// Position override.
    pub at: Option<u64>,
    /// What was observed.
    pub resource: VectorResource,
    /// The incarnation seen (default `1`; change it to model a replacement).
    #[serde(default = "one")]
    pub incarnation: String,
    /// Mechanism (default `filesystem_read`).
    pub mechanism: Option<Mechanism>,
    /// Coverage (default COMPLETE).
    pub coverage: Option<Coverage>,
    /// Whether something existed.
    #[serde(default = "yes")]
    pub exists: bool,
    /// Content seen, as text.
    pub content: Option<String>,
    /// Content digest seen.
    pub content_sha256: Option<String>,
    /// The source claim.
    pub source_claim: Option<u64>,
}

/// A verifier run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorVerifier {
    /// Position override.
    pub at: Option<u64>,
    /// The command (default `cargo test`).
    pub command: Option<String>,
    /// Passed or failed; or give `result`.
    pub passed: Option<bool>,
    /// `PASSED`, `FAILED` or `INCOMPLETE` (timed out or cancelled, CMP-5).
    pub result: Option<CheckResult>,
    /// Position of the claim of the check's own run.
    pub claim: Option<u64>,
}

/// An expected assessment.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedAssessment {
    /// Claim position.
    pub claim: u64,
    /// Obligation index, absent for a claim without obligations.
    pub obligation: Option<u32>,
    /// The assessment.
    pub assessment: Assessment,
    /// The deciding observation, if any.
    pub observation: Option<u64>,
}

/// What the decision must be.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The verdict.
    pub verdict: Verdict,
    /// Reason codes, as a multiset.
    pub reasons: Vec<ReasonCode>,
    /// Per code: the exact set of positions the first reason with it cites.
    #[serde(default)]
    pub evidence: BTreeMap<String, Vec<u64>>,
    /// The exact assessments, in order.
    pub assessments: Option<Vec<ExpectedAssessment>>,
    /// How many disclosures.
    pub disclosures: Option<usize>,
    /// Text some disclosure must contain, each.
    #[serde(default)]
    pub disclosures_mention: Vec<String>,
    /// Text the presented answer must contain, each.
    #[serde(default)]
    pub answer_mentions: Vec<String>,
    /// Text the presented answer must not contain, each.
    #[serde(default)]
    pub answer_lacks: Vec<String>,
    /// Text some reason's remedy must contain, each (CMP-15: a vector that
    /// raises a reason names the remedy its companion vector carries out).
    #[serde(default)]
    pub remedies_mention: Vec<String>,
}

/// The root every vector file lives beneath.
fn vector_root() -> FilesystemRoot {
    FilesystemRoot {
        scope: "vectors".into(),
        owner: "conformance".into(),
        path: "/workspace".into(),
        device: 1,
        inode: 2,
    }
}

fn location(resource: &VectorResource) -> Location {
    match resource {
        VectorResource::File(path) | VectorResource::Seen(SeenFile { file: path, .. }) => {
            Location::Filesystem(FilesystemLocation { root: vector_root(), path: path.clone() })
        }
        VectorResource::Other(OtherResource::External(name)) => {
            let (server, tool) = name.split_once('/').unwrap_or((name, ""));
            Location::External(ExternalLocation {
                namespace: "mcp".into(),
                owner: "conformance".into(),
                endpoint: String::new(),
                server: server.into(),
                tool: tool.into(),
            })
        }
        VectorResource::Other(OtherResource::Launch(generation)) => Location::ProcessLaunch(*generation),
        VectorResource::Other(OtherResource::Job(id)) => {
            Location::BackgroundJob(JobLocation { job_id: id.clone(), generation: 1 })
        }
        VectorResource::Other(OtherResource::Owned(name)) => {
            let (collection, record) = name.split_once('/').unwrap_or((name, "*"));
            Location::Owned(OwnedLocation {
                namespace: "store".into(),
                owner: "conformance".into(),
                thread: "t".into(),
                collection: collection.into(),
                record: record.into(),
            })
        }
    }
}

fn digest_of(text: Option<&String>, digest: Option<&String>) -> Option<String> {
    digest.cloned().or_else(|| text.map(|t| Sha256Digest::of(t.as_bytes()).to_string()))
}

/// Builds ledgers: resources once each, positions in order.
#[derive(Default)]
struct Builder {
    resources: Vec<ResourceRef>,
    index: HashMap<ResourceRef, ResourceIndex>,
}

impl Builder {
    fn resource(
        &mut self,
        resource: &VectorResource,
        role: ResourceRole,
        incarnation: &str,
    ) -> ResourceIndex {
        let incarnation = match resource {
            VectorResource::Seen(seen) => &seen.incarnation,
            _ => incarnation,
        };
        let made = ResourceRef::new(role, location(resource), incarnation.to_owned(), None);
        let next = self.resources.len() as ResourceIndex;
        *self.index.entry(made.clone()).or_insert_with(|| {
            self.resources.push(made);
            next
        })
    }
}

impl Vector {
    /// A vector built in code (a benchmark's ledger, a generated one) that
    /// expects COMPLETED with nothing else pinned.
    pub fn built(records: Vec<VectorRecord>, required: Vec<String>, answer: String) -> Self {
        let expect = Expect {
            verdict: Verdict::Completed,
            reasons: Vec::new(),
            evidence: BTreeMap::new(),
            assessments: None,
            disclosures: None,
            disclosures_mention: Vec::new(),
            answer_mentions: Vec::new(),
            answer_lacks: Vec::new(),
            remedies_mention: Vec::new(),
        };
        Vector {
            rule: "built".into(),
            rules: Vec::new(),
            title: "built in code".into(),
            required,
            answer,
            since: None,
            records,
            concurrent: Vec::new(),
            expect,
        }
    }

    /// Every rule it exercises: `rule`, then the `rules` not already named.
    pub fn exercises(&self) -> Vec<String> {
        exercises(&self.rule, &self.rules)
    }

    /// The evidence ledger this vector describes.
    pub fn ledger(&self) -> Result<EvidenceLedger, String> {
        let mut builder = Builder::default();
        let required = self
            .required
            .iter()
            .map(|path| builder.resource(&VectorResource::File(path.clone()), ResourceRole::Target, "1"))
            .collect();
        let mut records = Vec::new();
        for (index, record) in self.records.iter().enumerate() {
            let at = |at: Option<u64>| at.unwrap_or(index as u64);
            records.push(match record {
                VectorRecord::Claim(claim) => {
                    let scope = claim.scope.as_ref().map(|scope| {
                        scope.iter().map(|r| builder.resource(r, ResourceRole::Target, "1")).collect::<Vec<_>>()
                    });
                    let obligations = claim
                        .obligations
                        .iter()
                        .map(|o| {
                            let postcondition = match (digest_of(o.content.as_ref(), o.content_sha256.as_ref()), o.absent, o.exists) {
                                (Some(digest), false, false) => Postcondition::ContentSha256(digest),
                                (None, true, false) => Postcondition::Absent,
                                (None, false, true) => Postcondition::Exists,
                                _ => return Err(format!("record {index}: an obligation needs exactly one of content, content_sha256, absent, exists")),
                            };
                            // The target as its claim's scope saw it.
                            let target = location(&o.target);
                            let seen = claim.scope.iter().flatten().find(|r| location(r) == target).unwrap_or(&o.target);
                            Ok(ObligationEvidence { target: builder.resource(seen, ResourceRole::Target, "1"), postcondition })
                        })
                        .collect::<Result<_, String>>()?;
                    EvidenceRecord::Claim(ClaimEvidence {
                        position: at(claim.at),
                        run_id: "run".into(),
                        action_id: format!("action-{index}"),
                        tool: claim.tool.clone(),
                        subject: claim.subject.clone(),
                        scope,
                        dependencies: Vec::new(),
                        obligations,
                        external: claim.external,
                        no_op: claim.no_op,
                        processes: claim.processes,
                        unbound: claim.unbound,
                        unconfined: claim.unconfined,
                    })
                }
                VectorRecord::Outcome(outcome) => EvidenceRecord::Outcome(OutcomeEvidence {
                    position: at(outcome.at),
                    claim: outcome.claim,
                    outcome: Outcome {
                        execution: outcome.execution,
                        impact: if outcome.execution == Execution::NotExecuted { Impact::None } else { Impact::Possible },
                        cleanup: outcome.cleanup.unwrap_or(CleanupState::NotApplicable),
                        replayed: false,
                        remote_acknowledged: outcome.remote_acknowledged,
                        detached: false,
                    },
                    recovery: outcome.recovery,
                    mutation_attempted: outcome.mutation_attempted,
                }),
                VectorRecord::Observation(o) => EvidenceRecord::Observation(ObservationEvidence {
                    position: at(o.at),
                    resource: builder.resource(&o.resource, ResourceRole::Source, &o.incarnation),
                    mechanism: o.mechanism.unwrap_or(Mechanism::FilesystemRead),
                    coverage: o.coverage.unwrap_or(Coverage::Complete),
                    source_action: format!("action-{index}"),
                    source_claim: o.source_claim,
                    exists: o.exists,
                    content_sha256: digest_of(o.content.as_ref(), o.content_sha256.as_ref()),
                    job_state: None,
                }),
                VectorRecord::Verifier(v) => EvidenceRecord::Verifier(VerifierEvidence {
                    position: at(v.at),
                    command: v.command.clone().unwrap_or_else(|| "cargo test".into()),
                    result: match (v.passed, v.result) {
                        (Some(true), None) => CheckResult::Passed,
                        (Some(false), None) => CheckResult::Failed,
                        (None, Some(result)) => result,
                        _ => return Err(format!("record {index}: a verifier needs exactly one of passed, result")),
                    },
                    claim: v.claim,
                }),
            });
        }
        let concurrent = self
            .concurrent
            .iter()
            .map(|other| {
                let scope = other.scope.as_ref().map(|scope| {
                    scope.iter().map(|r| builder.resource(r, ResourceRole::Target, "1")).collect()
                });
                let action_id = format!("{}-{}", other.run, other.at);
                ClaimEvidence::bare(other.at, other.run.clone(), action_id, other.tool.clone(), scope)
            })
            .collect();
        Ok(EvidenceLedger {
            resources: builder.resources,
            required,
            records,
            answer: self.answer.clone(),
            concurrent,
        })
    }

    /// Every way `decided` differs from what the vector expects (empty: pass).
    pub fn check(&self, decided: &Decided) -> Vec<String> {
        let decision = &decided.decision;
        let expect = &self.expect;
        let mut failures = Vec::new();
        if decision.verdict != expect.verdict {
            failures.push(format!("verdict {:?}, expected {:?}", decision.verdict, expect.verdict));
        }
        let code = |c: &ReasonCode| {
            serde_json::to_value(c).map(|v| v.as_str().unwrap_or_default().to_owned()).unwrap_or_default()
        };
        let mut got: Vec<String> = decision.reasons.iter().map(|r| code(&r.code)).collect();
        let mut want: Vec<String> = expect.reasons.iter().map(code).collect();
        got.sort();
        want.sort();
        if got != want {
            failures.push(format!("reasons {got:?}, expected {want:?}"));
        }
        for (wanted_code, positions) in &expect.evidence {
            match decision.reasons.iter().find(|r| code(&r.code) == *wanted_code) {
                Some(reason) => {
                    let mut cited = reason.evidence.clone();
                    let mut wanted = positions.clone();
                    cited.sort_unstable();
                    wanted.sort_unstable();
                    if cited != wanted {
                        failures.push(format!("{wanted_code} cites {cited:?}, expected {wanted:?}"));
                    }
                }
                None => failures.push(format!("no {wanted_code} reason to check the evidence of")),
            }
        }
        if let Some(assessments) = &expect.assessments {
            let got: Vec<ExpectedAssessment> = decision
                .assessments
                .iter()
                .map(|a| ExpectedAssessment {
                    claim: a.claim,
                    obligation: a.obligation,
                    assessment: a.assessment,
                    observation: a.observation,
                })
                .collect();
            if &got != assessments {
                failures.push(format!("assessments {got:?}, expected {assessments:?}"));
            }
        }
        if let Some(count) = expect.disclosures
            && decision.disclosures.len() != count
        {
            failures.push(format!(
                "{} disclosures {:?}, expected {count}",
                decision.disclosures.len(),
                decision.disclosures
            ));
        }
        for text in &expect.disclosures_mention {
            if !decision.disclosures.iter().any(|d| d.contains(text.as_str())) {
                failures.push(format!("no disclosure mentions {text:?}: {:?}", decision.disclosures));
            }
        }
        for text in &expect.answer_mentions {
            if !decision.presented_answer.contains(text.as_str()) {
                failures
                    .push(format!("the presented answer lacks {text:?}: {:?}", decision.presented_answer));
            }
        }
        for text in &expect.answer_lacks {
            if decision.presented_answer.contains(text.as_str()) {
                failures
                    .push(format!("the presented answer contains {text:?}: {:?}", decision.presented_answer));
            }
        }
        for text in &expect.remedies_mention {
            if !decision.reasons.iter().any(|r| r.remedy.contains(text.as_str())) {
                let remedies: Vec<&str> = decision.reasons.iter().map(|r| r.remedy.as_str()).collect();
                failures.push(format!("no remedy mentions {text:?}: {remedies:?}"));
            }
        }
        failures
    }
}

/// `rule`, then those of `rules` not already named: every rule a vector
/// exercises, of either kind (`suite.rs`).
pub(super) fn exercises(rule: &str, rules: &[String]) -> Vec<String> {
    let mut all = vec![rule.to_owned()];
    for rule in rules {
        if !all.contains(rule) {
            all.push(rule.clone());
        }
    }
    all
}

/// One vector's result.
#[derive(Debug, Clone)]
pub struct VectorResult {
    /// The file.
    pub file: PathBuf,
    /// Its rule.
    pub rule: String,
    /// Every rule it exercises ([`Vector::exercises`]).
    pub exercises: Vec<String>,
    /// Its title.
    pub title: String,
    /// What differed; empty when it passed.
    pub failures: Vec<String>,
    /// [`Vector::since`].
    pub since: Option<String>,
}

impl VectorResult {
    /// True when nothing differed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Reads every `*.json` vector in `dir`, sorted by file name. A file that is
/// not a valid vector is an error naming it: a broken vector must not pass by
/// being skipped.
// The one place the library opens a directory by path: `effects policy test`
// and the conformance tests name the vectors directory (a `Dir` parameter
// would move this to them; left for a change of this public API).
#[allow(clippy::disallowed_methods)]
pub fn load(dir: &Path) -> Result<Vec<(PathBuf, Vector)>, String> {
    let (opened, names) = json_files_in(dir)?;
    names
        .into_iter()
        .map(|name| {
            let path = dir.join(&name);
            let text = crate::bounded::read_to_string(&opened, &name)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let vector: Vector = serde_json::from_str(&text)
                .map_err(|e| format!("{}: not a valid vector: {e}", path.display()))?;
            Ok((path, vector))
        })
        .collect()
}

/// The `*.json` file names in `dir`, sorted, with the opened directory; an
/// error naming `dir` when it cannot be opened or listed, or holds none.
#[allow(clippy::disallowed_methods)] // see `load`
pub(super) fn json_files_in(dir: &Path) -> Result<(Dir, Vec<String>), String> {
    let opened = Dir::open_ambient_dir(dir, ambient_authority())
        .map_err(|e| format!("cannot open the vectors directory {}: {e}", dir.display()))?;
    let mut names = Vec::new();
    for entry in opened.entries().map_err(|e| format!("cannot list {}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".json") {
            names.push(name);
        }
    }
    names.sort();
    if names.is_empty() {
        return Err(format!("{} holds no *.json vectors", dir.display()));
    }
    Ok((opened, names))
}

/// Runs every vector of `dir` against `evaluator`.
pub fn run(dir: &Path, evaluator: &mut Evaluator<'_>) -> Result<Vec<VectorResult>, String> {
    load(dir)?
        .into_iter()
        .map(|(file, vector)| {
            let ledger = vector.ledger().map_err(|e| format!("{}: {e}", file.display()))?;
            let decided = evaluator.decide(&ledger);
            let failures = vector.check(&decided);
            let exercises = vector.exercises();
            let (rule, title, since) = (vector.rule, vector.title, vector.since);
            Ok(VectorResult { file, rule, exercises, title, failures, since })
        })
        .collect()
}
