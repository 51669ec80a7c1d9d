"""Pure logic: path containment, workspace scans, manifest diffs, archived symlinks."""

from __future__ import annotations

import pytest

from services.broker.archive import Entry, Layer, Manifest, diff, parse_find
from services.broker.errors import FileApiError
from services.broker.files import lexical, list_archived, resolve_archived
from services.gateway.errors import GatewayError
from services.gateway.files import workspace_path


@pytest.mark.parametrize(
    "bad", ["../x", "a/../../x", "/etc/passwd", "a\x00b", "x" * 5000]
)
def test_lexically_bad_paths_are_refused_by_gateway_and_broker(bad: str) -> None:
    with pytest.raises(GatewayError) as gw:
        workspace_path(bad)
    assert gw.value.code == "path_outside_workspace"
    with pytest.raises(FileApiError) as br:
        lexical(bad)
    assert br.value.code == "path_outside_workspace"


def test_paths_are_normalised_relative_to_the_workspace() -> None:
    assert lexical("./a//b/./c") == "a/b/c"
    assert workspace_path("") == ""


def test_parse_find_reads_nul_separated_records_and_skips_specials() -> None:
    out = (
        b"d\x00755\x004096\x001.5\x00\x00src\x00"
        b"f\x00644\x003\x002.0\x00\x00src/a b.txt\x00"
        b"l\x00777\x007\x003.0\x00a b.txt\x00src/link\x00"
        b"p\x00644\x000\x004.0\x00\x00fifo\x00"
    )
    entries = parse_find(out)
    assert set(entries) == {"src", "src/a b.txt", "src/link"}
    assert entries["src"] == Entry("d", 0o755, 0, "1.5", "")
    assert entries["src/link"].target == "a b.txt"


def test_diff_lists_new_and_changed_entries_only() -> None:
    old = {"a": Entry("f", 0o644, 1, "1", ""), "b": Entry("f", 0o644, 1, "1", "")}
    new = {
        "a": Entry("f", 0o644, 1, "1", "", layer=3),
        "b": Entry("f", 0o600, 1, "1", ""),
        "c": Entry("d", 0o755, 0, "2", ""),
    }
    assert diff(old, new) == ["b", "c"]


def _manifest() -> Manifest:
    entries = {
        "d": Entry("d", 0o755, 0, "0", ""),
        "d/f": Entry("f", 0o644, 2, "0", ""),
        "in": Entry("l", 0o777, 0, "0", "d/f"),
        "abs": Entry("l", 0o777, 0, "0", "/workspace/d"),
        "out": Entry("l", 0o777, 0, "0", "../etc"),
        "etc": Entry("l", 0o777, 0, "0", "/etc"),
        "loop": Entry("l", 0o777, 0, "0", "loop"),
    }
    return Manifest(
        session_id="s", seq=1, layers=[Layer("l1", list(entries))], entries=entries
    )


def test_archived_symlinks_resolve_inside_and_refuse_escapes() -> None:
    m = _manifest()
    assert resolve_archived(m, "in") == "d/f"
    assert resolve_archived(m, "abs/f") == "d/f"
    for bad in ("out", "etc/passwd", "loop"):
        with pytest.raises(FileApiError) as info:
            resolve_archived(m, bad)
        assert info.value.code == "path_outside_workspace"
    with pytest.raises(FileApiError) as missing:
        resolve_archived(m, "d/nope")
    assert missing.value.status == 404


def test_archived_directory_listing_shows_direct_children() -> None:
    names = [(e.name, e.type) for e in list_archived(_manifest(), "d")]
    assert names == [("f", "file")]
