//! Ctrl-C (SIGINT) and SIGTERM during `effects session`: the command
//! running is cancelled through its supervisor (torn down, PROC-1, and
//! settled CANCELLED), no further step starts, the session says what it
//! stopped and exits 130.
//!
//! Without this the signal killed the session where it stood: its command,
//! in a process group of its own, ran on unseen, and its claim waited for the
//! next process to recover it. A step that is not a command (a check, a
//! decision) runs to its end first; a second signal ends the session at once,
//! as the signal's default would, leaving what it ran to the next process's
//! recovery (LOG-7).

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use effect_ledger::producers::process::CancelToken;

/// The exit status of a session stopped by a signal (128 + SIGINT, as a
/// shell reports one).
pub const INTERRUPTED: u8 = 130;

/// What the signal thread and the session share.
#[derive(Default)]
struct Shared {
    /// The token of the step running, if it can be cancelled.
    running: Mutex<Option<CancelToken>>,
    /// The first signal received (0: none).
    signal: AtomicI32,
}

/// The session's handle on SIGINT and SIGTERM.
pub struct Interrupt {
    shared: Arc<Shared>,
}

impl Interrupt {
    /// Takes SIGINT and SIGTERM from their default (dying where the session
    /// stands) for the rest of the process. `None` when they cannot be
    /// taken: the session runs as before, with a warning.
    pub fn install() -> Option<Self> {
        let mut signals = Signals::new([SIGINT, SIGTERM])
            .map_err(|error| tracing::warn!("Ctrl-C will not stop commands cleanly: {error}"))
            .ok()?;
        let shared = Arc::new(Shared::default());
        let seen = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    let first = seen.signal.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
                    if first.is_err() {
                        // A second signal: the user will not wait for the
                        // step (a check runs to its end). The session ends as
                        // the signal's default ends it; what it was running
                        // is recovered by the next process (LOG-7).
                        let _ = signal_hook::low_level::emulate_default_handler(signal);
                    }
                    if let Some(token) = &*seen.running.lock().unwrap_or_else(PoisonError::into_inner) {
                        token.cancel();
                    }
                }
            })
            .map_err(|error| tracing::warn!("Ctrl-C will not stop commands cleanly: {error}"))
            .ok()?;
        Some(Self { shared })
    }

    /// A token for the step about to start, cancelled at once if a signal
    /// came already.
    pub fn arm(&self) -> CancelToken {
        let token = CancelToken::default();
        // Stored before the look: a signal the look misses finds it stored.
        *self.shared.running.lock().unwrap_or_else(PoisonError::into_inner) = Some(token.clone());
        if self.signalled().is_some() {
            token.cancel();
        }
        token
    }

    /// The step has ended: a signal now cancels nothing.
    pub fn disarm(&self) {
        *self.shared.running.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The signal that stopped the session, if one came (`SIGINT`, `SIGTERM`).
    pub fn signalled(&self) -> Option<&'static str> {
        match self.shared.signal.load(Ordering::SeqCst) {
            0 => None,
            SIGINT => Some("SIGINT"),
            _ => Some("SIGTERM"),
        }
    }
}
