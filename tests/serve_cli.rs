//! `effects serve` driven over its stdin and stdout as a runtime drives it
//! (docs/serve.md): the published schema is the server's own, protocol
//! misuse is a JSON-RPC error with its documented code and a domain refusal
//! is a result; a line not every parser reads alike, and an id already in
//! flight, are refused, never claimed; pipelined requests run on a bounded
//! pool, and a thread the system refuses is an error answer, never an
//! abort; the claims a runtime makes name the runtime as their executor
//! (LOG-7), so a server SIGKILLed between a claim and its settlement leaves
//! the claim to the next server while the runtime lives, and INTERRUPTED
//! once it is dead. The Python and TypeScript clients' suites (`clients/`)
//! drive the rest against the same binary.

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

/// `effects --data-dir DATA serve --root ROOT`, as arguments.
fn serve_args(place: &support::session::Session) -> Vec<std::ffi::OsString> {
    let (data, root) = (place.data.clone().into_os_string(), place.root.clone().into_os_string());
    vec!["--data-dir".into(), data, "serve".into(), "--root".into(), root]
}

impl Server {
    fn start(place: &support::session::Session) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_effects"));
        command.args(serve_args(place));
        Self::spawn(command, Stdio::null())
    }

    /// `command`, driven over its stdin and stdout.
    fn spawn(mut command: Command, stderr: Stdio) -> Self {
        let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self { child, stdin, stdout, next: 0 }
    }

    fn send_line(&mut self, line: &str) {
        self.send_bytes(line.as_bytes());
    }

    fn send_bytes(&mut self, line: &[u8]) {
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
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

    /// A server started, initialized, with a run begun: it and the run's id.
    fn with_run(place: &support::session::Session) -> (Self, String) {
        let mut server = Self::start(place);
        server.initialize();
        let run = server.result("run/begin", json!({}))["run"]["id"].as_str().unwrap().to_owned();
        (server, run)
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

/// EMB-4: the ledger reads back what the runtime's write left, whatever the
/// runtime reported. A runtime that says exit 0 for a write whose file holds
/// other bytes gets a result that is not `ok` and names the file as
/// CONTRADICTED; the one that wrote the bytes gets `ok`. EMB-3: settling
/// again records nothing, and the answer carries the first outcome, never
/// the second settle's discarded facts.
#[test]
fn a_settled_write_whose_file_holds_other_bytes_is_contradicted_not_ok() {
    let place = support::session::session();
    let (mut server, run) = Server::with_run(&place);
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

/// A `write_file` claim's params.
fn write_claim(run: &str, request_id: &str, path: &str, content: &str) -> Value {
    json!({"run_id": run, "request_id": request_id, "tool": "write_file",
           "input": {"path": path, "content": content}})
}

/// Waits until `pid` is gone (reaped by its parent).
fn wait_gone(pid: u32) {
    for _ in 0..500 {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("process {pid} did not go away");
}

/// LOG-7 made precise: the runtime runs a tool it claimed through a server,
/// so the claim is the runtime's, not the relay's. Server A relays two
/// claims for a runtime (a stand-in process that started A and outlives
/// it); A is SIGKILLed; server B opens the run while the runtime lives:
/// neither claim is recovered INTERRUPTED, and B settles the first as the
/// runtime reports it. Once the runtime is dead, the next open recovers the
/// other.
#[test]
fn a_relaying_server_killed_leaves_the_live_runtimes_claims_to_it() {
    let place = support::session::session();
    // The runtime: starts the server on its own stdin and stdout, says the
    // server's PID, and lives on after the server is gone.
    let runtime = "import subprocess, sys, time\n\
                   p = subprocess.Popen(sys.argv[1:], stderr=subprocess.DEVNULL)\n\
                   print(p.pid, file=sys.stderr, flush=True)\n\
                   p.wait()\n\
                   time.sleep(600)\n";
    let mut command = Command::new("python3");
    command.args(["-c", runtime, env!("CARGO_BIN_EXE_effects")]).args(serve_args(&place));
    let mut first = Server::spawn(command, Stdio::piped());
    let mut said = String::new();
    BufReader::new(first.child.stderr.take().unwrap()).read_line(&mut said).unwrap();
    let relay: u32 = said.trim().parse().unwrap();
    first.initialize();
    let run = "relayed";
    assert_eq!(first.result("run/begin", json!({"run_id": run}))["run"]["id"], run);
    for (id, path) in [("c1", "a.txt"), ("c2", "b.txt")] {
        let claimed = first.result("effect/claim", write_claim(run, id, path, "x\n"));
        assert_eq!(claimed["status"], "run", "{claimed}");
    }
    let claims = crate::hook_cli::claims(&place.data, run);
    for claim in &claims {
        let executor = claim["executor"]["process"]["pid"].as_u64().unwrap();
        assert_eq!(executor, u64::from(first.child.id()), "the runtime runs it, not the relay: {claim}");
    }
    // The runtime writes a.txt; its server dies before the settle.
    std::fs::write(place.root.join("a.txt"), "x\n").unwrap();
    assert!(Command::new("kill").args(["-KILL", &relay.to_string()]).status().unwrap().success());
    wait_gone(relay);

    let mut second = Server::start(&place);
    // A named executor is a live ancestor of the server, never PID 1.
    let init = json!({"protocol_version": "1", "executor_pid": 1});
    assert_eq!(second.call("initialize", init)["error"]["code"], -32602);
    second.result("initialize", json!({"protocol_version": "1", "executor_pid": std::process::id()}));
    assert_eq!(second.result("run/continue", json!({"run_id": run}))["run"]["id"], run);
    let input = json!({"path": "a.txt", "content": "x\n"});
    let settled = second.result(
        "effect/settle",
        json!({"run_id": run, "request_id": "c1", "facts": {"exit_code": 0}, "tool": "write_file",
               "input": input}),
    );
    assert_eq!(settled["outcome"]["execution"], "REPORTED_SUCCESS", "{settled}");
    assert_eq!(settled["result"]["ok"], true, "{settled}");
    let outcomes = crate::hook_cli::outcomes(&place.data, run);
    assert_eq!(outcomes.len(), 1, "only the runtime's own settle: {outcomes:?}");

    // The runtime dies with c2 unsettled: the next open recovers it.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert_eq!(second.result("shutdown", json!({})), json!({}));
    assert!(second.child.wait().unwrap().success());
    let mut third = Server::start(&place);
    third.initialize();
    third.result("run/continue", json!({"run_id": run}));
    let late = third.result(
        "effect/settle",
        json!({"run_id": run, "request_id": "c2", "facts": {"exit_code": 0}, "tool": "write_file",
               "input": {"path": "b.txt", "content": "x\n"}}),
    );
    assert_eq!(late["outcome"]["execution"], "INTERRUPTED", "{late}");
    assert!(late["reason"].as_str().unwrap().contains("already settled"), "{late}");
    let decision =
        third.result("run/complete", json!({"run_id": run, "answer": "wrote", "required": ["b.txt"]}));
    assert_ne!(decision["verdict"], "COMPLETED", "{decision}");
}

/// A line is read only if every parser reads it alike: bytes that are not
/// UTF-8, or a key given twice at any depth, are -32700 (id null), and
/// nothing is claimed: never a path with U+FFFD where the runtime's parser
/// saw other bytes, never the copy of a key one parser keeps and another
/// drops.
#[test]
fn a_line_not_every_parser_reads_alike_is_refused_never_claimed() {
    let place = support::session::session();
    let (mut server, run) = Server::with_run(&place);
    let claim = |params: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"effect/claim","params":{{"run_id":"{run}",{params}}}}}"#
        )
    };
    let mut not_utf8 =
        claim(r#""request_id":"u1","tool":"write_file","input":{"path":"a~.txt","content":"x"}"#)
            .into_bytes();
    let at = not_utf8.iter().position(|b| *b == b'~').unwrap();
    not_utf8[at] = 0xff;
    let lines = [
        not_utf8,
        claim(r#""request_id":"u2","tool":"write_file","input":{"path":"a.txt","content":"x","path":"../b.txt"}"#)
            .into_bytes(),
        claim(r#""request_id":"u3","tool":"write_file","input":{"path":"\ud800.txt","content":"x"}"#).into_bytes(),
        format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"run/decision","method":"effect/claim","params":{{"run_id":"{run}","request_id":"u4","tool":"write_file","input":{{"path":"c.txt","content":"x"}}}}}}"#
        )
        .into_bytes(),
    ];
    for line in lines {
        server.send_bytes(&line);
        let answer = server.read();
        assert_eq!(answer["error"]["code"], -32700, "{answer}");
        assert!(answer["id"].is_null(), "{answer}");
    }
    assert!(place.logs().is_empty(), "nothing was claimed: {:?}", place.logs());
    assert!(std::fs::read_dir(&place.root).unwrap().next().is_none());
}

