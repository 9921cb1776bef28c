//! The request threads of `effects serve`: an elastic pool. A request goes
//! to an idle worker, or to a new one when every worker is busy (a long
//! command never holds up the next request); a worker that finishes waits
//! for the next request, up to [`IDLE_KEPT`] of them. Reusing threads keeps
//! a request from paying for a thread's birth and death (its stack, its
//! allocator heap, the wasm runtime's per-thread state), which measured
//! about a tenth of a claim-and-settle round trip
//! (benches/serve_roundtrip.rs).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread;

/// How many idle workers wait for requests; the rest end.
const IDLE_KEPT: usize = 8;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The pool.
#[derive(Default)]
pub struct Workers(Arc<Pool>);

#[derive(Default)]
struct Pool {
    state: Mutex<State>,
    quiet: Condvar,
}

#[derive(Default)]
struct State {
    idle: Vec<mpsc::Sender<Job>>,
    busy: usize,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Workers {
    /// Runs `job` on a worker.
    pub fn run(&self, job: Job) {
        let mut state = lock(&self.0.state);
        state.busy += 1;
        let idle = state.idle.pop();
        drop(state);
        // An idle worker holds its own sender, so it is there to receive.
        let job = match idle {
            Some(worker) => match worker.send(job) {
                Ok(()) => return,
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (sender, jobs) = mpsc::channel::<Job>();
        sender.send(job).expect("the receiver is here");
        let pool = Arc::clone(&self.0);
        thread::spawn(move || pool.work(sender, jobs));
    }

    /// Waits until no job runs.
    pub fn drain(&self) {
        let mut state = lock(&self.0.state);
        while state.busy > 0 {
            state = self.0.quiet.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

impl Pool {
    fn work(&self, me: mpsc::Sender<Job>, jobs: mpsc::Receiver<Job>) {
        while let Ok(job) = jobs.recv() {
            // A job that panics has answered nothing; the count stays true.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            let mut state = lock(&self.state);
            state.busy -= 1;
            let keep = state.idle.len() < IDLE_KEPT;
            if keep {
                state.idle.push(me.clone());
            }
            drop(state);
            self.quiet.notify_all();
            if !keep {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[test]
    fn every_job_runs_and_drain_waits_for_them() {
        let workers = Workers::default();
        static DONE: AtomicUsize = AtomicUsize::new(0);
        for i in 0..40 {
            workers.run(Box::new(move || {
                if i % 3 == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
                DONE.fetch_add(1, Ordering::SeqCst);
            }));
        }
        workers.run(Box::new(|| panic!("a job that panics")));
        workers.drain();
        assert_eq!(DONE.load(Ordering::SeqCst), 40);
        assert!(lock(&workers.0.state).idle.len() <= IDLE_KEPT);
    }

    #[test]
    fn a_busy_pool_grows_instead_of_queueing() {
        let workers = Workers::default();
        let (blocked, release) = mpsc::channel::<()>();
        let release = Mutex::new(release);
        let (started, seen) = mpsc::channel();
        workers.run(Box::new(move || {
            let _ = release.lock().unwrap().recv();
        }));
        // The first job blocks until the second has run: with one thread
        // this would never finish.
        workers.run(Box::new(move || {
            started.send(()).unwrap();
            blocked.send(()).unwrap();
        }));
        seen.recv_timeout(Duration::from_secs(10)).expect("the second job ran beside the first");
        workers.drain();
    }
}
