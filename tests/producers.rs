//! Filesystem producers on a real directory: the digest each reports is the
//! SHA-256 of the bytes actually on disk (write, edit, patch; CRLF files and a
//! fenced write included), reads report their coverage honestly, and a write
//! that fails after its truncating open says so.

#![allow(clippy::disallowed_methods)] // tests inspect files with ambient authority

use std::path::Path;
use std::process::Command;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::digest::Sha256Digest;
use effect_ledger::identity::{ControlPlane, SealedRoot, Target};
use effect_ledger::model::{Coverage, ResourceRole};
use effect_ledger::producers::fs::{apply_patch, edit_file, read_file, write_file};

fn root() -> (tempfile::TempDir, SealedRoot) {
    let dir = tempfile::tempdir().unwrap();
    let root = seal(dir.path());
    (dir, root)
}

fn seal(path: &Path) -> SealedRoot {
    let handle = Dir::open_ambient_dir(path, ambient_authority()).unwrap();
    SealedRoot::new(handle, "root", "workspace", "agent", ControlPlane::default()).unwrap()
}

/// `path` as resolved now: what a producer opens (ID-3).
fn at(root: &SealedRoot, path: &str) -> Target {
    Target::of(&root.resolve(path, ResourceRole::Target).unwrap())
}

/// Every path a patch names, resolved now.
fn all(root: &SealedRoot, paths: &[&str]) -> Vec<Target> {
    paths.iter().map(|path| at(root, path)).collect()
}

fn on_disk(dir: &Path, path: &str) -> (Vec<u8>, Sha256Digest) {
    let bytes = std::fs::read(dir.join(path)).unwrap();
    let digest = Sha256Digest::of(&bytes);
    (bytes, digest)
}

#[test]
fn a_fenced_write_writes_the_unwrapped_bytes_and_reports_their_digest() {
    let (dir, root) = root();
    let produced = write_file(&root, &at(&root, "src/main.rs"), "```rust\nfn main() {}\n```\n");
    let written = produced.result.unwrap();
    let (bytes, digest) = on_disk(dir.path(), "src/main.rs");
    assert_eq!(bytes, b"fn main() {}\n");
    assert_eq!(written.files, vec![("src/main.rs".to_owned(), digest)]);
    assert_eq!((produced.facts.executed, produced.facts.exit_code), (true, Some(0)));
}

#[test]
fn an_edit_keeps_crlf_and_reports_the_digest_on_disk() {
    let (dir, root) = root();
    std::fs::write(dir.path().join("a.txt"), "one\r\ntwo\r\n").unwrap();
    let written = edit_file(&root, &at(&root, "a.txt"), "two", "2", false).result.unwrap();
    let (bytes, digest) = on_disk(dir.path(), "a.txt");
    assert_eq!(bytes, b"one\r\n2\r\n");
    assert_eq!(written.files[0].1, digest);

    let missing = edit_file(&root, &at(&root, "a.txt"), "three", "3", false);
    assert!(missing.result.unwrap_err().contains("does not occur"));
    assert!(!missing.facts.mutation_attempted);
    assert_eq!(on_disk(dir.path(), "a.txt").0, b"one\r\n2\r\n", "a failed edit changes nothing");
}

#[test]
fn a_patch_updates_on_universal_newlines_adds_and_deletes() {
    let (dir, root) = root();
    std::fs::write(dir.path().join("lib.rs"), "fn a() {\r\n    old();\r\n}\r\n").unwrap();
    std::fs::write(dir.path().join("gone.txt"), "bye\n").unwrap();
    let patch = "*** Begin Patch\n*** Update File: lib.rs\n fn a() {\n-    old();\n+    new();\n }\n*** Add File: docs/new.md\n+# New\n*** Delete File: gone.txt\n*** End Patch\n";
    let written =
        apply_patch(&root, &all(&root, &["lib.rs", "docs/new.md", "gone.txt"]), patch).result.unwrap();
    let (lib, lib_digest) = on_disk(dir.path(), "lib.rs");
    assert_eq!(lib, b"fn a() {\n    new();\n}\n", "updates write LF (universal-newline pre-state)");
    let (doc, doc_digest) = on_disk(dir.path(), "docs/new.md");
    assert_eq!(doc, b"# New\n");
    assert_eq!(
        written.files,
        vec![("lib.rs".to_owned(), lib_digest), ("docs/new.md".to_owned(), doc_digest)]
    );
    assert_eq!(written.removed, vec!["gone.txt".to_owned()]);
    assert!(!dir.path().join("gone.txt").exists());
}

#[test]
fn a_patch_whose_hunk_does_not_match_writes_nothing() {
    let (dir, root) = root();
    std::fs::write(dir.path().join("lib.rs"), "fn a() {}\n").unwrap();
    let patch = "*** Begin Patch\n*** Add File: first.txt\n+x\n*** Update File: lib.rs\n-fn b() {}\n+fn c() {}\n*** End Patch\n";
    let produced = apply_patch(&root, &all(&root, &["first.txt", "lib.rs"]), patch);
    assert!(produced.result.unwrap_err().contains("do not match"));
    assert!(!produced.facts.mutation_attempted);
    assert!(!dir.path().join("first.txt").exists(), "nothing written before every hunk matched");
}