/// A request whose id is already in flight is refused (-32600) and not run;
/// the first goes on, and the id is free again once it is answered.
#[test]
fn a_request_id_already_in_flight_is_refused_not_run_twice() {
    let place = support::session::session();
    let (mut server, run) = Server::with_run(&place);
    let execute = json!({"jsonrpc": "2.0", "id": "same", "method": "effect/execute",
        "params": {"run_id": run, "request_id": "e1", "tool": "bash", "input": {"command": "sleep 2"}}});
    let claim = |id: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "effect/claim",
               "params": write_claim(&run, "twice", "t.txt", "x\n")})
    };
    server.send_line(&execute.to_string());
    server.send_line(&claim("same").to_string());
    let refused = server.read();
    assert_eq!(
        (refused["id"].clone(), refused["error"]["code"].clone()),
        (json!("same"), json!(-32600)),
        "{refused}"
    );
    let ran = server.read();
    assert_eq!(ran["id"], "same", "{ran}");
    assert_eq!(ran["result"]["request_id"], "e1", "the first request's answer: {ran}");
    // The refused claim was never made; the id may be used again.
    server.send_line(&claim("same").to_string());
    let claimed = server.read();
    assert_eq!(claimed["result"]["status"], "run", "{claimed}");
    assert_eq!(claimed["result"]["duplicate"], false, "{claimed}");
}

