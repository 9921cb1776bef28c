//! Runs and their lineages (LOG-1, ID-5): beginning a run, a child of a run,
//! and continuing either from another process.
//!
//! A run's id says where it lives. A root run's id is a plain run id, and
//! its log is `DATA_DIR/effects/<id>.log`. A child run's id is its parent's
//! id, a `.`, and its own name (`review.tests.lint` is the child `lint` of
//! `review.tests`, itself a child of the root `review`): so the id alone
//! names its lineage (the first segment), whose log it writes to, and its
//! parent (all but the last segment), which every claim of the child records
//! (`parent_run_id`). A root id cannot hold a `.`, so nothing else can be
//! read that way, and continuing a child needs no index beside the log.
//!
//! Every surface begins and continues runs through these functions: a new
//! run only when asked for, an existing one only when the log here has it,
//! and only beneath the root its claims record (ID-5). A child works beneath
//! the root of its lineage: the evaluator decides over the whole lineage
//! (`completion::evidence`), so a child's effects stale its parent's reads
//! (SPEC seed P1-5: an unknown-scope child can change anything its parent
//! can), and one lineage keeps one root. This module never writes: a run
//! leaves records only through its claims and what follows them.

use crate::data_dir::DataDir;
use crate::log::{
    Checkpoints, Framed, LogError, OpenMode, OpenOptionsLog, OperatorKey, Record, check_run_id,
};
use crate::model::{FilesystemRoot, Location, ResourceRef};

use super::Ledger;

/// A run: its id, the root run whose log it writes to, its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// This run.
    pub id: String,
    /// The root run of its lineage (LOG-1: a child writes to its root's log).
    pub lineage: String,
    /// Its parent, if a child.
    pub parent: Option<String>,
}

/// The root a recorded run worked beneath (ID-5), read from its lineage's
/// log in `data` without a ledger, which needs the root first: what
/// `effects decide` opens its ledger with. The log is opened read-only and
/// nothing is recovered or written; it is read from its checkpoint on
/// (LOG-10), and whole only for a log from before roots were recorded (the
/// decision reads it whole anyway, once). `Ok(None)` when the run touched
/// no files; [`RunError::NoSuchRun`] when its lineage has no log there.
pub fn recorded_root(
    data: &DataDir,
    run: &str,
    key: Option<&OperatorKey>,
) -> Result<Option<FilesystemRoot>, RunError> {
    let parsed = Run::parse(run)?;
    let options = OpenOptionsLog {
        mode: OpenMode::ReadOnly,
        key: key.cloned(),
        recover: false,
        checkpoints: Checkpoints::Use,
    };
    let mut log = data
        .open_lineage(&parsed.lineage, false, &options)?
        .ok_or_else(|| RunError::NoSuchRun { run: parsed.lineage.clone(), effects: data.store_display() })?;
    if let Some(root) = log.rules().run_root(run).or(log.rules().lineage_root()) {
        return Ok(Some(root.clone()));
    }
    Ok(root_of_records(log.history()?, run))
}

/// [`recorded_root`] over a lineage's records: the root recorded with the
/// run's own claims, else with its lineage's (a child that claimed nothing
/// yet); a log from before roots were recorded names it only in its
/// filesystem resources.
pub fn root_of_records(records: &[Framed], run: &str) -> Option<FilesystemRoot> {
    let filesystem_root = |r: &ResourceRef| match r.location() {
        Location::Filesystem(fs) => Some(fs.root.clone()),
        _ => None,
    };
    let claimed = |own: bool| {
        records.iter().find_map(|framed| match &framed.record {
            Record::Claim(claim) if !own || framed.run_id == run => claim.root.clone(),
            _ => None,
        })
    };
    claimed(true).or_else(|| claimed(false)).or_else(|| {
        records.iter().find_map(|framed| match &framed.record {
            Record::Claim(claim) => claim.impact_scope.iter().find_map(filesystem_root),
            Record::Observation(observation) => filesystem_root(&observation.resource),
            _ => None,
        })
    })
}

/// What separates a child's name from its parent's id.
const CHILD: char = '.';

