"""A running bash command's output reaches the log as coalesced tool.update events."""

from __future__ import annotations

from schemas.events import Event, ToolCall, ToolResult, ToolUpdate
from services.pool.live import MAX_EVENT_CHARS
from services.pool.toolbox import MAX_OUTPUT_CHARS
from tests.integration.pool.harness import Harness


def _per_call(events: list[Event]) -> dict[str, list[Event]]:
    out: dict[str, list[Event]] = {}
    for e in events:
        if isinstance(e.data, ToolCall | ToolUpdate | ToolResult):
            out.setdefault(e.data.call_id, []).append(e)
    return out


async def test_bash_output_streams_into_tool_updates_before_its_result(
    e2e: Harness,
) -> None:
    await e2e.pool(approval="auto")
    sid = await e2e.session()
    # The command prints over ~1 s (its own pace in the sandbox), then a lot.
    slow = "for i in $(seq 1 20); do echo line $i; sleep 0.05; done"
    _, turn = await e2e.script(
        sid,
        {"tool": "bash", "args": {"command": slow}},
        {"tool": "bash", "args": {"command": "seq 1 200000"}},
        {"say": "done"},
    )
    assert (await e2e.ended(sid, turn, timeout=60)).data.stop_reason == "end_turn"
    events = await e2e.events(sid)
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs)
    calls = list(_per_call(events).values())
    assert len(calls) == 2

    first = calls[0]
    result = first[-1].data
    assert isinstance(result, ToolResult)
    assert result.output == "".join(f"line {i}\n" for i in range(1, 21))
    live = [e for e in first if isinstance(e.data, ToolUpdate)]
    assert live[0].data.stream == "status"
    text = [e.data.text for e in live if e.data.stream == "stdout"]
    assert 2 <= len(text) <= 20  # coalesced: ~10 events/s
    assert result.output.startswith("".join(text))
    assert all(e.seq < first[-1].seq for e in live)

    big = calls[1]
    updates = [e.data for e in big if isinstance(e.data, ToolUpdate)]
    streamed = "".join(u.text for u in updates if u.stream == "stdout")
    assert len(streamed) == MAX_OUTPUT_CHARS  # bounded like what the model sees
    assert all(len(u.text) <= MAX_EVENT_CHARS for u in updates)
    assert "".join(f"{i}\n" for i in range(1, 200_001)).startswith(streamed)
    final = big[-1].data
    assert isinstance(final, ToolResult)
    assert final.truncated
