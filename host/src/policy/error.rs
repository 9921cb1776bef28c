//! Every way loading or calling a policy component can fail, as one typed enum.
//!
//! Each variant names the component and says what to do or what happened; the
//! CLI prints them as they are. [`PolicyError::kind`] is the stable short code a
//! program (or a test) matches on.

use std::fmt;

use crate::digest::Sha256Digest;

use super::{Contract, World};

/// Which export a call went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyCall {
    /// `classify.classify`.
    Classify,
    /// `classify.settle`.
    Settle,
    /// `classify.readbacks`.
    Readbacks,
    /// `evaluate.evaluate`.
    Evaluate,
}

impl fmt::Display for PolicyCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PolicyCall::Classify => "classify",
            PolicyCall::Settle => "settle",
            PolicyCall::Readbacks => "readbacks",
            PolicyCall::Evaluate => "evaluate",
        })
    }
}

/// The export names a component of `world` must carry: those of `contract`,
/// or, for a component no manifest pins, those of any version the host speaks.
fn expected_exports(world: World, contract: Option<Contract>) -> String {
    let of = |contract: Contract| format!("{contract} ([{}])", world.export_names(contract).join(", "));
    match contract {
        Some(contract) => of(contract),
        None => Contract::ALL.map(of).join(" or "),
    }
}

/// A policy load or call failure.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The manifest is unreadable or inconsistent.
    #[error("policy manifest {path}: {message}")]
    Manifest {
        /// Where the manifest came from.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A component file could not be read.
    #[error("component {component}: cannot read {file}: {source}")]
    Read {
        /// Component name.
        component: String,
        /// File named by the manifest.
        file: String,
        /// The IO error.
        source: std::io::Error,
    },
    /// The bytes are not the ones the manifest pins (POL-1); nothing was compiled.
    #[error(
        "component {component}: sha256 mismatch: the manifest pins {expected} but {file} is {actual}; refused before compilation (rebuild with `cargo xtask policies` or restore the file)"
    )]
    DigestMismatch {
        /// Component name.
        component: String,
        /// File.
        file: String,
        /// Pinned digest.
        expected: Sha256Digest,
        /// Actual digest.
        actual: Sha256Digest,
    },
    /// Not a parseable WebAssembly component.
    #[error("component {component}: not a valid WebAssembly component: {message}")]
    Malformed {
        /// Component name.
        component: String,
        /// Parser message.
        message: String,
    },
    /// The component imports something (POL-1).
    #[error(
        "component {component}: refused: it has {} import(s) ({}); policy components must import nothing",
        imports.len(), imports.join(", ")
    )]
    Imports {
        /// Component name.
        component: String,
        /// The import names.
        imports: Vec<String>,
    },
    /// The component does not export the world the manifest says, in a
    /// contract version the host speaks (the manifest's, when it has one).
    #[error(
        "component {component}: refused: it does not export exactly the {expected} world of {}; it exports: [{}]{}",
        expected_exports(*expected, *contract), exports.join(", "), detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default()
    )]
    WrongWorld {
        /// Component name.
        component: String,
        /// The world the manifest expects.
        expected: World,
        /// The contract version the manifest says; `None` for a component
        /// no manifest pins, which may be of any version the host speaks.
        contract: Option<Contract>,
        /// What it does export.
        exports: Vec<String>,
        /// Type-check detail from the runtime, when the names matched but the types did not.
        detail: Option<String>,
    },
    /// It exports the world's names, but its functions' types are not this
    /// host's contract: it was built against another shape of `wit/`.
    #[error(
        "component {component}: refused: it exports the {world} world's names of {contract}, but its types are \
         not this host's {contract} ({}): {detail}. Rebuild it against this wit/ \
         (`cargo xtask policies` for the shipped ones)",
        contract.wit_file()
    )]
    ContractMismatch {
        /// Component name.
        component: String,
        /// The world whose names it exports.
        world: World,
        /// The contract version whose names it exports.
        contract: Contract,
        /// Wasmtime's type-check message.
        detail: String,
    },
    /// Wasmtime could not compile or link it.
    #[error("component {component}: compilation failed: {message}")]
    Compile {
        /// Component name.
        component: String,
        /// Wasmtime's message.
        message: String,
    },
    /// The call used all its fuel (POL-2).
    #[error(
        "component {component}: {call} ran out of fuel (budget {fuel} units); the instance was discarded"
    )]
    OutOfFuel {
        /// Component name.
        component: String,
        /// The call.
        call: PolicyCall,
        /// The budget.
        fuel: u64,
    },
    /// The guest tried to grow memory past the cap (POL-2).
    #[error(
        "component {component}: {call} hit the memory limit ({limit} bytes; it asked for {requested}); the instance was discarded"
    )]
    MemoryLimit {
        /// Component name.
        component: String,
        /// The call.
        call: PolicyCall,
        /// The cap.
        limit: usize,
        /// What it asked for.
        requested: usize,
    },
    /// The guest overflowed its bounded wasm stack (POL-2).
    #[error(
        "component {component}: {call} overflowed the wasm stack ({limit} bytes); the instance was discarded"
    )]
    StackOverflow {
        /// Component name.
        component: String,
        /// The call.
        call: PolicyCall,
        /// The stack cap.
        limit: usize,
    },
    /// Any other trap.
    #[error("component {component}: {call} trapped: {message}; the instance was discarded")]
    Trap {
        /// Component name.
        component: String,
        /// The call.
        call: PolicyCall,
        /// Wasmtime's message.
        message: String,
    },
    /// The answer is larger than the host admits.
    #[error(
        "component {component}: {call} answered {bytes} bytes, over the {limit}-byte cap; answer refused"
    )]
    AnswerTooLarge {
        /// Component name.
        component: String,
        /// The call.
        call: PolicyCall,
        /// Answer size.
        bytes: usize,
        /// The cap.
        limit: usize,
    },
    /// The answer breaks the contract (an index out of range, an impossible outcome).
    #[error("component {component}: {call} gave a malformed answer: {message}")]
    MalformedAnswer {
        /// Component name.
        component: String,
        /// The call.
        call: PolicyCall,
        /// What is wrong with it.
        message: String,
    },
    /// The policy itself returned an error.
    #[error("component {component}: {call} returned an error: {message}")]
    Guest {
        /// Component name.
        component: String,
        /// The call.
        call: PolicyCall,
        /// The policy's message.
        message: String,
    },
    /// No classifier in the manifest serves this tool, and there is no `*`.
    #[error("no classifier in the manifest serves tool {tool:?} and none serves \"*\"")]
    NoClassifier {
        /// The tool.
        tool: String,
    },
    /// The manifest has no evaluator.
    #[error("the policy manifest has no evaluator component")]
    NoEvaluator,
}

