//! `effects mcp-proxy` in front of a lenient upstream. What the proxy
//! cannot read is never forwarded, so no `tools/call` reaches the upstream
//! unclaimed however the upstream's parser reads it (invalid UTF-8, a lone
//! surrogate, a key given twice, two messages on one line, a line over the
//! input bound, params that are not MCP's, a call without an id, an id
//! still in flight), and the upstream only ever sees the proxy's own ids.
//! A call is settled by no more than its answer says: an MCP task or a
//! result that is not a finished call's leaves its exit status unknown; a
//! cancelled call is settled by its answer if one comes, CANCELLED if none
//! does. The upstream here is a Python script that parses as leniently as
//! it can and executes every `tools/call` it finds, recording it; the
//! official SDKs' differential suite is `tests/mcp`.

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use crate::support;

// `effects mcp`'s own tests, kept beside the SDK suites in tests/mcp.
#[path = "mcp/server_cli.rs"]
mod server;

/// The upstream: reads lines as bytes, decodes them leniently (bad UTF-8
/// replaced, lone surrogates accepted, several messages on a line), and
/// "executes" each `tools/call` by appending its id and name to a file (and
/// each cancel, by the id it names). A call named `hold` is answered only
/// after a `notifications/release`, even if it was cancelled; one named
/// `abandon` never; `task` as an MCP task; `not-a-result` with a result
/// that is not a finished call's.
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
        elif name == "abandon":
            pass
        elif name == "not-a-result":
            send({"jsonrpc": "2.0", "id": id, "result": {"isError": "false"}})
        elif name == "task":
            send({"jsonrpc": "2.0", "id": id, "result": {"task": {"taskId": "t1", "status": "working",
                  "createdAt": "2026-12-04T00:00:00Z", "ttl": 60000}}})
        else:
            send({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "done"}]}})
    elif method == "notifications/cancelled":
        executed.write(json.dumps(["cancelled", message["params"]["requestId"]]) + "\n")
        executed.flush()
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

/// Starts the proxy on a fresh place in front of the lenient upstream, run
/// `proxied`, and does the handshake. Returns the place, the proxy and the
/// upstream's record of what it executed.
fn start() -> (support::session::Session, Proxy, std::path::PathBuf) {
    start_before("lenient", LENIENT_UPSTREAM)
}

