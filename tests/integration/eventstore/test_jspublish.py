"""The append path's lean JetStream publish, on a real server: what it stores,
and each answer (ack, duplicate, refusal, no stream, timeout) as nats.py's
``js.publish`` gives it — so the log's retry treats both alike."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StreamConfig
from nats.js.errors import BadRequestError, NoStreamResponseError

from eventstore import jspublish
from services.common.natsserver import NatsServerProcess


@pytest.fixture
async def stream(nc: Client, prefix: str) -> str:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=prefix, subjects=[f"{prefix}.>"]))
    return prefix


def _headers(prefix: str, n: int, msg_id: str) -> dict[str, str]:
    return {
        "Nats-Msg-Id": msg_id,
        "Nats-Expected-Last-Subject-Sequence": "0",
        "Nats-Expected-Last-Subject-Sequence-Subject": f"{prefix}.{n}.>",
        "Agentbus-Seq": str(n),
    }


async def test_stores_the_same_message_as_js_publish(nc: Client, stream: str) -> None:
    js = nc.jetstream()
    ours = await jspublish.publish(
        nc, f"{stream}.1.a", b"payload", _headers(stream, 1, "id1"), wait_s=2
    )
    theirs = await js.publish(
        f"{stream}.2.a", b"payload", headers=_headers(stream, 2, "id2")
    )
    assert (ours.stream, ours.seq, ours.duplicate) == (stream, 1, False)
    assert theirs.seq == 2
    mine, ref = await js.get_msg(stream, 1), await js.get_msg(stream, 2)
    assert mine.data == ref.data == b"payload"
    assert mine.headers == {**_headers(stream, 1, "id1")}
    assert ref.headers == {**_headers(stream, 2, "id2")}


async def test_a_repeated_msg_id_is_acked_as_the_duplicate_it_is(
    nc: Client, stream: str
) -> None:
    first = await jspublish.publish(
        nc, f"{stream}.1.a", b"x", {"Nats-Msg-Id": "same"}, wait_s=2
    )
    again = await jspublish.publish(
        nc, f"{stream}.1.a", b"x", {"Nats-Msg-Id": "same"}, wait_s=2
    )
    assert (again.seq, again.duplicate) == (first.seq, True)


async def test_a_taken_seq_is_refused_with_the_servers_error_code(
    nc: Client, stream: str
) -> None:
    await jspublish.publish(nc, f"{stream}.1.a", b"x", _headers(stream, 1, "a"), 2)
    with pytest.raises(BadRequestError) as refused:
        await jspublish.publish(nc, f"{stream}.1.b", b"y", _headers(stream, 1, "b"), 2)
    assert refused.value.err_code == 10071  # wrong last sequence
    assert (await nc.jetstream().stream_info(stream)).state.messages == 1


async def test_no_stream_is_no_stream_response(nc: Client, prefix: str) -> None:
    with pytest.raises(NoStreamResponseError):
        await jspublish.publish(nc, f"{prefix}.nowhere", b"x", {"A": "1"}, wait_s=2)


async def test_an_unanswered_publish_times_out_and_forgets_its_reply(
    nc: Client, prefix: str
) -> None:
    got: list[bytes] = []

    async def silent(msg: Msg) -> None:
        got.append(msg.data)  # a responder that never answers

    await nc.subscribe(f"{prefix}.silent", cb=silent)
    with pytest.raises(nats.errors.TimeoutError):
        await jspublish.publish(nc, f"{prefix}.silent", b"x", {"A": "1"}, 0.2)
    assert got == [b"x"]
    assert nc._resp_map == {}


async def test_frame_breaking_names_and_values_are_refused_before_sending(
    nc: Client, stream: str
) -> None:
    with pytest.raises(ValueError, match="Nats-Msg-Id"):
        await jspublish.publish(
            nc, f"{stream}.1.a", b"x", {"Nats-Msg-Id": "a\r\nPUB x 1"}, 2
        )
    with pytest.raises(ValueError, match="Bad Name"):
        await jspublish.publish(nc, f"{stream}.1.a", b"x", {"Bad Name": "v"}, 2)
    with pytest.raises(nats.errors.BadSubjectError):
        await jspublish.publish(nc, f"{stream}.1 a", b"x", {"A": "1"}, 2)
    assert (await nc.jetstream().stream_info(stream)).state.messages == 0


async def test_a_closed_connection_is_refused_as_nats_py_refuses_it(
    nc: Client, stream: str
) -> None:
    await nc.close()
    with pytest.raises(nats.errors.ConnectionClosedError):
        await jspublish.publish(nc, f"{stream}.1.a", b"x", {"A": "1"}, 2)


async def test_a_publish_made_while_disconnected_goes_out_on_reconnect(
    tmp_path: Path,
) -> None:
    server = NatsServerProcess(tmp_path / "nats")
    await server.astart()
    lost = asyncio.Event()

    async def disconnected() -> None:
        lost.set()

    nc = await nats.connect(
        server.url,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.05,
        disconnected_cb=disconnected,
    )
    try:
        await nc.jetstream().add_stream(StreamConfig(name="S", subjects=["s.>"]))
        server.kill()
        await asyncio.wait_for(lost.wait(), 10)
        assert not nc.is_connected
        sent = asyncio.create_task(
            jspublish.publish(nc, "s.1", b"late", {"Nats-Msg-Id": "m1"}, wait_s=20)
        )
        while not sent.done() and nc._pending_data_size == 0:
            await asyncio.sleep(0)  # a loop turn: the task queues its frame
        assert nc._pending_data_size > 0  # held for later
        assert not nc.is_connected
        await server.astart()
        ack = await asyncio.wait_for(sent, 25)
        assert (ack.stream, ack.seq) == ("S", 1)
        assert (await nc.jetstream().get_msg("S", 1)).data == b"late"
    finally:
        await nc.close()
        server.stop()
