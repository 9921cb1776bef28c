//! `effects mcp` driven as a client drives it, over its stdio (the official
//! SDKs' suites are `test_python_sdk.py`, `ts_client.mjs` and
//! `inspector.mjs` beside this file): every line that is no message is
//! answered, pipelined calls are all answered with the threads and memory
//! bounded, and a `write_file` is read back by its own step.
//!
//! A module of `mcp_proxy_cli` (the `cli` test binary's list is shared).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::support;

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Server {
    /// `effects mcp --root ROOT`, past the handshake.
    fn start(place: &support::session::Session) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_effects"))
            .arg("--data-dir")
            .arg(&place.data)
            .args(["mcp", "--run", "served", "--root"])
            .arg(&place.root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut server = Self { child, stdin, stdout };
        server.send_json(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}));
        let answer = server.read();
        assert!(answer["result"]["protocolVersion"].is_string(), "{answer}");
        server.send_json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send_json(&mut self, message: &Value) {
        self.send(message.to_string().as_bytes());
    }

    /// The next message the server writes.
    fn read(&mut self) -> Value {
        let mut line = String::new();
        assert!(self.stdout.read_line(&mut line).unwrap() > 0, "the server closed its output");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Reads until the answer to `id`, returning it and every message
    /// before it.
    fn until(&mut self, id: &Value) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let message = self.read();
            if &message["id"] == id && message.get("method").is_none() {
                return (message, before);
            }
            before.push(message);
        }
    }

    fn call(&mut self, id: u64, tool: &str, arguments: Value) -> Value {
        self.send_json(&call(id, tool, arguments));
        self.until(&json!(id)).0
    }

    /// Closes the client's end and waits for the server to exit.
    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

fn error_of(answer: &Value) -> (Value, Value) {
    (answer["id"].clone(), answer["error"]["code"].clone())
}

