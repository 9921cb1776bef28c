//! Opens through the resolved identity (ID-3, revision 2), attacked for
//! real: a symlink planted between the path check and the open, a file
//! renamed over the resolved one, a thread flipping a path between a file and
//! a symlink to a file outside the root while writes run, and a FIFO in the
//! root offered to every tool, to a pre-state, a readback, completion and a
//! session step. Every operation that could hang runs under a deadline, so a
//! regression fails instead of hanging.

#![allow(clippy::disallowed_methods)] // tests build their trees with ambient authority

use crate::support;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, SealedRoot, Target};
use effect_ledger::ledger::{Dispatch, Ledger, LedgerConfig};
use effect_ledger::model::{Coverage, ResourceRole};
use effect_ledger::policy::{PolicyOptions, PolicySet, PolicySource};
use effect_ledger::producers::fs::{apply_patch, edit_file, glob, grep, ls, read_file, write_file};
use serde_json::json;

/// A root and, beside it, a directory outside it holding a victim file.
struct Tree {
    _base: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

const VICTIM: &[u8] = b"the outside file, never to be written\n";

fn tree() -> Tree {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("victim"), VICTIM).unwrap();
    Tree { _base: base, root, outside }
}

fn seal(root: &Path) -> SealedRoot {
    let dir = Dir::open_ambient_dir(root, ambient_authority()).unwrap();
    SealedRoot::new(dir, "root", "workspace", "agent", ControlPlane::default()).unwrap()
}

fn at(root: &SealedRoot, path: &str) -> Target {
    Target::of(&root.resolve(path, ResourceRole::Target).unwrap())
}

/// Runs `work` on another thread and fails the test if it does not return
/// within `limit` (a FIFO open without `O_NONBLOCK` would block forever).
fn within<T: Send + 'static>(limit: Duration, what: &str, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(work());
    });
    finished
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} did not return within {limit:?}: it hangs"))
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success(), "mkfifo");
}

fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).unwrap().file_type().is_fifo()
}

#[test]
fn a_symlink_planted_after_resolution_is_refused_and_nothing_is_written() {
    let t = tree();
    std::fs::write(t.root.join("a.txt"), "a\n").unwrap();
    std::fs::create_dir(t.root.join("sub")).unwrap();
    std::fs::write(t.root.join("sub/b.txt"), "b\n").unwrap();
    let root = seal(&t.root);
    let existing = at(&root, "a.txt");
    let absent = at(&root, "new.txt");
    let nested = at(&root, "sub/b.txt");
    // The swaps, after the path check and before the open.
    std::fs::remove_file(t.root.join("a.txt")).unwrap();
    // Beneath the root: a path-based open (cap-std's) would follow it.
    std::fs::write(t.root.join("verified.txt"), VICTIM).unwrap();
    symlink("verified.txt", t.root.join("a.txt")).unwrap();
    symlink(t.outside.join("victim"), t.root.join("new.txt")).unwrap();
    std::fs::rename(t.root.join("sub"), t.root.join("sub.moved")).unwrap();
    std::fs::create_dir(t.outside.join("sub")).unwrap();
    std::fs::write(t.outside.join("sub/b.txt"), VICTIM).unwrap();
    symlink(t.outside.join("sub"), t.root.join("sub")).unwrap();

    for (name, target) in [("existing", &existing), ("absent", &absent), ("nested", &nested)] {
        let produced = write_file(&root, target, "planted\n");
        let message = produced.result.unwrap_err();
        assert!(message.contains("changed since it was resolved"), "{name}: {message}");
        assert!(produced.facts.executed && !produced.facts.mutation_attempted, "{name}: nothing touched");
        let edited = edit_file(&root, target, "the", "THE", false);
        assert!(edited.result.is_err() && !edited.facts.mutation_attempted, "{name}: edit refused");
        assert!(read_file(&root, target, 0, None, 1 << 20).result.is_err(), "{name}: read refused");
    }
    let patch = "*** Begin Patch\n*** Add File: new.txt\n+planted\n*** End Patch\n";
    let patched = apply_patch(&root, std::slice::from_ref(&absent), patch);
    assert!(patched.result.is_err() && !patched.facts.mutation_attempted);
    let delete = "*** Begin Patch\n*** Delete File: sub/b.txt\n*** End Patch\n";
    assert!(apply_patch(&root, &[nested], delete).result.is_err());
    assert_eq!(std::fs::read(t.outside.join("victim")).unwrap(), VICTIM, "the symlink's target unchanged");
    assert_eq!(std::fs::read(t.root.join("verified.txt")).unwrap(), VICTIM, "inside the root too");
    assert_eq!(std::fs::read(t.outside.join("sub/b.txt")).unwrap(), VICTIM, "nor the directory's");
    assert!(std::fs::symlink_metadata(t.root.join("a.txt")).unwrap().file_type().is_symlink());
}

