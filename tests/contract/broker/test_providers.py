"""Provider conformance: every provider behaves the same behind ``Provider``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from services.broker.errors import ProviderError, SandboxNotFoundError
from services.broker.providers import Provider, make_provider
from services.envd import EnvdAuthError, EnvdClient
from tests.contract.broker.support import settings


def _meta() -> dict[str, str]:
    return {"agentbus_prefix": "conf" + uuid.uuid4().hex[:8], "agentbus_session": "s"}


async def test_create_reaches_envd_and_lists_with_metadata(provider: Provider) -> None:
    meta = _meta()
    conn = await provider.create(meta, uuid.uuid4().hex)
    try:
        async with EnvdClient(conn.envd_url, conn.sandbox_id, conn.access_token) as c:
            await c.write_bytes("/workspace/a.txt", b"A")
            assert await c.read_bytes("/workspace/a.txt") == b"A"
        info = await provider.describe(conn.sandbox_id)
        assert info is not None
        assert info.state == "running"
        listed = {s.sandbox_id: s for s in await provider.list()}
        assert (
            listed[conn.sandbox_id].metadata["agentbus_prefix"]
            == meta["agentbus_prefix"]
        )
    finally:
        await provider.kill(conn.sandbox_id)


async def test_the_same_create_key_twice_gives_one_sandbox(provider: Provider) -> None:
    key = uuid.uuid4().hex
    first = await provider.create(_meta(), key)
    second = await provider.create(_meta(), key)
    await provider.kill(first.sandbox_id)
    assert second.sandbox_id == first.sandbox_id


async def test_pause_then_connect_resumes_with_files_kept(provider: Provider) -> None:
    conn = await provider.create(_meta(), uuid.uuid4().hex)
    try:
        async with EnvdClient(conn.envd_url, conn.sandbox_id, conn.access_token) as c:
            await c.write_bytes("/workspace/keep", b"1")
        await provider.pause(conn.sandbox_id)
        info = await provider.describe(conn.sandbox_id)
        assert info is not None
        assert info.state == "paused"
        again = await provider.connect(conn.sandbox_id)
        assert again.resumed
        running = await provider.connect(conn.sandbox_id)
        assert not running.resumed
        async with EnvdClient(
            again.envd_url, again.sandbox_id, again.access_token
        ) as c:
            assert await c.read_bytes("/workspace/keep") == b"1"
    finally:
        await provider.kill(conn.sandbox_id)


async def test_kill_removes_and_a_missing_sandbox_is_reported(
    provider: Provider,
) -> None:
    conn = await provider.create(_meta(), uuid.uuid4().hex)
    assert await provider.kill(conn.sandbox_id)
    assert await provider.describe(conn.sandbox_id) is None
    assert not await provider.kill(conn.sandbox_id)
    with pytest.raises(SandboxNotFoundError):
        await provider.connect(conn.sandbox_id)
    assert conn.sandbox_id not in {s.sandbox_id for s in await provider.list()}


async def test_an_access_token_reaches_only_its_own_sandbox(provider: Provider) -> None:
    a = await provider.create(_meta(), uuid.uuid4().hex)
    b = await provider.create(_meta(), uuid.uuid4().hex)
    try:
        async with EnvdClient(b.envd_url, b.sandbox_id, a.access_token) as c:
            with pytest.raises(EnvdAuthError):
                await c.read_bytes("/workspace")
    finally:
        await provider.kill(a.sandbox_id)
        await provider.kill(b.sandbox_id)


async def test_ags_requests_with_a_wrong_secret_fail_the_signature_check(
    sandboxhost: Any, fake_ags: Any
) -> None:
    fake, endpoint = fake_ags
    prov = make_provider(settings("ags", sandboxhost, endpoint, ags_secret_key="wrong"))
    with pytest.raises(ProviderError) as info:
        await prov.describe("nope")
    assert "AuthFailure.SignatureFailure" in str(info.value)
    assert not info.value.transient
    assert fake.rejected == 1


async def test_ags_polls_transitional_states_and_reports_token_expiry(
    sandboxhost: Any, fake_ags: Any
) -> None:
    fake, endpoint = fake_ags
    prov = make_provider(settings("ags", sandboxhost, endpoint))
    conn = await prov.create(_meta(), uuid.uuid4().hex)
    try:
        assert conn.token_expires_at > 0
        await prov.pause(conn.sandbox_id)
    finally:
        await prov.kill(conn.sandbox_id)
    starts = fake.calls.index("StartSandboxInstance")
    assert fake.calls[starts + 1 : starts + 3] == [
        "DescribeSandboxInstances",
        "DescribeSandboxInstances",
    ]
