//! Reference producers: the backends the ledger can run itself, each
//! reporting typed facts (OUT-2) beside its result. The runtime chain calls a
//! producer only after the claim is durable (LOG-3).
//!
//! Filesystem producers receive the targets `crate::identity` already
//! resolved beneath a sealed root, and open them only through those
//! resolutions (`identity::Opener`, ID-3).

pub mod confine;
pub mod fs;
pub mod job;
pub mod process;
pub mod supervisor;

use crate::model::ProducerFacts;

/// What a producer did: its facts, and its result for the agent (or why not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Produced<T> {
    /// The typed facts settlement is derived from.
    pub facts: ProducerFacts,
    /// The tool result.
    pub result: Result<T, String>,
}

impl<T> Produced<T> {
    /// The backend ran and succeeded.
    pub(crate) fn success(value: T) -> Self {
        Self {
            facts: ProducerFacts { executed: true, exit_code: Some(0), ..ProducerFacts::default() },
            result: Ok(value),
        }
    }

    /// The backend could not be started: nothing ran (OUT-1: no impact).
    pub(crate) fn not_run(message: String) -> Self {
        Self { facts: ProducerFacts::default(), result: Err(message) }
    }

    /// The backend ran and failed; `mutation_attempted` when the failure came
    /// after the target may already have changed (a truncating open).
    pub(crate) fn failure(message: String, mutation_attempted: bool) -> Self {
        Self {
            facts: ProducerFacts {
                executed: true,
                exit_code: Some(1),
                mutation_attempted,
                ..ProducerFacts::default()
            },
            result: Err(message),
        }
    }
}
