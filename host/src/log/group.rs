//! Group commit: many threads appending through one shared handle, one lock,
//! one write and one fsync per batch.
//!
//! The first thread to find no batch in flight becomes the leader: it yields
//! (and, when the last batch had several appenders, waits up to a short
//! gather window for as many to queue), takes everything
//! queued, appends it with [`EffectLog::append_batch`], hands each thread its
//! own result and wakes them; a waiter whose record is still queued leads the
//! next batch. Every
//! claim in a batch is acknowledged only after that batch's fsync succeeded;
//! if it failed, every claim in it gets the failure (LOG-4 for the whole
//! batch), and the shared handle is poisoned.

use std::sync::{Condvar, Mutex, MutexGuard};

use super::effect_log::EffectLog;
use super::error::LogError;
use super::record::{Position, Record};
use super::store::Store;

struct Queue {
    pending: Vec<(u64, String, Record)>,
    done: std::collections::HashMap<u64, Result<Position, LogError>>,
    next_ticket: u64,
    leading: bool,
    /// Size of the last batch: a hint of how many appenders are active.
    last_batch: usize,
}

/// Longest a leader waits for the rest of a busy group to queue (a fraction
/// of one fsync, which is what the wait saves).
const GATHER_WINDOW: std::time::Duration = std::time::Duration::from_micros(40);

/// A log handle shared by threads, committing their appends in groups.
pub struct GroupLog<S: Store> {
    log: Mutex<EffectLog<S>>,
    queue: Mutex<Queue>,
    finished: Condvar,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<S: Store> GroupLog<S> {
    /// Wraps an open handle.
    pub fn new(log: EffectLog<S>) -> Self {
        Self {
            log: Mutex::new(log),
            queue: Mutex::new(Queue {
                pending: Vec::new(),
                done: Default::default(),
                next_ticket: 0,
                leading: false,
                last_batch: 0,
            }),
            finished: Condvar::new(),
        }
    }

    /// Appends `record`, durable when it returns `Ok` (same contract as
    /// [`EffectLog::claim`] and friends).
    pub fn append(&self, run_id: &str, record: Record) -> Result<Position, LogError> {
        let mut queue = lock(&self.queue);
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.pending.push((ticket, run_id.to_owned(), record));
        loop {
            if let Some(result) = queue.done.remove(&ticket) {
                return result;
            }
            if !queue.leading {
                queue.leading = true;
                // Gather (Postgres's commit_delay, bounded): when the last
                // batch showed several appenders, give the threads it just
                // woke a moment to queue their next record, so one fsync
                // serves them all. A lone appender never waits.
                let expected = queue.last_batch;
                let started = std::time::Instant::now();
                loop {
                    drop(queue);
                    std::thread::yield_now();
                    queue = lock(&self.queue);
                    if expected <= 1 || queue.pending.len() >= expected || started.elapsed() >= GATHER_WINDOW
                    {
                        break;
                    }
                }
                let batch = std::mem::take(&mut queue.pending);
                queue.last_batch = batch.len();
                drop(queue);
                let results = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut log = lock(&self.log);
                    let refs: Vec<(&str, &Record)> =
                        batch.iter().map(|(_, run, r)| (run.as_str(), r)).collect();
                    log.append_batch(&refs)
                }));
                queue = lock(&self.queue);
                // Whatever happened, every taken ticket gets an answer and the
                // next leader may start; a panic is then resumed here.
                let (results, panic) = match results {
                    Ok(results) => (results, None),
                    Err(panic) => {
                        let path = lock(&self.log).path().to_owned();
                        let failed: Vec<Result<Position, LogError>> = batch
                            .iter()
                            .map(|_| {
                                Err(LogError::Io {
                                    path: path.clone(),
                                    operation: "group commit",
                                    source: std::io::Error::other(
                                        "the batch leader panicked; nothing is known of this record",
                                    ),
                                })
                            })
                            .collect();
                        (failed, Some(panic))
                    }
                };
                for ((ticket, _, _), result) in batch.into_iter().zip(results) {
                    queue.done.insert(ticket, result);
                }
                queue.leading = false;
                self.finished.notify_all();
                if let Some(panic) = panic {
                    drop(queue);
                    std::panic::resume_unwind(panic);
                }
                continue;
            }
            queue = self.finished.wait(queue).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// The handle, for reads (blocks appends while held).
    pub fn log(&self) -> MutexGuard<'_, EffectLog<S>> {
        lock(&self.log)
    }
}
