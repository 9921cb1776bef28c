//! `effects mcp-proxy` in front of a lenient upstream: what the proxy cannot
//! read is never forwarded, so no `tools/call` reaches the upstream
//! unclaimed however the upstream's parser reads it (invalid UTF-8, a lone
//! surrogate, two messages on one line, a line over the input bound, params
//! that are not MCP's, a call without an id, an id still in flight), and an
//! answer that only starts the work (an MCP task) leaves the call's exit
//! status unknown. The upstream here is a Python script that parses as
//! leniently as it can and executes every `tools/call` it finds, recording
//! it; the official SDKs' differential suite is `tests/mcp`.

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use crate::support;

/// The upstream: reads lines as bytes, decodes them leniently (bad UTF-8
/// replaced, lone surrogates accepted, several messages on a line), and
/// "executes" each `tools/call` by appending its id and name to a file. A
/// call named `hold` is answered only after the `notifications/release`
/// that follows it; one named `task` is answered as an MCP task.
const LENIENT_UPSTREAM: &str = r#"
import json, sys
executed = open(sys.argv[1], "a")
decoder = json.JSONDecoder()
held = []

def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

def handle(message):
    method, id = message.get("method"), message.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-11-25",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "lenient", "version": "0"}}})
    elif method == "tools/call":
        name = (message.get("params") or {}).get("name") if isinstance(message.get("params"), dict) else "?"
        executed.write(json.dumps([id, name]) + "\n")
        executed.flush()
        if name == "hold":
            held.append(id)
        elif name == "task":
            send({"jsonrpc": "2.0", "id": id, "result": {"task": {"taskId": "t1", "status": "working",
                  "createdAt": "2026-12-04T00:00:00Z", "ttl": 60000}}})
        else:
            send({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "done"}]}})
    elif method == "notifications/release":
        for id in held:
            send({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "released"}]}})
        held.clear()
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": id, "result": {}})

for raw in sys.stdin.buffer:
    text = raw.decode("utf-8", errors="replace").strip()
    while text:
        try:
            message, end = decoder.raw_decode(text)
        except ValueError:
            break
        text = text[end:].lstrip()
        for one in message if isinstance(message, list) else [message]:
            if isinstance(one, dict):
                handle(one)
"#;

struct Proxy {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Proxy {
    fn send(&mut self, line: &[u8]) {
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    fn send_json(&mut self, message: Value) {
        self.send(message.to_string().as_bytes());
    }

    /// The next message the proxy writes.
    fn read(&mut self) -> Value {
        let mut line = String::new();
        assert!(self.stdout.read_line(&mut line).unwrap() > 0, "the proxy closed its output");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }
}

fn call(id: u64, name: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": {"x": 1}}})
}

/// The run's claims, in log order, each as its position and the execution
/// of its outcome (`None` while unsettled).
fn claims(place: &support::session::Session, run: &str) -> Vec<(u64, Option<String>)> {
    let shown = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&place.data)
        .args(["log", "show", "--json", "--run", run])
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", String::from_utf8_lossy(&shown.stderr));
    let records: Vec<Value> =
        String::from_utf8(shown.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let execution = |claim: &Value| {
        let outcome = records.iter().find(|r| r["kind"] == "outcome" && &r["claim"] == claim);
        outcome.map(|o| o["execution"].as_str().unwrap().to_owned())
    };
    records
        .iter()
        .filter(|r| r["kind"] == "claim")
        .map(|r| {
            assert_eq!(r["record"]["claim"]["operation"]["tool"], "external", "{r}");
            (r["position"].as_u64().unwrap(), execution(&r["position"]))
        })
        .collect()
}

/// The claim position the proxy put in a result's `_meta`.
fn claim_of(answer: &Value) -> u64 {
    let positions = answer.pointer("/result/_meta/dev.effect-ledger~1step");
    positions.and_then(|p| p["claim"].as_u64()).unwrap_or_else(|| panic!("no claim position in {answer}"))
}

#[test]
fn nothing_the_proxy_cannot_read_reaches_the_upstream_and_a_task_is_not_done() {
    let place = support::session::session();
    let executed = place.root.parent().unwrap().join("executed.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&place.data)
        .args(["mcp-proxy", "--name", "lenient", "--run", "proxied", "--root"])
        .arg(&place.root)
        .args(["--", "python3", "-c", LENIENT_UPSTREAM])
        .arg(&executed)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut proxy = Proxy { child, stdin, stdout };
    proxy.send_json(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}));
    assert_eq!(proxy.read()["id"], json!(1));

