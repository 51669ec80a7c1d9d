"""Workspace path policy and the per-generation resolution cache."""

from __future__ import annotations

import pytest

from services.envd.errors import PathRefused
from services.envd.paths import PathCache, Resolved, WorkspacePaths, resolved_from_entry
from services.envd.wire import EntryInfo


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("calc/ops.py", "/workspace/calc/ops.py"),
        ("./a/../b", "/workspace/b"),
        (".", "/workspace"),
        ("/workspace/x", "/workspace/x"),
        ("//workspace//x/", "/workspace/x"),
    ],
)
def test_relative_and_inside_paths_resolve_under_workspace(
    given: str, expected: str
) -> None:
    assert WorkspacePaths().absolute(given) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "../etc/passwd",
        "/etc/passwd",
        "/workspace/../etc",
        "~/.ssh/id",
        "a\x00b",
        "/workspacex/y",
        "/home/worker/.config/agentbus/token",
    ],
)
def test_paths_outside_the_workspace_are_refused_lexically(bad: str) -> None:
    with pytest.raises(PathRefused):
        WorkspacePaths().absolute(bad)


def test_read_roots_are_readable_but_not_writable() -> None:
    paths = WorkspacePaths(read_roots=("/tmp/spill",))
    assert paths.absolute("/tmp/spill/1.log") == "/tmp/spill/1.log"
    with pytest.raises(PathRefused):
        paths.absolute("/tmp/spill/1.log", write=True)


def test_relative_display_strips_the_root() -> None:
    paths = WorkspacePaths()
    assert paths.relative("/workspace/a/b") == "a/b"
    assert paths.relative("/workspace") == "."
    assert paths.relative("/tmp/x") == "/tmp/x"


def test_symlink_entry_resolves_to_its_target_relative_or_absolute() -> None:
    absolute = EntryInfo(
        name="l", type="FILE_TYPE_FILE", is_symlink=True, symlink_target="/etc/passwd"
    )
    relative = EntryInfo(
        name="l", type="FILE_TYPE_FILE", is_symlink=True, symlink_target="../x"
    )
    plain = EntryInfo(name="f", type="FILE_TYPE_FILE")
    assert resolved_from_entry("/workspace/l", absolute).real == "/etc/passwd"
    assert resolved_from_entry("/workspace/d/l", relative).real == "/workspace/x"
    assert resolved_from_entry("/workspace/f", plain) == Resolved(
        "/workspace/f", "/workspace/f", "file"
    )


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_cache_hits_within_a_generation_and_clears_when_a_command_begins_or_ends() -> (
    None
):
    cache = PathCache()
    entry = Resolved("/workspace/a", "/workspace/a", "file")
    cache.put(entry)
    assert cache.get("/workspace/a") == entry
    cache.begin_command()
    assert cache.get("/workspace/a") is None
    cache.put(entry)
    cache.end_command()
    assert cache.get("/workspace/a") is None
    assert cache.generation == 2
    assert cache.running == 0


def test_cache_entries_expire_after_ttl_only_while_a_command_runs() -> None:
    clock = _Clock()
    cache = PathCache(running_ttl_s=2.0, clock=clock)
    entry = Resolved("/workspace/a", "/workspace/a", "file")
    cache.put(entry)
    clock.now += 60
    assert cache.get("/workspace/a") == entry  # idle: no TTL
    cache.begin_command()
    cache.put(entry)
    clock.now += 1.5
    assert cache.get("/workspace/a") == entry
    clock.now += 1.0
    assert cache.get("/workspace/a") is None


def test_cached_symlinked_parent_redirects_children() -> None:
    cache = PathCache()
    cache.put(Resolved("/workspace/link", "/etc", "dir"))
    assert cache.ancestor_real("/workspace/link/sub/passwd") == "/etc/sub/passwd"
    assert cache.ancestor_real("/workspace/other/x") is None


def test_forget_drops_a_subtree() -> None:
    cache = PathCache()
    for p in ("/workspace/d", "/workspace/d/x", "/workspace/dx"):
        cache.put(Resolved(p, p, "file"))
    cache.forget("/workspace/d")
    assert [
        cache.get(p) is None
        for p in ("/workspace/d", "/workspace/d/x", "/workspace/dx")
    ] == [True, True, False]
