//! Sealed roots (ID-1..4) on a real filesystem: every escape is refused, the
//! effect store is out of reach, and incarnations tell objects apart.

#![allow(clippy::disallowed_methods)] // tests build their trees with ambient authority

use crate::support;

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use effect_ledger::identity::{ControlPlane, IdentityError, SealedRoot};
use effect_ledger::log::{OpenMode, OpenOptionsLog, open_effects_dir, open_lineage};
use effect_ledger::model::{Location, ResourceRole};

/// A root with a file, a directory, a data dir inside it holding one log, and
/// a directory outside it.
struct Tree {
    _base: tempfile::TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn tree() -> Tree {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("src/a.txt"), "a\n").unwrap();
    std::fs::write(outside.join("secret"), "s\n").unwrap();
    std::fs::create_dir(root.join(".effects")).unwrap();
    std::fs::set_permissions(root.join(".effects"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let data = Dir::open_ambient_dir(root.join(".effects"), ambient_authority()).unwrap();
    let effects = open_effects_dir(&data, "data", OpenMode::ReadWrite).unwrap().unwrap();
    let options = OpenOptionsLog::default();
    open_lineage(&effects, "effects", "run-1", &options).unwrap().unwrap();
    Tree { _base: base, root, outside }
}

fn seal(tree: &Tree) -> SealedRoot {
    let store = Dir::open_ambient_dir(tree.root.join(".effects/effects"), ambient_authority()).unwrap();
    let control = ControlPlane::new(&store, Some(".effects".into())).unwrap();
    let dir = Dir::open_ambient_dir(&tree.root, ambient_authority()).unwrap();
    SealedRoot::new(dir, &tree.root.display().to_string(), "workspace", "agent", control).unwrap()
}

/// Which refusal a path must get.
type Expectation = fn(&IdentityError) -> bool;

fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap_or_default())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_escape_is_refused_and_nothing_outside_changes() {
    let tree = tree();
    symlink(tree.outside.join("secret"), tree.root.join("link")).unwrap();
    symlink(&tree.outside, tree.root.join("subdir")).unwrap();
    std::fs::hard_link(tree.root.join(".effects/effects/run-1.log"), tree.root.join("alias.log")).unwrap();
    let before = snapshot(&tree.outside);
    let root = seal(&tree);
    let cases: [(&str, Expectation); 6] = [
        ("../outside/secret", |e| matches!(e, IdentityError::Escape { .. })),
        ("/etc/passwd", |e| matches!(e, IdentityError::Absolute { .. })),
        ("link", |e| matches!(e, IdentityError::Symlink { .. })),
        ("subdir/secret", |e| matches!(e, IdentityError::Symlink { .. })),
        (".effects/effects/run-1.log", |e| matches!(e, IdentityError::ControlPlane { .. })),
        ("alias.log", |e| matches!(e, IdentityError::ControlPlane { .. })),
    ];
    for (path, expected) in cases {
        match root.resolve(path, ResourceRole::Target) {
            Err(error) => assert!(expected(&error), "{path}: wrong refusal: {error}"),
            Ok(resolved) => panic!("{path} resolved to {:?}", resolved.relative),
        }
    }
    assert_eq!(snapshot(&tree.outside), before, "nothing outside the root was touched");
}

#[test]
fn incarnations_tell_objects_apart_and_absence_is_explicit() {
    let tree = tree();
    let root = seal(&tree);
    let first = root.resolve("src/./a.txt", ResourceRole::Target).unwrap();
    assert!(first.exists);
    assert_eq!(first.relative, "src/a.txt");
    let Location::Filesystem(location) = first.resource.location() else { panic!("a filesystem ref") };
    assert_eq!(location.path, "src/a.txt");
    assert_eq!(location.root.scope, "workspace");
    let again = root.resolve("src/a.txt", ResourceRole::Source).unwrap();
    assert_eq!(again.resource.incarnation(), first.resource.incarnation(), "same object, same incarnation");

    // Replaced (new inode): a different incarnation at the same location.
    std::fs::remove_file(tree.root.join("src/a.txt")).unwrap();
    std::fs::write(tree.root.join("src/b.txt"), "keeps the old inode busy\n").unwrap();
    std::fs::write(tree.root.join("src/a.txt"), "a\n").unwrap();
    let replaced = root.resolve("src/a.txt", ResourceRole::Target).unwrap();
    assert_ne!(replaced.resource.incarnation(), first.resource.incarnation());

    let absent = root.resolve("src/new/file.txt", ResourceRole::Target).unwrap();
    assert!(!absent.exists);
    assert!(absent.resource.incarnation().starts_with("absent:"), "{}", absent.resource.incarnation());
}

#[test]
fn a_store_outside_the_root_is_still_guarded_against_hard_link_aliases() {
    // The data dir is not beneath this root (no prefix to guard), yet a hard
    // link to one of its files is caught by inode (ID-4).
    let tree = tree();
    std::fs::hard_link(tree.root.join(".effects/effects/run-1.log"), tree.root.join("src/alias")).unwrap();
    // A background job's exit file is store too: forging it would forge how
    // the job ended.
    std::fs::create_dir(tree.root.join(".effects/effects/jobs")).unwrap();
    std::fs::write(tree.root.join(".effects/effects/jobs/job-7.exit"), "").unwrap();
    std::fs::hard_link(tree.root.join(".effects/effects/jobs/job-7.exit"), tree.root.join("src/exit"))
        .unwrap();
    let store = Dir::open_ambient_dir(tree.root.join(".effects/effects"), ambient_authority()).unwrap();
    let control = ControlPlane::new(&store, None).unwrap();
    let dir = Dir::open_ambient_dir(&tree.root, ambient_authority()).unwrap();
    let root = SealedRoot::new(dir, "root", "s", "o", control).unwrap();
    assert!(root.resolve("src/a.txt", ResourceRole::Source).is_ok());
    for alias in ["src/alias", "src/exit"] {
        match root.resolve(alias, ResourceRole::Target) {
            Err(IdentityError::ControlPlane { reason, .. }) => {
                assert!(reason.contains("hard link"), "{reason}")
            }
            other => panic!("expected {alias} to be refused, got {other:?}"),
        }
    }
}

#[test]
fn a_resource_ref_cannot_be_read_from_json_outside_the_crate() {
    // ID-1, deserialization included: `ResourceRef` itself has no
    // `Deserialize` (the `compile_fail` example in `model::resource` shows
    // it), and the records and arguments that hold refs refuse to read one
    // outside the crate's own loaders. Written and read back by the log, the
    // same ref is intact.
    use effect_ledger::log::{ClaimRecord, Record};
    use effect_ledger::model::{BoundOperation, EvidenceLedger};
    let tree = tree();
    let root = seal(&tree);
    let made = root.resolve("src/a.txt", ResourceRole::Target).unwrap().resource;
    let as_json = serde_json::to_value(&made).unwrap();
    let claim = serde_json::json!({
        "action_id": "a", "operation": {"tool": "t", "action": "", "input_sha256": "", "request_id": ""},
        "impact_scope": [as_json], "dependencies": [], "obligations": [], "parent_run_id": null,
        "external": false,
    });
    let refused = |what: &str, error: serde_json::Error| {
        assert!(error.to_string().contains("made by the host only (ID-1)"), "{what}: {error}");
    };
    refused("a claim", serde_json::from_value::<ClaimRecord>(claim.clone()).unwrap_err());
    let mut no_ref = claim.clone();
    no_ref["impact_scope"] = serde_json::json!([]);
    serde_json::from_value::<ClaimRecord>(no_ref).expect("the same record without a ref reads");
    let operation = serde_json::json!({
        "tool": "write_file", "action": "", "request_id": "r", "input_json": "{}", "input_sha256": "",
        "bindings": [{"name": "path", "resource": as_json}], "pre_states": [], "producer_bound": true,
    });
    refused("a bound operation", serde_json::from_value::<BoundOperation>(operation).unwrap_err());
    let ledger = serde_json::json!({"resources": [as_json], "required": [], "records": [], "answer": ""});
    refused("an evidence ledger", serde_json::from_value::<EvidenceLedger>(ledger).unwrap_err());
    // The crate's loader, the log, reads it back as written.
    let data = Dir::open_ambient_dir(tree.root.join(".effects"), ambient_authority()).unwrap();
    let effects = open_effects_dir(&data, "data", OpenMode::ReadWrite).unwrap().unwrap();
    let mut log = open_lineage(&effects, "effects", "run-2", &OpenOptionsLog::default()).unwrap().unwrap();
    let record = ClaimRecord { impact_scope: vec![made.clone()], ..support::claim("a") };
    log.claim("run-2", record.clone()).unwrap();
    let options =
        OpenOptionsLog { mode: OpenMode::ReadOnly, key: None, recover: false, ..Default::default() };
    let reread = open_lineage(&effects, "effects", "run-2", &options).unwrap().unwrap();
    assert_eq!(reread.records()[0].record, Record::Claim(record));
}
