"""The exceptions of the effect ledger client.

Domain answers (a refused or blocked claim, a FAILED decision) are results,
never exceptions (EMB-2). These are raised only when a message was wrong
(`LedgerProtocolError`), when the server is gone (`LedgerClosedError`), or
when code asked to run an effect the ledger did not let run
(`EffectRefused`, from `Ledger.effect`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .types import ClaimResult


class LedgerError(Exception):
    """Base class of the client's exceptions."""


class LedgerProtocolError(LedgerError):
    """A JSON-RPC error answer: the request itself was wrong (docs/serve.md,
    "Errors"). `code` is the JSON-RPC error code, `data` its data."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    UNKNOWN_RUN = -32001
    NOT_INITIALIZED = -32002
    SHUTTING_DOWN = -32003

    def __init__(self, code: int, message: str, data: Any = None, method: str | None = None) -> None:
        where = f"{method}: " if method else ""
        super().__init__(f"{where}{message} (JSON-RPC error {code})")
        self.code = code
        self.message = message
        self.data = data
        self.method = method


class LedgerClosedError(LedgerError):
    """The server is gone: it exited, could not start, or was closed."""

    def __init__(self, message: str, returncode: int | None = None, stderr: str = "") -> None:
        tail = stderr.strip()
        super().__init__(f"{message}\n{tail}" if tail else message)
        self.returncode = returncode
        self.stderr = stderr


class EffectRefused(LedgerError):
    """`Ledger.effect` was refused a claim (status `refused` or `blocked`):
    nothing was run. `claim` is the ledger's answer."""

    def __init__(self, claim: ClaimResult) -> None:
        super().__init__(f"the effect ledger answered {claim.status!r}: {claim.reason or 'no reason given'}")
        self.claim = claim
        self.status = claim.status
        self.reason = claim.reason