/// [`start`] in front of the upstream `script`, named `name`.
fn start_before(name: &str, script: &str) -> (support::session::Session, Proxy, std::path::PathBuf) {
    let place = support::session::session();
    let executed = place.root.parent().unwrap().join("executed.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&place.data)
        .args(["mcp-proxy", "--name", name, "--run", "proxied", "--root"])
        .arg(&place.root)
        .args(["--", "python3", "-c", script])
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
    (place, proxy, executed)
}

/// Ends the proxy (the client closes its end) and returns what the
/// upstream recorded: each executed call's `[id, name]`, each cancel's
/// `["cancelled", id]`.
fn finish(mut proxy: Proxy, executed: &std::path::Path) -> (Vec<Value>, Vec<Value>) {
    drop(proxy.stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut proxy.stdout, &mut rest).unwrap();
    proxy.child.wait().unwrap();
    let recorded = std::fs::read_to_string(executed).unwrap();
    let recorded = recorded.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let after_close = rest.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (recorded, after_close)
}

fn code(answer: &Value) -> (Value, Value) {
    (answer["id"].clone(), answer["error"]["code"].clone())
}

#[test]
fn nothing_the_proxy_cannot_read_reaches_the_upstream() {
    let (place, mut proxy, executed) = start();

    // A call the proxy reads is claimed, forwarded under the proxy's own id,
    // and answered under the client's with positions.
    proxy.send_json(call(2, "honest"));
    let answer = proxy.read();
    assert_eq!(answer["id"], json!(2), "{answer}");
    let honest = claim_of(&answer);

    // Lines a lenient parser would read as calls, but not every parser alike.
    let parse_errors: [&[u8]; 5] = [
        b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"bad-utf8\",\"arguments\":{\"x\":\"\xff\"}}}",
        br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"surrogate","arguments":{"x":"\ud800"}}}"#,
        br#"{"jsonrpc":"2.0","method":"notifications/x"}{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"concatenated"}}"#,
        br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","method":"ping","params":{"name":"duplicate-key"}}"#,
        br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"shadowed","name":"duplicate-name"}}"#,
    ];
    for line in parse_errors {
        proxy.send(line);
        assert_eq!(code(&proxy.read()), (Value::Null, json!(-32700)));
    }
    // Params that are not MCP's, and a call sent as a notification.
    proxy.send_json(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "bad-params", "arguments": ["x"]}}));
    assert_eq!(code(&proxy.read()), (json!(6), json!(-32602)));
    proxy.send_json(json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "notification"}}));
    proxy.send_json(
        json!({"jsonrpc": "2.0", "id": 8, "method": ["tools/call"], "params": {"name": "not-a-method"}}),
    );
    assert_eq!(code(&proxy.read()), (json!(8), json!(-32600)));

    // An id still in flight is not reused, by a call or by any request.
    proxy.send_json(call(7, "hold"));
    proxy.send_json(call(7, "duplicate"));
    assert_eq!(code(&proxy.read()), (json!(7), json!(-32600)));
    proxy.send_json(json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}));
    assert_eq!(code(&proxy.read()), (json!(7), json!(-32600)));
    proxy.send_json(json!({"jsonrpc": "2.0", "method": "notifications/release"}));
    let answer = proxy.read();
    assert_eq!(answer["result"]["content"][0]["text"], json!("released"), "{answer}");
    let hold = claim_of(&answer);

    // A line over the input bound (16 MiB) holding a call.
    let huge = "a".repeat(17 << 20);
    proxy.send_json(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "overlong", "arguments": {"x": huge}}}));
    assert_eq!(code(&proxy.read()), (Value::Null, json!(-32600)));

    // The proxy goes on after all of it.
    proxy.send_json(call(10, "after"));
    let answer = proxy.read();
    assert_eq!(answer["id"], json!(10));
    let after = claim_of(&answer);
    let (recorded, _) = finish(proxy, &executed);

    let names: Vec<&str> = recorded.iter().map(|r| r[1].as_str().unwrap()).collect();
    assert_eq!(names, ["honest", "hold", "after"], "the upstream executed a call the proxy did not claim");
    for r in &recorded {
        assert!(r[0].as_str().is_some_and(|id| id.starts_with("ep-")), "the upstream saw a client's id: {r}");
    }
    let settled = |claim: u64| (claim, Some("REPORTED_SUCCESS".to_owned()));
    assert_eq!(claims(&place, "proxied"), [settled(honest), settled(hold), settled(after)]);

    // CMP-6: each is disclosed by its server and tool, as the agent's answer
    // must name it, never as an anonymous "external" call.
    let decided = Command::new(env!("CARGO_BIN_EXE_effects"))
        .arg("--data-dir")
        .arg(&place.data)
        .args(["decide", "--run", "proxied", "--json"])
        .output()
        .unwrap();
    let decision: Value = serde_json::from_slice(&decided.stdout).unwrap();
    assert_eq!(decision["verdict"], "UNVERIFIED", "{decision:#}");
    let answer = decision["answer"].as_str().unwrap();
    for name in ["honest", "hold", "after"] {
        assert!(answer.contains(&format!("External call lenient/{name} ")), "{name} is not named: {answer}");
    }
}