    // A call the proxy reads is claimed, forwarded and answered with positions.
    proxy.send_json(call(2, "honest"));
    let answer = proxy.read();
    assert_eq!(answer["id"], json!(2), "{answer}");
    let honest = claim_of(&answer);

    // Lines the upstream's lenient parser would read as calls, but ours cannot.
    let parse_errors: [&[u8]; 3] = [
        b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"bad-utf8\",\"arguments\":{\"x\":\"\xff\"}}}",
        br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"surrogate","arguments":{"x":"\ud800"}}}"#,
        br#"{"jsonrpc":"2.0","method":"notifications/x"}{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"concatenated"}}"#,
    ];
    for line in parse_errors {
        proxy.send(line);
        let answer = proxy.read();
        assert_eq!(answer["error"]["code"], json!(-32700), "{answer}");
        assert_eq!(answer["id"], Value::Null);
    }
    // Params that are not MCP's, and a call sent as a notification.
    proxy.send_json(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "bad-params", "arguments": ["x"]}}));
    let answer = proxy.read();
    assert_eq!(
        (answer["id"].clone(), answer["error"]["code"].clone()),
        (json!(6), json!(-32602)),
        "{answer}"
    );
    proxy.send_json(json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "notification"}}));

    // An id still in flight is not reused.
    proxy.send_json(call(7, "hold"));
    proxy.send_json(call(7, "duplicate"));
    let answer = proxy.read();
    assert_eq!(
        (answer["id"].clone(), answer["error"]["code"].clone()),
        (json!(7), json!(-32600)),
        "{answer}"
    );
    proxy.send_json(json!({"jsonrpc": "2.0", "method": "notifications/release"}));
    let answer = proxy.read();
    assert_eq!(answer["result"]["content"][0]["text"], json!("released"), "{answer}");
    let hold = claim_of(&answer);

    // An MCP task: accepted, not done.
    proxy.send_json(call(8, "task"));
    let answer = proxy.read();
    assert_eq!(answer["result"]["task"]["taskId"], json!("t1"));
    let task = claim_of(&answer);

    // A line over the input bound (16 MiB) holding a call.
    let huge = "a".repeat(17 << 20);
    let overlong = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "overlong", "arguments": {"x": huge}}});
    proxy.send_json(overlong);
    let answer = proxy.read();
    assert_eq!(
        (answer["id"].clone(), answer["error"]["code"].clone()),
        (Value::Null, json!(-32600)),
        "{answer}"
    );

    // The proxy goes on after all of it.
    proxy.send_json(call(10, "after"));
    let answer = proxy.read();
    assert_eq!(answer["id"], json!(10));
    let after = claim_of(&answer);
    drop(proxy.stdin);
    proxy.child.wait().unwrap();

    let executed: Vec<Value> = std::fs::read_to_string(&executed)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let expected = [json!([2, "honest"]), json!([7, "hold"]), json!([8, "task"]), json!([10, "after"])];
    assert_eq!(executed, expected, "the upstream executed a call the proxy did not claim");
    // The log holds one claim per executed call and no other, each settled
    // from the upstream's answer: the task's exit status unknown.
    let settled = |claim: u64, execution: &str| (claim, Some(execution.to_owned()));
    assert_eq!(
        claims(&place, "proxied"),
        [
            settled(honest, "REPORTED_SUCCESS"),
            settled(hold, "REPORTED_SUCCESS"),
            settled(task, "UNKNOWN"),
            settled(after, "REPORTED_SUCCESS"),
        ]
    );
}
