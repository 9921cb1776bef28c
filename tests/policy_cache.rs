//! The compiled-component cache bound to the pin (POL-1, revision 2), attacked
//! through the `effects` CLI with a real data dir as issue 16's attacker did:
//! another component's valid compiled entry swapped under the pinned
//! evaluator's digest, a flipped byte, an entry that is a link, and a cache
//! directory that is not private or is a symbolic link. Each time the decision
//! is still the pinned evaluator's, and `effects policy verify` says what it
//! found. (An entry of another engine configuration: the unit tests of
//! `host/src/policy/cache.rs`, which can build a second engine.)

#![allow(clippy::disallowed_methods)] // tests play the attacker with ambient authority

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use effect_ledger::digest::Sha256Digest;
use support::session::{Session, log_records, reports, session};
use support::{PolicyCopy, fixture, shipped};

/// An external call: the pinned evaluator can only say UNVERIFIED of it
/// (CMP-6/EXTERNAL_EFFECT_UNVERIFIED); the hostile fixture says COMPLETED of
/// anything whose answer is not one of its modes.
const SCRIPT: &str = concat!(
    r#"{"tool": "external", "input": {"server": "tracker", "tool": "create_issue", "arguments": {"title": "bug"}}, "reported": {"exit_code": 0}}"#,
    "\n",
    r#"{"complete": {"required": [], "answer": "Filed the bug."}}"#,
    "\n"
);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs [`SCRIPT`] in `s` and returns the decision's verdict and stderr.
fn decide(s: &Session, extra: &[&str]) -> (String, String) {
    let out = s.run(SCRIPT, extra);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let last = reports(&out).pop().unwrap();
    (last["verdict"].as_str().unwrap().to_owned(), text(&out.stderr))
}

/// `effects --data-dir DATA policy verify`, on the embedded policies.
fn verify(s: &Session) -> Output {
    Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&s.data)
        .args(["policy", "verify"])
        .output()
        .unwrap()
}

fn cache_dir(s: &Session) -> PathBuf {
    s.data.join("cache/components")
}

/// The one engine bucket the runs so far made.
fn bucket(s: &Session) -> PathBuf {
    let buckets: Vec<PathBuf> =
        std::fs::read_dir(cache_dir(s)).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    assert_eq!(buckets.len(), 1, "one engine configuration, one bucket: {buckets:?}");
    buckets.into_iter().next().unwrap()
}

/// The cache entry of the component whose bytes are `bytes`.
fn entry_of(s: &Session, bytes: &[u8]) -> PathBuf {
    bucket(s).join(format!("{}.cwasm", Sha256Digest::of(bytes)))
}

fn evaluator_entry(s: &Session) -> PathBuf {
    entry_of(s, &shipped("evaluate.wasm"))
}

/// The evaluator digest the last decision was recorded under: the last
/// record of the log written last (each `decide` is a new run, with a log of
/// its own; names and directory order say nothing of which came last).
fn recorded_evaluator(s: &Session) -> String {
    let newest = s
        .logs()
        .into_iter()
        .max_by_key(|log| std::fs::metadata(log).and_then(|m| m.modified()).unwrap())
        .expect("a decision was recorded");
    let last = log_records(&newest).pop().unwrap();
    last["record"]["decision"]["evaluator"]["sha256"].as_str().unwrap().to_owned()
}

#[test]
fn another_components_entry_swapped_under_the_evaluator_is_never_run_and_verify_reports_it() {
    let s = session();
    // The attacker's compiled evaluator, made by `effects` itself into this
    // data dir: its entry carries a valid tag, for its own digest. Run once to
    // show what it would decide.
    let copy = PolicyCopy::new();
    let hostile = fixture("hostile-evaluator");
    copy.replace("evaluate.wasm", &hostile);
    let manifest = copy.path("manifest.toml");
    let (verdict, _) = decide(&s, &["--manifest", manifest.to_str().unwrap()]);
    assert_eq!(verdict, "COMPLETED", "the hostile evaluator says COMPLETED of this run");

    let (verdict, _) = decide(&s, &[]);
    assert_eq!(verdict, "UNVERIFIED", "the pinned evaluator's decision");
    let pinned = Sha256Digest::of(&shipped("evaluate.wasm")).to_string();

    // The swap: the hostile entry, byte for byte, under the pinned digest.
    let swapped = std::fs::read(entry_of(&s, &hostile)).unwrap();
    std::fs::write(evaluator_entry(&s), &swapped).unwrap();
    let (verdict, stderr) = decide(&s, &[]);
    assert_eq!(verdict, "UNVERIFIED", "the swapped entry did not decide: {stderr}");
    assert_eq!(recorded_evaluator(&s), pinned);
    assert!(stderr.contains("failed its check") && stderr.contains(&pinned), "{stderr}");
    assert_ne!(std::fs::read(evaluator_entry(&s)).unwrap(), swapped, "the entry was replaced");

    // Swapped again, `policy verify` names it and fails; the load it makes
    // replaces it, so a second verify passes.
    std::fs::write(evaluator_entry(&s), &swapped).unwrap();
    let out = verify(&s);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let problems: Vec<&str> = stdout.lines().filter(|l| l.starts_with("problem")).collect();
    assert_eq!(problems.len(), 1, "{stdout}");
    assert!(problems[0].contains("cache entry for evaluate") && problems[0].contains("tag"), "{stdout}");
    assert!(stdout.lines().filter(|l| l.contains("classify")).all(|l| l.ends_with("cache: ok)")), "{stdout}");
    let again = verify(&s);
    let stdout = text(&again.stdout);
    assert!(again.status.success(), "{stdout}{}", text(&again.stderr));
    assert!(stdout.lines().all(|l| l.starts_with("ok ") && l.ends_with("cache: ok)")), "{stdout}");
}

