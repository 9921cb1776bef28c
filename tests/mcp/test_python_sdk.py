"""`effects mcp` and `effects mcp-proxy` driven by the official MCP Python SDK
(`mcp` from PyPI), against the reference servers `server-everything` and
`server-filesystem` (from npm). Run by `cargo xtask test` with $EFFECTS_BIN
(the binary) and $MCP_NODE_BIN (tests/mcp/node_modules/.bin).
"""

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
import mcp_types as types

EFFECTS = os.environ.get("EFFECTS_BIN", "target/release/effects")
NODE_BIN = Path(os.environ.get("MCP_NODE_BIN", "tests/mcp/node_modules/.bin")).resolve()
META_KEY = "dev.effect-ledger/step"
# Both revisions: the 2025-11-25 initialize handshake, and 2026-07-28
# (stateless: discovered, no handshake).
MODES = {"legacy": "2025-11-25", "auto": "2026-07-28"}


def node_env():
    env = dict(os.environ)
    env["PATH"] = f"{NODE_BIN}{os.pathsep}{env['PATH']}"
    return env


class Scratch(unittest.TestCase):
    """A fresh root and data dir per test."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="effects-mcp-"))
        self.root = self.tmp / "root"
        self.data = self.tmp / "data"
        self.root.mkdir()

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def effects(self, *args, check=True):
        done = subprocess.run(
            [EFFECTS, "--data-dir", str(self.data), *args], capture_output=True, text=True, timeout=120
        )
        if check and done.returncode != 0:
            self.fail(f"effects {' '.join(args)}: exit {done.returncode}\n{done.stderr}")
        return done

    def log(self, run):
        shown = self.effects("log", "show", "--json", "--run", run)
        return [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]

    def outcomes(self, run):
        """Each claim's execution, by claim position, from the log."""
        return {r["claim"]: r["execution"] for r in self.log(run) if r["kind"] == "outcome"}

    def server(self, *extra):
        return StdioServerParameters(
            command=EFFECTS, args=["--data-dir", str(self.data), "mcp", "--root", str(self.root), *extra]
        )