#[test]
fn a_file_renamed_over_the_resolved_one_is_refused() {
    let t = tree();
    std::fs::write(t.root.join("a.txt"), "resolved\n").unwrap();
    let root = seal(&t.root);
    let target = at(&root, "a.txt");
    std::fs::write(t.root.join("other.txt"), "renamed over\n").unwrap();
    std::fs::rename(t.root.join("other.txt"), t.root.join("a.txt")).unwrap();
    let produced = write_file(&root, &target, "x\n");
    assert!(produced.result.unwrap_err().contains("another object is there now"));
    assert!(!produced.facts.mutation_attempted);
    assert_eq!(std::fs::read(t.root.join("a.txt")).unwrap(), b"renamed over\n", "not truncated");
    assert!(read_file(&root, &target, 0, None, 1 << 20).result.is_err(), "nor read as the resolved one");
    // Resolved again, it is written.
    write_file(&root, &at(&root, "a.txt"), "x\n").result.unwrap();
    assert_eq!(std::fs::read(t.root.join("a.txt")).unwrap(), b"x\n");
}

#[test]
fn a_patch_adding_two_files_in_a_new_directory_sees_its_own_directory() {
    let t = tree();
    let root = seal(&t.root);
    let targets = vec![at(&root, "new/a.txt"), at(&root, "new/b.txt")];
    let patch = "*** Begin Patch\n*** Add File: new/a.txt\n+a\n*** Add File: new/b.txt\n+b\n*** End Patch\n";
    let written = apply_patch(&root, &targets, patch).result.unwrap();
    assert_eq!(written.files.len(), 2);
    assert_eq!(std::fs::read(t.root.join("new/b.txt")).unwrap(), b"b\n");
    // A path the patch names but nobody resolved is refused before anything.
    let stray = "*** Begin Patch\n*** Add File: c.txt\n+c\n*** Add File: unresolved.txt\n+u\n*** End Patch\n";
    let produced = apply_patch(&root, &[at(&root, "c.txt")], stray);
    assert!(produced.result.unwrap_err().contains("not resolved"));
    assert!(!t.root.join("c.txt").exists());
}

#[test]
fn a_path_flipping_to_a_symlink_outside_never_lets_a_write_through() {
    let t = tree();
    std::fs::write(t.root.join("flip.file"), "inside\n").unwrap();
    // A file beneath the root the writes must not reach (a verified file, or
    // a store beneath the root): a symlink that stays inside is what a
    // path-based open would follow.
    std::fs::write(t.root.join("verified.txt"), VICTIM).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, root) = (stop.clone(), t.root.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Renames, so the path always names one of the two.
                let _ = std::fs::hard_link(root.join("flip.file"), root.join("flip.tmp"));
                let _ = std::fs::rename(root.join("flip.tmp"), root.join("flip"));
                let aim = if flips.is_multiple_of(2) {
                    PathBuf::from("verified.txt")
                } else {
                    t_outside_victim(&root)
                };
                let _ = std::os::unix::fs::symlink(aim, root.join("flip.tmp2"));
                let _ = std::fs::rename(root.join("flip.tmp2"), root.join("flip"));
                flips += 1;
            }
            flips
        })
    };
    let root = seal(&t.root);
    let (mut resolved, mut written) = (0, 0);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let Ok(found) = root.resolve("flip", ResourceRole::Target) else { continue };
        resolved += 1;
        if write_file(&root, &Target::of(&found), "written through\n").result.is_ok() {
            written += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 10 && resolved > 10, "the race ran ({flips} flips, {resolved} resolved)");
    assert_eq!(std::fs::read(t.outside.join("victim")).unwrap(), VICTIM, "after {written} writes inside");
    assert_eq!(std::fs::read(t.root.join("verified.txt")).unwrap(), VICTIM, "after {written} writes");
}

/// The victim outside `root`'s parent tree (the flipper only has the root).
fn t_outside_victim(root: &Path) -> PathBuf {
    root.parent().unwrap().join("outside/victim")
}