#[test]
fn a_flipped_byte_in_an_entry_is_recompiled_and_decides_the_same() {
    let s = session();
    let (before, _) = decide(&s, &[]);
    let entry = evaluator_entry(&s);
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&entry, &bytes).unwrap();

    let (after, stderr) = decide(&s, &[]);
    assert_eq!((before.as_str(), after.as_str()), ("UNVERIFIED", "UNVERIFIED"));
    assert!(stderr.contains("failed its check"), "{stderr}");
    assert_ne!(std::fs::read(&entry).unwrap(), bytes, "the damaged entry was replaced");
    assert!(verify(&s).status.success(), "the replacement passes its check");
}

/// Makes a link at the second path to the first.
type MakeLink = dyn Fn(&Path, &Path) -> std::io::Result<()>;

#[test]
fn an_entry_that_is_a_link_is_not_used_even_to_a_valid_entry() {
    let s = session();
    decide(&s, &[]);
    let entry = evaluator_entry(&s);
    let kept = entry.with_extension("kept");
    std::fs::rename(&entry, &kept).unwrap();
    let symlink = |from: &Path, to: &Path| std::os::unix::fs::symlink(from, to);
    let hard_link = |from: &Path, to: &Path| std::fs::hard_link(from, to);
    let makers: [(&MakeLink, &str); 2] = [(&symlink, "symbolic link"), (&hard_link, "2 links")];
    for (make, why) in makers {
        let _ = std::fs::remove_file(&entry);
        make(&kept, &entry).unwrap();
        let out = verify(&s);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{why}: {stdout}");
        assert!(stdout.contains("cache entry for evaluate") && stdout.contains(why), "{why}: {stdout}");
        let meta = std::fs::symlink_metadata(&entry).unwrap();
        assert!(meta.is_file(), "{why}: replaced by a regular file");
        assert!(verify(&s).status.success(), "{why}: and the replacement is used");
    }
}

#[test]
fn a_cache_dir_others_can_write_is_not_used_and_decisions_stay_right() {
    let s = session();
    let dir = cache_dir(&s);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (verdict, stderr) = decide(&s, &[]);
    assert_eq!(verdict, "UNVERIFIED");
    assert!(stderr.contains("not private") && stderr.contains("chmod 700"), "{stderr}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "nothing was cached in it");
    let out = verify(&s);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("not private"), "{}", text(&out.stdout));

    // Made private again, it is used.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    decide(&s, &[]);
    assert!(evaluator_entry(&s).is_file());
}

#[test]
fn a_symbolic_link_in_place_of_the_cache_dir_is_not_followed() {
    let s = session();
    // The link points at another data dir's cache (a private directory of
    // ours) whose evaluator entry an attacker planted. Followed, this run would
    // read entries there and write its own into it; it must do neither.
    let elsewhere = session();
    let copy = PolicyCopy::new();
    let hostile = fixture("hostile-evaluator");
    copy.replace("evaluate.wasm", &hostile);
    decide(&elsewhere, &["--manifest", copy.path("manifest.toml").to_str().unwrap()]);
    let planted = std::fs::read(entry_of(&elsewhere, &hostile)).unwrap();
    std::fs::write(entry_of(&elsewhere, &shipped("evaluate.wasm")), &planted).unwrap();
    let listing = |dir: &Path| -> Vec<PathBuf> {
        let mut all: Vec<PathBuf> = walk(dir);
        all.sort();
        all
    };
    let before = listing(&cache_dir(&elsewhere));

    std::fs::create_dir_all(s.data.join("cache")).unwrap();
    std::os::unix::fs::symlink(cache_dir(&elsewhere), cache_dir(&s)).unwrap();
    let (verdict, stderr) = decide(&s, &[]);
    assert_eq!(verdict, "UNVERIFIED", "{stderr}");
    assert!(stderr.contains("symbolic link") && stderr.contains("not used"), "{stderr}");
    assert_eq!(listing(&cache_dir(&elsewhere)), before, "nothing written through the link");
    let evaluator = entry_of(&elsewhere, &shipped("evaluate.wasm"));
    assert_eq!(std::fs::read(evaluator).unwrap(), planted, "nor replaced there");
    let out = verify(&s);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("symbolic link"), "{}", text(&out.stdout));
}

/// Every file beneath `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() { files.extend(walk(&path)) } else { files.push(path) }
    }
    files
}
