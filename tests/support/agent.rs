//! A stand-in for an agent program: one long-lived process, in a session of
//! its own, that starts the hooks and runs the tools' commands as its
//! children, as Claude Code, Codex CLI and Gemini CLI do. A hook it starts
//! names it as the agent (`EFFECTS_AGENT_PID`: it is a shell, which the hook
//! otherwise skips), so the claims' executor, and the process tree and
//! session a command's window is judged by (SPEC 14), are its, not the test
//! binary's.
//!
//! Where the kernel lets it (as root, or in a user namespace), the agent
//! runs in a PID namespace with its own `/proc`: what other tests start and
//! leave behind at the same time (an orphan is counted by every window open
//! when it starts) is then out of its sight, and what it leaves is out of
//! theirs. PIDs it names are its namespace's: ask it ([`Agent::alive`],
//! [`Agent::run`]), not this process's `/proc`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::Value;

/// The agent: a shell reading one command line at a time.
pub struct Agent {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    scratch: tempfile::TempDir,
    /// Lines run so far (names the scratch files).
    runs: usize,
}

/// `text` quoted for the shell.
pub fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

impl Agent {
    /// Starts an agent in a new session (`setsid`), working in `cwd`, in a
    /// PID namespace of its own where one can be made.
    pub fn start(cwd: &Path) -> Self {
        const LOOP: &str = "while IFS= read -r line; do eval \"$line\"; echo \"__done $?\"; done";
        let isolated: &[&[&str]] = &[
            &["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"],
            &["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--kill-child"],
            &[],
        ];
        for prefix in isolated {
            let mut command = Command::new(prefix.first().copied().unwrap_or("setsid"));
            command.args(prefix.iter().skip(1));
            if !prefix.is_empty() {
                command.arg("setsid");
            }
            let spawned = command
                .args(["sh", "-c", LOOP])
                .current_dir(cwd)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn();
            let Ok(mut child) = spawned else { continue };
            let input = child.stdin.take().unwrap();
            let output = BufReader::new(child.stdout.take().unwrap());
            let mut agent = Self { child, input, output, scratch: tempfile::tempdir().unwrap(), runs: 0 };
            if agent.try_run("true") == Some(0) {
                return agent;
            }
        }
        panic!("no agent could be started (setsid and sh)");
    }

    /// Runs one shell line in the agent and waits for it: its exit status,
    /// `None` when the agent ended.
    fn try_run(&mut self, line: &str) -> Option<i32> {
        writeln!(self.input, "{line}").ok()?;
        self.input.flush().ok()?;
        let mut answer = String::new();
        loop {
            answer.clear();
            if self.output.read_line(&mut answer).ok()? == 0 {
                return None;
            }
            if let Some(code) = answer.trim_end().strip_prefix("__done ") {
                return code.parse().ok();
            }
        }
    }

    /// Runs one shell line in the agent and waits for it: its exit status.
    pub fn run(&mut self, line: &str) -> i32 {
        self.try_run(line).expect("the agent ended")
    }

    /// Whether the process `pid` (of the agent's namespace) lives, not a zombie.
    pub fn alive(&mut self, pid: u32) -> bool {
        self.run(&format!("awk '{{exit ($3 == \"Z\")}}' /proc/{pid}/stat 2>/dev/null")) == 0
    }

    /// Runs a tool's command as the agent's shell tool does: `bash -c`.
    pub fn bash(&mut self, command: &str) -> i32 {
        self.run(&format!("bash -c {} </dev/null >/dev/null 2>&1", quote(command)))
    }

    /// Runs `effects --data-dir DATA hook --dialect D` with `payload` on its
    /// stdin as the agent's child: its exit status and stdout as JSON
    /// (`Null` when it printed nothing).
    pub fn hook(&mut self, data: &Path, dialect: &str, payload: &Value) -> (i32, Value) {
        self.runs += 1;
        let input = self.scratch.path().join(format!("in-{}.json", self.runs));
        let out = self.scratch.path().join(format!("out-{}.json", self.runs));
        std::fs::write(&input, payload.to_string()).unwrap();
        let line = format!(
            "EFFECTS_AGENT_PID=$$ {} --data-dir {} hook --dialect {dialect} <{} >{}",
            quote(env!("CARGO_BIN_EXE_effects")),
            quote(&data.display().to_string()),
            quote(&input.display().to_string()),
            quote(&out.display().to_string()),
        );
        let code = self.run(&line);
        let stdout = std::fs::read_to_string(&out).unwrap();
        let printed =
            if stdout.trim().is_empty() { Value::Null } else { serde_json::from_str(&stdout).unwrap() };
        (code, printed)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
