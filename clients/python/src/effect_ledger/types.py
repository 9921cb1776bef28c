"""The results of `effects serve`'s methods (docs/serve.md), as small typed
dataclasses.

Each result keeps the answer it was read from in `raw`, so a key this
client does not name yet is still there. Reading is tolerant (a missing key
reads as its empty value); checking the wire against the schema is the
tests' job, not the client's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

JsonObject = dict[str, Any]
"""A JSON object, as a tool's `input` is."""

ClaimStatus = Literal["run", "refused", "blocked"]
StepStatus = Literal["RAN", "REFUSED", "BLOCKED", "NOT_RECORDED"]
Verdict = Literal["COMPLETED", "FAILED", "BLOCKED", "UNVERIFIED"]


class Facts(TypedDict, total=False):
    """What the runtime reports about a tool it ran (`effect/settle`)."""

    executed: bool
    exit_code: int | None
    timed_out: bool
    cancelled: bool


class Progress(TypedDict, total=False):
    """The params of a `notifications/progress` notification."""

    progressToken: str | int
    progress: float
    message: str | None


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _object(value: Any) -> JsonObject:
    return dict(value) if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class InitializeResult:
    """What `initialize` answered: the server, its root and data dir, the
    policies, the tool catalogue, the producer profiles and the checks."""

    protocol_version: str
    server: JsonObject
    root: str
    data_dir: str
    policies: list[JsonObject]
    tools: list[JsonObject]
    profiles: list[str]
    checks: list[str]
    raw: JsonObject = field(repr=False)

    @classmethod
    def from_json(cls, raw: JsonObject) -> InitializeResult:
        return cls(
            protocol_version=str(raw.get("protocol_version", "")),
            server=_object(raw.get("server")),
            root=str(raw.get("root", "")),
            data_dir=str(raw.get("data_dir", "")),
            policies=_list(raw.get("policies")),
            tools=_list(raw.get("tools")),
            profiles=_list(raw.get("profiles")),
            checks=_list(raw.get("checks")),
            raw=raw,
        )


@dataclass(frozen=True)
class RunInfo:
    """A run: its id, its lineage (the root run's id) and its parent."""

    id: str
    lineage: str
    parent: str | None

    @classmethod
    def from_json(cls, raw: JsonObject) -> RunInfo:
        return cls(id=str(raw["id"]), lineage=str(raw.get("lineage", raw["id"])), parent=raw.get("parent"))


@dataclass(frozen=True)
class RunResult:
    """The answer of `run/begin` and `run/continue`: the run, or (a domain
    answer, not an error) `run` None and why it could not be had."""

    run: RunInfo | None
    reason: str | None
    raw: JsonObject = field(repr=False)

    @classmethod
    def from_json(cls, raw: JsonObject) -> RunResult:
        run = raw.get("run")
        return cls(
            run=RunInfo.from_json(run) if isinstance(run, dict) else None,
            reason=raw.get("reason"),
            raw=raw,
        )


@dataclass(frozen=True)
class ClaimResult:
    """The answer of `effect/claim`. Only `status == "run"` lets the runtime
    run the tool (EMB-1): the claim is durable."""

    status: ClaimStatus
    reason: str | None
    action_id: str | None
    claim: int | None
    """The claim's position in the log; None for an admitted read or no claim."""
    duplicate: bool
    """The claim already stood for this request id; nothing was written (EMB-3)."""
    policy_failure: str | None
    raw: JsonObject = field(repr=False)

    @property
    def may_run(self) -> bool:
        """Whether the runtime may run the tool now."""
        return self.status == "run"

    @classmethod
    def from_json(cls, raw: JsonObject) -> ClaimResult:
        return cls(
            status=raw.get("status", "refused"),
            reason=raw.get("reason"),
            action_id=raw.get("action_id"),
            claim=raw.get("claim"),
            duplicate=bool(raw.get("duplicate", False)),
            policy_failure=raw.get("policy_failure"),
            raw=raw,
        )


@dataclass(frozen=True)
class Outcome:
    """A settled outcome, where the log holds it."""

    position: int | None
    execution: str
    impact: str
    cleanup: str

    @classmethod
    def from_json(cls, raw: JsonObject) -> Outcome:
        return cls(
            position=raw.get("position"),
            execution=str(raw.get("execution", "")),
            impact=str(raw.get("impact", "")),
            cleanup=str(raw.get("cleanup", "")),
        )


@dataclass(frozen=True)
class Observation:
    """One readback, as recorded."""

    position: int
    path: str | None
    mechanism: str
    coverage: str
    exists: bool
    content_sha256: str | None
    job_state: str | None

    @classmethod
    def from_json(cls, raw: JsonObject) -> Observation:
        return cls(
            position=int(raw.get("position", -1)),
            path=raw.get("path"),
            mechanism=str(raw.get("mechanism", "")),
            coverage=str(raw.get("coverage", "")),
            exists=bool(raw.get("exists", False)),
            content_sha256=raw.get("content_sha256"),
            job_state=raw.get("job_state"),
        )


@dataclass(frozen=True)
class Verifier:
    """A check's record, for `check/run`."""

    position: int
    passed: bool

    @classmethod
    def from_json(cls, raw: JsonObject) -> Verifier:
        return cls(position=int(raw.get("position", -1)), passed=bool(raw.get("passed", False)))


