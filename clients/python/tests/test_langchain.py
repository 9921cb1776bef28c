"""LangChain v1 adapter tests: a `create_agent` agent driven by a scripted
`GenericFakeChatModel` (a `write_file` tool call, then a final answer)
whose `write_file` tool really writes beneath the root, with
`EffectLedgerMiddleware` installed, against the real `effects serve`.
"""

from __future__ import annotations

import asyncio
import unittest
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from support import LedgerTestCase

from effect_ledger.langchain import EffectLedgerMiddleware


class ToolCallingFakeModel(GenericFakeChatModel):
    """GenericFakeChatModel with tools bound as a no-op (its replies are
    scripted), as langchain's own tests do with their fake models."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFakeModel:  # type: ignore[override]
        return self


def scripted_model(path: str, content: str, answer: str) -> ToolCallingFakeModel:
    call = {"name": "write_file", "args": {"path": path, "content": content}, "id": "call-1", "type": "tool_call"}
    return ToolCallingFakeModel(messages=iter([AIMessage(content="", tool_calls=[call]), AIMessage(content=answer)]))


def write_file_tool(root: Path, sabotage: bool = False) -> BaseTool:
    """The agent's `write_file`: writes beneath `root` (other bytes when sabotaged)."""

    @tool
    def write_file(path: str, content: str) -> str:
        """Write a whole file beneath the root."""
        (root / path).write_text("sabotaged bytes\n" if sabotage else content)
        return f"wrote {path}"

    return write_file


class LangChainAgent(LedgerTestCase):
    def run_agent(self, sabotage: bool = False, path: str = "hello.txt") -> tuple[EffectLedgerMiddleware, dict, str]:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        middleware = EffectLedgerMiddleware(ledger, run_id, required=[path] if not path.startswith("..") else [])
        agent = create_agent(
            scripted_model(path, "hello, ledger\n", "I wrote hello.txt."),
            tools=[write_file_tool(self.root, sabotage)],
            middleware=[middleware],
        )
        state = agent.invoke({"messages": [HumanMessage("Write hello.txt saying hello, ledger.")]})
        return middleware, state, run_id

    def test_a_good_tool_is_claimed_before_its_outcome_and_completes(self) -> None:
        middleware, state, run_id = self.run_agent()
        self.assertEqual((self.root / "hello.txt").read_text(), "hello, ledger\n")

        records = self.log_records(run_id)
        claim = next(r for r in records if r["kind"] == "claim")
        self.assertEqual(claim["record"]["claim"]["operation"]["request_id"], "call-1")
        self.assertEqual(claim["record"]["claim"]["operation"]["tool"], "write_file")
        outcome = next(r for r in records if r["kind"] == "outcome" and r["claim"] == claim["position"])
        self.assertLess(claim["position"], outcome["position"])
        self.assertEqual(outcome["execution"], "REPORTED_SUCCESS")

        assert middleware.decision is not None
        self.assertEqual(middleware.decision.verdict, "COMPLETED", middleware.decision.raw)
        self.assertEqual(state["effect_ledger_decision"]["verdict"], "COMPLETED")
        self.assertEqual(state["messages"][-1].content, "I wrote hello.txt.")

    def test_a_sabotaged_tool_does_not_complete(self) -> None:
        middleware, _state, _run_id = self.run_agent(sabotage=True)
        self.assertEqual((self.root / "hello.txt").read_text(), "sabotaged bytes\n")
        assert middleware.decision is not None
        self.assertNotEqual(middleware.decision.verdict, "COMPLETED", middleware.decision.raw)
        self.assertEqual(middleware.decision.verdict, "FAILED", middleware.decision.raw)
        assessments = {a.get("assessment") for a in middleware.decision.assessments}
        self.assertIn("CONTRADICTED", assessments, middleware.decision.raw)

    def test_a_refused_call_never_reaches_the_tool(self) -> None:
        middleware, state, _run_id = self.run_agent(path="../outside.txt")
        self.assertFalse((self.root.parent / "outside.txt").exists())
        refusal = next(m for m in state["messages"] if isinstance(m, ToolMessage))
        self.assertEqual(refusal.status, "error")
        self.assertIn("refused", refusal.content)
        self.assertEqual(middleware.claims["call-1"].status, "refused")
        self.assertNotIn("call-1", middleware.settlements)

    def test_the_async_path(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        middleware = EffectLedgerMiddleware(ledger, run_id, required=["hello.txt"], present_answer=True)
        agent = create_agent(
            scripted_model("hello.txt", "hello, ledger\n", "I wrote hello.txt."),
            tools=[write_file_tool(self.root)],
            middleware=[middleware],
        )
        state = asyncio.run(agent.ainvoke({"messages": [HumanMessage("Write hello.txt.")]}))
        assert middleware.decision is not None
        self.assertEqual(middleware.decision.verdict, "COMPLETED", middleware.decision.raw)
        self.assertEqual(state["messages"][-1].content, middleware.decision.answer)


if __name__ == "__main__":
    unittest.main()
