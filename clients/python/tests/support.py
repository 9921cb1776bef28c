"""Shared test support: the server binary, temporary roots and data dirs,
a message tap that validates every message both ways against
docs/serve.schema.json, and the log as `effects log show --json` prints it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import unittest
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from effect_ledger import Ledger

PROJECT = Path(__file__).resolve().parents[3]
"""The project root (clients/python/tests/ is three levels below it)."""

BIN = os.environ.get("EFFECTS_BIN") or str(PROJECT / "target" / "release" / "effects")
"""The `effects` binary under test."""

SCHEMA_PATH = PROJECT / "docs" / "serve.schema.json"


class SchemaTap:
    """An `on_message` hook that validates every message, both ways, against
    docs/serve.schema.json: a request against its method's params, an answer
    against the result of the method it answers (matched by id), a
    notification against its params. Violations are collected (the reader
    thread must not raise) and checked by `LedgerTestCase` at cleanup."""

    def __init__(self) -> None:
        import jsonschema
        from referencing import Registry, Resource

        self.schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
        resource = Resource.from_contents(self.schema, default_specification=_specification(self.schema))
        self._registry = Registry().with_resource(_ROOT_URI, resource)
        self._validator_class = jsonschema.validators.validator_for(self.schema)
        self._lock = threading.Lock()
        self._methods: dict[Any, str] = {}
        self.violations: list[str] = []
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.validated: dict[str, int] = {}

    def __call__(self, direction: str, message: dict[str, Any]) -> None:
        with self._lock:
            self.messages.append((direction, message))
            try:
                self._check(direction, message)
            except Exception as error:  # a bug in the tap is a violation too
                self.violations.append(f"{direction} {message!r}: the tap failed: {error!r}")

    # Which schema definition a message's part must match. The schema's layout
    # is read once by `_definition_for`; see its docstring.
    def _check(self, direction: str, message: dict[str, Any]) -> None:
        self._validate(message, self._envelope(direction, message), f"{direction} envelope", message)
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                self._methods[message["id"]] = method
            kind = "notification" if "id" not in message else "request"
            self._validate(message.get("params"), self._definition_for(method, "params"),
                           f"{direction} {kind} {method} params", message)
            return
        answered = self._methods.get(message.get("id"))
        if "result" in message:
            if answered is None:
                self.violations.append(f"{direction}: an answer to no request sent: {message!r}")
                return
            self._validate(message["result"], self._definition_for(answered, "result"),
                           f"{direction} {answered} result", message)

    def _envelope(self, direction: str, message: dict[str, Any]) -> str | None:
        if direction == "send":
            return _first(self.schema, ["JsonRpcRequest", "Request", "ClientMessage"]) if "id" in message \
                else _first(self.schema, ["JsonRpcNotification", "Notification", "ClientNotification"])
        if "method" in message:
            return _first(self.schema, ["JsonRpcNotification", "Notification", "ServerNotification"])
        if "error" in message:
            return _first(self.schema, ["JsonRpcError", "ErrorResponse", "JsonRpcErrorResponse"])
        return _first(self.schema, ["JsonRpcResponse", "Response", "JsonRpcSuccess", "SuccessResponse"])

    def _definition_for(self, method: str, part: str) -> str | None:
        """The definition of `method`'s params or result.

        The schema names them under `methods` (method → {params, result}
        as $refs) when it has that table; otherwise by the definition names
        the server's types use."""
        return _method_definition(self.schema, method, part)

    def _validate(self, value: Any, ref: str | None, what: str, message: dict[str, Any]) -> None:
        if ref is None:
            self.violations.append(f"{what}: the schema has no definition for it")
            return
        validator = self._validator_class({"$ref": ref}, registry=self._registry)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        for error in errors:
            path = "/".join(str(p) for p in error.absolute_path)
            self.violations.append(f"{what} at /{path}: {error.message}\n  message: {json.dumps(message)[:2000]}")
        self.validated[what] = self.validated.get(what, 0) + 1


_ROOT_URI = "urn:effects-serve-schema"


def _specification(schema: Mapping[str, Any]) -> Any:
    from referencing.jsonschema import DRAFT202012, specification_with

    return specification_with(schema.get("$schema", ""), default=DRAFT202012)


def _definitions_key(schema: Mapping[str, Any]) -> str:
    return "$defs" if "$defs" in schema else "definitions"


def _ref(schema: Mapping[str, Any], name: str) -> str:
    return f"{_ROOT_URI}#/{_definitions_key(schema)}/{name}"


def _first(schema: Mapping[str, Any], names: list[str]) -> str | None:
    defs = schema.get(_definitions_key(schema), {})
    for name in names:
        if name in defs:
            return _ref(schema, name)
    return None


def _method_definition(schema: Mapping[str, Any], method: str, part: str) -> str | None:
    methods = schema.get("methods") or schema.get("x-methods")
    if isinstance(methods, Mapping) and isinstance(methods.get(method), Mapping):
        entry = methods[method].get(part)
        if isinstance(entry, Mapping) and isinstance(entry.get("$ref"), str):
            return _ROOT_URI + entry["$ref"]
    stem = "".join(word.capitalize() for word in method.replace("/", "_").split("_"))
    suffix = "Params" if part == "params" else "Result"
    return _first(schema, [stem + suffix])


class LedgerTestCase(unittest.TestCase):
    """A test with a fresh root and data dir (siblings, so the data dir lies
    outside the root) and ledgers whose every message is schema-checked."""

    def setUp(self) -> None:
        if not Path(BIN).exists():
            self.fail(f"no `effects` binary at {BIN} (set $EFFECTS_BIN)")
        base = Path(tempfile.mkdtemp(prefix="effect-ledger-py-"))
        self.addCleanup(shutil.rmtree, base, ignore_errors=True)
        self.root = base / "root"
        self.data_dir = base / "data"
        self.root.mkdir()
        self.taps: list[SchemaTap] = []

    def open_ledger(self, **options: Any) -> Ledger:
        """A ledger over this test's root and data dir, closed at cleanup,
        whose messages are validated (violations fail the test)."""
        tap = SchemaTap()
        self.taps.append(tap)
        ledger = Ledger(self.root, self.data_dir, binary=BIN, on_message=tap, **options)
        self.addCleanup(self._check_tap, tap)
        self.addCleanup(ledger.close)
        return ledger

    def _check_tap(self, tap: SchemaTap) -> None:
        if tap.violations:
            self.fail("messages that do not match docs/serve.schema.json:\n" + "\n".join(tap.violations))

    def begin(self, ledger: Ledger, run_id: str | None = None) -> str:
        """Begins a run and answers its id."""
        begun = ledger.begin_run(run_id)
        self.assertIsNotNone(begun.run, begun.reason)
        assert begun.run is not None
        return begun.run.id

    def log_records(self, run_id: str) -> list[dict[str, Any]]:
        """The run's log, one object per record (`effects log show --json`)."""
        shown = subprocess.run(
            [BIN, "--data-dir", str(self.data_dir), "log", "show", "--run", run_id, "--json"],
            capture_output=True, text=True, timeout=60, check=False,
        )
        self.assertEqual(shown.returncode, 0, shown.stderr)
        return [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]


def write_file_input(path: str, content: str) -> dict[str, str]:
    """A `write_file` call's input."""
    return {"path": path, "content": content}
