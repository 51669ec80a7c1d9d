"""Pure pieces of the parity work: list filters, recipes, fork counts, link targets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.sandboxhost.control_paging import ListFilter, page
from services.sandboxhost.errors import ControlError
from services.sandboxhost.records import SandboxRecord
from services.sandboxhost.snapshots import check_name, parse_count
from services.sandboxhost.supervisor import link_target
from services.sandboxhost.templates import _write_inside, check_recipe, env_of


def rec(**kw: object) -> SandboxRecord:
    base: dict[str, object] = {
        "sandbox_id": "s1",
        "envd_access_token": "t",
        "started_at": 1000.0,
        "end_at": 2000.0,
    }
    base.update(kw)
    return SandboxRecord(**base)  # type: ignore[arg-type]


def test_list_filter_combines_state_metadata_template_and_start() -> None:
    flt = ListFilter(
        {
            "state": "running,paused",
            "metadata": "a=1&b=2",
            "template": "tpl",
            "startedAfter": "1970-01-01T00:16:40Z",  # 1000 s: inclusive
        },
        set(),
    )
    assert flt.matches(rec(metadata={"a": "1", "b": "2", "c": "3"}, alias="tpl"))
    assert not flt.matches(rec(metadata={"a": "1"}, alias="tpl"))
    assert not flt.matches(rec(metadata={"a": "1", "b": "2"}, alias="other"))
    assert not flt.matches(
        rec(metadata={"a": "1", "b": "2"}, alias="tpl", started_at=999.0)
    )


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"state": "running,gone"}, "state: unknown ['gone']"),
        ({"startedAfter": "yesterday"}, "startedAfter: expected an RFC 3339 time"),
    ],
)
def test_list_filter_rejects_bad_values(query: dict[str, str], message: str) -> None:
    with pytest.raises(ControlError) as caught:
        ListFilter(query, set())
    assert caught.value.status == 400
    assert caught.value.message == message


def test_page_walks_with_next_tokens_and_checks_limit() -> None:
    items, headers = page(list(range(5)), {"limit": "2"})
    assert items == [0, 1]
    items, headers = page(list(range(5)), {"limit": "2", **_next(headers)})
    assert items == [2, 3]
    items, headers = page(list(range(5)), {"limit": "2", **_next(headers)})
    assert items == [4]
    assert "x-next-token" not in headers
    with pytest.raises(ControlError, match="limit"):
        page([1], {"limit": "0"})


def _next(headers: dict[str, str]) -> dict[str, str]:
    return {"nextToken": headers["x-next-token"]}


def test_recipe_validation_names_the_bad_field() -> None:
    ok = {"apt": ["sl"], "pip": ["six==1.17.0"], "files": {"etc/motd": "x"}}
    assert check_recipe("t", ok) == ok
    bad = [
        ({"apt": ["-oDebug=1"]}, "apt must be package names"),
        ({"pip": "six"}, "pip must be package names"),
        ({"files": {"/etc/passwd": "x"}}, "bad file path '/etc/passwd'"),
        ({"files": {"a/../../b": "x"}}, "bad file path 'a/../../b'"),
        ({"run": ["rm -rf /"]}, "unknown keys ['run']"),
    ]
    for recipe, message in bad:
        with pytest.raises(ControlError) as caught:
            check_recipe("t", recipe)
        assert message in caught.value.message


def test_template_env_lists_only_what_the_layer_has(tmp_path: Path) -> None:
    (tmp_path / "python" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "games").mkdir(parents=True)
    env = env_of(tmp_path, "/agentbus/template", "/usr/bin")
    assert env["PATH"] == (
        "/agentbus/template/python/bin:/agentbus/template/usr/games:/usr/bin"
    )
    assert env["PYTHONPATH"] == "/agentbus/template/python"
    assert "LD_LIBRARY_PATH" not in env


def test_fork_count_and_snapshot_name_checks() -> None:
    assert parse_count(None) == 1
    assert parse_count(3) == 3
    for bad in (0, 21, "2", True):
        with pytest.raises(ControlError):
            parse_count(bad)
    assert check_name(None) is None
    with pytest.raises(ControlError):
        check_name("")
    with pytest.raises(ControlError):
        check_name("bad\nname")


def test_link_target_is_absolute_resolved_and_mapped_back(tmp_path: Path) -> None:
    real_root = tmp_path / "fs" / "workspace"
    (real_root / "dir").mkdir(parents=True)
    (real_root / "dir" / "t.txt").write_text("t")
    os.symlink("dir/t.txt", real_root / "link")
    os.symlink("link", real_root / "chain")
    real = str(real_root / "chain")
    assert link_target(real, real) == str(real_root / "dir" / "t.txt")
    # Unisolated: /workspace maps onto real_root; the answer names /workspace.
    assert link_target(real, "/workspace/chain") == "/workspace/dir/t.txt"


def test_recipe_files_never_go_through_a_packaged_symlink(tmp_path: Path) -> None:
    layer = tmp_path / "layer"
    (layer / "etc").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, layer / "etc" / "link-dir")
    os.symlink(outside / "f", layer / "etc" / "link-file")
    for rel in ("etc/link-dir/x", "etc/link-dir/sub/x", "etc/link-file"):
        with pytest.raises(OSError, match="would leave the template layer"):
            _write_inside(layer, rel, "x")
    assert list(outside.iterdir()) == []
    _write_inside(layer, "etc/motd", "ok")
    assert (layer / "etc" / "motd").read_text() == "ok"
