//! Claims by request id (EMB-3): the first claim each `(run, request id)`
//! got in a lineage's log, for a surface whose runtime retries a claim or
//! claims it from two processes at once (hooks, `effects serve`). The index
//! is kept beside an [`super::EffectLog`] handle and brought up to date from
//! its records under the append lock, so two writers claiming one request id
//! at once get one claim between them.
//!
//! It covers what the handle holds: every record it read or wrote and, of
//! the part a checkpoint covered (LOG-10), the open claims. A request whose
//! first claim was settled before the checkpoint the handle started at is
//! not found, and is claimed again (`docs/limitations.md`).

use std::collections::{BTreeMap, HashMap};

use super::frame::Framed;
use super::record::{Position, Record};

/// The first claim of each `(run, request id)` among a handle's records.
#[derive(Debug, Default)]
pub(super) struct RequestIndex {
    /// The handle's base when the index was built: a handle that restarted
    /// at the first record is indexed again.
    base: Option<Position>,
    /// How many of the handle's records are indexed.
    indexed: usize,
    first: HashMap<(String, String), Position>,
}

impl RequestIndex {
    /// The first claim of `request_id` in `run`, after indexing the records
    /// the handle read since the last call.
    pub(super) fn find(
        &mut self,
        base: Position,
        pinned: &BTreeMap<Position, Framed>,
        records: &[Framed],
        run: &str,
        request_id: &str,
    ) -> Option<Position> {
        if self.base != Some(base) || records.len() < self.indexed {
            *self = Self { base: Some(base), ..Self::default() };
            for framed in pinned.values() {
                self.admit(framed);
            }
        }
        for framed in &records[self.indexed..] {
            self.admit(framed);
        }
        self.indexed = records.len();
        self.first.get(&(run.to_owned(), request_id.to_owned())).copied()
    }

    fn admit(&mut self, framed: &Framed) {
        if let Record::Claim(claim) = &framed.record {
            let key = (framed.run_id.clone(), claim.operation.request_id.clone());
            self.first.entry(key).or_insert(framed.position);
        }
    }
}