def alive(pid):
    """Whether `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def run(coroutine):
    return asyncio.run(coroutine)


class EffectsMcp(Scratch):
    """`effects mcp` as the SDK's client sees it."""

    def test_tools_are_listed_with_honest_hints_and_output_schemas(self):
        async def go():
            async with Client(self.server("--check", "tests=true"), mode="legacy") as client:
                return (await client.list_tools()).tools

        tools = {tool.name: tool for tool in run(go())}
        for name in ["write_file", "edit_file", "apply_patch", "read_file", "ls", "glob", "grep", "bash", "bg_job"]:
            self.assertIn(name, tools)
            self.assertEqual(tools[name].output_schema["type"], "object", name)
        self.assertIn("complete", tools)
        self.assertEqual(tools["check"].input_schema["properties"]["name"]["enum"], ["tests"])
        for name in ["read_file", "ls", "glob", "grep"]:
            self.assertTrue(tools[name].annotations.read_only_hint, name)
            self.assertFalse(tools[name].annotations.destructive_hint, name)
        for name in ["write_file", "edit_file", "apply_patch", "bash", "bg_job"]:
            self.assertFalse(tools[name].annotations.read_only_hint, name)
            self.assertTrue(tools[name].annotations.destructive_hint, name)
        self.assertTrue(tools["bash"].annotations.open_world_hint)

    def test_without_checks_there_is_no_check_tool_and_no_model_command_runs_as_one(self):
        async def go():
            async with Client(self.server(), mode="legacy") as client:
                names = [tool.name for tool in (await client.list_tools()).tools]
                with self.assertRaises(MCPError):
                    await client.call_tool("check", {"name": "true"})
                return names

        self.assertNotIn("check", run(go()))

    def test_write_read_back_complete_is_completed_in_both_revisions(self):
        for mode, version in MODES.items():
            with self.subTest(mode=mode):

                async def go():
                    async with Client(self.server(), mode=mode) as client:
                        self.assertEqual(client.protocol_version, version)
                        written = await client.call_tool("write_file", {"path": f"{mode}.txt", "content": "hello\n"})
                        self.assertFalse(written.is_error, written.content)
                        self.assertEqual(written.structured_content["status"], "RAN")
                        self.assertEqual(written.structured_content["outcome"]["execution"], "REPORTED_SUCCESS")
                        read = await client.call_tool("read_file", {"path": f"{mode}.txt"})
                        self.assertIn("hello", read.content[0].text)
                        done = await client.call_tool("complete", {"answer": f"wrote {mode}.txt", "required": [f"{mode}.txt"]})
                        decision = json.loads((await client.read_resource(self.uri(client, "decision"))).contents[0].text)
                        return done.structured_content, decision

                verdict, resource = run(go())
                self.assertEqual(verdict["verdict"], "COMPLETED", verdict)
                self.assertEqual(resource["decision"]["verdict"], "COMPLETED")
                self.assertFalse(resource["stale"])

    def uri(self, client, what):
        # The server's instructions name the run; its resources list says where.
        return f"effects://run/{self.run_id(client)}/{what}"

    def run_id(self, client):
        return re.search(r"Run (\S+);", client.instructions).group(1)

    def test_a_file_no_verified_change_produced_is_unverified_and_named(self):
        for mode in MODES:
            with self.subTest(mode=mode):

                async def go():
                    async with Client(self.server(), mode=mode) as client:
                        await client.call_tool("bash", {"command": f"echo hi > {mode}.out"})
                        await client.call_tool("read_file", {"path": f"{mode}.out"})
                        done = await client.call_tool("complete", {"answer": f"wrote {mode}.out", "required": [f"{mode}.out"]})
                        return done.structured_content

                decision = run(go())
                self.assertEqual(decision["verdict"], "UNVERIFIED", decision)
                self.assertTrue(any(f"{mode}.out" in d for d in decision["disclosures"]), decision["disclosures"])

    def test_a_file_changed_behind_the_ledger_after_its_write_is_not_completed(self):
        async def go():
            async with Client(self.server(), mode="legacy") as client:
                await client.call_tool("write_file", {"path": "a.txt", "content": "mine\n"})
                (self.root / "a.txt").write_text("someone else's\n")  # a second process
                return (await client.call_tool("complete", {"answer": "wrote a.txt", "required": ["a.txt"]})).structured_content

        decision = run(go())
        self.assertNotEqual(decision["verdict"], "COMPLETED", decision)
        self.assertTrue(any("a.txt" in d for d in decision["disclosures"]), decision)

    def test_an_operator_check_verifies_and_the_model_cannot_name_another(self):
        async def go():
            async with Client(self.server("--check", "tests=test -f made.txt"), mode="legacy") as client:
                await client.call_tool("bash", {"command": "echo x > made.txt"})
                refused = await client.call_tool("check", {"name": "rm -rf /"})
                checked = await client.call_tool("check", {"name": "tests"})
                done = await client.call_tool("complete", {"answer": "made made.txt", "required": ["made.txt"]})
                return refused, checked, done.structured_content

        refused, checked, decision = run(go())
        self.assertTrue(refused.is_error)
        self.assertEqual(refused.structured_content["status"], "REFUSED")
        self.assertFalse(checked.is_error, checked.content)
        self.assertTrue(checked.structured_content["verifier"]["passed"], checked.structured_content)
        self.assertEqual(decision["verdict"], "COMPLETED", decision)

    def test_bad_input_is_a_refused_step_the_model_can_read(self):
        async def go():
            async with Client(self.server(), mode="legacy") as client:
                return await client.call_tool("write_file", {"path": "x.txt"})

        result = run(go())
        self.assertTrue(result.is_error)
        self.assertEqual(result.structured_content["status"], "REFUSED")
        self.assertIn("content", result.content[0].text)

    def test_an_escape_is_refused_and_nothing_is_written_outside_the_root(self):
        async def go():
            async with Client(self.server(), mode="legacy") as client:
                return await client.call_tool("write_file", {"path": "../outside.txt", "content": "x"})

        result = run(go())
        self.assertTrue(result.is_error)
        self.assertEqual(result.structured_content["status"], "REFUSED")
        self.assertFalse((self.tmp / "outside.txt").exists())

    def test_a_cancelled_bash_is_cancelled_in_the_log_with_its_processes_gone(self):
        pid_file = self.root / "sleep.pid"
        progress = []

        async def on_progress(value, total, message):
            progress.append(value)

        async def go():
            async with Client(self.server(), mode="legacy") as client:
                run_id = self.run_id(client)
                # The client gives up after 2.5 s and sends notifications/cancelled.
                with self.assertRaises(MCPError):
                    await client.call_tool(
                        "bash",
                        {"command": "sleep 60 & echo $! > sleep.pid; wait"},
                        read_timeout_seconds=2.5,
                        progress_callback=on_progress,
                    )
                # The server records the end as a second process would see it.
                for _ in range(100):
                    if "CANCELLED" in self.outcomes(run_id).values():
                        break
                    await asyncio.sleep(0.1)
                return run_id

        run_id = run(go())
        self.assertEqual(list(self.outcomes(run_id).values()), ["CANCELLED"])
        self.assertTrue(progress, "no notifications/progress while bash ran")
        self.assertFalse(alive(int(pid_file.read_text())), "bash's child outlived the cancel")

    def test_the_log_resource_is_the_runs_records(self):
        async def go():
            async with Client(self.server(), mode="auto") as client:
                listed = [r.uri for r in (await client.list_resources()).resources]
                await client.call_tool("write_file", {"path": "a.txt", "content": "a"})
                log = (await client.read_resource(self.uri(client, "log"))).contents[0].text
                with self.assertRaises(MCPError):
                    await client.read_resource("effects://run/someone-else/log")
                return listed, log, self.run_id(client)

        listed, log, run_id = run(go())
        self.assertEqual(listed, [f"effects://run/{run_id}/decision", f"effects://run/{run_id}/log"])
        kinds = [json.loads(line)["kind"] for line in log.splitlines()]
        self.assertEqual(kinds[0], "claim")
        self.assertIn("outcome", kinds)


