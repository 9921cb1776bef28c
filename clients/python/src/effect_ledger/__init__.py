"""The Python client of the effect ledger's `effects serve` (docs/serve.md):
durable claims before an agent's tools act, settled outcomes, readbacks and
one completion decision, over JSON-RPC 2.0 on stdio.

    from effect_ledger import Ledger

    with Ledger(root, data_dir) as ledger:
        run_id = ledger.begin_run().run.id
        ...

Adapters: `effect_ledger.langchain` (LangChain v1 agent middleware) and
`effect_ledger.openai_agents` (OpenAI Agents SDK function tools). They
import their framework only when imported.
"""

from .errors import EffectRefused, LedgerClosedError, LedgerError, LedgerProtocolError
from .ledger import CLIENT_VERSION, PROTOCOL_VERSION, Effect, Ledger, ToolRun, default_binary, ran
from .transport import Pending
from .types import (
    AnnotateResult,
    ClaimResult,
    Decision,
    DecisionResult,
    Facts,
    InitializeResult,
    Observation,
    Outcome,
    Progress,
    Reason,
    RunInfo,
    RunResult,
    StepResult,
    ToolResult,
    Verifier,
)

__version__ = CLIENT_VERSION

__all__ = [
    "AnnotateResult",
    "ClaimResult",
    "Decision",
    "DecisionResult",
    "Effect",
    "EffectRefused",
    "Facts",
    "InitializeResult",
    "Ledger",
    "LedgerClosedError",
    "LedgerError",
    "LedgerProtocolError",
    "Observation",
    "Outcome",
    "PROTOCOL_VERSION",
    "Pending",
    "Progress",
    "Reason",
    "RunInfo",
    "RunResult",
    "StepResult",
    "ToolResult",
    "ToolRun",
    "Verifier",
    "default_binary",
    "ran",
]
