//! The README's commands as a new user runs them: the main job on the
//! default data dir (`./.effects`, no `--data-dir`), then every `effects
//! decide` and `effects log` command of the README's shell blocks exactly as
//! written, `RUN_ID` replaced by the id the session printed. Also the
//! operator commands' edges: `log list` over a store with stray entries and
//! a symlinked log, `log show --run` of a child, run ids that try to climb
//! out of the store, and the default data dir refused inside the root.

#![allow(clippy::disallowed_methods)] // tests drive the binary with real paths

use crate::support;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// A scratch place: `work/` is the current directory (so the default data
/// dir is `work/.effects`), `root/` the session's root.
struct Place {
    base: tempfile::TempDir,
    work: PathBuf,
    root: PathBuf,
}

fn place() -> Place {
    let base = tempfile::tempdir().unwrap();
    let (work, root) = (base.path().join("work"), base.path().join("root"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    Place { base, work, root }
}

impl Place {
    /// `effects ARGS...` in `work/`, with no data dir or key from the
    /// environment: only the default applies.
    fn effects(&self, args: &[&str]) -> Output {
        self.effects_with(args, "")
    }

    fn effects_with(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_effects"))
            .args(args)
            .current_dir(&self.work)
            .env_remove("EFFECTS_DATA_DIR")
            .env_remove("EFFECTS_LOG_KEY_FILE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    /// The README's main job, `session --root ROOT examples/hello.jsonl`.
    fn main_job(&self, extra: &[&str]) -> Output {
        let script = support::root().join("examples/hello.jsonl");
        let root = self.root.to_str().unwrap();
        let args = [&["session", "--root", root], extra, &[script.to_str().unwrap()]].concat();
        self.effects(&args)
    }

    fn store(&self) -> PathBuf {
        self.work.join(".effects/effects")
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(out: &Output, what: &str) {
    assert!(out.status.success(), "{what}: exit {:?}\n{}\n{}", out.status.code(), stdout(out), stderr(out));
}

fn json_lines(out: &Output) -> Vec<Value> {
    stdout(out).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// The `effects ...` commands of the README's `sh` blocks (continuation
/// lines joined, a trailing `# comment` dropped), split as a shell would for
/// these lines: words, and double-quoted strings.
fn readme_commands() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(support::root().join("README.md")).unwrap();
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let line = match line.find(" #") {
            Some(at) => &line[..at],
            None => line,
        };
        pending.push_str(line.trim_end().trim_end_matches('\\'));
        if line.trim_end().ends_with('\\') {
            pending.push(' ');
            continue;
        }
        let whole = std::mem::take(&mut pending);
        if whole.trim_start().starts_with("effects ") {
            commands.push(split(whole.trim()));
        }
    }
    commands
}

fn split(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    assert!(!quoted, "unbalanced quotes in a README command: {line}");
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[test]
fn the_main_job_decide_and_log_commands_agree_on_the_default_data_dir() {
    let p = place();
    let session = p.main_job(&["--json"]);
    ok(&session, "the main job");
    let reports = json_lines(&session);
    let summary = &reports.last().unwrap()["summary"];
    assert_eq!(summary["data_dir"], ".effects", "{summary:#}");
    let run = summary["run_id"].as_str().unwrap().to_owned();
    assert_eq!(summary["log"], format!(".effects/effects/{run}.log"));
    assert!(p.store().join(format!("{run}.log")).is_file(), "the log is in ./.effects");
    assert!(!p.root.parent().unwrap().join(".effects").exists(), "nothing beside the root any more");

    // Text: the data dir in the first line, for session and decide alike.
    let text = p.effects(&["decide", "--run", &run, "--require", "hello.txt", "--answer", "Done."]);
    ok(&text, "decide");
    assert_eq!(stdout(&text).lines().next().unwrap(), format!("run {run} (data dir .effects)"));
    let decided = p.effects(&["decide", "--run", &run, "--require", "hello.txt", "--json"]);
    ok(&decided, "decide --json");
    let decision: Value = serde_json::from_slice(&decided.stdout).unwrap();
    assert_eq!(decision["data_dir"], summary["data_dir"], "session and decide name one data dir");
    let position = decision["recorded"].as_u64().expect("the decision was recorded");

    let listed = p.effects(&["log", "list", "--json"]);
    ok(&listed, "log list");
    let lineages = json_lines(&listed);
    assert_eq!(lineages.len(), 1, "{lineages:?}");
    let entry = &lineages[0];
    assert_eq!(entry["lineage"], run.as_str());
    assert_eq!(entry["runs"], serde_json::json!([run]));
    assert_eq!(entry["unsettled"], 0);
    assert_eq!(entry["last_decision"]["position"], position);
    assert_eq!(entry["last_decision"]["verdict"], decision["verdict"]);
    assert_eq!(entry["last_decision"]["stale"], false);
    let size = std::fs::metadata(p.store().join(format!("{run}.log"))).unwrap().len();
    assert_eq!(entry["size"], size);
    assert_eq!(entry["records"].as_u64().unwrap(), position + 1);

    let shown = p.effects(&["log", "show", "--run", &run, "--json"]);
    ok(&shown, "log show --run");
    let records = json_lines(&shown);
    assert_eq!(records.len() as u64, position + 1);
    assert_eq!(records.last().unwrap()["kind"], "decision");
    let text = p.effects(&["log", "list"]);
    ok(&text, "log list (text)");
    assert!(stdout(&text).starts_with("data dir .effects: 1 lineage log(s)"), "{}", stdout(&text));
    assert!(stdout(&text).contains("(current)"), "{}", stdout(&text));
}

#[test]
fn every_decide_and_log_command_in_the_readme_runs_as_written_after_the_main_job() {
    let p = place();
    let session = p.main_job(&[]);
    ok(&session, "the main job");
    // The id as the text output names it: "continue with --run RUN_ID".
    let out = stdout(&session);
    let run = out.rsplit("continue with --run ").next().unwrap().trim().to_owned();
    assert!(run.starts_with("run-"), "{out}");
    let commands = readme_commands();
    let operator: Vec<&Vec<String>> =
        commands.iter().filter(|c| matches!(c[1].as_str(), "decide" | "log")).collect();
    assert!(operator.len() >= 6, "the README shows decide and log commands: {commands:?}");
    for command in operator {
        // A `/tmp/...` path of the README lands in this test's own scratch
        // place: files there are never overwritten, and tests run side by side.
        let scratch = format!("{}/", p.base.path().display());
        let args: Vec<String> =
            command[1..].iter().map(|a| a.replace("RUN_ID", &run).replace("/tmp/", &scratch)).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = p.effects(&args);
        ok(&out, &format!("README: {}", command.join(" ")));
        if args.contains(&"--replay") {
            assert!(stdout(&out).contains("IDENTICAL") && !stdout(&out).contains("NOT IDENTICAL"));
        }
    }
    // And the shape the README promises for the log commands, not just exit 0.
    let listed = p.effects(&["log", "list"]);
    assert!(stdout(&listed).contains(&run), "{}", stdout(&listed));
}

#[test]
fn the_default_data_dir_inside_the_root_is_refused() {
    // Run from inside the root: `./.effects` lies beneath it (ID-4).
    let p = place();
    let mut command = Command::new(env!("CARGO_BIN_EXE_effects"));
    let out = command
        .args(["session", "--root", "."])
        .arg(support::root().join("examples/hello.jsonl"))
        .current_dir(&p.root)
        .env_remove("EFFECTS_DATA_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("lies beneath") && stderr(&out).contains("--data-dir"), "{}", stderr(&out));
    assert!(!p.root.join(".effects").exists(), "a refused data dir is not created");
    assert!(!p.root.join("hello.txt").exists(), "no step ran");
}

#[test]
fn decide_and_log_say_what_to_do_when_the_run_or_data_dir_is_not_there() {
    let p = place();
    let decide = p.effects(&["decide", "--run", "run-1"]);
    assert_eq!(decide.status.code(), Some(2), "{}", stderr(&decide));
    assert!(stderr(&decide).contains("no data dir .effects") && stderr(&decide).contains("--data-dir"));
    assert!(!p.work.join(".effects").exists(), "a read creates no data dir");
    let listed = p.effects(&["log", "list"]);
    ok(&listed, "log list of a missing data dir");
    assert!(stdout(&listed).contains("0 lineage log(s)"), "{}", stdout(&listed));

    ok(&p.main_job(&[]), "the main job");
    for args in [
        &["decide", "--run", "run-9"][..],
        &["log", "show", "--run", "run-9"],
        &["log", "verify", "--run", "run-9"],
        &["log", "recover", "--run", "run-9"],
    ] {
        let out = p.effects(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let message = stderr(&out);
        assert!(message.contains("no log for run run-9") && message.contains("log list"), "{message}");
        assert!(message.contains("run-"), "it names the runs there: {message}");
    }
    assert!(!p.store().join("run-9.log").exists(), "recover --run never creates a log");
}

#[test]
fn a_run_id_cannot_reach_outside_the_store() {
    let p = place();
    ok(&p.main_job(&[]), "the main job");
    // A log-shaped file outside the store, where `..` would land.
    let lineage = std::fs::read_dir(p.store())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .find(|n| n.ends_with(".log"))
        .unwrap();
    std::fs::copy(p.store().join(&lineage), p.work.join(".effects/outside.log")).unwrap();
    for run in ["../outside", "..", "a/b", "/etc/passwd", "run-1/../../outside", "../effects/x"] {
        for command in
            [&["log", "show", "--run", run][..], &["decide", "--run", run], &["log", "recover", "--run", run]]
        {
            let out = p.effects(command);
            assert_eq!(out.status.code(), Some(2), "{command:?}: {}", stderr(&out));
            assert!(stderr(&out).contains("run id"), "{command:?}: {}", stderr(&out));
            assert!(stdout(&out).is_empty(), "{command:?} printed records: {}", stdout(&out));
        }
    }
}

#[test]
fn log_list_skips_stray_files_and_reports_a_symlinked_log_without_following_it() {
    let p = place();
    ok(&p.main_job(&[]), "the main job");
    let store = p.store();
    std::fs::write(store.join("notes.txt"), "not a log").unwrap();
    std::fs::write(store.join("README"), "").unwrap();
    std::fs::create_dir(store.join("old.log.d")).unwrap();
    let listed = p.effects(&["log", "list", "--json"]);
    ok(&listed, "log list with stray entries");
    assert_eq!(json_lines(&listed).len(), 1, "{}", stdout(&listed));

    // A symlink named as a log: listed (so the operator sees it), refused
    // (LOG-9: never followed), and the other lineage still reported.
    let real = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|path| path.extension().is_some_and(|e| e == "log"))
        .unwrap();
    let outside = p.work.join("elsewhere.log");
    std::fs::copy(&real, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, store.join("linked.log")).unwrap();
    let listed = p.effects(&["log", "list", "--json"]);
    assert_eq!(listed.status.code(), Some(1), "an unreadable log is a problem: {}", stderr(&listed));
    let entries = json_lines(&listed);
    assert_eq!(entries.len(), 2, "{entries:?}");
    let linked = entries.iter().find(|e| e["lineage"] == "linked").unwrap();
    assert!(linked["error"].as_str().unwrap().contains("symlink"), "{linked}");
    assert!(entries.iter().any(|e| e["error"].is_null() && e["records"].as_u64() > Some(0)));
    let shown = p.effects(&["log", "show", "--run", "linked"]);
    assert_ne!(shown.status.code(), Some(0));
    assert!(stderr(&shown).contains("symlink"), "{}", stderr(&shown));
    assert!(stdout(&shown).is_empty(), "nothing read through the link");
}

#[test]
fn log_show_of_a_child_prints_its_records_and_finds_its_lineage_log() {
    let p = place();
    let root = p.root.to_str().unwrap();
    let write =
        |path: &str| format!(r#"{{"tool": "write_file", "input": {{"path": "{path}", "content": "x\n"}}}}"#);
    let first = p.effects_with(&["session", "--root", root, "--new-run", "lead", "--json"], &write("a.txt"));
    ok(&first, "the parent");
    let child = p.effects_with(
        &["session", "--root", root, "--child-of", "lead", "--new-run", "fix", "--json"],
        &write("b.txt"),
    );
    ok(&child, "the child");
    let whole = json_lines(&p.effects(&["log", "show", "--run", "lead", "--json"]));
    let runs: Vec<&str> = whole.iter().filter_map(|r| r["run_id"].as_str()).collect();
    assert!(runs.contains(&"lead") && runs.contains(&"lead.fix"), "{runs:?}");
    let shown = p.effects(&["log", "show", "--run", "lead.fix", "--json"]);
    ok(&shown, "log show --run CHILD");
    let own = json_lines(&shown);
    assert!(!own.is_empty() && own.iter().all(|r| r["run_id"] == "lead.fix"), "{own:?}");
    assert!(own.len() < whole.len());
    ok(&p.effects(&["log", "verify", "--run", "lead.fix"]), "verify --run CHILD");
    let listed = json_lines(&p.effects(&["log", "list", "--json"]));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["runs"], serde_json::json!(["lead", "lead.fix"]));
    // The lineage exists, the child does not: said so, with the runs there.
    let missing = p.effects(&["log", "show", "--run", "lead.nope"]);
    assert_eq!(missing.status.code(), Some(2), "{}", stderr(&missing));
    assert!(stderr(&missing).contains("lead, lead.fix"), "{}", stderr(&missing));
    assert!(stdout(&missing).is_empty());
}

/// The README's shell lines parse as the test reads them.
#[test]
fn readme_commands_are_extracted() {
    let commands = readme_commands();
    assert!(commands.iter().any(|c| c[..3] == ["effects", "log", "list"]), "{commands:?}");
    assert!(commands.iter().any(|c| c.contains(&"Done.".to_owned())), "quoted words stay whole");
}