class Upstream:
    """A reference server's command, direct and behind the proxy."""

    def __init__(self, name, args):
        self.name = name
        self.args = args

    def direct(self, cwd):
        return StdioServerParameters(command=str(NODE_BIN / "node"), args=self.args, env=node_env(), cwd=str(cwd))

    def proxied(self, case, *extra):
        return StdioServerParameters(
            command=EFFECTS,
            args=[
                "--data-dir", str(case.data), "mcp-proxy", "--root", str(case.root), *extra,
                "--", str(NODE_BIN / "node"), *self.args,
            ],
            env=node_env(),
            cwd=str(case.root),
        )


def package_bin(package, entry):
    return str(NODE_BIN.parent / "@modelcontextprotocol" / package / entry)


def without_ours(result):
    """A result as the upstream sent it: our `_meta` key taken out."""
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    meta = dict(dumped.get("_meta") or {})
    ours = meta.pop(META_KEY, None)
    if meta:
        dumped["_meta"] = meta
    else:
        dumped.pop("_meta", None)
    return dumped, ours


class Proxy(Scratch):
    """Direct against proxied: what the client sees must be the same, the
    ledger's positions only in `_meta`."""

    everything = Upstream("everything", [package_bin("server-everything", "dist/index.js"), "stdio"])

    def filesystem(self):
        return Upstream("filesystem", [package_bin("server-filesystem", "dist/index.js"), str(self.root)])

    async def session(self, params, calls, **client_args):
        async def sampling(context, params):
            return types.CreateMessageResult(
                role="assistant", content=types.TextContent(type="text", text="sampled"), model="fake-model"
            )

        async def elicitation(context, params):
            return types.ElicitResult(action="accept", content={"color": "blue", "name": "x", "email": "a@b.c"})

        async with Client(params, mode="legacy", sampling_callback=sampling, elicitation_callback=elicitation, **client_args) as client:
            tools = (await client.list_tools()).model_dump(mode="json", by_alias=True, exclude_none=True)
            results = []
            for name, arguments in calls:
                seen = []

                async def on_progress(value, total, message):
                    seen.append((value, total))

                try:
                    result = await client.call_tool(name, arguments, progress_callback=on_progress)
                    results.append(("result", result, seen))
                except MCPError as error:
                    results.append(("error", error.error.model_dump(mode="json"), seen))
            return tools, results

    def differential(self, upstream, calls, reset=None):
        if reset:
            reset()
        direct_tools, direct = run(self.session(upstream.direct(self.root), calls))
        if reset:
            reset()
        proxied_tools, proxied = run(self.session(upstream.proxied(self), calls))
        self.assertEqual(proxied_tools, direct_tools)
        positions = []
        for (name, _), (kind, want, want_progress), (got_kind, got, got_progress) in zip(calls, direct, proxied):
            with self.subTest(tool=name):
                self.assertEqual(got_kind, kind)
                self.assertEqual(len(got_progress), len(want_progress))
                if kind == "error":
                    self.assertEqual(got, want)
                    continue
                want, _ = without_ours(want)
                got, ours = without_ours(got)
                self.assertEqual(got, want)
                self.assertIsNotNone(ours, "no ledger positions in _meta")
                self.assertLess(ours["claim"], ours["outcome"])
                expected = "FAILED" if want.get("isError") else "REPORTED_SUCCESS"
                self.assertEqual(ours["execution"], expected)
                positions.append(ours)
        return positions

    def test_server_everything_direct_and_proxied_are_the_same(self):
        calls = [
            ("echo", {"message": "hi"}),
            ("get-sum", {"a": 2, "b": 3}),
            ("get-structured-content", {"location": "New York"}),
            ("get-annotated-message", {"messageType": "error", "includeImage": True}),
            ("get-tiny-image", {}),
            ("trigger-long-running-operation", {"duration": 1, "steps": 3}),
            ("trigger-sampling-request", {"prompt": "say hi", "maxTokens": 10}),
            ("get-sum", {"a": "not a number"}),
            ("no-such-tool", {}),
        ]
        positions = self.differential(self.everything, calls)
        run_id = positions[0]["run_id"]
        # Every call claimed once, each settled after it was claimed.
        log = self.log(run_id)
        claims = [r for r in log if r["kind"] == "claim"]
        self.assertEqual(len(claims), len(calls))
        external = [c["record"]["claim"]["operation"] for c in claims]
        self.assertEqual([o["tool"] for o in external], ["external"] * len(calls))
        # CMP-6: the decision discloses every external call, by its claim.
        decided = json.loads(self.effects("decide", "--run", run_id, "--json", "--answer", "done").stdout)
        self.assertEqual(decided["verdict"], "UNVERIFIED")
        disclosed = [d for d in decided["disclosures"] if d.startswith("External call")]
        self.assertEqual(len(disclosed), len(calls), decided["disclosures"])
        for claim in claims:
            self.assertTrue(any(f"(position {claim['position']})" in d for d in disclosed), claim["position"])

    def test_server_filesystem_direct_and_proxied_are_the_same(self):
        def reset():
            for entry in self.root.iterdir():
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            (self.root / "old.txt").write_text("old\n")

        root = str(self.root)
        calls = [
            ("list_allowed_directories", {}),
            ("write_file", {"path": f"{root}/new.txt", "content": "new\n"}),
            ("read_text_file", {"path": f"{root}/new.txt"}),
            ("edit_file", {"path": f"{root}/old.txt", "edits": [{"oldText": "old", "newText": "edited"}]}),
            ("list_directory", {"path": root}),
            ("read_text_file", {"path": f"{root}/missing.txt"}),
            ("read_text_file", {"path": "/etc/passwd"}),
        ]
        self.differential(self.filesystem(), calls, reset=reset)
        self.assertEqual((self.root / "old.txt").read_text(), "edited\n")

    def raw(self, upstream):
        """The proxy in a subprocess, spoken to line by line."""
        command = [
            EFFECTS, "--data-dir", str(self.data), "mcp-proxy", "--root", str(self.root),
            "--", str(NODE_BIN / "node"), *upstream.args,
        ]
        return RawPeer(command, node_env(), self.root)

    def test_progress_is_relayed_and_a_cancel_reaches_the_upstream(self):
        with self.raw(self.everything) as peer:
            peer.handshake()
            call = {"name": "trigger-long-running-operation", "arguments": {"duration": 3, "steps": 3}, "_meta": {"progressToken": "p1"}}
            peer.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call})
            progress = peer.until(lambda m: m.get("method") == "notifications/progress")
            self.assertEqual(progress["params"]["progressToken"], "p1")
            # Claimed, durably, while the upstream runs it: another process sees it.
            run_id = peer.run_id()
            self.assertEqual([r["kind"] for r in self.log(run_id)], ["claim"])
            peer.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "test"}})
            # The upstream got it: its SDK sends no answer to a cancelled request.
            answer = peer.until(lambda m: m.get("id") == 7, timeout=5, missing_ok=True)
            self.assertIsNone(answer, "the upstream answered a call the client cancelled")
            # Without a cancel the same call is answered (the check above can fail).
            peer.send({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {**call, "arguments": {"duration": 0.3, "steps": 1}}})
            self.assertIn("result", peer.until(lambda m: m.get("id") == 8))
        # The cancelled call stays open while the upstream might still finish
        # it, and is settled CANCELLED when the upstream ends unanswered.
        outcomes = self.outcomes(run_id)
        self.assertEqual([outcomes[claim] for claim in sorted(outcomes)], ["CANCELLED", "REPORTED_SUCCESS"])

    def test_an_upstream_killed_mid_call_leaves_it_unknown(self):
        with self.raw(self.everything) as peer:
            peer.long_call(3)
            os.kill(peer.upstream_pid(), signal.SIGKILL)
            answer = peer.until(lambda m: m.get("id") == 3)
            run_id = peer.run_id()
        self.assertEqual(answer["error"]["code"], -32603)
        self.assertIn("unknown", answer["error"]["message"])
        self.assertEqual(list(self.outcomes(run_id).values()), ["UNKNOWN"])

    def test_a_proxy_killed_mid_call_is_interrupted_at_the_next_open(self):
        with self.raw(self.everything) as peer:
            peer.long_call(3)
            run_id = peer.run_id()
            upstream = peer.upstream_pid()
            peer.process.kill()
            peer.process.wait()
            os.kill(upstream, signal.SIGKILL)
        self.assertEqual(self.outcomes(run_id), {})
        decided = json.loads(self.effects("decide", "--run", run_id, "--json", "--answer", "done").stdout)
        self.assertNotEqual(decided["verdict"], "COMPLETED")
        self.assertEqual(list(self.outcomes(run_id).values()), ["INTERRUPTED"])


