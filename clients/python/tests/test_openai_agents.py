"""OpenAI Agents SDK adapter tests: an `Agent` with a scripted `Model`
(a `write_file` function call, then a final message), run offline by
`Runner.run` with tracing disabled, whose `write_file` tool (wrapped by
`ledger_tool`) really writes beneath the root, against the real
`effects serve`.
"""

from __future__ import annotations

import asyncio
import json
import unittest
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, Model, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from support import LedgerTestCase

from effect_ledger.openai_agents import LedgerToolRecord, complete_run, ledger_tool


class ScriptedModel(Model):
    """A `Model` that answers the scripted outputs in turn, offline."""

    def __init__(self, *turns: list[Any]) -> None:
        self.turns = list(turns)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


def function_call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc-{call_id}", call_id=call_id, type="function_call", name=name, arguments=json.dumps(arguments)
    )


def message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg-1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def write_file_tool(root: Path, sabotage: bool = False, fail: bool = False) -> FunctionTool:
    """The agent's `write_file`: writes beneath `root` (other bytes when
    sabotaged; raises when failing)."""

    @function_tool
    def write_file(path: str, content: str) -> str:
        """Write a whole file beneath the root."""
        if fail:
            raise OSError("the disk is gone")
        (root / path).write_text("sabotaged bytes\n" if sabotage else content)
        return f"wrote {path}"

    return write_file


class OpenAIAgentsSDK(LedgerTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        set_tracing_disabled(True)

    def run_agent(self, path: str = "hello.txt", **tool_options: bool):
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        record = LedgerToolRecord()
        model = ScriptedModel(
            [function_call("write_file", {"path": path, "content": "hello, ledger\n"}, "call-1")],
            [message("I wrote hello.txt.")],
        )
        agent = Agent(
            name="writer",
            instructions="Write the files you are asked for.",
            model=model,
            tools=[ledger_tool(ledger, run_id, write_file_tool(self.root, **tool_options), record=record)],
        )
        result = asyncio.run(Runner.run(agent, "Write hello.txt saying hello, ledger."))
        decision = complete_run(ledger, run_id, result, required=["hello.txt"] if path == "hello.txt" else [])
        return result, decision, record, run_id

    def test_a_good_tool_is_claimed_before_its_outcome_and_completes(self) -> None:
        result, decision, record, run_id = self.run_agent()
        self.assertEqual(result.final_output, "I wrote hello.txt.")
        self.assertEqual((self.root / "hello.txt").read_text(), "hello, ledger\n")
        records = self.log_records(run_id)
        claim = next(r for r in records if r["kind"] == "claim")
        self.assertEqual(claim["record"]["claim"]["operation"]["request_id"], "call-1")
        outcome = next(r for r in records if r["kind"] == "outcome" and r["claim"] == claim["position"])
        self.assertLess(claim["position"], outcome["position"])
        self.assertEqual(outcome["execution"], "REPORTED_SUCCESS")
        self.assertEqual(record.settlements["call-1"].status, "RAN")
        self.assertEqual(decision.verdict, "COMPLETED", decision.raw)

    def test_a_sabotaged_tool_does_not_complete(self) -> None:
        _result, decision, _record, _run_id = self.run_agent(sabotage=True)
        self.assertNotEqual(decision.verdict, "COMPLETED", decision.raw)
        self.assertEqual(decision.verdict, "FAILED", decision.raw)
        self.assertIn("CONTRADICTED", {a.get("assessment") for a in decision.assessments}, decision.raw)

    def test_a_tool_that_raises_is_settled_failed_and_the_model_told(self) -> None:
        result, decision, record, run_id = self.run_agent(fail=True)
        outputs = [item.output for item in result.new_items if item.type == "tool_call_output_item"]
        self.assertEqual(outputs, ["An error occurred while running the tool. Please try again."])
        settled = record.settlements["call-1"]
        assert settled.outcome is not None
        self.assertEqual(settled.outcome.execution, "FAILED", settled.raw)
        self.assertNotEqual(decision.verdict, "COMPLETED", decision.raw)

    def test_a_refused_call_never_reaches_the_tool(self) -> None:
        result, _decision, record, _run_id = self.run_agent(path="../outside.txt")
        self.assertFalse((self.root.parent / "outside.txt").exists())
        self.assertEqual(record.claims["call-1"].status, "refused")
        self.assertNotIn("call-1", record.settlements)
        outputs = [item.output for item in result.new_items if item.type == "tool_call_output_item"]
        self.assertEqual(len(outputs), 1)
        self.assertIn("refused", outputs[0])


if __name__ == "__main__":
    unittest.main()