impl Run {
    /// The run an id names: a root run id, or a child's (`PARENT.NAME`,
    /// every segment a run id). Nothing is looked up: whether the run
    /// exists is [`Ledger::continue_run`]'s question.
    pub fn parse(id: &str) -> Result<Run, RunError> {
        let bad = |why: String| {
            RunError::BadId(format!(
                "{why}; a run id is 1-64 letters, digits, '-' or '_', and a child's is its parent's id, \
                 '{CHILD}', and its own name"
            ))
        };
        for segment in id.split(CHILD) {
            check_run_id(segment).map_err(bad)?;
        }
        let (lineage, _) = id.split_once(CHILD).unwrap_or((id, ""));
        let parent = id.rsplit_once(CHILD).map(|(parent, _)| parent.to_owned());
        Ok(Run { id: id.to_owned(), lineage: lineage.to_owned(), parent })
    }
}

/// Why a run cannot be begun or continued (ID-5).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The id is not a run id.
    #[error("{0}")]
    BadId(String),
    /// `--run` for a run with no log here.
    #[error(
        "run {run} has no log in {effects}: the id or the data dir is wrong, or the run claimed nothing \
         (a read-only run keeps no log); start a new run instead"
    )]
    NoSuchRun {
        /// The run.
        run: String,
        /// Where it was looked for.
        effects: String,
    },
    /// A child run the log of its lineage does not know.
    #[error(
        "run {run} has no records in the log of its lineage {lineage} in {effects}: the id or the data dir is \
         wrong, or the child recorded nothing yet; begin it as a new child of {parent} instead"
    )]
    NoSuchChild {
        /// The run.
        run: String,
        /// Its lineage.
        lineage: String,
        /// Its parent.
        parent: String,
        /// Where it was looked for.
        effects: String,
    },
    /// A new run with the id of one that exists.
    #[error("run {run} already exists in {effects}; continue it instead of starting it again")]
    Exists {
        /// The run.
        run: String,
        /// Where.
        effects: String,
    },
    /// Continuing a run, or beginning a child, beneath another root (ID-5).
    #[error(
        "run {run} works beneath the root {recorded} (device {device}, inode {inode}), not beneath {given}: \
         a run keeps the root of its first claim, and a child the root of its lineage (ID-5); continue it \
         there, or start a new run"
    )]
    OtherRoot {
        /// The run.
        run: String,
        /// The root its claims record.
        recorded: String,
        /// That root's device.
        device: u64,
        /// That root's inode.
        inode: u64,
        /// The root it was continued under.
        given: String,
    },
    /// The log could not be read.
    #[error(transparent)]
    Log(#[from] LogError),
}

impl Ledger {
    /// A new run with a fresh id: a root run, or a child of `parent` writing
    /// to its parent's lineage. Fresh ids are fleet-unique (SPEC 13): a
    /// UUIDv7, time-ordered (its first 48 bits are the Unix time in
    /// milliseconds, so ids sort by when they began) with 74 random bits, so
    /// no two machines sharing a store mint the same one and nothing is
    /// looked up.
    pub fn begin_run(&self, parent: Option<&Run>) -> Run {
        let name = format!("run-{}", uuid::Uuid::now_v7().simple());
        match parent {
            Some(parent) => child_of(parent, &name),
            None => Run { lineage: name.clone(), id: name, parent: None },
        }
    }

    /// A new root run with a chosen id; refused when its log exists.
    pub fn new_run(&mut self, id: &str) -> Result<Run, RunError> {
        check_run_id(id).map_err(RunError::BadId)?;
        if self.log(id, false)?.is_some() {
            return Err(RunError::Exists { run: id.to_owned(), effects: self.effects_display() });
        }
        Ok(Run { id: id.to_owned(), lineage: id.to_owned(), parent: None })
    }

    /// A new child of `parent` named `name` (its id `PARENT.NAME`), writing
    /// to the parent's lineage (LOG-1); refused when the lineage's log
    /// already has records of that id.
    pub fn new_child(&mut self, parent: &Run, name: &str) -> Result<Run, RunError> {
        check_run_id(name).map_err(|why| RunError::BadId(format!("child name: {why}")))?;
        let child = child_of(parent, name);
        if self.has_records(&child)? {
            return Err(RunError::Exists { run: child.id, effects: self.effects_display() });
        }
        Ok(child)
    }

