//! Driving the `effects` binary's `session` as a terminal user would.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

/// A root and a data dir in a temporary directory.
pub struct Session {
    _base: tempfile::TempDir,
    pub root: PathBuf,
    pub data: PathBuf,
}

/// A fresh session place.
pub fn session() -> Session {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    let data = base.path().join("data");
    std::fs::create_dir_all(&root).unwrap();
    Session { _base: base, root, data }
}

/// `effects --data-dir DATA session --root ROOT ARGS...`, for a data dir and
/// root of the caller's choosing.
pub fn command_at(data: &Path, root: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_effects"));
    command.arg("--data-dir").arg(data).arg("session").arg("--root").arg(root).args(args);
    command
}

/// Starts `command` with `script` on its standard input.
fn spawn_with(mut command: Command, script: &str) -> Child {
    let mut child =
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    child
}

/// Runs [`command_at`] with `script` on standard input.
pub fn run_at(data: &Path, root: &Path, args: &[&str], script: &str) -> Output {
    spawn_with(command_at(data, root, args), script).wait_with_output().unwrap()
}

impl Session {
    /// `effects --data-dir D session --root R --json EXTRA...`.
    pub fn command(&self, extra: &[&str]) -> Command {
        let mut command = command_at(&self.data, &self.root, &["--json"]);
        command.args(extra);
        command
    }

    /// Runs `script` (on standard input) as a session.
    pub fn run(&self, script: &str, extra: &[&str]) -> Output {
        self.spawn(script, extra).wait_with_output().unwrap()
    }

    /// Starts `script` as a session without waiting for it.
    pub fn spawn(&self, script: &str, extra: &[&str]) -> Child {
        spawn_with(self.command(extra), script)
    }

    /// Runs `script`, waits until its long step has written its process
    /// group id to the root file `marker`, SIGKILLs the session there (so no
    /// outcome is ever written), tears the orphaned group down, and returns
    /// the run id (its log's name, LOG-1) and what the session printed.
    pub fn kill_mid_step(&self, script: &str, marker: &str) -> (String, Output) {
        use std::time::{Duration, Instant};
        let mut child = self.spawn(script, &[]);
        let marker = self.root.join(marker);
        let started = Instant::now();
        // The step's shell creates the file before it writes the id: wait
        // for the id, not the name (an empty read failed CI once).
        let pgid: i32 = loop {
            let written = std::fs::read_to_string(&marker).ok().and_then(|text| text.trim().parse().ok());
            if let Some(pgid) = written {
                break pgid;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "the long step never started");
            std::thread::sleep(Duration::from_millis(20));
        };
        child.kill().unwrap();
        let out = child.wait_with_output().unwrap();
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pgid}")]).status();
        let run_id = self.logs()[0].file_stem().unwrap().to_str().unwrap().to_owned();
        (run_id, out)
    }

    /// The effect logs in the data dir.
    pub fn logs(&self) -> Vec<PathBuf> {
        match std::fs::read_dir(self.data.join("effects")) {
            Ok(entries) => entries
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// The JSON lines a `--json` run printed.
pub fn reports(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `effects log verify LOG`, which must pass.
pub fn verify(log: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_effects")).arg("log").arg("verify").arg(log).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `effects log show --json LOG`, one value per record.
pub fn log_records(log: &Path) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_effects"))
        .args(["log", "show", "--json"])
        .arg(log)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}
