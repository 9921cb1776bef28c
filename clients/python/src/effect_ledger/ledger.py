"""`Ledger`: an `effects serve` process, one ledger over one sealed root,
with one typed method per protocol method (docs/serve.md), and two ways to
run a tool of your own under a claim: the `effect` context manager and
`run_tool`.

Domain answers are returned, never raised: a claim that is `refused` or
`blocked`, a step that is REFUSED, a FAILED decision. Only a JSON-RPC
error (`LedgerProtocolError`) or a server that went away
(`LedgerClosedError`) raises.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from .errors import EffectRefused, LedgerClosedError
from .transport import MessageHook, Pending, ProgressCallback, Transport
from .types import (
    AnnotateResult,
    ClaimResult,
    Decision,
    DecisionResult,
    Facts,
    InitializeResult,
    JsonObject,
    RunResult,
    StepResult,
)

PROTOCOL_VERSION = "1"
"""The protocol version this client speaks."""

CLIENT_VERSION = "0.1.0"
"""This client's version, sent in `initialize` (and the package's)."""

T = TypeVar("T")

Checks = Mapping[str, str] | Iterable[tuple[str, str]]
"""Checks `check/run` may run by name: `{"tests": "make test"}` (`--check NAME=COMMAND`)."""


def default_binary() -> str:
    """`$EFFECTS_BIN`, else `effects` on the PATH."""
    return os.environ.get("EFFECTS_BIN") or "effects"


def ran(exit_code: int | None = 0) -> Facts:
    """The facts of a tool the runtime ran to its end with this exit code."""
    return {"executed": True, "exit_code": exit_code, "timed_out": False, "cancelled": False}


@dataclass
class Effect:
    """A claimed effect inside `Ledger.effect`: its claim, and once the
    block is left, the step result its settlement answered."""

    claim: ClaimResult
    settled: StepResult | None = None


@dataclass
class ToolRun(Generic[T]):
    """What `Ledger.run_tool` did: the claim; and, when the claim let the
    tool run, the function's return value and the settlement's step result."""

    claim: ClaimResult
    value: T | None = None
    settled: StepResult | None = field(default=None)

    @property
    def ran(self) -> bool:
        """Whether the function was called."""
        return self.claim.may_run


class Ledger:
    """`effects serve` over one sealed root, driven over stdio.

    `Ledger(root, data_dir)` spawns `BINARY --data-dir DATA_DIR serve --root
    ROOT [--check NAME=COMMAND]...` and initializes it; `close()` (or leaving
    a `with` block) shuts it down. Every method may be called from any
    thread; requests sent while others are in flight are pipelined.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        data_dir: str | os.PathLike[str] | None = None,
        *,
        checks: Checks | None = None,
        binary: str | os.PathLike[str] | None = None,
        extra_args: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stderr: Literal["pipe", "inherit"] = "pipe",
        on_message: MessageHook | None = None,
        client_name: str = "effect-ledger-python",
        close_timeout: float = 30.0,
    ) -> None:
        """Spawns the server and calls `initialize`.

        `data_dir` None leaves it to the server (`$EFFECTS_DATA_DIR`, else
        `.effects` in its working directory); it must lie outside the root.
        `binary` defaults to `$EFFECTS_BIN`, else `effects` on the PATH.
        `stderr="pipe"` keeps the tail of the server's diagnostics for error
        messages; `"inherit"` passes them through. `on_message` sees every
        message both ways.
        """
        argv = [os.fspath(binary) if binary is not None else default_binary()]
        if data_dir is not None:
            argv += ["--data-dir", os.fspath(data_dir)]
        argv += ["serve", "--root", os.fspath(root)]
        pairs = checks.items() if isinstance(checks, Mapping) else (checks or ())
        for name, command in pairs:
            argv += ["--check", f"{name}={command}"]
        argv += list(extra_args)
        self.client_name = client_name
        self.close_timeout = close_timeout
        self._transport = Transport(
            argv,
            env=env,
            cwd=os.fspath(cwd) if cwd is not None else None,
            stderr=stderr,
            on_message=on_message,
        )
        self._closed = False
        try:
            self.server: InitializeResult = self.initialize()
        except BaseException:
            self.kill()
            raise

    # -- the process -------------------------------------------------------

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self._transport.pid

    @property
    def argv(self) -> list[str]:
        """The command line the server was started with."""
        return list(self._transport.argv)

    @property
    def stderr_tail(self) -> str:
        """The last 64 KiB of the server's diagnostics (when piped)."""
        return self._transport.stderr_tail

    def close(self) -> int | None:
        """Sends `shutdown` (the server finishes what is in flight, makes the
        log durable and exits) and waits for the exit; kills the server if it
        has not exited within `close_timeout`. Answers its exit status.
        Closing twice does nothing more."""
        if self._closed:
            return self._transport.process.returncode
        self._closed = True
        try:
            self._transport.request("shutdown", {}, _as_object).result(self.close_timeout)
        except (LedgerClosedError, TimeoutError):
            pass
        self._transport.close_stdin()
        try:
            return self._transport.wait(self.close_timeout)
        except subprocess.TimeoutExpired:
            self._transport.kill()
            return self._transport.process.returncode

    def kill(self) -> None:
        """Kills the server at once (SIGKILL), as a crash would: nothing is
        shut down. For tests of recovery; `close()` is the way out."""
        self._closed = True
        self._transport.kill()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- raw requests ------------------------------------------------------

    def start(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        on_progress: ProgressCallback | None = None,
    ) -> Pending[Any]:
        """Sends any request without waiting: its `Pending` answers the raw
        result (`.result()`), and `.cancel()` sends `notifications/cancelled`."""
        return self._transport.request(method, params or {}, _identity, on_progress)

    def _call(
        self,
        method: str,
        params: Mapping[str, Any],
        convert: Callable[[Any], T],
        on_progress: ProgressCallback | None = None,
    ) -> T:
        return self._transport.request(method, params, convert, on_progress).result()

    # -- the methods -------------------------------------------------------

    def initialize(self) -> InitializeResult:
        """`initialize` (the constructor calls it): the server, its root and
        data dir, the policies, the tool catalogue, the profiles and checks."""
        params = {
            "protocol_version": PROTOCOL_VERSION,
            "client": {"name": self.client_name, "version": CLIENT_VERSION},
        }
        return self._call("initialize", params, _converter(InitializeResult.from_json))

    def begin_run(self, run_id: str | None = None, child_of: str | None = None) -> RunResult:
        """`run/begin`: a new run (with this id, or a fresh one), or a child
        of `child_of`. A run that cannot be begun is `run` None and a reason."""
        params: JsonObject = {}
        if run_id is not None:
            params["run_id"] = run_id
        if child_of is not None:
            params["child_of"] = child_of
        return self._call("run/begin", params, _converter(RunResult.from_json))

    def continue_run(self, run_id: str) -> RunResult:
        """`run/continue`: a run of this data dir and root, begun earlier
        (perhaps by another process). Opening it records as INTERRUPTED the
        unsettled claims whose executor is known dead."""
        return self._call("run/continue", {"run_id": run_id}, _converter(RunResult.from_json))

    def claim(
        self,
        run_id: str,
        request_id: str,
        tool: str,
        input: Mapping[str, Any],
        profile: str = "effects",
    ) -> ClaimResult:
        """`effect/claim`: claims a tool call the runtime will run itself.
        Run it only if the answer's `status` is `"run"` (EMB-1); claiming a
        `(run_id, request_id)` again answers the first claim (`duplicate`)."""
        params = {"run_id": run_id, "request_id": request_id, "tool": tool, "input": dict(input), "profile": profile}
        return self._call("effect/claim", params, _converter(ClaimResult.from_json))

    def settle(
        self,
        run_id: str,
        request_id: str,
        facts: Facts | Mapping[str, Any],
        tool: str | None = None,
        input: Mapping[str, Any] | None = None,
    ) -> StepResult:
        """`effect/settle`: settles a claimed call with what the runtime saw
        (`ran(0)` is `{"executed": True, "exit_code": 0, ...}`); the ledger
        then reads back the claim's scope itself. A process that did not
        make the claim must pass the call's `tool` and `input` again."""
        params: JsonObject = {"run_id": run_id, "request_id": request_id, "facts": dict(facts)}
        if tool is not None:
            params["tool"] = tool
        if input is not None:
            params["input"] = dict(input)
        return self._call("effect/settle", params, _converter(StepResult.from_json))

    def execute(
        self,
        run_id: str,
        request_id: str,
        tool: str,
        input: Mapping[str, Any],
        on_progress: ProgressCallback | None = None,
    ) -> StepResult:
        """`effect/execute`: has the host run a tool itself (the filesystem
        tools, `bash`, `python`, `bg_job`): claimed, run, settled, read back."""
        return self.start_execute(run_id, request_id, tool, input, on_progress).result()

    def start_execute(
        self,
        run_id: str,
        request_id: str,
        tool: str,
        input: Mapping[str, Any],
        on_progress: ProgressCallback | None = None,
    ) -> Pending[StepResult]:
        """`effect/execute` without waiting: `.result()` answers the step
        result, `.cancel()` tears the command down (recorded CANCELLED)."""
        params = {"run_id": run_id, "request_id": request_id, "tool": tool, "input": dict(input)}
        return self._transport.request("effect/execute", params, _converter(StepResult.from_json), on_progress)

    def check(self, run_id: str, name: str, on_progress: ProgressCallback | None = None) -> StepResult:
        """`check/run`: runs a check given with `--check NAME=COMMAND`; the
        step result carries its `verifier` record."""
        return self.start_check(run_id, name, on_progress).result()

    def start_check(self, run_id: str, name: str, on_progress: ProgressCallback | None = None) -> Pending[StepResult]:
        """`check/run` without waiting (`.cancel()` tears it down)."""
        params = {"run_id": run_id, "name": name}
        return self._transport.request("check/run", params, _converter(StepResult.from_json), on_progress)

    def complete(self, run_id: str, answer: str, required: Iterable[str] = ()) -> Decision:
        """`run/complete`: may the run say it is done? The decision, recorded:
        its verdict, reasons, disclosures and the presented answer. The
        `required` paths are read by the decision itself."""
        params = {"run_id": run_id, "answer": answer, "required": list(required)}
        return self._call("run/complete", params, _converter(Decision.from_json))

    def decision(self, run_id: str) -> DecisionResult:
        """`run/decision`: the last decision this server took for the run, and
        whether something was recorded after it."""
        return self._call("run/decision", {"run_id": run_id}, _converter(DecisionResult.from_json))

    def annotate(self, run_id: str, text: str) -> AnnotateResult:
        """`run/annotate`: a decision over `text` that is not recorded: the
        text as it may be shown, with the disclosures it must carry."""
        return self._call("run/annotate", {"run_id": run_id, "text": text}, _converter(AnnotateResult.from_json))

    # -- running a tool of your own under a claim --------------------------

    @contextmanager
    def effect(
        self,
        run_id: str,
        request_id: str,
        tool: str,
        input: Mapping[str, Any],
        profile: str = "effects",
    ) -> Iterator[Effect]:
        """Claims the call; runs the block only if the claim's status is
        `"run"`, else raises `EffectRefused` with nothing run. Leaving the
        block settles the claim: exit code 0, or 1 when the block raised (the
        exception goes on). The settlement's step result is `.settled`::

            with ledger.effect(run_id, "call-1", "write_file", call) as effect:
                Path(root, call["path"]).write_text(call["content"])
            print(effect.settled.status)
        """
        claimed = self.claim(run_id, request_id, tool, input, profile)
        if not claimed.may_run:
            raise EffectRefused(claimed)
        handle = Effect(claimed)
        try:
            yield handle
        except BaseException as error:
            _settle_after_failure(self, run_id, request_id, error)
            raise
        handle.settled = self.settle(run_id, request_id, ran(0))

    def run_tool(
        self,
        run_id: str,
        request_id: str,
        tool: str,
        input: Mapping[str, Any],
        fn: Callable[[], T],
        profile: str = "effects",
    ) -> ToolRun[T]:
        """Claims the call and calls `fn()` only if the claim's status is
        `"run"`; settles it by how `fn` ended (exit code 0, or 1 when it
        raised, and the exception goes on). A refused or blocked claim is
        answered, not raised: `ToolRun.ran` is False and nothing was called."""
        claimed = self.claim(run_id, request_id, tool, input, profile)
        outcome: ToolRun[T] = ToolRun(claimed)
        if not claimed.may_run:
            return outcome
        try:
            outcome.value = fn()
        except BaseException as error:
            _settle_after_failure(self, run_id, request_id, error)
            raise
        outcome.settled = self.settle(run_id, request_id, ran(0))
        return outcome


def _settle_after_failure(ledger: Ledger, run_id: str, request_id: str, error: BaseException) -> None:
    """Settles a call whose runtime code raised, without hiding that error."""
    try:
        ledger.settle(run_id, request_id, ran(1))
    except Exception as settle_error:
        error.add_note(f"effect ledger: settling {request_id!r} failed too: {settle_error}")


def _identity(value: Any) -> Any:
    return value


def _as_object(value: Any) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _converter(from_json: Callable[[JsonObject], T]) -> Callable[[Any], T]:
    def convert(value: Any) -> T:
        return from_json(_as_object(value))

    return convert
