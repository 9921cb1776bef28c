"""The JSON-RPC 2.0 transport to an `effects serve` process: one JSON
message per line on its stdin and stdout.

A reader thread reads the server's answers and matches them to requests by
id (requests may be pipelined and answered out of order), hands
`notifications/progress` to the callback of the request whose progress
token it names, and, when the server goes away, fails every request still
waiting. Another thread drains stderr, keeping its tail for error messages.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import IO, Any, Generic, Literal, TypeVar

from .errors import LedgerClosedError, LedgerProtocolError
from .types import JsonObject, Progress

log = logging.getLogger("effect_ledger")

T = TypeVar("T")

Direction = Literal["send", "receive"]
MessageHook = Callable[[Direction, JsonObject], None]
"""Sees every message both ways, as parsed JSON (for tracing and tests)."""

ProgressCallback = Callable[[Progress], None]

_STDERR_TAIL = 64 * 1024


class Pending(Generic[T]):
    """A request in flight: its id (for cancellation) and, later, its answer."""

    def __init__(
        self,
        transport: Transport,
        request_id: int,
        method: str,
        convert: Callable[[Any], T],
    ) -> None:
        self.id = request_id
        self.method = method
        self._transport = transport
        self._convert = convert
        self._future: Future[Any] = Future()

    def result(self, timeout: float | None = None) -> T:
        """Waits for the answer; a JSON-RPC error raises `LedgerProtocolError`,
        a server that went away `LedgerClosedError`, a timeout `TimeoutError`
        (the request stays in flight)."""
        try:
            raw = self._future.result(timeout)
        except FutureTimeout:
            raise TimeoutError(f"{self.method} (request {self.id}) did not answer in {timeout} s") from None
        return self._convert(raw)

    def done(self) -> bool:
        """Whether the answer (or the error) has come."""
        return self._future.done()

    def cancel(self, reason: str | None = None) -> None:
        """Sends `notifications/cancelled` for this request. A running
        `effect/execute` or `check/run` is torn down and recorded CANCELLED;
        the request still answers with its step result."""
        if not self._future.done():
            self._transport.cancel(self.id, reason)


class _Waiting:
    __slots__ = ("future", "method", "on_progress")

    def __init__(self, future: Future[Any], method: str, on_progress: ProgressCallback | None) -> None:
        self.future = future
        self.method = method
        self.on_progress = on_progress


class Transport:
    """One `effects serve` process and the JSON-RPC conversation with it."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stderr: Literal["pipe", "inherit"] = "pipe",
        on_message: MessageHook | None = None,
    ) -> None:
        self.argv = list(argv)
        self._on_message = on_message
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._waiting: dict[int, _Waiting] = {}
        self._next_id = 1
        self._closed: LedgerClosedError | None = None
        self._stderr_tail = bytearray()
        try:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if stderr == "pipe" else None,
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
        except OSError as error:
            raise LedgerClosedError(f"could not start {self.argv[0]!r}: {error}") from error
        assert self.process.stdin is not None and self.process.stdout is not None
        self._stdin: IO[bytes] = self.process.stdin
        self._stderr_reader: threading.Thread | None = None
        if self.process.stderr is not None:
            self._stderr_reader = threading.Thread(
                target=self._drain, args=(self.process.stderr,), name="effects-serve-stderr", daemon=True
            )
            self._stderr_reader.start()
        self._reader = threading.Thread(
            target=self._read, args=(self.process.stdout,), name="effects-serve-reader", daemon=True
        )
        self._reader.start()

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.process.pid

    @property
    def stderr_tail(self) -> str:
        """The last 64 KiB the server wrote to stderr (when it is piped)."""
        with self._lock:
            return self._stderr_tail.decode("utf-8", "replace")

    def request(
        self,
        method: str,
        params: Mapping[str, Any],
        convert: Callable[[Any], T],
        on_progress: ProgressCallback | None = None,
    ) -> Pending[T]:
        """Sends a request and answers at once with its `Pending`."""
        with self._lock:
            if self._closed is not None:
                raise self._closed
            request_id = self._next_id
            self._next_id += 1
            pending = Pending(self, request_id, method, convert)
            self._waiting[request_id] = _Waiting(pending._future, method, on_progress)
        body: JsonObject = dict(params)
        if on_progress is not None:
            body["_meta"] = {**body.get("_meta", {}), "progressToken": request_id}
        try:
            self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": body})
        except BaseException:
            with self._lock:
                self._waiting.pop(request_id, None)
            raise
        return pending

    def notify(self, method: str, params: Mapping[str, Any]) -> None:
        """Sends a notification (no answer)."""
        self._send({"jsonrpc": "2.0", "method": method, "params": dict(params)})

    def cancel(self, request_id: int, reason: str | None = None) -> None:
        """Sends `notifications/cancelled` for a request in flight."""
        params: JsonObject = {"requestId": request_id}
        if reason is not None:
            params["reason"] = reason
        self.notify("notifications/cancelled", params)

    def close_stdin(self) -> None:
        """Closes the server's stdin (it reads end of input)."""
        with self._write_lock:
            try:
                self._stdin.close()
            except OSError:
                pass

    def wait(self, timeout: float | None = None) -> int:
        """Waits for the server to exit and for the reader threads to finish."""
        returncode = self.process.wait(timeout)
        self._reader.join(timeout)
        if self._stderr_reader is not None:
            self._stderr_reader.join(timeout)
        return returncode

    def kill(self) -> None:
        """Kills the server (SIGKILL) and reaps it."""
        if self.process.poll() is None:
            self.process.kill()
        self.close_stdin()
        self.wait()

    # -- internals ---------------------------------------------------------

    def _send(self, message: JsonObject) -> None:
        if self._on_message is not None:
            self._on_message("send", message)
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        with self._write_lock:
            try:
                self._stdin.write(line)
                self._stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as error:
                raise self._gone(f"could not write to the server: {error}") from error

    def _gone(self, message: str) -> LedgerClosedError:
        """The error for a server that went away, with its exit status and the
        tail of its stderr (given a moment to arrive)."""
        try:
            returncode: int | None = self.process.wait(1)
        except subprocess.TimeoutExpired:
            returncode = None
        if self._stderr_reader is not None and returncode is not None:
            self._stderr_reader.join(1)
        if returncode is not None:
            message = f"{message} (the server exited with status {returncode})"
        return LedgerClosedError(message, returncode, self.stderr_tail)

    def _read(self, stdout: IO[bytes]) -> None:
        try:
            for line in stdout:
                if line.strip():
                    self._dispatch(line)
        except (OSError, ValueError) as error:
            log.warning("reading the server's stdout failed: %s", error)
        finally:
            stdout.close()
            # The server closed its stdout: whatever still waits never gets an answer.
            closed = self._gone("the server closed its output")
            with self._lock:
                self._closed = closed
                waiting, self._waiting = self._waiting, {}
            for entry in waiting.values():
                entry.future.set_exception(closed)

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            log.warning("the server wrote a line that is not JSON: %r", line[:200])
            return
        if not isinstance(message, dict):
            log.warning("the server wrote a message that is not an object: %r", line[:200])
            return
        if self._on_message is not None:
            try:
                self._on_message("receive", message)
            except Exception:  # a hook must not stop the conversation
                log.exception("the on_message hook failed")
        if "method" in message:
            self._notification(message)
            return
        request_id = message.get("id")
        with self._lock:
            entry = self._waiting.pop(request_id, None) if isinstance(request_id, int) else None
        if entry is None:
            log.warning("an answer matches no request in flight: %r", line[:200])
            return
        error = message.get("error")
        if isinstance(error, dict):
            entry.future.set_exception(
                LedgerProtocolError(
                    int(error.get("code", 0)), str(error.get("message", "")), error.get("data"), entry.method
                )
            )
        else:
            entry.future.set_result(message.get("result"))

    def _notification(self, message: JsonObject) -> None:
        if message.get("method") != "notifications/progress":
            log.debug("ignored a message from the server: %s", message.get("method"))
            return
        params = message.get("params")
        if not isinstance(params, dict):
            return
        token = params.get("progressToken")
        with self._lock:
            entry = self._waiting.get(token) if isinstance(token, int) else None
        if entry is not None and entry.on_progress is not None:
            try:
                entry.on_progress(params)  # type: ignore[arg-type]
            except Exception:
                log.exception("a progress callback failed")

    def _drain(self, stderr: IO[bytes]) -> None:
        read = getattr(stderr, "read1", stderr.read)
        try:
            while chunk := read(4096):
                with self._lock:
                    self._stderr_tail += chunk
                    del self._stderr_tail[:-_STDERR_TAIL]
        except (OSError, ValueError):
            pass
        finally:
            stderr.close()
