//! `effects-supervisor [--confine ABI [--write|--tty PATH DEV:INO]... --] ARGS...`:
//! becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`, kept across `exec`),
//! optionally confines itself (ID-6), and executes `ARGS`: the first step of
//! every command's supervisor (PROC-1, `producers/supervisor.rs`).
//!
//! It exists so that the host can start a supervisor with `posix_spawn`
//! (fast whatever the host's size) instead of `fork` plus a `pre_exec` hook,
//! whose cost grows with the host's resident memory (an evaluator keeps tens
//! of MiB resident).
//!
//! With `--confine ABI`, every write-ish access right of that Landlock ABI is
//! handled and granted only beneath its working directory (the root, which
//! the host made its cwd through the root's own descriptor) and each
//! `--write PATH DEV:INO` (`--tty`: a terminal, which alone may also take
//! device ioctls); making block or character devices is handled and granted
//! nowhere. Each path must still be the inode the host expects: it is opened
//! once and its descriptor's device and inode compared, so a command that
//! swapped a later command's path for a symlink (into the data dir, say)
//! only stops that command. From ABI 6 signals are scoped to the domain.
//! Then every capability is dropped (ambient, bounding, effective,
//! permitted, inheritable) and `SECBIT_NOROOT` set and locked, so a command
//! running as root gains none back by `exec`: capabilities bypass Landlock
//! (a device node, a mount). Reads and execution are left alone.
//!
//! Any failure: it says why on its standard input (the gate's socket) and
//! exits 126 without running anything, so a command whose claim says
//! "confined" never runs otherwise. Once confined it says `confined` there,
//! then executes `ARGS`; the command's whole tree inherits the domain.
//!
//! Always, before `exec`, every descriptor but 0, 1 and 2 is marked
//! close-on-exec: what the host inherited from its own parent must not reach
//! a command (Landlock does not restrict a descriptor already open).

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

use landlock::{
    ABI, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};
use rustix::process::{Pid, set_child_subreaper};
use rustix::thread::{CapabilitiesSecureBits, CapabilitySet, CapabilitySets};

/// One writable path the host named, and the inode it must still be.
struct Writable {
    path: OsString,
    /// `--tty`: a terminal (device ioctls allowed on it).
    tty: bool,
    dev: u64,
    ino: u64,
}

/// Parses `--write PATH DEV:INO` / `--tty PATH DEV:INO` triples.
fn writables(options: &[OsString]) -> Option<Vec<Writable>> {
    if !options.len().is_multiple_of(3) {
        return None;
    }
    options
        .chunks(3)
        .map(|t| {
            let tty = match t[0].to_str()? {
                "--write" => false,
                "--tty" => true,
                _ => return None,
            };
            let (dev, ino) = t[2].to_str()?.split_once(':')?;
            Some(Writable { path: t[1].clone(), tty, dev: dev.parse().ok()?, ino: ino.parse().ok()? })
        })
        .collect()
}

/// Restricts this process to writing beneath `.` and `writes`, at `abi`.
fn confine(abi: i32, writes: &[Writable]) -> Result<(), String> {
    let abi = ABI::from(abi);
    let access = AccessFs::from_write(abi);
    if access.is_empty() {
        return Err("no Landlock ABI to confine with".into());
    }
    // Never granted: a device node would open any disk (the store's
    // included) to a command with the capability to make one, and device
    // ioctls only make sense on a terminal.
    let devices: BitFlags<AccessFs> = AccessFs::MakeBlock | AccessFs::MakeChar | AccessFs::IoctlDev;
    let granted = access & !devices;
    // Rights a rule on a non-directory may carry (creating and removing
    // entries only make sense beneath a directory).
    let file_access: BitFlags<AccessFs> = access & AccessFs::from_file(abi);
    let mut ruleset =
        Ruleset::default().set_compatibility(CompatLevel::HardRequirement).handle_access(access);
    if abi >= ABI::V6 {
        // A confined command may signal its own tree, never the host or
        // another session's supervisor (which are outside the domain).
        ruleset = ruleset.and_then(|r| r.scope(Scope::Signal));
    }
    let mut ruleset =
        ruleset.and_then(|r| r.create()).map_err(|e| format!("cannot create the Landlock ruleset: {e}"))?;
    let root = PathFd::new(".").map_err(|e| format!("cannot open the root: {e}"))?;
    ruleset = ruleset.add_rule(PathBeneath::new(root, granted)).map_err(|e| format!("the root: {e}"))?;
    for write in writes {
        let shown = write.path.to_string_lossy();
        let fd = PathFd::new(&write.path).map_err(|e| format!("{shown}: {e}"))?;
        // The opened descriptor, not the path: what was opened is what the
        // rule grants, so it is what must be the expected inode.
        let stat = rustix::fs::fstat(fd.as_fd()).map_err(|e| format!("{shown}: {e}"))?;
        if (stat.st_dev, stat.st_ino) != (write.dev, write.ino) {
            return Err(format!(
                "{shown} is not the inode it was ({}:{} expected, {}:{} found): it was replaced",
                write.dev, write.ino, stat.st_dev, stat.st_ino
            ));
        }
        let is_dir = rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Directory;
        // A terminal (or `/dev/pts`, beneath which a file right applies to
        // every terminal) takes writes and ioctls, nothing that makes or
        // removes entries.
        let rights = match (write.tty, is_dir) {
            (true, _) => file_access,
            (false, true) => granted,
            (false, false) => file_access & granted,
        };
        ruleset = ruleset.add_rule(PathBeneath::new(fd, rights)).map_err(|e| format!("{shown}: {e}"))?;
    }
    let status = ruleset.restrict_self().map_err(|e| format!("cannot restrict itself: {e}"))?;
    if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
        return Err(format!("the Landlock domain is not fully enforced ({:?})", status.ruleset));
    }
    drop_capabilities()
}

