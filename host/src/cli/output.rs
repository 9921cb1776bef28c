//! Standard output for every subcommand, one line at a time. A reader that
//! went away (`effects log show | head`: EPIPE) ends the command quietly at
//! the next line it prints, with exit status 141 as if by SIGPIPE, instead of
//! `println!`'s panic and backtrace. The process keeps ignoring SIGPIPE (the
//! Rust runtime's default): a signal could kill a session between a claim and
//! its outcome, while a failed write is seen where it is safe to stop.

use std::fmt::Display;
use std::io::Write;

use effect_ledger::ledger::envelope::screaming_name;

use super::{Failure, exit};

/// Prints `text` and a newline on standard output. `Err` only when the
/// output is gone: the caller returns it with `?` and the command ends
/// quietly ([`Failure::quiet`]).
pub fn line(text: impl Display) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}").and_then(|()| stdout.flush()).map_err(|error| {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            Failure::quiet()
        } else {
            Failure::new(exit::PROBLEMS, anyhow::Error::new(error).context("writing standard output"))
        }
    })
}

/// An enum's name in the one casing the ledger shows enums in
/// (`ledger::envelope::screaming_name`), for a terminal.
pub fn name(value: &impl serde::Serialize) -> String {
    screaming_name(value).unwrap_or_else(|| serde_json::to_string(value).unwrap_or_default())
}

/// `out!("...", args)`: [`line()`] with `format!` arguments, returning early
/// from the calling function when the output is gone.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::output::line(format_args!($($arg)*))?
    };
}
pub(crate) use out;
