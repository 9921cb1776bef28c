//! `effects-supervisor [--confine ABI [--write PATH]... --] ARGS...`: becomes
//! a child subreaper (`PR_SET_CHILD_SUBREAPER`, kept across `exec`),
//! optionally confines itself with Landlock (ID-6), and executes `ARGS`: the
//! first step of every command's supervisor (PROC-1, `producers/supervisor.rs`).
//!
//! It exists so that the host can start a supervisor with `posix_spawn`
//! (fast whatever the host's size) instead of `fork` plus a `pre_exec` hook,
//! whose cost grows with the host's resident memory (an evaluator keeps tens
//! of MiB resident).
//!
//! With `--confine ABI`, every write-ish access right of that Landlock ABI is
//! handled and granted only beneath its working directory (the root, which
//! the host made its cwd through the root's own descriptor) and each
//! `--write PATH`; reads and execution are left alone. The domain must be
//! fully enforced: otherwise, or if any path cannot be opened, it says why on
//! its standard input (the gate's socket) and exits 126 without running
//! anything, so a command whose claim says "confined" never runs otherwise.
//! Once confined it says `confined` there, then executes `ARGS`; the
//! command's whole tree inherits the domain.

use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

use landlock::{
    ABI, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus,
};
use rustix::process::{Pid, set_child_subreaper};

/// Restricts this process to writing beneath `.` and `writes`, at `abi`.
fn confine(abi: i32, writes: &[std::ffi::OsString]) -> Result<(), String> {
    let abi = ABI::from(abi);
    let access = AccessFs::from_write(abi);
    if access.is_empty() {
        return Err("no Landlock ABI to confine with".into());
    }
    // Rights a rule on a non-directory may carry (creating and removing
    // entries only make sense beneath a directory).
    let file_access: BitFlags<AccessFs> = access & AccessFs::from_file(abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(access)
        .and_then(|r| r.create())
        .map_err(|e| format!("cannot create the Landlock ruleset: {e}"))?;
    let root = PathFd::new(".").map_err(|e| format!("cannot open the root: {e}"))?;
    ruleset = ruleset.add_rule(PathBeneath::new(root, access)).map_err(|e| format!("the root: {e}"))?;
    for path in writes {
        let shown = path.to_string_lossy();
        let is_dir = std::fs::metadata(path).map_err(|e| format!("{shown}: {e}"))?.is_dir();
        let fd = PathFd::new(path).map_err(|e| format!("{shown}: {e}"))?;
        let rights = if is_dir { access } else { file_access };
        ruleset = ruleset.add_rule(PathBeneath::new(fd, rights)).map_err(|e| format!("{shown}: {e}"))?;
    }
    let status = ruleset.restrict_self().map_err(|e| format!("cannot restrict itself: {e}"))?;
    if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
        return Err(format!("the Landlock domain is not fully enforced ({:?})", status.ruleset));
    }
    Ok(())
}

/// Says `line` on the gate's socket (standard input), which stays open for
/// the supervisor script.
fn say(line: &str) {
    // SAFETY: fd 0 is the gate's socket for the whole life of this process;
    // ManuallyDrop keeps it open for the program executed next.
    let mut socket = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    let _ = socket.write_all(format!("{line}\n").as_bytes());
}

fn main() -> ExitCode {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut jail = None;
    if args.first().is_some_and(|a| a == "--confine") {
        let Some(end) = args.iter().position(|a| a == "--") else {
            eprintln!("effects-supervisor: --confine needs a closing --");
            return ExitCode::from(2);
        };
        let options: Vec<_> = args.drain(..=end).collect();
        let abi = options.get(1).and_then(|a| a.to_str()).and_then(|a| a.parse::<i32>().ok());
        let writes: Option<Vec<_>> = options[2..options.len() - 1]
            .chunks(2)
            .map(|pair| (pair.len() == 2 && pair[0] == "--write").then(|| pair[1].clone()))
            .collect();
        let (Some(abi), Some(writes)) = (abi, writes) else {
            eprintln!("effects-supervisor: usage: --confine ABI [--write PATH]... --");
            return ExitCode::from(2);
        };
        jail = Some((abi, writes));
    }
    let mut args = args.into_iter();
    let Some(program) = args.next() else {
        eprintln!(
            "effects-supervisor: usage: effects-supervisor [--confine ABI [--write PATH]... --] PROGRAM ARGS..."
        );
        return ExitCode::from(2);
    };
    if let Err(error) = set_child_subreaper(Some(Pid::INIT)) {
        eprintln!("effects-supervisor: cannot become a child subreaper: {error}");
        return ExitCode::from(126);
    }
    if let Some((abi, writes)) = jail {
        match confine(abi, &writes) {
            Ok(()) => say("confined"),
            Err(error) => {
                say(&format!("not confined: {error}"));
                eprintln!("effects-supervisor: not confined, not run: {error}");
                return ExitCode::from(126);
            }
        }
    }
    let error = Command::new(&program).args(args).exec();
    eprintln!("effects-supervisor: cannot run {}: {error}", program.to_string_lossy());
    ExitCode::from(127)
}
