"""The pool against ``llmock`` with every HTTP error and stream fault enabled.

Real sandbox tools run (llmock calls the offered tools with schema-valid
arguments, then answers in text); afterwards ``llmock report --strict`` must
find nothing wrong with how the client treated any injected fault.
"""

from __future__ import annotations

from typing import Any

from tests.integration.pool.harness import Harness
from tests.support.llmock import LLMock

SESSIONS = 4


async def run_sessions(e2e: Harness) -> list[Any]:
    """One turn in each of a few sessions, one after the other.

    In sequence, llmock's seeded draws meet the same requests on every run.
    """
    ended = []
    for i in range(SESSIONS):
        sid = await e2e.session()
        _, turn = await e2e.prompt(sid, f"list the workspace {i}")
        ended.append(await e2e.ended(sid, turn, timeout=90))
    return ended


def chaos_settings(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "pool_workers": 2,
        "model_api_key": "sk-llmock",
        "model_name": "gpt-4o-mini",
        "model_retry_base_s": 0.1,
        "model_max_retries": 8,
        # Well under llmock's 5 s stalls, well over a busy machine's pauses.
        "model_stall_timeout_s": 2.0,
    }
    return {**base, **over}


async def survives(e2e: Harness, llmock: LLMock, **settings: Any) -> None:
    await e2e.pool(**chaos_settings(**settings))
    await llmock.every_stream_fault()
    ended = await run_sessions(e2e)
    assert [e.data.stop_reason for e in ended] == ["end_turn"] * SESSIONS
    assert all(e.data.model for e in ended)
    report = llmock.report("--strict")
    assert report.returncode == 0, report.stdout + report.stderr
    verdict = llmock.verdict()
    assert verdict["passed"] is True
    assert verdict["warnings"] == 0
    assert verdict["faults_injected"] >= 4
    causes: dict[str, int] = {}
    for e in ended:
        for cause, n in e.data.usage.retry_causes.items():
            causes[cause] = causes.get(cause, 0) + n
    assert {"disconnect", "truncated", "malformed", "stall"} <= set(causes)
    # Every stream fault llmock injected was retried under its own cause.
    names = {"truncate": "truncated"}
    injected: dict[str, int] = {}
    for label, n in (await llmock.faults()).items():
        kind, _, detail = label.partition(":")
        if kind == "stream":
            cause = names.get(detail, detail)
            injected[cause] = injected.get(cause, 0) + n
    assert injected == {c: n for c, n in causes.items() if not c.startswith("http")}


async def test_the_pool_survives_llmock_chaos_on_openai_routes(
    e2e: Harness, llmock_chaos: LLMock
) -> None:
    url = f"{llmock_chaos.url}/v1"
    await survives(e2e, llmock_chaos, model="openai", model_base_url=url)


async def test_the_pool_survives_llmock_chaos_on_anthropic_routes(
    e2e: Harness, llmock_chaos: LLMock
) -> None:
    url = f"{llmock_chaos.url}/anthropic"
    await survives(
        e2e,
        llmock_chaos,
        model="anthropic",
        model_base_url=url,
        model_name="claude-sonnet-4-5",
    )
