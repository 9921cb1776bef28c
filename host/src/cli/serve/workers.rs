//! The request threads of `effects serve`: a fixed pool of at most
//! [`WORKERS`] threads and a queue of at most [`QUEUED`] requests waiting
//! for one. It owns the bound on what pipelined requests can cost: never a
//! thread per request (3,000 pipelined claims once made 2,978 threads and
//! 537 MB), and never an abort when the system refuses a thread.
//!
//! Back-pressure: [`Workers::run`] waits while the queue is full, so the
//! reader stops reading stdin and a client that writes faster than the
//! ledger answers is held by its own pipe, not by the server's memory.
//! Threads start on demand (a request waits for a thread only when none is
//! idle) and then stay for the server's life. A thread the system will not
//! start is no failure while another worker lives (the request waits its
//! turn); with no worker at all, the caller is told, to answer the request
//! with an error: it is never run, and never left unanswered.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;

/// How many requests run at once. Claims, settlements and decisions take
/// turns on the one ledger, so for them more threads add only waiting; the
/// number bounds how many host-run commands (`effect/execute`, `check/run`)
/// run side by side, each a process group of its own. Sixteen keeps a
/// runtime's fan-out of commands going while the server stays a few dozen
/// threads at most (a worker, its progress ticker, its command's pipes).
pub const WORKERS: usize = 16;

/// How many requests wait for a worker before the reader stops reading.
/// A queued request holds its parsed line (up to the 16 MiB input bound),
/// so the queue is kept as short as keeps every worker fed.
pub const QUEUED: usize = WORKERS;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The pool.
#[derive(Default)]
pub struct Workers(Arc<Pool>);

#[derive(Default)]
struct Pool {
    state: Mutex<State>,
    /// A job was queued.
    queued: Condvar,
    /// A job left the queue (there is room).
    room: Condvar,
    /// No job is queued or running.
    quiet: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Threads started (they never end before the process).
    threads: usize,
    /// Threads waiting for a job.
    idle: usize,
    /// Jobs queued or running.
    pending: usize,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn wait<'a>(condvar: &Condvar, state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
    condvar.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Workers {
    /// Queues `job` for a worker, first waiting while the queue is full
    /// (back-pressure). `Err` (why no thread started) when no worker lives
    /// and none can be started: the job is dropped, never run.
    pub fn run(&self, job: Job) -> Result<(), std::io::Error> {
        let mut state = lock(&self.0.state);
        while state.queue.len() >= QUEUED {
            state = wait(&self.0.room, state);
        }
        state.queue.push_back(job);
        state.pending += 1;
        if state.queue.len() > state.idle && state.threads < WORKERS {
            let pool = Arc::clone(&self.0);
            let started = thread::Builder::new().name("serve-worker".into()).spawn(move || pool.work());
            match started {
                Ok(_) => state.threads += 1,
                // Another worker will take it in its turn.
                Err(error) if state.threads > 0 => {
                    tracing::warn!("no new serve worker ({error}); the request waits for a busy one");
                }
                Err(error) => {
                    state.pending -= 1;
                    state.queue.pop_back();
                    return Err(error);
                }
            }
        }
        drop(state);
        self.0.queued.notify_one();
        Ok(())
    }

    /// Waits until no job is queued or running.
    pub fn drain(&self) {
        let mut state = lock(&self.0.state);
        while state.pending > 0 {
            state = wait(&self.0.quiet, state);
        }
    }
}

impl Pool {
    fn work(&self) {
        loop {
            let mut state = lock(&self.state);
            let job = loop {
                if let Some(job) = state.queue.pop_front() {
                    break job;
                }
                state.idle += 1;
                state = wait(&self.queued, state);
                state.idle -= 1;
            };
            drop(state);
            self.room.notify_one();
            // A job that panics has answered nothing; the count stays true.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            let mut state = lock(&self.state);
            state.pending -= 1;
            let quiet = state.pending == 0;
            drop(state);
            if quiet {
                self.quiet.notify_all();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_job_runs_on_at_most_the_fixed_number_of_threads() {
        let workers = Workers::default();
        static DONE: AtomicUsize = AtomicUsize::new(0);
        for i in 0..500 {
            let queued = workers.run(Box::new(move || {
                if i % 3 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                DONE.fetch_add(1, Ordering::SeqCst);
            }));
            assert!(queued.is_ok());
        }
        assert!(workers.run(Box::new(|| panic!("a job that panics"))).is_ok());
        workers.drain();
        assert_eq!(DONE.load(Ordering::SeqCst), 500);
        let state = lock(&workers.0.state);
        assert!(state.threads <= WORKERS, "{} threads", state.threads);
        assert!(state.queue.is_empty());
    }

    #[test]
    fn a_full_pool_holds_the_caller_until_there_is_room() {
        let workers = Arc::new(Workers::default());
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(Mutex::new(held));
        // Every worker busy and the queue full: the next run waits.
        for _ in 0..WORKERS + QUEUED {
            let held = Arc::clone(&held);
            assert!(
                workers
                    .run(Box::new(move || {
                        let _ = held.lock().unwrap().recv();
                    }))
                    .is_ok()
            );
        }
        let (queued, seen) = mpsc::channel();
        let caller = {
            let workers = Arc::clone(&workers);
            std::thread::spawn(move || {
                let _ = workers.run(Box::new(|| {}));
                queued.send(()).unwrap();
            })
        };
        assert!(seen.recv_timeout(Duration::from_millis(200)).is_err(), "the caller was not held");
        release.send(()).unwrap();
        seen.recv_timeout(Duration::from_secs(10)).expect("room made, the caller goes on");
        for _ in 0..WORKERS + QUEUED {
            let _ = release.send(());
        }
        caller.join().unwrap();
        workers.drain();
        assert!(lock(&workers.0.state).threads <= WORKERS);
    }
}