#[test]
fn every_line_that_is_no_message_is_answered() {
    let place = support::session::session();
    let mut server = Server::start(&place);
    let lines: [(&[u8], Value, i64); 7] = [
        (b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\",\"x\":\"\xff\"}", Value::Null, -32700),
        (b"this is not JSON", Value::Null, -32700),
        (br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ls""#, Value::Null, -32700),
        (br#"{"jsonrpc":"2.0","id":4,"method":"ping","params":{"x":"\ud800"}}"#, Value::Null, -32700),
        (b"[1, 2]", Value::Null, -32600),
        (br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":"ls"}"#, json!(5), -32600),
        (br#"{"jsonrpc":"2.0","id":6}"#, json!(6), -32600),
    ];
    let mut expected = Vec::new();
    for (line, id, code) in lines {
        server.send(line);
        expected.push((id, json!(code)));
    }
    // A line over the input bound (16 MiB): read to its end and answered.
    let huge = "a".repeat(17 << 20);
    server.send_json(&call(7, "write_file", json!({"path": "huge.txt", "content": huge})));
    expected.push((Value::Null, json!(-32600)));
    // Blank lines and notifications the server does not know get no answer.
    server.send(b"   ");
    server.send_json(&json!({"jsonrpc": "2.0", "method": "notifications/unknown", "params": 1}));

    // The session goes on: a ping, and a call that writes.
    server.send_json(&json!({"jsonrpc": "2.0", "id": 8, "method": "ping"}));
    let (pong, before) = server.until(&json!(8));
    assert_eq!(pong["result"], json!({}), "{pong}");
    let mut answered: Vec<_> = before.iter().map(error_of).collect();
    let key = |(id, code): &(Value, Value)| format!("{id} {code}");
    answered.sort_by_key(key);
    expected.sort_by_key(key);
    assert_eq!(answered, expected, "every line that is no message is answered, once: {before:#?}");
    let written = server.call(9, "write_file", json!({"path": "after.txt", "content": "still here\n"}));
    assert_eq!(written["result"]["isError"], json!(false), "{written}");

    // A last line cut short by the end of the input is answered too.
    let mut stdin = server.stdin.take().unwrap();
    stdin.write_all(br#"{"jsonrpc":"2.0","id":10,"method":"#).unwrap();
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut server.stdout, &mut rest).unwrap();
    let rest: Vec<Value> = rest.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rest.iter().map(error_of).collect::<Vec<_>>(), [(Value::Null, json!(-32700))], "{rest:?}");
    server.finish();
    assert!(!place.root.join("huge.txt").exists());
    assert_eq!(std::fs::read_to_string(place.root.join("after.txt")).unwrap(), "still here\n");
}

/// A process's `Threads` or `VmHWM` (KiB) from /proc/PID/status.
fn status_of(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with(&format!("{field}:")))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn pipelined_calls_are_all_answered_with_threads_and_memory_bounded() {
    const CALLS: u64 = 300;
    let place = support::session::session();
    let mut server = Server::start(&place);
    let pid = server.child.id();

    // Watch the thread count while the calls are in flight: the largest
    // seen is a lower bound on the peak, so the bound below cannot fail
    // for lack of a sample.
    let done = Arc::new(AtomicBool::new(false));
    let most_threads = Arc::new(AtomicU64::new(0));
    let watcher = {
        let (done, most_threads) = (Arc::clone(&done), Arc::clone(&most_threads));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(threads) = status_of(pid, "Threads") {
                    most_threads.fetch_max(threads, Ordering::Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    // All the calls in one burst, from a thread of their own: the server
    // may stop reading (back-pressure) until it has answered some.
    let mut stdin = server.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut burst = Vec::new();
        for id in 1..=CALLS {
            let arguments = json!({"path": format!("f{id}.txt"), "content": format!("call {id}\n")});
            burst.extend_from_slice(call(id, "write_file", arguments).to_string().as_bytes());
            burst.push(b'\n');
        }
        stdin.write_all(&burst).unwrap();
        stdin.flush().unwrap();
        stdin
    });
    let mut answers = BTreeMap::new();
    while answers.len() < CALLS as usize {
        let answer = server.read();
        if let Some(id) = answer["id"].as_u64() {
            assert!(answers.insert(id, answer).is_none(), "answered twice: {id}");
        }
    }
    server.stdin = Some(writer.join().unwrap());
    let peak_kib = status_of(pid, "VmHWM").unwrap();
    done.store(true, Ordering::Relaxed);
    watcher.join().unwrap();
    let most_threads = most_threads.load(Ordering::Relaxed);
    server.finish();

    for (id, answer) in &answers {
        let step = &answer["result"]["structuredContent"];
        assert_eq!(step["status"], "RAN", "call {id}: {answer}");
        let content = std::fs::read_to_string(place.root.join(format!("f{id}.txt"))).unwrap();
        assert_eq!(content, format!("call {id}\n"));
    }
    // At most 16 steps run at once (STEPS_AT_ONCE), each on one thread of
    // the blocking pool; the rest is the runtime and its stdio. Unbounded,
    // every pipelined call took a thread of its own.
    eprintln!("{CALLS} pipelined calls: at most {most_threads} threads seen, peak RSS {peak_kib} KiB");
    assert!(most_threads <= 40, "{most_threads} threads for {CALLS} pipelined calls");
    // A coarse bound: the process's peak resident memory.
    assert!(peak_kib < 350 << 10, "peak RSS {peak_kib} KiB for {CALLS} pipelined calls");
}

#[test]
fn a_write_is_read_back_by_its_own_step() {
    let place = support::session::session();
    let mut server = Server::start(&place);
    let written = server.call(1, "write_file", json!({"path": "a.txt", "content": "hello\n"}));
    let step = &written["result"]["structuredContent"];
    assert_eq!(step["status"], "RAN", "{written}");
    let observations = step["observations"].as_array().unwrap();
    let readback = observations.iter().find(|o| o["path"] == "a.txt");
    let readback = readback.unwrap_or_else(|| panic!("the write's step read nothing back: {step:#}"));
    assert_eq!(readback["coverage"], "COMPLETE", "{readback}");
    assert_eq!(readback["exists"], true);
    let sha = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"; // SHA-256 of "hello\n"
    assert_eq!(readback["content_sha256"], sha, "{readback}");
    assert!(readback["position"].as_u64() > step["outcome"]["position"].as_u64(), "{step:#}");
    assert!(written["result"]["content"][0]["text"].as_str().unwrap().contains("1 readback(s)"), "{written}");

    // No other read: the write's own readback lets `complete` decide it.
    let done = server.call(2, "complete", json!({"answer": "wrote a.txt", "required": ["a.txt"]}));
    assert_eq!(done["result"]["structuredContent"]["verdict"], "COMPLETED", "{done:#}");
    server.finish();
}

#[test]
fn a_call_cancelled_while_it_waits_for_a_slot_never_starts() {
    let place = support::session::session();
    let mut server = Server::start(&place);
    // Sixteen commands take every slot (STEPS_AT_ONCE) for half a minute,
    // each heard running (its first progress, after a second); the write
    // after them waits for a slot, and is cancelled while it waits.
    for id in 1..=16 {
        let mut running = call(id, "bash", json!({"command": "sleep 30"}));
        running["params"]["_meta"] = json!({"progressToken": format!("p{id}")});
        server.send_json(&running);
    }
    let mut heard = std::collections::BTreeSet::new();
    while heard.len() < 16 {
        let message = server.read();
        assert_eq!(message["method"], "notifications/progress", "{message}");
        heard.insert(message["params"]["progressToken"].to_string());
    }
    server.send_json(&call(17, "write_file", json!({"path": "w.txt", "content": "late\n"})));
    let cancel =
        |id: u64| json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}});
    server.send_json(&cancel(17));
    for id in 1..=16 {
        server.send_json(&cancel(id));
    }
    // The slots come free; a call after them runs.
    let listed = server.call(18, "ls", json!({"path": "."}));
    assert_eq!(listed["result"]["structuredContent"]["status"], "RAN", "{listed}");
    server.finish();

    assert!(!place.root.join("w.txt").exists(), "a call cancelled before it began wrote");
    let shown = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&place.data)
        .args(["log", "show", "--json", "--run", "served"])
        .output()
        .unwrap();
    let log = String::from_utf8(shown.stdout).unwrap();
    let claimed: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|record| record["kind"] == "claim")
        .map(|record| record["record"]["claim"]["operation"]["tool"].clone())
        .collect();
    assert_eq!(claimed, vec![json!("bash"); 16], "only the commands were claimed");
}