/// `Threads:` and `VmRSS:` (kB) of `pid` from `/proc/PID/status`.
fn threads_and_memory(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    Some((field("Threads:")?, field("VmRSS:")?))
}

/// Pipelines `count` claims (request ids `p0`...), reading every answer on
/// another thread; returns the answers and the most threads and memory (kB)
/// the server had while they were in flight.
fn pipeline_claims(server: &mut Server, run: &str, count: usize) -> (Vec<Value>, (u64, u64)) {
    let pid = server.child.id();
    let first = server.next + 1;
    server.next += count as u64;
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let stdout = &mut server.stdout;
        let answers = scope.spawn(move || {
            let mut answers = Vec::new();
            for _ in 0..count {
                let mut line = String::new();
                assert!(stdout.read_line(&mut line).unwrap() > 0, "the server closed its output");
                answers.push(serde_json::from_str::<Value>(&line).unwrap());
            }
            answers
        });
        let done = &done;
        let peak = scope.spawn(move || {
            let mut peak = (0, 0);
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if let Some((threads, memory)) = threads_and_memory(pid) {
                    peak = (peak.0.max(threads), peak.1.max(memory));
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            peak
        });
        let mut lines = Vec::new();
        for i in 0..count {
            let request = json!({"jsonrpc": "2.0", "id": first + i as u64, "method": "effect/claim",
                                 "params": write_claim(run, &format!("p{i}"), &format!("p{i}.txt"), "x\n")});
            writeln!(lines, "{request}").unwrap();
        }
        server.stdin.write_all(&lines).unwrap();
        server.stdin.flush().unwrap();
        let answers = answers.join().unwrap();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (answers, peak.join().unwrap())
    })
}

