//! What the MCP surfaces cost (issue 21), interleaved in one run, one
//! `tools/call` at a time over stdio from a client in this process:
//!
//! - a `tools/call` through `effects mcp-proxy` vs the same call straight to
//!   its upstream (`effects mcp`, `read_file` of a 4 KiB file: the cheapest
//!   call, so the proxy's own cost shows most), against the direct call plus
//!   one `fdatasync` measured beside it (goal: at most 1.2x: the proxy's
//!   durable claim is the one fsync it may add);
//! - `effects mcp`'s 4 KiB `write_file` (claimed, written, settled, read
//!   back) vs `@modelcontextprotocol/server-filesystem`'s `write_file`
//!   (Node; only when `tests/mcp/node_modules` is installed, as `cargo xtask
//!   test` leaves it).
//!
//! `cargo bench --bench mcp_proxy` (`EFFECTS_BENCH_SCALE=0.1` for a quick run).

#![allow(clippy::disallowed_methods)] // a bench sets up its directories directly

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::latency;
use common::report::{Figure, Goal};
use serde_json::{Value, json};

/// An MCP server process, spoken to one request at a time.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
    line: String,
}

impl Peer {
    fn start(program: &Path, args: &[String]) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut peer = Self { child, stdin, stdout, next: 0, line: String::new() };
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}});
        peer.request("initialize", params);
        writeln!(peer.stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
        peer
    }

    /// Sends a request; returns its result, skipping notifications.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let request = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        writeln!(self.stdin, "{request}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            self.line.clear();
            assert!(self.stdout.read_line(&mut self.line).unwrap() > 0, "the server closed its output");
            let mut answer: Value = serde_json::from_str(&self.line).unwrap();
            if answer.get("id") == Some(&json!(self.next)) {
                assert!(answer.get("error").is_none(), "{method}: {answer}");
                return answer["result"].take();
            }
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Duration {
        let start = Instant::now();
        let result = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        let elapsed = start.elapsed();
        assert_ne!(result["isError"], json!(true), "{tool}: {result}");
        elapsed
    }

    fn stop(mut self) {
        drop(self.stdin);
        self.child.wait().unwrap();
    }
}

fn effects_mcp(data: &Path, root: &Path) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    vec!["--data-dir".into(), path(data), "mcp".into(), "--root".into(), path(root)]
}

/// One `fdatasync` of a small append, as the proxy's claim makes.
fn one_fsync(file: &mut std::fs::File) -> Duration {
    let start = Instant::now();
    file.write_all(&[b'x'; 200]).unwrap();
    file.sync_data().unwrap();
    start.elapsed()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let samples = common::samples(1_000);
    let (_scratch, dirs) = common::scratch(&[
        "direct-root",
        "direct-data",
        "proxy-data",
        "upstream-data",
        "fs-root",
        "mcp-data",
    ]);
    let effects = PathBuf::from(env!("CARGO_BIN_EXE_effects"));
    let content: String = "0123456789abcdef".repeat(256); // 4 KiB
    std::fs::write(dirs[0].join("file.txt"), &content).unwrap();

    let mut direct = Peer::start(&effects, &effects_mcp(&dirs[1], &dirs[0]));
    let mut proxy_args =
        vec!["--data-dir".into(), dirs[2].display().to_string(), "mcp-proxy".into(), "--root".into()];
    proxy_args.push(dirs[0].display().to_string());
    proxy_args.push("--".into());
    proxy_args.push(effects.display().to_string());
    proxy_args.extend(effects_mcp(&dirs[3], &dirs[0]));
    let mut proxied = Peer::start(&effects, &proxy_args);
    let mut fsynced = std::fs::File::create(dirs[2].join("fsync-probe")).unwrap();

    let read = json!({"path": "file.txt"});
    let (mut straight, mut through, mut plus_fsync) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..samples {
        let mut go_direct = || {
            let call = direct.call("read_file", read.clone());
            straight.push(call);
            plus_fsync.push(call + one_fsync(&mut fsynced));
        };
        let mut go_proxied = || through.push(proxied.call("read_file", read.clone()));
        if i % 2 == 0 {
            go_direct();
            go_proxied();
        } else {
            go_proxied();
            go_direct();
        }
    }
    direct.stop();
    proxied.stop();

    Figure::new(
        "mcp_proxy",
        "proxied_vs_direct_plus_fsync",
        "tools/call (effects mcp read_file, 4 KiB) through effects mcp-proxy vs straight to the upstream plus one fdatasync measured beside it",
        latency("proxied", &mut through),
    )
    .against(latency("direct + fsync", &mut plus_fsync))
    .goal(Goal::AtMost(1.2))
    .print();
    Figure::new(
        "mcp_proxy",
        "proxied_vs_direct",
        "the same proxied tools/call vs the direct one alone (what the claim's fsync and the relay cost together)",
        latency("proxied", &mut through.clone()),
    )
    .against(latency("direct", &mut straight))
    .print();

    let node_bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/node_modules/.bin");
    let server_filesystem = node_bin.join("../@modelcontextprotocol/server-filesystem/dist/index.js");
    if !server_filesystem.exists() {
        eprintln!(
            "mcp_proxy: skipping effects mcp vs server-filesystem: tests/mcp/node_modules is not installed (cargo xtask test installs it)"
        );
        return;
    }
    let writes = common::samples(300);
    let root = &dirs[4];
    let mut ours = Peer::start(&effects, &effects_mcp(&dirs[5], root));
    let mut theirs = Peer::start(
        &node_bin.join("node"),
        &[server_filesystem.display().to_string(), root.display().to_string()],
    );
    let (mut ledgered, mut plain) = (Vec::new(), Vec::new());
    for i in 0..writes {
        let mut go_ours =
            || ledgered.push(ours.call("write_file", json!({"path": "ours.txt", "content": content})));
        let target = root.join("theirs.txt").display().to_string();
        let mut go_theirs =
            || plain.push(theirs.call("write_file", json!({"path": target, "content": content})));
        if i % 2 == 0 {
            go_ours();
            go_theirs();
        } else {
            go_theirs();
            go_ours();
        }
    }
    ours.stop();
    theirs.stop();
    Figure::new(
        "mcp_proxy",
        "mcp_write_vs_server_filesystem",
        "4 KiB write_file: effects mcp (claimed, written and fsynced, settled, read back) vs @modelcontextprotocol/server-filesystem (Node, no fsync)",
        latency("effects mcp", &mut ledgered),
    )
    .against(latency("server-filesystem", &mut plain))
    .print();
}
