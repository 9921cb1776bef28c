//! `effects-supervisor ARGS...`: becomes a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`, kept across `exec`) and executes `ARGS`: the
//! first step of every command's supervisor (PROC-1, `producers/supervisor.rs`).
//!
//! It exists so that the host can start a supervisor with `posix_spawn`
//! (fast whatever the host's size) instead of `fork` plus a `pre_exec` hook,
//! whose cost grows with the host's resident memory (an evaluator keeps tens
//! of MiB resident). It does nothing else: no files, no environment.

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

use rustix::process::{Pid, set_child_subreaper};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("effects-supervisor: usage: effects-supervisor PROGRAM ARGS...");
        return ExitCode::from(2);
    };
    if let Err(error) = set_child_subreaper(Some(Pid::INIT)) {
        eprintln!("effects-supervisor: cannot become a child subreaper: {error}");
        return ExitCode::from(126);
    }
    let error = Command::new(&program).args(args).exec();
    eprintln!("effects-supervisor: cannot run {}: {error}", program.to_string_lossy());
    ExitCode::from(127)
}