/// Drops every capability for good: the ambient set, the bounding set (so
/// `exec` of a file with capabilities cannot raise them), the effective,
/// permitted and inheritable sets, and `SECBIT_NOROOT` (locked) so that
/// `exec` as uid 0 does not grant them afresh. A process without
/// `CAP_SETPCAP` cannot touch its bounding set or securebits; that is fine
/// only when it is not uid 0 (nothing then raises a capability across an
/// `exec` under `no_new_privs`), else it is refused.
fn drop_capabilities() -> Result<(), String> {
    use rustix::thread::{
        capabilities, capability_is_in_bounding_set, clear_ambient_capability_set,
        remove_capability_from_bounding_set, set_capabilities, set_capabilities_secure_bits,
    };
    clear_ambient_capability_set().map_err(|e| format!("cannot clear the ambient capabilities: {e}"))?;
    let held = capabilities(None).map_err(|e| format!("cannot read its capabilities: {e}"))?;
    if held.effective.contains(CapabilitySet::SETPCAP) {
        // Capability numbers up to the kernel's last (it answers EINVAL past it).
        for bit in 0..64 {
            let cap = CapabilitySet::from_bits_retain(1 << bit);
            match capability_is_in_bounding_set(cap) {
                Ok(true) => remove_capability_from_bounding_set(cap)
                    .map_err(|e| format!("cannot drop capability {bit} from the bounding set: {e}"))?,
                Ok(false) => {}
                Err(_) => break,
            }
        }
        set_capabilities_secure_bits(
            CapabilitiesSecureBits::NO_ROOT
                | CapabilitiesSecureBits::NO_ROOT_LOCKED
                | CapabilitiesSecureBits::NO_CAP_AMBIENT_RAISE
                | CapabilitiesSecureBits::NO_CAP_AMBIENT_RAISE_LOCKED,
        )
        .map_err(|e| format!("cannot set SECBIT_NOROOT: {e}"))?;
    } else if rustix::process::getuid().is_root() || rustix::process::geteuid().is_root() {
        return Err("running as root without CAP_SETPCAP, it cannot drop root's capabilities".into());
    }
    let none = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    set_capabilities(None, none).map_err(|e| format!("cannot drop its capabilities: {e}"))?;
    let left = capabilities(None).map_err(|e| format!("cannot read its capabilities: {e}"))?;
    if !(left.effective.is_empty() && left.permitted.is_empty() && left.inheritable.is_empty()) {
        return Err(format!("capabilities are left: {left:?}"));
    }
    Ok(())
}

/// Marks every descriptor but 0, 1 and 2 close-on-exec (the list is read
/// whole first: the listing's own descriptor is gone when they are marked).
#[allow(clippy::disallowed_methods)] // `/proc/self/fd` is the kernel's list of our descriptors, not a file under a root
fn close_inherited() -> Result<(), String> {
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| format!("cannot list its descriptors: {e}"))?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: the descriptor is only borrowed for one fcntl; one that is
        // no longer open (the listing's) answers EBADF, which is ignored.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        match rustix::io::fcntl_setfd(borrowed, rustix::io::FdFlags::CLOEXEC) {
            Ok(()) | Err(rustix::io::Errno::BADF) => {}
            Err(error) => return Err(format!("cannot close descriptor {fd}: {error}")),
        }
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
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let mut jail = None;
    if args.first().is_some_and(|a| a == "--confine") {
        let Some(end) = args.iter().position(|a| a == "--") else {
            eprintln!("effects-supervisor: --confine needs a closing --");
            return ExitCode::from(2);
        };
        let options: Vec<_> = args.drain(..=end).collect();
        let abi = options.get(1).and_then(|a| a.to_str()).and_then(|a| a.parse::<i32>().ok());
        let writes = options.get(2..options.len() - 1).and_then(writables);
        let (Some(abi), Some(writes)) = (abi, writes) else {
            eprintln!("effects-supervisor: usage: --confine ABI [--write|--tty PATH DEV:INO]... --");
            return ExitCode::from(2);
        };
        jail = Some((abi, writes));
    }
    let mut args = args.into_iter();
    let Some(program) = args.next() else {
        eprintln!(
            "effects-supervisor: usage: effects-supervisor [--confine ABI [--write|--tty PATH DEV:INO]... --] PROGRAM ARGS..."
        );
        return ExitCode::from(2);
    };
    if let Err(error) = set_child_subreaper(Some(Pid::INIT)) {
        eprintln!("effects-supervisor: cannot become a child subreaper: {error}");
        return ExitCode::from(126);
    }
    let closed = close_inherited();
    if let Some((abi, writes)) = jail {
        match closed.and_then(|()| confine(abi, &writes)) {
            Ok(()) => say("confined"),
            Err(error) => {
                say(&format!("not confined: {error}"));
                eprintln!("effects-supervisor: not confined, not run: {error}");
                return ExitCode::from(126);
            }
        }
    } else if let Err(error) = closed {
        eprintln!("effects-supervisor: {error}");
    }
    let error = Command::new(&program).args(args).exec();
    eprintln!("effects-supervisor: cannot run {}: {error}", program.to_string_lossy());
    ExitCode::from(127)
}
