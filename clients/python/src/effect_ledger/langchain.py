"""The effect ledger as LangChain v1 agent middleware.

`EffectLedgerMiddleware` claims every tool call before its tool runs (the
claim is durable first, EMB-1), lets the tool run only when the claim's
status is `"run"`, settles it by how the tool ended, and after the agent
asks the ledger whether the run may say it is done:

    from langchain.agents import create_agent
    from effect_ledger.langchain import EffectLedgerMiddleware

    middleware = EffectLedgerMiddleware(ledger, run_id, required=["hello.txt"])
    agent = create_agent(model, tools=[write_file], middleware=[middleware])
    agent.invoke({"messages": [...]})
    print(middleware.decision.verdict)

The claim names the tool call's `name` and `args` and uses its `id` as the
request id, so a tool whose name and arguments are a catalogued tool's
(`write_file` with `path` and `content`, ...) has its writes predicted and
read back; `to_ledger` maps other tools onto the catalogue. A tool the
catalogue does not know is an effect of unknown scope.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from .ledger import Ledger, ran
from .types import ClaimResult, Decision, JsonObject, StepResult

ToLedger = Callable[[str, dict[str, Any]], tuple[str, dict[str, Any]]]
"""Maps a tool call's (name, args) to the ledger's (tool, input)."""


class EffectLedgerState(AgentState[Any]):
    """The agent state with the ledger's decision, as `after_agent` left it."""

    effect_ledger_decision: NotRequired[JsonObject]


class EffectLedgerMiddleware(AgentMiddleware[EffectLedgerState, Any]):
    """Claims, settles and decides a LangChain agent's tool calls.

    - `wrap_tool_call`: claims the call (tool name, tool args, request id =
      the tool call id). Refused or blocked: answers a ToolMessage saying so
      (status "error") without calling the tool. Otherwise calls the tool
      and settles with exit code 0, or 1 when the tool raised or its
      ToolMessage has status "error".
    - `after_agent`: calls `run/complete` with the last AI message's text as
      the answer and `required`; the decision is kept in `decision` and put
      in the state as `effect_ledger_decision` (its JSON). With
      `present_answer`, the last AI message is replaced by the presented
      answer (the disclosures it must carry included).
    """

    state_schema = EffectLedgerState

    def __init__(
        self,
        ledger: Ledger,
        run_id: str,
        *,
        required: Iterable[str] = (),
        to_ledger: ToLedger | None = None,
        present_answer: bool = False,
    ) -> None:
        super().__init__()
        self.ledger = ledger
        self.run_id = run_id
        self.required = list(required)
        self.to_ledger = to_ledger
        self.present_answer = present_answer
        self.decision: Decision | None = None
        """The decision `after_agent` took, once it ran."""
        self.claims: dict[str, ClaimResult] = {}
        """Every claim, by request id (the tool call id)."""
        self.settlements: dict[str, StepResult] = {}
        """Every settlement's step result, by request id."""

    # -- tool calls --------------------------------------------------------

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        request_id, tool, args = self._describe(request)
        claim = self.ledger.claim(self.run_id, request_id, tool, args)
        self.claims[request_id] = claim
        if not claim.may_run:
            return _refusal(request, claim)
        try:
            result = handler(request)
        except BaseException:
            self.settlements[request_id] = self.ledger.settle(self.run_id, request_id, ran(1))
            raise
        self.settlements[request_id] = self.ledger.settle(self.run_id, request_id, ran(_exit_code(result, request)))
        return result

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        request_id, tool, args = self._describe(request)
        claim = await asyncio.to_thread(self.ledger.claim, self.run_id, request_id, tool, args)
        self.claims[request_id] = claim
        if not claim.may_run:
            return _refusal(request, claim)
        try:
            result = await handler(request)
        except BaseException:
            # Settled on this thread: a cancelled task must still record its outcome.
            self.settlements[request_id] = self.ledger.settle(self.run_id, request_id, ran(1))
            raise
        facts = ran(_exit_code(result, request))
        self.settlements[request_id] = await asyncio.to_thread(self.ledger.settle, self.run_id, request_id, facts)
        return result

    def _describe(self, request: ToolCallRequest) -> tuple[str, str, dict[str, Any]]:
        call = request.tool_call
        request_id = call.get("id") or f"langchain-{uuid.uuid4()}"
        name, args = call["name"], dict(call.get("args") or {})
        if self.to_ledger is not None:
            name, args = self.to_ledger(name, args)
        return request_id, name, args

    # -- the end of the agent ----------------------------------------------

    def after_agent(self, state: EffectLedgerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        decision = self.ledger.complete(self.run_id, _last_answer(state), self.required)
        return self._decided(state, decision)

    async def aafter_agent(self, state: EffectLedgerState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        decision = await asyncio.to_thread(self.ledger.complete, self.run_id, _last_answer(state), self.required)
        return self._decided(state, decision)

    def _decided(self, state: EffectLedgerState, decision: Decision) -> dict[str, Any]:
        self.decision = decision
        update: dict[str, Any] = {"effect_ledger_decision": decision.raw}
        last = _last_ai_message(state)
        if self.present_answer and last is not None and last.id is not None:
            # add_messages replaces the message with the same id.
            update["messages"] = [AIMessage(content=decision.answer, id=last.id)]
        return update


def _refusal(request: ToolCallRequest, claim: ClaimResult) -> ToolMessage:
    call = request.tool_call
    return ToolMessage(
        content=(
            f"Not run: the effect ledger answered {claim.status!r} to this call"
            f" ({claim.reason or 'no reason given'}). Nothing was changed."
        ),
        tool_call_id=call.get("id") or "",
        name=call.get("name"),
        status="error",
    )


def _exit_code(result: ToolMessage | Command[Any], request: ToolCallRequest) -> int:
    """1 when the tool's answer is an error ToolMessage, else 0."""
    if isinstance(result, ToolMessage):
        return 1 if result.status == "error" else 0
    update = getattr(result, "update", None)
    messages = update.get("messages", []) if isinstance(update, Mapping) else []
    call_id = request.tool_call.get("id")
    for message in messages:
        if isinstance(message, ToolMessage) and message.tool_call_id == call_id and message.status == "error":
            return 1
    return 0


def _last_ai_message(state: Mapping[str, Any]) -> AIMessage | None:
    for message in reversed(state.get("messages", [])):
        if isinstance(message, AIMessage):
            return message
    return None


def _last_answer(state: Mapping[str, Any]) -> str:
    message = _last_ai_message(state)
    return str(message.text) if message is not None else ""
