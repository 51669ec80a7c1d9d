"""EnvdClient filesystem and /files contract against the real sandbox host."""

from __future__ import annotations

from typing import Any

import pytest

from services.envd import (
    EnvdAuthError,
    EnvdClient,
    EnvdInvalidArgument,
    EnvdNotFound,
    EnvdTimeout,
    EnvdUnavailable,
)
from tests.contract.envd.sandboxes import SandboxRef


async def test_health_answers_true_for_a_live_sandbox(client: EnvdClient) -> None:
    assert await client.health() is True


async def test_health_answers_false_when_nothing_listens() -> None:
    async with EnvdClient("http://127.0.0.1:9", "nope", None, request_timeout_s=2) as c:
        assert await c.health() is False


async def test_binary_bytes_round_trip_exactly_in_one_request_each(
    client: EnvdClient, wdir: str
) -> None:
    data = bytes(range(256)) * 300 + "é漢😀".encode()
    await client.write_bytes(f"{wdir}/deep/er/blob.bin", data)
    assert client.round_trips == 1
    assert await client.read_bytes(f"{wdir}/deep/er/blob.bin") == data
    assert client.round_trips == 2


async def test_paths_with_spaces_plus_and_unicode_survive_the_query_string(
    client: EnvdClient, wdir: str
) -> None:
    path = f"{wdir}/a b+c&d=é.txt"
    await client.write_bytes(path, b"odd")
    assert await client.read_bytes(path) == b"odd"
    assert (await client.stat(path)).name == "a b+c&d=é.txt"


async def test_reading_a_missing_file_raises_not_found(
    client: EnvdClient, wdir: str
) -> None:
    with pytest.raises(EnvdNotFound):
        await client.read_bytes(f"{wdir}/missing.txt")


async def test_reading_a_directory_raises_invalid_argument(
    client: EnvdClient, wdir: str
) -> None:
    await client.make_dir(wdir)
    with pytest.raises(EnvdInvalidArgument):
        await client.read_bytes(wdir)


async def test_stat_reports_kind_size_and_symlink_target(
    client: EnvdClient, wdir: str
) -> None:
    await client.write_bytes(f"{wdir}/f.txt", b"12345")
    await client.run(f"ln -s {wdir}/f.txt {wdir}/link")
    entry = await client.stat(f"{wdir}/f.txt")
    link = await client.stat(f"{wdir}/link")
    assert (entry.kind, entry.size_bytes, entry.is_symlink) == ("file", 5, False)
    assert link.is_symlink
    assert link.symlink_target == f"{wdir}/f.txt"
    with pytest.raises(EnvdNotFound):
        await client.stat(f"{wdir}/nope")


async def test_list_dir_honours_depth(client: EnvdClient, wdir: str) -> None:
    await client.write_bytes(f"{wdir}/a/b/c.txt", b"x")
    await client.write_bytes(f"{wdir}/top.txt", b"x")
    shallow = {e.name for e in await client.list_dir(wdir)}
    deep = {e.path for e in await client.list_dir(wdir, depth=3)}
    assert shallow == {"a", "top.txt"}
    assert f"{wdir}/a/b/c.txt" in deep


async def test_make_dir_reports_whether_it_created(
    client: EnvdClient, wdir: str
) -> None:
    assert await client.make_dir(f"{wdir}/x/y") is True
    assert await client.make_dir(f"{wdir}/x/y") is False
    assert (await client.stat(f"{wdir}/x/y")).kind == "dir"


async def test_move_renames_and_creates_destination_parents(
    client: EnvdClient, wdir: str
) -> None:
    await client.write_bytes(f"{wdir}/src.txt", b"moved")
    entry = await client.move(f"{wdir}/src.txt", f"{wdir}/new/dst.txt")
    assert entry.path == f"{wdir}/new/dst.txt"
    assert await client.read_bytes(f"{wdir}/new/dst.txt") == b"moved"
    with pytest.raises(EnvdNotFound):
        await client.move(f"{wdir}/src.txt", f"{wdir}/again.txt")


async def test_remove_deletes_trees_and_ignores_missing_paths(
    client: EnvdClient, wdir: str
) -> None:
    await client.write_bytes(f"{wdir}/t/f.txt", b"x")
    await client.remove(f"{wdir}/t")
    await client.remove(f"{wdir}/t")
    with pytest.raises(EnvdNotFound):
        await client.stat(f"{wdir}/t")


async def test_a_wrong_access_token_is_refused_as_auth_error(box: SandboxRef) -> None:
    if not box.access_token:
        pytest.skip("sandbox host issued no access token")
    async with EnvdClient(box.url, box.sandbox_id, "wrong-token") as c:
        with pytest.raises(EnvdAuthError):
            await c.stat("/workspace")


async def test_an_unknown_sandbox_id_is_not_served(box: SandboxRef) -> None:
    async with EnvdClient(box.url, "no-such-sandbox", box.access_token) as c:
        assert await c.health() is False
        with pytest.raises((EnvdUnavailable, EnvdNotFound)):
            await c.stat("/workspace")


async def test_a_request_slower_than_the_request_timeout_raises_envd_timeout(
    box: SandboxRef, sandboxhost: Any
) -> None:
    sandboxhost.set_faults(delay_ms={"envd": 1500})
    try:
        async with EnvdClient(
            box.url, box.sandbox_id, box.access_token, request_timeout_s=0.3
        ) as c:
            with pytest.raises(EnvdTimeout) as caught:
                await c.stat("/workspace")
    finally:
        sandboxhost.set_faults(delay_ms={"envd": 0})
    assert caught.value.timeout_s == 0.3