#[test]
fn a_fifo_in_the_root_hangs_no_tool_and_no_walk_opens_it() {
    let t = tree();
    std::fs::write(t.root.join("plain.txt"), "needle\n").unwrap();
    mkfifo(&t.root.join("pipe"));
    std::fs::create_dir(t.root.join("d")).unwrap();
    mkfifo(&t.root.join("d/pipe"));
    let path = t.root.clone();
    within(Duration::from_secs(10), "the filesystem tools over a FIFO", move || {
        let root = seal(&path);
        let pipe = at(&root, "pipe");
        let read = read_file(&root, &pipe, 0, None, 1 << 20).result.unwrap_err();
        assert!(read.contains("a FIFO"), "{read}");
        let written = write_file(&root, &pipe, "x");
        assert!(written.result.unwrap_err().contains("a FIFO") && !written.facts.mutation_attempted);
        assert!(edit_file(&root, &pipe, "a", "b", false).result.unwrap_err().contains("a FIFO"));
        let update = "*** Begin Patch\n*** Update File: pipe\n-a\n+b\n*** End Patch\n";
        assert!(
            apply_patch(&root, std::slice::from_ref(&pipe), update).result.unwrap_err().contains("a FIFO")
        );
        let delete = "*** Begin Patch\n*** Delete File: pipe\n*** End Patch\n";
        assert!(
            apply_patch(&root, std::slice::from_ref(&pipe), delete).result.unwrap_err().contains("a FIFO")
        );
        let found = grep(&root, &at(&root, "."), "needle").result.unwrap();
        assert_eq!(found.lines, vec!["plain.txt:1:needle"]);
        assert_eq!(glob(&root, &at(&root, "."), "**").result.unwrap().lines, vec!["plain.txt"]);
        assert!(ls(&root, &at(&root, ".")).result.unwrap().lines.contains(&"pipe".to_owned()));
        assert!(ls(&root, &pipe).result.is_err(), "a FIFO is not a directory to list");
    });
    assert!(is_fifo(&t.root.join("pipe")), "still a FIFO: nothing replaced or removed it");
}

#[test]
fn a_fifo_hangs_no_pre_state_readback_or_decision() {
    let t = tree();
    let data = t.root.parent().unwrap().join("data");
    std::fs::create_dir(&data).unwrap();
    mkfifo(&t.root.join("pipe"));
    let (root_path, data_path) = (t.root.clone(), data.clone());
    let completed = within(Duration::from_secs(30), "the ledger over a FIFO", move || {
        let data = Dir::open_ambient_dir(&data_path, ambient_authority()).unwrap();
        let policies = PolicySet::load(&PolicySource::Shipped, &PolicyOptions::default()).unwrap();
        let mut ledger = Ledger::new(LedgerConfig::new(data, "data", seal(&root_path), policies));
        let run = ledger.begin_run(None);
        // The edit's pre-state is read at binding: unreadable, not a hang.
        let input = json!({"path": "pipe", "old_string": "a", "new_string": "b"});
        let Dispatch::Run(edit) = ledger.dispatch(&run, "edit_file", &input, "e") else {
            panic!("dispatched")
        };
        let produced = edit_file(ledger.root(), &edit.bound.targets(ledger.root())[0], "a", "b", false);
        ledger.record(&run, &edit, &produced.facts).unwrap();
        // The read's readback opens it too.
        let Dispatch::Run(read) = ledger.dispatch(&run, "read_file", &json!({"path": "pipe"}), "r") else {
            panic!("dispatched")
        };
        let produced = read_file(ledger.root(), &read.bound.targets(ledger.root())[0], 0, None, 1 << 20);
        let recorded = ledger.record(&run, &read, &produced.facts).unwrap();
        for (_, observation) in &recorded.observations {
            assert_eq!(observation.coverage, Coverage::Partial, "no content claimed for a FIFO");
            assert!(observation.content_sha256.is_none());
        }
        // And completion reads every required artifact.
        let completion = ledger.complete(&run, &["pipe".to_owned()], "done").unwrap();
        completion.decided.decision.verdict
    });
    assert_ne!(format!("{completed:?}"), "Completed", "a FIFO is no verified artifact");
    assert!(is_fifo(&t.root.join("pipe")));
}

#[test]
fn a_session_over_a_fifo_finishes() {
    let s = support::session::session();
    std::fs::write(s.root.join("plain.txt"), "needle\n").unwrap();
    mkfifo(&s.root.join("pipe"));
    let steps = [
        json!({"tool": "read_file", "input": {"path": "pipe"}}),
        json!({"tool": "write_file", "input": {"path": "pipe", "content": "x"}}),
        json!({"tool": "edit_file", "input": {"path": "pipe", "old_string": "a", "new_string": "b"}}),
        json!({"tool": "apply_patch", "input": {"patch": "*** Begin Patch\n*** Update File: pipe\n-a\n+b\n*** End Patch\n"}}),
        json!({"tool": "grep", "input": {"pattern": "needle"}}),
        json!({"tool": "glob", "input": {"pattern": "**"}}),
        json!({"tool": "ls", "input": {}}),
    ];
    let mut script: String = steps.iter().map(|step| format!("{step}\n")).collect();
    script.push_str(&format!("{}\n", json!({"complete": {"required": ["pipe"], "answer": "done"}})));
    let mut child = s.spawn(&script, &[]);
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("the session over a FIFO hangs");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let reports = support::session::reports(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(reports.len(), steps.len() + 2, "every step, the decision, the summary: {stderr}");
    let grep = reports.iter().find(|r| r["tool"] == "grep").expect("grep reported");
    assert!(grep.to_string().contains("plain.txt:1:needle"), "{grep}");
    assert!(is_fifo(&s.root.join("pipe")));
}
