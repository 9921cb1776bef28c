//! `effects serve` driven over its stdin and stdout as a runtime drives it
//! (docs/serve.md): the published schema is the server's own, protocol
//! misuse is a JSON-RPC error with its documented code and a domain refusal
//! is a result, and a server SIGKILLed between a claim and its settlement
//! leaves the claim INTERRUPTED for the next server (LOG-7: its executor is
//! dead). The Python and TypeScript clients' suites (`clients/`) drive the
//! rest against the same binary.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use crate::support;

/// One `effects serve` process and its pipes.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Server {
    fn start(place: &support::session::Session) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_effects"))
            .arg("--data-dir")
            .arg(&place.data)
            .args(["serve", "--root"])
            .arg(&place.root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self { child, stdin, stdout, next: 0 }
    }

    fn send_line(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next line the server writes, as JSON.
    fn read(&mut self) -> Value {
        let mut line = String::new();
        assert!(self.stdout.read_line(&mut line).unwrap() > 0, "the server closed its output");
        serde_json::from_str(&line).unwrap()
    }

    /// Sends a request and answers its response (requests are sent one at
    /// a time here, so the next line is its answer).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let request = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        self.send_line(&request.to_string());
        let answer = self.read();
        assert_eq!(answer["id"], json!(self.next), "{answer}");
        answer
    }

    fn result(&mut self, method: &str, params: Value) -> Value {
        let answer = self.call(method, params);
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    fn initialize(&mut self) {
        let info = self.result("initialize", json!({"protocol_version": "1"}));
        assert_eq!(info["protocol_version"], "1");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_published_schema_is_the_servers_own() {
    let printed = Command::new(env!("CARGO_BIN_EXE_effects")).args(["serve", "--schema"]).output().unwrap();
    assert!(printed.status.success());
    let printed: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let published: Value =
        serde_json::from_slice(&std::fs::read(support::root().join("docs/serve.schema.json")).unwrap())
            .unwrap();
    assert!(
        printed == published,
        "docs/serve.schema.json is not what `effects serve --schema` prints: regenerate it with \
         `cargo run --release --bin effects -- serve --schema > docs/serve.schema.json`"
    );
    for method in ["initialize", "effect/claim", "effect/settle", "effect/execute", "run/complete"] {
        assert!(published["methods"][method]["params"]["$ref"].is_string(), "{method}");
        assert!(published["methods"][method]["result"]["$ref"].is_string(), "{method}");
    }
}

#[test]
fn misuse_is_an_error_with_its_code_and_a_refusal_is_a_result() {
    let place = support::session::session();
    let mut server = Server::start(&place);
    // Before initialize, nothing but initialize.
    assert_eq!(server.call("run/begin", json!({}))["error"]["code"], -32002);
    server.initialize();
    server.send_line("this is not json");
    assert_eq!(server.read()["error"]["code"], -32700);
    server.send_line("[1, 2]");
    assert_eq!(server.read()["error"]["code"], -32600);
    assert_eq!(server.call("effect/frobnicate", json!({}))["error"]["code"], -32601);
    let misspelled = server.call("run/begin", json!({"run": "x"}));
    assert_eq!(misspelled["error"]["code"], -32602, "{misspelled}");
    assert!(misspelled["error"]["message"].as_str().unwrap().contains("run"), "{misspelled}");
    let unknown = json!({"run_id": "never-begun", "request_id": "c", "tool": "write_file", "input": {}});
    assert_eq!(server.call("effect/claim", unknown)["error"]["code"], -32001);

    let run = server.result("run/begin", json!({}))["run"]["id"].as_str().unwrap().to_owned();
    let escape = json!({"run_id": run, "request_id": "c1", "tool": "write_file",
                        "input": {"path": "../outside.txt", "content": "x"}});
    let refused = server.result("effect/claim", escape);
    assert_eq!(refused["status"], "refused", "{refused}");
    assert!(refused["claim"].is_null());
    // A tool the host runs is not claimed for the runtime to run, and the
    // reverse: each is refused with what to call instead.
    let external = json!({"run_id": run, "request_id": "x1", "tool": "external",
                          "input": {"server": "s", "tool": "t"}});
    let step = server.result("effect/execute", external);
    assert_eq!(step["status"], "REFUSED", "{step}");
    assert!(step["reason"].as_str().unwrap().contains("effect/claim"), "{step}");
    let check = server.result("check/run", json!({"run_id": run, "name": "tests"}));
    assert_eq!(check["status"], "REFUSED", "{check}");
    assert!(check["reason"].as_str().unwrap().contains("--check"), "{check}");
    assert_eq!(server.result("shutdown", json!({})), json!({}));
    assert!(server.child.wait().unwrap().success());
}

#[test]
fn a_server_killed_between_claim_and_settle_leaves_its_claim_interrupted() {
    let place = support::session::session();
    let mut first = Server::start(&place);
    first.initialize();
    let run = first.result("run/begin", json!({"run_id": "killed"}))["run"]["id"].clone();
    let input = json!({"path": "a.txt", "content": "a\n"});
    let claim = json!({"run_id": run, "request_id": "c1", "tool": "write_file", "input": input});
    let claimed = first.result("effect/claim", claim);
    assert_eq!(claimed["status"], "run", "{claimed}");
    // The runtime writes the file, and its server dies before it settles.
    std::fs::write(place.root.join("a.txt"), "a\n").unwrap();
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    let mut second = Server::start(&place);
    second.initialize();
    let continued = second.result("run/continue", json!({"run_id": "killed"}));
    assert_eq!(continued["run"]["id"], "killed", "{continued}");
    let decision = second.result(
        "run/complete",
        json!({"run_id": "killed", "answer": "wrote a.txt",
                                                        "required": ["a.txt"]}),
    );
    assert_ne!(decision["verdict"], "COMPLETED", "{decision}");
    // The claim is settled INTERRUPTED (no settle ever came), and settling
    // it now answers that outcome and writes nothing.
    let late = second.result(
        "effect/settle",
        json!({"run_id": "killed", "request_id": "c1",
        "facts": {"exit_code": 0}, "tool": "write_file", "input": input}),
    );
    assert_eq!(late["outcome"]["execution"], "INTERRUPTED", "{late}");
    assert!(late["reason"].as_str().unwrap().contains("already settled"), "{late}");
}

/// EMB-4: the ledger reads back what the runtime's write left, whatever the
/// runtime reported. A runtime that says exit 0 for a write whose file holds
/// other bytes gets a result that is not `ok` and names the file as
/// CONTRADICTED; the one that wrote the bytes gets `ok`. EMB-3: settling
/// again records nothing, and the answer carries the first outcome, never
/// the second settle's discarded facts.
#[test]
fn a_settled_write_whose_file_holds_other_bytes_is_contradicted_not_ok() {
    let place = support::session::session();
    let mut server = Server::start(&place);
    server.initialize();
    let run = server.result("run/begin", json!({}))["run"]["id"].as_str().unwrap().to_owned();
    let settle = |server: &mut Server, id: &str, path: &str, exit: i64| {
        let input = json!({"path": path, "content": "claimed\n"});
        let claim = json!({"run_id": run, "request_id": id, "tool": "write_file", "input": input});
        assert_eq!(server.result("effect/claim", claim)["status"], "run");
        let facts = json!({"exit_code": exit});
        server.result("effect/settle", json!({"run_id": run, "request_id": id, "facts": facts}))
    };
    std::fs::write(place.root.join("honest.txt"), "claimed\n").unwrap();
    let honest = settle(&mut server, "w1", "honest.txt", 0);
    assert_eq!(honest["result"]["ok"], true, "{honest}");
    assert_eq!(honest["contradicted"], json!([]), "{honest}");
    // The runtime says it wrote; the file holds something else.
    let input = json!({"path": "lied.txt", "content": "claimed\n"});
    let claim = json!({"run_id": run, "request_id": "w2", "tool": "write_file", "input": input});
    assert_eq!(server.result("effect/claim", claim)["status"], "run");
    std::fs::write(place.root.join("lied.txt"), "something else\n").unwrap();
    let facts = json!({"exit_code": 0});
    let lied = server.result("effect/settle", json!({"run_id": run, "request_id": "w2", "facts": facts}));
    assert_eq!(lied["status"], "RAN", "{lied}");
    assert_eq!(lied["outcome"]["execution"], "REPORTED_SUCCESS", "the runtime's word is recorded: {lied}");
    assert_eq!(lied["result"]["ok"], false, "{lied}");
    assert_eq!(lied["contradicted"], json!(["lied.txt"]), "{lied}");
    assert!(lied["result"]["error"].as_str().unwrap().contains("CONTRADICTED"), "{lied}");
    // Never written at all: absent where bytes were claimed.
    let missing = settle(&mut server, "w3", "never.txt", 0);
    assert_eq!(
        (missing["result"]["ok"].clone(), missing["contradicted"].clone()),
        (json!(false), json!(["never.txt"]))
    );
    // Settled again with other facts: nothing recorded, the first outcome
    // answered, and none of this settle's facts said back.
    let facts = json!({"executed": false});
    let again = server.result("effect/settle", json!({"run_id": run, "request_id": "w1", "facts": facts}));
    assert_eq!(again["outcome"]["execution"], "REPORTED_SUCCESS", "{again}");
    assert!(again["reason"].as_str().unwrap().contains("recorded nothing"), "{again}");
    assert_eq!(again["result"]["ok"], false, "{again}");
    assert!(again["result"]["exit_code"].is_null(), "{again}");
    let retried =
        server.result("effect/settle", json!({"run_id": run, "request_id": "w2", "facts": {"exit_code": 0}}));
    assert!(retried["result"]["exit_code"].is_null() && retried["result"]["ok"] == false, "{retried}");
    assert_eq!(server.result("shutdown", json!({})), json!({}));
    assert!(server.child.wait().unwrap().success());
}