#[test]
fn reads_are_complete_only_when_whole() {
    let (dir, root) = root();
    std::fs::write(dir.path().join("r.txt"), "1\n2\n3\n").unwrap();
    let whole = read_file(&root, &at(&root, "r.txt"), 0, None, 1 << 20).result.unwrap();
    assert_eq!(whole.coverage, Coverage::Complete);
    assert_eq!(whole.complete_sha256, Some(on_disk(dir.path(), "r.txt").1));
    let window = read_file(&root, &at(&root, "r.txt"), 1, Some(1), 1 << 20).result.unwrap();
    assert_eq!(
        (window.text.as_str(), window.coverage, window.complete_sha256),
        ("2\n", Coverage::Partial, None)
    );
    let capped = read_file(&root, &at(&root, "r.txt"), 0, None, 3).result.unwrap();
    assert_eq!(
        (capped.text.as_str(), capped.coverage, capped.complete_sha256),
        ("1\n2", Coverage::Partial, None)
    );
}

#[test]
fn a_write_that_fails_after_its_truncating_open_reports_mutation_attempted() {
    let mount = tempfile::tempdir().unwrap().keep();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16k", "tmpfs"])
        .arg(&mount)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(mounted, "mounting a small tmpfs needs root (CI runs as root)");
    let root = seal(&mount);
    std::fs::write(mount.join("big.txt"), "old content\n").unwrap();
    let produced = write_file(&root, &at(&root, "big.txt"), &"x".repeat(64 * 1024));
    drop(root); // an open directory handle would keep the mount busy
    let unmounted = Command::new("umount").arg(&mount).status().map(|s| s.success()).unwrap_or(false);
    let _ = std::fs::remove_dir(&mount);
    assert!(unmounted, "the test's tmpfs must not outlive it");
    assert!(produced.result.is_err());
    assert!(produced.facts.mutation_attempted, "the old content may be gone");
    assert_eq!(produced.facts.exit_code, Some(1));
}

#[test]
fn listings_and_searches_stay_beneath_the_root_and_skip_symlinks() {
    use effect_ledger::producers::fs::{glob, grep, ls};
    let (dir, root) = root();
    std::fs::create_dir_all(dir.path().join("src/deep")).unwrap();
    std::fs::write(dir.path().join("src/a.rs"), "fn alpha() {}\nfn beta() {}\n").unwrap();
    std::fs::write(dir.path().join("src/deep/b.rs"), "fn gamma() {}\n").unwrap();
    std::fs::write(dir.path().join("notes.md"), "alpha\n").unwrap();
    std::os::unix::fs::symlink("/etc", dir.path().join("src/etc-link")).unwrap();
    assert_eq!(ls(&root, &at(&root, ".")).result.unwrap().lines, vec!["notes.md", "src/"]);
    let globbed = glob(&root, &at(&root, "src"), "**/*.rs").result.unwrap();
    assert_eq!(globbed.lines, vec!["src/a.rs", "src/deep/b.rs"]);
    let found = grep(&root, &at(&root, "."), "fn (alpha|gamma)").result.unwrap();
    assert_eq!(found.lines, vec!["src/a.rs:1:fn alpha() {}", "src/deep/b.rs:1:fn gamma() {}"]);
    assert!(!found.truncated);
    assert!(grep(&root, &at(&root, "."), "(").result.unwrap_err().contains("bad pattern"));
}

/// A build deletes and remakes directories while the agent searches: a
/// directory gone between its parent's listing and its own is skipped, and
/// every search still answers, with every file that stood still.
#[test]
fn a_search_while_directories_come_and_go_still_answers() {
    use effect_ledger::producers::fs::{glob, grep};
    let (dir, root) = root();
    std::fs::write(dir.path().join("kept.rs"), "fn kept() {}\n").unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (answers, rounds) = std::thread::scope(|scope| {
        let churn = scope.spawn(|| {
            let mut round = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let build = dir.path().join("build");
                std::fs::create_dir_all(build.join("a/b/c")).unwrap();
                std::fs::write(build.join("a/b/c/gen.rs"), "fn kept() {}\n").unwrap();
                std::fs::remove_dir_all(&build).unwrap();
                round += 1;
            }
            round
        });
        let answers: Vec<(Result<_, String>, Result<_, String>)> = (0..5_000)
            .map(|_| {
                (
                    glob(&root, &at(&root, "."), "**/*.rs").result,
                    grep(&root, &at(&root, "."), "fn kept").result,
                )
            })
            .collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (answers, churn.join().unwrap())
    });
    assert!(rounds > 0, "the directories came and went meanwhile");
    for (globbed, found) in answers {
        assert!(globbed.expect("a glob answers").lines.contains(&"kept.rs".to_owned()));
        assert!(found.expect("a grep answers").lines.contains(&"kept.rs:1:fn kept() {}".to_owned()));
    }
}