#[test]
fn a_call_is_settled_by_no_more_than_its_answer_says() {
    let (place, mut proxy, executed) = start();

    // An MCP task is accepted, not done; a result that is not a finished
    // call's says nothing of how it ended.
    proxy.send_json(call(2, "task"));
    let answer = proxy.read();
    assert_eq!(answer["result"]["task"]["taskId"], json!("t1"));
    let task = claim_of(&answer);
    proxy.send_json(call(3, "not-a-result"));
    let not_a_result = claim_of(&proxy.read());

    // A cancelled call the upstream finishes anyway is settled by its answer.
    proxy.send_json(call(4, "hold"));
    proxy.send_json(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}}),
    );
    proxy.send_json(json!({"jsonrpc": "2.0", "method": "notifications/release"}));
    let answer = proxy.read();
    assert_eq!(answer["id"], json!(4), "{answer}");
    let finished_anyway = claim_of(&answer);

    // One the upstream drops after a cancel, and one it never answers.
    proxy.send_json(call(5, "abandon"));
    proxy.send_json(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}),
    );
    proxy.send_json(call(6, "abandon"));
    proxy.send_json(json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}));
    assert_eq!(proxy.read()["id"], json!(7));
    let (recorded, after_close) = finish(proxy, &executed);

    // The cancels reached the upstream under its own ids for the calls.
    let id_of =
        |name: &str| recorded.iter().filter(|r| r[1] == name).map(|r| r[0].clone()).collect::<Vec<_>>();
    let cancels: Vec<Value> = recorded.iter().filter(|r| r[0] == "cancelled").map(|r| r[1].clone()).collect();
    assert_eq!(cancels, [id_of("hold")[0].clone(), id_of("abandon")[0].clone()]);
    // Only the call the client still waited for is answered, with an error.
    assert_eq!(after_close.len(), 1, "{after_close:?}");
    assert_eq!(code(&after_close[0]), (json!(6), json!(-32603)));

    let log = claims(&place, "proxied");
    let execution = |claim: u64| log.iter().find(|(c, _)| *c == claim).and_then(|(_, e)| e.clone());
    assert_eq!(execution(task).as_deref(), Some("UNKNOWN"));
    assert_eq!(execution(not_a_result).as_deref(), Some("UNKNOWN"));
    assert_eq!(execution(finished_anyway).as_deref(), Some("REPORTED_SUCCESS"));
    let abandoned: Vec<_> = log[3..].iter().map(|(_, e)| e.as_deref().unwrap()).collect();
    assert_eq!(abandoned, ["CANCELLED", "UNKNOWN"]);
}

/// An upstream that matches method names and keys leniently, as JavaScript
/// and Python servers do: a name is any of its readings (lower-cased,
/// case-folded, NFKC or NFKD without accents, stripped, white space and
/// format characters removed, cut at a NUL, percent-decoded), and a key is
/// found in any spelling that reads as it (a case-insensitive
/// deserializer's, the last one winning). Every message that reads as a
/// `tools/call` is executed and recorded as `[id, name]`.
const NORMALIZING_UPSTREAM: &str = r#"
import json, sys, unicodedata, urllib.parse
executed = open(sys.argv[1], "a")

def readings(name):
    out = set()
    for cut in (name, name.split("\0")[0]):
        for form in ("NFKC", "NFKD"):
            x = unicodedata.normalize(form, cut)
            if form == "NFKD":
                x = "".join(c for c in x if not unicodedata.combining(c))
            for case in (str.lower, str.casefold, lambda s: s.upper().lower()):
                y = case(x).strip()
                z = "".join(c for c in y if not (c.isspace() or unicodedata.category(c) in ("Cc", "Cf")))
                out |= {y, z, urllib.parse.unquote(z)}
    return out

def field(message, key):
    found = None
    for k, v in message.items():
        if key in readings(k):
            found = v
    return found

def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

for raw in sys.stdin.buffer:
    try:
        message = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        continue
    if not isinstance(message, dict):
        continue
    method, id = field(message, "method"), field(message, "id")
    if not isinstance(method, str):
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": "2025-11-25",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "normalizing", "version": "0"}}})
    elif "tools/call" in readings(method):
        params = field(message, "params")
        name = field(params, "name") if isinstance(params, dict) else None
        executed.write(json.dumps([id, name]) + "\n")
        executed.flush()
        if id is not None:
            send({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "ran"}]}})
    elif id is not None:
        send({"jsonrpc": "2.0", "id": id, "result": {}})
"#;