    /// An existing run, continued (runs outlive processes): a root run's log
    /// must exist here, and a child's lineage log must hold records of it;
    /// and the run must work beneath this ledger's root (ID-5): the root its
    /// own claims record, or, for a child that claimed nothing yet, its
    /// lineage's. Opening the log recovers the claims of dead executors
    /// (LOG-7).
    pub fn continue_run(&mut self, id: &str) -> Result<Run, RunError> {
        let run = Run::parse(id)?;
        let effects = self.effects_display();
        if self.log(&run.lineage, false)?.is_none() {
            return Err(RunError::NoSuchRun { run: run.lineage.clone(), effects });
        }
        if let Some(parent) = &run.parent
            && !self.has_records(&run)?
        {
            return Err(RunError::NoSuchChild {
                run: run.id.clone(),
                lineage: run.lineage.clone(),
                parent: parent.clone(),
                effects,
            });
        }
        let recorded = match self.recorded_root(&run)? {
            Some(root) => Some(root),
            None if run.parent.is_some() => self.lineage_root(&run.lineage)?,
            None => None,
        };
        let ours = self.config.root.root().clone();
        if let Some(recorded) = recorded
            && (recorded.device, recorded.inode) != (ours.device, ours.inode)
        {
            return Err(RunError::OtherRoot {
                run: run.id,
                recorded: recorded.path,
                device: recorded.device,
                inode: recorded.inode,
                given: ours.path,
            });
        }
        Ok(run)
    }

    /// The root a run's claims record (ID-5), if its log has one (logs from
    /// before roots were recorded have none).
    /// The answers below come from the history rules' view of the log,
    /// which covers every record, so a process continuing a run reads only
    /// what follows the log's checkpoint (LOG-10).
    pub fn recorded_root(&mut self, run: &Run) -> Result<Option<FilesystemRoot>, LogError> {
        let Some(log) = self.log(&run.lineage, false)? else { return Ok(None) };
        log.refresh()?;
        Ok(log.rules().run_root(&run.id).cloned())
    }

    /// The root the first claim of a lineage records, by any of its runs.
    fn lineage_root(&mut self, lineage: &str) -> Result<Option<FilesystemRoot>, LogError> {
        let Some(log) = self.log(lineage, false)? else { return Ok(None) };
        log.refresh()?;
        Ok(log.rules().lineage_root().cloned())
    }

    /// Whether the lineage's log holds any record of `run`.
    fn has_records(&mut self, run: &Run) -> Result<bool, LogError> {
        let Some(log) = self.log(&run.lineage, false)? else { return Ok(false) };
        log.refresh()?;
        Ok(log.rules().has_run(&run.id))
    }
}

/// The child `name` of `parent`: its id carries both (see the module doc).
fn child_of(parent: &Run, name: &str) -> Run {
    Run {
        id: format!("{}{CHILD}{name}", parent.id),
        lineage: parent.lineage.clone(),
        parent: Some(parent.id.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_names_its_lineage_and_its_parent() {
        let root = Run::parse("review").unwrap();
        assert_eq!((root.lineage.as_str(), root.parent), ("review", None));
        let child = Run::parse("review.tests").unwrap();
        assert_eq!((child.lineage.as_str(), child.parent.as_deref()), ("review", Some("review")));
        let grandchild = Run::parse("review.tests.lint").unwrap();
        assert_eq!(grandchild.lineage, "review");
        assert_eq!(grandchild.parent.as_deref(), Some("review.tests"));
        assert_eq!(child_of(&child, "lint"), grandchild, "the id a child is begun with parses back");
        for bad in ["", ".", "review.", ".tests", "review..tests", "re/view", "review.te st", &"x".repeat(65)]
        {
            match Run::parse(bad) {
                Err(RunError::BadId(why)) => assert!(why.contains("a child's is its parent's id"), "{why}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