@dataclass(frozen=True)
class ToolResult:
    """What the tool answered: `text` or `error` for the agent, and for a
    command its streams, exit code or signal, and whether it was cut."""

    ok: bool
    text: str | None
    error: str | None
    stdout: str | None
    stderr: str | None
    exit_code: int | None
    signal: int | None
    timed_out: bool
    truncated: bool
    survivors: list[int]
    job_id: str | None
    job_state: str | None

    @classmethod
    def from_json(cls, raw: JsonObject) -> ToolResult:
        return cls(
            ok=bool(raw.get("ok", False)),
            text=raw.get("text"),
            error=raw.get("error"),
            stdout=raw.get("stdout"),
            stderr=raw.get("stderr"),
            exit_code=raw.get("exit_code"),
            signal=raw.get("signal"),
            timed_out=bool(raw.get("timed_out", False)),
            truncated=bool(raw.get("truncated", False)),
            survivors=_list(raw.get("survivors")),
            job_id=raw.get("job_id"),
            job_state=raw.get("job_state"),
        )


@dataclass(frozen=True)
class StepResult:
    """A step result: the envelope `effects session --json` prints, the
    answer of `effect/settle`, `effect/execute` and `check/run`."""

    schema_version: int
    run_id: str
    step: int
    request_id: str
    tool: str
    status: StepStatus
    reason: str | None
    action_id: str | None
    claim: int | None
    policy_failure: str | None
    outcome: Outcome | None
    observations: list[Observation]
    launch_settled: int | None
    verifier: Verifier | None
    result: ToolResult
    raw: JsonObject = field(repr=False)
    #: Files read back not holding what the claim said (CONTRADICTED);
    #: ``result.ok`` is then false.
    contradicted: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, raw: JsonObject) -> StepResult:
        outcome = raw.get("outcome")
        verifier = raw.get("verifier")
        return cls(
            schema_version=int(raw.get("schema_version", 0)),
            run_id=str(raw.get("run_id", "")),
            step=int(raw.get("step", 0)),
            request_id=str(raw.get("request_id", "")),
            tool=str(raw.get("tool", "")),
            status=raw.get("status", "NOT_RECORDED"),
            reason=raw.get("reason"),
            action_id=raw.get("action_id"),
            claim=raw.get("claim"),
            policy_failure=raw.get("policy_failure"),
            outcome=Outcome.from_json(outcome) if isinstance(outcome, dict) else None,
            observations=[Observation.from_json(o) for o in _list(raw.get("observations"))],
            launch_settled=raw.get("launch_settled"),
            verifier=Verifier.from_json(verifier) if isinstance(verifier, dict) else None,
            result=ToolResult.from_json(_object(raw.get("result"))),
            raw=raw,
            contradicted=[str(path) for path in _list(raw.get("contradicted"))],
        )


@dataclass(frozen=True)
class Reason:
    """One reason of a decision: its code, the verdict it alone gives, why,
    what would clear it, the evidence it relied on, its disclosure."""

    code: str
    verdict: Verdict
    message: str
    remedy: str | None
    evidence: list[int]
    disclosure: str | None

    @classmethod
    def from_json(cls, raw: JsonObject) -> Reason:
        return cls(
            code=str(raw.get("code", "")),
            verdict=raw.get("verdict", "BLOCKED"),
            message=str(raw.get("message", "")),
            remedy=raw.get("remedy"),
            evidence=_list(raw.get("evidence")),
            disclosure=raw.get("disclosure"),
        )


@dataclass(frozen=True)
class Decision:
    """A completion decision: the verdict, its reasons, the disclosures the
    answer must carry, the assessments, the presented answer (what the agent
    may show) and its position in the log."""

    verdict: Verdict
    reasons: list[Reason]
    disclosures: list[str]
    assessments: list[JsonObject]
    answer: str
    recorded: int | None
    raw: JsonObject = field(repr=False)

    @property
    def completed(self) -> bool:
        """Whether the agent may say it is done."""
        return self.verdict == "COMPLETED"

    @classmethod
    def from_json(cls, raw: JsonObject) -> Decision:
        return cls(
            verdict=raw.get("verdict", "BLOCKED"),
            reasons=[Reason.from_json(r) for r in _list(raw.get("reasons"))],
            disclosures=_list(raw.get("disclosures")),
            assessments=_list(raw.get("assessments")),
            answer=str(raw.get("answer", "")),
            recorded=raw.get("recorded"),
            raw=raw,
        )


@dataclass(frozen=True)
class DecisionResult:
    """The answer of `run/decision`: the last decision this server took for
    the run (or None), and whether something was recorded after it."""

    decision: Decision | None
    stale: bool
    stale_since: int | None
    raw: JsonObject = field(repr=False)

    @classmethod
    def from_json(cls, raw: JsonObject) -> DecisionResult:
        decision = raw.get("decision")
        return cls(
            decision=Decision.from_json(decision) if isinstance(decision, dict) else None,
            stale=bool(raw.get("stale", False)),
            stale_since=raw.get("stale_since"),
            raw=raw,
        )


@dataclass(frozen=True)
class AnnotateResult:
    """The answer of `run/annotate`: a decision over a text, not recorded,
    and the text as it may be shown, with the disclosures it must carry."""

    verdict: Verdict
    disclosures: list[str]
    answer: str
    raw: JsonObject = field(repr=False)

    @classmethod
    def from_json(cls, raw: JsonObject) -> AnnotateResult:
        return cls(
            verdict=raw.get("verdict", "BLOCKED"),
            disclosures=_list(raw.get("disclosures")),
            answer=str(raw.get("answer", "")),
            raw=raw,
        )