class RawPeer:
    """A JSON-RPC peer on a subprocess's stdio, for what an SDK hides."""

    def __init__(self, command, env, cwd):
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd
        )
        self.stderr = b""

    def __enter__(self):
        os.set_blocking(self.process.stdout.fileno(), False)
        os.set_blocking(self.process.stderr.fileno(), False)
        self.buffer = b""
        return self

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def send(self, message):
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        self.process.stdin.flush()

    def read_stderr(self):
        try:
            chunk = self.process.stderr.read()
        except BlockingIOError:
            chunk = None
        self.stderr += chunk or b""
        return self.stderr.decode(errors="replace")

    def until(self, wanted, timeout=20, missing_ok=False):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                if line.strip():
                    message = json.loads(line)
                    if wanted(message):
                        return message
            try:
                chunk = self.process.stdout.read()
            except BlockingIOError:
                chunk = None
            if chunk:
                self.buffer += chunk
            else:
                time.sleep(0.02)
        if missing_ok:
            return None
        raise AssertionError(f"no such message in {timeout} s; stderr:\n{self.read_stderr()}")

    def handshake(self):
        self.send({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
        })
        self.until(lambda m: m.get("id") == 0)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def long_call(self, id):
        """Starts a 10 s call after the handshake; returns once the upstream runs it."""
        self.handshake()
        call = {"name": "trigger-long-running-operation", "arguments": {"duration": 10, "steps": 10}, "_meta": {"progressToken": 1}}
        self.send({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": call})
        self.until(lambda m: m.get("method") == "notifications/progress")

    def banner(self, pattern):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = re.search(pattern, self.read_stderr())
            if found:
                return found.group(1)
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} on stderr:\n{self.stderr.decode(errors='replace')}")

    def run_id(self):
        return self.banner(r"run (\S+) in ")

    def upstream_pid(self):
        return int(self.banner(r"\(pid (\d+)\)"))


if __name__ == "__main__":
    unittest.main()
