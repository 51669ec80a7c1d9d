"""The notifier's log consumer takes only the event types a device can ask to be
pushed, and an older notifier's durable (every event) is brought to that filter."""

from __future__ import annotations

from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from eventstore.reader import TYPE_HEADER
from eventstore.settings import EventStoreSettings
from schemas.events import AgentMessageDelta, ToolCall, TurnEnded, TurnStarted
from schemas.names import BusNames
from schemas.webhooks import PUSHABLE
from services.notifier.service import join_log
from tests.support.eventstore import open_log


async def test_only_pushable_types_reach_the_router_even_on_an_older_durable(
    nc: Client, prefix: str
) -> None:
    settings = EventStoreSettings(bus_prefix=prefix)
    log = await open_log(nc, settings)
    names, js = BusNames(prefix), nc.jetstream()
    # What an older notifier left: a durable on the whole log.
    await js.add_consumer(
        names.log_stream,
        ConsumerConfig(
            durable_name=names.notifier_durable,
            deliver_policy=DeliverPolicy.NEW,
            ack_policy=AckPolicy.EXPLICIT,
            filter_subject=names.log_all,
        ),
    )
    sub = await join_log(js, names)
    info = await js.consumer_info(names.log_stream, names.notifier_durable)
    assert info.config.filter_subjects is not None
    assert sorted(info.config.filter_subjects) == sorted(
        names.log_type(kind) for kind in PUSHABLE
    )
    for payload in (
        TurnStarted(turn_id="t", prompt_seq=0),
        AgentMessageDelta(turn_id="t", text="hel"),
        ToolCall(turn_id="t", call_id="c", tool="ls", args={}),
        AgentMessageDelta(turn_id="t", text="lo"),
        TurnEnded(turn_id="t", stop_reason="end_turn"),
    ):
        await log.append("s_push", payload, actor="w")
    got = await sub.fetch(10, timeout=2)
    assert [(m.headers or {}).get(TYPE_HEADER) for m in got] == [
        "turn.started",
        "turn.ended",
    ]
    # Another replica (or a restart) joins the same durable as it stands.
    await join_log(js, names)
    after = await js.consumer_info(names.log_stream, names.notifier_durable)
    assert after.config.filter_subjects == info.config.filter_subjects
    assert after.num_ack_pending == 2  # the two deliveries above, not reset