/// Spellings of `tools/call` a normalizing reader takes for it, one for
/// each character outside ASCII that folds (NFKC or NFKD without accents,
/// case-folded) into a run of its letters, put in that run's place, and
/// one for each that vanishes (a format character, white space), put at
/// either end: Python's own tables, not the proxy's.
const SPELLINGS: &str = r#"
import json, sys, unicodedata as u
target, spellings = "tools/call", []
for cp in range(0x80, 0x110000):
    if 0xD800 <= cp <= 0xDFFF:
        continue
    c = chr(cp)
    for form in ("NFKC", "NFKD"):
        r = u.normalize(form, c)
        r = "".join(x for x in r if not u.combining(x)).casefold()
        if r and r in target:
            at = target.index(r)
            spellings.append(target[:at] + c + target[at + len(r):])
            break
    if u.category(c) in ("Cf", "Zs", "Zl", "Zp"):
        spellings.append(c + target)
        spellings.append(target + c)
json.dump(spellings, sys.stdout)
"#;

#[test]
fn no_spelling_a_lenient_upstream_reads_as_a_call_is_forwarded() {
    let (place, mut proxy, executed) = start_before("normalizing", NORMALIZING_UPSTREAM);

    // The call as MCP spells it is claimed and runs.
    proxy.send_json(call(2, "honest"));
    let honest = claim_of(&proxy.read());

    // The two spellings found, the class they stand for, and the same as
    // notifications (dropped: a notification is never answered).
    let mut methods: Vec<String> = [
        "Tools/Call",
        "tools/call ",
        "TOOLS/CALL",
        "\ttools/call\r\n",
        "tools/call\u{0}",
        "tools/call\u{0}trailing",
        "\u{feff}tools/call",
        "tools/\u{200b}call",
        "ｔｏｏｌｓ／ｃａｌｌ",
        "toolſ/call",
        "tools/㎈l",
        "tōols/càll",
        "tools%2Fcall",
        "tools%2fcall%00",
    ]
    .map(String::from)
    .to_vec();
    let spelled = Command::new("python3").args(["-c", SPELLINGS]).output().unwrap();
    assert!(spelled.status.success(), "{}", String::from_utf8_lossy(&spelled.stderr));
    let generated: Vec<String> = serde_json::from_slice(&spelled.stdout).unwrap();
    assert!(generated.len() > 500, "{} spellings", generated.len());
    methods.extend(generated);
    let mut id = 100;
    for method in &methods {
        id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"name": format!("spelled-{id}")}});
        proxy.send_json(request);
        let answer = proxy.read();
        assert_eq!(code(&answer), (json!(id), json!(-32600)), "{method:?} was not refused: {answer}");
        proxy.send_json(
            json!({"jsonrpc": "2.0", "method": method, "params": {"name": "spelled-notification"}}),
        );
    }
    // Keys a case-insensitive reader takes for a member, or for a call's name.
    let keyed = [
        json!({"jsonrpc": "2.0", "id": 10, "Method": "tools/call", "params": {"name": "keyed-method"}}),
        json!({"jsonrpc": "2.0", "id": 11, "method": "ping", "METHOD": "tools/call", "params": {"name": "keyed-both"}}),
        json!({"jsonrpc": "2.0", "id": 12, "method": "tools/list", "ＭＥＴＨＯＤ": "tools/call", "params": {"name": "keyed-wide"}}),
    ];
    for message in keyed {
        let id = message["id"].clone();
        proxy.send_json(message);
        assert_eq!(code(&proxy.read()), (id, json!(-32600)));
    }
    proxy.send_json(json!({"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "claimed", "Name": "ran-instead"}}));
    assert_eq!(code(&proxy.read()), (json!(13), json!(-32602)));

    // The proxy goes on, and real methods still pass.
    proxy.send_json(json!({"jsonrpc": "2.0", "id": 14, "method": "tools/list"}));
    assert_eq!(proxy.read()["id"], json!(14));
    proxy.send_json(call(15, "after"));
    let after = claim_of(&proxy.read());
    let (recorded, _) = finish(proxy, &executed);

    let names: Vec<&str> = recorded.iter().map(|r| r[1].as_str().unwrap_or("?")).collect();
    assert_eq!(names, ["honest", "after"], "the upstream ran a call the proxy did not claim");
    let settled = |claim: u64| (claim, Some("REPORTED_SUCCESS".to_owned()));
    assert_eq!(claims(&place, "proxied"), [settled(honest), settled(after)]);
}
