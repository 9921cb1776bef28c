//! `effects policy ...`: the policy author's loop. `inspect` reads a component
//! file without running it, `verify` checks a whole manifest, `run` makes one
//! sandboxed call with JSON in and JSON out (like `opa eval` or `kwctl run`),
//! `test` runs the conformance vectors against an evaluator and reports their
//! coverage of the evaluator's rules (like `opa test --coverage`), `replay`
//! (`policy_replay.rs`) shows which recorded decisions a candidate
//! evaluator would change, `new` (`policy_new.rs`) starts a policy crate.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::anyhow;
use clap::{Subcommand, ValueEnum};
use serde::Serialize;

use effect_ledger::data_dir::DataDir;
use effect_ledger::policy::{
    self, CompileCache, EntryState, JsonCall, JsonCallError, LoadedComponent, PolicyError, PolicyOptions,
    PolicySet, PolicySource, SandboxLimits, World,
};

use super::input::{read_bounded, read_bounded_text};
use super::output::out;
use super::runtime::open_data_dir;
use super::{Failure, exit, open_parent};

#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Show a component's world, exports, imports, SHA-256 and size, without
    /// compiling or running it.
    Inspect {
        /// The component file.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check every component of a manifest: digest pin, zero imports, exported
    /// world (it compiles and pre-instantiates each), and its entry in the
    /// compiled-component cache of the data dir. One line per component.
    #[command(after_help = "The cache (DATA/cache/components) must be a directory of yours with mode \
0700; each entry carries a tag made when it was compiled, binding it to the pinned component and the \
engine configuration (POL-1). `cache: ok` means the entry passes its check and will be used; `cache: \
none` that there was none (one is compiled and stored now). An entry that fails its check is never \
run: verify reports it as a problem, and loading replaces it with a fresh compilation, so a second \
verify passes. It is reported all the same because an entry fails only when it was damaged or \
replaced by someone.

Exit status: 0 when every component and cache entry is fine; 1 when any component has a problem, a \
cache entry failed its check, or the cache directory is not private (then nothing is cached).")]
    Verify {
        /// The manifest (default: the policies embedded in this binary).
        #[arg(long)]
        manifest: Option<PathBuf>,
    },
    /// Make one call into a component under the sandbox limits and print the
    /// answer and call report as JSON.
    ///
    /// The input is the call's argument as JSON: a bound operation for
    /// `classify`, a settle request for `settle`, a readback context for
    /// `readbacks`, an evidence ledger for `evaluate` (field names as in
    /// wit/policy.wit, with `_` for `-`; a ledger is written nested, each
    /// resource with its location and each record with its strings, and the
    /// host lays it out as the WIT's columns). Use `-` to read standard
    /// input.
    Run {
        /// The component file (no manifest pin is needed).
        file: PathBuf,
        /// Which export to call.
        #[arg(long, value_enum)]
        call: CallArg,
        /// The argument, as a JSON file, or `-` for standard input.
        #[arg(long)]
        input: PathBuf,
        /// Fuel budget for the call.
        #[arg(long, default_value_t = SandboxLimits::default().fuel)]
        fuel: u64,
        /// Linear memory cap, in bytes.
        #[arg(long, default_value_t = SandboxLimits::default().memory_bytes)]
        memory: usize,
    },
    /// Run conformance vectors against the policies: evaluator vectors (a
    /// ledger and the decision it must get) and classifier vectors (a bound
    /// operation and the classification it must get), from files and
    /// directories. Prints each result, then how many vectors exercise each
    /// rule the evaluator decides. Exit 1 when any vector fails, or (running
    /// every vector) when a rule the rules document requires vectors for has
    /// none.
    #[command(after_help = "Vector formats: see tests/vectors/*.json (evaluator) and \
tests/classifier-vectors/*.json (classifier), and the `completion::vectors` and `completion::suite` \
module docs. A file holding `classify` is a classifier vector: the bound operation exactly as `policy \
run --call classify` takes it, and `expect`, the classification exactly as that command prints its \
`value`. A file that cannot be read or parsed fails as that vector; the others still run.

Who answers: without --evaluator, the shipped (embedded) evaluator; --native, the same evaluator \
compiled into this binary. Classifier vectors go to the shipped classifier for the operation's tool, \
or to --classifier FILE.

Coverage: a vector exercises the rule in its `rule` field and those in its optional `rules` list. \
The rules the evaluator decides are the rows of the `## Conformance vectors per rule` table of the \
rules document (--rules, default docs/rules.md): `| `CMP-2` | required |` makes a rule need at \
least one vector, `| `OUT-1` | pending: why |` lists it without requiring it. That requirement is \
checked only when every vector runs (no --run); --coverage also counts the vectors expecting each \
reason code. Run from the repository root, or give the paths and --rules.

Formats: text (default); json (one object per vector, then `coverage`, `reasons` with --coverage, \
and `summary`); junit (JUnit XML, one testcase per vector, for CI dashboards); tap (TAP version 13).")]
    Test {
        /// Vector files and directories (a directory's `*.json` files).
        #[arg(default_values = ["tests/vectors", "tests/classifier-vectors"])]
        paths: Vec<PathBuf>,
        /// The rules document whose `## Conformance vectors per rule` table
        /// lists the evaluator's rules and which need vectors.
        #[arg(long, value_name = "FILE", default_value = "docs/rules.md")]
        rules: PathBuf,
        /// An evaluator component file to test (no manifest pin is needed).
        #[arg(long, conflicts_with = "native")]
        evaluator: Option<PathBuf>,
        /// Test the shipped evaluator compiled natively instead of a component.
        #[arg(long)]
        native: bool,
        /// A classifier component file to answer every classifier vector.
        #[arg(long)]
        classifier: Option<PathBuf>,
        /// Only the vectors whose file name matches this regular expression.
        #[arg(long = "run", value_name = "REGEX")]
        filter: Option<String>,
        /// Also report which reason codes the vectors expect, and how often.
        #[arg(long)]
        coverage: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// The same as --format json.
        #[arg(long, conflicts_with = "format")]
        json: bool,
    },
    /// Policy impact replay: decide every run's last recorded decision again
    /// with a candidate evaluator, without writing, and list every run whose
    /// verdict or reasons would change. Exit 1 when any would.
    Replay(super::policy_replay::ReplayArgs),
    /// Start a new policy: a guest crate (classifier or evaluator) in the
    /// guest workspace, with a native unit test and a conformance vector,
    /// that builds and passes as generated.
    New(super::policy_new::NewArgs),
}

/// How `policy test` prints its results.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A line per vector, the coverage table, the totals.
    Text,
    /// One JSON object per line.
    Json,
    /// JUnit XML.
    Junit,
    /// TAP version 13.
    Tap,
}

/// Which components answer `policy test`'s vectors.
pub struct Answering<'a> {
    /// An evaluator component file, else the shipped evaluator.
    pub evaluator: Option<&'a Path>,
    /// The shipped evaluator compiled natively.
    pub native: bool,
    /// A classifier component file for every classifier vector, else the
    /// shipped classifier for each operation's tool.
    pub classifier: Option<&'a Path>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum CallArg {
    Classify,
    Settle,
    Readbacks,
    Evaluate,
}

impl PolicyCommand {
    pub fn run(self, data_dir: &Path) -> Result<ExitCode, Failure> {
        match self {
            PolicyCommand::Inspect { file, json } => inspect(&file, json),
            PolicyCommand::Verify { manifest } => verify(manifest.as_deref(), data_dir),
            PolicyCommand::Run { file, call, input, fuel, memory } => {
                let limits = SandboxLimits { fuel, memory_bytes: memory, ..SandboxLimits::default() };
                run(&file, call, &input, limits)
            }
            PolicyCommand::Test {
                paths,
                rules,
                evaluator,
                native,
                classifier,
                filter,
                coverage,
                format,
                json,
            } => {
                let format = if json { Format::Json } else { format };
                let answer =
                    Answering { evaluator: evaluator.as_deref(), native, classifier: classifier.as_deref() };
                super::policy_test::test(&paths, &rules, &answer, filter.as_deref(), coverage, format)
            }
            PolicyCommand::Replay(args) => args.run(data_dir),
            PolicyCommand::New(args) => args.run(),
        }
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, Failure> {
    read_bounded(path, "the component")
}

fn print_json(value: &impl Serialize) -> Result<(), Failure> {
    out!("{}", serde_json::to_string_pretty(value).expect("CLI output always serializes"));
    Ok(())
}

fn inspect(file: &Path, json: bool) -> Result<ExitCode, Failure> {
    let bytes = read_file(file)?;
    let shape = policy::inspect(&bytes).map_err(|e| {
        Failure::new(exit::BAD_INPUT, anyhow!("{}: not a WebAssembly component: {e}", file.display()))
    })?;
    if json {
        #[derive(Serialize)]
        struct Inspected<'a> {
            file: String,
            #[serde(flatten)]
            shape: &'a policy::ComponentShape,
        }
        print_json(&Inspected { file: file.display().to_string(), shape: &shape })?;
    } else {
        let world = match (shape.world, shape.contract) {
            (Some(world), Some(contract)) => format!("{world} ({contract})"),
            _ => format!("none of {}", policy::Contract::spoken()),
        };
        let list = |names: &[String]| if names.is_empty() { "none".to_owned() } else { names.join(", ") };
        out!("file:    {}", file.display());
        out!("world:   {world}");
        out!("exports: {}", list(&shape.exports));
        out!("imports: {}", list(&shape.imports));
        out!("sha256:  {}", shape.sha256);
        out!("size:    {} bytes", shape.size);
    }
    Ok(ExitCode::SUCCESS)
}

/// The compiled-component cache of `data` (`DataDir::open_cache`: made
/// `0700` when absent, never followed as a symbolic link, used only when it
/// is private, POL-1); otherwise the reason, with what to do about it.
fn try_open_cache(data: &DataDir) -> Result<CompileCache, String> {
    let dir = data.cache_display();
    data.open_cache().map_err(|error| {
        format!(
            "compiled-component cache {dir} not used: {error}; make it a directory of your own with mode \
             0700 (`chmod 700 {dir}`), or remove it to have it made again"
        )
    })
}

/// [`try_open_cache`] for a command that only wants the speed: a cache that
/// cannot be used is warned about once and skipped (components compile in
/// memory).
pub(super) fn open_cache(data: &DataDir) -> Option<CompileCache> {
    try_open_cache(data).map_err(|why| tracing::warn!("{why}; compiling in memory")).ok()
}

/// The working directory's manifest a policy author's build writes.
const WORKING_MANIFEST: &str = "policies/manifest.toml";

/// Warns when the policies embedded in this binary differ from a
/// `policies/manifest.toml` in the working directory: a policy author who
/// rebuilt a component and not the binary would otherwise test the old one
/// believing it the new.
pub(super) fn warn_if_embedded_differ() {
    let path = Path::new(WORKING_MANIFEST);
    #[allow(clippy::disallowed_methods)] // a probe of the working directory, read only when present
    let present = path.is_file();
    if !present {
        return;
    }
    let manifest = read_bounded_text(path, "the working directory's manifest")
        .map_err(|failure| failure.error.to_string())
        .and_then(|text| policy::Manifest::parse(&text));
    let manifest = match manifest {
        Ok(manifest) => manifest,
        Err(why) => {
            tracing::warn!(
                "./{WORKING_MANIFEST} could not be compared with the policies embedded in this binary ({why}); \
                 this command runs the embedded ones"
            );
            return;
        }
    };
    let differences = policy::embedded_differences(&manifest);
    if !differences.is_empty() {
        tracing::warn!(
            "the policies embedded in this binary differ from ./{WORKING_MANIFEST} ({}): this command runs the \
             embedded ones; rebuild the binary (`cargo build --release`) or pass --manifest {WORKING_MANIFEST}",
            differences.join("; ")
        );
    }
}

pub(super) fn manifest_source(manifest: Option<&Path>) -> Result<PolicySource, Failure> {
    let Some(path) = manifest else {
        warn_if_embedded_differ();
        return Ok(PolicySource::Shipped);
    };
    let bad =
        |message: String| Failure::new(exit::BAD_INPUT, anyhow!("manifest {}: {message}", path.display()));
    let file_name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| bad("not a file path".into()))?;
    let (dir, _) = open_parent(path).map_err(|e| bad(e.to_string()))?;
    Ok(PolicySource::Directory {
        dir,
        manifest_file: file_name.to_owned(),
        display: path.display().to_string(),
    })
}

fn verify(manifest: Option<&Path>, data_dir: &Path) -> Result<ExitCode, Failure> {
    let source = manifest_source(manifest)?;
    let mut problems = 0;
    // POL-1: the cache is checked before the components are loaded through
    // it, since loading recompiles and replaces an entry that fails its check.
    let opened = open_data_dir(data_dir, true).map_err(|failure| {
        format!("compiled-component cache in {} not used: {}", data_dir.display(), failure.error)
    });
    let cache = match opened.and_then(|data| try_open_cache(&data.expect("a created data dir opens"))) {
        Ok(cache) => Some(cache),
        Err(why) => {
            problems += 1;
            out!("problem  {why}");
            None
        }
    };
    let options = PolicyOptions::default();
    let states: BTreeMap<String, EntryState> = match &cache {
        Some(cache) => PolicySet::check_cache(&source, &options, cache)
            .map_err(|e| Failure::new(exit::BAD_INPUT, e))?
            .into_iter()
            .map(|(entry, state)| (entry.name, state))
            .collect(),
        None => BTreeMap::new(),
    };
    let options = PolicyOptions { cache, ..options };
    let results = PolicySet::verify(&source, &options).map_err(|e| Failure::new(exit::BAD_INPUT, e))?;
    for (entry, result) in &results {
        let cached = match states.get(&entry.name) {
            None => "not used",
            Some(EntryState::Passed) => "ok",
            Some(EntryState::Missing) => "none (compiled now)",
            Some(EntryState::Failed(why)) => {
                problems += 1;
                out!(
                    "problem  cache entry for {} (sha256 {}) failed its check: {why}; it was not run, \
                     and loading recompiles and replaces it",
                    entry.name,
                    entry.sha256
                );
                "failed its check (above)"
            }
        };
        match result {
            Ok(()) => {
                out!("ok       {} ({}, sha256 {}; cache: {cached})", entry.name, entry.world, entry.sha256)
            }
            Err(error) => {
                problems += 1;
                out!("problem  {error}");
            }
        }
    }
    eprintln!("{}: {} component(s), {problems} problem(s)", source.describe(), results.len());
    Ok(if problems == 0 { ExitCode::SUCCESS } else { ExitCode::from(exit::PROBLEMS) })
}

/// The call's argument in `text`: the argument itself, or taken from a
/// vector (an evaluator vector's ledger, built; a classifier vector's
/// `classify`), so a failing vector is run again as it is.
fn argument_of(text: &str, call: JsonCall) -> Result<String, String> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else { return Ok(text.to_owned()) };
    match call {
        JsonCall::Classify if value.get("classify").is_some() && value.get("expect").is_some() => {
            Ok(value["classify"].to_string())
        }
        JsonCall::Evaluate if value.get("records").is_some() && value.get("expect").is_some() => {
            let vector: effect_ledger::completion::vectors::Vector =
                serde_json::from_value(value).map_err(|e| format!("not a valid vector: {e}"))?;
            let ledger = vector.ledger()?;
            Ok(serde_json::to_string(&ledger).expect("a ledger serializes"))
        }
        _ => Ok(text.to_owned()),
    }
}

/// The component in `file` (named `what` in errors), loaded unpinned into
/// `world` under its file stem's name; exit 3 when it is refused.
pub(super) fn load_file(
    file: &Path,
    what: &str,
    world: World,
    options: &PolicyOptions,
) -> Result<LoadedComponent, Failure> {
    let bytes = read_bounded(file, what)?;
    let name = file.file_stem().map_or_else(|| "component".to_owned(), |s| s.to_string_lossy().into_owned());
    policy::load_unpinned(&name, world, &bytes, options).map_err(|e| Failure::new(exit::REFUSED, e))
}

fn run(file: &Path, call: CallArg, input: &Path, limits: SandboxLimits) -> Result<ExitCode, Failure> {
    let (world, call) = match call {
        CallArg::Classify => (World::Classifier, JsonCall::Classify),
        CallArg::Settle => (World::Classifier, JsonCall::Settle),
        CallArg::Readbacks => (World::Classifier, JsonCall::Readbacks),
        CallArg::Evaluate => (World::Evaluator, JsonCall::Evaluate),
    };
    let options = PolicyOptions { limits, ..PolicyOptions::default() };
    let mut component = load_file(file, "the component", world, &options)?;
    let text = argument_of(&read_bounded_text(input, "the input")?, call)
        .map_err(|e| Failure::new(exit::BAD_INPUT, anyhow!("{}: {e}", input.display())))?;
    // The input is parsed inside the library (ID-1: resource refs are made
    // there only); only the answer comes back.
    let answer = policy::call_json(&mut component, call, &text).map_err(|error| match error {
        JsonCallError::Call(error) => {
            let code =
                if matches!(error, PolicyError::Guest { .. }) { exit::PROBLEMS } else { exit::CALL_FAILED };
            Failure::new(code, anyhow!("[{}] {error}", error.kind()))
        }
        JsonCallError::WrongWorld(_) => unreachable!("the world was chosen from the call"),
        input_error => Failure::new(exit::BAD_INPUT, anyhow!("{}: {input_error}", input.display())),
    })?;
    print_json(&answer)?;
    Ok(ExitCode::SUCCESS)
}
