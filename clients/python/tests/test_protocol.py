"""Protocol tests of the Python client against the real `effects serve`:
claims and settlements, host-run tools, pipelining, duplicates, crash
recovery, two servers on one run, errors, cancellation, the context
manager and `run_tool`. Every message both ways is validated against
docs/serve.schema.json by the tests' tap (support.SchemaTap).
"""

from __future__ import annotations

import hashlib
import threading
import time
import unittest

from support import LedgerTestCase, write_file_input

from effect_ledger import EffectRefused, LedgerProtocolError, Progress, ran


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class ClaimSettleComplete(LedgerTestCase):
    def test_initialize_describes_the_server(self) -> None:
        ledger = self.open_ledger(checks={"ok": "true"})
        self.assertEqual(ledger.server.protocol_version, "1")
        self.assertIn("effects", ledger.server.profiles)
        self.assertEqual(ledger.server.checks, ["ok"])
        self.assertIn("write_file", [tool["name"] for tool in ledger.server.tools])
        self.assertTrue(ledger.server.policies)

    def test_a_runtime_run_write_is_claimed_settled_read_back_and_completes(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        call = write_file_input("hello.txt", "hello, ledger\n")

        claim = ledger.claim(run_id, "call-1", "write_file", call)
        self.assertEqual(claim.status, "run")
        self.assertIsNotNone(claim.claim)
        self.assertFalse(claim.duplicate)

        (self.root / "hello.txt").write_text(call["content"])
        step = ledger.settle(run_id, "call-1", ran(0))
        self.assertEqual(step.status, "RAN", step.raw)
        self.assertEqual(step.claim, claim.claim)
        assert step.outcome is not None
        self.assertEqual(step.outcome.execution, "REPORTED_SUCCESS")
        read_back = [o for o in step.observations if o.path == "hello.txt"]
        self.assertTrue(read_back, step.raw)
        self.assertEqual(read_back[-1].content_sha256, sha256(call["content"]))

        decision = ledger.complete(run_id, "I wrote hello.txt.", required=["hello.txt"])
        self.assertEqual(decision.verdict, "COMPLETED", decision.raw)
        self.assertIsNotNone(decision.recorded)

        last = ledger.decision(run_id)
        assert last.decision is not None
        self.assertEqual(last.decision.verdict, "COMPLETED")
        self.assertFalse(last.stale)

    def test_a_sabotaged_backend_never_completes(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        call = write_file_input("hello.txt", "hello, ledger\n")
        self.assertEqual(ledger.claim(run_id, "call-1", "write_file", call).status, "run")

        (self.root / "hello.txt").write_text("something else entirely\n")
        step = ledger.settle(run_id, "call-1", ran(0))
        self.assertEqual(step.status, "RAN", step.raw)

        decision = ledger.complete(run_id, "I wrote hello.txt.", required=["hello.txt"])
        self.assertNotEqual(decision.verdict, "COMPLETED", decision.raw)
        self.assertEqual(decision.verdict, "FAILED", decision.raw)
        self.assertIn("CONTRADICTED", {a.get("assessment") for a in decision.assessments}, decision.raw)

    def test_a_duplicate_claim_answers_the_first(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        call = write_file_input("a.txt", "a\n")
        first = ledger.claim(run_id, "call-1", "write_file", call)
        second = ledger.claim(run_id, "call-1", "write_file", call)
        self.assertEqual(first.status, "run")
        self.assertFalse(first.duplicate)
        self.assertTrue(second.duplicate, second.raw)
        self.assertEqual(second.claim, first.claim)
        self.assertEqual(second.action_id, first.action_id)
        claims = [r for r in self.log_records(run_id) if r["kind"] == "claim"]
        self.assertEqual(len(claims), 1)

    def test_settling_twice_answers_the_first_outcome(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        call = write_file_input("a.txt", "a\n")
        ledger.claim(run_id, "call-1", "write_file", call)
        (self.root / "a.txt").write_text("a\n")
        first = ledger.settle(run_id, "call-1", ran(0))
        records = len(self.log_records(run_id))
        again = ledger.settle(run_id, "call-1", ran(0))
        assert first.outcome is not None and again.outcome is not None
        self.assertEqual(again.outcome.position, first.outcome.position)
        self.assertEqual(len(self.log_records(run_id)), records)

    def test_a_refused_claim_is_an_answer_and_runs_nothing(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        claim = ledger.claim(run_id, "escape", "write_file", write_file_input("../outside.txt", "no"))
        self.assertEqual(claim.status, "refused", claim.raw)
        self.assertTrue(claim.reason)

        with self.assertRaises(EffectRefused) as refused:
            with ledger.effect(run_id, "escape-2", "write_file", write_file_input("../outside.txt", "no")):
                self.fail("the block of a refused effect ran")
        self.assertEqual(refused.exception.status, "refused")

        called = []
        outcome = ledger.run_tool(
            run_id, "escape-3", "write_file", write_file_input("../outside.txt", "no"), lambda: called.append(1)
        )
        self.assertFalse(outcome.ran)
        self.assertEqual(called, [])
        self.assertIsNone(outcome.settled)


class HostRunTools(LedgerTestCase):
    def test_execute_write_file_and_bash(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)

        wrote = ledger.execute(run_id, "w", "write_file", write_file_input("notes.txt", "from the host\n"))
        self.assertEqual(wrote.status, "RAN", wrote.raw)
        self.assertTrue(wrote.result.ok, wrote.raw)
        self.assertEqual((self.root / "notes.txt").read_text(), "from the host\n")
        assert wrote.outcome is not None
        self.assertEqual(wrote.outcome.execution, "REPORTED_SUCCESS", wrote.raw)

        echoed = ledger.execute(run_id, "b", "bash", {"command": "echo hi"})
        self.assertEqual(echoed.status, "RAN", echoed.raw)
        self.assertEqual(echoed.result.exit_code, 0, echoed.raw)
        self.assertEqual(echoed.result.stdout, "hi\n")
        assert echoed.outcome is not None
        self.assertEqual(echoed.outcome.cleanup, "CLEAN", echoed.raw)

    def test_pipelined_requests_are_answered_out_of_order(self) -> None:
        ledger = self.open_ledger()
        tap = self.taps[-1]
        run_id = self.begin(ledger)
        progress: list[Progress] = []
        sleeping = ledger.start_execute(run_id, "sleep", "bash", {"command": "sleep 2"}, on_progress=progress.append)
        started = time.monotonic()
        claim = ledger.claim(run_id, "quick", "write_file", write_file_input("q.txt", "q\n"))
        self.assertEqual(claim.status, "run")
        self.assertFalse(sleeping.done(), "the claim waited for the command")
        self.assertLess(time.monotonic() - started, 1.5)

        step = sleeping.result(timeout=30)
        self.assertEqual(step.status, "RAN", step.raw)
        self.assertEqual(step.result.exit_code, 0)
        answers = [m["id"] for direction, m in tap.messages if direction == "receive" and "id" in m]
        self.assertLess(answers.index(self._claim_id(tap)), answers.index(sleeping.id))
        self.assertTrue(progress, "no notifications/progress for a request with a progress token")
        self.assertTrue(all(p["progressToken"] == sleeping.id for p in progress))

    def _claim_id(self, tap) -> int:  # the id of the one effect/claim request
        return next(m["id"] for d, m in tap.messages if d == "send" and m.get("method") == "effect/claim")

    def test_cancelling_an_execute_records_it_cancelled(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        pending = ledger.start_execute(run_id, "long", "bash", {"command": "sleep 30"})
        time.sleep(0.5)
        pending.cancel("the test gave up")
        step = pending.result(timeout=20)
        assert step.outcome is not None
        self.assertEqual(step.outcome.execution, "CANCELLED", step.raw)

    def test_a_check_is_a_verifier_step(self) -> None:
        ledger = self.open_ledger(checks={"ok": "true", "broken": "false"})
        run_id = self.begin(ledger)
        passed = ledger.check(run_id, "ok")
        assert passed.verifier is not None
        self.assertTrue(passed.verifier.passed, passed.raw)
        failed = ledger.check(run_id, "broken")
        assert failed.verifier is not None
        self.assertFalse(failed.verifier.passed, failed.raw)
        self.assertEqual(ledger.complete(run_id, "Done.").verdict, "FAILED")


class Processes(LedgerTestCase):
    def test_a_server_killed_between_claim_and_settle_leaves_the_claim_to_the_live_runtime(self) -> None:
        # LOG-7 (SPEC 14): the claim's executor is this process, the runtime
        # that spawned the server, never the relaying server.
        first = self.open_ledger()
        run_id = self.begin(first)
        call = write_file_input("hello.txt", "hello\n")
        claim = first.claim(run_id, "call-1", "write_file", call)
        self.assertEqual(claim.status, "run")
        (self.root / "hello.txt").write_text("hello\n")
        first.kill()  # SIGKILL: no settle, no shutdown

        second = self.open_ledger()
        continued = second.continue_run(run_id)
        self.assertIsNotNone(continued.run, continued.reason)
        # In flight while the runtime lives: not recovered, not COMPLETED.
        decision = second.complete(run_id, "I wrote hello.txt.", required=["hello.txt"])
        self.assertNotEqual(decision.verdict, "COMPLETED", decision.raw)
        outcomes = [r for r in self.log_records(run_id) if r["kind"] == "outcome" and r.get("claim") == claim.claim]
        self.assertEqual(outcomes, [], "a live runtime's claim is never recovered INTERRUPTED")
        # The runtime settles it through the next server.
        step = second.settle(run_id, "call-1", ran(0), tool="write_file", input=call)
        self.assertEqual(step.status, "RAN", step.raw)
        self.assertEqual(second.complete(run_id, "I wrote hello.txt.", required=["hello.txt"]).verdict, "COMPLETED")

    def test_two_servers_on_one_run(self) -> None:
        a = self.open_ledger()
        b = self.open_ledger()
        run_id = self.begin(a)
        call = write_file_input("shared.txt", "claimed in A, settled in B\n")
        claim = a.claim(run_id, "call-1", "write_file", call)
        self.assertEqual(claim.status, "run")
        (self.root / "shared.txt").write_text(call["content"])

        continued = b.continue_run(run_id)
        self.assertIsNotNone(continued.run, continued.reason)
        step = b.settle(run_id, "call-1", ran(0), tool="write_file", input=call)
        self.assertEqual(step.status, "RAN", step.raw)
        self.assertEqual(step.claim, claim.claim)
        self.assertEqual(b.complete(run_id, "Done.", required=["shared.txt"]).verdict, "COMPLETED")

    def test_a_settlement_with_another_input_than_the_claim_is_not_taken(self) -> None:
        a = self.open_ledger()
        b = self.open_ledger()
        run_id = self.begin(a)
        call = write_file_input("shared.txt", "the claimed content\n")
        a.claim(run_id, "call-1", "write_file", call)
        b.continue_run(run_id)
        other = write_file_input("shared.txt", "another content\n")
        try:
            step = b.settle(run_id, "call-1", ran(0), tool="write_file", input=other)
        except LedgerProtocolError as error:
            self.assertEqual(error.code, LedgerProtocolError.INVALID_PARAMS)
        else:
            self.assertNotEqual(step.status, "RAN", step.raw)

    def test_close_shuts_the_server_down(self) -> None:
        ledger = self.open_ledger()
        self.begin(ledger)
        self.assertEqual(ledger.close(), 0)
        self.assertEqual(ledger.close(), 0)


class Errors(LedgerTestCase):
    def test_a_run_this_server_did_not_begin_is_error_32001(self) -> None:
        ledger = self.open_ledger()
        with self.assertRaises(LedgerProtocolError) as raised:
            ledger.claim("no-such-run", "call-1", "write_file", write_file_input("a.txt", "a"))
        self.assertEqual(raised.exception.code, LedgerProtocolError.UNKNOWN_RUN)

    def test_an_unknown_method_is_error_32601(self) -> None:
        ledger = self.open_ledger()
        tap = self.taps[-1]
        with self.assertRaises(LedgerProtocolError) as raised:
            ledger.start("no/such/method", {}).result(timeout=10)
        self.assertEqual(raised.exception.code, LedgerProtocolError.METHOD_NOT_FOUND)
        # The request itself is outside the schema on purpose: forget its violation.
        tap.violations = [v for v in tap.violations if "no/such/method" not in v]

    def test_continuing_a_run_the_data_dir_does_not_have_is_an_answer(self) -> None:
        ledger = self.open_ledger()
        continued = ledger.continue_run("run-that-never-was")
        self.assertIsNone(continued.run)
        self.assertTrue(continued.reason)


class RunningYourOwnTools(LedgerTestCase):
    def test_effect_settles_on_leaving_the_block(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        call = write_file_input("ok.txt", "ok\n")
        with ledger.effect(run_id, "good", "write_file", call) as effect:
            self.assertEqual(effect.claim.status, "run")
            (self.root / "ok.txt").write_text(call["content"])
        assert effect.settled is not None and effect.settled.outcome is not None
        self.assertEqual(effect.settled.outcome.execution, "REPORTED_SUCCESS")

        with self.assertRaises(RuntimeError):
            with ledger.effect(run_id, "bad", "write_file", write_file_input("bad.txt", "bad\n")):
                raise RuntimeError("the backend broke")
        records = self.log_records(run_id)
        bad_claim = next(r for r in records if r["kind"] == "claim"
                         and r["record"]["claim"]["operation"]["request_id"] == "bad")
        outcome = next(r for r in records if r["kind"] == "outcome" and r["claim"] == bad_claim["position"])
        self.assertEqual(outcome["execution"], "FAILED", outcome)

    def test_run_tool_calls_the_function_only_under_a_claim(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        call = write_file_input("tool.txt", "tool\n")
        outcome = ledger.run_tool(run_id, "t", "write_file", call, lambda: (self.root / "tool.txt").write_text("tool\n"))
        self.assertTrue(outcome.ran)
        self.assertEqual(outcome.value, 5)
        assert outcome.settled is not None
        self.assertEqual(outcome.settled.status, "RAN")
        self.assertEqual(ledger.complete(run_id, "Done.", ["tool.txt"]).verdict, "COMPLETED")

    def test_annotate_and_a_stale_decision(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        ledger.run_tool(run_id, "t", "write_file", write_file_input("a.txt", "a\n"),
                        lambda: (self.root / "a.txt").write_text("a\n"))
        ledger.complete(run_id, "Done.", ["a.txt"])
        ledger.claim(run_id, "later", "write_file", write_file_input("b.txt", "b\n"))
        last = ledger.decision(run_id)
        self.assertTrue(last.stale, last.raw)
        annotated = ledger.annotate(run_id, "Here is what I did.")
        self.assertIn(annotated.verdict, {"COMPLETED", "FAILED", "BLOCKED", "UNVERIFIED"})
        self.assertIn("Here is what I did.", annotated.answer)

    def test_calls_from_many_threads(self) -> None:
        ledger = self.open_ledger()
        run_id = self.begin(ledger)
        answers: dict[int, str] = {}

        def claim(i: int) -> None:
            answers[i] = ledger.claim(run_id, f"call-{i}", "write_file", write_file_input(f"f{i}.txt", "x")).status

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        self.assertEqual(answers, {i: "run" for i in range(8)})


if __name__ == "__main__":
    unittest.main()