/// Every answer is a `run` for its own id, each id once.
fn assert_all_run(answers: &[Value], first: u64) {
    let mut ids: Vec<u64> = answers
        .iter()
        .map(|answer| {
            assert_eq!(answer["result"]["status"], "run", "{answer}");
            answer["id"].as_u64().unwrap()
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (first..first + answers.len() as u64).collect::<Vec<_>>());
}

/// Pipelined requests run on a fixed pool, with back-pressure: a few
/// thousand claims written at once keep the server at a few dozen threads
/// (the pool is 16; it once made a thread per request, 2,978 for 3,000),
/// and every one is answered.
#[test]
fn pipelined_claims_run_on_a_bounded_pool_and_every_one_is_answered() {
    let place = support::session::session();
    let (mut server, run) = Server::with_run(&place);
    let first = server.next + 1;
    let (answers, (threads, memory)) = pipeline_claims(&mut server, &run, 3000);
    eprintln!("3000 pipelined claims: at most {threads} threads, {} MiB resident", memory / 1024);
    assert_eq!(answers.len(), 3000);
    assert_all_run(&answers, first);
    assert!(threads <= 32, "{threads} threads for pipelined claims");
    assert_eq!(server.result("shutdown", json!({})), json!({}));
    assert!(server.child.wait().unwrap().success());
}

/// Under a process limit, a worker the system will not start is an error
/// answer (-32005) to the request it was for, never an abort: the server
/// answers the next request once a thread can start, and pipelined claims
/// then wait for the one worker it has. Run as an unused uid (its own count
/// of processes, which root's is not: the kernel exempts root from
/// RLIMIT_NPROC), so only as root with `prlimit` and `setpriv`.
#[test]
fn a_thread_the_system_refuses_is_an_error_answer_never_an_abort() {
    if !rustix::process::getuid().is_root() {
        eprintln!("skipped: RLIMIT_NPROC is tested as root, under an unused uid");
        return;
    }
    let place = support::session::session();
    let uid = (40_000 + std::process::id() % 20_000).to_string();
    let base = place.root.parent().unwrap();
    let owner = format!("{uid}:{uid}");
    assert!(Command::new("chown").args(["-R", &owner]).arg(base).status().unwrap().success());
    // `program` as the uid, under a limit of `limit` tasks if given.
    let as_uid = |limit: Option<&str>, program: &str| {
        let mut command = Command::new(if limit.is_some() { "prlimit" } else { "setpriv" });
        if let Some(limit) = limit {
            command.args([&format!("--nproc={limit}"), "setpriv"]);
        }
        command.args([&format!("--reuid={uid}"), &format!("--regid={uid}"), "--clear-groups", program]);
        command
    };
    // A first server compiles the policies into the data dir's cache (the
    // compiler's threads are not the server's to bound).
    let mut warm = Server::spawn(
        {
            let mut command = as_uid(None, env!("CARGO_BIN_EXE_effects"));
            command.args(serve_args(&place));
            command
        },
        Stdio::null(),
    );
    warm.initialize();
    assert_eq!(warm.result("shutdown", json!({})), json!({}));
    assert!(warm.child.wait().unwrap().success());

    // Two tasks for the uid: the server's reader and one more.
    let mut server = Server::spawn(
        {
            let mut command = as_uid(Some("2:2"), env!("CARGO_BIN_EXE_effects"));
            command.args(serve_args(&place));
            command
        },
        Stdio::null(),
    );
    server.initialize();
    // Another process of the uid takes the one task left: no worker starts.
    let mut other = as_uid(None, "sleep").arg("600").spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let refused = server.call("run/begin", json!({}));
    assert_eq!(refused["error"]["code"], -32005, "{refused}");
    other.kill().unwrap();
    other.wait().unwrap();
    // Now one worker starts, and no second: every pipelined claim waits
    // its turn on the one, and is answered.
    let run = server.result("run/begin", json!({}))["run"]["id"].as_str().unwrap().to_owned();
    let first = server.next + 1;
    let (answers, _) = pipeline_claims(&mut server, &run, 200);
    assert_all_run(&answers, first);
    assert_eq!(server.result("shutdown", json!({})), json!({}));
    assert!(server.child.wait().unwrap().success());
}

/// A stand-in runtime (Python, in a PID namespace of its own where one can
/// be made, so other tests' processes are out of its sight): starts `effects
/// serve`, claims a write and writes it, claims `command` and runs it with
/// `bash -c`, settles both, decides with the file required, and prints the
/// command's settle and the decision, one JSON object each.
fn runtime_runs(place: &support::session::Session, command: &str) -> (Value, Value) {
    let script = r#"
import json, subprocess, sys
server = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def call(method, params, ident=[0]):
    ident[0] += 1
    server.stdin.write(json.dumps({"jsonrpc": "2.0", "id": ident[0], "method": method, "params": params}) + "\n")
    server.stdin.flush()
    return json.loads(server.stdout.readline())["result"]
call("initialize", {"protocol_version": "1"})
run = call("run/begin", {})["run"]["id"]
write = {"path": "a.txt", "content": "good\n"}
assert call("effect/claim", {"run_id": run, "request_id": "w", "tool": "write_file", "input": write})["status"] == "run"
open("a.txt", "w").write("good\n")
call("effect/settle", {"run_id": run, "request_id": "w", "facts": {"exit_code": 0}})
bash = {"command": sys.argv[1]}
assert call("effect/claim", {"run_id": run, "request_id": "b", "tool": "bash", "input": bash})["status"] == "run"
code = subprocess.run(["bash", "-c", sys.argv[1]], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL).returncode
print(json.dumps(call("effect/settle", {"run_id": run, "request_id": "b", "facts": {"exit_code": code}})))
print(json.dumps(call("run/complete", {"run_id": run, "answer": "done", "required": ["a.txt"]})))
server.stdin.close()
server.wait()
"#;
    let mut args: Vec<std::ffi::OsString> = vec!["-c".into(), script.into(), command.into()];
    args.push(env!("CARGO_BIN_EXE_effects").into());
    args.extend(serve_args(place));
    let isolated = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child", "python3"])
        .args(&args)
        .current_dir(&place.root)
        .output();
    let output = match isolated {
        Ok(output) if output.status.success() => output,
        _ => Command::new("python3").args(&args).current_dir(&place.root).output().unwrap(),
    };
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let mut lines = output.stdout.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    let mut next = || serde_json::from_slice::<Value>(lines.next().unwrap()).unwrap();
    (next(), next())
}

/// INV-2 as SPEC 14 extends it, through `serve`: a command the runtime ran
/// closes its window only when the server has seen what it started gone. A
/// background writer left running keeps it open (never COMPLETED over the
/// write it will overwrite); a command that left nothing closes it at its
/// settle.
#[test]
fn a_runtime_command_closes_its_window_only_once_its_processes_are_seen_gone() {
    let place = support::session::session();
    let (settled, decision) = runtime_runs(&place, "(sleep 2; echo bad > a.txt) &");
    assert!(settled["reason"].as_str().is_some_and(|r| r.contains("still running")), "{settled}");
    assert_ne!(decision["verdict"], "COMPLETED", "{decision}");

    let clean = support::session::session();
    let (settled, decision) = runtime_runs(&clean, "true");
    assert_eq!(settled["reason"], Value::Null, "{settled}");
    assert_eq!(decision["verdict"], "COMPLETED", "nothing was left running: {decision}");
}
