//! One `effects serve` process driven from a bench, one request at a time
//! (`serve_roundtrip` times it; `hook_latency` fills a session through it).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

/// One `effects serve` process, driven one request at a time.
pub struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
    line: String,
}

impl Server {
    pub fn start(data: &Path, root: &Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_effects"))
            .arg("--data-dir")
            .arg(data)
            .args(["serve", "--root"])
            .arg(root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut server = Self { child, stdin, stdout, next: 0, line: String::new() };
        server.result("initialize", json!({"protocol_version": "1"}));
        server
    }

    /// Sends one request and answers its result (the next line: nothing
    /// else is in flight, and no call here is long enough for progress).
    pub fn result(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let request = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        writeln!(self.stdin, "{request}").unwrap();
        self.stdin.flush().unwrap();
        self.line.clear();
        assert!(self.stdout.read_line(&mut self.line).unwrap() > 0, "the server closed its output");
        let mut answer: Value = serde_json::from_str(&self.line).unwrap();
        assert_eq!(answer["id"], json!(self.next), "{answer}");
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].take()
    }

    pub fn stop(mut self) {
        self.result("shutdown", json!({}));
        assert!(self.child.wait().unwrap().success());
    }
}