impl PolicyError {
    /// A stable short code for programs and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            PolicyError::Manifest { .. } => "manifest",
            PolicyError::Read { .. } => "read",
            PolicyError::DigestMismatch { .. } => "digest_mismatch",
            PolicyError::Malformed { .. } => "malformed_component",
            PolicyError::Imports { .. } => "imports",
            PolicyError::WrongWorld { .. } => "wrong_world",
            PolicyError::ContractMismatch { .. } => "contract_mismatch",
            PolicyError::Compile { .. } => "compile",
            PolicyError::OutOfFuel { .. } => "out_of_fuel",
            PolicyError::MemoryLimit { .. } => "memory_limit",
            PolicyError::StackOverflow { .. } => "stack_overflow",
            PolicyError::Trap { .. } => "trap",
            PolicyError::AnswerTooLarge { .. } => "answer_too_large",
            PolicyError::MalformedAnswer { .. } => "malformed_answer",
            PolicyError::Guest { .. } => "guest_error",
            PolicyError::NoClassifier { .. } => "no_classifier",
            PolicyError::NoEvaluator => "no_evaluator",
        }
    }

    /// True for failures of a call (the component loaded fine): the ones POL-4
    /// turns into unknown scope or BLOCKED.
    pub fn is_call_failure(&self) -> bool {
        matches!(
            self,
            PolicyError::OutOfFuel { .. }
                | PolicyError::MemoryLimit { .. }
                | PolicyError::StackOverflow { .. }
                | PolicyError::Trap { .. }
                | PolicyError::AnswerTooLarge { .. }
                | PolicyError::MalformedAnswer { .. }
                | PolicyError::Guest { .. }
        )
    }
}
