//! The launch index (LOG-8): `launch-<generation>.json` maps one background
//! launch to the claim that announced it, so a job read or kill in any later
//! process settles exactly that claim.
//!
//! A launch first **reserves** its generation: the index file is created
//! exclusively, and whole (`durable::create_new`), so two launchers, in one
//! process or several, never share a generation, and a reader never finds a
//! reservation empty. Once the claim is durable the index is replaced whole
//! (temporary file, fsync, rename over, directory fsync) with the claim's
//! position. A reservation without a claim is a launch that never ran.
//!
//! On the fleet store (SPEC 13) the reservation is made here all the same
//! (a job and its files belong to this machine), but the index is the
//! launch claim's own row on the server (`PgStore::launch_claim`), written
//! in the claim's transaction, so no entry is written here.

use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};

use super::durable;
use super::error::LogError;
use super::record::Position;

/// One entry of the launch index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchIndex {
    /// The launch generation.
    pub generation: u64,
    /// The claim of the launch, once it is durable; `None` while reserved.
    pub claim: Option<Position>,
    /// The run that launched it.
    pub run_id: String,
    /// The root run whose log holds the claim (LOG-1).
    pub lineage: String,
}

fn name(generation: u64) -> String {
    crate::data_dir::DataDir::launch_entry(generation)
}

fn body(index: &LaunchIndex) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(index).expect("a launch index serializes");
    bytes.push(b'\n');
    bytes
}

/// Reserves a fresh generation for a launch by `run_id` in `lineage`.
/// Generations start from the wall clock in nanoseconds and step past any
/// that are taken, so they are unique within the effects directory.
pub fn reserve_launch(
    effects_dir: &Dir,
    display_dir: &str,
    run_id: &str,
    lineage: &str,
) -> Result<u64, LogError> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let mut generation = now.map_or(1, |d| d.as_nanos() as u64);
    loop {
        let index =
            LaunchIndex { generation, claim: None, run_id: run_id.to_owned(), lineage: lineage.to_owned() };
        if durable::create_new(effects_dir, display_dir, &name(generation), &body(&index))? {
            return Ok(generation);
        }
        generation += 1;
    }
}

/// LOG-8: records that the launch `index.generation` was claimed at
/// `index.claim`, replacing the reservation atomically.
pub fn write_launch_index(effects_dir: &Dir, display_dir: &str, index: &LaunchIndex) -> Result<(), LogError> {
    durable::replace(effects_dir, display_dir, &name(index.generation), &body(index))
}

/// The index entry of `generation`, if there is one. A file that does not
/// parse is an error naming it, not a missing launch.
pub fn read_launch_index(
    effects_dir: &Dir,
    display_dir: &str,
    generation: u64,
) -> Result<Option<LaunchIndex>, LogError> {
    let file = name(generation);
    let Some(bytes) = durable::read(effects_dir, display_dir, &file)? else { return Ok(None) };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| LogError::Refused {
        path: format!("{display_dir}/{file}"),
        reason: format!("not a launch index entry: {e}"),
    })
}
