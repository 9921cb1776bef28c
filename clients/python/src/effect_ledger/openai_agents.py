"""The effect ledger for the OpenAI Agents SDK (`openai-agents`).

`ledger_tool(ledger, run_id, tool)` answers a copy of a `FunctionTool`
whose invocation claims the call first (tool name, parsed arguments,
request id = the model's tool call id), invokes the original only when the
claim's status is `"run"`, and settles it by how the original ended:

    from agents import Agent, Runner, function_tool
    from effect_ledger.openai_agents import complete_run, ledger_tool

    @function_tool
    def write_file(path: str, content: str) -> str: ...

    agent = Agent(name="writer", tools=[ledger_tool(ledger, run_id, write_file)])
    result = await Runner.run(agent, "Write hello.txt")
    decision = complete_run(ledger, run_id, result, required=["hello.txt"])

A refused or blocked claim answers the model a message saying so, and the
original is not invoked. The original's failure policy is kept: a tool
made by `function_tool` (whose default turns an exception into a message
for the model) is settled with exit code 1 when it raised, then its
message is answered as before.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import Any

from agents import FunctionTool, RunResult
from agents.tool_context import ToolContext

from .ledger import Ledger, ran
from .types import ClaimResult, Decision, StepResult

try:  # the SDK's own hooks for tool wrappers (agents.tool, 0.4 and later)
    from agents.tool import maybe_invoke_function_tool_failure_error_function as _format_failure
    from agents.tool import set_function_tool_failure_error_function as _set_failure_policy
except ImportError:  # pragma: no cover - an SDK without them: exceptions are seen only when they escape
    _format_failure = None  # type: ignore[assignment]
    _set_failure_policy = None  # type: ignore[assignment]

ToLedger = Callable[[str, dict[str, Any]], tuple[str, dict[str, Any]]]
"""Maps a tool call's (name, arguments) to the ledger's (tool, input)."""


class LedgerToolRecord:
    """What a ledgered tool claimed and settled, by request id (tool call id)."""

    def __init__(self) -> None:
        self.claims: dict[str, ClaimResult] = {}
        self.settlements: dict[str, StepResult] = {}


def ledger_tool(
    ledger: Ledger,
    run_id: str,
    tool: FunctionTool,
    *,
    to_ledger: ToLedger | None = None,
    record: LedgerToolRecord | None = None,
) -> FunctionTool:
    """A copy of `tool` whose every invocation is claimed before the original
    runs and settled after it (see the module's docstring). `record`, when
    given, collects the claims and settlements."""
    raw = _raising_copy(tool)

    async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        request_id = ctx.tool_call_id
        try:
            args = json.loads(arguments) if arguments else {}
        except ValueError:
            args = {"arguments": arguments}
        name = tool.name
        if not isinstance(args, dict):
            args = {"arguments": args}
        if to_ledger is not None:
            name, args = to_ledger(name, args)
        claim = await asyncio.to_thread(ledger.claim, run_id, request_id, name, args)
        if record is not None:
            record.claims[request_id] = claim
        if not claim.may_run:
            return (
                f"Not run: the effect ledger answered {claim.status!r} to this call"
                f" ({claim.reason or 'no reason given'}). Nothing was changed."
            )
        try:
            output = await raw.on_invoke_tool(ctx, arguments)
        except BaseException as error:
            # Settled on this thread: a cancelled task must still record its outcome.
            cancelled = isinstance(error, asyncio.CancelledError)
            facts = {**ran(None if cancelled else 1), "cancelled": cancelled}
            settled = ledger.settle(run_id, request_id, facts)
            if record is not None:
                record.settlements[request_id] = settled
            if raw is tool or _format_failure is None or cancelled or not isinstance(error, Exception):
                raise
            message = await _format_failure(function_tool=tool, context=ctx, error=error)
            if message is None:
                raise
            return message
        settled = await asyncio.to_thread(ledger.settle, run_id, request_id, ran(0))
        if record is not None:
            record.settlements[request_id] = settled
        return output

    return dataclasses.replace(tool, on_invoke_tool=invoke)


def ledger_tools(
    ledger: Ledger,
    run_id: str,
    tools: Iterable[FunctionTool],
    *,
    to_ledger: ToLedger | None = None,
    record: LedgerToolRecord | None = None,
) -> list[FunctionTool]:
    """`ledger_tool` for each of `tools`."""
    return [ledger_tool(ledger, run_id, tool, to_ledger=to_ledger, record=record) for tool in tools]


def complete_run(ledger: Ledger, run_id: str, result: RunResult, required: Iterable[str] = ()) -> Decision:
    """`run/complete` with the run's final output as the answer: the
    decision, whose `answer` is what the agent may show."""
    output = result.final_output
    answer = output if isinstance(output, str) else json.dumps(output, default=str)
    return ledger.complete(run_id, answer, required)


def _raising_copy(tool: FunctionTool) -> FunctionTool:
    """A copy of `tool` whose invocation raises what the function raised
    instead of turning it into a message, so the wrapper sees a failure.
    `tool` itself when the SDK cannot make one."""
    if _set_failure_policy is None:
        return tool
    copy = dataclasses.replace(tool)
    _set_failure_policy(copy, None)
    return copy
